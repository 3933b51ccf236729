/* Shared pieces of the hub commands (pull, inspect, models, doctor). */
#ifndef CDX_CLI_HUB_H
#define CDX_CLI_HUB_H

#include "caldrix.h"

typedef struct cli_hub_ui {
    bool tty, quiet;
    double t_last;
    const char *cur;
} cli_hub_ui;

/* Sets o up to print the hub's events on stderr (a progress bar when stderr is a terminal). */
void cli_hub_opts_init(cdx_hub_opts *o, cli_hub_ui *ui, bool quiet);
void cli_fmt_bytes(uint64_t n, char *buf, size_t cap); /* "1.2 GB" (decimal units) */

#endif
