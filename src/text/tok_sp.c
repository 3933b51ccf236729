/* SentencePiece tokenizer.model: a protobuf ModelProto (sentencepiece_model.proto), read by hand.
 *   ModelProto      { repeated SentencePiece pieces = 1; TrainerSpec trainer_spec = 2;
 *                     NormalizerSpec normalizer_spec = 3; }
 *   SentencePiece   { string piece = 1; float score = 2; Type type = 3 (NORMAL=1 UNKNOWN=2 CONTROL=3
 *                     USER_DEFINED=4 UNUSED=5 BYTE=6); }
 *   TrainerSpec     { ModelType model_type = 3 (UNIGRAM=1 BPE=2 WORD=3 CHAR=4); bool byte_fallback = 35;
 *                     int32 unk_id = 40; bos_id = 41; eos_id = 42; pad_id = 43; }
 *   NormalizerSpec  { bool add_dummy_prefix = 3; }
 * BPE models run as llama.cpp runs them (merges by piece score, byte fallback). */
#include "text/tok_internal.h"

#include <stdlib.h>
#include <string.h>

int tk_apply_config_text(cdx_tok *t, const char *cfg_text, size_t cfg_len, cdx_err *err);

typedef struct { const uint8_t *p, *end; } rd;

static bool varint(rd *r, uint64_t *v)
{
    *v = 0;
    for (int s = 0; s < 64; s += 7) {
        if (r->p >= r->end) return false;
        uint8_t b = *r->p++;
        *v |= (uint64_t)(b & 0x7F) << s;
        if (!(b & 0x80)) return true;
    }
    return false;
}

/* Reads one field header and its payload: LEN fields give (sub, sub_end); others give v. */
static bool field(rd *r, uint32_t *num, uint32_t *wt, uint64_t *v, rd *sub)
{
    uint64_t key;
    if (!varint(r, &key) || (key >> 3) == 0 || (key >> 3) > 0x1FFFFFFF)
        return false;
    *num = (uint32_t)(key >> 3);
    *wt = (uint32_t)(key & 7);
    switch (*wt) {
    case 0: return varint(r, v);
    case 1: if (r->end - r->p < 8) return false; memcpy(v, r->p, 8); r->p += 8; return true;
    case 5: { if (r->end - r->p < 4) return false; uint32_t x; memcpy(&x, r->p, 4); *v = x; r->p += 4; return true; }
    case 2: {
        uint64_t n;
        if (!varint(r, &n) || n > (uint64_t)(r->end - r->p)) return false;
        sub->p = r->p; sub->end = r->p + n;
        r->p += n;
        return true;
    }
    default: return false;
    }
}

int tk_load_spm_model(cdx_tok *t, const uint8_t *d, size_t n, const char *cfg, size_t cfg_len, cdx_err *err)
{
    rd r = { d, d + n }, sub;
    uint32_t num, wt;
    uint64_t v;
    uint32_t n_pieces = 0;
    int model_type = 1;
    bool add_dummy_prefix = true;
    int64_t ids[4] = { 0, 1, 2, -1 }; /* unk, bos, eos, pad */
    int rc;
    /* pass 1: count pieces, read the specs */
    while (r.p < r.end) {
        if (!field(&r, &num, &wt, &v, &sub))
            return cdx_err_set(err, CDX_EFORMAT, "%s: not a SentencePiece model (bad protobuf at byte %zu)", t->name,
                               (size_t)(r.p - d));
        if (num == 1 && wt == 2) n_pieces++;
        else if (num == 2 && wt == 2) {
            rd s = sub; rd x;
            while (s.p < s.end) {
                if (!field(&s, &num, &wt, &v, &x))
                    return cdx_err_set(err, CDX_EFORMAT, "%s: trainer_spec is malformed", t->name);
                if (num == 3 && wt == 0) model_type = (int)v;
                else if (num == 35 && wt == 0) t->byte_fallback = v != 0;
                else if (num >= 40 && num <= 43 && wt == 0) ids[num - 40] = (int64_t)v;
            }
        } else if (num == 3 && wt == 2) {
            rd s = sub; rd x;
            while (s.p < s.end) {
                if (!field(&s, &num, &wt, &v, &x))
                    return cdx_err_set(err, CDX_EFORMAT, "%s: normalizer_spec is malformed", t->name);
                if (num == 3 && wt == 0) add_dummy_prefix = v != 0;
            }
        }
    }
    if (model_type != 2)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: trainer_spec.model_type is %d; only BPE (2) SentencePiece models are "
                           "supported", t->name, model_type);
    if ((rc = tk_set_vocab_size(t, n_pieces, err)) < 0)
        return rc;
    t->model = MODEL_SPM;
    /* pass 2: the pieces */
    r.p = d;
    uint32_t id = 0;
    while (r.p < r.end) {
        field(&r, &num, &wt, &v, &sub);
        if (!(num == 1 && wt == 2)) continue;
        rd s = sub, x;
        const uint8_t *ps = NULL; size_t pl = 0;
        float score = 0;
        int type = 1;
        while (s.p < s.end) {
            if (!field(&s, &num, &wt, &v, &x))
                return cdx_err_set(err, CDX_EFORMAT, "%s: pieces[%u] is malformed", t->name, id);
            if (num == 1 && wt == 2) { ps = x.p; pl = (size_t)(x.end - x.p); }
            else if (num == 2 && wt == 5) { uint32_t u = (uint32_t)v; memcpy(&score, &u, 4); }
            else if (num == 3 && wt == 0) type = (int)v;
        }
        if (!ps || cdx_utf8_check((const char *)ps, pl) != pl)
            return cdx_err_set(err, CDX_EFORMAT, "%s: pieces[%u] has no valid UTF-8 piece", t->name, id);
        static const uint8_t k_type[] = { 0, CDX_TOK_NORMAL, CDX_TOK_UNKNOWN, CDX_TOK_CONTROL, CDX_TOK_USER_DEFINED,
                                          CDX_TOK_UNUSED, CDX_TOK_BYTE };
        uint8_t attr = type >= 1 && type <= 6 ? k_type[type] : CDX_TOK_NORMAL;
        if ((rc = tk_set_token(t, id, (const char *)ps, pl, attr, err)) < 0)
            return rc;
        t->score[id] = score;
        if (attr & (CDX_TOK_CONTROL | CDX_TOK_USER_DEFINED | CDX_TOK_UNKNOWN))
            if (tk_add_added(t, (int32_t)id, false, false, false, (attr & CDX_TOK_USER_DEFINED) == 0, false) < 0)
                return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        id++;
    }
    t->unk = ids[0] >= 0 && ids[0] < n_pieces ? (int32_t)ids[0] : -1;
    t->bos = ids[1] >= 0 && ids[1] < n_pieces ? (int32_t)ids[1] : -1;
    t->eos = ids[2] >= 0 && ids[2] < n_pieces ? (int32_t)ids[2] : -1;
    t->pad = ids[3] >= 0 && ids[3] < n_pieces ? (int32_t)ids[3] : -1;

    tk_pre *p = calloc(1, sizeof *p);
    tk_dec *dd = calloc(4, sizeof *dd);
    if (!p || !dd) { free(p); free(dd); return cdx_err_set(err, CDX_ENOMEM, "out of memory"); }
    p->type = PRE_METASPACE;
    p->str = tk_strndup("\xe2\x96\x81", 3);
    p->str_len = 3;
    p->prepend_scheme = add_dummy_prefix ? PREPEND_AFTER_SPECIAL : PREPEND_NEVER;
    t->pre = p; t->n_pre = 1;
    dd[0] = (tk_dec){ .type = DEC_REPLACE, .a = tk_strndup("\xe2\x96\x81", 3), .a_len = 3, .b = tk_strndup(" ", 1), .b_len = 1 };
    dd[1] = (tk_dec){ .type = DEC_BYTEFALLBACK };
    dd[2] = (tk_dec){ .type = DEC_FUSE };
    t->dec = dd; t->n_dec = 3;
    if (add_dummy_prefix) {
        dd[3] = (tk_dec){ .type = DEC_STRIP, .strip_cp = ' ', .strip_start = 1 };
        t->n_dec = 4;
        t->spm_strip_first = true;
    }
    if (!p->str || !dd[0].a || !dd[0].b)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    if ((rc = tk_finish(t, err)) < 0)
        return rc;
    /* BOS by default, as transformers' LlamaTokenizer (add_bos_token=True, add_eos_token=False);
     * tokenizer_config.json may change it. */
    t->has_pp = true;
    if (t->bos >= 0) {
        t->pp_pre = malloc(sizeof(int32_t));
        if (!t->pp_pre) return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        t->pp_pre[t->n_pp_pre++] = t->bos;
    }
    return tk_apply_config_text(t, cfg, cfg_len, err);
}
