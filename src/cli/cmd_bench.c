/* caldrix bench: load time, prefill and decode speed of a model.
 *
 *   caldrix bench model.gguf -t 2 -p 128 -n 64 --json
 *
 * Through the engine, as run and serve use it: prefill runs the prompt (synthetic ids) as one batch;
 * decode then computes -n tokens one at a time, each the argmax of the previous logits. After a warm-up
 * of one whole prompt (as llama-bench's; it also pages the weights in), each of -r runs uses prompts the prefix cache has not
 * seen; the figures are the median over the runs (the best run is reported too). Weight bytes per token are those a decode
 * step reads (every matrix once, one embedding row aside), so bytes x decode tok/s is the
 * bandwidth the decode loop drew from memory.
 */
#include "cli.h"
#include "caldrix/engine.h"
#include "cli_split.h"
#include "caldrix/model.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* median of n values (n >= 1); v is reordered */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: caldrix bench MODEL [-t THREADS] [-p PROMPT_TOKENS] [-n GEN_TOKENS] [-r RUNS]\n"
               "                     [--parallel N] [--prefix-hit] [--isa NAME] [--dtype auto|f32|bf16]\n"
               "                     [--kv-type f32|f16|bf16] [--mem-bw GB/s] [--weight-budget BYTES] [--spec lookup|auto|off]\n"
               "                     [--draft DRAFT] [--draft-max K] [--draft-min K] [--spec-keep-on] [--json]\n"
               "                     [--allow-split [--nodes N] [--split-layers SPEC] [--split-micro N] ...]\n\n"
               "Times loading MODEL, a prefill of PROMPT_TOKENS synthetic ids in one batch (default 128)\n"
               "and a decode of GEN_TOKENS tokens one at a time (default 64), through the engine as run and\n"
               "serve use it; prints the median of RUNS runs (default 3) after a warm-up of one whole prompt\n"
               "(as llama-bench's), each on prompts the cache has not seen. THREADS defaults to the number\n"
               "of CPUs; --isa forces a kernel set (amx, avx512, avx2, scalar; avx512-gemm, amx-gemm: faster\n"
               "prefill, not batch invariant). --mem-bw adds the decode ceiling: the memory bandwidth divided by the\n"
               "weight bytes one decoded token reads.\n"
               "--parallel N: N requests of the same lengths at once (continuous batching): aggregate and\n"
               "per-stream decode tok/s. --prefix-hit: time to first token of a prompt whose all but last\n"
               "16 tokens are in the prefix cache, against one that is not. --weight-budget: as run's (a\n"
               "mixture of experts streams its experts; the JSON adds expert_slots, expert_hits, expert_misses).\n"
               "--dtype: the compute type, as caldrix run takes it (the KV cache follows it: bf16 for bf16\n"
               "compute, else f32); --kv-type: the KV cache's storage, as caldrix run takes it (f16: as\n"
               "llama.cpp's default cache). The load time is until the model can run; matrices whose packed layout\n"
               "is made in the background after it (AVX2: Q8_0, Q4_0, IQ4_NL) are waited for before the\n"
               "runs (pack_ms). --spec, --draft-max, --draft-min, --spec-keep-on: speculative decoding as\n"
               "caldrix run takes it; the draft tokens proposed and kept are reported (spec_proposed,\n"
               "spec_accepted). --draft DRAFT: a draft model (a file or folder; implies --spec auto),\n"
               "loaded and refused as caldrix run's --draft (exit 2).\n"
               "Under mpirun with --allow-split, the model is split by layers across the ranks as run and\n"
               "serve split it; rank 0 times it and adds what crossed during the timed runs (split: bytes\n"
               "sent and received, the tokens they carried, ms rank 0 waited in MPI).\n\n"
               CLI_SPLIT_HELP);
    cli_print_engine_ranges(f, (const cdx_engine_opt_id[]){ CDX_OPT_THREADS, CDX_OPT_DRAFT_MAX, CDX_OPT_DRAFT_MIN }, 3);
}

/* This process's resident memory now and at its peak (/proc/self/status VmRSS, VmHWM), bytes; 0 when unknown. */
static void rss_bytes(uint64_t *now, uint64_t *peak)
{
    *now = *peak = 0;
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long kb;
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "VmRSS: %llu kB", &kb) == 1)
            *now = (uint64_t)kb << 10;
        else if (sscanf(line, "VmHWM: %llu kB", &kb) == 1)
            *peak = (uint64_t)kb << 10;
    }
    if (f)
        fclose(f);
}

/* Synthetic prompt ids: spread over the vocabulary, deterministic, never the first 3 (specials). */
static void synth_ids(int32_t *ids, int64_t n, int64_t n_vocab)
{
    uint64_t s = 0x2545f4914f6cdd1dull;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = n_vocab > 3 ? (int32_t)(3 + (s >> 33) % (uint64_t)(n_vocab - 3)) : 0;
    }
}

#define N_KEEP 16 /* greedy tokens kept from the last run (its first prompt unsalted), to compare engines */
#define MAX_PAR 64

/* One request's timeline, from its events. */
typedef struct {
    double t_submit, t_first, t_end;
    int64_t n_gen, n_cached;
    int32_t kept[N_KEEP];
    int n_kept;
    bool failed;
} bench_req;

static void on_event(const cdx_event *ev)
{
    bench_req *r = ev->user;
    if (ev->finish != CDX_FINISH_NONE) {
        r->t_end = now_s();
        r->failed = ev->finish == CDX_FINISH_ERROR || ev->finish == CDX_FINISH_CANCELLED;
        r->n_cached = ev->n_cached;
        return;
    }
    if (ev->index == 0)
        r->t_first = now_s();
    if (r->n_kept < N_KEEP)
        r->kept[r->n_kept++] = ev->token;
    r->n_gen++;
}

/* Submits n requests (prompts[i] of n_prompt ids each, greedy, max_tokens each) at once and runs
 * the engine until they all end. */
static int bench_batch(cdx_engine *e, int32_t *const *prompts, int n, int64_t n_prompt, int64_t max_tokens,
                       bench_req *rs, cdx_err *err)
{
    for (int i = 0; i < n; i++) {
        cdx_request r = cdx_request_defaults();
        r.prompt = prompts[i];
        r.n_prompt = n_prompt;
        r.max_tokens = max_tokens;
        r.ignore_eos = true;
        r.sampling.temp = 0;
        r.on_event = on_event;
        r.user = &rs[i];
        memset(&rs[i], 0, sizeof rs[i]);
        rs[i].t_submit = now_s();
        int rc = cdx_engine_submit(e, &r, NULL, err);
        if (rc)
            return rc;
    }
    while (cdx_engine_busy(e)) {
        int rc = cdx_engine_step(e, err);
        if (rc)
            return rc;
    }
    for (int i = 0; i < n; i++)
        if (rs[i].failed || rs[i].n_gen != max_tokens)
            return cdx_err_set(err, CDX_EINVAL, "request %d ended after %lld of %lld tokens", i, (long long)rs[i].n_gen,
                               (long long)max_tokens);
    return CDX_OK;
}

int cmd_bench(int argc, char **argv)
{
    const char *path = NULL, *isa = NULL, *draft = NULL;
    long threads = 0, n_prompt = 128, n_gen = 64, runs = 3, parallel = 1;
    double mem_bw = 0;
    uint64_t budget = 0;
    bool json = false, prefix_hit = false, spec_keep_on = false;
    long draft_max = 0, draft_min = 0;
    int spec = CDX_SPEC_OFF;
    cdx_dtype dtype = CDX_DTYPE_AUTO;
    uint32_t kv_type = CDX_TYPE_F32;
    bool kv_type_set = false;
    cli_split_opts so = { 0 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && has) {
            if (cli_parse_engine_opt(a, argv[++i], CDX_OPT_THREADS, &threads))
                return 2;
        } else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt-tokens")) && has) {
            if (cli_parse_int(a, argv[++i], 1, 65536, &n_prompt))
                return 2;
        } else if ((!strcmp(a, "-n") || !strcmp(a, "--gen-tokens")) && has) {
            if (cli_parse_int(a, argv[++i], 1, 65536, &n_gen))
                return 2;
        } else if ((!strcmp(a, "-r") || !strcmp(a, "--runs")) && has) {
            if (cli_parse_int(a, argv[++i], 1, 100, &runs))
                return 2;
        } else if (!strcmp(a, "--parallel") && has) {
            if (cli_parse_int(a, argv[++i], 1, MAX_PAR, &parallel))
                return 2;
        } else if (!strcmp(a, "--spec") && has) {
            if ((spec = cdx_spec_parse(argv[++i])) < 0) {
                fprintf(stderr, "caldrix bench: --spec is \"%s\"; expected lookup, auto or off\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--draft-max") && has) {
            if (cli_parse_engine_opt(a, argv[++i], CDX_OPT_DRAFT_MAX, &draft_max))
                return 2;
        } else if (!strcmp(a, "--draft-min") && has) {
            if (cli_parse_engine_opt(a, argv[++i], CDX_OPT_DRAFT_MIN, &draft_min))
                return 2;
        } else if (!strcmp(a, "--draft") && has) {
            draft = argv[++i];
        } else if (!strcmp(a, "--spec-keep-on")) {
            spec_keep_on = true;
        } else if (!strcmp(a, "--prefix-hit")) {
            prefix_hit = true;
        } else if (!strcmp(a, "--isa") && has) {
            isa = argv[++i];
        } else if (!strcmp(a, "--weight-budget") && has) {
            if (cli_parse_bytes(a, argv[++i], &budget))
                return 2;
        } else if (!strcmp(a, "--dtype") && has) {
            if (cli_parse_dtype("caldrix bench", argv[++i], &dtype))
                return 2;
        } else if (!strcmp(a, "--kv-type") && has) {
            if (cli_parse_kv_type("caldrix bench", argv[++i], &kv_type))
                return 2;
            kv_type_set = true;
        } else if (cli_split_is_opt(a)) {
            if (cli_split_parse("caldrix bench", argc, argv, &i, &so))
                return 2;
        } else if (!strcmp(a, "--mem-bw") && has) {
            if (cli_parse_float(a, argv[++i], 1e-3, 1e6, &mem_bw))
                return 2;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "caldrix bench: unknown option or missing value: %s\n", a);
            usage(stderr);
            return 2;
        } else if (!path) {
            path = a;
        } else {
            fprintf(stderr, "caldrix bench: unexpected argument \"%s\"\n", a);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "caldrix bench: MODEL is required\n");
        usage(stderr);
        return 2;
    }
    const cdx_kernels *kern = cdx_kernels_best();
    if (isa && !(kern = cdx_kernels_by_isa(isa))) {
        char sets[160];
        fprintf(stderr, "caldrix bench: --isa: \"%s\" is not a kernel set this CPU runs (%s)\n", isa,
                cli_isa_list(sets, sizeof sets));
        return 2;
    }
    if (threads == 0)
        threads = cdx_cpu_count();
    if (draft && spec == CDX_SPEC_LOOKUP) {
        fprintf(stderr, "caldrix bench: --draft %s with --spec lookup: lookup uses no draft (give --spec auto)\n", draft);
        return 2;
    }
    if (draft)
        spec = CDX_SPEC_AUTO; /* a draft given is a draft used */

    if (prefix_hit && n_prompt < 2 * CDX_KV_BLOCK + 1) {
        fprintf(stderr, "caldrix bench: --prefix-hit needs -p of at least %d tokens\n", 2 * CDX_KV_BLOCK + 1);
        return 2;
    }
    /* a split across mpirun's ranks: planned, or refused, before any rank loads a byte */
    cdx_split *split = NULL;
    cdx_stage stage;
    int64_t split_l0 = 0, split_l1 = 0;
    int status = cli_split_begin("caldrix bench", &so, path, &split, &split_l0, &split_l1);
    if (status)
        return status < 0 ? 0 : status;
    if (split && cdx_split_rank(split) > 0) { /* a later stage: its layers, until rank 0 is done */
        status = cli_split_stage("caldrix bench", split, path, dtype, (int)threads, kern, split_l0, split_l1);
        cdx_split_end(split);
        return status;
    }
    cdx_err err = {0};
    if (split && cdx_split_stage_of(split, &stage, &err)) {
        fprintf(stderr, "caldrix bench: %s\n", err.msg);
        cdx_split_end(split);
        return 1;
    }
    if (split && so.micro)
        stage.n_micro = (int)so.micro;
    uint64_t split_sent0 = 0, split_recv0 = 0, split_sent = 0, split_recv = 0;
    double split_wait0 = 0, split_wait = 0;
    cdx_loaded *ld = NULL;
    int32_t *ids = NULL, *prompts[MAX_PAR];
    double *tp = NULL, *td = NULL, *ta = NULL, *ts = NULL, *tcold = NULL, *thot = NULL;
    bench_req rs[MAX_PAR];
    int64_t hit_cached = 0;
    int rc = 1;

    double t0 = now_s();
    cdx_engine_opts eo = cdx_engine_defaults();
    eo.n_threads = (int)threads;
    eo.kernels = kern;
    eo.max_batch = (int)parallel;
    eo.n_ctx = n_prompt + n_gen + 1 + 2; /* 2: the warm-up */
    eo.token_budget = n_prompt * parallel; /* every prompt in one batch */
    eo.spec = spec;
    eo.kv_type = kv_type;
    eo.draft_max = (int)draft_max;
    eo.draft_min = (int)draft_min;
    eo.spec_keep_on = spec_keep_on;
    eo.stage = split ? &stage : NULL;
    eo.split_groups = cli_split_groups(split, &so);
    cdx_load_opts lo = cdx_load_defaults();
    cli_load_env(&lo);
    lo.layer0 = split_l0; /* a split: only this rank's slice is packed or copied */
    lo.layer1 = split_l1;
    lo.paths_only = true; /* bench takes a file or a folder, never a reference */
    lo.tokenizer = false; /* synthetic ids */
    lo.dtype = dtype;
    lo.kv_type_set = kv_type_set;
    lo.weight_budget = budget;
    lo.engine = &eo;
    lo.draft = draft;
    cdx_load_stage at;
    if (cdx_load(path, &lo, &ld, &at, &err) < 0) {
        fprintf(stderr, "caldrix bench: %s\n", err.msg);
        if (at == CDX_LOAD_DRAFT_REFUSED)
            rc = 2; /* a draft that cannot draft for this model: bad input */
        goto done;
    }
    if (split) { /* every rank checks rank 0's model fingerprint and makes its pool */
        cdx_engine_stats es;
        cdx_engine_get_stats(ld->engine, &es);
        if ((status = cdx_split_start(split, ld->model, es.n_blocks, es.token_budget, ld->kv_type, &err))) {
            fprintf(stderr, "caldrix bench: --allow-split: %s\n", err.msg);
            rc = status == CDX_EINVAL ? 2 : 1;
            goto done;
        }
    }
    const cdx_model *m = ld->model;
    cdx_engine *eng = ld->engine;
    const cdx_hparams *hp = cdx_model_hparams(m);
    double load_ms = (now_s() - t0) * 1e3;
    /* ready to run at load_ms; the timed runs wait for the layouts packed in the background */
    const double pack_ms = cdx_model_pack_wait(m);
    ids = malloc((size_t)n_prompt * (size_t)parallel * sizeof *ids);
    tp = calloc((size_t)runs, sizeof *tp);
    td = calloc((size_t)runs, sizeof *td);
    ta = calloc((size_t)runs, sizeof *ta);
    ts = calloc((size_t)runs, sizeof *ts);
    tcold = calloc((size_t)runs, sizeof *tcold);
    thot = calloc((size_t)runs, sizeof *thot);
    if (!ids || !tp || !td || !ta || !ts || !tcold || !thot) {
        fprintf(stderr, "caldrix bench: out of memory\n");
        goto done;
    }
    for (long i = 0; i < parallel; i++)
        prompts[i] = ids + (size_t)i * (size_t)n_prompt;
    /* every batch gets prompts the cache has not seen: the first token differs */
    uint64_t salt = 0;
#define FRESH_PROMPTS()                                                                         \
    do {                                                                                        \
        synth_ids(ids, n_prompt * parallel, hp->n_vocab);                                       \
        for (long i_ = 0; i_ < parallel; i_++)                                                   \
            prompts[i_][0] = (int32_t)(3 + (salt++ * 7919u) % (uint64_t)(hp->n_vocab > 4 ? hp->n_vocab - 3 : 1)); \
    } while (0)

    /* warm-up: one whole prompt and 2 tokens, as llama-bench warms up (so the timed runs do not pay the
       first touch of the forward buffers a prompt this long needs), pages every weight in, wakes the pool;
       not timed */
    FRESH_PROMPTS();
    if (bench_batch(eng, prompts, 1, n_prompt, 2, rs, &err) < 0) {
        fprintf(stderr, "caldrix bench: %s: %s\n", path, err.msg);
        goto done;
    }
    double best_p = 0, best_d = 0;
    uint64_t overlap0 = 0, overlap = 0, rounds0 = 0, rounds = 0; /* the split's pipelined rounds, all rounds */
    if (split) {
        cdx_split_stats(split, &split_sent0, &split_recv0, &split_wait0);
        cdx_engine_stats st0;
        cdx_engine_get_stats(eng, &st0);
        overlap0 = st0.split_overlapped;
        rounds0 = st0.rounds;
    }
    for (long r = 0; r < runs; r++) {
        FRESH_PROMPTS();
        if (r == runs - 1) /* greedy_tokens come from this run: its first prompt is exactly the ids */
            synth_ids(prompts[0], 1, hp->n_vocab); /* llama_bench feeds, so engines compare alike */
        /* n_gen decode steps after the prefill: the first token comes from the prefill's logits */
        if (bench_batch(eng, prompts, (int)parallel, n_prompt, n_gen + 1, rs, &err) < 0) {
            fprintf(stderr, "caldrix bench: %s: %s\n", path, err.msg);
            goto done;
        }
        double first_all = 0, end_all = 0, submit = rs[0].t_submit, streams[MAX_PAR];
        for (long i = 0; i < parallel; i++) {
            first_all = rs[i].t_first > first_all ? rs[i].t_first : first_all;
            end_all = rs[i].t_end > end_all ? rs[i].t_end : end_all;
            streams[i] = (double)n_gen / (rs[i].t_end - rs[i].t_first);
        }
        tp[r] = (double)(n_prompt * parallel) / (first_all - submit);
        td[r] = (double)n_gen / (rs[0].t_end - rs[0].t_first);
        ta[r] = (double)(n_gen * parallel) / (end_all - first_all);
        ts[r] = median(streams, (int)parallel);
        best_p = tp[r] > best_p ? tp[r] : best_p;
        best_d = td[r] > best_d ? td[r] : best_d;
        if (prefix_hit) {
            /* cold: a prompt nobody has seen; cached: all but its last 16 tokens seen before */
            FRESH_PROMPTS();
            bench_req hot, cold;
            if (bench_batch(eng, prompts, 1, n_prompt, 1, &cold, &err) < 0)
                goto fail;
            int32_t *p = prompts[0];
            for (long i = n_prompt - CDX_KV_BLOCK; i < n_prompt; i++)
                p[i] = (int32_t)(3 + ((uint64_t)p[i] * 31 + 17) % (uint64_t)(hp->n_vocab > 4 ? hp->n_vocab - 3 : 1));
            if (bench_batch(eng, prompts, 1, n_prompt, 1, &hot, &err) < 0)
                goto fail;
            tcold[r] = (cold.t_first - cold.t_submit) * 1e3;
            thot[r] = (hot.t_first - hot.t_submit) * 1e3;
            hit_cached = hot.n_cached;
        }
    }
    if (split) { /* what crossed during the timed runs (the prefix-hit runs too, when asked) */
        cdx_split_stats(split, &split_sent, &split_recv, &split_wait);
        split_sent -= split_sent0;
        split_recv -= split_recv0;
        split_wait -= split_wait0;
        cdx_engine_stats st1;
        cdx_engine_get_stats(eng, &st1);
        overlap = st1.split_overlapped - overlap0;
        rounds = st1.rounds - rounds0;
    }
    json_t *runs_p = json_array(), *runs_d = json_array();
    for (long r = 0; r < runs; r++) {
        json_array_append_new(runs_p, json_real(tp[r]));
        json_array_append_new(runs_d, json_real(td[r]));
    }
    double prefill = median(tp, (int)runs), decode = median(td, (int)runs);
    size_t wbytes = cdx_model_weight_bytes(m);
    double bw = (double)wbytes * decode / 1e9;

    if (json) {
        json_t *o = json_object();
        json_object_set_new(o, "model", json_string(path));
        json_object_set_new(o, "arch", json_string(hp->arch_name ? hp->arch_name : ""));
        json_object_set_new(o, "isa", json_string(cdx_kernels_isa(kern)));
        json_object_set_new(o, "dtype", json_string(cdx_dtype_name(cdx_model_dtype(m))));
        json_object_set_new(o, "kv_type", json_string(cdx_type_name(ld->kv_type)));
        json_object_set_new(o, "n_vocab", json_integer(hp->n_vocab));
        json_object_set_new(o, "threads", json_integer(threads));
        json_object_set_new(o, "n_prompt", json_integer(n_prompt));
        json_object_set_new(o, "n_gen", json_integer(n_gen));
        json_object_set_new(o, "runs", json_integer(runs));
        json_object_set_new(o, "load_ms", json_real(load_ms));
        json_object_set_new(o, "pack_ms", json_real(pack_ms));
        json_object_set_new(o, "prefill_tok_s", json_real(prefill));
        json_object_set_new(o, "decode_tok_s", json_real(decode));
        json_object_set_new(o, "prefill_tok_s_best", json_real(best_p));
        json_object_set_new(o, "decode_tok_s_best", json_real(best_d));
        json_object_set_new(o, "prefill_tok_s_runs", runs_p);
        json_object_set_new(o, "decode_tok_s_runs", runs_d);
        json_t *kept = json_array();
        for (int i = 0; i < rs[0].n_kept; i++)
            json_array_append_new(kept, json_integer(rs[0].kept[i]));
        json_object_set_new(o, "parallel", json_integer(parallel));
        json_object_set_new(o, "aggregate_decode_tok_s", json_real(median(ta, (int)runs)));
        json_object_set_new(o, "stream_decode_tok_s", json_real(median(ts, (int)runs)));
        if (prefix_hit) {
            json_object_set_new(o, "ttft_ms_cold", json_real(median(tcold, (int)runs)));
            json_object_set_new(o, "ttft_ms_cached", json_real(median(thot, (int)runs)));
            json_object_set_new(o, "prefix_cached_tokens", json_integer(hit_cached));
        }
        json_object_set_new(o, "greedy_tokens", kept);
        cdx_engine_stats es;
        cdx_engine_get_stats(eng, &es);
        json_object_set_new(o, "spec", json_string(cdx_spec_name(spec)));
        json_object_set_new(o, "draft", draft ? json_string(draft) : json_null());
        json_object_set_new(o, "spec_proposed", json_integer((json_int_t)es.spec_proposed));
        json_object_set_new(o, "spec_accepted", json_integer((json_int_t)es.spec_accepted));
        uint64_t x_hits, x_misses;
        size_t x_slots;
        cdx_model_expert_stats(m, &x_hits, &x_misses, &x_slots);
        json_object_set_new(o, "weight_budget", json_integer((json_int_t)budget));
        json_object_set_new(o, "expert_slots", json_integer((json_int_t)x_slots));
        json_object_set_new(o, "expert_hits", json_integer((json_int_t)x_hits));
        json_object_set_new(o, "expert_misses", json_integer((json_int_t)x_misses));
        json_object_set_new(o, "weight_bytes_per_token", json_integer((json_int_t)wbytes));
        double head_macs = 0;
        const double macs = cdx_model_matmul_macs(m, &head_macs);
        json_object_set_new(o, "matmul_macs_per_token", json_real(macs));
        json_object_set_new(o, "head_macs_per_token", json_real(head_macs));
        uint64_t rss, rss_peak;
        rss_bytes(&rss, &rss_peak);
        json_object_set_new(o, "rss_bytes", json_integer((json_int_t)rss));
        json_object_set_new(o, "rss_peak_bytes", json_integer((json_int_t)rss_peak));
        json_object_set_new(o, "decode_gb_s", json_real(bw));
        if (split)
            json_object_set_new(o, "split", json_pack("{s:i,s:I,s:i,s:I,s:I,s:I,s:f,s:i,s:I,s:I}", "ranks",
                                                      cdx_split_size(split), "layers_rank0",
                                                      (json_int_t)(split_l1 - split_l0), "micro", stage.n_micro,
                                                      "bytes_sent", (json_int_t)split_sent, "bytes_received",
                                                      (json_int_t)split_recv, "tokens",
                                                      (json_int_t)(runs * parallel * (n_prompt + n_gen)),
                                                      "mpi_wait_ms", split_wait, "groups", es.split_groups,
                                                      "rounds", (json_int_t)rounds, "rounds_overlapped",
                                                      (json_int_t)overlap));
        if (mem_bw > 0) {
            json_object_set_new(o, "mem_bw_gb_s", json_real(mem_bw));
            json_object_set_new(o, "decode_ceiling_tok_s", json_real(mem_bw * 1e9 / (double)wbytes));
            json_object_set_new(o, "decode_ceiling_frac", json_real(bw / mem_bw));
        }
        char *s = json_dumps(o, JSON_REAL_PRECISION(6));
        if (s)
            printf("%s\n", s);
        free(s);
        json_decref(o);
    } else {
        json_decref(runs_p);
        json_decref(runs_d);
        printf("model    %s (%s, %lld layers, n_embd %lld, vocab %lld)\n", path, hp->arch_name, (long long)hp->n_layer,
               (long long)hp->n_embd, (long long)hp->n_vocab);
        printf("threads  %ld, %s kernels, %s compute (%s), %s KV cache\n", threads, cdx_kernels_isa(kern),
               cdx_dtype_name(cdx_model_dtype(m)), cdx_model_dtype_why(m), cdx_type_name(ld->kv_type));
        printf("load     %.1f ms\n", load_ms);
        if (pack_ms > 0)
            printf("packed   %.1f ms later, in the background (the runs below waited for it)\n", pack_ms);
        printf("prefill  %8.2f tok/s  (%ld tokens in one batch; median of %ld, best %.2f)\n", prefill, n_prompt, runs,
               best_p);
        printf("decode   %8.2f tok/s  (%ld tokens one at a time; median of %ld, best %.2f)\n", decode, n_gen, runs,
               best_d);
        char wb[32];
        cdx_fmt_bytes((uint64_t)wbytes, wb, sizeof wb);
        printf("weights  %s read per token: %.2f GB/s while decoding\n", wb, bw);
        if (mem_bw > 0)
            printf("ceiling  %.2f tok/s at %.2f GB/s: decode is at %.0f %% of it\n", mem_bw * 1e9 / (double)wbytes,
                   mem_bw, 100.0 * bw / mem_bw);
        uint64_t x_hits, x_misses;
        size_t x_slots;
        cdx_model_expert_stats(m, &x_hits, &x_misses, &x_slots);
        if (x_slots)
            printf("experts  %zu slots within --weight-budget: %llu hits, %llu read from the file (%.0f %% hits)\n",
                   x_slots, (unsigned long long)x_hits, (unsigned long long)x_misses,
                   100.0 * (double)x_hits / (double)(x_hits + x_misses ? x_hits + x_misses : 1));
        if (parallel > 1)
            printf("parallel %ld streams: %.2f tok/s in all, %.2f tok/s per stream (medians)\n", parallel,
                   median(ta, (int)runs), median(ts, (int)runs));
        cdx_engine_stats es;
        cdx_engine_get_stats(eng, &es);
        if (spec)
            printf("spec     %s%s%s: %llu draft tokens proposed, %llu kept (%.0f %%), every run and the warm-up\n",
                   cdx_spec_name(spec), draft ? ", draft " : "", draft ? draft : "", (unsigned long long)es.spec_proposed, (unsigned long long)es.spec_accepted,
                   es.spec_proposed ? 100.0 * (double)es.spec_accepted / (double)es.spec_proposed : 0.0);
        if (split)
            printf("split    %d ranks, layers 0-%lld here: %.0f bytes sent and %.0f received a token, rank 0 waited "
                   "%.0f ms in MPI; %llu of %llu rounds begun while another was in flight (the timed runs)\n",
                   cdx_split_size(split), (long long)split_l1 - 1,
                   (double)split_sent / (double)(runs * parallel * (n_prompt + n_gen)),
                   (double)split_recv / (double)(runs * parallel * (n_prompt + n_gen)), split_wait,
                   (unsigned long long)overlap, (unsigned long long)rounds);
        if (prefix_hit)
            printf("prefix   first token after %.1f ms cold, %.1f ms with %lld of %ld prompt tokens cached\n",
                   median(tcold, (int)runs), median(thot, (int)runs), (long long)hit_cached, n_prompt);
    }
    if (draft && ld->draft && ld->draft->path) {
        /* the draft's outcome on this machine: turned off when the rule turned off most requests */
        cdx_engine_stats es;
        cdx_engine_get_stats(eng, &es);
        cli_draft_outcome_save("bench", ld->path ? ld->path : path, ld->draft->path, (int64_t)es.spec_proposed,
                               (int64_t)es.spec_accepted, es.spec_turned_off * 2 > es.spec_requests);
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "caldrix bench: %s: %s\n", path, err.msg);
done:
    free(tp);
    free(td);
    free(ta);
    free(ts);
    free(tcold);
    free(thot);
    free(ids);
    cdx_load_close(ld);
    if (split) {
        cdx_split_stop(split);
        cdx_split_end(split);
    }
    return rc;
}
