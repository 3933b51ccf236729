/* The hub commands' shared terminal output: file lists, progress bars, notes. */
#include "cli.h"
#include "cli_hub.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


static void bar(cli_hub_ui *ui, const char *file, uint64_t done, uint64_t total, bool final)
{
    char d[32], t[32];
    cdx_fmt_bytes(done, d, sizeof d);
    cdx_fmt_bytes(total, t, sizeof t);
    int pct = total ? (int)(done * 100 / total) : 0;
    if (pct > 100)
        pct = 100;
    char b[31];
    int fill = pct * 30 / 100;
    for (int i = 0; i < 30; i++)
        b[i] = i < fill ? '#' : ' ';
    b[30] = 0;
    fprintf(stderr, "\r  %-36.36s [%s] %3d%% %10s / %s%s", file, b, pct, d, t, final ? "\n" : "");
    fflush(stderr);
}

static void on_event(const cdx_hub_event *ev, void *user)
{
    cli_hub_ui *ui = user;
    char sz[32];
    switch (ev->kind) {
    case CDX_HUB_EV_NOTE:
        fprintf(stderr, "caldrix: %s\n", ev->text);
        break;
    case CDX_HUB_EV_PLAN:
        ui->planned = true;
        if (ui->quiet)
            break;
        cdx_fmt_bytes(ev->total, sz, sizeof sz);
        fprintf(stderr, "caldrix: %u file%s, %s:\n", ev->n_files, ev->n_files == 1 ? "" : "s", sz);
        break;
    case CDX_HUB_EV_FILE:
        if (ui->quiet)
            break;
        cdx_fmt_bytes(ev->total, sz, sizeof sz);
        fprintf(stderr, "  %-40s %10s\n", ev->file, sz);
        break;
    case CDX_HUB_EV_START:
        ui->cur = ev->file;
        ui->t_last = 0;
        if (ui->quiet)
            break;
        if (ui->tty) {
            bar(ui, ev->file, ev->done, ev->total, false);
        } else {
            cdx_fmt_bytes(ev->total, sz, sizeof sz);
            if (ev->done) {
                char d[32];
                cdx_fmt_bytes(ev->done, d, sizeof d);
                fprintf(stderr, "  downloading %s (%s), resuming at %s\n", ev->file, sz, d);
            } else {
                fprintf(stderr, "  downloading %s (%s)\n", ev->file, sz);
            }
        }
        break;
    case CDX_HUB_EV_PROGRESS: {
        double now = cdx_time_ms();
        if (ui->quiet || !ui->tty || now - ui->t_last < 100)
            break;
        ui->t_last = now;
        bar(ui, ev->file, ev->done, ev->total, false);
        break;
    }
    case CDX_HUB_EV_END:
        if (ui->quiet)
            break;
        if (ui->tty)
            bar(ui, ev->file, ev->total, ev->total, true);
        else
            fprintf(stderr, "  done %s\n", ev->file);
        break;
    case CDX_HUB_EV_KEPT:
        /* only within a download's file list; a model complete in the cache gets one line (CACHED) */
        if (!ui->quiet && ui->planned)
            fprintf(stderr, "  kept %s (already in the cache)\n", ev->file);
        break;
    case CDX_HUB_EV_CACHED:
        if (ui->quiet)
            break;
        cdx_fmt_bytes(ev->total, sz, sizeof sz);
        fprintf(stderr, "caldrix: %s is complete in the cache (%u file%s, %s); nothing downloaded\n", ev->file,
                ev->n_files, ev->n_files == 1 ? "" : "s", sz);
        break;
    }
}

void cli_hub_opts_init(cdx_hub_opts *o, cli_hub_ui *ui, bool quiet)
{
    memset(o, 0, sizeof *o);
    memset(ui, 0, sizeof *ui);
    ui->tty = isatty(2);
    ui->quiet = quiet;
    o->on_event = on_event;
    o->user = ui;
}


int cli_resolve_model(const char *model, bool quiet, const char **path, char **out)
{
    *out = NULL;
    *path = model;
    struct stat st;
    if (stat(model, &st) == 0)
        return 0;
    cli_hub_ui ui;
    cdx_hub_opts ho;
    cdx_err err = {0};
    cli_hub_opts_init(&ho, &ui, quiet);
    if (cdx_hub_resolve(model, &ho, out, &err) < 0) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        return 1;
    }
    *path = *out;
    return 0;
}
