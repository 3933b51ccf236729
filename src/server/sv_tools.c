/* Tool calls in a chat model's output, in the forms chat templates teach their models:
 *   Hermes / Qwen2.5 / Qwen3:  <tool_call>{"name": ..., "arguments": {...}}</tool_call>  (one block a call)
 *   Mistral:                   [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]
 *   Llama 3.x:                 the whole reply one JSON object {"name": ..., "parameters": {...}}
 *   Qwen3.5 (XML):             <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n...
 *                              </function>\n</tool_call>, a string parameter's VALUE raw, others as JSON
 *   Granite 3.x:               <|tool_call|>[{"name": ..., "arguments": {...}}, ...]
 *   gpt-oss (harmony):         a message to functions.NAME, its body the arguments (sv_harmony_parse,
 *                              which also splits the reply's channels into reasoning and content)
 * A call counts only when its JSON parses, it names one of the request's tools and its arguments
 * are an object (or a string, passed on as sent); anything else stays text. With tool_choice
 * "auto" no grammar constrains the model, so a malformed call is the model's text, never an error;
 * with "required" or a named function, sv_tool_grammar's grammar makes the reply calls in the form
 * the model's template writes them (sv_tool_form_of). */
#include "server/sv_int.h"

#include <stdlib.h>
#include <string.h>

static const char k_open[] = "<tool_call>", k_close[] = "</tool_call>", k_mistral[] = "[TOOL_CALLS]";
/* Granite 3.x: "<|tool_call|>" then a JSON list of calls (its template asks for it in the system
 * prompt and writes earlier calls as plain turns) */
static const char k_granite[] = "<|tool_call|>";

/* The length of the marker text starts with that opens a JSON list of calls ([TOOL_CALLS],
 * <|tool_call|>), or 0. */
static size_t list_marker(const char *t, size_t n)
{
    if (n >= sizeof k_mistral - 1 && !memcmp(t, k_mistral, sizeof k_mistral - 1))
        return sizeof k_mistral - 1;
    if (n >= sizeof k_granite - 1 && !memcmp(t, k_granite, sizeof k_granite - 1))
        return sizeof k_granite - 1;
    return 0;
}

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

/* a growing text */
typedef struct {
    char *s;
    size_t n, cap;
    bool oom;
} xbuf;

static void xadd(xbuf *b, const char *t, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap * 2 : 1024;
        while (c < b->n + n + 1)
            c *= 2;
        char *q = realloc(b->s, c);
        if (!q) {
            b->oom = true;
            return;
        }
        b->s = q;
        b->cap = c;
    }
    memcpy(b->s + b->n, t, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void xstr(xbuf *b, const char *t) { xadd(b, t, strlen(t)); }

static const json_t *tool_params(const json_t *tools, const char *name)
{
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        const char *n = json_string_value(json_object_get(fn, "name"));
        if (n && !strcmp(n, name))
            return json_object_get(fn, "parameters");
    }
    return NULL;
}

/* A parameter the XML form writes raw: a string schema (type "string", or strings only by enum/const). */
static bool xml_raw_string(const json_t *ps)
{
    const json_t *ty = json_object_get(ps, "type");
    if (ty)
        return json_is_string(ty) && !strcmp(json_string_value(ty), "string");
    const json_t *en = json_object_get(ps, "enum"), *c = json_object_get(ps, "const");
    if (c)
        return json_is_string(c);
    if (json_is_array(en) && json_array_size(en)) {
        size_t i;
        json_t *v;
        json_array_foreach(en, i, v) if (!json_is_string(v)) return false;
        return true;
    }
    return json_object_get(ps, "pattern") || json_object_get(ps, "format") || json_object_get(ps, "minLength") ||
           json_object_get(ps, "maxLength");
}

/* Qwen3.5's <function=NAME> <parameter=KEY> VALUE </parameter> ... </function> as {"name", "arguments"}:
 * a string parameter's value as written (one newline after the opening tag and before the closing one
 * dropped), another parsed as JSON (kept as a string when it does not parse). NULL: not that form. */
static json_t *xml_call(const char *b, size_t n, const json_t *tools)
{
    static const char fo[] = "<function=", fc[] = "</function>", po[] = "<parameter=", pc[] = "</parameter>";
    if (n < sizeof fo - 1 || memcmp(b, fo, sizeof fo - 1))
        return NULL;
    const char *end = b + n, *p = b + sizeof fo - 1, *gt = memchr(p, '>', (size_t)(end - p));
    if (!gt)
        return NULL;
    json_t *args = json_object(), *o = json_pack("{s:s%,s:o}", "name", p, (size_t)(gt - p), "arguments", args);
    const char *name = json_string_value(json_object_get(o, "name"));
    const json_t *props = json_object_get(tool_params(tools, name ? name : ""), "properties");
    for (p = gt + 1;;) {
        while (p < end && is_space(*p))
            p++;
        if ((size_t)(end - p) >= sizeof fc - 1 && !memcmp(p, fc, sizeof fc - 1)) {
            p += sizeof fc - 1;
            while (p < end && is_space(*p))
                p++;
            if (p == end)
                return o;
            break;
        }
        if ((size_t)(end - p) < sizeof po - 1 || memcmp(p, po, sizeof po - 1))
            break;
        const char *k = p + sizeof po - 1, *kg = memchr(k, '>', (size_t)(end - k));
        if (!kg)
            break;
        const char *v = kg + 1;
        const char *ve = find(v, (size_t)(end - v), pc);
        if (!ve)
            break;
        p = ve + sizeof pc - 1;
        if (v < ve && *v == '\n')
            v++;
        if (ve > v && ve[-1] == '\n')
            ve--;
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)(kg - k), k);
        const json_t *ps = json_object_get(props, key);
        json_t *val = ps && xml_raw_string(ps) ? NULL : json_loadb(v, (size_t)(ve - v), JSON_DECODE_ANY, NULL);
        if (!val)
            val = json_stringn(v, (size_t)(ve - v));
        json_object_set_new(args, key, val);
    }
    json_decref(o);
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
    const size_t lm = list_marker(t, n);
    if (lm) {
        json_t *arr = parse_json(t + lm, n - lm);
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
        json_t *o = blen && body[0] == '<' ? xml_call(body, blen, tools) : parse_json(body, blen);
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
    /* a reply that opens with "{", "[TOOL_CALLS]" or "<|tool_call|>" may be a call as a whole */
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
    m = sizeof k_granite - 1, k = len - lead < m ? len - lead : m;
    if (!memcmp(text + lead, k_granite, k))
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

/* ---- gpt-oss's harmony replies ---- */

/* OpenAI's harmony format (github.com/openai/harmony, docs/format.md): a reply is a sequence of
 * messages, each a header, "<|message|>", a body and an end: "<|end|>", "<|call|>" (after a tool
 * call) or "<|return|>" (after the last); "<|start|>" opens the next. The header holds the role (the
 * first message's "assistant" is the prompt's last word), "<|channel|>" and the channel, and for a
 * tool call " to=functions.NAME" (before or after the channel) and the content type
 * (" <|constrain|>json" or " json"). "<|call|>" and "<|return|>" end the generation, so the reply's
 * text usually ends without them. */
static const char *const k_h_ends[] = { "<|end|>", "<|call|>", "<|return|>", "<|start|>" };
static const char *const k_h_heads[] = { "<|channel|>", " to=", "assistant" }; /* what a header opens with */
static const char k_h_msg[] = "<|message|>", k_h_start[] = "<|start|>", k_h_channel[] = "<|channel|>";
#define H_HEADER_MAX 512 /* bytes; a longer run without "<|message|>" is no header */

/* The first message end in s[0..n): its offset (n: none), its length in *tl. */
static size_t h_end(const char *s, size_t n, size_t *tl)
{
    for (size_t i = 0; i + 1 < n; i++)
        if (s[i] == '<' && s[i + 1] == '|')
            for (size_t k = 0; k < sizeof k_h_ends / sizeof *k_h_ends; k++) {
                const size_t m = strlen(k_h_ends[k]);
                if (i + m <= n && !memcmp(s + i, k_h_ends[k], m)) {
                    *tl = m;
                    return i;
                }
            }
    *tl = 0;
    return n;
}

/* The length of the longest tail of s[0..n) that is a proper start of one of marks[0..k). */
static size_t h_partial(const char *s, size_t n, const char *const *marks, size_t k)
{
    for (size_t t = n < 16 ? n : 16; t > 0; t--)
        for (size_t i = 0; i < k; i++)
            if (strlen(marks[i]) > t && !memcmp(s + n - t, marks[i], t))
                return t;
    return 0;
}

/* s[0..n) opens as a header does (or is the start of such an opening). */
static bool h_opens(const char *s, size_t n)
{
    for (size_t i = 0; i < sizeof k_h_heads / sizeof *k_h_heads; i++) {
        const size_t m = strlen(k_h_heads[i]);
        if (!memcmp(s, k_h_heads[i], n < m ? n : m))
            return true;
    }
    return false;
}

/* A word of the header after a mark: up to a space or '<'. */
static void h_word(const char *p, const char *end, const char **w, size_t *wn)
{
    const char *q = p;
    while (q < end && *q != ' ' && *q != '<')
        q++;
    *w = p;
    *wn = (size_t)(q - p);
}

/* The header h[0..n): its channel and recipient (to, NULL: none). false: not a header. gpt-oss-20b
 * at times writes a stray "<|channel|>commentary to=assistant" before the header's own channel
 * (llama.cpp's common_chat_params_init_gpt_oss reads past it): the last channel counts, and the
 * last recipient other than "assistant". */
static bool h_header(const char *h, size_t n, const char **ch, size_t *ch_n, const char **to, size_t *to_n)
{
    const char *c = find(h, n, k_h_channel), *t = find(h, n, " to=");
    if (!n || !h_opens(h, n) || !c)
        return false;
    for (const char *c2; (c2 = find(c + 1, n - (size_t)(c + 1 - h), k_h_channel));)
        c = c2;
    h_word(c + sizeof k_h_channel - 1, h + n, ch, ch_n);
    *to = NULL;
    *to_n = 0;
    for (; t; t = find(t + 1, n - (size_t)(t + 1 - h), " to=")) {
        const char *w;
        size_t wn;
        h_word(t + 4, h + n, &w, &wn);
        if (!(wn == 9 && !memcmp(w, "assistant", 9)))
            *to = w, *to_n = wn;
    }
    return true;
}

/* A call message to "functions.NAME" with a JSON body naming one of tools → appended to calls. */
static bool h_call(json_t *calls, const char *to, size_t to_n, const char *body, size_t n, const json_t *tools,
                   const char *id_base)
{
    static const char fns[] = "functions.";
    if (!tools || to_n <= sizeof fns - 1 || memcmp(to, fns, sizeof fns - 1))
        return false;
    trim(&body, &n);
    json_t *args = parse_json(body, n);
    json_t *o = args ? json_pack("{s:s%,s:o}", "name", to + sizeof fns - 1, to_n - (sizeof fns - 1), "arguments", args)
                     : NULL;
    const bool ok = o && add_call(calls, o, tools, id_base);
    json_decref(o);
    return ok;
}

void sv_harmony_free(sv_harmony *h)
{
    free(h->reasoning);
    free(h->content);
    json_decref(h->calls);
    *h = (sv_harmony){ 0 };
}

int sv_harmony_parse(const char *text, size_t len, bool final, const json_t *tools, const char *id_base, sv_harmony *out)
{
    *out = (sv_harmony){ 0 };
    xbuf r = { 0 }, c = { 0 };
    json_t *calls = json_array();
    xadd(&r, "", 0);
    xadd(&c, "", 0);
    size_t i = 0;
    bool at_start = true; /* a message's header may begin at i */
    bool marked = false;  /* ... after a "<|start|>" (kept when what follows is no header after all) */
    while (i < len) {
        const char *s = text + i;
        const size_t n = len - i;
        if (at_start) {
            size_t tl, te = h_end(s, n, &tl);
            const char *m = find(s, te, k_h_msg), *ch, *to;
            size_t ch_n, to_n;
            if (m && (size_t)(m - s) <= H_HEADER_MAX && h_header(s, (size_t)(m - s), &ch, &ch_n, &to, &to_n)) {
                const char *b = m + sizeof k_h_msg - 1;
                size_t bl, be = h_end(b, (size_t)(text + len - b), &bl);
                const bool closed = bl > 0;
                const bool reasoning = ch_n == 8 && !memcmp(ch, "analysis", 8);
                if (!closed && !final) { /* the last message, still coming: what cannot be a mark yet */
                    if (!to)
                        xadd(reasoning ? &r : &c, b, be - h_partial(b, be, k_h_ends, 4));
                    break;
                }
                if (!to) /* analysis: reasoning; final, commentary (a preamble for the user), others: content */
                    xadd(reasoning ? &r : &c, b, be);
                else if (!h_call(calls, to, to_n, b, be, tools, id_base))
                    xadd(&c, s, (size_t)(b + be + bl - s)); /* no call after all: the message as written */
                i = (size_t)(b + be + bl - text);
                at_start = marked = bl == sizeof k_h_start - 1 && !memcmp(b + be, k_h_start, bl);
                continue;
            }
            /* no "<|message|>" yet, but a header may still come: wait */
            if (!m && te == n && !final && n < H_HEADER_MAX + sizeof k_h_msg - 1 && h_opens(s, n))
                break;
            at_start = false;
            if (marked)
                xadd(&c, k_h_start, sizeof k_h_start - 1);
        }
        /* text outside a message: content as written, up to the next "<|start|>" */
        const char *st = find(s, n, k_h_start);
        if (st) {
            xadd(&c, s, (size_t)(st - s));
            i += (size_t)(st - s) + sizeof k_h_start - 1;
            at_start = marked = true;
            continue;
        }
        static const char *const k_start1[] = { k_h_start };
        xadd(&c, s, final ? n : n - h_partial(s, n, k_start1, 1));
        break;
    }
    if (r.oom || c.oom || !calls) {
        free(r.s);
        free(c.s);
        json_decref(calls);
        return -1;
    }
    out->reasoning = r.s;
    out->reasoning_len = r.n;
    out->content = c.s;
    out->content_len = c.n;
    if (json_array_size(calls))
        out->calls = calls;
    else
        json_decref(calls);
    return out->calls ? (int)json_array_size(out->calls) : 0;
}

/* gpt-oss's template reads an assistant turn as transformers passes it: its reasoning in "thinking",
 * a call's arguments as an object (it writes them with tojson), content left out rather than null
 * (it tests "in message.content"). An OpenAI client sends reasoning back as "reasoning_content" (the
 * field this server answers with), arguments as a JSON text and content null beside tool_calls: each
 * is rewritten so (llama.cpp's common_chat_params_init_gpt_oss does the same); arguments that are
 * not a JSON object are left as sent. */
void sv_harmony_messages(json_t *messages)
{
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        if (strcmp(json_string_value(json_object_get(m, "role")), "assistant"))
            continue;
        json_t *rc = json_object_get(m, "reasoning_content");
        const bool calls_given = json_array_size(json_object_get(m, "tool_calls")) > 0;
        if (json_is_string(rc) && !json_object_get(m, "thinking")) {
            json_object_set(m, "thinking", rc);
            if (calls_given) /* the template refuses both beside a call; the reasoning is what was thought */
                json_object_del(m, "content");
        }
        json_object_del(m, "reasoning_content");
        if (json_is_null(json_object_get(m, "content")))
            json_object_del(m, "content");
        json_t *calls = json_object_get(m, "tool_calls"); /* shared with the request: rewritten in a copy */
        if (!json_is_array(calls))
            continue;
        calls = json_deep_copy(calls);
        json_object_set_new(m, "tool_calls", calls);
        size_t k;
        json_t *tc;
        json_array_foreach(calls, k, tc) {
            json_t *fn = json_object_get(tc, "function");
            json_t *args = json_object_get(fn, "arguments");
            if (!json_is_string(args))
                continue;
            json_t *o = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
            if (json_is_object(o))
                json_object_set_new(fn, "arguments", o);
            else
                json_decref(o);
        }
    }
}

/* ---- forced calls (tool_choice "required" or a named function) ---- */

const char *const sv_tool_form_names[7] = { "none", "Hermes <tool_call>", "Mistral [TOOL_CALLS]", "Llama 3 JSON",
                                             "Qwen3.5 <function=...> XML", "Granite <|tool_call|>",
                                             "gpt-oss harmony to=functions.NAME" };

#define PROBE_USER "caldrix tool-form probe"
#define PROBE_NAME "caldrix_probe_fn"

sv_tool_form sv_tool_form_of(const cdx_tmpl *t, const json_t *tokens)
{
    /* the id has Mistral's shape (9 alphanumerics; its template refuses others) */
    json_t *msgs = json_pack("[{s:s,s:s},{s:s,s:s,s:[{s:s,s:s,s:{s:s,s:{s:i}}}]}]", "role", "user", "content",
                             PROBE_USER, "role", "assistant", "content", "", "tool_calls", "id", "abcdef123", "type",
                             "function", "function", "name", PROBE_NAME, "arguments", "x", 1);
    json_t *extra = json_pack("{s:[{s:s,s:{s:s,s:s,s:{s:s,s:{s:{s:s,s:s}},s:[s]}}}]}", "tools", "type", "function",
                              "function", "name", PROBE_NAME, "description", "probe", "parameters", "type", "object",
                              "properties", "x", "type", "integer", "description", "x", "required", "x");
    char *text = NULL;
    size_t len = 0;
    cdx_err err = { 0 };
    sv_tool_form f = SV_FORM_NONE;
    if (msgs && extra && t && !cdx_chat_render(t, msgs, false, tokens, extra, &text, &len, &err)) {
        /* what follows the user's turn: the assistant's call as the template writes it */
        const char *u = NULL;
        for (const char *q = text; (q = find(q, len - (size_t)(q - text), PROBE_USER)); q++)
            u = q;
        if (u) {
            const char *a = u + strlen(PROBE_USER);
            const size_t n = len - (size_t)(a - text);
            const char *call = find(a, n, PROBE_NAME);
            /* a JSON call after the marker (Qwen3.5's <tool_call><function=...> XML is another form) */
            const char *h = find(a, n, k_open), *m = find(a, n, k_mistral);
            if (h)
                h += sizeof k_open - 1;
            if (m)
                m += sizeof k_mistral - 1;
            while (h && h < text + len && is_space(*h))
                h++;
            while (m && m < text + len && is_space(*m))
                m++;
            /* harmony: the call is a message to "functions.NAME" */
            if (find(a, n, " to=functions." PROBE_NAME) && find(a, n, k_h_channel))
                f = SV_FORM_HARMONY;
            else if (h && h < text + len && *h == '{')
                f = SV_FORM_HERMES;
            else if (h && (size_t)(text + len - h) > 10 && !memcmp(h, "<function=", 10))
                f = SV_FORM_XML;
            else if (m && m < text + len && (*m == '[' || *m == '{'))
                f = SV_FORM_MISTRAL;
            else if (call && find(call, n - (size_t)(call - a), "\"parameters\""))
                f = SV_FORM_LLAMA3;
        }
        /* Granite writes no call back, but its system prompt asks for "<|tool_call|>" and a list */
        if (f == SV_FORM_NONE && find(text, len, k_granite))
            f = SV_FORM_GRANITE;
    }
    free(text);
    json_decref(msgs);
    json_decref(extra);
    return f;
}

/* Rewrites every "$ref": "#..." in s (a copy) to point under prefix ("#/$defs/tI"). */
static void rebase_refs(json_t *s, const char *prefix)
{
    if (json_is_array(s)) {
        size_t i;
        json_t *v;
        json_array_foreach(s, i, v) rebase_refs(v, prefix);
        return;
    }
    if (!json_is_object(s))
        return;
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (!strcmp(k, "$ref") && json_is_string(v) && json_string_value(v)[0] == '#') {
            char buf[1024];
            snprintf(buf, sizeof buf, "%s%s", prefix, json_string_value(v) + 1);
            json_string_set(v, buf);
        } else
            rebase_refs(v, prefix);
    }
}

#define TBAD(param, ...) sv_fail(e, 400, "invalid_request_error", "invalid_value", param, __VA_ARGS__)

/* ---- the Qwen3.5 XML form ---- */


/* t as a GBNF literal */
static void xlit(xbuf *b, const char *t, size_t n)
{
    xadd(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        char e[8];
        const unsigned char c = (unsigned char)t[i];
        if (c == '"' || c == '\\')
            snprintf(e, sizeof e, "\\%c", c);
        else if (c == '\n')
            snprintf(e, sizeof e, "\\n");
        else if (c < 0x20 || c == 0x7F)
            snprintf(e, sizeof e, "\\x%02X", c);
        else
            e[0] = (char)c, e[1] = 0;
        xstr(b, e);
    }
    xadd(b, "\"", 1);
}

/* The body of a JSON-string rule of g: follows "NAME ::= OTHER" aliases to a line
 * `"\"" BODY "\"" ws` and returns BODY (malloc'd), or NULL. */
static char *string_body(const char *g, const char *name)
{
    for (int hops = 0; hops < 8; hops++) {
        char key[80];
        snprintf(key, sizeof key, "%.63s ::= ", name);
        const char *l = g;
        while ((l = strstr(l, key)) && l != g && l[-1] != '\n')
            l++;
        if (!l)
            return NULL;
        l += strlen(key);
        const char *e = strchr(l, '\n');
        size_t n = e ? (size_t)(e - l) : strlen(l);
        static const char q[] = "\"\\\"\" ", tail[] = " \"\\\"\" ws";
        if (n > sizeof q - 1 + sizeof tail - 1 && !memcmp(l, q, sizeof q - 1) &&
            !memcmp(l + n - (sizeof tail - 1), tail, sizeof tail - 1))
            return strndup(l + sizeof q - 1, n - (sizeof q - 1) - (sizeof tail - 1));
        static char next[64];
        if (n >= sizeof next || strspn(l, "abcdefghijklmnopqrstuvwxyz0123456789-") != n)
            return NULL;
        snprintf(next, sizeof next, "%.*s", (int)n, l);
        name = next;
    }
    return NULL;
}

static int xml_grammar(sv_params *p, sv_error *e)
{
    json_t *alts = json_array(), *defs = json_object(), *schema = json_pack("{s:o,s:o}", "anyOf", alts, "$defs", defs);
    xbuf calls = { 0 }, vals = { 0 };
    int nv = 0, rc = 0;
    /* per value rule xvN: the root alternative of the compiled schema it is (-1: written here), and
     * whether only its string body is wanted (a raw string with a pattern or format) */
    struct {
        int alt;
        bool body;
    } *fromc = NULL;
    size_t i;
    json_t *tool;
    json_array_foreach(p->tools, i, tool) {
        json_t *fn = json_object_get(tool, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (p->force == SV_FORCE_NAMED && strcmp(name, p->force_name))
            continue;
        char param[96], def[32], prefix[48];
        snprintf(param, sizeof param, "tools[%zu].function.parameters", i);
        snprintf(def, sizeof def, "t%zu", i);
        snprintf(prefix, sizeof prefix, "#/$defs/%s", def);
        json_t *ps = json_object_get(fn, "parameters");
        static const char *const whole[] = { "anyOf", "oneOf", "allOf", "$ref", "enum", "const", "patternProperties" };
        for (size_t w = 0; ps && w < sizeof whole / sizeof *whole; w++)
            if (json_object_get(ps, whole[w])) {
                rc = TBAD(param, "%s: keyword \"%s\" at the top of the parameters is not supported in this model's "
                          "tool-call form (Qwen3.5's XML writes one <parameter=...> per property)", param, whole[w]);
                goto out;
            }
        json_t *copy = ps && json_is_object(ps) ? json_deep_copy(ps) : json_object();
        rebase_refs(copy, prefix);
        json_object_set_new(defs, def, copy);
        json_t *props = json_object_get(copy, "properties"), *req = json_object_get(copy, "required");
        if (calls.n)
            xstr(&calls, " | ");
        xstr(&calls, "\"<function=\" ");
        xlit(&calls, name, strlen(name));
        xstr(&calls, " \">\\n\"");
        for (int pass = 0; pass < 2; pass++) {
            const char *k;
            json_t *pk;
            json_object_foreach(props, k, pk) {
                bool is_req = false;
                size_t j;
                json_t *r;
                json_array_foreach(req, j, r) is_req = is_req || (json_is_string(r) && !strcmp(json_string_value(r), k));
                if (is_req != (pass == 0))
                    continue;
                char vn[32];
                snprintf(vn, sizeof vn, "xv%d", nv);
                void *grown = realloc(fromc, (size_t)(nv + 1) * sizeof *fromc);
                if (!grown) {
                    rc = sv_fail(e, 500, "server_error", "out_of_memory", "tools", "out of memory");
                    goto out;
                }
                fromc = grown;
                fromc[nv].alt = -1;
                fromc[nv].body = false;
                /* the value rule */
                xstr(&vals, vn);
                xstr(&vals, " ::= ");
                const json_t *en = json_object_get(pk, "enum"), *cst = json_object_get(pk, "const");
                const bool raw = xml_raw_string(pk);
                if (raw && (cst || en)) {
                    if (cst)
                        xlit(&vals, json_string_value(cst), json_string_length(cst));
                    size_t q;
                    json_t *ev;
                    json_array_foreach(en, q, ev) {
                        if (q)
                            xstr(&vals, " | ");
                        xlit(&vals, json_string_value(ev), json_string_length(ev));
                    }
                    xstr(&vals, "\n");
                } else if (raw && !json_object_get(pk, "pattern") && !json_object_get(pk, "format")) {
                    const json_t *mn = json_object_get(pk, "minLength"), *mx = json_object_get(pk, "maxLength");
                    char rep[64];
                    if (mx)
                        snprintf(rep, sizeof rep, "{%lld,%lld}", (long long)json_integer_value(mn),
                                 (long long)json_integer_value(mx));
                    else
                        snprintf(rep, sizeof rep, "{%lld,}", (long long)json_integer_value(mn));
                    xstr(&vals, "[^<]");
                    xstr(&vals, rep);
                    xstr(&vals, "\n");
                } else { /* from the schema compiler: filled in below */
                    fromc[nv].alt = (int)json_array_size(alts);
                    fromc[nv].body = raw;
                    char ref[512], ek[256];
                    size_t m = 0;
                    for (const char *c = k; *c && m + 3 < sizeof ek; c++) /* JSON Pointer escapes */
                        if (*c == '~')
                            ek[m++] = '~', ek[m++] = '0';
                        else if (*c == '/')
                            ek[m++] = '~', ek[m++] = '1';
                        else
                            ek[m++] = *c;
                    ek[m] = 0;
                    snprintf(ref, sizeof ref, "%s/properties/%s", prefix, ek);
                    json_array_append_new(alts, json_pack("{s:s}", "$ref", ref));
                    xstr(&vals, "@\n"); /* placeholder line */
                }
                xstr(&calls, is_req ? " " : " (");
                xstr(&calls, "\"<parameter=\" ");
                xlit(&calls, k, strlen(k));
                xstr(&calls, " \">\\n\" ");
                xstr(&calls, vn);
                xstr(&calls, " \"\\n</parameter>\\n\"");
                xstr(&calls, is_req ? "" : ")?");
                nv++;
            }
        }
        xstr(&calls, " \"</function>\"");
    }
    json_array_append_new(alts, json_pack("{s:s}", "type", "null")); /* root is always an alternation */
    char *text = json_dumps(schema, JSON_COMPACT), *g = NULL;
    cdx_err err = { 0 };
    int crc = text ? cdx_json_schema_to_gbnf(text, strlen(text), "tools", &g, &err) : CDX_ENOMEM;
    free(text);
    if (crc) {
        rc = crc == CDX_ENOMEM ? sv_fail(e, 500, "server_error", "out_of_memory", "tools", "out of memory")
                               : sv_fail(e, 400, "invalid_request_error",
                                         crc == CDX_EUNSUPPORTED ? "unsupported_schema" : "invalid_schema", "tools",
                                         "tool_choice forces a call, so the tools' parameters are enforced: %s", err.msg);
        goto out;
    }
    /* root ::= (sA | sB | ... | null's): the alternatives in order */
    char *r = strstr(g, "root ::= (");
    while (r && r != g && r[-1] != '\n')
        r = strstr(r + 1, "root ::= (");
    char **alt_names = calloc(json_array_size(alts) + 1, sizeof *alt_names);
    size_t n_alt = 0;
    if (r && alt_names) {
        *r = 0; /* g now holds the other rules */
        char *a = r + 10;
        while (*a && *a != ')' && n_alt < json_array_size(alts)) {
            size_t l = strcspn(a, " |)");
            alt_names[n_alt++] = strndup(a, l);
            a += l;
            while (*a == ' ' || *a == '|')
                a++;
        }
    }
    xbuf full = { 0 };
    xstr(&full, g);
    char *vp = vals.s ? vals.s : "";
    for (int v = 0; v < nv && !rc; v++) {
        char *nl = strchr(vp, '\n');
        if (!nl)
            break;
        if (nl > vp && nl[-1] == '@') {
            const int ai = fromc[v].alt;
            if (ai < 0 || (size_t)ai >= n_alt || !alt_names[ai]) {
                rc = sv_fail(e, 500, "server_error", "internal_error", "tools", "cannot build the tool calls' grammar");
                break;
            }
            char head[40];
            snprintf(head, sizeof head, "xv%d ::= ", v);
            xstr(&full, head);
            if (fromc[v].body) {
                char *body = string_body(g, alt_names[ai]);
                if (!body) {
                    rc = sv_fail(e, 500, "server_error", "internal_error", "tools", "cannot build the tool calls' grammar");
                    break;
                }
                xstr(&full, body);
                free(body);
            } else {
                xstr(&full, alt_names[ai]);
            }
            xstr(&full, "\n");
        } else {
            xadd(&full, vp, (size_t)(nl - vp + 1));
        }
        vp = nl + 1;
    }
    for (size_t q = 0; q < n_alt; q++)
        free(alt_names[q]);
    free(alt_names);
    free(g);
    if (!rc) {
        const bool many = p->force == SV_FORCE_REQUIRED && p->parallel_tool_calls;
        xstr(&full, "tool-call ::= ");
        xstr(&full, calls.s ? calls.s : "\"\"");
        xstr(&full, "\nroot ::= \"<tool_call>\\n\" tool-call \"\\n</tool_call>\"");
        if (many)
            xstr(&full, " (\"\\n<tool_call>\\n\" tool-call \"\\n</tool_call>\")*");
        xstr(&full, "\n");
        if (full.oom || calls.oom || vals.oom)
            rc = sv_fail(e, 500, "server_error", "out_of_memory", "tools", "out of memory");
        else if ((crc = sv_grammars_compile(p->grammars, true, "tools", full.s, full.n, &p->grammar, &err)))
            rc = sv_fail(e, crc == CDX_ENOMEM ? 500 : 400, crc == CDX_ENOMEM ? "server_error" : "invalid_request_error",
                         "invalid_schema", "tools", "the tools' call grammar: %s", err.msg);
        else
            snprintf(p->grammar_param, sizeof p->grammar_param, "tool_choice");
    }
    free(full.s);
out:
    json_decref(schema);
    free(calls.s);
    free(vals.s);
    free(fromc);
    return rc;
}

/* gpt-oss's harmony: the reply (after the prompt's "<|start|>assistant") is one message to
 * "functions.NAME" on the commentary channel, its body the arguments; "<|call|>", an end of
 * generation, closes it. schema (taken): {"anyOf": [{"$ref": tool i's parameters}, ...]}, the
 * tools in order (the named one alone). One call a reply: "<|call|>" ends the generation. */
static int harmony_grammar(sv_params *p, json_t *schema, sv_error *e)
{
    json_t *alts = json_object_get(schema, "anyOf");
    const size_t n_tools = json_array_size(alts);
    json_array_append_new(alts, json_pack("{s:s}", "type", "null")); /* root is always an alternation */
    char *text = json_dumps(schema, JSON_COMPACT), *g = NULL;
    json_decref(schema);
    cdx_err err = { 0 };
    int rc = text ? cdx_json_schema_to_gbnf(text, strlen(text), "tools", &g, &err) : CDX_ENOMEM;
    free(text);
    if (rc)
        return rc == CDX_ENOMEM ? sv_fail(e, 500, "server_error", "out_of_memory", "tools", "out of memory")
                                : sv_fail(e, 400, "invalid_request_error", "invalid_schema", "tools",
                                          "the tools' call grammar: %s", err.msg);
    /* root ::= (sA | sB | ... | null's): tool i's arguments are the i-th alternative */
    char *r = strstr(g, "root ::= (");
    while (r && r != g && r[-1] != '\n')
        r = strstr(r + 1, "root ::= (");
    xbuf full = { 0 };
    if (r) {
        *r = 0; /* g now holds the other rules */
        xstr(&full, g);
        xstr(&full, "tool-call ::= ");
    }
    const char *a = r ? r + 10 : "";
    size_t i;
    json_t *tool;
    size_t k = 0;
    json_array_foreach(p->tools, i, tool) {
        const char *name = json_string_value(json_object_get(json_object_get(tool, "function"), "name"));
        if (p->force == SV_FORCE_NAMED && strcmp(name, p->force_name))
            continue;
        const size_t l = strcspn(a, " |)");
        if (!l || k >= n_tools)
            break;
        if (k++)
            xstr(&full, " | ");
        /* a mark is matched by its text: the model's own <|channel|> token, or ordinary tokens
         * spelling it (cdx_tok_is_mark) */
        xstr(&full, "\"<|channel|>commentary to=functions.\" ");
        xlit(&full, name, strlen(name));
        xstr(&full, " \" <|constrain|>json<|message|>\" ");
        xadd(&full, a, l);
        a += l;
        while (*a == ' ' || *a == '|')
            a++;
    }
    xstr(&full, "\nroot ::= tool-call\n");
    free(g);
    if (full.oom)
        rc = sv_fail(e, 500, "server_error", "out_of_memory", "tools", "out of memory");
    else if (!r || k != n_tools)
        rc = sv_fail(e, 500, "server_error", "internal_error", "tools", "cannot build the tool calls' grammar");
    else if ((rc = sv_grammars_compile(p->grammars, true, "tools", full.s, full.n, &p->grammar, &err)))
        rc = sv_fail(e, rc == CDX_ENOMEM ? 500 : 400, rc == CDX_ENOMEM ? "server_error" : "invalid_request_error",
                     "invalid_schema", "tools", "the tools' call grammar: %s", err.msg);
    else
        snprintf(p->grammar_param, sizeof p->grammar_param, "tool_choice");
    free(full.s);
    return rc ? -1 : 0;
}

int sv_tool_grammar(sv_params *p, sv_tool_form f, sv_error *e)
{
    if (f == SV_FORM_XML)
        return xml_grammar(p, e);
    if (f == SV_FORM_NONE)
        return TBAD("tool_choice", "tool_choice forces a tool call, but this model's chat template writes its calls in "
                    "none of the forms caldrix can force (Hermes <tool_call>, Mistral [TOOL_CALLS], Llama 3 JSON, "
                    "Qwen3.5 <function=...> XML, Granite <|tool_call|>, gpt-oss harmony)");
    const char *argkey = f == SV_FORM_LLAMA3 ? "parameters" : "arguments";
    json_t *alts = json_array(), *defs = json_object(), *schema = json_pack("{s:o,s:o}", "anyOf", alts, "$defs", defs);
    if (!schema)
        return sv_fail(e, 500, "server_error", "out_of_memory", "tools", "out of memory");
    size_t i;
    json_t *tool;
    json_array_foreach(p->tools, i, tool) {
        json_t *fn = json_object_get(tool, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (p->force == SV_FORCE_NAMED && strcmp(name, p->force_name))
            continue;
        char param[96], def[32];
        snprintf(param, sizeof param, "tools[%zu].function.parameters", i);
        snprintf(def, sizeof def, "t%zu", i);
        json_t *ps = json_object_get(fn, "parameters");
        if (ps && !json_is_null(ps) && !json_is_object(ps)) {
            json_decref(schema);
            return TBAD(param, "%s must be a JSON Schema (an object)", param);
        }
        /* each tool's schema alone first: a keyword it cannot enforce is named with its own path */
        char *text = ps && !json_is_null(ps) ? json_dumps(ps, JSON_COMPACT) : strdup("{\"type\":\"object\"}");
        char *g = NULL;
        cdx_err err = { 0 };
        int rc = text ? cdx_json_schema_to_gbnf(text, strlen(text), param, &g, &err) : CDX_ENOMEM;
        free(text);
        free(g);
        if (rc) {
            json_decref(schema);
            if (rc == CDX_ENOMEM)
                return sv_fail(e, 500, "server_error", "out_of_memory", param, "out of memory");
            return sv_fail(e, 400, "invalid_request_error", rc == CDX_EUNSUPPORTED ? "unsupported_schema" : "invalid_schema",
                           param, "tool_choice forces a call, so the tool's parameters are enforced: %s", err.msg);
        }
        json_t *copy = ps && !json_is_null(ps) ? json_deep_copy(ps) : json_pack("{s:s}", "type", "object");
        char prefix[48];
        snprintf(prefix, sizeof prefix, "#/$defs/%s", def);
        rebase_refs(copy, prefix);
        json_object_set_new(defs, def, copy);
        if (f == SV_FORM_HARMONY) /* the name is in the header, the body is the arguments */
            json_array_append_new(alts, json_pack("{s:s}", "$ref", prefix));
        else
            json_array_append_new(alts, json_pack("{s:s,s:{s:{s:s},s:{s:s}},s:[s,s],s:b}", "type", "object", "properties",
                                                  "name", "const", name, argkey, "$ref", prefix, "required", "name",
                                                  argkey, "additionalProperties", 0));
    }
    if (f == SV_FORM_HARMONY)
        return harmony_grammar(p, schema, e);
    char *text = json_dumps(schema, JSON_COMPACT), *g = NULL;
    json_decref(schema);
    cdx_err err = { 0 };
    int rc = text ? cdx_json_schema_to_gbnf(text, strlen(text), "tools", &g, &err) : CDX_ENOMEM;
    free(text);
    if (rc) {
        if (rc == CDX_ENOMEM)
            return sv_fail(e, 500, "server_error", "out_of_memory", "tools", "out of memory");
        return sv_fail(e, 400, "invalid_request_error", "invalid_schema", "tools", "the tools' call grammar: %s", err.msg);
    }
    /* the schema's start rule is its last line, "root ::= ..." (grammar_schema.c): it becomes the
     * rule of one call, and root wraps the calls in the model's form */
    char *r = strstr(g, "root ::= ");
    while (r && r != g && r[-1] != '\n')
        r = strstr(r + 1, "root ::= ");
    const bool many = p->force == SV_FORCE_REQUIRED && p->parallel_tool_calls && f != SV_FORM_LLAMA3;
    static const char *const k_root[6][2] = {
        [SV_FORM_HERMES] = { "\"<tool_call>\\n\" tool-call \"\\n</tool_call>\"",
                             " (\"\\n<tool_call>\\n\" tool-call \"\\n</tool_call>\")*" },
        [SV_FORM_MISTRAL] = { "\"[TOOL_CALLS]\" \" \"? \"[\" tool-call", " (\", \" tool-call)*" },
        [SV_FORM_LLAMA3] = { "tool-call", "" },
        [SV_FORM_GRANITE] = { "\"<|tool_call|>\" \"[\" tool-call", " (\", \" tool-call)*" },
    };
    const size_t head = r ? (size_t)(r - g) : 0;
    if (r && g[strlen(g) - 1] == '\n')
        g[strlen(g) - 1] = 0;
    const size_t cap = strlen(g) + 512;
    char *full = r ? malloc(cap) : NULL;
    if (full)
        snprintf(full, cap, "%.*stool-call ::= %s\nroot ::= %s%s%s\n", (int)head, g, r + 9 /* "root ::= " */,
                 k_root[f][0], many ? k_root[f][1] : "", f == SV_FORM_MISTRAL || f == SV_FORM_GRANITE ? " \"]\"" : "");
    free(g);
    if (!full)
        return sv_fail(e, 500, "server_error", "internal_error", "tools", "cannot build the tool calls' grammar");
    rc = sv_grammars_compile(p->grammars, true, "tools", full, strlen(full), &p->grammar, &err);
    free(full);
    if (rc)
        return sv_fail(e, rc == CDX_ENOMEM ? 500 : 400, rc == CDX_ENOMEM ? "server_error" : "invalid_request_error",
                       "invalid_schema", "tools", "the tools' call grammar: %s", err.msg);
    snprintf(p->grammar_param, sizeof p->grammar_param, "tool_choice");
    return 0;
}
