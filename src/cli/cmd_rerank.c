/* caldrix rerank: query-document relevance scores from a reranker (a thin front end over caldrix/embed.h). */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: caldrix rerank MODEL --query Q DOC... [--instruction TEXT] [--json] [--threads N]\n"
            "       caldrix rerank MODEL --pair-ids 3,222,...  (repeatable) [--yes-id N --no-id N] [--json]\n"
            "\n"
            "Scores each document against the query with a causal LM reranker (Qwen3-Reranker): the model card's\n"
            "prompt (system judge, <Instruct>/<Query>/<Document>, the assistant's empty think block), then\n"
            "score = softmax([logit_no, logit_yes])[1] at the last position. Prints the documents best first.\n"
            "  --query Q           the query; the other arguments are the documents\n"
            "  --instruction TEXT  the task instruction (default: the model card's web-search one)\n"
            "  --pair-ids IDS      a whole formatted pair as token ids, used as given (models without a tokenizer)\n"
            "  --yes-id N, --no-id N  the answer tokens (default: the tokenizer's \"yes\" and \"no\")\n"
            "  --json              {\"results\": [{\"index\", \"relevance_score\", \"document\"?, \"logit_yes\"?, \"logit_no\"?}]}\n"
            "                      best first (logits with --pair-ids)\n"
            "  --threads N         threads of the pass (default 1)\n"
            "  --repeat N          score the pairs N more times and report the fastest call (stderr, or --json's\n"
            "                      \"timings\": {\"repeat\", \"best_ms\", \"pairs_per_s\", \"pack_ms\"}), after waiting\n"
            "                      for the background packing of the weights (pack_ms); bench/compare-embed\n"
            "Without --json: one line per document, best first: INDEX SCORE (9 significant digits).\n");
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

typedef struct {
    int index;
    float score;
} ranked;

static int by_score(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    return x->score < y->score ? 1 : x->score > y->score ? -1 : x->index - y->index;
}

int cmd_rerank(int argc, char **argv)
{
    const char *model = NULL, *query = NULL, *instruction = NULL;
    bool as_json = false;
    long threads = 1, yes_id = -1, no_id = -1, repeat = 0;
    int n = 0, n_ids = 0, status = 2;
    const char **docs = calloc((size_t)argc + 1, sizeof *docs);
    int32_t **ids = calloc((size_t)argc + 1, sizeof *ids);
    int64_t *lens = calloc((size_t)argc + 1, sizeof *lens);
    if (!docs || !ids || !lens) {
        fprintf(stderr, "caldrix rerank: out of memory\n");
        free(docs); free(ids); free(lens);
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            status = 0;
            goto out;
        } else if (!strcmp(a, "--json"))
            as_json = true;
        else if (!strcmp(a, "--query") && i + 1 < argc)
            query = argv[++i];
        else if (!strcmp(a, "--instruction") && i + 1 < argc)
            instruction = argv[++i];
        else if (!strcmp(a, "--pair-ids") && i + 1 < argc) {
            if (parse_ids(argv[++i], &ids[n_ids], &lens[n_ids])) {
                fprintf(stderr, "caldrix rerank: --pair-ids: \"%s\" is not a comma-separated list of token ids\n", argv[i]);
                goto out;
            }
            n_ids++;
        } else if (!strcmp(a, "--yes-id") && i + 1 < argc) {
            if (cli_parse_int("--yes-id", argv[++i], 0, INT32_MAX, &yes_id))
                goto out;
        } else if (!strcmp(a, "--no-id") && i + 1 < argc) {
            if (cli_parse_int("--no-id", argv[++i], 0, INT32_MAX, &no_id))
                goto out;
        } else if (!strcmp(a, "--repeat") && i + 1 < argc) {
            if (cli_parse_int("--repeat", argv[++i], 1, 100000, &repeat))
                goto out;
        } else if (!strcmp(a, "--threads") && i + 1 < argc) {
            if (cli_parse_int("--threads", argv[++i], 1, 1024, &threads))
                goto out;
        } else if (a[0] == '-' && a[1] == '-') {
            fprintf(stderr, "caldrix rerank: unknown option %s\n", a);
            usage(stderr);
            goto out;
        } else if (!model)
            model = a;
        else
            docs[n++] = a;
    }
    if (!model || (n_ids == 0 && (!query || n == 0))) {
        fprintf(stderr, "caldrix rerank: %s\n", !model ? "name a MODEL" : "give --query Q and documents, or --pair-ids");
        usage(stderr);
        goto out;
    }
    if (n_ids && (query || n)) {
        fprintf(stderr, "caldrix rerank: give --query with documents, or --pair-ids, not both\n");
        goto out;
    }
    if ((yes_id < 0) != (no_id < 0)) {
        fprintf(stderr, "caldrix rerank: give both --yes-id and --no-id, or neither\n");
        goto out;
    }
    const int count = n_ids ? n_ids : n;
    if (count > CDX_EMBED_MAX_INPUTS) {
        fprintf(stderr, "caldrix rerank: %d documents; at most %d in one call\n", count, CDX_EMBED_MAX_INPUTS);
        goto out;
    }
    status = 1;
    cdx_err err = { 0 };
    cdx_load_opts lo = cli_load_opts(NULL, CDX_DTYPE_F32, 0);
    lo.tokenizer = true;
    cdx_loaded *l = NULL;
    cdx_load_stage stage;
    cdx_embedder *e = NULL;
    float *scores = malloc((size_t)count * sizeof *scores), *logits = malloc((size_t)count * 2 * sizeof *logits);
    ranked *r = malloc((size_t)count * sizeof *r);
    if (!scores || !logits || !r) {
        fprintf(stderr, "caldrix rerank: out of memory\n");
        goto done;
    }
    if (cdx_load(model, &lo, &l, &stage, &err)) {
        fprintf(stderr, "caldrix rerank: %s\n", err.msg);
        goto done;
    }
    cdx_embedder_opts eo = { .n_threads = (int)threads, .task = CDX_TASK_RERANK, .yes_id = (int32_t)yes_id,
                             .no_id = (int32_t)no_id };
    if (cdx_embedder_open(l->model, l->tok, NULL, &eo, &e, &err)) {
        fprintf(stderr, "caldrix rerank: %s: %s\n", l->path ? l->path : model, err.msg);
        goto done;
    }
    if (n_ids ? cdx_rerank_ids(e, (const int32_t *const *)ids, lens, count, scores, logits, &err)
              : cdx_rerank_texts(e, query, docs, count, instruction, scores, &err)) {
        fprintf(stderr, "caldrix rerank: %s\n", err.msg);
        goto done;
    }
    double best_ms = 0; /* --repeat: the fastest of N more calls of the same pairs (the first warmed up) */
    const double pack_ms = repeat > 0 ? cdx_model_pack_wait(l->model) : 0; /* as caldrix embed --repeat */
    for (long k = 0; k < repeat; k++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int rc = n_ids ? cdx_rerank_ids(e, (const int32_t *const *)ids, lens, count, scores, logits, &err)
                       : cdx_rerank_texts(e, query, docs, count, instruction, scores, &err);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (rc) {
            fprintf(stderr, "caldrix rerank: %s\n", err.msg);
            goto done;
        }
        const double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
        best_ms = k == 0 || ms < best_ms ? ms : best_ms;
    }
    if (repeat > 0 && !as_json)
        fprintf(stderr, "caldrix rerank: %d pairs in %.3f ms (best of %ld, after %.1f ms packing): %.1f pairs/s\n",
                count, best_ms, repeat, pack_ms, count * 1e3 / best_ms);
    for (int i = 0; i < count; i++)
        r[i] = (ranked){ i, scores[i] };
    qsort(r, (size_t)count, sizeof *r, by_score);
    if (as_json) {
        json_t *root = json_object(), *res = json_array();
        for (int i = 0; i < count; i++) {
            json_t *o = json_object();
            json_object_set_new(o, "index", json_integer(r[i].index));
            json_object_set_new(o, "relevance_score", json_real(r[i].score));
            if (!n_ids)
                json_object_set_new(o, "document", json_string(docs[r[i].index]));
            else {
                json_object_set_new(o, "logit_yes", json_real(logits[2 * r[i].index]));
                json_object_set_new(o, "logit_no", json_real(logits[2 * r[i].index + 1]));
            }
            json_array_append_new(res, o);
        }
        json_object_set_new(root, "results", res);
        if (repeat > 0)
            json_object_set_new(root, "timings", json_pack("{s:i, s:f, s:f, s:f}", "repeat", (json_int_t)repeat, "best_ms",
                                                           best_ms, "pairs_per_s", count * 1e3 / best_ms, "pack_ms",
                                                           pack_ms));
        char *s = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(9));
        if (s)
            puts(s);
        free(s);
        json_decref(root);
    } else
        for (int i = 0; i < count; i++)
            printf("%d %.9g\n", r[i].index, (double)r[i].score);
    status = 0;
done:
    free(scores);
    free(logits);
    free(r);
    cdx_embedder_close(e);
    cdx_load_close(l);
out:
    for (int i = 0; i < n_ids; i++)
        free(ids[i]);
    free(ids);
    free(docs);
    free(lens);
    return status;
}
