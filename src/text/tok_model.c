/* Models: one pre-token (word) in, ids out.
 *   BPE: merges by rank, lowest first, leftmost on a tie (tokenizers' and llama.cpp's order),
 *        with a binary heap over a linked list of symbols: O(n log n) per word.
 *   SPM: llama.cpp's SentencePiece merge by piece score, highest first, with byte fallback.
 *   WordPiece: greedy longest match (HF "##" continuation, or llama.cpp's "▁" word start).
 * Results of BPE/SPM are cached per word text (a word repeats a lot in real text). */
#include "text/tok_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct { int32_t id; int32_t prev, next; uint32_t off, n; } sym;
typedef struct { uint64_t key; int32_t pos; int32_t l, r; } hent; /* key: rank (BPE) or order (SPM) */

struct tk_scratch {
    sym *s; size_t ns, cap_s;
    hent *h; size_t nh, cap_h;
    tk_str w;
    tk_ids ids;
};

tk_scratch *tk_scratch_new(void) { return calloc(1, sizeof(tk_scratch)); }

void tk_scratch_free(tk_scratch *s)
{
    if (!s) return;
    free(s->s); free(s->h); free(s->w.s); free(s->ids.v);
    free(s);
}

static int sym_push(tk_scratch *sc, int32_t id, uint32_t off, uint32_t n)
{
    if (sc->ns == sc->cap_s) {
        size_t c = sc->cap_s ? sc->cap_s * 2 : 64;
        sym *p = realloc(sc->s, c * sizeof *p);
        if (!p) return CDX_ENOMEM;
        sc->s = p; sc->cap_s = c;
    }
    int32_t i = (int32_t)sc->ns++;
    sc->s[i] = (sym){ id, i - 1, -1, off, n };
    if (i > 0)
        sc->s[i - 1].next = i;
    return 0;
}

static bool h_less(const hent *a, const hent *b) { return a->key < b->key || (a->key == b->key && a->pos < b->pos); }

static int h_push(tk_scratch *sc, hent e)
{
    if (sc->nh == sc->cap_h) {
        size_t c = sc->cap_h ? sc->cap_h * 2 : 64;
        hent *p = realloc(sc->h, c * sizeof *p);
        if (!p) return CDX_ENOMEM;
        sc->h = p; sc->cap_h = c;
    }
    size_t i = sc->nh++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!h_less(&e, &sc->h[p])) break;
        sc->h[i] = sc->h[p];
        i = p;
    }
    sc->h[i] = e;
    return 0;
}

static hent h_pop(tk_scratch *sc)
{
    hent top = sc->h[0], last = sc->h[--sc->nh];
    size_t i = 0, n = sc->nh;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h_less(&sc->h[c + 1], &sc->h[c])) c++;
        if (!h_less(&sc->h[c], &last)) break;
        sc->h[i] = sc->h[c];
        i = c;
    }
    if (n)
        sc->h[i] = last;
    return top;
}

/* ---- BPE ---- */

static bool merge_of(const cdx_tok *t, int32_t l, int32_t r, uint32_t *rank, int32_t *nid)
{
    const tk_pairmap *m = &t->merges;
    if (!m->key || l < 0 || r < 0)
        return false;
    uint64_t k = (((uint64_t)(uint32_t)l << 32) | (uint32_t)r) + 1;
    uint64_t h = k;
    h ^= h >> 31; h *= 0x9e3779b97f4a7c15ull; h ^= h >> 29;
    for (uint32_t j = (uint32_t)h & m->mask;; j = (j + 1) & m->mask) {
        if (!m->key[j]) return false;
        if (m->key[j] == k) {
            *rank = (uint32_t)(m->val[j] >> 32);
            *nid = (int32_t)(uint32_t)m->val[j];
            return true;
        }
    }
}

static int bpe_pair(const cdx_tok *t, tk_scratch *sc, int32_t a)
{
    if (a < 0) return 0;
    int32_t b = sc->s[a].next;
    if (b < 0) return 0;
    uint32_t rank; int32_t nid;
    if (!merge_of(t, sc->s[a].id, sc->s[b].id, &rank, &nid))
        return 0;
    return h_push(sc, (hent){ rank, a, sc->s[a].id, sc->s[b].id });
}

static int bpe_word(const cdx_tok *t, tk_scratch *sc, const char *w, size_t n, tk_ids *out)
{
    sc->ns = sc->nh = 0;
    int rc;
    if (t->byte_level) {
        if (t->ignore_merges) {
            sc->w.len = 0;
            for (size_t i = 0; i < n; i++) {
                char u[4];
                if ((rc = tk_str_put(&sc->w, u, (size_t)tk_byte_to_utf8((uint8_t)w[i], u))))
                    return rc;
            }
            int32_t id = tk_lookup(t, sc->w.s, sc->w.len);
            if (id >= 0)
                return tk_ids_push(out, id);
        }
        for (size_t i = 0; i < n; i++) {
            int32_t id = t->byte_sym[(uint8_t)w[i]];
            if (id < 0) id = t->unk;
            if ((rc = sym_push(sc, id, (uint32_t)i, 1)))
                return rc;
        }
    } else {
        if (t->ignore_merges) {
            int32_t id = tk_lookup(t, w, n);
            if (id >= 0)
                return tk_ids_push(out, id);
        }
        size_t adv;
        bool prev_unk = false;
        for (size_t i = 0; i < n; i += adv) {
            adv = tk_utf8_len((uint8_t)w[i]);
            if (adv > n - i) adv = n - i;
            sc->w.len = 0;
            if (i > 0 && t->cont_prefix_len && (rc = tk_str_put(&sc->w, t->cont_prefix, t->cont_prefix_len)))
                return rc;
            if ((rc = tk_str_put(&sc->w, w + i, adv)))
                return rc;
            if (i + adv == n && t->eow_suffix_len && (rc = tk_str_put(&sc->w, t->eow_suffix, t->eow_suffix_len)))
                return rc;
            int32_t id = tk_lookup(t, sc->w.s, sc->w.len);
            if (id >= 0) {
                if ((rc = sym_push(sc, id, (uint32_t)i, (uint32_t)adv))) return rc;
                prev_unk = false;
                continue;
            }
            if (t->byte_fallback) {
                bool all = true;
                for (size_t k = 0; k < adv; k++)
                    if (t->byte_tok[(uint8_t)w[i + k]] < 0) all = false;
                if (all) {
                    for (size_t k = 0; k < adv; k++)
                        if ((rc = sym_push(sc, t->byte_tok[(uint8_t)w[i + k]], (uint32_t)(i + k), 1))) return rc;
                    prev_unk = false;
                    continue;
                }
            }
            if (t->unk < 0)
                continue; /* tokenizers drops a char it cannot represent when there is no unk token */
            if (t->fuse_unk && prev_unk) {
                sc->s[sc->ns - 1].n += (uint32_t)adv;
                continue;
            }
            if ((rc = sym_push(sc, t->unk, (uint32_t)i, (uint32_t)adv))) return rc;
            prev_unk = true;
        }
    }
    for (int32_t i = 0; i + 1 < (int32_t)sc->ns; i++)
        if ((rc = bpe_pair(t, sc, i)))
            return rc;
    while (sc->nh) {
        hent e = h_pop(sc);
        sym *a = &sc->s[e.pos];
        if (a->n == 0 || a->id != e.l || a->next < 0)
            continue;
        sym *b = &sc->s[a->next];
        if (b->id != e.r)
            continue;
        uint32_t rank; int32_t nid;
        merge_of(t, e.l, e.r, &rank, &nid);
        a->id = nid;
        a->n += b->n;
        b->n = 0;
        a->next = b->next;
        if (b->next >= 0)
            sc->s[b->next].prev = e.pos;
        if ((rc = bpe_pair(t, sc, a->prev)) || (rc = bpe_pair(t, sc, e.pos)))
            return rc;
    }
    for (int32_t i = sc->ns ? 0 : -1; i >= 0; i = sc->s[i].next)
        if (sc->s[i].id >= 0 && (rc = tk_ids_push(out, sc->s[i].id)))
            return rc;
    return 0;
}

/* ---- SentencePiece (llama.cpp's llm_tokenizer_spm) ---- */

static int spm_pair(const cdx_tok *t, tk_scratch *sc, const char *w, int32_t a)
{
    if (a < 0) return 0;
    int32_t b = sc->s[a].next;
    if (b < 0) return 0;
    int32_t id = tk_lookup(t, w + sc->s[a].off, sc->s[a].n + sc->s[b].n);
    if (id < 0)
        return 0;
    /* highest score first: order the float's bits descending; then leftmost first */
    float f = t->score[id];
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* monotonic map of float to uint */
    return h_push(sc, (hent){ (uint64_t)(0xFFFFFFFFu - u), a, (int32_t)(sc->s[a].n + sc->s[b].n), id });
}

static int spm_word(const cdx_tok *t, tk_scratch *sc, const char *w, size_t n, tk_ids *out)
{
    sc->ns = sc->nh = 0;
    int rc;
    for (size_t i = 0, adv; i < n; i += adv) {
        adv = tk_utf8_len((uint8_t)w[i]);
        if (adv > n - i) adv = n - i;
        if ((rc = sym_push(sc, -1, (uint32_t)i, (uint32_t)adv)))
            return rc;
    }
    for (int32_t i = 0; i + 1 < (int32_t)sc->ns; i++)
        if ((rc = spm_pair(t, sc, w, i)))
            return rc;
    while (sc->nh) {
        hent e = h_pop(sc);
        sym *a = &sc->s[e.pos];
        if (a->n == 0 || a->next < 0)
            continue;
        sym *b = &sc->s[a->next];
        if (b->n == 0 || a->n + b->n != (uint32_t)e.l)
            continue;
        a->n += b->n;
        b->n = 0;
        a->next = b->next;
        if (b->next >= 0)
            sc->s[b->next].prev = e.pos;
        if ((rc = spm_pair(t, sc, w, a->prev)) || (rc = spm_pair(t, sc, w, e.pos)))
            return rc;
    }
    for (int32_t i = sc->ns ? 0 : -1; i >= 0; i = sc->s[i].next) {
        int32_t id = tk_lookup(t, w + sc->s[i].off, sc->s[i].n);
        if (id >= 0) {
            if ((rc = tk_ids_push(out, id))) return rc;
            continue;
        }
        for (uint32_t k = 0; k < sc->s[i].n; k++) {
            int32_t b = t->byte_tok[(uint8_t)w[sc->s[i].off + k]];
            if (b < 0) b = t->unk;
            if (b >= 0 && (rc = tk_ids_push(out, b))) return rc;
        }
    }
    return 0;
}

/* ---- WordPiece ---- */

static int wordpiece_word(const cdx_tok *t, tk_scratch *sc, const char *w, size_t n, tk_ids *out)
{
    size_t nchars = 0;
    for (size_t i = 0; i < n; i += tk_utf8_len((uint8_t)w[i]))
        nchars++;
    if (nchars > t->wp_max_chars)
        return t->unk >= 0 ? tk_ids_push(out, t->unk) : 0;
    size_t first = out->n, start = 0;
    int rc;
    while (start < n) {
        size_t end = n;
        int32_t found = -1;
        while (end > start) {
            sc->w.len = 0;
            if (start > 0 && (rc = tk_str_put(&sc->w, t->cont_prefix, t->cont_prefix_len)))
                return rc;
            if ((rc = tk_str_put(&sc->w, w + start, end - start)))
                return rc;
            found = tk_lookup(t, sc->w.s, sc->w.len);
            if (found >= 0)
                break;
            do end--; while (end > start && ((uint8_t)w[end] & 0xC0) == 0x80);
        }
        if (found < 0) {
            out->n = first;
            return t->unk >= 0 ? tk_ids_push(out, t->unk) : 0;
        }
        if ((rc = tk_ids_push(out, found)))
            return rc;
        start = end;
    }
    return 0;
}

/* llama.cpp's WPM: "▁" + word, longest vocabulary match at each position; any gap -> one unk. */
static int wpm_llama_word(const cdx_tok *t, tk_scratch *sc, const char *w, size_t n, tk_ids *out)
{
    sc->w.len = 0;
    int rc;
    if ((rc = tk_str_put(&sc->w, "\xe2\x96\x81", 3)) || (rc = tk_str_put(&sc->w, w, n)))
        return rc;
    const char *s = sc->w.s;
    size_t len = sc->w.len, first = out->n;
    for (size_t i = 0; i < len; i++) {
        size_t j = i + t->max_tok_len + 1 < len ? i + t->max_tok_len + 1 : len;
        int32_t id = -1;
        for (; j > i; j--)
            if ((id = tk_lookup(t, s + i, j - i)) >= 0)
                break;
        if (id < 0) {
            out->n = first;
            break;
        }
        if ((rc = tk_ids_push(out, id)))
            return rc;
        i = j - 1;
    }
    if (out->n == first && t->unk >= 0)
        return tk_ids_push(out, t->unk);
    return 0;
}

/* ---- word cache ---- */

#define CACHE_MAX_ENTRIES (1u << 17)
#define CACHE_MAX_WORD 256

void tk_cache_init(tk_cache *c)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
}

void tk_cache_free(tk_cache *c)
{
    pthread_mutex_destroy(&c->mu);
    free(c->slot); free(c->ent); free(c->keys.s); free(c->ids.v);
}

static bool cache_get(tk_cache *c, uint64_t h, const char *w, size_t n, tk_ids *out)
{
    bool hit = false;
    pthread_mutex_lock(&c->mu);
    if (c->slot)
        for (uint32_t j = (uint32_t)h & c->mask; c->slot[j]; j = (j + 1) & c->mask) {
            struct tk_cent *e = &c->ent[c->slot[j] - 1];
            if (e->h == h && e->key_len == n && !memcmp(c->keys.s + e->key_off, w, n)) {
                /* a word without ids (no unk token) leaves ids.v NULL: no offset applied to it */
                hit = !e->n_ids || tk_ids_append(out, c->ids.v + e->ids_off, e->n_ids) == 0;
                break;
            }
        }
    pthread_mutex_unlock(&c->mu);
    return hit;
}

static void cache_put(tk_cache *c, uint64_t h, const char *w, size_t n, const int32_t *ids, size_t n_ids)
{
    pthread_mutex_lock(&c->mu);
    if (!c->slot || c->n_ent >= CACHE_MAX_ENTRIES) {
        /* start over rather than grow without bound */
        free(c->slot);
        c->mask = CACHE_MAX_ENTRIES * 2 - 1;
        c->slot = calloc((size_t)c->mask + 1, sizeof(uint32_t));
        c->n_ent = 0; c->keys.len = 0; c->ids.n = 0;
        if (!c->slot)
            goto out;
    }
    if (c->n_ent == c->cap_ent) {
        size_t nc = c->cap_ent ? c->cap_ent * 2 : 1024;
        struct tk_cent *p = realloc(c->ent, nc * sizeof *p);
        if (!p) goto out;
        c->ent = p; c->cap_ent = nc;
    }
    size_t koff = c->keys.len, ioff = c->ids.n;
    if (tk_str_put(&c->keys, w, n) || tk_ids_append(&c->ids, ids, n_ids)) {
        c->keys.len = koff; c->ids.n = ioff;
        goto out;
    }
    uint32_t j = (uint32_t)h & c->mask;
    while (c->slot[j]) j = (j + 1) & c->mask;
    c->ent[c->n_ent] = (struct tk_cent){ h, (uint32_t)koff, (uint32_t)n, (uint32_t)ioff, (uint32_t)n_ids };
    c->slot[j] = (uint32_t)++c->n_ent;
out:
    pthread_mutex_unlock(&c->mu);
}

int tk_model_word(const cdx_tok *t, tk_scratch *sc, const char *w, size_t n, tk_ids *out)
{
    if (n == 0)
        return 0;
    if (t->model == MODEL_WORDPIECE)
        return wordpiece_word(t, sc, w, n, out);
    if (t->model == MODEL_WPM_LLAMA)
        return wpm_llama_word(t, sc, w, n, out);
    bool use_cache = n <= CACHE_MAX_WORD && t->cache.keys.len < ((size_t)1 << 30);
    uint64_t h = 0;
    tk_cache *c = (tk_cache *)&t->cache; /* the cache is the one mutable part; it has its own lock */
    if (use_cache) {
        h = tk_hash(w, n);
        if (cache_get(c, h, w, n, out))
            return 0;
    }
    size_t before = out->n;
    int rc = t->model == MODEL_SPM ? spm_word(t, sc, w, n, out) : bpe_word(t, sc, w, n, out);
    if (!rc && use_cache)
        cache_put(c, h, w, n, out->n > before ? out->v + before : NULL, out->n - before);
    return rc;
}
