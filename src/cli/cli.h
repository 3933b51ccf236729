/* Shared pieces of the caldrix command line. Only cli/ prints or exits. */
#ifndef CDX_CLI_H
#define CDX_CLI_H

#include "caldrix.h"
#include "caldrix/load.h"

#include <jansson.h>
#include <stdio.h>

#define CDX_VERSION_STRING "0.1.0"

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv); /* argv[0] is the command name */
    const char *help;
} cli_command;

int cmd_run(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_embed(int argc, char **argv);
int cmd_rerank(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_pull(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_models(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_finetune(int argc, char **argv);
int cmd_distill(int argc, char **argv);
int synth_vlm(const char *dir, const char *shape, long seed); /* caldrix synth DIR --shape smolvlm-* (2: unknown) */

/* Strict number parsing for options: the whole string must be a number in range.
 * On failure prints "caldrix: OPT: \"VALUE\" is not ..." and returns -1. */
int cli_parse_int(const char *opt, const char *s, long lo, long hi, long *out);
int cli_parse_float(const char *opt, const char *s, double lo, double hi, double *out);
/* --lora [NAME=]DIR[:SCALE] (run: no NAME; serve: NAME, default DIR's last part without .gguf): SCALE
 * when what follows the last ':' is a whole number, else the whole is DIR. On failure prints
 * "CMD: --lora VALUE: why" and returns -1. *name (NULL when name is NULL) and *path: heap. */
int cli_parse_lora(const char *cmd, const char *v, char **name, char **path, float *scale);
/* A byte count > 0 (cdx_parse_bytes: 8G, 512M); on failure says so and returns -1. */
int cli_parse_bytes(const char *opt, const char *s, uint64_t *out);
/* --chat-template-kwargs JSON (run and serve): a JSON object of extra template variables; on
 * failure prints why (cmd: "caldrix run") and returns -1. *out: a new reference. */
int cli_parse_json_object(const char *cmd, const char *opt, const char *s, json_t **out);
/* The --help lines of --chat-template and --chat-template-kwargs (run and serve). */
#define CLI_CHAT_TEMPLATE_HELP \
    "  --chat-template FILE   render chat with the Jinja template in FILE instead of the model's (for a\n" \
    "                         model whose template is missing or wrong); a model without one gets\n" \
    "                         ChatML, and says so on stderr\n" \
    "  --chat-template-kwargs JSON\n" \
    "                         extra template variables, as transformers' apply_chat_template(**kwargs):\n" \
    "                         e.g. '{\"enable_thinking\": false}'\n"

/* An engine option (--threads, --ctx, --max-batch, ...): cli_parse_int over the range of its row in
 * the engine's table (cdx_engine_opt_range), so a command accepts exactly what the engine takes. */
int cli_parse_engine_opt(const char *opt, const char *s, cdx_engine_opt_id id, long *out);
/* Every model in the caches (Hugging Face snapshots, Ollama tags), as caldrix models list shows
 * them: rows {ref, where, path, bytes, complete, runs, problem} (inspect's verdict, no weight read). */
json_t *cli_models_cached(const cdx_hub_env *env);
/* --draft auto's candidates: the paths of the complete cached models (heap, n of them, NULL-ended;
 * free each and the array). 0, or 1 after printing why (cmd: "caldrix run"). */
int cli_draft_candidates(const char *cmd, char ***paths, int *n);
/* Records a draft's outcome for model on this machine (CALDRIX_CACHE/draft-outcomes.json, read by
 * caldrix models drafts): cmd is "run", "bench" or "serve". A file that cannot be written is said on
 * stderr, nothing else. */
void cli_draft_outcome_save(const char *cmd, const char *model, const char *draft, int64_t proposed, int64_t accepted,
                            bool turned_off);
/* The --help line that gives those options' ranges from the same table:
 * "ranges: --ctx 1..16777216, --threads 1..8 (4 x the 2 cores this process may use, at most 1024)" */
void cli_print_engine_ranges(FILE *f, const cdx_engine_opt_id *ids, int n);
/* The --weight-budget line of run, bench and serve's usage. */
#define CLI_WEIGHT_BUDGET_HELP \
    "  --weight-budget BYTES  memory the weights may hold (8G, 512M): a mixture of experts larger than\n" \
    "                         that keeps its dense weights resident and reads experts from the file\n" \
    "                         when tokens route to them, in an LRU within the budget (same output)\n"
/* --dtype auto|f32|bf16 and --kv-type f32|f16|bf16 (the engine checks that the pair goes together);
 * on failure print why (cmd: "caldrix run") and return -1. */
int cli_parse_dtype(const char *cmd, const char *s, cdx_dtype *out);
/* The kernel sets this CPU runs, as "amx, avx512, ..., scalar" (the kernel layer's table) into buf */
const char *cli_isa_list(char *buf, size_t n);
int cli_parse_kv_type(const char *cmd, const char *s, uint32_t *out);
/* The --help lines of --dtype and --kv-type (the defaults come from the model layer's one table). */
void cli_print_dtype_help(FILE *f);

/* Before any work: OUT must not be IN (the same inode: the path, a hard link, a symlink), nor any
 * file of IN when IN is a checkpoint folder, and OUT's folder must exist and take a new file.
 * 0, or 2 after saying why on stderr as "caldrix CMD: ...". */
int cli_check_output(const char *cmd, const char *in, const char *out);

/* cdx_load's options as run and serve start them: hub (may be NULL) for references, the bundled
 * stories260K model when no MODEL is named, the tokenizer on. */
/* How weights are held, from the environment (CALDRIX_MMAP=1|0, CALDRIX_EXPERT_IO=pread|mmap; docs/models.md):
 * read by the front end, handed to the library as load options. A bad value ends the command (exit 2). */
void cli_load_env(cdx_load_opts *lo);
cdx_load_opts cli_load_opts(const cdx_hub_opts *hub, cdx_dtype dtype, uint64_t weight_budget);

/* The stories260K model linked into the binary (see Makefile). */
extern const unsigned char cdx_embedded_model[];
extern const unsigned char cdx_embedded_model_end[];
/* The chat page `caldrix serve` answers at / (ui/chat.html, linked into the binary; see Makefile). */
extern const char cdx_embedded_page[];
extern const char cdx_embedded_page_end[];

#endif
