/* --allow-split, --nodes, --split-layers, --split-timeout: a model split by layers over the ranks of
 * an Open MPI job (docs/models.md, "One model over several machines"). Shared by run (and later
 * serve and bench). */
#ifndef CDX_CLI_SPLIT_H
#define CDX_CLI_SPLIT_H

#include "caldrix/split.h"

#include <stdbool.h>

typedef struct cli_split_opts {
    bool allow;             /* --allow-split */
    long nodes;             /* --nodes N (0: not given) */
    const char *layers;     /* --split-layers SPEC */
    double timeout_s;       /* --split-timeout S (0: the default) */
    uint64_t memory;        /* --memory BYTES: what this rank gives (0: what the machine has available) */
    long micro;             /* --split-micro N: micro-batches in flight (0: as many as ranks) */
    int pipeline;           /* --split-pipeline: 0 not given (on), 1 on, -1 off */
} cli_split_opts;

#define CLI_SPLIT_HELP \
    "  --allow-split          under mpirun, split the model by layers across the ranks: rank 0 runs this\n" \
    "                         command with the first layers, every other rank a slice after it (only the\n" \
    "                         hidden state crosses); with one rank the model runs whole\n" \
    "  --nodes N              the ranks to split over (needs --allow-split; mpirun -np N starts them)\n" \
    "  --split-layers SPEC    the slices by hand, one range per rank: 0-3,4-7 (default: contiguous slices\n" \
    "                         in proportion to the memory each rank gives; a model rank 0 holds whole\n" \
    "                         runs whole unless --nodes or --split-layers is given)\n" \
    "  --memory BYTES         with --allow-split, the memory this rank gives (8G; default: what the\n" \
    "                         machine has available); a model that does not fit even split is refused\n" \
    "  --split-timeout S      seconds rank 0 waits for the other ranks before it fails (default 120; a\n" \
    "                         rank on this host that is gone is named at once)\n" \
    "  --split-micro N        rank 0 cuts a batch of several sequences into up to N micro-batches of 16\n" \
    "                         tokens or more, each sent on as soon as its layers are done (default: as\n" \
    "                         many as ranks; 1: none)\n" \
    "  --split-pipeline on|off\n" \
    "                         with two or more sequences decoding (and no prompt), keep as many groups\n" \
    "                         of them in flight as ranks (at least 2): rank 0 computes one group's\n" \
    "                         layers while the later ranks compute another's (default on; off: each\n" \
    "                         round whole, its ranks in turn)\n"

/* cdx_engine_opts.split_groups for a split sp (NULL: 0): 1 with --split-pipeline off, else as many
 * groups as ranks, 2..4. */
int cli_split_groups(const cdx_split *sp, const cli_split_opts *so);

/* Whether a is one of the options (cli_split_parse takes it). */
bool cli_split_is_opt(const char *a);

/* Parses one of the options at argv[*i] (advancing *i past its value). 1: not one of them; 0: taken;
 * 2: bad value (said on stderr). */
int cli_split_parse(const char *cmd, int argc, char **argv, int *i, cli_split_opts *so);

/* Before loading. Returns 0 with *sp NULL: run whole; 0 with *sp set: a split, this process is rank
 * cdx_split_rank(*sp) and its slice is *l0..*l1; -1: a rank > 0 with nothing to do (rank 0 runs the
 * model whole): exit 0; else the exit status, after saying why (rank 0 says it; the other ranks exit
 * quietly when rank 0 refused). model: the MODEL argument. */
int cli_split_begin(const char *cmd, const cli_split_opts *so, const char *model, cdx_split **sp, int64_t *l0,
                    int64_t *l1);

/* A rank > 0: loads model as run would (dtype, threads, kernels) and runs its stage loop until rank 0
 * stops it. Returns the exit status. */
int cli_split_stage(const char *cmd, cdx_split *sp, const char *model, cdx_dtype dtype, int n_threads,
                    const cdx_kernels *k, int64_t l0, int64_t l1);

#endif
