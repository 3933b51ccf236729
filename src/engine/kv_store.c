/* The prefix store: full KV blocks in files named by their prefix key, so that a later request
 * with the same prefix, or another process, reads them back instead of computing them (seed
 * 002's kvStore). A file is trusted only when every field of its header matches what this engine
 * would have written and its payload's SHA-256 matches: anything else (truncated, corrupt, from
 * another model or KV type) is deleted and the block is computed as if it had never been stored.
 *
 *   file = header (below) | K elements | V elements     (little-endian, as the engine holds them)
 *          [| the recurrent-state snapshot after the block: a hybrid model's, when has_state]
 */
#include "kv_store.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STORE_MAGIC "CDXKVB02"
/* 3: a hybrid model's state holds its chunk's k rows by columns (deltanet.h); files of version 2
 * are deleted and recomputed like any other mismatch */
#define STORE_VERSION 3

typedef struct {
    char magic[8];
    uint32_t version, positions;   /* STORE_VERSION, CDX_KV_BLOCK */
    uint32_t elem_bytes, has_state; /* 4 (f32) or 2 (f16); 1: a state snapshot of shape.state_bytes follows V */
    uint64_t n_layer, kv_dim, n_elems; /* n_elems: of K (and of V) */
    uint8_t key[32];               /* this block's prefix key (the file's name) */
    uint8_t root[32];              /* the engine's root key: model fingerprint and KV type */
    uint8_t digest[32];            /* SHA-256 of the payload */
} store_header;

static void key_path(const char *dir, const uint8_t key[32], char *out, size_t cap)
{
    static const char hex[] = "0123456789abcdef";
    char name[65];
    for (int i = 0; i < 32; i++) {
        name[2 * i] = hex[key[i] >> 4];
        name[2 * i + 1] = hex[key[i] & 15];
    }
    name[64] = 0;
    snprintf(out, cap, "%s/%s.kvb", dir, name);
}

static void payload_digest(const void *k, const void *v, size_t n, const void *snap, size_t ns, uint8_t out[32])
{
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned int len = 32;
    memset(out, 0, 32);
    if (c && EVP_DigestInit_ex(c, EVP_sha256(), NULL) && EVP_DigestUpdate(c, k, n) && EVP_DigestUpdate(c, v, n) &&
        (!snap || EVP_DigestUpdate(c, snap, ns)))
        EVP_DigestFinal_ex(c, out, &len);
    EVP_MD_CTX_free(c);
}

int kv_store_open(const char *dir, cdx_err *err)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno != ENOENT || mkdir(dir, 0755) != 0)
            return cdx_err_set(err, CDX_EIO, "--kv-store %s: %s", dir, strerror(errno));
    } else if (!S_ISDIR(st.st_mode)) {
        return cdx_err_set(err, CDX_EINVAL, "--kv-store %s: not a directory", dir);
    }
    if (access(dir, W_OK | X_OK) != 0)
        return cdx_err_set(err, CDX_EIO, "--kv-store %s: cannot write there (%s)", dir, strerror(errno));
    return CDX_OK;
}

bool kv_store_has(const char *dir, const uint8_t key[32])
{
    char path[4200];
    key_path(dir, key, path, sizeof path);
    return access(path, F_OK) == 0;
}

int kv_store_write(const char *dir, const kv_store_shape *s, const uint8_t key[32], const void *k, const void *v,
                   const void *snap)
{
    char path[4200], tmp[4300];
    key_path(dir, key, path, sizeof path);
    /* an existing file is replaced: the engine writes only blocks it computed itself, and a file it
     * did not read back may be one that would fail the checks */
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    const size_t nb = s->n_elems * s->elem_bytes;
    store_header h = { .version = STORE_VERSION, .positions = s->positions, .elem_bytes = s->elem_bytes, .n_layer = s->n_layer,
                       .kv_dim = s->kv_dim, .n_elems = s->n_elems, .has_state = snap && s->state_bytes };
    if (!h.has_state)
        snap = NULL;
    memcpy(h.magic, STORE_MAGIC, 8);
    memcpy(h.key, key, 32);
    memcpy(h.root, s->root, 32);
    payload_digest(k, v, nb, snap, s->state_bytes, h.digest);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return -1;
    bool ok = fwrite(&h, sizeof h, 1, f) == 1 && fwrite(k, 1, nb, f) == nb && fwrite(v, 1, nb, f) == nb &&
              (!snap || fwrite(snap, 1, s->state_bytes, f) == s->state_bytes);
    ok = fclose(f) == 0 && ok;
    /* written whole, then renamed: a reader never sees half a file under the key's name */
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

int kv_store_read(const char *dir, const kv_store_shape *s, const uint8_t key[32], void *k, void *v, void **snap)
{
    if (snap)
        *snap = NULL;
    char path[4200];
    key_path(dir, key, path, sizeof path);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return 1;
    store_header h;
    struct stat st;
    const size_t nb = s->n_elems * s->elem_bytes, want = sizeof h + 2 * nb;
    bool ok = fstat(fd, &st) == 0 && read(fd, &h, sizeof h) == (ssize_t)sizeof h &&
              !memcmp(h.magic, STORE_MAGIC, 8) && h.version == STORE_VERSION && h.positions == s->positions &&
              h.elem_bytes == s->elem_bytes && h.n_layer == s->n_layer && h.kv_dim == s->kv_dim &&
              h.n_elems == s->n_elems && !memcmp(h.key, key, 32) && !memcmp(h.root, s->root, 32) &&
              (h.has_state == 0 || (h.has_state == 1 && s->state_bytes > 0)) &&
              (size_t)st.st_size == want + (h.has_state ? s->state_bytes : 0);
    void *st_buf = ok && h.has_state ? malloc(s->state_bytes) : NULL;
    ok = ok && (!h.has_state || st_buf);
    ok = ok && read(fd, k, nb) == (ssize_t)nb && read(fd, v, nb) == (ssize_t)nb &&
         (!st_buf || read(fd, st_buf, s->state_bytes) == (ssize_t)s->state_bytes);
    close(fd);
    if (ok) {
        uint8_t d[32];
        payload_digest(k, v, nb, st_buf, s->state_bytes, d);
        ok = !memcmp(d, h.digest, 32);
    }
    if (ok && snap)
        *snap = st_buf;
    else
        free(st_buf);
    if (!ok) {
        unlink(path); /* never trusted, never looked at again */
        return -1;
    }
    return 0;
}
