/* Decoding: ids -> token strings -> decoder chain (tokenizers' Decoder::decode_chain) -> join ->
 * transformers' clean_up_tokenization. Plus the per-token piece and the streaming detokenizer. */
#include "text/tok_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct { tk_str *v; size_t n, cap; } strv;

static void strv_free(strv *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->v[i].s);
    free(a->v);
    a->v = NULL; a->n = a->cap = 0;
}

static int strv_push(strv *a, const char *s, size_t n)
{
    if (a->n == a->cap) {
        size_t c = a->cap ? a->cap * 2 : 16;
        tk_str *p = realloc(a->v, c * sizeof *p);
        if (!p) return CDX_ENOMEM;
        a->v = p; a->cap = c;
    }
    a->v[a->n] = (tk_str){0};
    if (tk_str_put(&a->v[a->n], s, n))
        return CDX_ENOMEM;
    a->n++;
    return 0;
}

/* Appends s as UTF-8, each maximal invalid subpart replaced by U+FFFD (Rust from_utf8_lossy,
 * WHATWG). When keep_tail, an incomplete but so-far-valid sequence at the very end is not
 * written; returns how many bytes were consumed. */
static size_t utf8_lossy(const uint8_t *s, size_t n, tk_str *o, bool keep_tail, int *rc)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) { *rc |= tk_str_putc(o, (char)c); i++; continue; }
        size_t need; uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c >= 0xE0 && c <= 0xEF) { need = 2; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
        else if (c >= 0xF0 && c <= 0xF4) { need = 3; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
        else { *rc |= tk_str_put(o, "\xEF\xBF\xBD", 3); i++; continue; }
        size_t k = 1;
        for (; k <= need && i + k < n; k++) {
            uint8_t d = s[i + k];
            if (k == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF))
                break;
        }
        if (k == need + 1) { *rc |= tk_str_put(o, s + i, need + 1); i += need + 1; continue; }
        if (i + k >= n && keep_tail)
            return i; /* valid so far, cut by the end */
        *rc |= tk_str_put(o, "\xEF\xBF\xBD", 3);
        i += k;
    }
    return i;
}

static bool is_special(const cdx_tok *t, int32_t id) { return (t->attr[id] & (CDX_TOK_CONTROL | CDX_TOK_UNKNOWN)) != 0; }

/* transformers' PreTrainedTokenizerBase.clean_up_tokenization */
static int hf_cleanup(const char *s, size_t n, tk_str *o)
{
    static const struct { const char *from, *to; } k_rep[] = {
        { " .", "." }, { " ?", "?" }, { " !", "!" }, { " ,", "," }, { " ' ", "'" }, { " n't", "n't" },
        { " 'm", "'m" }, { " 's", "'s" }, { " 've", "'ve" }, { " 're", "'re" },
    };
    tk_str a = {0}, b = {0};
    int rc = tk_str_put(&a, s, n);
    for (size_t r = 0; r < sizeof k_rep / sizeof *k_rep && !rc; r++) {
        b.len = 0;
        size_t fl = strlen(k_rep[r].from), tl = strlen(k_rep[r].to), i = 0;
        while (i < a.len && !rc) {
            const char *f = fl <= a.len - i ? memmem(a.s + i, a.len - i, k_rep[r].from, fl) : NULL;
            if (!f) break;
            size_t at = (size_t)(f - a.s);
            rc = tk_str_put(&b, a.s + i, at - i) || tk_str_put(&b, k_rep[r].to, tl);
            i = at + fl;
        }
        rc = rc || tk_str_put(&b, a.s + i, a.len - i);
        tk_str x = a; a = b; b = x;
    }
    rc = rc || tk_str_put(o, a.s, a.len);
    free(a.s); free(b.s);
    return rc ? CDX_ENOMEM : 0;
}

/* llama.cpp's clean_spaces pass (llama_vocab::impl::detokenize), for GGUF vocabularies. */
static void llama_cleanup(tk_str *o)
{
    char *t = o->s;
    size_t total = o->len, w;
    if (!total) return;
    w = 1;
    for (size_t i = 1; i < total; i++) {
        char x = t[i];
        if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ','))
            w--;
        t[w++] = x;
    }
    total = w; w = 1;
    for (size_t i = 1; i < total; i++) {
        char x = t[i];
        if (x == '\'' && i + 1 < total && t[i - 1] == ' ' && t[i + 1] == ' ') {
            w--;
            t[++i] = 0;
        }
        t[w++] = x;
    }
    total = w; w = 1;
    for (size_t i = 1; i < total; i++) {
        char x = t[i];
        if (t[i - 1] == ' ' && x == '\'' && i + 1 < total) {
            char x1 = t[i + 1];
            if (x1 == 's' || x1 == 'm')
                w--;
            else if (i + 2 < total && ((x1 == 'r' && t[i + 2] == 'e') || (x1 == 'v' && t[i + 2] == 'e')))
                w--;
        }
        t[w++] = x;
    }
    o->len = w;
    o->s[w] = 0;
}

static int byte_of_token(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>')
        return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static int dec_step(const tk_dec *d, strv *in, strv *out)
{
    int rc = 0;
    switch (d->type) {
    case DEC_BYTELEVEL: {
        tk_str bytes = {0};
        for (size_t i = 0; i < in->n && !rc; i++) {
            const char *s = in->v[i].s ? in->v[i].s : "";
            size_t n = in->v[i].len, adv, at = bytes.len;
            bool ok = true;
            for (size_t k = 0; k < n && ok; k += adv) {
                int b = tk_char_to_byte(tk_utf8_dec(s + k, n - k, &adv));
                if (b < 0) ok = false;
                else rc |= tk_str_putc(&bytes, (char)b);
            }
            if (!ok) {
                bytes.len = at;
                rc |= tk_str_put(&bytes, s, n);
            }
        }
        tk_str u = {0};
        utf8_lossy((const uint8_t *)(bytes.s ? bytes.s : ""), bytes.len, &u, false, &rc);
        rc |= strv_push(out, u.s ? u.s : "", u.len);
        free(bytes.s); free(u.s);
        break;
    }
    case DEC_METASPACE:
        for (size_t i = 0; i < in->n && !rc; i++) {
            tk_str o = {0};
            const char *s = in->v[i].s ? in->v[i].s : "";
            size_t n = in->v[i].len;
            for (size_t k = 0; k < n;) {
                if (d->a_len && n - k >= d->a_len && !memcmp(s + k, d->a, d->a_len)) {
                    if (!(i == 0 && d->prepend))
                        rc |= tk_str_putc(&o, ' ');
                    k += d->a_len;
                } else {
                    rc |= tk_str_putc(&o, s[k]);
                    k++;
                }
            }
            rc |= strv_push(out, o.s ? o.s : "", o.len);
            free(o.s);
        }
        break;
    case DEC_BYTEFALLBACK: {
        tk_str pend = {0};
        for (size_t i = 0; i <= in->n && !rc; i++) {
            int b = i < in->n ? byte_of_token(in->v[i].s, in->v[i].len) : -1;
            if (b >= 0) {
                rc |= tk_str_putc(&pend, (char)b);
                continue;
            }
            if (pend.len) {
                tk_str u = {0};
                int bad = 0;
                utf8_lossy((const uint8_t *)pend.s, pend.len, &u, false, &bad);
                /* tokenizers: the whole run must be valid UTF-8, else one U+FFFD per byte */
                if (u.len == pend.len && !memcmp(u.s, pend.s, pend.len))
                    rc |= strv_push(out, u.s, u.len);
                else
                    for (size_t k = 0; k < pend.len; k++)
                        rc |= strv_push(out, "\xEF\xBF\xBD", 3);
                free(u.s);
                pend.len = 0;
            }
            if (i < in->n)
                rc |= strv_push(out, in->v[i].s ? in->v[i].s : "", in->v[i].len);
        }
        free(pend.s);
        break;
    }
    case DEC_FUSE: {
        tk_str o = {0};
        rc |= tk_str_put(&o, "", 0);
        for (size_t i = 0; i < in->n; i++)
            rc |= tk_str_put(&o, in->v[i].s ? in->v[i].s : "", in->v[i].len);
        rc |= strv_push(out, o.s, o.len);
        free(o.s);
        break;
    }
    case DEC_STRIP:
        for (size_t i = 0; i < in->n && !rc; i++) {
            const char *s = in->v[i].s ? in->v[i].s : "";
            size_t b = 0, e = in->v[i].len, adv;
            for (size_t k = 0; k < d->strip_start && b < e; k++) {
                if (tk_utf8_dec(s + b, e - b, &adv) != d->strip_cp) break;
                b += adv;
            }
            for (size_t k = 0; k < d->strip_stop && e > b; k++) {
                size_t p = e - 1;
                while (p > b && ((uint8_t)s[p] & 0xC0) == 0x80) p--;
                if (tk_utf8_dec(s + p, e - p, &adv) != d->strip_cp) break;
                e = p;
            }
            rc |= strv_push(out, s + b, e - b);
        }
        break;
    case DEC_REPLACE:
        for (size_t i = 0; i < in->n && !rc; i++) {
            tk_str o = {0};
            const char *s = in->v[i].s ? in->v[i].s : "";
            size_t n = in->v[i].len, k = 0;
            if (d->re) {
                pcre2_match_data *md = pcre2_match_data_create_from_pattern(d->re, NULL);
                while (md && k <= n) {
                    if (pcre2_match(d->re, (PCRE2_SPTR)s, n, k, PCRE2_NO_UTF_CHECK, md, NULL) < 0) break;
                    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
                    rc |= tk_str_put(&o, s + k, ov[0] - k) | tk_str_put(&o, d->b, d->b_len);
                    if (ov[1] == ov[0]) {
                        if (ov[0] >= n) { k = n; break; }
                        rc |= tk_str_putc(&o, s[ov[0]]);
                        k = ov[0] + 1;
                    } else k = ov[1];
                }
                pcre2_match_data_free(md);
            } else if (d->a_len) {
                for (;;) {
                    const char *f = d->a_len <= n - k ? memmem(s + k, n - k, d->a, d->a_len) : NULL;
                    if (!f) break;
                    size_t at = (size_t)(f - s);
                    rc |= tk_str_put(&o, s + k, at - k) | tk_str_put(&o, d->b, d->b_len);
                    k = at + d->a_len;
                }
            }
            if (k < n)
                rc |= tk_str_put(&o, s + k, n - k);
            rc |= strv_push(out, o.s ? o.s : "", o.len);
            free(o.s);
        }
        break;
    case DEC_WORDPIECE:
        for (size_t i = 0; i < in->n && !rc; i++) {
            tk_str o = {0};
            const char *s = in->v[i].s ? in->v[i].s : "";
            size_t n = in->v[i].len;
            rc |= tk_str_put(&o, "", 0);
            if (i != 0) {
                if (d->a_len && n >= d->a_len && !memcmp(s, d->a, d->a_len)) { s += d->a_len; n -= d->a_len; }
                else rc |= tk_str_putc(&o, ' ');
            }
            rc |= tk_str_put(&o, s, n);
            if (d->cleanup) {
                tk_str c = {0};
                rc |= hf_cleanup(o.s, o.len, &c);
                rc |= strv_push(out, c.s ? c.s : "", c.len);
                free(c.s);
            } else {
                rc |= strv_push(out, o.s, o.len);
            }
            free(o.s);
        }
        break;
    case DEC_BPE_SUFFIX:
        for (size_t i = 0; i < in->n && !rc; i++) {
            tk_str o = {0};
            const char *s = in->v[i].s ? in->v[i].s : "";
            size_t n = in->v[i].len, k = 0;
            const char *rep = i + 1 == in->n ? "" : " ";
            for (;;) {
                const char *f = d->a_len && d->a_len <= n - k ? memmem(s + k, n - k, d->a, d->a_len) : NULL;
                if (!f) break;
                size_t at = (size_t)(f - s);
                rc |= tk_str_put(&o, s + k, at - k) | tk_str_put(&o, rep, strlen(rep));
                k = at + d->a_len;
            }
            rc |= tk_str_put(&o, s + k, n - k);
            rc |= strv_push(out, o.s, o.len);
            free(o.s);
        }
        break;
    default:
        for (size_t i = 0; i < in->n && !rc; i++)
            rc |= strv_push(out, in->v[i].s ? in->v[i].s : "", in->v[i].len);
    }
    return rc ? CDX_ENOMEM : 0;
}

int cdx_tok_decode(const cdx_tok *t, const int32_t *ids, size_t n, bool skip_special, char *out, size_t cap,
                   size_t *n_need, cdx_err *err)
{
    if (n_need)
        *n_need = 0;
    strv a = {0}, b = {0};
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        int32_t id = ids[i];
        if (id < 0 || (uint32_t)id >= t->n_vocab) {
            strv_free(&a);
            return cdx_err_set(err, CDX_ERANGE, "decode: token id %d is out of range (vocabulary size %u)", id, t->n_vocab);
        }
        if (skip_special && is_special(t, id))
            continue;
        rc = strv_push(&a, t->pool.s + t->off[id], t->len[id]);
    }
    for (size_t i = 0; i < t->n_dec && !rc; i++) {
        b.n = 0;
        rc = dec_step(&t->dec[i], &a, &b);
        strv x = a; a = b; b = x;
        for (size_t k = 0; k < b.n; k++) free(b.v[k].s);
        b.n = 0;
    }
    tk_str joined = {0};
    rc = rc || tk_str_put(&joined, "", 0);
    for (size_t i = 0; i < a.n && !rc; i++) {
        if (t->n_dec == 0 && i > 0)
            rc = tk_str_putc(&joined, ' ');
        rc = rc || tk_str_put(&joined, a.v[i].s ? a.v[i].s : "", a.v[i].len);
    }
    tk_str fin = {0};
    if (!rc) {
        if (t->cleanup_spaces)
            rc = hf_cleanup(joined.s, joined.len, &fin);
        else {
            if (t->llama_cleanup)
                llama_cleanup(&joined);
            rc = tk_str_put(&fin, joined.s, joined.len);
        }
    }
    if (!rc) {
        if (out && cap) {
            size_t k = fin.len < cap ? fin.len : cap;
            memcpy(out, fin.s, k);
            if (k < cap) out[k] = 0;
        }
        if (n_need) *n_need = fin.len;
    } else {
        rc = cdx_err_set(err, CDX_ENOMEM, "decode: out of memory");
    }
    free(joined.s); free(fin.s);
    strv_free(&a); strv_free(&b);
    return rc;
}

/* ---- pieces and streaming ---- */

int cdx_tok_piece(const cdx_tok *t, int32_t id, bool first, bool skip_special, char *out, size_t cap)
{
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return CDX_ERANGE;
    const char *s = t->pool.s + t->off[id];
    size_t n = t->len[id];
    uint8_t at = t->attr[id];
    tk_str o = {0};
    int rc = tk_str_put(&o, "", 0);
    int b;
    if (at & (CDX_TOK_CONTROL | CDX_TOK_UNKNOWN)) {
        if (!skip_special)
            rc |= tk_str_put(&o, s, n);
    } else if (at & CDX_TOK_USER_DEFINED) {
        rc |= tk_str_put(&o, s, n);
    } else if ((b = byte_of_token(s, n)) >= 0 && t->byte_tok[b] == id) {
        rc |= tk_str_putc(&o, (char)b);
    } else if (t->byte_level) {
        size_t adv;
        for (size_t k = 0; k < n; k += adv) {
            int c = tk_char_to_byte(tk_utf8_dec(s + k, n - k, &adv));
            if (c < 0) { o.len = 0; rc |= tk_str_put(&o, s, n); break; }
            rc |= tk_str_putc(&o, (char)c);
        }
    } else if (t->model == MODEL_WORDPIECE) {
        /* tokenizers' WordPiece decoder, which works token by token: after the first token, "##"
         * is dropped or a space put before; then the token's own clean-up (" ." -> "." ...) */
        tk_str w = {0};
        rc |= tk_str_put(&w, "", 0);
        if (!first && t->cont_prefix_len && n >= t->cont_prefix_len && !memcmp(s, t->cont_prefix, t->cont_prefix_len))
            rc |= tk_str_put(&w, s + t->cont_prefix_len, n - t->cont_prefix_len);
        else {
            if (!first) rc |= tk_str_putc(&w, ' ');
            rc |= tk_str_put(&w, s, n);
        }
        bool clean = false;
        for (size_t i = 0; i < t->n_dec; i++)
            clean |= t->dec[i].type == DEC_WORDPIECE && t->dec[i].cleanup;
        rc |= clean ? hf_cleanup(w.s ? w.s : "", w.len, &o) : tk_str_put(&o, w.s ? w.s : "", w.len);
        free(w.s);
    } else {
        /* SentencePiece-style: ▁ is a space; the decoder drops the text's first one (tokenizers'
         * Metaspace decoder: every ▁ of the first token) */
        bool drop = first && t->meta_first_all;
        for (size_t k = 0; k < n;) {
            if (n - k >= 3 && !memcmp(s + k, "\xe2\x96\x81", 3)) { if (!drop) rc |= tk_str_putc(&o, ' '); k += 3; }
            else rc |= tk_str_putc(&o, s[k++]);
        }
        if (first && t->spm_strip_first && o.len && o.s[0] == ' ') {
            memmove(o.s, o.s + 1, o.len - 1);
            o.len--;
        }
    }
    int r = rc ? CDX_ENOMEM : (int)o.len;
    if (!rc && out && cap)
        memcpy(out, o.s, o.len < cap ? o.len : cap);
    free(o.s);
    return r;
}

void cdx_tok_stream_init(cdx_tok_stream *s, const cdx_tok *tok, bool skip_special)
{
    memset(s, 0, sizeof *s);
    s->tok = tok;
    s->first = true;
    s->skip_special = skip_special;
}

static int stream_emit(cdx_tok_stream *s, const uint8_t *p, size_t n, bool final, char *out, size_t cap)
{
    tk_str o = {0};
    int rc = tk_str_put(&o, "", 0);
    size_t used = utf8_lossy(p, n, &o, !final, &rc);
    s->n_pend = n - used;
    if (s->n_pend > sizeof s->pend) s->n_pend = 0;
    memmove(s->pend, p + used, s->n_pend);
    int r = rc ? CDX_ENOMEM : (int)(o.len < cap ? o.len : cap);
    if (!rc && out)
        memcpy(out, o.s, (size_t)r);
    free(o.s);
    return r;
}

bool cdx_tok_stream_skips(const cdx_tok_stream *s, int32_t id)
{
    return s->skip_special && !(s->keep_marks && cdx_tok_is_mark(s->tok, id));
}

int cdx_tok_stream_put(cdx_tok_stream *s, int32_t id, char *out, size_t cap)
{
    char buf[512];
    const bool skip = cdx_tok_stream_skips(s, id);
    int n = cdx_tok_piece(s->tok, id, s->first, skip, buf, sizeof buf);
    if (n < 0)
        return n;
    char *big = NULL;
    const char *src = buf;
    if ((size_t)n > sizeof buf) {
        if (!(big = malloc((size_t)n)))
            return CDX_ENOMEM;
        cdx_tok_piece(s->tok, id, s->first, skip, big, (size_t)n);
        src = big;
    }
    /* the decoder strips the first char of the whole text: after any token that is kept, the
     * next one is no longer first (even when this one came out empty) */
    if (!(skip && (s->tok->attr[id] & (CDX_TOK_CONTROL | CDX_TOK_UNKNOWN))))
        s->first = false;
    uint8_t *all = malloc(s->n_pend + (size_t)n + 1);
    if (!all) { free(big); return CDX_ENOMEM; }
    memcpy(all, s->pend, s->n_pend);
    memcpy(all + s->n_pend, src, (size_t)n);
    int r = stream_emit(s, all, s->n_pend + (size_t)n, false, out, cap);
    free(all); free(big);
    return r;
}

int cdx_tok_stream_flush(cdx_tok_stream *s, char *out, size_t cap)
{
    uint8_t tmp[8];
    size_t n = s->n_pend;
    memcpy(tmp, s->pend, n);
    return stream_emit(s, tmp, n, true, out, cap);
}
