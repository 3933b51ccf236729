/* The server's compiled grammars, by their text: a request that constrains its output the way an
 * earlier one did (the same response_format schema, GBNF or tools) gets the same compiled grammar,
 * and with it the token-mask caches the earlier requests filled (docs/grammar.md, "Masks in
 * microseconds"): its masks are then warm from the first token. Least recently used out first; a
 * grammar evicted while requests hold it lives until the last of them ends (cdx_grammar_ref). */
#include "server/sv_int.h"
#include "caldrix/grammar.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *key;        /* kind, name, text */
    size_t len;
    uint64_t hash;
    uint64_t used;    /* the clock when last handed out */
    cdx_grammar *g;
} sv_grammar_slot;

struct sv_grammars {
    pthread_mutex_t mu;
    sv_grammar_slot slot[SV_GRAMMARS];
    uint64_t clock;
    int64_t hits, misses;
};

sv_grammars *sv_grammars_new(void)
{
    sv_grammars *c = calloc(1, sizeof *c);
    if (c && pthread_mutex_init(&c->mu, NULL)) {
        free(c);
        return NULL;
    }
    return c;
}

void sv_grammars_free(sv_grammars *c)
{
    if (!c)
        return;
    for (int i = 0; i < SV_GRAMMARS; i++) {
        free(c->slot[i].key);
        cdx_grammar_free(c->slot[i].g);
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static uint64_t fnv(const char *s, size_t n)
{
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 0x100000001B3ull;
    return h;
}

void sv_grammars_counts(sv_grammars *c, int64_t *hits, int64_t *misses)
{
    pthread_mutex_lock(&c->mu);
    *hits = c->hits;
    *misses = c->misses;
    pthread_mutex_unlock(&c->mu);
}

int sv_grammars_compile(sv_grammars *c, bool gbnf, const char *name, const char *text, size_t len, cdx_grammar **out,
                        cdx_err *err)
{
    *out = NULL;
    if (!c)
        return gbnf ? cdx_grammar_from_gbnf(text, len, name, out, err)
                    : cdx_grammar_from_json_schema(text, len, name, out, err);
    /* the key: kind, then name (messages name it), then the text; a NULL schema is any JSON object */
    const size_t nl = strlen(name), kl = 2 + nl + 1 + (text ? len : 0);
    char *key = malloc(kl);
    if (!key)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    key[0] = gbnf ? 'g' : text ? 's' : 'o';
    key[1] = 0;
    memcpy(key + 2, name, nl + 1);
    if (text)
        memcpy(key + 2 + nl + 1, text, len);
    const uint64_t h = fnv(key, kl);
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < SV_GRAMMARS; i++) {
        sv_grammar_slot *s = &c->slot[i];
        if (s->g && s->hash == h && s->len == kl && !memcmp(s->key, key, kl)) {
            s->used = ++c->clock;
            c->hits++;
            *out = cdx_grammar_ref(s->g);
            pthread_mutex_unlock(&c->mu);
            free(key);
            return CDX_OK;
        }
    }
    c->misses++;
    pthread_mutex_unlock(&c->mu);
    /* compiled outside the lock: a large schema must not hold up other requests */
    int rc = gbnf ? cdx_grammar_from_gbnf(text, len, name, out, err)
                  : cdx_grammar_from_json_schema(text, len, name, out, err);
    if (rc) {
        free(key);
        return rc;
    }
    pthread_mutex_lock(&c->mu);
    int victim = 0;
    for (int i = 0; i < SV_GRAMMARS; i++) {
        if (!c->slot[i].g) {
            victim = i;
            break;
        }
        if (c->slot[i].used < c->slot[victim].used)
            victim = i;
    }
    sv_grammar_slot *s = &c->slot[victim];
    char *old_key = s->key;
    cdx_grammar *old = s->g;
    *s = (sv_grammar_slot){ key, kl, h, ++c->clock, cdx_grammar_ref(*out) };
    pthread_mutex_unlock(&c->mu);
    free(old_key);
    cdx_grammar_free(old); /* requests holding it keep it alive */
    return CDX_OK;
}
