/* caldrix inspect REF [--json]: seed 003's inspect-only report; weights are never loaded. */
#include "cli.h"
#include "cli_hub.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: caldrix inspect REF [--weight-budget BYTES] [--json]\n\n"
               "Reports what caldrix makes of a model from its headers alone: architecture, tensor and metadata\n"
               "counts, family, layers, heads, kv heads, hidden size, head_dim, context, tensor types,\n"
               "unsupported_tensor_types, missing_required_tensors and the estimated memory (weights + KV cache\n"
               "for a %u-token context, or the model's trained context when that is shorter, held as the\n"
               "compute type holds it). REF is a .gguf file, a checkpoint folder, or a reference already in\n"
               "the cache (an alias, owner/name[@revision], ollama:name[:tag]); inspect never downloads.\n"
               "Exit status 0 when caldrix can run the model, 1 when it cannot (a refusal, an architecture it\n"
               "does not map, missing tensors or unsupported types; the report is printed all the same).\n"
               "A mixture of experts also reports its experts' bytes and the least --weight-budget it runs under;\n"
               "with --weight-budget the estimate counts the weights at that budget, and when the model does\n"
               "not fit in the memory available (CALDRIX_MEM_AVAILABLE or MemAvailable) but would under a\n"
               "budget, inspect says which.\n",
               CDX_HUB_DEFAULT_CTX);
}

/* A model inspect cannot read: the message on stderr and, with --json, as {"error": {...}} on stdout
 * (a script reading stdout gets JSON either way). Exit status 1. */
static int inspect_fail(bool json, const char *ref, const char *msg)
{
    fprintf(stderr, "caldrix: %s\n", msg);
    if (json) {
        json_t *o = json_pack("{s:{s:s,s:s}}", "error", "ref", ref, "message", msg);
        char *s = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
        printf("%s\n", s ? s : "{\"error\": {}}");
        free(s);
        json_decref(o);
    }
    return 1;
}

int cmd_inspect(int argc, char **argv)
{
    const char *ref = NULL;
    bool json = false;
    uint64_t budget = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--weight-budget") && i + 1 < argc) {
            if (cli_parse_bytes(argv[i], argv[i + 1], &budget))
                return 2;
            i++;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "caldrix inspect: unknown option \"%s\"\n", argv[i]);
            return 2;
        } else if (!ref) {
            ref = argv[i];
        } else {
            fprintf(stderr, "caldrix inspect: one REF only\n");
            return 2;
        }
    }
    if (!ref) {
        usage(stderr);
        return 2;
    }
    cdx_err err = { 0 };
    cli_hub_ui ui;
    cdx_hub_opts o;
    cli_hub_opts_init(&o, &ui, true);
    o.cache_only = true;
    char *path = NULL;
    if (cdx_hub_resolve(ref, &o, &path, &err) < 0)
        return inspect_fail(json, ref, err.msg);
    cdx_hub_report *r = calloc(1, sizeof *r);
    if (!r || cdx_hub_inspect_path(path, r, &err) < 0) {
        int rc = inspect_fail(json, ref, r ? err.msg : "out of memory");
        free(r);
        free(path);
        return rc;
    }
    /* under a budget the weights hold at most the budget (the loader refuses one below the least) */
    const uint64_t wres = budget && budget < r->weight_bytes ? budget : r->weight_bytes;
    char w[32], k[32], t[32];
    cdx_fmt_bytes(wres, w, sizeof w);
    cdx_fmt_bytes(r->kv_bytes, k, sizeof k);
    cdx_fmt_bytes(wres + r->kv_bytes, t, sizeof t);
    /* memory admission as the hub applies it before a download: the weights (at the budget) + KV */
    uint64_t avail = 0;
    cdx_err merr = { 0 };
    if (cdx_hub_mem_available(&avail, &merr) < 0) {
        fprintf(stderr, "caldrix inspect: %s\n", merr.msg);
        free(r);
        free(path);
        return 2;
    }
    char fits[256] = "";
    const uint64_t suggest = avail > r->kv_bytes ? (avail - r->kv_bytes) & ~(uint64_t)4095 : 0;
    if (avail && wres + r->kv_bytes > avail) {
        char a[32], b[32];
        cdx_fmt_bytes(avail, a, sizeof a);
        if (r->min_budget_bytes && r->min_budget_bytes + r->kv_bytes <= avail && suggest >= r->min_budget_bytes) {
            cdx_fmt_bytes(suggest, b, sizeof b);
            snprintf(fits, sizeof fits, "does not fit in the %s available; fits with --weight-budget %llu (%s)", a,
                     (unsigned long long)suggest, b);
        } else
            snprintf(fits, sizeof fits, "does not fit in the %s available%s", a,
                     r->min_budget_bytes ? ", not even at the least weight budget" : "");
    }
    if (json) {
        json_t *o2 = json_pack("{s:s,s:s,s:s,s:I,s:I,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:s,s:s,s:s,s:I}",
                               "format", r->format, "path", r->path, "architecture", r->architecture,
                               "tensors", (json_int_t)r->n_tensors, "metadata", (json_int_t)r->n_metadata,
                               "family", r->family, "layers", (json_int_t)r->n_layer, "heads", (json_int_t)r->n_head,
                               "kv_heads", (json_int_t)r->n_kv_head, "hidden", (json_int_t)r->hidden,
                               "head_dim", (json_int_t)r->head_dim, "context", (json_int_t)r->ctx,
                               "experts", (json_int_t)r->n_expert, "experts_used", (json_int_t)r->n_expert_used,
                               "tensor_types", r->tensor_types, "unsupported_tensor_types",
                               r->unsupported_tensor_types, "missing_required_tensors", r->missing_required_tensors,
                               "missing_required_count", (json_int_t)r->n_missing);
        json_object_set_new(o2, "unused_tensors", json_string(r->unused_tensors));
        json_object_set_new(o2, "unused_count", json_integer((json_int_t)r->n_unused));
        json_object_set_new(o2, "estimated_memory",
                            json_pack("{s:I,s:I,s:I,s:I}", "weights_bytes", (json_int_t)r->weight_bytes,
                                      "kv_bytes", (json_int_t)r->kv_bytes, "kv_context", (json_int_t)r->kv_ctx,
                                      "total_bytes", (json_int_t)(r->weight_bytes + r->kv_bytes)));
        if (r->expert_bytes)
            json_object_set_new(o2, "weight_budget",
                                json_pack("{s:I,s:I,s:I,s:I,s:I}", "dense_bytes",
                                          (json_int_t)(r->weight_bytes - r->expert_bytes), "expert_bytes",
                                          (json_int_t)r->expert_bytes, "one_expert_bytes",
                                          (json_int_t)r->expert_one_bytes, "min_budget_bytes",
                                          (json_int_t)r->min_budget_bytes, "budget", (json_int_t)budget));
        json_object_set_new(o2, "memory", fits[0] ? json_string(fits) : json_null());
        json_object_set_new(o2, "compute_dtype", r->compute_dtype[0] ? json_string(r->compute_dtype) : json_null());
        json_object_set_new(o2, "compute_dtype_reason", json_string(r->compute_why));
        json_object_set_new(o2, "refusal", r->refusal[0] ? json_string(r->refusal) : json_null());
        json_object_set_new(o2, "note", r->note[0] ? json_string(r->note) : json_null());
        char *s = json_dumps(o2, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        printf("%s\n", s ? s : "{}");
        free(s);
        json_decref(o2);
    } else {
        printf("%s path=%s architecture=%s tensors=%llu metadata=%llu\n", r->format, r->path, r->architecture,
               (unsigned long long)r->n_tensors, (unsigned long long)r->n_metadata);
        printf("  family=%s layers=%lld heads=%lld kv_heads=%lld hidden=%lld head_dim=%lld context=%lld",
               r->family, (long long)r->n_layer, (long long)r->n_head, (long long)r->n_kv_head, (long long)r->hidden,
               (long long)r->head_dim, (long long)r->ctx);
        if (r->n_expert)
            printf(" experts=%lld experts_used=%lld", (long long)r->n_expert, (long long)r->n_expert_used);
        printf("\n  tensor_types=%s\n", r->tensor_types);
        printf("  unsupported_tensor_types=%s\n", r->unsupported_tensor_types);
        if (r->n_missing)
            printf("  missing_required_tensors=%llu: %s\n", (unsigned long long)r->n_missing,
                   r->missing_required_tensors);
        else
            printf("  missing_required_tensors=%s\n", r->missing_required_tensors);
        if (strcmp(r->format, "gguf"))
            printf("  unused_tensors=%s\n", r->unused_tensors);
        if (r->compute_dtype[0])
            printf("  compute_dtype=%s (%s%s)\n", r->compute_dtype, r->compute_why,
                   r->compute_bf16_ok ? "; run --dtype f32|bf16 picks another" : "");
        printf("  estimated_memory=%s (weights %s%s + KV cache %s for %u tokens, as %s compute holds them)\n", t, w,
               wres < r->weight_bytes ? " under --weight-budget" : "", k, r->kv_ctx,
               r->compute_dtype[0] ? r->compute_dtype : "f32");
        if (r->expert_bytes) {
            char d[32], x[32], one[32], mn[32];
            cdx_fmt_bytes(r->weight_bytes - r->expert_bytes, d, sizeof d);
            cdx_fmt_bytes(r->expert_bytes, x, sizeof x);
            cdx_fmt_bytes(r->expert_one_bytes, one, sizeof one);
            cdx_fmt_bytes(r->min_budget_bytes, mn, sizeof mn);
            printf("  weight_budget: dense %s + experts %s (%s each); the least --weight-budget is %llu (%s)\n", d, x,
                   one, (unsigned long long)r->min_budget_bytes, mn);
        }
        if (fits[0])
            printf("  memory: %s\n", fits);
        if (r->note[0])
            printf("  note: %s\n", r->note);
        if (r->refusal[0])
            printf("  refused: %s\n", r->refusal);
    }
    /* The report is printed either way; the exit status says whether caldrix can run the model. */
    const char *why = r->refusal[0] ? r->refusal
                    : strcmp(r->missing_required_tensors, "none") ? r->missing_required_tensors
                    : strcmp(r->unsupported_tensor_types, "none") ? r->unsupported_tensor_types : NULL;
    int rc = 0;
    if (!why && budget && r->min_budget_bytes && budget < r->min_budget_bytes) {
        char b[32], mn[32];
        cdx_fmt_bytes(budget, b, sizeof b);
        cdx_fmt_bytes(r->min_budget_bytes, mn, sizeof mn);
        fprintf(stderr, "caldrix inspect: %s: --weight-budget %s (%llu bytes) is below what one token needs: %s (%llu "
                "bytes)\n", ref, b, (unsigned long long)budget, mn, (unsigned long long)r->min_budget_bytes);
        rc = 1;
    }
    if (why) {
        fprintf(stderr, "caldrix inspect: %s: caldrix cannot run this model: %s%s\n", ref,
                why == r->unsupported_tensor_types ? "unsupported tensor types " :
                why == r->missing_required_tensors && r->n_missing ? "missing tensors " : "", why);
        rc = 1;
    }
    free(r);
    free(path);
    return rc;
}
