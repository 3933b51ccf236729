/* caldrix: the command-line front end. One table lists every subcommand; --help reads it. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static int cmd_version(int argc, char **argv);
static int cmd_help(int argc, char **argv);

static const cli_command k_commands[] = {
    { "run",      cmd_run,      "generate text from a model (streams to stdout)" },
    { "serve",    cmd_serve,    "an OpenAI-compatible HTTP server over a model (docs/api.md)" },
    { "quantize", cmd_quantize, "requantize a GGUF to Q4_K_M, Q8_0, ... as llama.cpp does" },
    { "convert", cmd_convert, "convert a Hugging Face checkpoint to GGUF as llama.cpp does" },
    { "version",  cmd_version,  "print the version" },
    { "help",     cmd_help,     "list the commands" },
    { "template", cmd_template, "render a chat template with messages (as transformers does)" },
    { "embed",    cmd_embed,    "sentence vectors from an embedding model (sentence-transformers pipeline)" },
    { "rerank",   cmd_rerank,   "query-document relevance scores from a reranker (Qwen3-Reranker)" },
    { "tokenize", cmd_tokenize, "text to token ids with a model's tokenizer (--jsonl for batches)" },
    { "pull",     cmd_pull,     "download a model by name into its cache (caldrix pull REF)" },
    { "inspect",  cmd_inspect,  "report what caldrix makes of a model from its headers alone" },
    { "models",   cmd_models,   "aliases, cached models and the import rules (supported, info, search, rules, list, rm)" },
    { "doctor",   cmd_doctor,   "this machine: CPU features, lanes, caches, memory and disk" },
    { "bench",    cmd_bench,    "time load, prefill and decode of a model" },
    { "synth",    cmd_synth,    "write a random-weight model with a real model's shapes" },
    { "verify",   cmd_verify,   "ask a model a question it cannot answer by luck; PASS or FAIL" },
    { "perplexity", cmd_perplexity, "perplexity of a text, and KL divergence against a base (llama-perplexity)" },
    { "finetune", cmd_finetune, "train a LoRA adapter (PEFT format) or every weight of a checkpoint" },
    { "distill",  cmd_distill,  "train a student on a teacher's distribution (KD) and the labels" },
};

static int cmd_version(int argc, char **argv)
{
    printf("caldrix %s\n", CDX_VERSION_STRING);
    return 0;
}

static int cmd_help(int argc, char **argv)
{
    printf("usage: caldrix COMMAND [ARGS]   (caldrix COMMAND --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        printf("  %-11s %s\n", k_commands[i].name, k_commands[i].help);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))
        return cmd_help(argc, argv), argc < 2 ? 2 : 0;
    if (!strcmp(argv[1], "--version"))
        return cmd_version(argc, argv);
    cdx_err err = { 0 };
    if (cdx_kernels_env_check(&err)) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        return 2;
    }
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        if (!strcmp(argv[1], k_commands[i].name))
            return k_commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "caldrix: unknown command \"%s\" (caldrix --help lists them)\n", argv[1]);
    return 2;
}
