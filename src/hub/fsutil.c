/* File helpers for the caches: mkdir -p, relative symlinks, atomic writes; and event plumbing. */
#include "hub/hub_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int hub_mkdirs(const char *path, cdx_err *err)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return cdx_err_set(err, CDX_EINVAL, "%s: path too long", path);
    for (char *p = buf + 1; ; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return cdx_err_set(err, CDX_EIO, "%s: cannot create folder: %s", buf, strerror(errno));
            *p = c;
            if (!c)
                break;
        }
    }
    if (!hub_is_dir(path))
        return cdx_err_set(err, CDX_EIO, "%s: exists and is not a folder", path);
    return 0;
}

int hub_mkdirs_parent(const char *path, cdx_err *err)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    char *slash = strrchr(buf, '/');
    if (!slash || slash == buf)
        return 0;
    *slash = 0;
    return hub_mkdirs(buf, err);
}

bool hub_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

bool hub_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int64_t hub_file_size(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return -1;
    return (int64_t)st.st_size;
}

/* os.path.relpath(target, dirname(link)) for two paths that share a prefix of components. */
static char *relpath(const char *target, const char *link_path)
{
    size_t common = 0, i = 0;
    for (; target[i] && link_path[i] && target[i] == link_path[i]; i++)
        if (target[i] == '/')
            common = i + 1;
    int ups = 0;
    for (const char *p = link_path + common; *p; p++)
        if (*p == '/')
            ups++;
    size_t n = (size_t)ups * 3 + strlen(target + common) + 1;
    char *out = malloc(n);
    if (!out)
        return NULL;
    out[0] = 0;
    for (int k = 0; k < ups; k++)
        strcat(out, "../");
    strcat(out, target + common);
    return out;
}

int hub_symlink_relative(const char *target, const char *link_path, cdx_err *err)
{
    int rc = hub_mkdirs_parent(link_path, err);
    if (rc < 0)
        return rc;
    char *rel = relpath(target, link_path);
    if (!rel)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", link_path, (long)getpid());
    unlink(tmp);
    if (symlink(rel, tmp) != 0 || rename(tmp, link_path) != 0) {
        int e = errno;
        unlink(tmp);
        free(rel);
        return cdx_err_set(err, CDX_EIO, "%s: cannot create the link to %s: %s", link_path, target, strerror(e));
    }
    free(rel);
    return 0;
}

int hub_write_file(const char *path, const void *data, size_t n, cdx_err *err)
{
    int rc = hub_mkdirs_parent(path, err);
    if (rc < 0)
        return rc;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return cdx_err_set(err, CDX_EIO, "%s: cannot write: %s", tmp, strerror(errno));
    bool ok = fwrite(data, 1, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return cdx_err_set(err, CDX_EIO, "%s: cannot write: %s", path, strerror(e));
    }
    return 0;
}

void hub_event(const cdx_hub_opts *o, cdx_hub_event_kind kind, const char *file, uint64_t done, uint64_t total,
               uint32_t n_files)
{
    if (!o || !o->on_event)
        return;
    cdx_hub_event ev = { .kind = kind, .file = file, .done = done, .total = total, .n_files = n_files };
    o->on_event(&ev, o->user);
}

void hub_note(const cdx_hub_opts *o, const char *fmt, ...)
{
    if (!o || !o->on_event)
        return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    cdx_hub_event ev = { .kind = CDX_HUB_EV_NOTE, .text = buf };
    o->on_event(&ev, o->user);
}


