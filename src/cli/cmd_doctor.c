/* caldrix doctor: what this machine offers caldrix. */
#include "cli.h"
#include "cli_hub.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cmd_doctor(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: caldrix doctor\n\nPrints the CPU's features (cpuid), the compute lanes, the caches and "
                   "their free disk, the network settings and the memory.\n");
            return 0;
        }
        fprintf(stderr, "caldrix doctor: unknown argument \"%s\"\n", argv[i]);
        return 2;
    }
    const cdx_cpu_features c = *cdx_cpu_features_get();
    const char *brand = cdx_cpu_brand(), *vendor = cdx_cpu_vendor();
    printf("caldrix %s\n\ncpu: %s (%s), %ld logical cores\n", CDX_VERSION_STRING, brand[0] ? brand : "?",
           vendor[0] ? vendor : "?", sysconf(_SC_NPROCESSORS_ONLN));
    const struct { const char *name; bool on; } feats[] = {
        { "AVX", c.avx }, { "AVX2", c.avx2 }, { "FMA", c.fma }, { "F16C", c.f16c }, { "BMI2", c.bmi2 },
        { "AVX-512F", c.avx512f }, { "AVX-512BW", c.avx512bw }, { "AVX-512VL", c.avx512vl },
        { "AVX-512DQ", c.avx512dq }, { "AVX-512VNNI", c.avx512vnni }, { "AVX-512BF16", c.avx512bf16 },
        { "AVX-512VBMI", c.avx512vbmi }, { "AVX-VNNI", c.avx_vnni }, { "AMX-TILE", c.amx_tile },
        { "AMX-INT8", c.amx_int8 }, { "AMX-BF16", c.amx_bf16 },
    };
    printf("  features:");
    for (size_t i = 0; i < sizeof feats / sizeof feats[0]; i++)
        printf(" %s%s", feats[i].name, feats[i].on ? "" : "(no)");
    printf("\n  level: %s\n", c.x86_64_v4 ? "x86-64-v4" : c.x86_64_v3 ? "x86-64-v3" : "below x86-64-v3");
    /* the kernel sets this CPU runs, as the kernel layer picks them (cdx_kernels_by_isa) */
    printf("\nlanes:\n  cpu: yes (kernel sets:");
    for (size_t i = 0; cdx_kernels_name_at(i); i++)
        if (cdx_kernels_by_isa(cdx_kernels_name_at(i)))
            printf(" %s", cdx_kernels_name_at(i));
    printf(")\n");
    const char *forced = getenv("CALDRIX_ISA");
    printf("  kernel set in use: %s%s\n", cdx_kernels_isa(cdx_kernels_best()),
           forced && *forced ? " (from CALDRIX_ISA)" : "");
    printf("  metal: no (Apple GPUs only)\n  hip: no (not in this build)\n");
    printf("  images (vision-language models): cpu lane only\n");
    /* what caldrix runs: the architecture table */
    size_t n_arch;
    const cdx_hub_arch *ar = cdx_hub_archs(&n_arch);
    printf("\nmodels (caldrix models supported --all):\n  config.json architectures:");
    for (size_t i = 0; i < n_arch; i++)
        printf("%s %s", i ? "," : "", ar[i].name);
    char gg[256];
    cdx_model_gguf_archs(gg, sizeof gg);
    printf("\n  GGUF architectures: %s\n", gg);
    cdx_hub_env env;
    cdx_err err = { 0 };
    if (cdx_hub_env_load(&env, &err) < 0) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        return 1;
    }
    uint64_t free_hf = 0, free_cx = 0;
    char a[32], b[32];
    bool ok_hf = cdx_hub_disk_free(env.hf_cache, &free_hf, NULL) == 0;
    bool ok_cx = cdx_hub_disk_free(env.caldrix_cache, &free_cx, NULL) == 0;
    cdx_fmt_bytes(free_hf, a, sizeof a);
    cdx_fmt_bytes(free_cx, b, sizeof b);
    printf("\ncaches:\n  hugging face: %s (%s free)\n  caldrix:      %s (%s free; Ollama models in ollama/)\n",
           env.hf_cache, ok_hf ? a : "?", env.caldrix_cache, ok_cx ? b : "?");
    printf("\nnetwork:\n  hub endpoint: %s\n  ollama registry: %s\n  token: %s%s%s\n  offline: %s\n", env.endpoint,
           env.ollama_registry, env.token ? "set (from " : "not set", env.token ? env.token_source : "",
           env.token ? ")" : "", env.offline_var ? env.offline_var : "no");
    uint64_t total, avail;
    cdx_hub_meminfo(&total, &avail);
    cdx_fmt_bytes(total, a, sizeof a);
    cdx_fmt_bytes(avail, b, sizeof b);
    printf("\nmemory: %s available of %s\n", b, a);
    uint64_t adm;
    err = (cdx_err){0};
    if (cdx_hub_mem_available(&adm, &err) < 0) {
        fprintf(stderr, "caldrix doctor: %s\n", err.msg);
        cdx_hub_env_free(&env);
        return 2;
    }
    if (adm != avail) {
        cdx_fmt_bytes(adm, a, sizeof a);
        printf("  admission uses %s (CALDRIX_MEM_AVAILABLE)\n", a);
    }
    cdx_hub_env_free(&env);
    return 0;
}
