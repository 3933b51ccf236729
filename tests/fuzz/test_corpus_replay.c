/* Replays each fuzzer's corpus: every file of fuzz/corpus/NAME/ runs once through the entry point of
 * fuzz/fuzz_NAME.c (the same function, compiled in here under another name). These are the inputs
 * the fuzzers kept and the regression input of each bug they found; this is not fuzzing (no new
 * inputs), so it is quick, and it runs in every `make test` and under ASan+UBSan in
 * `make SAN=1 test`, where undefined behaviour stops the run. `make fuzz-replay` runs the same
 * files through the clang/libFuzzer builds (clang's UBSan checks more, e.g. an offset applied to a
 * null pointer). A crash, a trap in a target or a sanitizer report ends the process: the file it
 * was on is named on stderr first. */
#include "caldrix.h"
#include "test.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#define LLVMFuzzerTestOneInput fuzz_gguf_one
#include "../../fuzz/fuzz_gguf.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_safetensors_one
#include "../../fuzz/fuzz_safetensors.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_tokenizer_json_one
#include "../../fuzz/fuzz_tokenizer_json.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_template_one
#include "../../fuzz/fuzz_template.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_image_one
#include "../../fuzz/fuzz_image.c"
#undef LLVMFuzzerTestOneInput

/* One row per fuzz/fuzz_*.c; the last case checks that no target is missing here. */
static const struct {
    const char *name; /* fuzz/fuzz_NAME.c, fuzz/corpus/NAME/ */
    int (*one)(const uint8_t *, size_t);
} k_targets[] = {
    { "gguf", fuzz_gguf_one },
    { "safetensors", fuzz_safetensors_one },
    { "tokenizer_json", fuzz_tokenizer_json_one },
    { "template", fuzz_template_one },
    { "image", fuzz_image_one },
};

#define CORPUS_MAX_FILE (1u << 20)

/* ---- naming the file a crash happened on ---- */

static char g_current[512]; /* the file being replayed; empty between files */

static void say_current(void)
{
    static const char pre[] = "corpus replay: died on ";
    if (!g_current[0])
        return;
    (void)!write(2, pre, sizeof pre - 1);
    (void)!write(2, g_current, strlen(g_current));
    (void)!write(2, "\n", 1);
}

static void on_signal(int sig)
{
    say_current();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* The sanitizers' runtimes call this before they end the process (weak: absent without them). */
extern void __sanitizer_set_death_callback(void (*cb)(void)) __attribute__((weak));

static void install_crash_naming(void)
{
    /* A trap (SIGILL) and abort are not reported by the sanitizers; SEGV and friends are, and
     * their handlers stay in place when the runtime is there. */
    signal(SIGILL, on_signal);
    signal(SIGABRT, on_signal);
    if (__sanitizer_set_death_callback) {
        __sanitizer_set_death_callback(say_current);
    } else {
        signal(SIGSEGV, on_signal);
        signal(SIGBUS, on_signal);
        signal(SIGFPE, on_signal);
    }
}

/* ---- the replay ---- */

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Runs every regular file of dir through one; returns the number of files, -1 when dir cannot be read. */
static int replay_dir(const char *dir, int (*one)(const uint8_t *, size_t))
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **p = realloc(names, cap * sizeof *p);
            if (!p)
                abort();
            names = p;
        }
        names[n++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        snprintf(g_current, sizeof g_current, "%s/%s", dir, names[i]);
        free(names[i]);
        char *bytes;
        size_t len;
        cdx_err e = {0};
        if (cdx_file_read_all(g_current, CORPUS_MAX_FILE, &bytes, &len, &e) != CDX_OK) {
            CHECKF(0, "%s", e.msg); /* a folder or a file over 1 MiB has no place in a corpus */
            continue;
        }
        /* an exact-size copy, so ASan sees a read past the end as libFuzzer's runs would */
        uint8_t *exact = malloc(len ? len : 1);
        memcpy(exact, bytes, len);
        free(bytes);
        CHECKF(one(exact, len) == 0, "%s: the target returned non-zero", g_current);
        free(exact);
        count++;
    }
    g_current[0] = 0;
    free(names);
    return count;
}

static size_t g_target;

static void corpus_replays(void)
{
    char dir[256];
    snprintf(dir, sizeof dir, "fuzz/corpus/%s", k_targets[g_target].name);
    int n = replay_dir(dir, k_targets[g_target].one);
    CHECKF(n > 0, "%s: %s", dir, n < 0 ? "cannot be read" : "holds no file");
    printf("  %s: %d files\n", dir, n);
}

static void every_fuzz_target_has_a_row(void)
{
    DIR *d = opendir("fuzz");
    REQUIRE(d);
    struct dirent *de;
    int n_src = 0;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (strncmp(de->d_name, "fuzz_", 5) || len < 7 || strcmp(de->d_name + len - 2, ".c"))
            continue;
        n_src++;
        bool found = false;
        for (size_t i = 0; i < sizeof k_targets / sizeof *k_targets; i++)
            found |= strlen(k_targets[i].name) == len - 7 && !strncmp(k_targets[i].name, de->d_name + 5, len - 7);
        CHECKF(found, "fuzz/%s has no row in this replay", de->d_name);
    }
    closedir(d);
    CHECK(n_src == (int)(sizeof k_targets / sizeof *k_targets));
}

int main(void)
{
    install_crash_naming();
    char name[128];
    for (g_target = 0; g_target < sizeof k_targets / sizeof *k_targets; g_target++) {
        snprintf(name, sizeof name, "every file of fuzz/corpus/%s runs through fuzz_%s's entry point",
                 k_targets[g_target].name, k_targets[g_target].name);
        RUN(name, corpus_replays);
    }
    RUN("every fuzz/fuzz_*.c target is replayed here", every_fuzz_target_has_a_row);
    return t_done("corpus_replay");
}
