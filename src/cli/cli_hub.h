/* Shared pieces of the hub commands (pull, inspect, models, doctor). */
#ifndef CDX_CLI_HUB_H
#define CDX_CLI_HUB_H

#include "caldrix.h"

typedef struct cli_hub_ui {
    bool tty, quiet;
    bool planned; /* a download's file list was printed: "kept" lines belong to it */
    double t_last;
    const char *cur;
} cli_hub_ui;

/* Sets o up to print the hub's events on stderr (a progress bar when stderr is a terminal). */
void cli_hub_opts_init(cdx_hub_opts *o, cli_hub_ui *ui, bool quiet);
/* MODEL as the commands take it: a path that exists opens as it is (*out = NULL, *path = model);
 * anything else is a reference cdx_hub_resolve resolves (and downloads), with the hub's events on
 * stderr. 0, or 1 after printing "caldrix: <why>". *out: free it. */
int cli_resolve_model(const char *model, bool quiet, const char **path, char **out);

#endif
