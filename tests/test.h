/* A small test harness: one binary per file, cases named like sentences.
 * Each binary ends with "<suite>: N passed, N failed"; tests/run sums them. */
#ifndef CDX_TEST_H
#define CDX_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_passed, t_failed, t_case_failed;
static const char *t_case;

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "  FAIL %s: %s:%d: %s\n", t_case, __FILE__, __LINE__, #cond);   \
            t_case_failed = 1;                                                               \
        }                                                                                    \
    } while (0)

#define CHECKF(cond, ...)                                                                    \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "  FAIL %s: %s:%d: %s: ", t_case, __FILE__, __LINE__, #cond);   \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fputc('\n', stderr);                                                             \
            t_case_failed = 1;                                                               \
        }                                                                                    \
    } while (0)

/* Stops the current case (use for preconditions whose failure makes the rest meaningless). */
#define REQUIRE(cond)                                                                        \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "  FAIL %s: %s:%d: required %s\n", t_case, __FILE__, __LINE__, #cond); \
            t_case_failed = 1;                                                               \
            return;                                                                          \
        }                                                                                    \
    } while (0)

#define CHECK_NEAR(a, b, tol) CHECKF(fabs((double)(a) - (double)(b)) <= (tol), "%.9g vs %.9g (tol %g)", \
                                     (double)(a), (double)(b), (double)(tol))

static inline void t_run(const char *name, void (*fn)(void))
{
    t_case = name;
    t_case_failed = 0;
    fn();
    if (t_case_failed) {
        t_failed++;
        printf("not ok - %s\n", name);
    } else {
        t_passed++;
        printf("ok - %s\n", name);
    }
    fflush(stdout);
}

#define RUN(name, fn) t_run(name, fn)

/* A kernel set this CPU lacks is skipped out loud: named once per binary, and counted in the
 * result line (", N skipped"). */
static char t_skipped_isas[128];
static int t_skipped;
static inline void t_skip_isa(const char *isa)
{
    char key[34];
    snprintf(key, sizeof key, " %s ", isa);
    if (strstr(t_skipped_isas, key))
        return;
    if (strlen(t_skipped_isas) + strlen(key) < sizeof t_skipped_isas)
        strcat(t_skipped_isas, key);
    t_skipped++;
    printf("skip - the %s kernel set: this CPU lacks it\n", isa);
}

static inline int t_done(const char *suite)
{
    if (t_skipped)
        printf("%s: %d passed, %d failed, %d skipped\n", suite, t_passed, t_failed, t_skipped);
    else
        printf("%s: %d passed, %d failed\n", suite, t_passed, t_failed);
    return t_failed ? 1 : 0;
}

/* Path to the shared reference folder, relative to the repo root (tests run from there). */
#define SHARED "../shared"

#endif
