/* The passes over bit sets of n_vocab bits that count them (a mask's last pass, a class run's count
 * of the tokens it would walk): with the popcnt instruction where the CPU has it, found at run time
 * (the build targets the x86-64 baseline, where popcount32 is a dozen instructions a word), else in
 * plain C. */
#include "text/grammar_match_int.h"

/* A mask's last pass: only usable ids, the end of generation where the grammar is complete (eog not
 * NULL); the count of allowed ids. Every mask pays it. */
static int64_t finish_c(uint32_t *bits, const uint32_t *usable, const uint32_t *eog, size_t nw)
{
    int64_t count = 0;
    for (size_t w = 0; w < nw; w++) {
        bits[w] &= usable[w];
        if (eog)
            bits[w] |= eog[w];
        count += popcount32(bits[w]);
    }
    return count;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("popcnt"))) static int64_t finish_popcnt(uint32_t *bits, const uint32_t *usable,
                                                               const uint32_t *eog, size_t nw)
{
    int64_t count = 0;
    for (size_t w = 0; w < nw; w++) {
        bits[w] &= usable[w];
        if (eog)
            bits[w] |= eog[w];
        count += __builtin_popcount(bits[w]);
    }
    return count;
}
#endif

/* (grammar_match_int.h) */
int64_t gr_mask_finish(uint32_t *bits, const uint32_t *usable, const uint32_t *eog, size_t nw)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("popcnt"))
        return finish_popcnt(bits, usable, eog, nw);
#endif
    return finish_c(bits, usable, eog, nw);
}

/* k &= ~f, and the count of k's bits (a class run's tokens to walk). */
static int64_t k_minus_c(uint32_t *k, const uint32_t *f, size_t nw)
{
    int64_t n = 0;
    for (size_t w = 0; w < nw; w++) {
        k[w] &= ~f[w];
        n += popcount32(k[w]);
    }
    return n;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("popcnt"))) static int64_t k_minus_popcnt(uint32_t *k, const uint32_t *f, size_t nw)
{
    int64_t n = 0;
    for (size_t w = 0; w < nw; w++) {
        k[w] &= ~f[w];
        n += __builtin_popcount(k[w]);
    }
    return n;
}
#endif

/* (grammar_match_int.h) */
int64_t gr_and_not_count(uint32_t *k, const uint32_t *f, size_t nw)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("popcnt"))
        return k_minus_popcnt(k, f, nw);
#endif
    return k_minus_c(k, f, nw);
}
