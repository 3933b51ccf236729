/* Fast scanner for tokenizer.json's model.vocab and model.merges (see tok_json_fast.c). */
#ifndef CDX_TOK_JSON_FAST_H
#define CDX_TOK_JSON_FAST_H

#include "text/tok_internal.h"

/* vocab: a = token text, id; merges: a = left, b = right (offsets into pool) */
typedef struct { size_t a_off, a_len, b_off, b_len; long long id; } tk_json_entry;

typedef struct {
    tk_str pool;
    tk_json_entry *vocab; size_t n_vocab;
    tk_json_entry *merges; size_t n_merges;
    bool has_merges;
    char *rest; size_t rest_len;   /* the document with vocab -> {} and merges -> [] */
} tk_json_fast;

/* 0 on success; -1 when the file is not in the expected shape (parse it all with jansson). */
int tk_json_fast_split(const char *json, size_t len, tk_json_fast *f);
void tk_json_fast_free(tk_json_fast *f);

#endif
