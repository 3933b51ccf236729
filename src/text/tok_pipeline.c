/* Normalizers and pre-tokenizers, as Hugging Face tokenizers defines them (and llama.cpp's
 * variants). Unicode properties come from utf8proc; regexes run on PCRE2 (JIT). */
#include "text/tok_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- Unicode predicates ---- */

static bool is_ws(uint32_t c) /* Unicode White_Space (Rust char::is_whitespace) */
{
    if ((c >= 9 && c <= 13) || c == ' ' || c == 0x85)
        return true;
    if (c < 0x80)
        return false;
    int k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP;
}

static bool is_punct_cat(uint32_t c)
{
    int k = utf8proc_category((utf8proc_int32_t)c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

static bool after_unicode9(uint32_t c);

static bool is_bert_punc(uint32_t c)
{
    if (c < 0x80 && ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)))
        return true;
    return is_punct_cat(c) && !after_unicode9(c);
}

static bool is_numeric(uint32_t c)
{
    int k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

/* tokenizers' BERT steps (BertNormalizer, BertPreTokenizer, Punctuation) take categories from the
 * unicode_categories crate (0.1.1), whose tables predate Unicode 10: a code point assigned later is
 * "unassigned" there, so neither punctuation, control nor a nonspacing mark (e.g. U+061D, Unicode 14,
 * stays inside its word). These are the code points of categories P*, Cc, Cf, Co, Cs and Mn not
 * present in Unicode 9.0 (generated with Perl's Unicode::UCD: gc=... minus Present_In=9.0). */
static const uint32_t k_after_unicode9[][2] = {
    {0x61D, 0x61D}, {0x7FD, 0x7FD}, {0x890, 0x891}, {0x898, 0x89F}, {0x8CA, 0x8D3}, {0x9FD, 0x9FE}, {0xA76, 0xA76},
    {0xAFA, 0xAFF}, {0xB55, 0xB55}, {0xC04, 0xC04}, {0xC3C, 0xC3C}, {0xC77, 0xC77}, {0xC84, 0xC84}, {0xD00, 0xD00},
    {0xD3B, 0xD3C}, {0xD81, 0xD81}, {0xEBA, 0xEBA}, {0x180F, 0x180F}, {0x1ABF, 0x1ACE}, {0x1B7D, 0x1B7E},
    {0x1DF6, 0x1DFA}, {0x2E45, 0x2E4F}, {0x2E52, 0x2E5D}, {0xA82C, 0xA82C}, {0xA8FF, 0xA8FF}, {0x10D24, 0x10D27},
    {0x10EAB, 0x10EAD}, {0x10F46, 0x10F50}, {0x10F55, 0x10F59}, {0x10F82, 0x10F89}, {0x11070, 0x11070},
    {0x11073, 0x11074}, {0x110C2, 0x110C2}, {0x110CD, 0x110CD}, {0x111CF, 0x111CF}, {0x1133B, 0x1133B},
    {0x1145A, 0x1145A}, {0x1145E, 0x1145E}, {0x116B9, 0x116B9}, {0x1182F, 0x11837}, {0x11839, 0x1183B},
    {0x1193B, 0x1193C}, {0x1193E, 0x1193E}, {0x11943, 0x11946}, {0x119D4, 0x119D7}, {0x119DA, 0x119DB},
    {0x119E0, 0x119E0}, {0x119E2, 0x119E2}, {0x11A01, 0x11A0A}, {0x11A33, 0x11A38}, {0x11A3B, 0x11A47},
    {0x11A51, 0x11A56}, {0x11A59, 0x11A5B}, {0x11A8A, 0x11A96}, {0x11A98, 0x11A9C}, {0x11A9E, 0x11AA2},
    {0x11D31, 0x11D36}, {0x11D3A, 0x11D3A}, {0x11D3C, 0x11D3D}, {0x11D3F, 0x11D45}, {0x11D47, 0x11D47},
    {0x11D90, 0x11D91}, {0x11D95, 0x11D95}, {0x11D97, 0x11D97}, {0x11EF3, 0x11EF4}, {0x11EF7, 0x11EF8},
    {0x11FFF, 0x11FFF}, {0x12FF1, 0x12FF2}, {0x13430, 0x13438}, {0x16E97, 0x16E9A}, {0x16F4F, 0x16F4F},
    {0x16FE2, 0x16FE2}, {0x16FE4, 0x16FE4}, {0x1CF00, 0x1CF2D}, {0x1CF30, 0x1CF46}, {0x1E130, 0x1E136},
    {0x1E2AE, 0x1E2AE}, {0x1E2EC, 0x1E2EF},
};

static bool after_unicode9(uint32_t c)
{
    size_t lo = 0, hi = sizeof k_after_unicode9 / sizeof *k_after_unicode9;
    while (lo < hi) {
        size_t m = (lo + hi) / 2;
        if (c < k_after_unicode9[m][0]) hi = m;
        else if (c > k_after_unicode9[m][1]) lo = m + 1;
        else return true;
    }
    return false;
}

/* BertNormalizer's control chars: tokenizers uses the unicode_categories crate, whose "other"
 * covers Cc, Cf, Co and Cs but not unassigned code points (they stay and become [UNK]). */
static bool is_other_cat(uint32_t c)
{
    int k = utf8proc_category((utf8proc_int32_t)c);
    return (k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CS ||
            k == UTF8PROC_CATEGORY_CO) && !after_unicode9(c);
}

/* The CJK ranges BERT pads with spaces (google-research/bert tokenization.py _is_chinese_char). */
static bool is_cjk(uint32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static int put_cp(tk_str *o, uint32_t cp)
{
    char u[4];
    return tk_str_put(o, u, (size_t)tk_utf8_enc(cp, u));
}

static int put_lower(tk_str *o, uint32_t cp)
{
    /* U+0130 lowercases to "i\u0307" in Unicode's full mapping (Rust to_lowercase); utf8proc gives
     * the simple mapping, so spell the one multi-char case out. */
    if (cp == 0x130)
        return tk_str_put(o, "i\xcc\x87", 3);
    return put_cp(o, (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp));
}

/* ---- normalizers ---- */

static int unorm_run(const char *s, size_t n, int opts, tk_str *o)
{
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst, (utf8proc_option_t)(UTF8PROC_STABLE | opts));
    if (r < 0)
        return CDX_EINVAL;
    int rc = tk_str_put(o, dst, (size_t)r);
    free(dst);
    return rc;
}

/* Unicode normalization (NFC/NFD/NFKC/NFKD by opts). ASCII chars are invariant and never combine
 * with what precedes them, so the text can be cut before any ASCII char: only the stretches that
 * hold non-ASCII (with the ASCII char before them, which a combining mark may attach to) go
 * through utf8proc. */
static int unorm(const char *s, size_t n, int opts, tk_str *o)
{
    size_t i = 0;
    int rc = 0;
    while (i < n && !rc) {
        size_t j = i;
        while (j < n && (uint8_t)s[j] < 0x80 && (j + 1 == n || (uint8_t)s[j + 1] < 0x80))
            j++;
        if (j > i) { /* ASCII not followed by non-ASCII */
            rc = tk_str_put(o, s + i, j - i);
            i = j;
            continue;
        }
        j = i + 1;
        while (j < n && (uint8_t)s[j] >= 0x80)
            j++;
        rc = unorm_run(s + i, j - i, opts, o);
        i = j;
    }
    return rc;
}

static int replace_all(const char *s, size_t n, const char *pat, size_t pn, const char *rep, size_t rn, tk_str *o)
{
    if (pn == 0)
        return tk_str_put(o, s, n);
    size_t i = 0;
    while (i < n) {
        const char *f = pn <= n - i ? memmem(s + i, n - i, pat, pn) : NULL;
        if (!f)
            break;
        size_t k = (size_t)(f - s);
        if (tk_str_put(o, s + i, k - i) || tk_str_put(o, rep, rn))
            return CDX_ENOMEM;
        i = k + pn;
    }
    return tk_str_put(o, s + i, n - i);
}

static int regex_replace(pcre2_code *re, const char *s, size_t n, const char *rep, size_t rn, tk_str *o)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md)
        return CDX_ENOMEM;
    size_t i = 0;
    int rc = 0;
    while (i <= n) {
        int m = pcre2_match(re, (PCRE2_SPTR)s, n, i, PCRE2_NO_UTF_CHECK, md, NULL);
        if (m < 0)
            break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if ((rc = tk_str_put(o, s + i, ov[0] - i)) || (rc = tk_str_put(o, rep, rn)))
            break;
        if (ov[1] == ov[0]) { /* empty match: copy one char and move on */
            if (ov[0] >= n) { i = n; break; }
            size_t l = tk_utf8_len((uint8_t)s[ov[0]]);
            if ((rc = tk_str_put(o, s + ov[0], l)))
                break;
            i = ov[0] + l;
        } else {
            i = ov[1];
        }
    }
    if (!rc && i < n)
        rc = tk_str_put(o, s + i, n - i);
    pcre2_match_data_free(md);
    return rc;
}

static int norm_step(const tk_norm *nm, const char *s, size_t n, tk_str *o)
{
    size_t adv;
    switch (nm->type) {
    case NORM_NFC: return unorm(s, n, UTF8PROC_COMPOSE, o);
    case NORM_NFD: return unorm(s, n, UTF8PROC_DECOMPOSE, o);
    case NORM_NFKC: return unorm(s, n, UTF8PROC_COMPOSE | UTF8PROC_COMPAT, o);
    case NORM_NFKD: return unorm(s, n, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, o);
    case NORM_LOWER:
        for (size_t i = 0; i < n; i += adv)
            if (put_lower(o, tk_utf8_dec(s + i, n - i, &adv)))
                return CDX_ENOMEM;
        return 0;
    case NORM_STRIP_ACCENTS:
        for (size_t i = 0; i < n; i += adv) {
            uint32_t c = tk_utf8_dec(s + i, n - i, &adv);
            int k = utf8proc_category((utf8proc_int32_t)c);
            if (k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME)
                continue;
            if (tk_str_put(o, s + i, adv))
                return CDX_ENOMEM;
        }
        return 0;
    case NORM_PREPEND:
        if (n && tk_str_put(o, nm->a, nm->a_len))
            return CDX_ENOMEM;
        return tk_str_put(o, s, n);
    case NORM_REPLACE:
        if (nm->re)
            return regex_replace(nm->re, s, n, nm->b, nm->b_len, o);
        return replace_all(s, n, nm->a, nm->a_len, nm->b, nm->b_len, o);
    case NORM_STRIP: {
        size_t b = 0, e = n;
        if (nm->left)
            while (b < e) {
                uint32_t c = tk_utf8_dec(s + b, e - b, &adv);
                if (!is_ws(c)) break;
                b += adv;
            }
        if (nm->right)
            while (e > b) {
                size_t p = e - 1;
                while (p > b && ((uint8_t)s[p] & 0xC0) == 0x80) p--;
                uint32_t c = tk_utf8_dec(s + p, e - p, &adv);
                if (!is_ws(c)) break;
                e = p;
            }
        return tk_str_put(o, s + b, e - b);
    }
    case NORM_BERT: {
        tk_str a = {0}, d = {0};
        int rc = 0;
        for (size_t i = 0; i < n && !rc; i += adv) {
            uint32_t c = tk_utf8_dec(s + i, n - i, &adv);
            if (nm->clean_text) {
                if (c == 0 || c == 0xFFFD || (c != '\t' && c != '\n' && c != '\r' && is_other_cat(c)))
                    continue;
                if (c == '\t' || c == '\n' || c == '\r' || c == ' ' ||
                    utf8proc_category((utf8proc_int32_t)c) == UTF8PROC_CATEGORY_ZS)
                    c = ' ';
            }
            if (nm->chinese && is_cjk(c)) {
                rc = tk_str_putc(&a, ' ') || put_cp(&a, c) || tk_str_putc(&a, ' ');
                continue;
            }
            rc = put_cp(&a, c);
        }
        if (!rc && nm->strip_accents) {
            rc = unorm(a.s ? a.s : "", a.len, UTF8PROC_DECOMPOSE, &d);
            a.len = 0;
            for (size_t i = 0; i < d.len && !rc; i += adv) {
                uint32_t c = tk_utf8_dec(d.s + i, d.len - i, &adv);
                if (utf8proc_category((utf8proc_int32_t)c) != UTF8PROC_CATEGORY_MN || after_unicode9(c))
                    rc = tk_str_put(&a, d.s + i, adv);
            }
        }
        for (size_t i = 0; i < a.len && !rc; i += adv) {
            uint32_t c = tk_utf8_dec(a.s + i, a.len - i, &adv);
            rc = nm->lowercase ? put_lower(o, c) : tk_str_put(o, a.s + i, adv);
        }
        if (!rc && !o->s)
            rc = tk_str_put(o, "", 0);
        free(a.s); free(d.s);
        return rc ? CDX_ENOMEM : 0;
    }
    }
    return tk_str_put(o, s, n);
}

int tk_normalize(const cdx_tok *t, const char *s, size_t n, tk_str *out)
{
    out->len = 0;
    if (t->n_norm == 0)
        return tk_str_put(out, s, n);
    tk_str a = {0};
    int rc = tk_str_put(&a, s, n);
    for (size_t i = 0; i < t->n_norm && !rc; i++) {
        out->len = 0;
        rc = norm_step(&t->norm[i], a.s, a.len, out);
        if (!rc) {
            a.len = 0;
            rc = tk_str_put(&a, out->s ? out->s : "", out->len);
        }
    }
    out->len = 0;
    if (!rc)
        rc = tk_str_put(out, a.s, a.len);
    free(a.s);
    return rc;
}

/* ---- spans ---- */

int tk_spans_push(tk_spans *s, size_t off, size_t len, bool first, bool after_special)
{
    if (len == 0)
        return 0; /* empty pieces are dropped, as tokenizers does */
    if (s->n == s->cap) {
        size_t c = s->cap ? s->cap * 2 : 64;
        tk_span *p = realloc(s->sp, c * sizeof *p);
        if (!p)
            return CDX_ENOMEM;
        s->sp = p;
        s->cap = c;
    }
    s->sp[s->n++] = (tk_span){ off, len, first, after_special };
    return 0;
}

void tk_spans_free(tk_spans *s)
{
    free(s->buf.s);
    free(s->sp);
}

/* A piece of a span: [b, e) relative to the span text, and whether it matched. */
typedef struct { size_t b, e; bool m; } piece;
typedef struct { piece *p; size_t n, cap; } pieces;

static int pc_push(pieces *ps, size_t b, size_t e, bool m)
{
    if (ps->n == ps->cap) {
        size_t c = ps->cap ? ps->cap * 2 : 32;
        piece *p = realloc(ps->p, c * sizeof *p);
        if (!p)
            return CDX_ENOMEM;
        ps->p = p;
        ps->cap = c;
    }
    ps->p[ps->n++] = (piece){ b, e, m };
    return 0;
}

/* Applies a split behaviour (tokenizers' SplitDelimiterBehavior) to the pieces of one span and
 * appends the results to out. */
static int emit_pieces(pieces *ps, int behavior, bool invert, const tk_span *sp, tk_spans *out)
{
    if (invert)
        for (size_t i = 0; i < ps->n; i++)
            ps->p[i].m = !ps->p[i].m;
    size_t k = 0;
    switch (behavior) {
    case SPLIT_REMOVED:
        for (size_t i = 0; i < ps->n; i++)
            if (!ps->p[i].m)
                ps->p[k++] = ps->p[i];
        break;
    case SPLIT_ISOLATED:
        k = ps->n;
        break;
    case SPLIT_MERGED_PREV: {
        bool prev = false;
        for (size_t i = 0; i < ps->n; i++) {
            piece c = ps->p[i];
            if (c.m && !prev && k > 0)
                ps->p[k - 1].e = c.e;
            else
                ps->p[k++] = c;
            prev = c.m;
        }
        break;
    }
    case SPLIT_MERGED_NEXT: {
        /* walk backwards: a match joins the piece after it */
        bool prev = false;
        size_t w = ps->n;
        for (size_t i = ps->n; i-- > 0;) {
            piece c = ps->p[i];
            if (c.m && !prev && w < ps->n)
                ps->p[w].b = c.b;
            else
                ps->p[--w] = c;
            prev = c.m;
        }
        if (ps->n > w)
            memmove(ps->p, ps->p + w, (ps->n - w) * sizeof *ps->p);
        k = ps->n - w;
        break;
    }
    case SPLIT_CONTIGUOUS: {
        bool prev = false;
        for (size_t i = 0; i < ps->n; i++) {
            piece c = ps->p[i];
            if (c.m == prev && k > 0)
                ps->p[k - 1].e = c.e;
            else
                ps->p[k++] = c;
            prev = c.m;
        }
        break;
    }
    }
    for (size_t i = 0; i < k; i++)
        if (tk_spans_push(out, sp->off + ps->p[i].b, ps->p[i].e - ps->p[i].b, sp->first && ps->p[i].b == 0,
                          sp->after_special && ps->p[i].b == 0))
            return CDX_ENOMEM;
    return 0;
}

static int regex_pieces(pcre2_code *re, pcre2_match_data *md, pcre2_match_context *mc, const char *s, size_t n,
                        pieces *ps)
{
    size_t prev = 0, at = 0;
    while (at <= n) {
        int m = pcre2_match(re, (PCRE2_SPTR)s, n, at, PCRE2_NO_UTF_CHECK, md, NULL);
        if (m == PCRE2_ERROR_JIT_STACKLIMIT && mc) /* long whitespace runs: retry on a big JIT stack */
            m = pcre2_match(re, (PCRE2_SPTR)s, n, at, PCRE2_NO_UTF_CHECK, md, mc);
        if (m == PCRE2_ERROR_NOMATCH)
            break;
        if (m < 0)
            return CDX_ERANGE; /* a match or JIT stack limit: refuse rather than split wrongly */
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t b = ov[0], e = ov[1];
        if (b > prev && pc_push(ps, prev, b, false))
            return CDX_ENOMEM;
        if (e > b && pc_push(ps, b, e, true))
            return CDX_ENOMEM;
        if (e > prev)
            prev = e;
        if (e == b) {
            if (b >= n)
                break;
            at = b + tk_utf8_len((uint8_t)s[b]);
        } else {
            at = e;
        }
    }
    if (prev < n && pc_push(ps, prev, n, false))
        return CDX_ENOMEM;
    return 0;
}

static int str_pieces(const char *pat, size_t pn, const char *s, size_t n, pieces *ps)
{
    size_t prev = 0;
    if (pn)
        for (size_t i = 0; i + pn <= n;) {
            const char *f = memmem(s + i, n - i, pat, pn);
            if (!f)
                break;
            size_t b = (size_t)(f - s);
            if (b > prev && pc_push(ps, prev, b, false))
                return CDX_ENOMEM;
            if (pc_push(ps, b, b + pn, true))
                return CDX_ENOMEM;
            prev = i = b + pn;
        }
    if (prev < n && pc_push(ps, prev, n, false))
        return CDX_ENOMEM;
    return 0;
}

/* Every char for which pred holds is a match of its own. */
static int pred_pieces(bool (*pred)(uint32_t), const char *s, size_t n, pieces *ps)
{
    size_t prev = 0, adv;
    for (size_t i = 0; i < n; i += adv) {
        uint32_t c = tk_utf8_dec(s + i, n - i, &adv);
        if (!pred(c))
            continue;
        if (i > prev && pc_push(ps, prev, i, false))
            return CDX_ENOMEM;
        if (pc_push(ps, i, i + adv, true))
            return CDX_ENOMEM;
        prev = i + adv;
    }
    if (prev < n && pc_push(ps, prev, n, false))
        return CDX_ENOMEM;
    return 0;
}

static bool is_not_ws_pred(uint32_t c) { return is_ws(c); }

/* llama.cpp's BERT pre-processing (llm_tokenizer_wpm_session::preprocess): NFD when stripping
 * accents, whitespace splits, control chars vanish, punctuation / ASCII symbols / CJK stand alone. */
static int wpm_llama(const tk_pre *p, const char *s, size_t n, const tk_span *sp, tk_spans *io, tk_spans *out)
{
    tk_str d = {0};
    int rc = 0;
    if (p->strip_accents) {
        /* llama.cpp's "NFD" maps each code point to the FIRST code point of its full NFD alone
         * (unicode_ranges_nfd: "é" -> "e", a Hangul syllable -> its leading jamo only), never to
         * the whole decomposition */
        size_t a;
        for (size_t i = 0; i < n && !rc; i += a) {
            uint32_t c = tk_utf8_dec(s + i, n - i, &a);
            utf8proc_int32_t dec[32];
            int last = 0;
            utf8proc_ssize_t r = utf8proc_decompose_char((utf8proc_int32_t)c, dec, 32, UTF8PROC_DECOMPOSE, &last);
            rc = put_cp(&d, r >= 1 ? (uint32_t)dec[0] : c);
        }
    } else
        rc = tk_str_put(&d, s, n);
    if (rc) { free(d.s); return rc; }
    size_t adv, wstart = io->buf.len;
    for (size_t i = 0; i < d.len && !rc; i += adv) {
        uint32_t c = tk_utf8_dec(d.s + i, d.len - i, &adv);
        if (is_ws(c)) {
            rc = tk_spans_push(out, wstart, io->buf.len - wstart, false, false);
            wstart = io->buf.len;
            continue;
        }
        /* llama.cpp's flags: control is \p{C} less Cn (unassigned is "undefined", kept), an accent
         * mark is \p{M} */
        int k = utf8proc_category((utf8proc_int32_t)c);
        if (c == 0 || c == 0xFFFD || k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF ||
            k == UTF8PROC_CATEGORY_CO || k == UTF8PROC_CATEGORY_CS)
            continue;
        if (p->strip_accents && (k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME))
            continue;
        bool alone = is_punct_cat(c) || (c < 0x7F && k >= UTF8PROC_CATEGORY_SM && k <= UTF8PROC_CATEGORY_SO) || is_cjk(c);
        if (alone) {
            rc = tk_spans_push(out, wstart, io->buf.len - wstart, false, false);
            wstart = io->buf.len;
        }
        rc = rc || (p->lowercase ? put_lower(&io->buf, c) : put_cp(&io->buf, c));
        if (alone) {
            rc = rc || tk_spans_push(out, wstart, io->buf.len - wstart, false, false);
            wstart = io->buf.len;
        }
    }
    if (!rc)
        rc = tk_spans_push(out, wstart, io->buf.len - wstart, false, false);
    (void)sp;
    free(d.s);
    return rc;
}

static int pre_step(const tk_pre *p, tk_spans *io, tk_spans *out, pcre2_match_data **mds, pcre2_match_context *mc, size_t step)
{
    pieces ps = {0};
    int rc = 0;
    out->n = 0;
    size_t n_in = io->n;
    for (size_t si = 0; si < n_in && !rc; si++) {
        tk_span sp = io->sp[si];
        ps.n = 0;
        switch (p->type) {
        case PRE_SPLIT:
            if (p->re)
                rc = regex_pieces(p->re, mds[step], mc, io->buf.s + sp.off, sp.len, &ps);
            else
                rc = str_pieces(p->str, p->str_len, io->buf.s + sp.off, sp.len, &ps);
            if (!rc)
                rc = emit_pieces(&ps, p->behavior, p->invert, &sp, out);
            break;
        case PRE_BYTELEVEL:
            if (p->add_prefix_space && io->buf.s[sp.off] != ' ') {
                size_t o = io->buf.len;
                if ((rc = tk_str_putc(&io->buf, ' ')) || (rc = tk_str_put(&io->buf, io->buf.s + sp.off, sp.len)))
                    break;
                sp.off = o;
                sp.len += 1;
            }
            if (p->re) {
                rc = regex_pieces(p->re, mds[step], mc, io->buf.s + sp.off, sp.len, &ps);
                if (!rc)
                    rc = emit_pieces(&ps, SPLIT_ISOLATED, false, &sp, out);
            } else {
                rc = tk_spans_push(out, sp.off, sp.len, sp.first, sp.after_special);
            }
            break;
        case PRE_METASPACE: {
            size_t o = io->buf.len;
            bool prepend = p->prepend_scheme == PREPEND_ALWAYS || (p->prepend_scheme == PREPEND_FIRST && sp.first) ||
                           (p->prepend_scheme == PREPEND_AFTER_SPECIAL && sp.after_special);
            const char *s = io->buf.s + sp.off;
            /* tokenizers prepends unless the text (after ' ' -> ▁) already starts with ▁;
             * llama.cpp's SPM always adds its space */
            bool starts = (sp.len >= 1 && s[0] == ' ') || (sp.len >= p->str_len && !memcmp(s, p->str, p->str_len));
            if (prepend && (p->prepend_scheme == PREPEND_AFTER_SPECIAL || !starts) &&
                (rc = tk_str_put(&io->buf, p->str, p->str_len)))
                break;
            /* the text may have moved: re-read from the buffer by offset */
            for (size_t i = 0; i < sp.len && !rc; i++) {
                char c = io->buf.s[sp.off + i];
                rc = c == ' ' ? tk_str_put(&io->buf, p->str, p->str_len) : tk_str_putc(&io->buf, c);
            }
            if (rc)
                break;
            tk_span ns = { o, io->buf.len - o, sp.first, sp.after_special };
            if (p->split) {
                rc = str_pieces(p->str, p->str_len, io->buf.s + ns.off, ns.len, &ps);
                if (!rc)
                    rc = emit_pieces(&ps, SPLIT_MERGED_NEXT, false, &ns, out);
            } else {
                rc = tk_spans_push(out, ns.off, ns.len, ns.first, ns.after_special);
            }
            break;
        }
        case PRE_DIGITS:
            rc = pred_pieces(is_numeric, io->buf.s + sp.off, sp.len, &ps);
            if (!rc)
                rc = emit_pieces(&ps, p->individual ? SPLIT_ISOLATED : SPLIT_CONTIGUOUS, false, &sp, out);
            break;
        case PRE_WHITESPACE:
            rc = regex_pieces(p->re, mds[step], mc, io->buf.s + sp.off, sp.len, &ps);
            if (!rc)
                rc = emit_pieces(&ps, SPLIT_REMOVED, true, &sp, out);
            break;
        case PRE_WSSPLIT:
            rc = pred_pieces(is_not_ws_pred, io->buf.s + sp.off, sp.len, &ps);
            if (!rc)
                rc = emit_pieces(&ps, SPLIT_REMOVED, false, &sp, out);
            break;
        case PRE_BERT: {
            rc = pred_pieces(is_not_ws_pred, io->buf.s + sp.off, sp.len, &ps);
            tk_spans mid = {0};
            mid.buf = io->buf; /* shares the text; only spans are new */
            if (!rc)
                rc = emit_pieces(&ps, SPLIT_REMOVED, false, &sp, &mid);
            for (size_t j = 0; j < mid.n && !rc; j++) {
                ps.n = 0;
                rc = pred_pieces(is_bert_punc, io->buf.s + mid.sp[j].off, mid.sp[j].len, &ps);
                if (!rc)
                    rc = emit_pieces(&ps, SPLIT_ISOLATED, false, &mid.sp[j], out);
            }
            free(mid.sp);
            break;
        }
        case PRE_PUNCT:
            rc = pred_pieces(is_bert_punc, io->buf.s + sp.off, sp.len, &ps);
            if (!rc)
                rc = emit_pieces(&ps, p->behavior, false, &sp, out);
            break;
        case PRE_WPM_LLAMA: {
            /* copy the span first: the buffer may move while we append */
            char *tmp = tk_strndup(io->buf.s + sp.off, sp.len);
            if (!tmp) { rc = CDX_ENOMEM; break; }
            rc = wpm_llama(p, tmp, sp.len, &sp, io, out);
            free(tmp);
            break;
        }
        }
    }
    free(ps.p);
    return rc;
}

int tk_pretokenize(const cdx_tok *t, tk_spans *io, tk_spans *tmp)
{
    pcre2_match_data *mds[16] = {0};
    int rc = 0;
    /* a big JIT stack for the rare match that overflows PCRE2's default 32 KiB one */
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    pcre2_jit_stack *js = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    if (!mc || !js)
        rc = CDX_ENOMEM;
    else
        pcre2_jit_stack_assign(mc, NULL, js);
    for (size_t i = 0; i < t->n_pre && i < 16; i++)
        if (t->pre[i].re && !(mds[i] = pcre2_match_data_create_from_pattern(t->pre[i].re, NULL)))
            rc = CDX_ENOMEM;
    for (size_t i = 0; i < t->n_pre && !rc; i++) {
        rc = pre_step(&t->pre[i], io, tmp, mds, mc, i);
        tk_span *sp = io->sp; size_t n = io->n, cap = io->cap;
        io->sp = tmp->sp; io->n = tmp->n; io->cap = tmp->cap;
        tmp->sp = sp; tmp->n = n; tmp->cap = cap;
        tmp->n = 0;
    }
    for (size_t i = 0; i < 16; i++)
        pcre2_match_data_free(mds[i]);
    pcre2_jit_stack_free(js);
    pcre2_match_context_free(mc);
    return rc;
}
