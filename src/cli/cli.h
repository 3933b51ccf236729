/* Shared pieces of the caldrix command line. Only cli/ prints or exits. */
#ifndef CDX_CLI_H
#define CDX_CLI_H

#include "caldrix.h"

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
int cmd_quantize(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_pull(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_models(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int synth_vlm(const char *dir, const char *shape, long seed); /* caldrix synth DIR --shape smolvlm-* (2: unknown) */

/* Strict number parsing for options: the whole string must be a number in range.
 * On failure prints "caldrix: OPT: \"VALUE\" is not ..." and returns -1. */
int cli_parse_int(const char *opt, const char *s, long lo, long hi, long *out);
int cli_parse_float(const char *opt, const char *s, double lo, double hi, double *out);

/* Before any work: OUT must not be IN (the same inode: the path, a hard link, a symlink), nor any
 * file of IN when IN is a checkpoint folder, and OUT's folder must exist and take a new file.
 * 0, or 2 after saying why on stderr as "caldrix CMD: ...". */
int cli_check_output(const char *cmd, const char *in, const char *out);

/* The model's tokenizer (its GGUF vocabulary or the checkpoint's files); *tok NULL when it has none. */
int cli_open_tokenizer(const char *path, const cdx_model *m, cdx_tok **tok, cdx_err *err);

/* The stories260K model linked into the binary (see Makefile). */
extern const unsigned char cdx_embedded_model[];
extern const unsigned char cdx_embedded_model_end[];

#endif
