/* Class runs (grammar_match.c, "Class runs") on real vocabularies (Qwen3's and Llama 3's tokenizers,
 * ../shared/fixtures/tokenizers): GBNF grammars whose states read a character class in a loop or a
 * bounded repetition (ASCII classes, negated ones, classes of multi-byte characters, classes with a
 * few characters left out, a character dead at one count and alive at the next, a rule that ends
 * inside tokens, runs longer than the levels followed), three seeded random generations each; at
 * every step the mask with the shortcuts (class runs, pure text) must equal the plain trie walk's,
 * bit for bit, and the class runs must have been taken in every grammar. Token choice: seeded,
 * among the allowed ids, those holding the grammar's closing byte preferred half of the time, and
 * now and then a token that ends inside a character (so the states after partial UTF-8 are met). */
#include "caldrix.h"
#include "test.h"
#include "text/grammar_int.h"
#include "grammar_vocab.h"

#include <stdlib.h>
#include <string.h>

#define STEPS 24

/* per grammar: its closing byte, whether its states must include a class run (classes of
 * non-ASCII characters only, and a class whose bytes die at one count and live at the next, are
 * walked), and a text whose every prefix is checked too */
static const struct {
    const char *name, *gbnf, *closer;
    bool run;
    const char *text;
    bool cb; /* a state whose first bytes lead into chains must be met (grammar_match.c, chain_bytes) */
} k_grammars[] = {
    { "[a-z]+", "root ::= \"\\\"\" [a-z]+ \"\\\"\"", "\"", true, "\"hello\"", false },
    { "\\w+@\\w+", "root ::= \"\\\"\" [a-zA-Z0-9_]+ \"@\" [a-zA-Z0-9_]+ \"\\\"\"",
      "\"", true, "\"joe_1@example\"", false },
    { "negated, bounded", "root ::= \"\\\"\" [^0-9 \\t\\n\"\\\\]{1,8} \"\\\"\"",
      "\"", true, "\"abc\u00e9\u4e2d!\"", false },
    { "negated with exceptions", "root ::= \"'\" [^'\\u00a0\\u2028\\u2029\\ufeff]* \"'\"",
      "'", true, "'caf\u00e9 \u4e2d\u6587 x'", false },
    { "non-ASCII only", "root ::= \"<\" [^\\x00-\\x7F]+ \">\"", ">", false, "<\u00e9\u4e2d\u6587>", false },
    { "Latin-1 letters", "root ::= \"\\\"\" [a-z\\u00e0-\\u00ff]+ \"\\\"\"", "\"", true, "\"caf\u00e9s\"", false },
    { "CJK", "root ::= \"[\" [\\u4e00-\\u9fa5]{1,6} \"]\"", "]", false, "[\u4e2d\u6587]", false },
    { "dead at one count, alive at the next (ASCII)", "root ::= \"\\\"\" [^a\"] [^b\"]* \"\\\"\"",
      "\"", false, "\"bxa\"", false },
    { "dead at one count, alive at the next (UTF-8)",
      "root ::= \"\\\"\" [^\\u00e9\"] [^\\u00fc\"]* \"\\\"\"", "\"", true, "\"\u00fccaf\u00e9\"", false },
    { "unanchored", "root ::= \"\\\"\" [^\"\\\\]* \"a\" [^\"\\\\]* \"\\\"\"", "\"", true, "\"xyz a b\"", false },
    { "rule ends inside tokens", "root ::= w (\",\" w)* \";\"\nw ::= [a-z]+ \".\"", ";", true, "ab.,cd.;", false },
    { "two classes", "root ::= [a-z]{2,5} [0-9]{1,3} \"!\"", "!", true, "abc12!", false },
    { "longer than the levels", "root ::= \"'\" [^']{0,40} \"'\"",
      "'", true, "'this text is longer than 32 chars'", false },
    { "hex", "root ::= \"#\" [0-9a-fA-F]{6} \"#\"", "#", false, "#a0b1c2#", false },
    { "email-like", "root ::= \"\\\"\" [a-zA-Z0-9.!#$%&'*+/=?^_`{|}~-]+ \"@\" [a-zA-Z0-9-]+ (\".\" [a-zA-Z0-9-]+)+ \"\\\"\"",
      "\"", true, "\"john.doe@mail.example.com\"", false },
    /* states that read letters try a class run before any walk (gr_class_likely): one whose run
     * fails (the class changes at each count) is walked whole; one letter before a literal; a class
     * of letters after the one byte that lives first (a domain's '.') */
    { "changes at each count", "root ::= \"\\\"\" ([A-Z] [a-z]{1,3} \" \"?){1,3} \"\\\"\"",
      "\"", false, "\"Ab Cde Fghi\"", false },
    { "x..y", "root ::= \"\\\"\" [^\"\\\\]* \"x\" [^\"\\\\] [^\"\\\\] \"y\" [^\"\\\\]* \"\\\"\"",
      "\"", false, "\"a x12y b\"", false },
    { "one letter, then a literal", "root ::= [a-zA-Z] \"=\" [0-9]+ \";\"", ";", false, "k=12;", false },
    { "letters after a dot", "root ::= \"x\" (\".\" [a-z]+)+ \";\"", ";", true, "x.ab.cd;", false },
    /* the words of a stream ('.', '_', '(': the byte, then dense ASCII bytes) by bit sets: a run of
     * at most 3 characters after the byte, words holding a group off that run (walked: ".ab12"), a
     * run whose levels alternate, what follows the byte is no run (the words are walked), '_' and '('
     * words, a class wider than the run after the byte (".writeValue": walked), a rule that ends
     * after it, a byte dead at first and alive later; a class of that byte alone, of up to two; a
     * class that holds the byte (its words taken whole from the bit set) */
    { "words of at most 3 letters", "root ::= \"x\" (\".\" [a-z]{1,3})+ \";\"", ";", true, "x.ab.cde;", false },
    { "a run after the dot that is none", "root ::= \"x\" (\".\" [a-z] [a-f]*)+ \";\"", ";", true, "x.ab.cfe;", false },
    { "words of pairs", "root ::= \"x\" (\".\" ([a-z] [a-z])+)+ \";\"", ";", true, "x.abcd.ef;", false },
    { "snake case", "root ::= \"\\\"\" [a-z]+ (\"_\" [a-z]+)* \"\\\"\"", "\"", true, "\"max_new_tokens\"", false },
    { "calls", "root ::= [a-z]+ (\"(\" [a-z]+ \")\")+ \";\"", ";", true, "f(x)(yz);", false },
    { "a class wider than the run after its dot", "root ::= \"x\" [a-zA-Z]* (\".\" [a-z]+ [a-zA-Z]*)+ \";\"", ";", true,
      "xaB.bcDe.d;", false },
    { "a rule that ends after the dot", "root ::= w+ \";\"\nw ::= [a-z]+ \".\"", ";", true, "ab.cd.;", false },
    { "one or two dots", "root ::= \"x\" (\".\" \".\"? [a-z]+)+ \";\"", ";", true, "x..ab.c;", false },
    { "identifiers", "root ::= \"\\\"\" [a-z_]+ \"\\\"\"", "\"", true, "\"max_new_tokens\"", false },
    { "a dot dead first, alive later", "root ::= \"\\\"\" [a-z] [a-z.]* \"\\\"\"", "\"", true, "\"a.b.c\"", false },
    /* first bytes into chains (chain_bytes): a string's escape (its letters lead back to the string's
     * characters, most bytes die), the string a rule called from another (not built inline: it
     * calls one) that ends inside tokens (`/",`); escapes inside a bounded string (chains of 6
     * levels down to none: the short ones walked); a chain longer than the pure sets' rows (PURE_ECAP; both vocabularies have a token of 91 spaces); a state whose
     * first bytes lead into a chain, into a class, or into a chain too short to take */
    { "a string's escape",
      "root ::= s (\",\" s)* \";\"\ns ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1F] | \"\\\\\" e )* \"\\\"\"\n"
      "e ::= [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}",
      ";", false, "\"a\\nb\\u00e9\\\"c\",\"x\\t\";", true },
    { "escapes in a bounded string", "root ::= \"\\\"\" c{0,6} \"\\\"\"\nc ::= [^\"\\\\] | \"\\\\\" [\"\\\\nt]", "\"", false,
      "\"\\nab\\tc\"", true },
    { "an escape into 90 characters", "root ::= \"\\\"\" ( \"\\\\\" [ /=*-] )? [^\"\\\\]{0,90} \"\\\"\"", "\"", false,
      "\"\\ ab c\"", true },
    { "first bytes into a chain, a class, a short chain",
      "root ::= \"<\" ( \"a\" [^\"\\\\]* \"\\\"\" | \"b\" [0-9]+ \";\" | \"c\" [^\"\\\\]{0,2} \"\\\"\" ) \">\"", ">", false,
      "<ahello\">", true },
    /* two states of one automaton but a final flag (the vocabulary's memo keeps the first one's
     * sets; the second must not take them): w may end after its '.', then must not */
    { "memo: a rule that may end after its dot", "root ::= w \";\" w \";\"\nw ::= [a-z]+ \".\" \"!\"? z\nz ::= \"\"", ";",
      false, "ab.;cd.!;", false },
    { "memo: the same rule that may not", "root ::= w \";\" w \";\"\nw ::= [a-z]+ \".\" \"!\" z\nz ::= \"\"", ";", false,
      "ab.!;cd.!;", false },
};
#define N_GRAMMARS ((int)(sizeof k_grammars / sizeof *k_grammars))

static vocab g_v[2];
static int g_steps;

static void run_vocab(const vocab *w)
{
    const size_t nw = (size_t)(w->nv + 31) / 32;
    uint32_t *a = malloc(nw * 4), *b = malloc(nw * 4);
    int32_t *cand = malloc((size_t)w->nv * sizeof *cand), *pref = malloc((size_t)w->nv * sizeof *pref);
    int diffs = 0;
    for (int gi = 0; gi < N_GRAMMARS; gi++) {
        cdx_err err = { 0 };
        cdx_grammar *g = NULL;
        CHECKF(cdx_grammar_from_gbnf(k_grammars[gi].gbnf, strlen(k_grammars[gi].gbnf), k_grammars[gi].name, &g, &err) == 0, "%s: %s",
               k_grammars[gi].name, err.msg);
        if (!g)
            continue;
        /* every prefix of the text */
        {
            cdx_matcher *mon = NULL, *moff = NULL;
            CHECK(cdx_matcher_create(g, w->on, &mon, &err) == 0 && cdx_matcher_create(g, w->off, &moff, &err) == 0);
            const char *tx = k_grammars[gi].text;
            for (size_t i = 0; mon && moff && i <= strlen(tx); i++) {
                const int64_t ka = cdx_matcher_mask(mon, a, &err), kb = cdx_matcher_mask(moff, b, &err);
                g_steps++;
                if ((ka != kb || memcmp(a, b, nw * 4)) && diffs++ < 5)
                    printf("# %s, %s, after %zu bytes of its text: %lld allowed with the shortcuts, %lld by the trie "
                           "walk\n", w->name, k_grammars[gi].name, i, (long long)ka, (long long)kb);
                if (i < strlen(tx) && (cdx_matcher_accept_bytes(mon, tx + i, 1, &err) ||
                                       cdx_matcher_accept_bytes(moff, tx + i, 1, &err))) {
                    CHECKF(false, "%s: its text is refused at byte %zu: %s", k_grammars[gi].name, i, err.msg);
                    break;
                }
            }
            cdx_matcher_free(mon);
            cdx_matcher_free(moff);
        }
        for (int gen = 0; gen < 3; gen++) {
            cdx_matcher *mon = NULL, *moff = NULL;
            CHECK(cdx_matcher_create(g, w->on, &mon, &err) == 0 && cdx_matcher_create(g, w->off, &moff, &err) == 0);
            rng = 0x9E3779B97F4A7C15ull * (uint64_t)(gi + 1) + (uint64_t)gen * 7919 + (uint64_t)w->nv;
            for (int step = 0; step < STEPS && mon && moff; step++) {
                const int64_t ka = cdx_matcher_mask(mon, a, &err), kb = cdx_matcher_mask(moff, b, &err);
                g_steps++;
                if (ka != kb || memcmp(a, b, nw * 4)) {
                    const int64_t first = first_difference(a, b, w->nv);
                    if (diffs++ < 5)
                        printf("# %s, %s, gen %d, step %d: %lld allowed with the shortcuts, %lld by the trie walk; "
                               "first difference: id %lld (%.*s), %s\n", w->name, k_grammars[gi].name, gen, step,
                               (long long)ka, (long long)kb, (long long)first, first >= 0 ? w->len[first] : 0,
                               first >= 0 ? w->piece[first] : "", first >= 0 && has(a, first) ? "allowed" : "refused");
                }
                /* the next token: now and then one ending inside a character, else one holding the
                 * closer half of the time */
                int nc = 0, np = 0;
                const int mode = (int)(xr() % 4);
                for (int64_t i = 0; i < w->nv; i++)
                    if (has(a, i) && w->piece[i]) {
                        cand[nc++] = (int32_t)i;
                        if ((mode == 0 && w->partial[i]) ||
                            (mode >= 2 && memchr(w->piece[i], k_grammars[gi].closer[0], (size_t)w->len[i])))
                            pref[np++] = (int32_t)i;
                    }
                if (!nc)
                    break;
                const int32_t t = np ? pref[xr() % (uint64_t)np] : cand[xr() % (uint64_t)nc];
                if (cdx_matcher_accept(mon, t, &err) || cdx_matcher_accept(moff, t, &err)) {
                    CHECKF(false, "%s, %s: an allowed token %d was refused: %s", w->name, k_grammars[gi].name, t, err.msg);
                    break;
                }
            }
            cdx_matcher_free(mon);
            cdx_matcher_free(moff);
        }
        if (k_grammars[gi].run)
            CHECKF(gr_class_run_states(g, w->on) > 0, "%s, %s: no state was a class run", w->name, k_grammars[gi].name);
        if (k_grammars[gi].cb)
            CHECKF(gr_shortcut_states(g, w->on, 1) > 0, "%s, %s: no state took its first bytes into chains", w->name,
                   k_grammars[gi].name);
        cdx_grammar_free(g);
    }
    CHECKF(diffs == 0, "%s: %d masks differ with and without the shortcuts", w->name, diffs);
    free(a);
    free(b);
    free(cand);
    free(pref);
}

static void t_qwen3(void) { run_vocab(&g_v[0]); }
static void t_llama3(void) { run_vocab(&g_v[1]); }

int main(void)
{
    if (!vocab_load(&g_v[0], "qwen3") || !vocab_load(&g_v[1], "llama3")) {
        printf("not ok - both tokenizers load\n");
        printf("grammar_class: 0 passed, 1 failed\n");
        return 1;
    }
    RUN("Qwen3's vocabulary: class runs give the trie walk's masks", t_qwen3);
    RUN("Llama 3's vocabulary: the same", t_llama3);
    printf("# %d masks compared over %d grammars\n", g_steps, N_GRAMMARS);
    vocab_unload(&g_v[0]);
    vocab_unload(&g_v[1]);
    return t_done("grammar_class");
}
