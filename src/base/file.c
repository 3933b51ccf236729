/* Mapped files, whole-file reads, the clock and UTF-8 validation. */
#include "caldrix/base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int cdx_file_map(const char *path, cdx_file **out, cdx_err *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cdx_err_set(err, errno == ENOENT ? CDX_ENOTFOUND : CDX_EIO, "%s: cannot open: %s", path,
                           strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return cdx_err_set(err, CDX_EIO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return cdx_err_set(err, CDX_EIO, "%s: not a regular file", path);
    }
    cdx_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        close(fd);
        return cdx_err_set(err, CDX_ENOMEM, "%s: out of memory", path);
    }
    f->size = (size_t)st.st_size;
    if (f->size > 0) {
        void *p = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            free(f->path);
            free(f);
            return cdx_err_set(err, CDX_EIO, "%s: cannot map %zu bytes: %s", path, (size_t)st.st_size,
                               strerror(e));
        }
        madvise(p, f->size, MADV_HUGEPAGE); /* advice only: refused without THP, and that is fine */
        f->data = p;
    }
    close(fd); /* the mapping stays valid without the descriptor */
    *out = f;
    return CDX_OK;
}

double cdx_mem_huge_share(const void *p, uintptr_t *lo, uintptr_t *hi)
{
    if (lo)
        *lo = 0;
    if (hi)
        *hi = 0;
    FILE *fp = fopen("/proc/self/smaps", "re");
    if (!fp)
        return -1;
    const uintptr_t a = (uintptr_t)p;
    char line[512];
    bool in = false, found = false;
    unsigned long long rss = 0, huge = 0;
    while (fgets(line, sizeof line, fp)) {
        unsigned long long s, e, kb;
        char c;
        /* a mapping's header: "start-end perms offset dev inode [path]"; its fields: "Name:  N kB" */
        if (sscanf(line, "%llx-%llx %c", &s, &e, &c) == 3) { /* no field's name parses as "hex-hex" */
            if (found)
                break;
            in = a >= s && a < e;
            if (in) {
                found = true;
                if (lo)
                    *lo = (uintptr_t)s;
                if (hi)
                    *hi = (uintptr_t)e;
            }
        } else if (in && sscanf(line, "Rss: %llu kB", &kb) == 1) {
            rss = kb;
        } else if (in && (sscanf(line, "FilePmdMapped: %llu kB", &kb) == 1 || sscanf(line, "AnonHugePages: %llu kB", &kb) == 1)) {
            huge += kb;
        }
    }
    fclose(fp);
    if (!found || rss == 0)
        return -1;
    return huge >= rss ? 1.0 : (double)huge / (double)rss;
}

void cdx_file_unmap(cdx_file *f)
{
    if (!f)
        return;
    if (f->data)
        munmap((void *)f->data, f->size);
    free(f->path);
    free(f);
}

int cdx_file_read_all(const char *path, size_t max_bytes, char **out, size_t *out_len, cdx_err *err)
{
    *out = NULL;
    if (out_len)
        *out_len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cdx_err_set(err, errno == ENOENT ? CDX_ENOTFOUND : CDX_EIO, "%s: cannot open: %s", path,
                           strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return cdx_err_set(err, CDX_EIO, "%s: not a readable regular file", path);
    }
    if ((uint64_t)st.st_size > max_bytes) {
        close(fd);
        return cdx_err_set(err, CDX_ERANGE, "%s: file is %lld bytes; the limit for this file is %zu", path,
                           (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return cdx_err_set(err, CDX_ENOMEM, "%s: out of memory reading %zu bytes", path, n);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            free(buf);
            close(fd);
            return cdx_err_set(err, CDX_EIO, "%s: read failed at byte %zu", path, got);
        }
        got += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    *out = buf;
    if (out_len)
        *out_len = n;
    return CDX_OK;
}

double cdx_time_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

size_t cdx_utf8_check(const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        uint32_t cp, min;
        if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; min = 0x80; }
        else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; min = 0x800; }
        else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; min = 0x10000; }
        else return i;
        if (len - i < n)
            return i;
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return i;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return i;
        i += n;
    }
    return len;
}
