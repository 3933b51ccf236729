/* cdx_hub_resolve: a reference in, a local path out (a file or a folder the model layer opens). */
#include "caldrix/hub.h"
#include "hub/hub_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int hub_dir_note(const char *dir, char **note); /* hf.c */

int cdx_hub_resolve_ref(const cdx_hub_ref *ref, const cdx_hub_opts *opts, char **out, cdx_err *err)
{
    *out = NULL;
    if (ref->kind == CDX_REF_PATH) {
        if (hub_is_dir(ref->path)) {
            char *note = NULL;
            if (opts && opts->check_local) {
                int rc = cdx_hub_check_dir(ref->path, true, &note, err);
                if (rc < 0)
                    return rc;
            } else {
                hub_dir_note(ref->path, &note);
            }
            if (note)
                hub_note(opts, "%s", note);
            free(note);
        }
        *out = strdup(ref->path);
        return *out ? 0 : cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    cdx_hub_env env;
    int rc = cdx_hub_env_load(&env, err);
    if (rc < 0)
        return rc;
    if (opts && opts->cache_only && !env.offline) {
        env.offline = env.hf_offline = true;
        env.offline_var = "this command reads the cache only";
    }
    char label[512];
    switch (ref->kind) {
    case CDX_REF_ALIAS:
        snprintf(label, sizeof label, "%s", ref->alias);
        rc = hub_resolve_hf(&env, ref->repo, ref->revision, label, opts, out, err);
        break;
    case CDX_REF_HF:
        if (strcmp(ref->revision, "main"))
            snprintf(label, sizeof label, "%s@%s", ref->repo, ref->revision);
        else
            snprintf(label, sizeof label, "%s", ref->repo);
        rc = hub_resolve_hf(&env, ref->repo, ref->revision, label, opts, out, err);
        break;
    case CDX_REF_OLLAMA:
        rc = hub_resolve_ollama(&env, ref, opts, out, err);
        break;
    default:
        rc = cdx_err_set(err, CDX_EINVAL, "unknown reference kind %d", (int)ref->kind);
    }
    cdx_hub_env_free(&env);
    return rc;
}

int cdx_hub_resolve(const char *ref, const cdx_hub_opts *opts, char **out, cdx_err *err)
{
    *out = NULL;
    cdx_hub_ref r;
    int rc = cdx_hub_parse_ref(ref, &r, err);
    if (rc < 0)
        return rc;
    return cdx_hub_resolve_ref(&r, opts, out, err);
}
