/* Tool calls in a chat model's output, in the forms chat templates teach their models:
 *   Hermes / Qwen2.5 / Qwen3:  <tool_call>{"name": ..., "arguments": {...}}</tool_call>  (one block a call)
 *   Mistral:                   [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]
 *   Llama 3.x:                 the whole reply one JSON object {"name": ..., "parameters": {...}}
 * A call counts only when its JSON parses, it names one of the request's tools and its arguments
 * are an object (or a string, passed on as sent); anything else stays text. No grammar constrains
 * the model, so a malformed call is the model's text, never an error. */
#include "server/sv_int.h"

#include <stdlib.h>
#include <string.h>

static const char k_open[] = "<tool_call>", k_close[] = "</tool_call>", k_mistral[] = "[TOOL_CALLS]";

static bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static bool tool_named(const json_t *tools, const char *name)
{
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *n = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (!n)
            n = json_string_value(json_object_get(t, "name"));
        if (n && !strcmp(n, name))
            return true;
    }
    return false;
}

/* {"name", "arguments"|"parameters"} naming one of tools → appended to calls as OpenAI's
 * {"id","type":"function","function":{"name","arguments": JSON text}}. */
static bool add_call(json_t *calls, const json_t *obj, const json_t *tools, const char *id_base)
{
    const char *name = json_string_value(json_object_get(obj, "name"));
    json_t *args = json_object_get(obj, "arguments");
    if (!args)
        args = json_object_get(obj, "parameters");
    if (!json_is_object(obj) || !name || !tool_named(tools, name) || !(json_is_object(args) || json_is_string(args)))
        return false;
    char *text = json_is_string(args) ? strdup(json_string_value(args)) : json_dumps(args, JSON_COMPACT);
    if (!text)
        return false;
    char id[96];
    snprintf(id, sizeof id, "call_%s_%zu", id_base, json_array_size(calls));
    json_t *c = json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function", "function", "name", name, "arguments",
                          text);
    free(text);
    return c && !json_array_append_new(calls, c);
}

static json_t *parse_json(const char *s, size_t n)
{
    return json_loadb(s, n, JSON_REJECT_DUPLICATES, NULL);
}

static void trim(const char **s, size_t *n)
{
    while (*n && is_space(**s))
        (*s)++, (*n)--;
    while (*n && is_space((*s)[*n - 1]))
        (*n)--;
}

static const char *find(const char *s, size_t n, const char *needle)
{
    size_t m = strlen(needle);
    for (size_t i = 0; i + m <= n; i++)
        if (s[i] == needle[0] && !memcmp(s + i, needle, m))
            return s + i;
    return NULL;
}

int sv_tool_calls(const char *text, size_t len, const json_t *tools, const char *id_base, json_t **calls_out,
                  char **content_out, size_t *content_len)
{
    *calls_out = NULL;
    *content_out = NULL;
    *content_len = 0;
    json_t *calls = json_array();
    char *content = malloc(len + 1);
    if (!calls || !content) {
        json_decref(calls);
        free(content);
        return -1;
    }
    size_t w = 0;
    const char *t = text;
    size_t n = len;
    trim(&t, &n);
    if (n >= sizeof k_mistral - 1 && !memcmp(t, k_mistral, sizeof k_mistral - 1)) {
        json_t *arr = parse_json(t + sizeof k_mistral - 1, n - (sizeof k_mistral - 1));
        size_t i;
        json_t *o;
        bool all = json_is_array(arr) && json_array_size(arr) > 0;
        json_array_foreach(arr, i, o) all = all && add_call(calls, o, tools, id_base);
        json_decref(arr);
        if (!all)
            json_array_clear(calls);
        else
            goto done;
    } else if (n && t[0] == '{') {
        json_t *o = parse_json(t, n);
        bool ok = o && add_call(calls, o, tools, id_base);
        json_decref(o);
        if (ok)
            goto done;
    }
    /* Hermes blocks: each <tool_call>...</tool_call> that parses becomes a call; the rest is content */
    for (const char *p = text, *end = text + len; p < end;) {
        const char *a = find(p, (size_t)(end - p), k_open);
        const char *b = a ? find(a, (size_t)(end - a), k_close) : NULL;
        if (!b) {
            memcpy(content + w, p, (size_t)(end - p));
            w += (size_t)(end - p);
            break;
        }
        const char *body = a + sizeof k_open - 1;
        size_t blen = (size_t)(b - body);
        trim(&body, &blen);
        json_t *o = parse_json(body, blen);
        bool ok = o && add_call(calls, o, tools, id_base);
        json_decref(o);
        const char *keep_to = ok ? a : b + sizeof k_close - 1;
        memcpy(content + w, p, (size_t)(keep_to - p));
        w += (size_t)(keep_to - p);
        p = b + sizeof k_close - 1;
    }
    if (!json_array_size(calls)) {
        memcpy(content, text, len);
        w = len;
    } else {
        const char *c = content;
        size_t cn = w;
        trim(&c, &cn);
        memmove(content, c, cn);
        w = cn;
    }
done:
    content[w] = 0;
    if (!json_array_size(calls)) {
        json_decref(calls);
        calls = NULL;
    }
    *calls_out = calls;
    *content_out = content;
    *content_len = w;
    return calls ? (int)json_array_size(*calls_out) : 0;
}

size_t sv_tool_hold_from(const char *text, size_t len)
{
    /* a reply that opens with "{" or "[TOOL_CALLS]" may be a call as a whole */
    size_t lead = 0;
    while (lead < len && is_space(text[lead]))
        lead++;
    if (lead == len)
        return lead;
    if (text[lead] == '{')
        return lead;
    size_t m = sizeof k_mistral - 1, k = len - lead < m ? len - lead : m;
    if (!memcmp(text + lead, k_mistral, k))
        return lead;
    /* else from the first "<tool_call>", or from a tail that may become one */
    const char *a = find(text, len, k_open);
    if (a)
        return (size_t)(a - text);
    for (size_t k2 = sizeof k_open - 2; k2 > 0; k2--)
        if (len >= k2 && !memcmp(text + len - k2, k_open, k2))
            return len - k2;
    return len;
}
