/* The grammar engine: GBNF compilation and its errors, and the matcher's masks on byte-level edge
 * cases (tokens spanning several literals, tokens ending mid-UTF-8, whitespace rules). Expected
 * sets are written by hand from the grammar's meaning; a second oracle checks every mask against
 * stepping each token's bytes one by one from the same state (the mask comes from the per-state
 * caches and the trie walk, the oracle from neither). */
#include "caldrix.h"
#include "test.h"

#include <jansson.h>

/* ---- a tiny vocabulary ---- */

static const char *k_pieces[] = {
    "{", "}", "\"", "\":", "\",", "\"}", " ", "\n", "a", "ab", "abc", "true", "tr", "ue", "false",
    ",", ", \"", "1", "12", "0", "-", "x\"", "\xC3", "\xA9", "\xC3\xA9", "\xE2\x82", "\xAC", "\xE2\x82\xAC",
    "é\"", "[", "]", "null", "  ", "\t", "e", "\"a", "b", "c", "=", "aaa", "<eos>",
};
#define NV ((int)(sizeof k_pieces / sizeof *k_pieces))
#define EOS (NV - 1)

static cdx_grammar_vocab *small_vocab(void)
{
    size_t lens[NV];
    const char *p[NV];
    for (int i = 0; i < NV; i++) {
        p[i] = i == EOS ? NULL : k_pieces[i];
        lens[i] = strlen(k_pieces[i]);
    }
    int32_t eos = EOS;
    cdx_grammar_vocab *v = NULL;
    cdx_err err = { 0 };
    if (cdx_grammar_vocab_from_pieces(p, lens, NV, &eos, 1, &v, &err))
        fprintf(stderr, "vocab: %s\n", err.msg);
    return v;
}

static int tok_id(const char *s)
{
    for (int i = 0; i < NV; i++)
        if (!strcmp(k_pieces[i], s))
            return i;
    fprintf(stderr, "no token %s\n", s);
    abort();
}

static cdx_grammar *gbnf(const char *text)
{
    cdx_grammar *g = NULL;
    cdx_err err = { 0 };
    if (cdx_grammar_from_gbnf(text, strlen(text), "t.gbnf", &g, &err))
        fprintf(stderr, "grammar: %s\n", err.msg);
    return g;
}

static bool has(const uint32_t *bits, int id) { return bits[id / 32] >> (id % 32) & 1; }

/* Every mask bit agrees with stepping the token's bytes on a fresh matcher that replays `prefix`. */
static bool mask_matches_oracle(const cdx_grammar *g, const cdx_grammar_vocab *v, const char *prefix,
                                const uint32_t *bits)
{
    bool ok = true;
    cdx_err err = { 0 };
    for (int id = 0; id < NV; id++) {
        cdx_matcher *m = NULL;
        if (cdx_matcher_create(g, v, &m, &err))
            return false;
        bool allowed;
        cdx_matcher_accept_bytes(m, prefix, strlen(prefix), &err);
        if (id == EOS)
            allowed = cdx_matcher_done(m);
        else
            allowed = cdx_matcher_accept_bytes(m, k_pieces[id], strlen(k_pieces[id]), &err) == 0;
        if (allowed != has(bits, id)) {
            fprintf(stderr, "  after \"%s\": token \"%s\": mask %d, stepping %d\n", prefix, k_pieces[id],
                    has(bits, id), allowed);
            ok = false;
        }
        cdx_matcher_free(m);
    }
    return ok;
}

/* Mask after `prefix` (fed as raw bytes) */
static void mask_after(const cdx_grammar *g, const cdx_grammar_vocab *v, const char *prefix, uint32_t *bits)
{
    cdx_matcher *m = NULL;
    cdx_err err = { 0 };
    cdx_matcher_create(g, v, &m, &err);
    if (cdx_matcher_accept_bytes(m, prefix, strlen(prefix), &err))
        fprintf(stderr, "  prefix \"%s\" refused: %s\n", prefix, err.msg);
    cdx_matcher_mask(m, bits, &err);
    cdx_matcher_free(m);
}

static void test_literal_spanning_tokens(void)
{
    cdx_grammar_vocab *v = small_vocab();
    cdx_grammar *g = gbnf("root ::= \"{\" ws \"\\\"a\\\"\" \":\" ws val \"}\"\nws ::= [ ]?\nval ::= \"true\" | \"12\"\n");
    REQUIRE(v && g);
    uint32_t bits[2];
    mask_after(g, v, "", bits);
    CHECK(has(bits, tok_id("{")));
    CHECK(!has(bits, tok_id("}")) && !has(bits, EOS));
    mask_after(g, v, "{", bits);
    /* after "{": " " (ws), "\"" and "\"a" (the literal's first bytes) */
    CHECK(has(bits, tok_id(" ")) && has(bits, tok_id("\"")) && has(bits, tok_id("\"a")));
    CHECK(!has(bits, tok_id("  ")) && !has(bits, tok_id("a")));
    CHECK(mask_matches_oracle(g, v, "{", bits));
    mask_after(g, v, "{\"a", bits);
    /* "\": spans the end of one literal and the next literal */
    CHECK(has(bits, tok_id("\"")) && has(bits, tok_id("\":")));
    CHECK(!has(bits, tok_id("\",")));
    CHECK(mask_matches_oracle(g, v, "{\"a", bits));
    mask_after(g, v, "{\"a\":", bits);
    CHECK(has(bits, tok_id("true")) && has(bits, tok_id("tr")) && has(bits, tok_id("12")) && has(bits, tok_id("1")));
    CHECK(has(bits, tok_id(" ")) && !has(bits, tok_id("ue")));
    CHECK(mask_matches_oracle(g, v, "{\"a\":", bits));
    mask_after(g, v, "{\"a\": tr", bits);
    CHECK(has(bits, tok_id("ue")) && !has(bits, tok_id("true")) && !has(bits, tok_id("e")));
    mask_after(g, v, "{\"a\": true}", bits);
    CHECK(has(bits, EOS));
    CHECK(mask_matches_oracle(g, v, "{\"a\": true}", bits));
    int n = 0;
    for (int i = 0; i < NV; i++)
        n += has(bits, i);
    CHECKF(n == 1, "only the end is allowed once the grammar is complete, got %d", n);
    cdx_grammar_free(g);
    cdx_grammar_vocab_free(v);
}

static void test_partial_utf8(void)
{
    cdx_grammar_vocab *v = small_vocab();
    /* é is C3 A9, € is E2 82 AC: tokens that cut them in the middle must be allowed, and only
     * with a continuation that completes the same code point */
    cdx_grammar *g = gbnf("root ::= [é€]+ \"\\\"\"\n");
    REQUIRE(v && g);
    uint32_t bits[2];
    mask_after(g, v, "", bits);
    CHECK(has(bits, tok_id("\xC3")) && has(bits, tok_id("\xC3\xA9")) && has(bits, tok_id("\xE2\x82")));
    CHECK(has(bits, tok_id("\xE2\x82\xAC")) && !has(bits, tok_id("\xA9")) && !has(bits, tok_id("\xAC")));
    CHECK(has(bits, tok_id("é\""))); /* é then the closing quote: one token, two symbols */
    CHECK(mask_matches_oracle(g, v, "", bits));
    mask_after(g, v, "\xC3", bits);
    CHECK(has(bits, tok_id("\xA9")) && !has(bits, tok_id("\xAC")) && !has(bits, tok_id("\xC3")));
    CHECK(mask_matches_oracle(g, v, "\xC3", bits));
    mask_after(g, v, "\xE2\x82", bits);
    CHECK(has(bits, tok_id("\xAC")) && !has(bits, tok_id("\xA9")));
    /* negated class: any code point but a, as whole UTF-8 */
    cdx_grammar *g2 = gbnf("root ::= [^a]\n");
    REQUIRE(g2);
    mask_after(g2, v, "", bits);
    CHECK(has(bits, tok_id("\xC3")) && has(bits, tok_id("\xC3\xA9")) && has(bits, tok_id("b")));
    CHECK(!has(bits, tok_id("a")) && !has(bits, tok_id("\xA9")) && !has(bits, tok_id("é\"")));
    CHECK(mask_matches_oracle(g2, v, "", bits));
    cdx_grammar_free(g2);
    cdx_grammar_free(g);
    cdx_grammar_vocab_free(v);
}

static void test_whitespace_rules(void)
{
    cdx_grammar_vocab *v = small_vocab();
    /* at most two blanks between items, bounded with {0,2} */
    cdx_grammar *g = gbnf("root ::= \"[\" ws item (\",\" ws item)* ws \"]\"\nws ::= [ \\t\\n]{0,2}\nitem ::= \"1\" | \"null\"\n");
    REQUIRE(v && g);
    uint32_t bits[2];
    mask_after(g, v, "[", bits);
    CHECK(has(bits, tok_id(" ")) && has(bits, tok_id("  ")) && has(bits, tok_id("\t")) && has(bits, tok_id("\n")));
    CHECK(has(bits, tok_id("1")) && has(bits, tok_id("null")) && !has(bits, tok_id("]")));
    CHECK(mask_matches_oracle(g, v, "[", bits));
    mask_after(g, v, "[  ", bits);
    CHECK(!has(bits, tok_id(" ")) && !has(bits, tok_id("\t")) && has(bits, tok_id("1")));
    mask_after(g, v, "[ 1", bits);
    /* ", \"" is a comma and a blank then a quote: the quote cannot start an item */
    CHECK(has(bits, tok_id(",")) && !has(bits, tok_id(", \"")) && has(bits, tok_id("]")) && has(bits, tok_id("  ")));
    CHECK(!has(bits, tok_id("12")));
    CHECK(mask_matches_oracle(g, v, "[ 1", bits));
    mask_after(g, v, "[ 1 ", bits);
    CHECK(has(bits, tok_id(" ")) && !has(bits, tok_id("  ")));
    CHECK(mask_matches_oracle(g, v, "[ 1 ", bits));
    cdx_grammar_free(g);
    cdx_grammar_vocab_free(v);
}

static void test_nested_rules_and_recursion(void)
{
    cdx_grammar_vocab *v = small_vocab();
    /* tokens that end one rule and go on in the caller ("\"}" closes a string and the object) */
    cdx_grammar *g = gbnf("root ::= obj\nobj ::= \"{\" (str \":\" val)? \"}\"\nval ::= obj | str | \"1\"\n"
                          "str ::= \"\\\"\" [abcx]* \"\\\"\"\n");
    REQUIRE(v && g);
    const char *prefixes[] = { "", "{", "{\"", "{\"a", "{\"ab\":", "{\"ab\":{\"x", "{\"ab\":\"a", "{\"a\":{}" };
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
        uint32_t bits[2];
        mask_after(g, v, prefixes[i], bits);
        CHECKF(mask_matches_oracle(g, v, prefixes[i], bits), "prefix %s", prefixes[i]);
    }
    uint32_t bits[2];
    mask_after(g, v, "{\"ab\":\"a", bits);
    CHECK(has(bits, tok_id("\"}")) && has(bits, tok_id("x\"")) && !has(bits, tok_id("\",")));
    mask_after(g, v, "{\"ab\":{\"x", bits);
    CHECK(has(bits, tok_id("\":")) && !has(bits, tok_id("\"}")));
    cdx_grammar_free(g);
    cdx_grammar_vocab_free(v);
}

static void test_matcher_follows_tokens(void)
{
    cdx_grammar_vocab *v = small_vocab();
    cdx_grammar *g = gbnf("root ::= \"a\"+ \"b\"?\n");
    REQUIRE(v && g);
    cdx_matcher *m = NULL;
    cdx_err err = { 0 };
    REQUIRE(cdx_matcher_create(g, v, &m, &err) == 0);
    CHECK(!cdx_matcher_done(m));
    CHECK(cdx_matcher_accept(m, tok_id("aaa"), &err) == 0 && cdx_matcher_done(m));
    CHECK(cdx_matcher_accept(m, tok_id("c"), &err) == CDX_EINVAL);
    CHECK(cdx_matcher_n_bytes(m) == 3); /* a refused token leaves the matcher as it was */
    CHECK(cdx_matcher_accept(m, tok_id("ab"), &err) == 0 && cdx_matcher_done(m) && cdx_matcher_closed(m));
    uint32_t bits[2];
    CHECK(cdx_matcher_mask(m, bits, &err) == 1 && has(bits, EOS));
    cdx_matcher_reset(m);
    CHECK(!cdx_matcher_done(m) && cdx_matcher_n_bytes(m) == 0);
    CHECK(cdx_matcher_mask(m, bits, &err) > 0 && has(bits, tok_id("abc")) == false && has(bits, tok_id("ab")));
    cdx_matcher_free(m);
    cdx_grammar_free(g);
    cdx_grammar_vocab_free(v);
}

/* ---- GBNF syntax and its errors ---- */

static void test_gbnf_syntax(void)
{
    static const char *ok[] = {
        "root ::= \"a\" # comment\n",
        "root ::= (\"a\" |\n  \"b\")\n",
        "root ::= x\n  | y\nx ::= \"x\"\ny ::= \"y\"\n",
        "root ::= [a-z0-9_]{2,5} \"\\x41\\u00e9\\U0001F600\" .\n",
        "root ::= \"a\"{3} \"b\"{2,} \"c\"? [^\\n\\]\\\\]*\n",
        "root ::= item*\nitem ::= \"x\" item | \"y\"\n", /* right recursion is fine */
        "root ::= \"\"\n",
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        cdx_grammar *g = NULL;
        cdx_err err = { 0 };
        int rc = cdx_grammar_from_gbnf(ok[i], strlen(ok[i]), "t", &g, &err);
        CHECKF(rc == 0, "%s: %s", ok[i], err.msg);
        cdx_grammar_free(g);
    }
}

static void test_gbnf_errors(void)
{
    static const struct { const char *text, *msg; } bad[] = {
        { "root ::= (\"a\"\n", "t:1:10: unbalanced '('" },
        { "root ::= \"a\")\n", "unbalanced ')'" },
        { "root ::= foo\n", "t:1:10: undefined rule 'foo'" },
        { "foo ::= \"a\"\n", "no rule named 'root'" },
        { "root ::= \"abc\n", "unclosed string literal" },
        { "root ::= [a-\n", "unclosed character class" },
        { "root ::= [z-a]\n", "reversed" },
        { "root ::= \"a\"{3,2}\n", "maximum is below the minimum" },
        { "root ::= root \"a\" | \"b\"\n", "left recursion (root -> root)" },
        { "root ::= a\na ::= b? a \"x\"\nb ::= \"\"\n", "left recursion (a -> a)" },
        { "root ::= a\na ::= b \"x\"\nb ::= a | \"y\"\n", "left recursion (a -> b -> a)" },
        { "root ::= \"a\"\nroot ::= \"b\"\n", "defined twice" },
        { "root ::= \"\\q\"\n", "unknown escape \\q" },
        { "root ::= \"a\"{999999999}\n", "repetition count over" },
        { "root ::= ( ( \"a\"{1000} ){1000} ){1000}\n", "more than" },
        { "root = \"a\"\n", "expected '::='" },
        { "", "empty" },
        { "root ::= <think>\n", "token references" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cdx_grammar *g = NULL;
        cdx_err err = { 0 };
        int rc = cdx_grammar_from_gbnf(bad[i].text, strlen(bad[i].text), "t", &g, &err);
        CHECKF(rc == CDX_EINVAL && g == NULL && strstr(err.msg, bad[i].msg), "%s: rc %d, message \"%s\", wanted \"%s\"",
               bad[i].text, rc, err.msg, bad[i].msg);
        cdx_grammar_free(g);
    }
}

/* ---- llama.cpp's grammars (tests/text/data/llamacpp-grammars, copied with attribution) ---- */

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = malloc(1 << 20);
    *n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (buf)
        buf[*n] = 0;
    return buf;
}

/* Whether the whole text is a sentence of g. */
static bool accepts(const cdx_grammar *g, const char *text)
{
    cdx_grammar_vocab *v = small_vocab();
    cdx_matcher *m = NULL;
    cdx_err err = { 0 };
    bool ok = v && cdx_matcher_create(g, v, &m, &err) == 0 && cdx_matcher_accept_bytes(m, text, strlen(text), &err) == 0 &&
              cdx_matcher_done(m);
    cdx_matcher_free(m);
    cdx_grammar_vocab_free(v);
    return ok;
}

static void test_llamacpp_grammars(void)
{
    static const struct { const char *file, *yes, *no; } k[] = {
        { "arithmetic", "1+2=3\nx*(y-2)= 4\n", "1+=3\n" },
        { "c", "int main(){return 0;}float f(int x){x = x*2;}", "int main({}" },
        { "chess", "1. e4 e5\n2. Nf3 Nc6\n3. O-O Qxd8+\n", "1. e9 e5\n2. a1 a2\n" },
        { "english", "Hello, world!\nIt's 9 o'clock.", "H\xC3\xA9llo" },
        { "japanese", "\xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF \xE4\xB8\x96\xE7\x95\x8C", "abc" },
        { "json", "{\"a\": [1, 2.5e3, \"x\\n\\u00e9\", true, null], \"b\": {}}", "{\"a\": }" },
        { "json_arr", "[\n1,\n{\"b\": false}]", "{\"a\":1}" },
        { "list", "- one\n- two \xE2\x82\xAC\n", "* one\n" },
    };
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        char path[256];
        snprintf(path, sizeof path, "tests/text/data/llamacpp-grammars/%s.gbnf", k[i].file);
        size_t n = 0;
        char *text = slurp(path, &n);
        CHECKF(text != NULL, "%s missing", path);
        if (!text)
            continue;
        cdx_grammar *g = NULL;
        cdx_err err = { 0 };
        int rc = cdx_grammar_from_gbnf(text, n, path, &g, &err);
        CHECKF(rc == 0, "%s: %s", path, err.msg);
        if (!rc) {
            CHECKF(accepts(g, k[i].yes), "%s refuses \"%s\"", path, k[i].yes);
            CHECKF(!accepts(g, k[i].no), "%s accepts \"%s\"", path, k[i].no);
        }
        cdx_grammar_free(g);
        free(text);
    }
}

/* ---- JSON Schema: what is refused, and how ---- */

static void test_schema_errors(void)
{
    static const struct { const char *schema, *msg; int code; } bad[] = {
        { "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"multipleOf\":3}}}",
          "#/properties/a: keyword \"multipleOf\" is not supported", CDX_EUNSUPPORTED },
        { "{\"type\":\"object\",\"patternProperties\":{\"^x\":{}}}", "#: keyword \"patternProperties\" is not supported",
          CDX_EUNSUPPORTED },
        { "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"uniqueItems\":true}}",
          "#/items: keyword \"uniqueItems\" is not supported", CDX_EUNSUPPORTED },
        { "{\"$ref\":\"#/$defs/missing\"}", "#/$ref: $ref \"#/$defs/missing\" points to nothing", CDX_EINVAL },
        { "{\"$ref\":\"http://example.com/s.json\"}", "only references inside the schema", CDX_EUNSUPPORTED },
        { "{\"type\":\"string\",\"pattern\":\"^(?=a)b$\"}", "#/pattern: pattern \"^(?=a)b$\": lookaround", CDX_EUNSUPPORTED },
        { "{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "backreferences are not supported", CDX_EUNSUPPORTED },
        { "{\"type\":\"string\",\"pattern\":\"a^b\"}", "anchors (^ $) are supported only at the start and the end",
          CDX_EUNSUPPORTED },
        { "{\"type\":\"string\",\"pattern\":\"(ab\"}", "an unbalanced '('", CDX_EUNSUPPORTED },
        { "{\"type\":\"string\",\"maxLength\":5000,\"pattern\":\"^([a-z]+(-[a-z]+)*)$\"}",
          "#: maxLength beside pattern is not supported", CDX_EUNSUPPORTED },
        { "{\"type\":\"string\",\"minLength\":2,\"format\":\"date\"}", "minLength beside format", CDX_EUNSUPPORTED },
        { "{\"type\":\"string\",\"maxLength\":100000}", "maxLength 100000 is over the limit of 10000", CDX_EUNSUPPORTED },
        { "{\"type\":\"array\",\"maxItems\":1000000}", "maxItems 1000000 is over the limit", CDX_EUNSUPPORTED },
        { "{\"type\":\"string\",\"format\":\"ipv4\"}", "format \"ipv4\" is not supported", CDX_EUNSUPPORTED },
        { "{\"type\":\"number\",\"minimum\":0.5}", "minimum on a number is not supported", CDX_EUNSUPPORTED },
        { "{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no integer lies between", CDX_EINVAL },
        { "{\"type\":\"strin\"}", "type \"strin\" is not a JSON Schema type", CDX_EINVAL },
        { "{\"type\":\"object\",\"required\":[\"x\"]}", "required property \"x\" has no schema", CDX_EUNSUPPORTED },
        { "{\"allOf\":[{\"type\":\"string\"}]}", "#/allOf/0: allOf: only object schemas are merged", CDX_EUNSUPPORTED },
        { "{\"type\":\"object\",\"allOf\":[{\"properties\":{\"a\":{}}}],\"additionalProperties\":false}",
          "additionalProperties beside allOf", CDX_EUNSUPPORTED },
        { "{\"minLength\":1,\"minItems\":1}", "keywords of several types", CDX_EUNSUPPORTED },
        { "{\"enum\":[1],\"minimum\":0}", "enum beside other constraints", CDX_EUNSUPPORTED },
        { "false", "the schema false matches nothing", CDX_EUNSUPPORTED },
        { "{\"type\":", "not JSON", CDX_EINVAL },
        { "{\"type\":\"object\",\"properties\":{\"a\":{\"anyOf\":[]}}}", "#/properties/a: anyOf must be a non-empty array",
          CDX_EINVAL },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cdx_grammar *g = NULL;
        cdx_err err = { 0 };
        int rc = cdx_grammar_from_json_schema(bad[i].schema, strlen(bad[i].schema), "s.json", &g, &err);
        CHECKF(rc == bad[i].code && !g && strstr(err.msg, bad[i].msg) && !strncmp(err.msg, "s.json", 6),
               "%s: rc %d, \"%s\", wanted %d \"%s\"", bad[i].schema, rc, err.msg, bad[i].code, bad[i].msg);
        cdx_grammar_free(g);
    }
}

/* llama.cpp #25746 / #16790: big length bounds compile quickly (linear, no blow-up) */
static void test_schema_big_bounds_compile_fast(void)
{
    static const char *const ok[] = {
        "{\"type\":\"string\",\"maxLength\":5000}",
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"minLength\":1000,\"maxLength\":5000},"
        "\"b\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":500},\"maxItems\":100}}}",
        "{\"type\":\"string\",\"pattern\":\"^([a-z]{1,50}-){1,20}[0-9]{1,100}$\"}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        cdx_grammar *g = NULL;
        cdx_err err = { 0 };
        double t0 = cdx_time_ms();
        int rc = cdx_grammar_from_json_schema(ok[i], strlen(ok[i]), "s.json", &g, &err);
        double ms = cdx_time_ms() - t0;
        CHECKF(rc == 0, "%s: %s", ok[i], err.msg);
        CHECKF(ms < 10000, "%s: %.0f ms to compile", ok[i], ms); /* exponential blow-up would take hours */
        cdx_grammar_free(g);
    }
}

/* A schema's grammar accepts what the schema allows and refuses what it does not (texts judged by
 * hand from the schema). */
static void test_schema_languages(void)
{
    static const struct { const char *schema, *yes, *no; } k[] = {
        { "{\"type\":\"integer\",\"minimum\":-20,\"maximum\":150}", "-20", "151" },
        { "{\"type\":\"integer\",\"minimum\":-20,\"maximum\":150}", "150", "-21" },
        { "{\"type\":\"integer\",\"minimum\":-20,\"maximum\":150}", "0", "007" },
        { "{\"type\":\"integer\",\"exclusiveMinimum\":9,\"exclusiveMaximum\":100}", "99", "9" },
        { "{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"\\u00e9\\n\"", "\"abcd\"" },
        { "{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"\xE2\x82\xAC\xE2\x82\xAC\xE2\x82\xAC\"", "\"a\"" },
        { "{\"type\":\"string\",\"pattern\":\"^a[0-9]?$\"}", "\"a7\"", "\"a77\"" },
        { "{\"type\":\"string\",\"pattern\":\"[0-9]\"}", "\"xx5yy\"", "\"xyz\"" },
        { "{\"type\":\"string\",\"pattern\":\"^[\\\"\\\\\\\\]+$\"}", "\"\\\"\\\\\"", "\"a\"" },
        { "{\"type\":\"string\",\"format\":\"date\"}", "\"2024-02-28\"", "\"2024-02-30\"" },
        { "{\"type\":\"string\",\"format\":\"date-time\"}", "\"2024-12-04T15:45:13.5Z\"", "\"2024-12-04 15:45:13Z\"" },
        { "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":{\"type\":\"boolean\"}}",
          "{\"a\": 1, \"b\": true}", "{\"a\": 1, \"a\": true}" },
        { "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"null\"}},\"additionalProperties\":false}",
          "{\"b\":null}", "{,\"b\":null}" },
        { "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"}],\"items\":false}", "[1]", "[1,2]" },
        { "{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":2,\"maxItems\":3}", "[true,false]", "[true]" },
        { "{\"$defs\":{\"n\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"}}},\"$ref\":\"#/$defs/n\"}", "[[],[[]]]", "[[]" },
        { "{\"enum\":[\"a\",{\"k\":[1]},null]}", "{\"k\":[1]}", "{\"k\":[2]}" },
        { "{\"type\":\"object\"}", "{\"x\": [1, {\"y\": \"z\"}]}", "[1]" },
    };
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        cdx_grammar *g = NULL;
        cdx_err err = { 0 };
        int rc = cdx_grammar_from_json_schema(k[i].schema, strlen(k[i].schema), "s.json", &g, &err);
        CHECKF(rc == 0, "%s: %s", k[i].schema, err.msg);
        if (!rc) {
            CHECKF(accepts(g, k[i].yes), "%s refuses %s", k[i].schema, k[i].yes);
            CHECKF(!accepts(g, k[i].no), "%s accepts %s", k[i].schema, k[i].no);
        }
        cdx_grammar_free(g);
    }
}

/* The cross-check with llama.cpp's own grammar sampler (tests/golden/grammar-llamacpp.json, made by
 * scripts/goldens/llamacpp-grammars.mjs): texts caldrix generated under each of llama.cpp's grammars,
 * which llama.cpp (node-llama-cpp's LlamaGrammarEvaluationState, token by token) accepted whole; here
 * caldrix's matcher must accept each text too and agree with llama.cpp on whether it is complete. */
static void test_llamacpp_cross_check(void)
{
    json_error_t je;
    json_t *gold = json_load_file("tests/golden/grammar-llamacpp.json", 0, &je);
    REQUIRE(gold);
    json_t *cases = json_object_get(gold, "cases"), *c;
    size_t i, n_complete = 0;
    CHECKF(json_array_size(cases) >= 24, "%zu cases", json_array_size(cases));
    json_array_foreach(cases, i, c) {
        const char *gname = json_string_value(json_object_get(c, "grammar"));
        const char *text = json_string_value(json_object_get(c, "text"));
        const int seed = (int)json_integer_value(json_object_get(c, "seed"));
        const bool llama_all = json_integer_value(json_object_get(c, "llama_accepted")) ==
                               json_integer_value(json_object_get(c, "llama_tokens"));
        const bool llama_complete = json_is_true(json_object_get(c, "llama_complete"));
        CHECKF(llama_all && json_integer_value(json_object_get(c, "llama_tokens")) > 0,
               "%s seed %d: llama.cpp accepted only %lld of %lld tokens of caldrix's text", gname, seed,
               (long long)json_integer_value(json_object_get(c, "llama_accepted")),
               (long long)json_integer_value(json_object_get(c, "llama_tokens")));
        char path[256];
        snprintf(path, sizeof path, "tests/text/data/llamacpp-grammars/%s", gname);
        size_t n = 0;
        char *gt = slurp(path, &n);
        cdx_grammar *g = NULL;
        cdx_grammar_vocab *v = small_vocab();
        cdx_matcher *m = NULL;
        cdx_err err = { 0 };
        if (!gt || cdx_grammar_from_gbnf(gt, n, path, &g, &err) || !v || cdx_matcher_create(g, v, &m, &err)) {
            CHECKF(false, "%s: %s", path, err.msg);
        } else {
            const int rc = cdx_matcher_accept_bytes(m, text, json_string_length(json_object_get(c, "text")), &err);
            CHECKF(rc == 0, "%s seed %d: caldrix's matcher refuses the text: %s", gname, seed, err.msg);
            CHECKF(rc || cdx_matcher_done(m) == llama_complete, "%s seed %d: complete: caldrix %d, llama.cpp %d", gname,
                   seed, (int)cdx_matcher_done(m), (int)llama_complete);
            n_complete += llama_complete;
        }
        cdx_matcher_free(m);
        cdx_grammar_vocab_free(v);
        cdx_grammar_free(g);
        free(gt);
    }
    CHECKF(n_complete > 0, "no case is complete for llama.cpp (the agreement on completeness is untested)");
    json_decref(gold);
}

/* What the matcher says it expects, for dead-end messages: the rules on top (a leaf rule such as item is
 * built inline into its caller) and the next bytes. */
static void test_expected_text(void)
{
    cdx_grammar_vocab *v = small_vocab();
    cdx_grammar *g = gbnf("root ::= \"ab\" item \"!\"\nitem ::= [0-9] | \"x\" | \"\\n\"\n");
    cdx_matcher *m = NULL;
    cdx_err err = { 0 };
    char buf[200];
    if (!v || !g || cdx_matcher_create(g, v, &m, &err)) {
        CHECK(false);
        return;
    }
    cdx_matcher_expected(m, buf, sizeof buf);
    CHECKF(!strcmp(buf, "in rule \"root\" the next byte must be 'a'"), "start: %s", buf);
    CHECK(!cdx_matcher_accept_bytes(m, "ab", 2, &err));
    cdx_matcher_expected(m, buf, sizeof buf);
    CHECKF(!strcmp(buf, "in rule \"root\" the next byte must be 0x0A, '0'-'9', 'x'"), "after ab: %s", buf);
    CHECK(!cdx_matcher_accept_bytes(m, "7!", 2, &err));
    cdx_matcher_expected(m, buf, sizeof buf);
    CHECKF(!strcmp(buf, "the grammar is complete and nothing may follow"), "at the end: %s", buf);
    char small[12];
    cdx_matcher_reset(m);
    const size_t n = cdx_matcher_expected(m, small, sizeof small);
    CHECKF(n == 11 && !strcmp(small, "in rule ..."), "cut to 12 bytes: %zu \"%s\"", n, small);
    cdx_matcher_free(m);
    cdx_grammar_free(g);
    cdx_grammar_vocab_free(v);
}

/* A real tokenizer's tool-call mark: Mistral's [TOOL_CALLS] is special token 5 (its
 * tokenizer.json, "special": true). A grammar that forces the mark admits the model's own token as
 * well as the ordinary tokens spelling it; other special tokens never match; Qwen3's <tool_call>
 * (added, not special) matches as it always did. */
static void test_marks_match_by_text(void)
{
    const char *const tokenizers[] = { "../shared/fixtures/tokenizers/mistral/tokenizer.json",
                                       "../shared/fixtures/tokenizers/qwen3/tokenizer.json" };
    const char *const marks[] = { "[TOOL_CALLS]", "<tool_call>" };
    const int32_t mark_id[] = { 5, 151657 };
    for (int k = 0; k < 2; k++) {
        cdx_tok *tok = NULL;
        cdx_err err = { 0 };
        if (cdx_tok_open(tokenizers[k], &tok, &err)) {
            CHECKF(false, "%s: %s", tokenizers[k], err.msg);
            continue;
        }
        CHECKF(cdx_tok_is_mark(tok, mark_id[k]) == (k == 0), "%s: id %d a mark: %d", marks[k], mark_id[k],
               cdx_tok_is_mark(tok, mark_id[k]));
        cdx_grammar_vocab *v = NULL;
        const int64_t nv = cdx_tok_n_vocab(tok);
        CHECK(!cdx_grammar_vocab_from_tok(tok, nv, &v, &err));
        char text[64];
        snprintf(text, sizeof text, "root ::= \"%s\" [a-z]+\n", marks[k]);
        cdx_grammar *g = gbnf(text);
        uint32_t *bits = calloc((size_t)(nv + 31) / 32, sizeof *bits);
        cdx_matcher *m = NULL;
        if (!v || !g || !bits || cdx_matcher_create(g, v, &m, &err)) {
            CHECK(false);
        } else {
            CHECK(cdx_matcher_mask(m, bits, &err) > 0);
            CHECKF(has(bits, mark_id[k]), "%s: the mark's own token %d is allowed", marks[k], mark_id[k]);
            /* the ordinary token whose text is the mark's first byte */
            int64_t first = -1;
            for (int64_t i = 0; i < nv && first < 0; i++) {
                char piece[8];
                if (!(cdx_tok_attr(tok, (int32_t)i) & CDX_TOK_CONTROL) &&
                    cdx_tok_piece(tok, (int32_t)i, false, false, piece, sizeof piece) == 1 && piece[0] == marks[k][0])
                    first = i;
            }
            CHECKF(first >= 0 && has(bits, (int)first), "%s: the spelled-out '%c' (token %lld) is allowed too",
                   marks[k], marks[k][0], (long long)first);
            int64_t n_special = 0, n_special_allowed = 0;
            for (int64_t i = 0; i < nv; i++)
                if ((cdx_tok_attr(tok, (int32_t)i) & CDX_TOK_CONTROL) && !cdx_tok_is_mark(tok, (int32_t)i)) {
                    n_special++;
                    n_special_allowed += has(bits, (int)i);
                }
            CHECKF(n_special > 0 && n_special_allowed == 0, "%s: %lld of %lld other special tokens allowed", marks[k],
                   (long long)n_special_allowed, (long long)n_special);
            /* the mark token moves the matcher past the whole mark */
            CHECK(!cdx_matcher_accept(m, mark_id[k], &err));
            CHECK(cdx_matcher_n_bytes(m) == (int64_t)strlen(marks[k]));
        }
        cdx_matcher_free(m);
        free(bits);
        cdx_grammar_free(g);
        cdx_grammar_vocab_free(v);
        cdx_tok_close(tok);
    }
}

int main(void)
{
    RUN("a token may span the end of one literal and the next", test_literal_spanning_tokens);
    RUN("tokens ending in the middle of a UTF-8 code point are allowed only toward whole code points",
        test_partial_utf8);
    RUN("whitespace rules bound the blanks a token may add", test_whitespace_rules);
    RUN("masks across rule calls and recursion agree with stepping each token", test_nested_rules_and_recursion);
    RUN("the matcher follows tokens, refuses others unchanged, and ends when the grammar closes",
        test_matcher_follows_tokens);
    RUN("the matcher names the rules and bytes it expects (dead-end messages)", test_expected_text);
    RUN("a tool-call mark that is a special token matches the grammar by its text; other special tokens never",
        test_marks_match_by_text);
    RUN("GBNF syntax: comments, multi-line groups, classes, escapes, repetitions", test_gbnf_syntax);
    RUN("malformed GBNF is refused with the place and the reason", test_gbnf_errors);
    RUN("llama.cpp's example grammars compile and accept their language", test_llamacpp_grammars);
    RUN("texts caldrix generated under llama.cpp's grammars: llama.cpp's sampler accepted them, caldrix's matcher "
        "agrees, and on completeness", test_llamacpp_cross_check);
    RUN("JSON Schema keywords that cannot be enforced are refused by name and path", test_schema_errors);
    RUN("big length bounds compile in linear time", test_schema_big_bounds_compile_fast);
    RUN("schema grammars accept what the schema allows, refuse the rest", test_schema_languages);
    printf("grammar: %d passed, %d failed\n", t_passed, t_failed);
    return t_failed != 0;
}
