/* caldrix pull REF: leaves the model complete in its cache and prints the local path. */
#include "cli.h"
#include "cli_hub.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>



static void usage(FILE *f)
{
    fprintf(f, "usage: caldrix pull REF [--ctx N] [--fetch-anyway] [--verify] [--quiet]\n\n"
               "Downloads a model into its cache (the Hugging Face cache for aliases and owner/name[@revision],\n"
               "caldrix's own cache for ollama:name[:tag]) and prints its local path. REF is a path, an alias\n"
               "(caldrix models supported), owner/name[@revision] or ollama:[namespace/]name[:tag].\n\n"
               "  --ctx N          the context the memory check sizes the KV cache for (default %u)\n"
               "  --fetch-anyway   skip the memory check and let the loader decide against the real files\n"
               "  --verify         hash the files already in the cache too, against the Hub's LFS sha256 (every\n"
               "                   LFS file downloaded is checked against it whatever the option)\n"
               "  --quiet          no file list or progress (notes and errors still print)\n"
               "\nEnvironment: HF_TOKEN, HF_ENDPOINT, HF_HUB_CACHE, HF_HOME, HF_HUB_OFFLINE, CALDRIX_OFFLINE,\n"
               "CALDRIX_CACHE, CALDRIX_OLLAMA_REGISTRY (docs/models.md).\n", CDX_HUB_DEFAULT_CTX);
}

int cmd_pull(int argc, char **argv)
{
    const char *ref = NULL;
    cli_hub_ui ui;
    cdx_hub_opts o;
    bool quiet = false, anyway = false, verify = false;
    long ctx = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) {
            quiet = true;
        } else if (!strcmp(argv[i], "--fetch-anyway")) {
            anyway = true;
        } else if (!strcmp(argv[i], "--verify")) {
            verify = true;
        } else if (!strcmp(argv[i], "--ctx")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "caldrix pull: --ctx needs a value\n");
                return 2;
            }
            if (cli_parse_int("--ctx", argv[++i], 1, 1 << 24, &ctx) < 0)
                return 2;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "caldrix pull: unknown option \"%s\"\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (!ref) {
            ref = argv[i];
        } else {
            fprintf(stderr, "caldrix pull: one REF only (got \"%s\" and \"%s\")\n", ref, argv[i]);
            return 2;
        }
    }
    if (!ref) {
        usage(stderr);
        return 2;
    }
    cli_hub_opts_init(&o, &ui, quiet);
    o.ctx = (uint32_t)ctx;
    o.skip_memory_check = anyway;
    o.verify = verify;
    cdx_err err = { 0 };
    char *path = NULL;
    if (cdx_hub_resolve(ref, &o, &path, &err) < 0) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        return 1;
    }
    printf("%s\n", path);
    free(path);
    return 0;
}
