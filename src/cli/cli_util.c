/* Option parsing helpers shared by the subcommands. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int cli_parse_int(const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "caldrix: %s: \"%s\" is not an integer in [%ld, %ld]\n", opt, s ? s : "", lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_float(const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || !*s || *end || errno || isnan(v) || v < lo || v > hi) {
        fprintf(stderr, "caldrix: %s: \"%s\" is not a number in [%g, %g]\n", opt, s ? s : "", lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}
