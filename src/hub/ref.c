/* Model references: paths, aliases, owner/name[@revision], ollama:[namespace/]name[:tag].
 * The alias table lives here, once: resolution, `caldrix models supported` and docs read it. */
#include "caldrix/hub.h"
#include "hub/hub_int.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Seed 000, "Aliases": each alias names a model run on hardware, pinned to that revision. */
static const cdx_hub_alias k_aliases[] = {
    { "smollm2",          "HuggingFaceTB/SmolLM2-135M",                 "93efa2f097d58c2a74874c7e644dbc9b0cee75a2",
      "tokens of a plain-text prompt verified on the CPU lane (x86-64-v3)" },
    { "smollm2-instruct", "HuggingFaceTB/SmolLM2-135M-Instruct",        "12fd25f77366fa6b3b4b768ec3050bf629380bac",
      "verified on the CPU lane (x86-64-v3) on a plain-text prompt; its chat template is not exercised by any gate" },
    { "llama-8b",         "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",   "6a6f4aa4197940add57724a7707d069478df56b1",
      "Llama 3 (8B), rope_scaling llama3" },
    { "qwen3-0.6b",       "Qwen/Qwen3-0.6B",                            "c1899de289a04d12100db370d81485cdf75e47ca",
      "Qwen3 dense" },
    { "qwen3-8b",         "Qwen/Qwen3-8B",                              "b968826d9c46dd6066d109eabc6255188de91218",
      "Qwen3 dense" },
    { "qwen3-30b-a3b",    "Qwen/Qwen3-30B-A3B",                         "ad44e777bcd18fa416d9da3bd8f70d33ebb85d39",
      "Qwen3 mixture of experts; token gates on the CPU lane streamed under a 20 GiB --weight-budget" },
    { "decider-0.8b",     "Mapika/decider-0.8b",                        "a0a01d6f8135298f400a8c856b355793012ae971",
      "Qwen3.5 (Qwen3_5ForCausalLM), a decision model, not a chat model; CPU lane only" },
    { "smolvlm-256m",     "HuggingFaceTB/SmolVLM-256M-Instruct",        "7e3e67edbbed1bf9888184d9df282b700a323964",
      "vision-language (Idefics3ForConditionalGeneration); CPU lane only" },
};

const cdx_hub_alias *cdx_hub_aliases(size_t *n)
{
    *n = sizeof k_aliases / sizeof k_aliases[0];
    return k_aliases;
}

const cdx_hub_alias *cdx_hub_alias_find(const char *alias)
{
    for (size_t i = 0; i < sizeof k_aliases / sizeof k_aliases[0]; i++)
        if (!strcmp(k_aliases[i].alias, alias))
            return &k_aliases[i];
    return NULL;
}

/* huggingface_hub's validate_repo_id: [\w.-] parts, no "--" or "..", at most 96 characters each. */
static bool repo_part_ok(const char *s, size_t n)
{
    if (n == 0 || n > 96)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!(isalnum(c) || c == '_' || c == '-' || c == '.'))
            return false;
        if (i + 1 < n && ((c == '-' && s[i + 1] == '-') || (c == '.' && s[i + 1] == '.')))
            return false;
    }
    return s[0] != '-' && s[0] != '.' && s[n - 1] != '-' && s[n - 1] != '.';
}

bool hub_repo_id_ok(const char *id)
{
    const char *slash = strchr(id, '/');
    if (!slash)
        return false;
    const char *name = slash + 1;
    size_t n_owner = (size_t)(slash - id), n_name = strlen(name);
    return repo_part_ok(id, n_owner) && repo_part_ok(name, n_name) && !strchr(name, '/') &&
           !(n_name >= 4 && !strncmp(name + n_name - 4, ".git", 4));
}

static bool revision_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 255 || s[0] == '/' || s[n - 1] == '/')
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= ' ' || c == 0x7f || c == '\\' || c == '?' || c == '#' || c == '%')
            return false;
    }
    /* it becomes a path under refs/: no "." or ".." components */
    for (const char *p = s; p; p = strchr(p, '/')) {
        if (*p == '/')
            p++;
        if ((p[0] == '.' && (p[1] == '/' || !p[1])) || (p[0] == '.' && p[1] == '.' && (p[2] == '/' || !p[2])))
            return false;
    }
    return true;
}

static bool ollama_part_ok(const char *s, size_t n, bool tag)
{
    if (n == 0 || n > 127)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!(isalnum(c) || c == '_' || c == '-' || c == '.'))
            return false;
    }
    return tag ? s[0] != '.' && s[0] != '-' : isalnum((unsigned char)s[0]);
}

static int parse_ollama(const char *ref, const char *s, cdx_hub_ref *out, cdx_err *err)
{
    out->kind = CDX_REF_OLLAMA;
    const char *slash = strchr(s, '/');
    const char *name = s;
    if (slash) {
        if (!ollama_part_ok(s, (size_t)(slash - s), false))
            goto bad;
        snprintf(out->ns, sizeof out->ns, "%.*s", (int)(slash - s), s);
        name = slash + 1;
    } else {
        snprintf(out->ns, sizeof out->ns, "library");
    }
    const char *colon = strchr(name, ':');
    size_t n_name = colon ? (size_t)(colon - name) : strlen(name);
    if (!ollama_part_ok(name, n_name, false) || memchr(name, '/', n_name))
        goto bad;
    snprintf(out->name, sizeof out->name, "%.*s", (int)n_name, name);
    if (colon) {
        if (!ollama_part_ok(colon + 1, strlen(colon + 1), true))
            goto bad;
        snprintf(out->tag, sizeof out->tag, "%s", colon + 1);
    } else {
        snprintf(out->tag, sizeof out->tag, "latest");
    }
    for (char *p = out->name; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    for (char *p = out->ns; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    return 0;
bad:
    return cdx_err_set(err, CDX_EINVAL,
                       "\"%s\": not an Ollama name; expected ollama:NAME[:TAG] or ollama:NAMESPACE/NAME[:TAG] "
                       "(letters, digits, '_', '-', '.')", ref);
}

int cdx_hub_parse_ref(const char *ref, cdx_hub_ref *out, cdx_err *err)
{
    memset(out, 0, sizeof *out);
    if (!ref || !*ref)
        return cdx_err_set(err, CDX_EINVAL, "empty model reference");
    size_t n = strlen(ref);
    struct stat st;
    bool pathish = ref[0] == '/' || !strncmp(ref, "./", 2) || !strncmp(ref, "../", 3) || !strncmp(ref, "~/", 2) ||
                   !strcmp(ref, ".") || !strcmp(ref, "..") || (n > 5 && !strcmp(ref + n - 5, ".gguf"));
    char expanded[4096];
    if (!strncmp(ref, "~/", 2) && getenv("HOME"))
        snprintf(expanded, sizeof expanded, "%s/%s", getenv("HOME"), ref + 2);
    else
        snprintf(expanded, sizeof expanded, "%s", ref);
    if (n >= sizeof out->path)
        return cdx_err_set(err, CDX_EINVAL, "model reference is %zu characters; the limit is %zu", n, sizeof out->path - 1);
    if (stat(expanded, &st) == 0) {
        out->kind = CDX_REF_PATH;
        snprintf(out->path, sizeof out->path, "%s", expanded);
        return 0;
    }
    if (pathish)
        return cdx_err_set(err, CDX_ENOTFOUND, "%s: no such file or directory", ref);
    const cdx_hub_alias *a = cdx_hub_alias_find(ref);
    if (a) {
        out->kind = CDX_REF_ALIAS;
        snprintf(out->alias, sizeof out->alias, "%s", a->alias);
        snprintf(out->repo, sizeof out->repo, "%s", a->repo);
        snprintf(out->revision, sizeof out->revision, "%s", a->revision);
        return 0;
    }
    if (!strncmp(ref, "ollama:", 7))
        return parse_ollama(ref, ref + 7, out, err);
    const char *slash = strchr(ref, '/');
    const char *at = strchr(ref, '@');
    if (slash && (!at || at > slash)) {
        size_t n_repo = at ? (size_t)(at - ref) : n;
        char id[200];
        if (n_repo >= sizeof id || (snprintf(id, sizeof id, "%.*s", (int)n_repo, ref), !hub_repo_id_ok(id)))
            return cdx_err_set(err, CDX_EINVAL,
                               "\"%.*s\": not a Hugging Face repo id; expected owner/name (letters, digits, '_', '-', "
                               "'.', no \"--\" or \"..\", at most 96 characters each), and no such file or folder "
                               "exists here", (int)n_repo, ref);
        if (at && !revision_ok(at + 1))
            return cdx_err_set(err, CDX_EINVAL,
                               "\"%s\": revision \"%s\" is not a branch, tag or commit name", ref, at + 1);
        out->kind = CDX_REF_HF;
        snprintf(out->repo, sizeof out->repo, "%.*s", (int)n_repo, ref);
        snprintf(out->revision, sizeof out->revision, "%s", at ? at + 1 : "main");
        return 0;
    }
    return cdx_err_set(err, CDX_EINVAL,
                       "\"%s\": not a file or folder here, not an alias (caldrix models supported lists them), not "
                       "owner/name[@revision] and not ollama:name[:tag]", ref);
}
