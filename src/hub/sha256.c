/* SHA-256 (FIPS 180-4) over OpenSSL's EVP digests: libcrypto is already linked through libcurl,
 * and its SHA-256 uses the CPU's SHA extensions where present. Ollama names blobs by their
 * SHA-256; caldrix convert fingerprints tokenizers with it. Tested with the FIPS example vectors. */
#include "caldrix/hub.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int cdx_sha256_init(cdx_sha256 *s)
{
    s->ctx = EVP_MD_CTX_new();
    s->failed = !s->ctx || EVP_DigestInit_ex(s->ctx, EVP_sha256(), NULL) != 1;
    return s->failed ? CDX_ENOMEM : 0;
}

void cdx_sha256_update(cdx_sha256 *s, const void *data, size_t n)
{
    if (!s->failed && n && EVP_DigestUpdate(s->ctx, data, n) != 1)
        s->failed = true;
}

int cdx_sha256_final(cdx_sha256 *s, uint8_t out[32])
{
    unsigned int len = 0;
    if (!s->failed && (EVP_DigestFinal_ex(s->ctx, out, &len) != 1 || len != 32))
        s->failed = true;
    EVP_MD_CTX_free(s->ctx);
    s->ctx = NULL;
    if (s->failed)
        memset(out, 0, 32);
    return s->failed ? CDX_ENOMEM : 0;
}

int cdx_sha256_file(const char *path, char hex[65], cdx_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cdx_err_set(err, CDX_EIO, "%s: cannot open: %s", path, strerror(errno));
    cdx_sha256 s;
    cdx_sha256_init(&s);
    static __thread uint8_t buf[1 << 16];
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            uint8_t d[32];
            cdx_sha256_final(&s, d);
            return cdx_err_set(err, CDX_EIO, "%s: read failed: %s", path, strerror(e));
        }
        if (r == 0)
            break;
        cdx_sha256_update(&s, buf, (size_t)r);
    }
    close(fd);
    uint8_t d[32];
    if (cdx_sha256_final(&s, d) < 0)
        return cdx_err_set(err, CDX_ENOMEM, "%s: SHA-256: out of memory (OpenSSL EVP digest)", path);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    return 0;
}
