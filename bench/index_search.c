/* bench/index: search latency over a model index (cdx_index_search in-process, the index already
 * open, as `caldrix models search` runs it after opening). Prints one JSON line per query and a
 * summary: p50/p95 in ms over ROUNDS rounds of every query.
 *   index_search DB ROUNDS */
#include "caldrix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: index_search DB ROUNDS\n");
        return 2;
    }
    int rounds = atoi(argv[2]);
    cdx_err err = { 0 };
    cdx_index *ix;
    if (cdx_index_open(argv[1], false, &ix, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    /* words of the catalogue: common, rare, two words, a prefix, filters */
    static const struct { const char *w[3]; const char *arch, *format; uint64_t max_params; bool runnable; } q[] = {
        { { "qwen3" } }, { { "llama" } }, { { "roleplay" } }, { { "qwen3", "8b" } }, { { "mistral", "4b", "code" } },
        { { "q" } }, { { "user42" } }, { { "gguf" } }, { { "instruct" } }, { { "nosuchword" } },
        { { "qwen3" }, "qwen3", "gguf", 2000000000ull, false }, { { "math" }, NULL, NULL, 0, true },
        { { NULL }, "llama", "safetensors", 0, true },
    };
    const size_t nq = sizeof q / sizeof q[0];
    double *all = calloc((size_t)rounds * nq, sizeof *all), *one = calloc((size_t)rounds, sizeof *one);
    for (size_t i = 0; i < nq; i++) {
        size_t nw = 0;
        while (nw < 3 && q[i].w[nw])
            nw++;
        cdx_index_query qq = { .words = q[i].w, .n_words = nw, .arch = q[i].arch, .format = q[i].format,
                               .max_params = q[i].max_params, .runnable = q[i].runnable, .mem_available = 16ull << 30 };
        size_t n_res = 0;
        for (int r = 0; r < rounds; r++) {
            char *json = NULL;
            double t0 = cdx_time_ms();
            if (cdx_index_search(ix, &qq, &json, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
            one[r] = cdx_time_ms() - t0;
            all[(size_t)r * nq + i] = one[r];
            n_res = 0;
            for (const char *p = json; (p = strstr(p, "\"id\":")); p++)
                n_res++;
            free(json);
        }
        qsort(one, (size_t)rounds, sizeof *one, cmp_d);
        printf("{\"query\": \"%s%s%s%s%s\", \"arch\": \"%s\", \"format\": \"%s\", \"runnable\": %s, \"results\": %zu, "
               "\"p50_ms\": %.3f, \"p95_ms\": %.3f}\n", q[i].w[0] ? q[i].w[0] : "", q[i].w[1] ? " " : "",
               q[i].w[1] ? q[i].w[1] : "", q[i].w[2] ? " " : "", q[i].w[2] ? q[i].w[2] : "", q[i].arch ? q[i].arch : "",
               q[i].format ? q[i].format : "", q[i].runnable ? "true" : "false", n_res, one[rounds / 2],
               one[(size_t)(rounds * 95 / 100)]);
    }
    size_t n = (size_t)rounds * nq;
    qsort(all, n, sizeof *all, cmp_d);
    printf("{\"all_queries\": %zu, \"p50_ms\": %.3f, \"p95_ms\": %.3f, \"max_ms\": %.3f}\n", n, all[n / 2],
           all[n * 95 / 100], all[n - 1]);
    cdx_index_close(ix);
    free(all);
    free(one);
    return 0;
}
