/* caldrix run: generate text from a model, streaming to stdout (or one JSON object with --json). */
#include "cli.h"
#include "cli_hub.h"
#include "caldrix/engine.h"
#include "caldrix/grammar.h"
#include "caldrix/model.h"
#include "caldrix/template.h"
#include "caldrix/tokenizer.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <signal.h>
#include <unistd.h>

#include "cli_image.h"
#include "cli_split.h"

static const char k_run_usage[] =
    "usage: caldrix run [MODEL] [-p TEXT | --prompt-ids 1,2,3] [options]\n"
    "\n"
    "MODEL is a .gguf file, a Hugging Face checkpoint directory, an alias (caldrix models supported),\n"
    "owner/name[@revision] from the Hugging Face Hub, or ollama:name[:tag]; a model named that way is\n"
    "checked and downloaded into its cache first. Without MODEL, the bundled stories260K model runs.\n"
    "\n";
static const char k_run_options[] =
    "  -p, --prompt TEXT      prompt text (tokenized with the model's tokenizer, BOS added if it says so)\n"
    "  --prompt-ids IDS       comma-separated token ids, used exactly as given\n"
    "  -n N                   tokens to generate (default 256)\n"
    "  --temp T               temperature; 0 is greedy (default 0.8)\n"
    "  --top-k K              keep the K most likely tokens (default 40; 0 = off)\n"
    "  --top-p P              nucleus sampling (default 0.95; 1 = off)\n"
    "  --min-p P              drop tokens below P x the top probability (default 0.05; 0 = off)\n"
    "  --repeat-penalty R     penalise recent tokens (default 1 = off)\n"
    "  -f, --file FILE        read the prompt from FILE, a regular file (- : standard input); without -p, -f or\n"
    "                         --prompt-ids, text piped to standard input is the prompt\n"
    "  --seed S               sampling seed (default: drawn at random, and reported)\n"
    "  --ctx N                context length (default min(4096, the model's trained context); a prompt\n"
    "                         that does not fit is refused; a longer --ctx than the model was trained\n"
    "                         for is allowed with a warning)\n"
    "  --dtype auto|f32|bf16  compute type (default auto: see below). bf16: transformers' bf16 forward\n"
    "                         (weights and activations in bf16, f32 sums; f16 weights cast to bf16);\n"
    "                         f32: exact f32 activations. GGUF files compute as llama.cpp does (f32)\n"
    "  --threads N            worker threads (default: all cores)\n"
    CLI_WEIGHT_BUDGET_HELP
    "  --isa NAME             force a kernel set: amx, avx512, avx2 or scalar (default: the best this CPU has;\n"
    "                         avx512-gemm, amx-gemm: faster prefill that is not batch invariant;\n"
    "                         amx-gemm takes F16/BF16 weights in BF16 tiles)\n"
    "  --chat                 wrap the prompt (-p, -f, or stdin when it is not a terminal) in the model's\n"
    "                         chat template as one user message, with the generation prompt (a model\n"
    "                         without a template gets ChatML, as serve gives it, and stderr says so);\n"
    "                         with neither -p, -f nor piped input, an interactive chat (see -i)\n"
    "  -i, --interactive      chat turn by turn: every line read from standard input is the next user\n"
    "                         message (end a line with \\ to continue it); the KV cache is kept across\n"
    "                         turns and only the new part of the conversation is computed. /clear starts\n"
    "                         over, /exit or end of input quits, Ctrl-C stops a reply. Implies --chat;\n"
    "                         -n then limits each reply (default: until the end-of-turn token)\n"
    "  --system TEXT          with --chat, a system message before the user's\n"
    CLI_CHAT_TEMPLATE_HELP
    "  --kv-type f32|f16|bf16 K/V cache storage (default: bf16 for bf16 compute, else f32). f16 (f32\n"
    "                         compute): half the memory, with the rounding llama.cpp applies to its\n"
    "                         default F16 cache; bf16 (bf16 compute): half the memory, exact\n"
    "  --kv-store DIR         keep the prompt's K/V blocks in DIR (a prefix store shared by processes):\n"
    "                         a later run with the same prefix reads them instead of computing them\n"
    "                         (--json timings: cached_tokens); bad or foreign files are deleted\n"
    "  --ignore-eos           do not stop at end-of-generation tokens\n"
    "  --grammar FILE         constrain the output to a GBNF grammar (llama.cpp's format; rule root)\n"
    "  --json-schema FILE     constrain the output to JSON valid under a JSON Schema (the subset in\n"
    "                         docs/grammar.md; a keyword it cannot enforce is refused by name). With\n"
    "                         either, generation stops where the grammar is complete and nothing else\n"
    "                         may follow, and only there may an end-of-generation token come\n"
    "  --top-logits K         with --json, the K highest raw logits of every step\n"
    "  --spec lookup|auto|off speculative decoding (default off): lookup proposes the continuation of the\n"
    "                         latest earlier occurrence of the text's last 4..2 tokens, scored in one pass\n"
    "                         with the last token; the output is bit for bit that of --spec off. It turns\n"
    "                         itself off while it does not pay, by the measured cost of a round, of a\n"
    "                         guess and of the draft's passes against what is kept (docs/engine.md),\n"
    "                         probing again later (--json timings.draft, and stderr, say so).\n"
    "                         auto: the best proposer there is (lookup). Not for Qwen3.5 (refused)\n"
    "  --draft-max K          the longest draft (default 8); the length adapts per request\n"
    "  --draft-min K          the shortest draft (default 1)\n"
    "  --spec-keep-on         never turn speculation off (for measurements)\n"
    "  --draft MODEL|auto     a draft model (any reference run takes) proposes its greedy continuation\n"
    "                         (implies --spec auto). It must share the model's token ids (text and\n"
    "                         special tokens; padding may differ), be no bigger, dense and text-only.\n"
    "                         auto: the cached model (caldrix models list) reading the most weight bytes\n"
    "                         a token, at most half the model's, that passes those checks (stderr says\n"
    "                         which, or why none did: then prompt lookup; caldrix models drafts MODEL\n"
    "                         lists them). A draft's outcome is recorded for caldrix models drafts\n"
    "  --image FILE           a PNG or JPEG for a vision model (repeat for more): each <image> in -p marks\n"
    "                         where one goes (else they come first); with --prompt-ids the ids are used as\n"
    "                         given (already expanded) and the images fill the image-token positions\n"
    "  --image-opt KEY=JSON   override a preprocessor setting (e.g. do_image_splitting=false)\n"
    CLI_SPLIT_HELP
    "  --lora DIR[:SCALE]     apply a LoRA adapter (a PEFT folder or a llama.cpp GGUF adapter), its\n"
    "                         product scaled by SCALE (default 1) and added per row, not merged;\n"
    "                         repeat for more (applied in order). A mismatched adapter or an option\n"
    "                         caldrix cannot honour (use_rslora, use_dora, ...) is refused by name\n"
    "  --json                 print one JSON object instead of streaming text, with finish_reason: stop (an\n"
    "                         end-of-generation token), length (-n reached) or context (the context filled\n"
    "                         first); with -i one line per turn, {\"turn\",\"prompt\",\"reused\",\"tokens\",\n"
    "                         \"text\",\"finish_reason\"}; reused: prompt tokens whose K/V came from the\n"
    "                         cache, in whole blocks of 16)\n";

/* Words after a heading, wrapped at 100 columns with a two-space indent. */
static void print_wrapped(FILE *f, const char *heading, const char *const *words, size_t n)
{
    size_t col = (size_t)fprintf(f, "%s", heading);
    for (size_t i = 0; i < n; i++) {
        const size_t w = strlen(words[i]) + 2;
        if (col + w > 100) {
            fputs("\n ", f);
            col = 1;
        }
        col += (size_t)fprintf(f, " %s%s", words[i], i + 1 < n ? "," : ".");
    }
    fputc('\n', f);
}

/* The architectures come from the model table (the list `models supported --all` prints). */
static void run_usage(FILE *f)
{
    fputs(k_run_usage, f);
    size_t n = 0;
    const cdx_hub_arch *a = cdx_hub_archs(&n);
    const char *names[64];
    size_t k = 0;
    for (size_t i = 0; i < n && k < 64; i++)
        names[k++] = a[i].name;
    print_wrapped(f, "Checkpoint architectures (config.json):", names, k);
    char gg[512];
    cdx_model_gguf_archs(gg, sizeof gg);
    fprintf(f, "GGUF architectures: %s.\n\n", gg);
    fputs(k_run_options, f);
    cli_print_engine_ranges(f, (const cdx_engine_opt_id[]){ CDX_OPT_CTX, CDX_OPT_THREADS, CDX_OPT_DRAFT_MAX, CDX_OPT_DRAFT_MIN }, 4);
}

typedef struct {
    const char *model, *prompt, *prompt_ids, *prompt_file, *isa, *system, *kv_store, *chat_template;
    json_t *chat_kwargs;                      /* --chat-template-kwargs */
    const char *grammar_file, *schema_file;   /* --grammar, --json-schema */
    cdx_grammar *grammar;                     /* compiled from one of them */
    uint32_t kv_type;
    uint64_t weight_budget;
    bool kv_type_set;
    cdx_dtype dtype;
    long n_gen, ctx, threads, top_logits, draft_max, draft_min;
    int spec;                                 /* --spec (cdx_spec) */
    const char *draft;                        /* --draft MODEL */
    bool json, ignore_eos, chat, interactive, n_gen_set, seed_set, top_logits_set, spec_keep_on;
    cdx_sampler_params sp;
    int32_t *ids;  /* --prompt-ids, parsed */
    size_t n_ids;
    const char *images[64], *image_opts[64];  /* --image, --image-opt */
    int n_images, n_image_opts;
    const cdx_request_image *req_images;      /* the loaded images, for the request */
    int n_req_images;
    const cdx_model *m;                       /* for -i's /image */
    cli_split_opts split;                     /* --allow-split, --nodes, --split-layers, --split-timeout */
    const char *lora_path[16];                /* --lora DIR[:SCALE] */
    float lora_scale[16];
    int n_lora;
    cdx_lora *lora[16];
    cdx_lora_use lora_use[16];
    cdx_lora_set lora_set;
} run_opts;

static int parse_ids(const char *s, int32_t **out, size_t *n_out)
{
    size_t cap = 16, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids)
        return -1;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "caldrix: --prompt-ids: \"%s\" is not a comma-separated list of token ids\n", s);
            free(ids);
            return -1;
        }
        if (n == cap) {
            int32_t *g = realloc(ids, (cap *= 2) * sizeof *ids);
            if (!g) {
                free(ids);
                return -1;
            }
            ids = g;
        }
        ids[n++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (n == 0) {
        fprintf(stderr, "caldrix: --prompt-ids is empty\n");
        free(ids);
        return -1;
    }
    *out = ids;
    *n_out = n;
    return 0;
}

static int parse_run_args(int argc, char **argv, run_opts *o)
{
    *o = (run_opts){ .n_gen = 256, .ctx = 0, .threads = 0, .sp = cdx_sampler_defaults() };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long l;
        double d;
#define NEED_VALUE()                                                                   \
    do {                                                                               \
        if (!v) {                                                                      \
            fprintf(stderr, "caldrix run: %s needs a value (caldrix run --help)\n", a); \
            return 2;                                                                  \
        }                                                                              \
        i++;                                                                           \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            run_usage(stdout);
            cli_print_dtype_help(stdout);
            exit(0);
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            NEED_VALUE();
            o->prompt = v;
        } else if (!strcmp(a, "--prompt-ids")) {
            NEED_VALUE();
            o->prompt_ids = v;
            free(o->ids);
            o->ids = NULL;
            if (parse_ids(v, &o->ids, &o->n_ids))
                return 2;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            NEED_VALUE();
            o->prompt_file = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            NEED_VALUE();
            if (cli_parse_int(a, v, 0, 1 << 24, &o->n_gen)) return 2;
            o->n_gen_set = true;
        } else if (!strcmp(a, "--temp")) {
            NEED_VALUE();
            if (cli_parse_float(a, v, 0, 100, &d)) return 2;
            o->sp.temp = (float)d;
        } else if (!strcmp(a, "--top-k")) {
            NEED_VALUE();
            if (cli_parse_int(a, v, 0, 1 << 24, &l)) return 2;
            o->sp.top_k = (int32_t)l;
        } else if (!strcmp(a, "--top-p")) {
            NEED_VALUE();
            if (cli_parse_float(a, v, 0, 1, &d)) return 2;
            o->sp.top_p = (float)d;
        } else if (!strcmp(a, "--min-p")) {
            NEED_VALUE();
            if (cli_parse_float(a, v, 0, 1, &d)) return 2;
            o->sp.min_p = (float)d;
        } else if (!strcmp(a, "--repeat-penalty")) {
            NEED_VALUE();
            if (cli_parse_float(a, v, 1e-3, 100, &d)) return 2;
            o->sp.repeat_penalty = (float)d;
        } else if (!strcmp(a, "--seed")) {
            NEED_VALUE();
            if (cli_parse_int(a, v, 0, INT64_MAX, &l)) return 2;
            o->sp.seed = (uint64_t)l;
            o->seed_set = true;
        } else if (!strcmp(a, "--ctx")) {
            NEED_VALUE();
            if (cli_parse_engine_opt(a, v, CDX_OPT_CTX, &o->ctx)) return 2;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            NEED_VALUE();
            if (cli_parse_engine_opt(a, v, CDX_OPT_THREADS, &o->threads)) return 2;
        } else if (!strcmp(a, "--spec")) {
            NEED_VALUE();
            if ((o->spec = cdx_spec_parse(v)) < 0) {
                fprintf(stderr, "caldrix run: --spec is \"%s\"; expected lookup, auto or off\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--draft")) {
            NEED_VALUE();
            o->draft = v;
        } else if (!strcmp(a, "--spec-keep-on")) {
            o->spec_keep_on = true;
        } else if (!strcmp(a, "--draft-max")) {
            NEED_VALUE();
            if (cli_parse_engine_opt(a, v, CDX_OPT_DRAFT_MAX, &o->draft_max)) return 2;
        } else if (!strcmp(a, "--draft-min")) {
            NEED_VALUE();
            if (cli_parse_engine_opt(a, v, CDX_OPT_DRAFT_MIN, &o->draft_min)) return 2;
        } else if (!strcmp(a, "--top-logits")) {
            NEED_VALUE();
            if (cli_parse_int(a, v, 0, 1 << 20, &o->top_logits)) return 2;
            o->top_logits_set = true;
        } else if (!strcmp(a, "--dtype")) {
            NEED_VALUE();
            if (cli_parse_dtype("caldrix run", v, &o->dtype))
                return 2;
        } else if (!strcmp(a, "--isa")) {
            NEED_VALUE();
            o->isa = v;
        } else if (!strcmp(a, "--weight-budget")) {
            NEED_VALUE();
            if (cli_parse_bytes(a, v, &o->weight_budget)) return 2;
        } else if (!strcmp(a, "--kv-type")) {
            NEED_VALUE();
            if (cli_parse_kv_type("caldrix run", v, &o->kv_type))
                return 2;
            o->kv_type_set = true;
        } else if (!strcmp(a, "--kv-store")) {
            NEED_VALUE();
            o->kv_store = v;
        } else if (!strcmp(a, "--system")) {
            NEED_VALUE();
            o->system = v;
        } else if (!strcmp(a, "--chat")) {
            o->chat = true;
        } else if (!strcmp(a, "--chat-template")) {
            NEED_VALUE();
            o->chat_template = v;
        } else if (!strcmp(a, "--chat-template-kwargs")) {
            NEED_VALUE();
            json_decref(o->chat_kwargs);
            o->chat_kwargs = NULL;
            if (cli_parse_json_object("caldrix run", a, v, &o->chat_kwargs))
                return 2;
        } else if (!strcmp(a, "-i") || !strcmp(a, "--interactive")) {
            o->chat = o->interactive = true;
        } else if (!strcmp(a, "--image") || !strcmp(a, "--image-opt")) {
            NEED_VALUE();
            const bool opt = a[7] == '-';
            int *n = opt ? &o->n_image_opts : &o->n_images;
            if (*n == 64) {
                fprintf(stderr, "caldrix run: more than 64 %s options\n", a);
                return 2;
            }
            (opt ? o->image_opts : o->images)[(*n)++] = v;
        } else if (!strcmp(a, "--lora")) {
            NEED_VALUE();
            if (o->n_lora == 16) {
                fprintf(stderr, "caldrix run: more than 16 --lora options\n");
                return 2;
            }
            char *path = NULL;
            if (cli_parse_lora("caldrix run", v, NULL, &path, &o->lora_scale[o->n_lora]))
                return 2;
            o->lora_path[o->n_lora++] = path;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (!strcmp(a, "--ignore-eos")) {
            o->ignore_eos = true;
        } else if (!strcmp(a, "--grammar") || !strcmp(a, "--json-schema")) {
            NEED_VALUE();
            *(a[2] == 'g' ? &o->grammar_file : &o->schema_file) = v;
        } else if (cli_split_is_opt(a)) {
            if (cli_split_parse("caldrix run", argc, argv, &i, &o->split))
                return 2;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "caldrix run: unknown option \"%s\" (caldrix run --help)\n", a);
            return 2;
        } else if (!o->model) {
            o->model = a;
        } else {
            fprintf(stderr, "caldrix run: unexpected argument \"%s\" (one MODEL only)\n", a);
            return 2;
        }
#undef NEED_VALUE
    }
    if (o->draft_min && o->draft_max && o->draft_min > o->draft_max) {
        fprintf(stderr, "caldrix run: --draft-min %ld is more than --draft-max %ld\n", o->draft_min, o->draft_max);
        return 2;
    }
    if (o->draft && o->spec == CDX_SPEC_LOOKUP) {
        fprintf(stderr, "caldrix run: --draft %s with --spec lookup: lookup uses no draft (give --spec auto)\n", o->draft);
        return 2;
    }
    if (o->draft && o->spec == CDX_SPEC_OFF)
        o->spec = CDX_SPEC_AUTO; /* a draft given is a draft used */
    if ((o->draft_min || o->draft_max || o->spec_keep_on) && !o->spec) {
        fprintf(stderr, "caldrix run: --draft-max, --draft-min and --spec-keep-on shape speculative decoding; add "
                        "--spec lookup\n");
        return 2;
    }
    if (o->chat && o->prompt_ids) {
        fprintf(stderr, "caldrix run: --chat renders text through the chat template; it takes -p, not --prompt-ids\n");
        return 2;
    }
    if (!!o->prompt + !!o->prompt_ids + !!o->prompt_file > 1) {
        fprintf(stderr, "caldrix run: give one of -p, -f and --prompt-ids\n");
        return 2;
    }
    if (o->grammar_file && o->schema_file) {
        fprintf(stderr, "caldrix run: give one of --grammar and --json-schema\n");
        return 2;
    }
    if (o->system && !o->chat) {
        fprintf(stderr, "caldrix run: --system is a chat message; it needs --chat (or -i)\n");
        return 2;
    }
    if ((o->chat_template || o->chat_kwargs) && !o->chat) {
        fprintf(stderr, "caldrix run: %s shapes the chat prompt; it needs --chat (or -i)\n",
                o->chat_template ? "--chat-template" : "--chat-template-kwargs");
        return 2;
    }
    if (o->top_logits_set && !o->json) {
        fprintf(stderr, "caldrix run: --top-logits is printed with --json; add --json\n");
        return 2;
    }
    if (o->interactive && (o->prompt || o->prompt_file)) {
        fprintf(stderr, "caldrix run: -i reads the messages from standard input; it takes no -p or -f\n");
        return 2;
    }
    if (o->interactive && o->top_logits) {
        fprintf(stderr, "caldrix run: --top-logits is for one-shot runs, not -i\n");
        return 2;
    }
    return 0;
}

/* NULL when content is not valid UTF-8 (jansson refuses it). */
static json_t *chat_message(const char *role, const char *content)
{
    return json_pack("{s:s,s:s}", "role", role, "content", content);
}

/* A vision model's message: content as parts, n_images {"type":"image"} first, then the text (the
 * form SmolVLM's template iterates; it writes "<image>" for an image part). */
static json_t *chat_message_parts(const char *role, const char *text, int n_images)
{
    json_t *parts = json_array(), *t = json_pack("{s:s,s:s}", "type", "text", "text", text);
    if (!parts || !t) {
        json_decref(parts);
        json_decref(t);
        return NULL;
    }
    for (int i = 0; i < n_images; i++)
        json_array_append_new(parts, json_pack("{s:s}", "type", "image"));
    json_array_append_new(parts, t);
    return json_pack("{s:s,s:o}", "role", role, "content", parts);
}

/* The conversation as transformers' apply_chat_template(add_generation_prompt=True) renders it. */
static int chat_render(const cdx_chat_setup *c, const json_t *kwargs, const json_t *msgs, char **out, cdx_err *err)
{
    size_t len = 0;
    return cdx_chat_render(c->tmpl, msgs, true, c->tokens, kwargs, out, &len, err);
}

/* run --json's finish_reason: "stop" (an end-of-generation token), "length" (-n reached) or
 * "context" (the context filled before -n); "cancelled" or "error" otherwise. */
static const char *run_finish_reason(cdx_finish f, bool context_first)
{
    return f == CDX_FINISH_LENGTH && context_first ? "context" : cdx_finish_name(f);
}

/* The whole of a stream, at most 64 MiB, without its trailing newlines; NULL on failure. */
static char *read_text(FILE *f)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n - 1 == 0) {
            char *g = cap > ((size_t)64 << 20) ? NULL : realloc(buf, cap *= 2);
            if (!g) {
                free(buf);
                return NULL;
            }
            buf = g;
        }
    }
    if (buf) {
        while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
            n--;
        buf[n] = 0;
    }
    return buf;
}

typedef struct {
    int32_t *tokens;
    size_t n, cap;
} id_list;

static int id_push(id_list *l, int32_t id)
{
    int32_t *grown = cdx_array_grow(l->tokens, &l->cap, l->n, sizeof *l->tokens);
    if (!grown)
        return -1;
    l->tokens = grown;
    l->tokens[l->n++] = id;
    return 0;
}

typedef struct {
    char *s;
    size_t n;
} text_buf;

static void text_append(text_buf *t, const char *p, size_t n)
{
    char *g = realloc(t->s, t->n + n + 1);
    if (!g)
        return; /* the text is a by-product; generation goes on */
    memcpy(g + t->n, p, n);
    t->s = g;
    t->n += n;
    g[t->n] = 0;
}

/* Tokenizes text into *ids (replacing what it held). */
static int encode_text(const cdx_tok *tok, const char *text, bool add_special, id_list *ids, cdx_err *err)
{
    size_t len = strlen(text), need = 0;
    int rc = cdx_tok_encode(tok, text, len, add_special, true, NULL, 0, &need, err);
    if (rc)
        return rc;
    if (need + 1 > ids->cap) {
        int32_t *g = realloc(ids->tokens, (need + 1) * sizeof *g);
        if (!g)
            return cdx_err_set(err, CDX_ENOMEM, "out of memory for %zu prompt tokens", need);
        ids->tokens = g;
        ids->cap = need + 1;
    }
    return cdx_tok_encode(tok, text, len, add_special, true, ids->tokens, need, &ids->n, err);
}

/* Set by Ctrl-C while a reply is being generated (interactive chat); elsewhere Ctrl-C quits. */
static volatile sig_atomic_t g_generating, g_interrupted;

static void on_sigint(int sig)
{
    if (!g_generating) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    g_interrupted = 1;
}

/* What one request produced, filled by the engine's events. */
typedef struct {
    bool stream;             /* write the text to stdout as it comes */
    json_t *steps;           /* NULL, or gets {"token","top"} per step */
    id_list out;             /* generated tokens */
    text_buf text;
    cdx_finish finish;
    int64_t n_cached;
    const char *proposer;    /* speculative decoding: NULL when off */
    int64_t proposed, accepted;
    bool spec_off;
    double t_first, t_end;   /* cdx_time_ms() */
    char error[1024];
} run_state;

static void on_event(const cdx_event *ev)
{
    run_state *st = ev->user;
    if (ev->text_len) {
        text_append(&st->text, ev->text, ev->text_len);
        if (st->stream) {
            fwrite(ev->text, 1, ev->text_len, stdout);
            fflush(stdout);
        }
    }
    st->n_cached = ev->n_cached;
    st->proposer = ev->spec_proposer;
    st->proposed = ev->spec_proposed;
    st->accepted = ev->spec_accepted;
    st->spec_off = ev->spec_off;
    if (ev->finish != CDX_FINISH_NONE) {
        st->finish = ev->finish;
        st->t_end = cdx_time_ms();
        if (ev->message)
            snprintf(st->error, sizeof st->error, "%s", ev->message);
        return;
    }
    if (ev->index == 0)
        st->t_first = cdx_time_ms();
    id_push(&st->out, ev->token); /* out of memory: the token is missing from --json, not from the text */
    if (st->steps) {
        json_t *top = json_array();
        for (int t = 0; t < ev->n_top; t++)
            json_array_append_new(top, json_pack("[i,f]", ev->top_ids[t], (double)ev->top_logits[t]));
        json_array_append_new(st->steps, json_pack("{s:i,s:o}", "token", ev->token, "top", top));
    }
}

/* Runs one request to its end on the engine (the CLI's own engine thread is this one). Ctrl-C
 * while g_generating cancels it. */
static int run_request(cdx_engine *e, const id_list *prompt, int64_t max_tokens, const run_opts *o, run_state *st,
                       cdx_err *err)
{
    cdx_request r = cdx_request_defaults();
    r.prompt = prompt->tokens;
    r.n_prompt = (int64_t)prompt->n;
    r.max_tokens = max_tokens;
    r.ignore_eos = o->ignore_eos;
    r.sampling = o->sp;
    r.top_logprobs = st->steps ? (int)o->top_logits : 0;
    r.on_event = on_event;
    r.user = st;
    r.images = o->req_images;
    r.n_images = o->n_req_images;
    r.grammar = o->grammar;
    r.lora = o->n_lora ? &o->lora_set : NULL;
    st->finish = CDX_FINISH_NONE;
    uint64_t id;
    int rc = cdx_engine_submit(e, &r, &id, err);
    if (rc)
        return rc;
    bool cancelled = false;
    while (cdx_engine_busy(e)) {
        if (g_interrupted && !cancelled) {
            cdx_engine_cancel(e, id);
            cancelled = true;
        }
        if ((rc = cdx_engine_step(e, err)))
            return rc;
    }
    if (st->finish == CDX_FINISH_ERROR)
        return cdx_err_set(err, CDX_EINVAL, "%s", st->error);
    return CDX_OK;
}

static json_t *ids_json(const int32_t *ids, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer(ids[i]));
    return a;
}

/* One user message from standard input: a line, continued while it ends with a backslash.
 * Returns false at the end of input with nothing read. */
static bool read_message(text_buf *msg, char **line, size_t *cap)
{
    msg->n = 0;
    text_append(msg, "", 0);
    for (;;) {
        ssize_t len = getline(line, cap, stdin);
        if (len < 0)
            return msg->n > 0;
        while (len && ((*line)[len - 1] == '\n' || (*line)[len - 1] == '\r'))
            len--;
        bool more = len && (*line)[len - 1] == '\\';
        text_append(msg, *line, (size_t)len - more);
        if (!more)
            return true;
        text_append(msg, "\n", 1);
    }
}

/* Interactive chat: each message read from stdin becomes a user turn of the conversation, which
 * is re-rendered through the template and submitted whole; the engine's prefix cache finds the
 * blocks the earlier turns left, so a turn computes little more than its new tokens (templates
 * that rewrite earlier turns, such as Qwen3 dropping old <think> blocks, recompute from the first
 * changed block). Returns the number of turns answered, or < 0 on an error. */
static int chat_loop(const run_opts *o, const cdx_chat_setup *ct, cdx_engine *e, const cdx_tok *tok, int64_t n_ctx,
                     const char *model, cdx_err *err)
{
    bool tty = isatty(0) && isatty(1) && !o->json;
    json_t *msgs = json_array();
    id_list ids = {0};
    text_buf msg = {0};
    char *line = NULL, *rendered = NULL;
    size_t line_cap = 0;
    int rc = CDX_OK, answered = 0;
    cli_images conv = {0}; /* the conversation's images, in order */
    int pending = 0;       /* attached to the next message */
    cdx_image_proc pp;
    bool have_pp = false;
    struct sigaction sa = { .sa_handler = on_sigint }, old_sa;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_sa);
    if (o->system)
        json_array_append_new(msgs, chat_message("system", o->system));
    size_t n_fixed = json_array_size(msgs);
    if (o->system && !n_fixed) {
        rc = cdx_err_set(err, CDX_EINVAL, "--system: the text is not valid UTF-8");
        goto done;
    }
    if (tty)
        fprintf(stderr, "caldrix: chatting with %s. /clear starts over, /exit or Ctrl-D quits, Ctrl-C stops a reply.\n",
                model);
    for (int turn = 0;;) {
        if (tty) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        if (!read_message(&msg, &line, &line_cap))
            break;
        const char *m = msg.s;
        while (*m == ' ' || *m == '\t')
            m++;
        if (!strcmp(m, "/exit") || !strcmp(m, "/quit") || !strcmp(m, "/bye"))
            break;
        if (!strcmp(m, "/clear")) {
            while (json_array_size(msgs) > n_fixed)
                json_array_remove(msgs, json_array_size(msgs) - 1);
            cli_images_free(&conv);
            pending = 0;
            if (tty)
                fprintf(stderr, "caldrix: the conversation starts over\n");
            continue;
        }
        if (!strncmp(m, "/image", 6) && (m[6] == ' ' || !m[6])) {
            const char *path = m + 6;
            while (*path == ' ')
                path++;
            cdx_err ie = {0};
            if (!*path)
                fprintf(stderr, "caldrix: /image PATH attaches a PNG or JPEG to the next message\n");
            else if (!have_pp && cdx_load_image_proc(model, o->m, o->image_opts, o->n_image_opts, &pp, &ie))
                fprintf(stderr, "caldrix: /image: %s\n", ie.msg);
            else if ((have_pp = true) && cli_images_add_file(&conv, &pp, path, &ie))
                fprintf(stderr, "caldrix: /image: %s\n", ie.msg);
            else {
                pending++;
                if (tty)
                    fprintf(stderr, "caldrix: %s attached to the next message (%lld tiles)\n", path,
                            (long long)conv.tiles[conv.n - 1].n_tiles);
            }
            continue;
        }
        if (!*m)
            continue;
        json_t *um = conv.n ? chat_message_parts("user", msg.s, pending) : chat_message("user", msg.s);
        if (!um) {
            fprintf(stderr, "caldrix: the message is not valid UTF-8; it was not sent\n");
            continue;
        }
        json_array_append_new(msgs, um);
        free(rendered);
        rendered = NULL;
        if ((rc = chat_render(ct, o->chat_kwargs, msgs, &rendered, err)))
            goto done;
        if (conv.n) { /* every image of the conversation, expanded where the template put it */
            char *ex = NULL;
            if ((rc = cli_images_expand(&conv, rendered, &ex, err)))
                goto done;
            free(rendered);
            rendered = ex;
        }
        pending = 0;
        if ((rc = encode_text(tok, rendered, ct->chatml, &ids, err))) /* ChatML: the tokenizer's BOS */
            goto done;
        if ((int64_t)ids.n >= n_ctx) {
            fprintf(stderr, "caldrix: the conversation is now %zu tokens, more than the context holds (%lld): /clear "
                            "starts over (or raise --ctx)\n", ids.n, (long long)n_ctx);
            json_array_remove(msgs, json_array_size(msgs) - 1);
            continue;
        }
        const int64_t room = n_ctx - (int64_t)ids.n;
        const int64_t max = o->n_gen_set && o->n_gen < room ? o->n_gen : room;
        run_state st = { .stream = !o->json };
        g_interrupted = 0;
        g_generating = 1;
        run_opts oi = *o;
        oi.req_images = conv.req;
        oi.n_req_images = conv.n;
        rc = run_request(e, &ids, max, &oi, &st, err);
        g_generating = 0;
        if (rc) {
            free(st.out.tokens);
            free(st.text.s);
            goto done;
        }
        text_append(&st.text, "", 0);
        const bool context_first = max == room && !(o->n_gen_set && o->n_gen <= room);
        if (st.finish == CDX_FINISH_CANCELLED && tty)
            fprintf(stderr, "\ncaldrix: reply stopped");
        else if (st.finish == CDX_FINISH_LENGTH && context_first)
            fprintf(stderr, "\ncaldrix: the context (%lld tokens) is full; the reply stops here (/clear, or raise --ctx)\n",
                    (long long)n_ctx);
        if (o->json) {
            json_t *j = json_pack("{s:i,s:o,s:I,s:o,s:s%,s:s}", "turn", turn, "prompt", ids_json(ids.tokens, ids.n),
                                  "reused", (json_int_t)st.n_cached, "tokens", ids_json(st.out.tokens, st.out.n),
                                  "text", st.text.s, st.text.n, "finish_reason",
                                  run_finish_reason(st.finish, context_first));
            if (j)
                json_dumpf(j, stdout, JSON_COMPACT | JSON_ENSURE_ASCII);
            json_decref(j);
        }
        fputc('\n', stdout);
        fflush(stdout);
        json_array_append_new(msgs, chat_message("assistant", st.text.s));
        free(st.out.tokens);
        free(st.text.s);
        turn++;
        answered++;
    }
done:
    sigaction(SIGINT, &old_sa, NULL);
    cli_images_free(&conv);
    json_decref(msgs);
    free(ids.tokens);
    free(msg.s);
    free(line);
    free(rendered);
    return rc ? rc : answered;
}

/* The whole of a regular file ("-": standard input), at most 64 MiB, without its trailing
 * newlines; NULL with err set on failure (a folder or a device is refused, as tokenize --file does). */
static char *read_text_file(const char *path, cdx_err *err)
{
    if (!strcmp(path, "-")) {
        char *t = read_text(stdin);
        if (!t)
            cdx_err_set(err, CDX_EIO, "cannot read the prompt from standard input");
        return t;
    }
    char *buf = NULL;
    size_t n = 0;
    if (cdx_file_read_all(path, (size_t)64 << 20, &buf, &n, err) < 0)
        return NULL;
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = 0;
    return buf;
}


/* A seed nobody chose: from the kernel's random source, else the clock. */
static uint64_t random_seed(void)
{
    uint64_t s = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&s, sizeof s, 1, f) != 1)
        s = (uint64_t)(cdx_time_ms() * 1000.0) ^ ((uint64_t)getpid() << 32);
    if (f)
        fclose(f);
    return s & (((uint64_t)1 << 53) - 1); /* exact in JSON numbers */
}

int cmd_run(int argc, char **argv)
{
    run_opts o;
    int rc = parse_run_args(argc, argv, &o);
    if (rc) {
        free(o.ids);
        json_decref(o.chat_kwargs);
        return rc;
    }
    cdx_err err = {0};
    cdx_loaded *ld = NULL;
    char **cands = NULL; /* --draft auto */
    int n_cands = 0;
    id_list prompt = {0};
    run_state st = { .stream = !o.json, .steps = o.json ? json_array() : NULL };
    char *chat_text = NULL, *input_text = NULL;
    cli_images images = {0};
    char *expanded = NULL;
    int status = 1;
    double t0 = cdx_time_ms();
    if (!o.seed_set)
        o.sp.seed = random_seed();

    const cdx_kernels *k = o.isa ? cdx_kernels_by_isa(o.isa) : cdx_kernels_best();
    if (!k) {
        char sets[160];
        fprintf(stderr, "caldrix run: --isa \"%s\" is unknown or this CPU lacks it (this CPU runs: %s)\n", o.isa,
                cli_isa_list(sets, sizeof sets));
        free(o.ids);
        json_decref(st.steps);
        return 2;
    }
    /* a split across mpirun's ranks: planned, or refused, before any rank loads a byte */
    cdx_split *split = NULL;
    cdx_stage stage;
    int64_t split_l0 = 0, split_l1 = 0;
    if ((status = cli_split_begin("caldrix run", &o.split, o.model, &split, &split_l0, &split_l1))) {
        free(o.ids);
        json_decref(st.steps);
        return status < 0 ? 0 : status;
    }
    status = 1;
    if (split && cdx_split_rank(split) > 0) { /* a later stage: its layers, until rank 0 is done */
        status = cli_split_stage("caldrix run", split, o.model, o.dtype, (int)o.threads, k, split_l0, split_l1);
        cdx_split_end(split);
        free(o.ids);
        json_decref(st.steps);
        return status;
    }
    if (split && (rc = cdx_split_stage_of(split, &stage, &err))) {
        fprintf(stderr, "caldrix run: %s\n", err.msg);
        goto done;
    }
    if (split && o.split.micro)
        stage.n_micro = (int)o.split.micro;
    if (o.grammar_file || o.schema_file) {
        /* compiled before the model loads: a bad grammar costs nothing */
        const char *path = o.grammar_file ? o.grammar_file : o.schema_file;
        cdx_file *f = NULL;
        rc = cdx_file_map(path, &f, &err);
        if (!rc)
            rc = o.grammar_file ? cdx_grammar_from_gbnf((const char *)f->data, f->size, path, &o.grammar, &err)
                                : cdx_grammar_from_json_schema((const char *)f->data, f->size, path, &o.grammar, &err);
        cdx_file_unmap(f);
        if (rc) {
            fprintf(stderr, "caldrix run: %s: %s\n", o.grammar_file ? "--grammar" : "--json-schema", err.msg);
            free(o.ids);
            json_decref(st.steps);
            return 2;
        }
    }
    if (!o.model && o.dtype == CDX_DTYPE_BF16) {
        fprintf(stderr, "caldrix: the bundled model is a GGUF file: it computes as llama.cpp does; --dtype bf16 "
                        "applies to safetensors checkpoints (use --dtype f32 or auto)\n");
        goto done;
    }
    if ((o.n_images || o.n_image_opts) && o.interactive) {
        fprintf(stderr, "caldrix run: in -i, attach images with /image PATH\n");
        goto done;
    }
    if ((o.n_images || o.n_image_opts) && !o.model) {
        fprintf(stderr, "caldrix: the bundled model takes no images\n");
        goto done;
    }
    /* a path opens as it is; anything else is a reference the hub resolves (and downloads) */
    cli_hub_ui ui;
    cdx_hub_opts ho;
    cli_hub_opts_init(&ho, &ui, o.json);
    ho.ctx = (uint32_t)o.ctx;
    cdx_engine_opts eo = cdx_engine_defaults();
    eo.n_threads = (int)o.threads;
    eo.kernels = k;
    eo.n_ctx = o.ctx; /* 0: the model's trained context, at most 4096 */
    eo.max_batch = 1;
    eo.kv_store = o.kv_store;
    eo.kv_type = o.kv_type;
    eo.spec = o.spec;
    eo.draft_max = (int)o.draft_max;
    eo.draft_min = (int)o.draft_min;
    eo.spec_keep_on = o.spec_keep_on;
    eo.stage = split ? &stage : NULL;
    eo.split_groups = cli_split_groups(split, &o.split);
    cdx_load_opts lo = cli_load_opts(&ho, o.dtype, o.weight_budget);
    lo.layer0 = split_l0; /* a split: only this rank's slice is packed or copied */
    lo.layer1 = split_l1;
    lo.chat = o.chat;
    lo.chat_template = o.chat_template;
    lo.images = o.n_images || o.n_image_opts ? CDX_LOAD_IMAGES_REQUIRED : CDX_LOAD_IMAGES_NO;
    lo.image_opts = o.image_opts;
    lo.n_image_opts = o.n_image_opts;
    lo.engine = &eo;
    lo.kv_type_set = o.kv_type_set;
    cdx_load_stage at;
    lo.draft = o.draft; /* loaded first, refused (exit 2) by what it is and by the model's vocabulary and size */
    if (o.draft && !strcmp(o.draft, "auto")) {
        lo.draft = NULL; /* the first cached model that passes the same checks */
        if (cli_draft_candidates("caldrix run", &cands, &n_cands))
            goto done;
        lo.draft_candidates = (const char *const *)cands;
        lo.n_draft_candidates = n_cands;
        if (!n_cands)
            fprintf(stderr, "caldrix run: --draft auto: the caches hold no model to draft with; speculating by prompt "
                            "lookup\n");
    }
    if ((rc = cdx_load(o.model, &lo, &ld, &at, &err))) {
        if (at == CDX_LOAD_DRAFT || at == CDX_LOAD_DRAFT_REFUSED)
            fprintf(stderr, "caldrix run: %s\n", err.msg);
        else if (at == CDX_LOAD_ENGINE && o.draft)
            fprintf(stderr, "caldrix run: --draft %s for %s: %s\n", o.draft, o.model ? o.model : "the bundled model",
                    err.msg);
        else
            fprintf(stderr, "caldrix: %s%s\n", at == CDX_LOAD_CHAT ? "--chat-template: " : "", err.msg);
        if (at == CDX_LOAD_DRAFT_REFUSED ||
            (at == CDX_LOAD_ENGINE && o.spec && rc == CDX_EINVAL && (strstr(err.msg, "--spec") || strstr(err.msg, "--draft"))))
            status = 2; /* a model that cannot speculate, a draft that cannot draft: bad input, as a bad option is */
        goto done;
    }
    if (split) { /* every rank checks rank 0's model fingerprint and makes its pool */
        cdx_engine_stats es;
        cdx_engine_get_stats(ld->engine, &es);
        if ((rc = cdx_split_start(split, ld->model, es.n_blocks, es.token_budget, ld->kv_type, &err))) {
            fprintf(stderr, "caldrix run: --allow-split: %s\n", err.msg);
            status = rc == CDX_EINVAL ? 2 : 1;
            goto done;
        }
        if (!o.json)
            fprintf(stderr, "caldrix: split over %d ranks: layers 0-%lld here, the rest on ranks 1-%d\n",
                    cdx_split_size(split), (long long)split_l1 - 1, cdx_split_size(split) - 1);
    }
    if (ld->draft_note[0])
        fprintf(stderr, "caldrix run: %s%s\n", ld->draft_note, ld->draft ? "" : "; speculating by prompt lookup");
    o.model = ld->path;
    const cdx_model *m = ld->model;
    const cdx_tok *tok = ld->tok;
    cdx_engine *eng = ld->engine;
    const cdx_chat_setup ct = ld->chat;
    const cdx_hparams *hp = cdx_model_hparams(m);
    const char *notes = cdx_model_notes(m);
    o.m = m;
    if (*notes && !o.json)
        fprintf(stderr, "caldrix: %s", notes);

    /* the prompt: -p, -f, --prompt-ids, or text piped to standard input */
    if (o.prompt_file) {
        if (!(input_text = read_text_file(o.prompt_file, &err))) {
            fprintf(stderr, "caldrix: -f: %s\n", err.msg);
            goto done;
        }
        o.prompt = input_text;
    } else if (!o.prompt && !o.ids && !o.interactive && !(o.chat && isatty(0)) && !isatty(0)) {
        if (!(input_text = read_text(stdin))) {
            fprintf(stderr, "caldrix: cannot read the prompt from standard input\n");
            goto done;
        }
        if (*input_text || o.chat)
            o.prompt = input_text;
    }
    if (o.ids) {
        prompt.tokens = o.ids;
        prompt.n = prompt.cap = o.n_ids;
        o.ids = NULL;
    } else if (!tok) {
        if (o.prompt || o.chat)
            fprintf(stderr, "caldrix: %s has no tokenizer files (tokenizer.json, tokenizer.model or vocab.json + "
                            "merges.txt); give the prompt as --prompt-ids\n", o.model);
        else
            fprintf(stderr, "caldrix: %s has no tokenizer: give a prompt with --prompt-ids\n", o.model);
        goto done;
    }
    if (o.chat) {
        /* the rule serve follows too: --chat-template, else the model's, else ChatML (said here) */
        if (ct.note[0])
            fprintf(stderr, "caldrix: %s\n", ct.note);
        if (!o.prompt && isatty(0))
            o.interactive = true;
        if (!o.interactive) {
            if (!o.prompt || !*o.prompt) {
                fprintf(stderr, "caldrix: --chat: the message is empty (give -p TEXT, -f FILE or pipe it in)\n");
                goto done;
            }
            json_t *msgs = json_array();
            if (o.system)
                json_array_append_new(msgs, chat_message("system", o.system));
            json_t *um = o.n_images && cdx_model_vision(m, NULL) ? chat_message_parts("user", o.prompt, o.n_images)
                                                                 : chat_message("user", o.prompt);
            if (!um || (o.system && json_array_size(msgs) == 0)) {
                json_decref(um);
                json_decref(msgs);
                fprintf(stderr, "caldrix: the message is not valid UTF-8\n");
                goto done;
            }
            json_array_append_new(msgs, um);
            rc = chat_render(&ct, o.chat_kwargs, msgs, &chat_text, &err);
            json_decref(msgs);
            if (rc) {
                fprintf(stderr, "caldrix: %s: chat template: %s\n",
                        o.chat_template ? o.chat_template : ct.chatml ? "ChatML" : o.model, err.msg);
                goto done;
            }
        }
    }
    if (o.n_lora && split) { /* the later ranks run their layers without the adapters */
        fprintf(stderr, "caldrix run: --lora with a model split over ranks (--allow-split) is not supported\n");
        status = 2;
        goto done;
    }
    for (int i = 0; i < o.n_lora; i++) {
        if ((rc = cdx_lora_open(m, o.lora_path[i], &o.lora[i], &err))) {
            fprintf(stderr, "caldrix: --lora %s: %s\n", o.lora_path[i], err.msg);
            goto done;
        }
        o.lora_use[i] = (cdx_lora_use){ o.lora[i], o.lora_scale[i] };
        o.lora_set = (cdx_lora_set){ o.lora_use, i + 1 };
    }
    if (o.n_images || o.n_image_opts) {
        for (int i = 0; i < o.n_images; i++)
            if ((rc = cli_images_add_file(&images, &ld->image_proc, o.images[i], &err))) {
                fprintf(stderr, "caldrix: --image: %s\n", err.msg);
                goto done;
            }
        o.req_images = images.req;
        o.n_req_images = images.n;
        if (!prompt.n && (chat_text || o.prompt)) {
            char *ex = NULL;
            if ((rc = cli_images_expand(&images, chat_text ? chat_text : o.prompt, &ex, &err))) {
                fprintf(stderr, "caldrix: %s\n", err.msg);
                goto done;
            }
            if (chat_text) {
                free(chat_text);
                chat_text = ex;
            } else {
                free(expanded);
                o.prompt = expanded = ex;
            }
        }
    }
    if (!prompt.n && !o.interactive) {
        /* a rendered chat template carries its own special tokens: nothing is added to it (ChatML
         * standing in gets the tokenizer's own BOS, as serve gives it) */
        const char *ptext = chat_text ? chat_text : o.prompt ? o.prompt : "";
        if ((rc = encode_text(tok, ptext, chat_text == NULL || ct.chatml, &prompt, &err))) {
            fprintf(stderr, "caldrix: prompt: %s\n", err.msg);
            goto done;
        }
        if (prompt.n == 0 && hp->bos_id >= 0)
            prompt.tokens[prompt.n++] = hp->bos_id;
        if (prompt.n == 0) {
            fprintf(stderr, "caldrix: the prompt is empty and the model has no BOS token to start from\n");
            goto done;
        }
    }
    for (size_t i = 0; i < prompt.n; i++)
        if (prompt.tokens[i] >= hp->n_vocab) {
            fprintf(stderr, "caldrix: prompt token %d is outside the vocabulary (0..%lld)\n", prompt.tokens[i],
                    (long long)hp->n_vocab - 1);
            goto done;
        }

    /* the context: --ctx, else the model's (at most 4096); a prompt that does not fit is refused */
    const int64_t trained = hp->n_ctx_train;
    cdx_engine_stats es0;
    cdx_engine_get_stats(eng, &es0);
    const int64_t n_ctx = es0.n_ctx;
    if (o.ctx && trained > 0 && o.ctx > trained && !o.json)
        fprintf(stderr, "caldrix: warning: --ctx %ld is more than the %lld positions %s was trained for; output past "
                        "them may degrade\n", o.ctx, (long long)trained, o.model ? o.model : "the model");
    if (!o.interactive && (int64_t)prompt.n >= n_ctx) {
        fprintf(stderr, "caldrix: the prompt has %zu tokens; the context holds %lld (%s), which leaves no room to "
                        "generate\n", prompt.n, (long long)n_ctx, o.ctx ? "--ctx" : "the default; raise --ctx");
        goto done;
    }
    if (o.interactive) {
        json_decref(st.steps);
        st.steps = NULL;
        rc = chat_loop(&o, &ct, eng, tok, n_ctx, o.model, &err);
        if (rc < 0)
            fprintf(stderr, "caldrix: %s\n", err.msg);
        else if (rc == 0)
            fprintf(stderr, "caldrix: no message was answered\n");
        status = rc > 0 ? 0 : 1;
        goto done;
    }
    double t_loaded = cdx_time_ms();
    const int64_t room = n_ctx - (int64_t)prompt.n;
    const int64_t max = o.n_gen < room ? o.n_gen : room;
    if (o.n_gen == 0) {
        st.t_first = st.t_end = t_loaded;
        st.finish = CDX_FINISH_LENGTH;
    } else if ((rc = run_request(eng, &prompt, max, &o, &st, &err))) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        goto done;
    }
    if (st.finish == CDX_FINISH_LENGTH && max < o.n_gen && !o.json)
        fprintf(stderr, "\ncaldrix: the context (%lld tokens) is full; stopping (raise --ctx)\n", (long long)n_ctx);
    double t_first = st.t_first > 0 ? st.t_first : st.t_end;
    double prefill_s = (t_first - t_loaded) / 1e3, decode_s = (st.t_end - t_first) / 1e3;
    size_t n_decoded = st.out.n > 0 ? st.out.n - 1 : 0; /* the first token comes from the prefill's logits */
    if (o.json) {
        json_t *root = json_pack("{s:o,s:o,s:s%,s:s,s:o,s:{s:f,s:f,s:f,s:I,s:I},s:s,s:s}", "prompt",
                                 ids_json(prompt.tokens, prompt.n), "tokens", ids_json(st.out.tokens, st.out.n), "text",
                                 st.text.s ? st.text.s : "", st.text.n, "finish_reason",
                                 run_finish_reason(st.finish, max < o.n_gen), "steps", st.steps, "timings", "load_ms",
                                 t_loaded - t0, "prefill_tok_s", prefill_s > 0 ? (double)prompt.n / prefill_s : 0.0,
                                 "decode_tok_s", decode_s > 0 ? (double)n_decoded / decode_s : 0.0, "cached_tokens",
                                 (json_int_t)st.n_cached, "seed", (json_int_t)o.sp.seed, "dtype",
                                 cdx_dtype_name(cdx_model_dtype(m)), "kv_type", cdx_type_name(ld->kv_type));
        st.steps = NULL;
        if (!root) {
            fprintf(stderr, "caldrix: cannot build the JSON result\n");
            goto done;
        }
        if (images.n) { /* the vision tower's share of the prefill */
            cdx_engine_stats es;
            cdx_engine_get_stats(eng, &es);
            json_t *tm = json_object_get(root, "timings");
            json_object_set_new(tm, "image_tiles", json_integer((json_int_t)es.image_tiles_encoded));
            json_object_set_new(tm, "image_encode_ms", json_real(es.image_encode_ms));
        }
        if (split) { /* the split: its ranks, this rank's layers, what crossed and how long MPI waited */
            uint64_t sent = 0, recv = 0;
            double wait = 0;
            cdx_split_stats(split, &sent, &recv, &wait);
            json_object_set_new(json_object_get(root, "timings"), "split",
                                json_pack("{s:i,s:I,s:I,s:I,s:f}", "ranks", cdx_split_size(split), "layers_rank0",
                                          (json_int_t)(split_l1 - split_l0), "bytes_sent", (json_int_t)sent,
                                          "bytes_received", (json_int_t)recv, "mpi_wait_ms", wait));
        }
        if (st.proposer) /* speculative decoding: what was proposed, kept, and whether the rule turned it off */
            json_object_set_new(json_object_get(root, "timings"), "draft",
                                json_pack("{s:s,s:I,s:I,s:b}", "proposer", st.proposer, "proposed",
                                          (json_int_t)st.proposed, "accepted", (json_int_t)st.accepted, "turned_off",
                                          st.spec_off));
        json_dumpf(root, stdout, JSON_COMPACT | JSON_ENSURE_ASCII);
        fputc('\n', stdout);
        json_decref(root);
    } else {
        fputc('\n', stdout);
        fflush(stdout); /* the summary on stderr comes after the text */
        fprintf(stderr, "caldrix: %zu prompt tokens at %.1f tok/s, %zu generated at %.1f tok/s (%s kernels, %s compute "
                        "[%s], %s KV cache, seed %llu)\n",
                prompt.n, prefill_s > 0 ? (double)prompt.n / prefill_s : 0.0, st.out.n,
                decode_s > 0 ? (double)n_decoded / decode_s : 0.0, cdx_kernels_isa(k),
                cdx_dtype_name(cdx_model_dtype(m)), cdx_model_dtype_why(m), cdx_type_name(ld->kv_type),
                (unsigned long long)o.sp.seed);
        /* the draft's name (the reference given, or the model --draft auto chose), else the proposer's */
        const char *dname = !st.proposer || strcmp(st.proposer, "draft") || !ld->draft ? st.proposer
                          : o.draft && strcmp(o.draft, "auto") ? o.draft : ld->draft->path;
        if (st.proposer && st.spec_off)
            fprintf(stderr, "caldrix: draft %s was turned off (accepted %lld of %lld proposed tokens)\n", dname,
                    (long long)st.accepted, (long long)st.proposed);
        else if (st.proposer)
            fprintf(stderr, "caldrix: draft %s stayed on (accepted %.0f %% of %lld proposed tokens)\n", dname,
                    st.proposed ? 100.0 * (double)st.accepted / (double)st.proposed : 0.0, (long long)st.proposed);
    }
    if (st.proposer && !strcmp(st.proposer, "draft") && ld->draft && ld->path && ld->draft->path && st.proposed + st.spec_off > 0)
        cli_draft_outcome_save("run", ld->path, ld->draft->path, st.proposed, st.accepted, st.spec_off);
    status = 0;
done:
    json_decref(st.steps);
    free(prompt.tokens);
    free(st.out.tokens);
    free(st.text.s);
    free(o.ids);
    cdx_grammar_free(o.grammar);
    cdx_load_close(ld);
    if (split) {
        cdx_split_stop(split);
        cdx_split_end(split);
    }
    for (int i = 0; i < n_cands; i++)
        free(cands[i]);
    free(cands);
    for (int i = 0; i < o.n_lora; i++) {
        cdx_lora_close(o.lora[i]);
        free((char *)o.lora_path[i]);
    }
    json_decref(o.chat_kwargs);
    free(chat_text);
    free(input_text);
    free(expanded);
    cli_images_free(&images);
    return status;
}
