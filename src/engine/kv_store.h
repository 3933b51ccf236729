/* Inside the engine layer: the file-backed prefix store (kv_store.c). */
#ifndef CDX_KV_STORE_H
#define CDX_KV_STORE_H

#include "caldrix/base.h"

typedef struct {
    uint32_t positions;        /* per block */
    uint64_t n_layer, kv_dim;
    uint64_t n_elems;          /* elements of K (and of V) in one block */
    uint32_t elem_bytes;       /* 4 (f32) or 2 (f16) */
    uint64_t state_bytes;      /* a hybrid model's recurrent-state snapshot, when a block has one; 0: none */
    uint8_t root[32];          /* model fingerprint + KV type: a file of any other is refused */
} kv_store_shape;

/* Makes dir if it is missing; an error when it is not a writable directory. */
int kv_store_open(const char *dir, cdx_err *err);
bool kv_store_has(const char *dir, const uint8_t key[32]);
/* 0 written (replacing a file of that key), -1 not (the store is a cache: a failed write loses nothing). */
int kv_store_write(const char *dir, const kv_store_shape *s, const uint8_t key[32], const void *k, const void *v,
                   const void *snap);  /* snap: the state snapshot after the block (state_bytes), or NULL */
/* 0 read into k and v (and *snap: a malloc'd snapshot, or NULL when the file has none); 1 no such
 * file; -1 a file that fails any check (it is deleted). */
int kv_store_read(const char *dir, const kv_store_shape *s, const uint8_t key[32], void *k, void *v, void **snap);

#endif
