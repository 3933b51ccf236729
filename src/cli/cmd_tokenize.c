/* caldrix tokenize: text -> ids with a model's tokenizer (see shared/design/INTERFACES.md). */
#include "cli.h"
#include "cli_hub.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: caldrix tokenize MODEL [--no-special] [--no-parse-special] [--json] TEXT\n"
            "       caldrix tokenize MODEL --jsonl            (JSON lines on stdin)\n"
            "       caldrix tokenize MODEL --file PATH [--bench N] [--json]\n"
            "\n"
            "MODEL is a .gguf, a directory with tokenizer files, a tokenizer.json, or a model reference as\n"
            "caldrix run takes it (an alias, owner/name[@revision], ollama:name[:tag]): resolved through the\n"
            "cache, and downloaded when it is not complete there (docs/models.md).\n"
            "  --no-special        add no BOS/EOS or post-processor template (add_special_tokens=false)\n"
            "  --no-parse-special  special tokens written in the text are plain text (llama.cpp parse_special=false)\n"
            "  --json              print the ids as a JSON array\n"
            "  --jsonl             read {\"text\":...,\"add_special_tokens\":bool,\"parse_special\":bool} lines from stdin,\n"
            "                      write {\"ids\":[...],\"decoded\":\"...\"} lines\n"
            "  --file PATH         tokenize a whole file and report the token count and speed (MB/s) on stdout\n"
            "  --bench N           with --file: tokenize it N times and report the best run\n");
}

static int encode_alloc(const cdx_tok *tok, const char *s, size_t n, bool add, bool parse, int32_t **ids, size_t *n_ids,
                        cdx_err *err)
{
    size_t cap = n / 2 + 16, need = 0;
    *ids = malloc(cap * sizeof **ids);
    if (!*ids)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    int rc = cdx_tok_encode(tok, s, n, add, parse, *ids, cap, &need, err);
    if (rc == 0 && need > cap) {
        int32_t *p = realloc(*ids, need * sizeof **ids);
        if (!p) return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        *ids = p;
        rc = cdx_tok_encode(tok, s, n, add, parse, *ids, need, &need, err);
    }
    *n_ids = need;
    return rc;
}

static char *decode_alloc(const cdx_tok *tok, const int32_t *ids, size_t n, size_t *len, cdx_err *err)
{
    size_t need = 0;
    if (cdx_tok_decode(tok, ids, n, false, NULL, 0, &need, err) < 0)
        return NULL;
    char *s = malloc(need + 1);
    if (!s) { cdx_err_set(err, CDX_ENOMEM, "out of memory"); return NULL; }
    if (cdx_tok_decode(tok, ids, n, false, s, need + 1, &need, err) < 0) { free(s); return NULL; }
    *len = need;
    return s;
}

static int run_jsonl(const cdx_tok *tok)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int status = 0;
    size_t lineno = 0;
    while ((n = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = 0;
        if (n == 0)
            continue;
        json_error_t je;
        cdx_err err = {0};
        json_t *in = json_loadb(line, (size_t)n, 0, &je), *out = json_object();
        json_t *text = json_object_get(in, "text");
        int32_t *ids = NULL;
        size_t n_ids = 0, dl = 0;
        char *dec = NULL;
        if (!in || !json_is_string(text)) {
            fprintf(stderr, "caldrix: stdin line %zu: %s\n", lineno, in ? "has no \"text\" string" : je.text);
            json_object_set_new(out, "error", json_string(in ? "no \"text\" string" : "invalid JSON"));
            status = 1;
        } else {
            json_t *a = json_object_get(in, "add_special_tokens"), *p = json_object_get(in, "parse_special");
            bool add = !json_is_false(a), parse = !json_is_false(p);
            if (encode_alloc(tok, json_string_value(text), json_string_length(text), add, parse, &ids, &n_ids, &err) < 0 ||
                !(dec = decode_alloc(tok, ids, n_ids, &dl, &err))) {
                fprintf(stderr, "caldrix: stdin line %zu: %s\n", lineno, err.msg);
                json_object_set_new(out, "error", json_string(err.msg));
                status = 1;
            } else {
                json_t *arr = json_array();
                for (size_t i = 0; i < n_ids; i++)
                    json_array_append_new(arr, json_integer(ids[i]));
                json_object_set_new(out, "ids", arr);
                json_object_set_new(out, "decoded", json_stringn_nocheck(dec, dl));
            }
        }
        char *s = json_dumps(out, JSON_COMPACT);
        if (s) {
            fputs(s, stdout);
            fputc('\n', stdout);
            free(s);
        }
        fflush(stdout);
        free(ids); free(dec);
        json_decref(in); json_decref(out);
    }
    free(line);
    return status;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *text = NULL, *file = NULL;
    bool add = true, parse = true, as_json = false, jsonl = false;
    long bench = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--no-special")) add = false;
        else if (!strcmp(a, "--no-parse-special")) parse = false;
        else if (!strcmp(a, "--json")) as_json = true;
        else if (!strcmp(a, "--jsonl")) jsonl = true;
        else if (!strcmp(a, "--file") && i + 1 < argc) file = argv[++i];
        else if (!strcmp(a, "--bench") && i + 1 < argc) { if (cli_parse_int("--bench", argv[++i], 1, 100000, &bench)) return 2; }
        else if (a[0] == '-' && a[1] == '-') { fprintf(stderr, "caldrix tokenize: unknown option %s\n", a); usage(stderr); return 2; }
        else if (!model) model = a;
        else if (!text) text = a;
        else { fprintf(stderr, "caldrix tokenize: unexpected argument \"%s\" (quote the text)\n", a); return 2; }
    }
    if (!model || (!jsonl && !file && !text)) {
        usage(stderr);
        return 2;
    }
    cdx_err err = {0};
    cdx_tok *tok = NULL;
    char *resolved = NULL;
    if (cli_resolve_model(model, false, &model, &resolved))
        return 1;
    double t0 = cdx_time_ms();
    int orc = cdx_tok_open(model, &tok, &err);
    free(resolved);
    if (orc < 0) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        return 1;
    }
    double load_ms = cdx_time_ms() - t0;
    int status = 0;
    if (jsonl) {
        status = run_jsonl(tok);
    } else if (file) {
        char *buf = NULL;
        size_t len = 0;
        if (cdx_file_read_all(file, (size_t)1 << 31, &buf, &len, &err) < 0) {
            fprintf(stderr, "caldrix: %s\n", err.msg);
            cdx_tok_close(tok);
            return 1;
        }
        double best = 1e300, first = 0;
        size_t n_ids = 0;
        for (long r = 0; r < bench && !status; r++) {
            int32_t *ids = NULL;
            double a = cdx_time_ms();
            if (encode_alloc(tok, buf, len, add, parse, &ids, &n_ids, &err) < 0) {
                fprintf(stderr, "caldrix: %s: %s\n", file, err.msg);
                status = 1;
            }
            double ms = cdx_time_ms() - a;
            if (r == 0) first = ms;
            if (ms < best) best = ms;
            free(ids);
        }
        if (!status) {
            double mbs = best > 0 ? (double)len / 1e6 / (best / 1e3) : 0;
            if (as_json)
                printf("{\"bytes\":%zu,\"tokens\":%zu,\"load_ms\":%.1f,\"encode_ms\":%.2f,\"first_ms\":%.2f,\"mb_s\":%.2f}\n",
                       len, n_ids, load_ms, best, first, mbs);
            else
                printf("%zu bytes -> %zu tokens in %.2f ms (best of %ld): %.2f MB/s (load %.0f ms)\n", len, n_ids, best, bench,
                       mbs, load_ms);
        }
        free(buf);
    } else {
        int32_t *ids = NULL;
        size_t n_ids = 0;
        if (encode_alloc(tok, text, strlen(text), add, parse, &ids, &n_ids, &err) < 0) {
            fprintf(stderr, "caldrix: %s\n", err.msg);
            status = 1;
        } else {
            if (as_json) putchar('[');
            for (size_t i = 0; i < n_ids; i++)
                printf(as_json ? "%s%d" : "%s%d", i ? (as_json ? "," : " ") : "", ids[i]);
            printf(as_json ? "]\n" : "\n");
        }
        free(ids);
    }
    cdx_tok_close(tok);
    return status;
}
