/* The environment: where the caches are, the Hub endpoint, the token, offline switches.
 * The Hugging Face rules are huggingface_hub's (constants.py), so both tools share one cache. */
#include "caldrix/hub.h"
#include "hub/hub_int.h"

#include <ctype.h>
#include <stdarg.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool cdx_hub_env_truthy(const char *v)
{
    if (!v)
        return false;
    static const char *const k_true[] = { "1", "on", "yes", "true" };
    for (size_t i = 0; i < sizeof k_true / sizeof k_true[0]; i++)
        if (!strcasecmp(v, k_true[i]))
            return true;
    return false;
}

static const char *env_nonempty(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

char *hub_strdup_printf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    return s;
}

static char *strip_slash(char *s)
{
    if (!s)
        return s;
    size_t n = strlen(s);
    while (n > 1 && s[n - 1] == '/')
        s[--n] = 0;
    return s;
}

/* ~/.cache (or $XDG_CACHE_HOME) */
static char *cache_home(void)
{
    const char *xdg = env_nonempty("XDG_CACHE_HOME");
    if (xdg)
        return hub_strdup_printf("%s", xdg);
    const char *home = env_nonempty("HOME");
    return hub_strdup_printf("%s/.cache", home ? home : "/tmp");
}

static char *expand_user(const char *p)
{
    if (p[0] == '~' && (p[1] == '/' || !p[1]) && env_nonempty("HOME"))
        return hub_strdup_printf("%s%s", getenv("HOME"), p + 1);
    return hub_strdup_printf("%s", p);
}

static char *read_token_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char line[1024] = "";
    char *ok = fgets(line, sizeof line, f);
    fclose(f);
    if (!ok)
        return NULL;
    size_t n = strlen(line);
    while (n && isspace((unsigned char)line[n - 1]))
        line[--n] = 0;
    char *s = line;
    while (isspace((unsigned char)*s))
        s++;
    return *s ? hub_strdup_printf("%s", s) : NULL;
}

int cdx_hub_env_load(cdx_hub_env *env, cdx_err *err)
{
    memset(env, 0, sizeof *env);
    char *ch = cache_home();
    const char *v;
    env->hf_home = (v = env_nonempty("HF_HOME")) ? expand_user(v) : hub_strdup_printf("%s/huggingface", ch);
    if ((v = env_nonempty("HF_HUB_CACHE")))
        env->hf_cache = expand_user(v);
    else if ((v = env_nonempty("HUGGINGFACE_HUB_CACHE"))) /* the older name huggingface_hub still reads */
        env->hf_cache = expand_user(v);
    else
        env->hf_cache = hub_strdup_printf("%s/hub", env->hf_home);
    env->endpoint = strip_slash(hub_strdup_printf("%s", (v = env_nonempty("HF_ENDPOINT")) ? v : "https://huggingface.co"));
    env->caldrix_cache = (v = env_nonempty("CALDRIX_CACHE")) ? expand_user(v) : hub_strdup_printf("%s/caldrix", ch);
    env->ollama_registry = strip_slash(hub_strdup_printf(
        "%s", (v = env_nonempty("CALDRIX_OLLAMA_REGISTRY")) ? v : "https://registry.ollama.ai"));
    free(ch);
    if ((v = env_nonempty("HF_TOKEN"))) {
        env->token = hub_strdup_printf("%s", v);
        env->token_source = "HF_TOKEN";
    } else if ((v = env_nonempty("HF_TOKEN_PATH"))) {
        char *p = expand_user(v);
        env->token = p ? read_token_file(p) : NULL;
        env->token_source = env->token ? "HF_TOKEN_PATH" : NULL;
        free(p);
    } else if (env->hf_home) {
        char *p = hub_strdup_printf("%s/token", env->hf_home);
        env->token = p ? read_token_file(p) : NULL;
        env->token_source = env->token ? "$HF_HOME/token" : NULL;
        free(p);
    }
    if (cdx_hub_env_truthy(getenv("CALDRIX_OFFLINE"))) {
        env->offline = env->hf_offline = true;
        env->offline_var = "CALDRIX_OFFLINE";
    } else if (cdx_hub_env_truthy(getenv("HF_HUB_OFFLINE"))) {
        env->hf_offline = true;
        env->offline_var = "HF_HUB_OFFLINE";
    }
    if (!env->hf_home || !env->hf_cache || !env->endpoint || !env->caldrix_cache || !env->ollama_registry) {
        cdx_hub_env_free(env);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory reading the environment");
    }
    if (strncmp(env->endpoint, "http://", 7) && strncmp(env->endpoint, "https://", 8)) {
        int rc = cdx_err_set(err, CDX_EINVAL, "HF_ENDPOINT is \"%s\"; expected an http:// or https:// URL", env->endpoint);
        cdx_hub_env_free(env);
        return rc;
    }
    if (strncmp(env->ollama_registry, "http://", 7) && strncmp(env->ollama_registry, "https://", 8)) {
        int rc = cdx_err_set(err, CDX_EINVAL, "CALDRIX_OLLAMA_REGISTRY is \"%s\"; expected an http:// or https:// URL",
                             env->ollama_registry);
        cdx_hub_env_free(env);
        return rc;
    }
    return 0;
}

void cdx_hub_env_free(cdx_hub_env *env)
{
    if (!env)
        return;
    free(env->hf_cache);
    free(env->hf_home);
    free(env->endpoint);
    if (env->token)
        memset(env->token, 0, strlen(env->token));
    free(env->token);
    free(env->caldrix_cache);
    free(env->ollama_registry);
    memset(env, 0, sizeof *env);
}

const char *hub_offline_reason(const cdx_hub_env *env)
{
    static __thread char buf[128];
    const char *v = env->offline_var ? env->offline_var : "offline";
    bool var = true;
    for (const char *p = v; *p; p++)
        if (!(*p == '_' || (*p >= 'A' && *p <= 'Z')))
            var = false;
    if (var)
        snprintf(buf, sizeof buf, "offline (%s is set)", v);
    else
        snprintf(buf, sizeof buf, "%s", v);
    return buf;
}
