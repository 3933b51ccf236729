/* Encoding: added-token split -> normalize -> pre-tokenize -> model -> post-process. */
#include "text/tok_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

typedef struct { size_t off, len; int32_t id; } frag; /* id >= 0: an added token */
typedef struct { frag *f; size_t n, cap; } frags;

static int frag_push(frags *fs, size_t off, size_t len, int32_t id)
{
    if (id < 0 && len == 0)
        return 0;
    if (fs->n == fs->cap) {
        size_t c = fs->cap ? fs->cap * 2 : 16;
        frag *p = realloc(fs->f, c * sizeof *p);
        if (!p)
            return CDX_ENOMEM;
        fs->f = p;
        fs->cap = c;
    }
    fs->f[fs->n++] = (frag){ off, len, id };
    return 0;
}

static bool ws_at(const char *s, size_t n, size_t i, size_t *adv)
{
    uint32_t c = tk_utf8_dec(s + i, n - i, adv);
    if ((c >= 9 && c <= 13) || c == ' ' || c == 0x85)
        return true;
    int k = c < 0x80 ? 0 : utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP;
}

static bool word_char_before(const char *s, size_t i)
{
    if (i == 0) return false;
    size_t p = i - 1;
    while (p > 0 && ((uint8_t)s[p] & 0xC0) == 0x80) p--;
    size_t adv;
    uint32_t c = tk_utf8_dec(s + p, i - p, &adv);
    int k = utf8proc_category((utf8proc_int32_t)c);
    return c == '_' || (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) || (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO) ||
           (k >= UTF8PROC_CATEGORY_MN && k <= UTF8PROC_CATEGORY_ME);
}

static bool word_char_at(const char *s, size_t n, size_t i)
{
    if (i >= n) return false;
    size_t adv;
    uint32_t c = tk_utf8_dec(s + i, n - i, &adv);
    int k = utf8proc_category((utf8proc_int32_t)c);
    return c == '_' || (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) || (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO) ||
           (k >= UTF8PROC_CATEGORY_MN && k <= UTF8PROC_CATEGORY_ME);
}

/* Splits s on added tokens (leftmost-longest, as tokenizers' AddedVocabulary does), matching
 * only tokens whose `normalized` flag equals `normalized`; special ones only when parse_special. */
static int split_added(const cdx_tok *t, const char *s, size_t n, size_t base, bool normalized, bool parse_special,
                       frags *out)
{
    size_t text_start = 0; /* start of pending plain text */
    size_t i = 0;
    while (i < n) {
        uint8_t c = (uint8_t)s[i];
        if (!(t->added_first[c >> 3] & (1u << (c & 7)))) {
            i++;
            continue;
        }
        const tk_added *hit = NULL;
        for (uint32_t k = t->added_idx[c]; k < t->added_idx[c + 1]; k++) {
            const tk_added *a = &t->added[k];
            if (a->normalized != normalized || (a->special && !parse_special))
                continue;
            if (a->len > n - i || memcmp(s + i, t->pool.s + a->off, a->len))
                continue;
            if (a->single_word && (word_char_before(s, i) || word_char_at(s, n, i + a->len)))
                continue;
            hit = a;
            break;
        }
        if (!hit) {
            i++;
            continue;
        }
        size_t b = i, e = i + hit->len, adv;
        if (hit->lstrip) {
            while (b > text_start) {
                size_t p = b - 1;
                while (p > text_start && ((uint8_t)s[p] & 0xC0) == 0x80) p--;
                if (!ws_at(s, n, p, &adv)) break;
                b = p;
            }
        }
        if (hit->rstrip)
            while (e < n && ws_at(s, n, e, &adv))
                e += adv;
        if (frag_push(out, base + text_start, b - text_start, -1) || frag_push(out, base + b, e - b, hit->id))
            return CDX_ENOMEM;
        text_start = i = e;
    }
    return frag_push(out, base + text_start, n - text_start, -1);
}

typedef struct {
    tk_scratch *sc;
    tk_spans io, tmp;
    tk_str norm;
    frags f1, f2;
} enc_ctx;

static int encode_text(const cdx_tok *t, enc_ctx *c, const char *s, size_t n, bool first, bool after_special, tk_ids *out)
{
    c->io.buf.len = 0;
    c->io.n = 0;
    int rc = tk_str_put(&c->io.buf, s, n);
    if (!rc)
        rc = tk_spans_push(&c->io, 0, n, first, after_special);
    if (!rc)
        rc = tk_pretokenize(t, &c->io, &c->tmp);
    for (size_t i = 0; i < c->io.n && !rc; i++)
        rc = tk_model_word(t, c->sc, c->io.buf.s + c->io.sp[i].off, c->io.sp[i].len, out);
    return rc;
}

int cdx_tok_encode(const cdx_tok *t, const char *text, size_t len, bool add_special, bool parse_special, int32_t *ids,
                   size_t cap, size_t *n_need, cdx_err *err)
{
    if (n_need)
        *n_need = 0;
    if (!text && len)
        return cdx_err_set(err, CDX_EINVAL, "encode: text is NULL");
    size_t bad = cdx_utf8_check(text ? text : "", len);
    if (bad != len)
        return cdx_err_set(err, CDX_EINVAL, "text is not valid UTF-8: bad byte 0x%02x at offset %zu", (uint8_t)text[bad], bad);
    enc_ctx c = {0};
    tk_ids out = {0};
    int rc = 0;
    if (!(c.sc = tk_scratch_new()))
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    if (add_special && t->has_pp)
        rc = tk_ids_append(&out, t->pp_pre, t->n_pp_pre);
    if (!rc && len)
        rc = split_added(t, text, len, 0, false, parse_special, &c.f1);
    bool after_special = true;
    for (size_t i = 0; i < c.f1.n && !rc; i++) {
        frag f = c.f1.f[i];
        if (f.id >= 0) {
            rc = tk_ids_push(&out, f.id);
            after_special = true;
            continue;
        }
        if ((rc = tk_normalize(t, text + f.off, f.len, &c.norm)))
            break;
        if (!t->any_normalized_added) {
            rc = encode_text(t, &c, c.norm.s ? c.norm.s : "", c.norm.len, f.off == 0, after_special, &out);
        } else {
            c.f2.n = 0;
            if ((rc = split_added(t, c.norm.s ? c.norm.s : "", c.norm.len, 0, true, parse_special, &c.f2)))
                break;
            tk_str copy = {0};
            rc = tk_str_put(&copy, c.norm.s ? c.norm.s : "", c.norm.len);
            bool as = after_special;
            for (size_t j = 0; j < c.f2.n && !rc; j++) {
                frag g = c.f2.f[j];
                if (g.id >= 0) {
                    rc = tk_ids_push(&out, g.id);
                    as = true;
                } else {
                    rc = encode_text(t, &c, copy.s + g.off, g.len, f.off == 0 && g.off == 0, as, &out);
                    as = false;
                }
            }
            free(copy.s);
        }
        after_special = false;
    }
    if (!rc && add_special && t->has_pp)
        rc = tk_ids_append(&out, t->pp_post, t->n_pp_post);
    if (!rc) {
        if (ids && out.n)
            memcpy(ids, out.v, (out.n < cap ? out.n : cap) * sizeof *ids);
        if (n_need)
            *n_need = out.n;
    } else {
        cdx_err_set(err, rc, rc == CDX_ERANGE ? "encode: a pre-tokenizer regex hit PCRE2's match limit on this text"
                                              : "encode: out of memory");
    }
    free(out.v);
    free(c.f1.f); free(c.f2.f); free(c.norm.s);
    tk_spans_free(&c.io); tk_spans_free(&c.tmp);
    tk_scratch_free(c.sc);
    return rc;
}
