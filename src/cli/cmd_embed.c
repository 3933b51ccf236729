/* caldrix embed: sentence vectors from an embedding model (a thin front end over caldrix/embed.h). */
#include "cli.h"
#include "cli_hub.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: caldrix embed MODEL [-p TEXT]... [-f FILE] [--ids 1,2,3]... [--json] [--threads N]\n"
            "                     [--repeat N]\n"
            "\n"
            "Embeds each input with the model's sentence-transformers pipeline (modules.json: the encoder,\n"
            "1_Pooling's cls/mean/max/lasttoken, 2_Normalize; sentence_bert_config.json's max_seq_length and\n"
            "do_lower_case; longer inputs are truncated as sentence-transformers does). All inputs run as one\n"
            "batch; a vector is the same bits alone or in any batch. MODEL: a folder or reference as caldrix run\n"
            "takes it (docs/api.md, \"Embeddings\").\n"
            "  -p, --prompt TEXT   an input (repeatable)\n"
            "  -f, --file FILE     inputs, one a line (empty lines are refused)\n"
            "  --ids 1,2,3         an input of token ids, used exactly as given (repeatable)\n"
            "  --json              {\"model\", \"dim\", \"pooling\", \"normalize\", \"data\": [{\"index\", \"tokens\",\n"
            "                      \"embedding\"}]} (floats with 9 significant digits: the float32 bits)\n"
            "  --threads N         threads of the pass (default 1)\n"
            "  --repeat N          embed the inputs N more times and report the fastest (stderr, or --json's\n"
            "                      \"timings\": {\"repeat\", \"best_ms\", \"inputs_per_s\", \"pack_ms\"}), after waiting\n"
            "                      for the background packing of the weights (pack_ms); bench/compare-embed\n"
            "Without --json: one line per input, the vector's components separated by spaces.\n");
}

typedef struct {
    char **text;       /* [n] or NULL for id inputs */
    int32_t **ids;     /* [n] (id inputs) */
    int64_t *lens;
    int n, cap;
} inputs;

static int add(inputs *in, char *text, int32_t *ids, int64_t len)
{
    if (in->n == in->cap) {
        int cap = in->cap ? in->cap * 2 : 8;
        char **t = realloc(in->text, (size_t)cap * sizeof *t);
        if (t)
            in->text = t;
        int32_t **i = realloc(in->ids, (size_t)cap * sizeof *i);
        if (i)
            in->ids = i;
        int64_t *l = realloc(in->lens, (size_t)cap * sizeof *l);
        if (l)
            in->lens = l;
        if (!t || !i || !l)
            return -1;
        in->cap = cap;
    }
    in->text[in->n] = text;
    in->ids[in->n] = ids;
    in->lens[in->n] = len;
    in->n++;
    return 0;
}

static int parse_ids(const char *s, int32_t **out, int64_t *n)
{
    size_t cap = strlen(s) / 2 + 2;
    int32_t *ids = malloc(cap * sizeof *ids);
    *n = 0;
    if (!ids)
        return -1;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            free(ids);
            return -1;
        }
        ids[(*n)++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    *out = ids;
    return *n ? 0 : (free(ids), -1);
}

static void free_inputs(inputs *in)
{
    for (int i = 0; i < in->n; i++) {
        free(in->text[i]);
        free(in->ids[i]);
    }
    free(in->text);
    free(in->ids);
    free(in->lens);
}

int cmd_embed(int argc, char **argv)
{
    const char *model = NULL;
    bool as_json = false;
    long threads = 1, repeat = 0;
    inputs in = { 0 };
    bool has_text = false, has_ids = false;
    int status = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            free_inputs(&in);
            return 0;
        } else if (!strcmp(a, "--json"))
            as_json = true;
        else if (!strcmp(a, "--repeat") && i + 1 < argc) {
            char *end;
            repeat = strtol(argv[++i], &end, 10);
            if (*end || repeat < 1 || repeat > 100000) {
                fprintf(stderr, "caldrix embed: --repeat %s: expected 1..100000\n", argv[i]);
                free_inputs(&in);
                return 2;
            }
        }
        else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && i + 1 < argc) {
            char *t = strdup(argv[++i]);
            if (!t || add(&in, t, NULL, 0))
                goto oom;
            has_text = true;
        } else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && i + 1 < argc) {
            const char *path = argv[++i];
            FILE *f = fopen(path, "r");
            if (!f) {
                fprintf(stderr, "caldrix embed: %s: cannot open it\n", path);
                goto out;
            }
            char *line = NULL;
            size_t lc = 0;
            ssize_t k;
            long ln = 0;
            while ((k = getline(&line, &lc, f)) >= 0) {
                ln++;
                while (k > 0 && (line[k - 1] == '\n' || line[k - 1] == '\r'))
                    line[--k] = 0;
                if (k == 0) {
                    fprintf(stderr, "caldrix embed: %s: line %ld is empty; every line is one input\n", path, ln);
                    free(line);
                    fclose(f);
                    goto out;
                }
                char *t = strdup(line);
                if (!t || add(&in, t, NULL, 0)) {
                    free(line);
                    fclose(f);
                    goto oom;
                }
            }
            free(line);
            fclose(f);
            has_text = true;
        } else if (!strcmp(a, "--ids") && i + 1 < argc) {
            int32_t *ids;
            int64_t n;
            if (parse_ids(argv[++i], &ids, &n)) {
                fprintf(stderr, "caldrix embed: --ids: \"%s\" is not a comma-separated list of token ids\n", argv[i]);
                goto out;
            }
            if (add(&in, NULL, ids, n))
                goto oom;
            has_ids = true;
        } else if (!strcmp(a, "--threads") && i + 1 < argc) {
            if (cli_parse_int("--threads", argv[++i], 1, 1024, &threads))
                goto out;
        } else if (a[0] == '-') {
            fprintf(stderr, "caldrix embed: unknown option %s\n", a);
            usage(stderr);
            goto out;
        } else if (!model)
            model = a;
        else {
            fprintf(stderr, "caldrix embed: unexpected argument \"%s\" (inputs go after -p)\n", a);
            goto out;
        }
    }
    if (!model || in.n == 0) {
        fprintf(stderr, "caldrix embed: %s\n", !model ? "name a MODEL" : "no inputs: give -p TEXT, -f FILE or --ids");
        usage(stderr);
        goto out;
    }
    if (has_text && has_ids) {
        fprintf(stderr, "caldrix embed: give texts (-p, -f) or token ids (--ids), not both\n");
        goto out;
    }
    if (in.n > CDX_EMBED_MAX_INPUTS) {
        fprintf(stderr, "caldrix embed: %d inputs; at most %d in one call\n", in.n, CDX_EMBED_MAX_INPUTS);
        goto out;
    }
    status = 1;
    cdx_err err = { 0 };
    cdx_load_opts lo = cli_load_opts(NULL, CDX_DTYPE_F32, 0); /* embeddings are f32 */
    lo.tokenizer = has_text;
    cdx_loaded *l = NULL;
    cdx_load_stage stage;
    cdx_st_pipeline pipe;
    cdx_embedder *e = NULL;
    float *vec = NULL;
    int64_t *ntok = NULL;
    if (cdx_load(model, &lo, &l, &stage, &err) || cdx_st_pipeline_read(l->path, &pipe, &err)) {
        fprintf(stderr, "caldrix embed: %s\n", err.msg);
        goto done;
    }
    cdx_embedder_opts eo = { .n_threads = (int)threads };
    if (cdx_embedder_open(l->model, l->tok, &pipe, &eo, &e, &err)) {
        fprintf(stderr, "caldrix embed: %s: %s\n", l->path, err.msg);
        goto done;
    }
    const int64_t D = cdx_embedder_dim(e);
    vec = malloc((size_t)in.n * (size_t)D * sizeof *vec);
    ntok = malloc((size_t)in.n * sizeof *ntok);
    if (!vec || !ntok) {
        fprintf(stderr, "caldrix embed: out of memory\n");
        goto done;
    }
    int rc;
    if (has_text)
        rc = cdx_embed_texts(e, (const char *const *)in.text, in.n, vec, ntok, &err);
    else {
        rc = cdx_embed_ids(e, (const int32_t *const *)in.ids, in.lens, in.n, vec, &err);
        memcpy(ntok, in.lens, (size_t)in.n * sizeof *ntok);
    }
    if (rc) {
        fprintf(stderr, "caldrix embed: %s\n", err.msg);
        goto done;
    }
    double best_ms = 0; /* --repeat: the fastest of N more calls of the same inputs (the first warmed up) */
    /* timed calls run at full speed: the matrices left to the background packer are packed first (as
     * caldrix bench waits; llama.cpp repacks at load, untimed), and the wait is reported */
    const double pack_ms = repeat > 0 ? cdx_model_pack_wait(l->model) : 0;
    for (long r = 0; r < repeat && !rc; r++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        rc = has_text ? cdx_embed_texts(e, (const char *const *)in.text, in.n, vec, ntok, &err)
                      : cdx_embed_ids(e, (const int32_t *const *)in.ids, in.lens, in.n, vec, &err);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        const double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
        best_ms = r == 0 || ms < best_ms ? ms : best_ms;
    }
    if (repeat > 0 && !as_json)
        fprintf(stderr, "caldrix embed: %d inputs in %.3f ms (best of %ld, after %.1f ms packing): %.1f inputs/s\n",
                in.n, best_ms, repeat, pack_ms, in.n * 1e3 / best_ms);
    if (as_json) {
        json_t *root = json_object(), *data = json_array();
        json_object_set_new(root, "model", json_string(model));
        json_object_set_new(root, "dim", json_integer(D));
        json_object_set_new(root, "pooling", json_string(cdx_pooling_name(cdx_embedder_pipeline(e)->pooling)));
        json_object_set_new(root, "normalize", json_boolean(cdx_embedder_pipeline(e)->normalize));
        if (repeat > 0)
            json_object_set_new(root, "timings", json_pack("{s:i, s:f, s:f, s:f}", "repeat", (json_int_t)repeat, "best_ms",
                                                           best_ms, "inputs_per_s", in.n * 1e3 / best_ms, "pack_ms",
                                                           pack_ms));
        fputs("{", stdout);
        char *head = json_dumps(root, JSON_COMPACT);
        /* the vectors are printed by hand: %.9g keeps every float32's bits */
        printf("%.*s,\"data\":[", (int)strlen(head) - 2, head + 1);
        free(head);
        json_decref(root);
        json_decref(data);
        for (int i = 0; i < in.n; i++) {
            printf("%s{\"index\":%d,\"tokens\":%lld,\"embedding\":[", i ? "," : "", i, (long long)ntok[i]);
            for (int64_t c = 0; c < D; c++)
                printf("%s%.9g", c ? "," : "", (double)vec[(size_t)i * (size_t)D + (size_t)c]);
            printf("]}");
        }
        printf("]}\n");
    } else {
        for (int i = 0; i < in.n; i++) {
            for (int64_t c = 0; c < D; c++)
                printf("%s%.9g", c ? " " : "", (double)vec[(size_t)i * (size_t)D + (size_t)c]);
            putchar('\n');
        }
    }
    status = 0;
done:
    free(vec);
    free(ntok);
    cdx_embedder_close(e);
    cdx_load_close(l);
out:
    free_inputs(&in);
    return status;
oom:
    fprintf(stderr, "caldrix embed: out of memory\n");
    free_inputs(&in);
    return 1;
}
