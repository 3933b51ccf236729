/* Search indexes for the grid quantizers (IQ3_XXS, IQ3_S, IQ2_S, IQ1_M). The grids only hold some
 * of the points of a small lattice; a quantizer rounds a group of values to a lattice point and
 * then needs (a) the grid index of that point, if it is on the grid, or (b) the grid points
 * nearest to it. ggml builds the same two tables in iq2xs_init_impl / iq3xs_init_impl; the
 * content is fixed by the grids, so caldrix computes it once, lazily and thread-safely, into
 * static storage (no allocation, nothing to free).
 *
 * A lattice point is coded as levels l_i (3 bits each for IQ3, 2 bits for IQ2/IQ1), position
 * value 2*l_i + 1. neighbours of an off-grid point: the grid entries whose squared distance is
 * among the `nwant` smallest distinct distances, by distance then grid index (ggml's order). */
#include "quant/quant_ref.h"

#include <pthread.h>

/* capacities: the exact neighbour-list totals for these grids (checked when built) */
#define IQ3XXS_NEIGH 22825
#define IQ3S_NEIGH 28317
#define IQ2S_NEIGH 209100
#define IQ1S_NEIGH 1375339

typedef struct {
    cdx_iq_index pub;
    pthread_once_t once;
    const uint32_t *grid32; /* the grid: one of these two */
    const uint64_t *grid64;
    int grid_size, ncoord, bits, map_size, nwant, capacity;
    int32_t *map;
    uint16_t *neighbours;
    uint8_t *pos;
} iq_index_impl;

static uint8_t g_pos_iq3xxs[256 * 4], g_pos_iq3s[512 * 4], g_pos_iq2s[1024 * 8], g_pos_iq1s[2048 * 8];
static int32_t g_map_iq3xxs[4096], g_map_iq3s[4096], g_map_iq2s[43692], g_map_iq1s[43692];
static uint16_t g_nb_iq3xxs[IQ3XXS_NEIGH], g_nb_iq3s[IQ3S_NEIGH], g_nb_iq2s[IQ2S_NEIGH], g_nb_iq1s[IQ1S_NEIGH];

/* Grid byte value -> level. IQ3_XXS stores magnitudes 4, 12, ..., 52, 62; IQ3_S 1, 3, ..., 15;
 * the IQ2 grids 8, 25, 43; IQ1_S -1, 0, +1 (as int8). */
static int level_iq3xxs(uint8_t v) { return v == 62 ? 7 : (v - 4) / 8; }
static int level_iq3s(uint8_t v) { return (v - 1) / 2; }
static int level_iq2(uint8_t v) { return v == 8 ? 0 : v == 25 ? 1 : 2; }
static int level_iq1(uint8_t v) { return (int8_t)v + 1; }

static void build(iq_index_impl *ix, int (*level)(uint8_t))
{
    const int n = ix->grid_size, nc = ix->ncoord, bits = ix->bits;
    for (int k = 0; k < n; k++) {
        const uint64_t g = ix->grid32 ? ix->grid32[k] : ix->grid64[k];
        for (int i = 0; i < nc; i++)
            ix->pos[k * nc + i] = (uint8_t)(2 * level(cdx_grid8(g, i)) + 1);
    }
    for (int i = 0; i < ix->map_size; i++)
        ix->map[i] = -1;
    for (int k = 0; k < n; k++) {
        int u = 0;
        for (int i = 0; i < nc; i++)
            u |= ((ix->pos[k * nc + i] - 1) / 2) << (bits * i);
        ix->map[u] = k;
    }
    int d2[2048], used = 0;
    for (int u = 0; u < ix->map_size; u++) {
        if (ix->map[u] >= 0)
            continue;
        int p[8];
        for (int i = 0; i < nc; i++)
            p[i] = 2 * ((u >> (bits * i)) & ((1 << bits) - 1)) + 1;
        for (int k = 0; k < n; k++) {
            int s = 0;
            for (int i = 0; i < nc; i++) {
                int d = ix->pos[k * nc + i] - p[i];
                s += d * d;
            }
            d2[k] = s;
        }
        /* the nwant smallest distinct distances */
        int levels[8], nl = 0, last = -1;
        for (; nl < ix->nwant; nl++) {
            int best = 1 << 30;
            for (int k = 0; k < n; k++)
                if (d2[k] > last && d2[k] < best)
                    best = d2[k];
            if (best == 1 << 30)
                break;
            levels[nl] = last = best;
        }
        int start = used;
        if (used + 1 > ix->capacity)
            goto overflow;
        ix->neighbours[used++] = 0;
        for (int li = 0; li < nl; li++)
            for (int k = 0; k < n; k++)
                if (d2[k] == levels[li]) {
                    if (used + 1 > ix->capacity)
                        goto overflow;
                    ix->neighbours[used++] = (uint16_t)k;
                }
        ix->neighbours[start] = (uint16_t)(used - start - 1);
        ix->map[u] = -(start + 1);
    }
    if (used != ix->capacity) /* the capacities above are exact; anything else is a bug */
        goto overflow;
    ix->pub.map = ix->map;
    ix->pub.neighbours = ix->neighbours;
    ix->pub.pos = ix->pos;
    return;
overflow:
    ix->pub.map = NULL;
}

#define IQ_INDEX(name, g32, g64, gs, nc, bits, msize, nwant, posarr, maparr, nbarr, cap)                \
    static iq_index_impl name = { { NULL, NULL, NULL }, PTHREAD_ONCE_INIT, g32, g64, gs, nc, bits, msize, \
                                  nwant, cap, maparr, nbarr, posarr }

/* nwant as ggml: 2 for the 256-grid, 3 for IQ3_S's 512, 1 for IQ2_S, 3 for IQ1_S/IQ1_M */
IQ_INDEX(g_iq3xxs, cdx_iq3xxs_grid, NULL, 256, 4, 3, 4096, 2, g_pos_iq3xxs, g_map_iq3xxs, g_nb_iq3xxs, IQ3XXS_NEIGH);
IQ_INDEX(g_iq3s, cdx_iq3s_grid, NULL, 512, 4, 3, 4096, 3, g_pos_iq3s, g_map_iq3s, g_nb_iq3s, IQ3S_NEIGH);
IQ_INDEX(g_iq2s, NULL, cdx_iq2s_grid, 1024, 8, 2, 43692, 1, g_pos_iq2s, g_map_iq2s, g_nb_iq2s, IQ2S_NEIGH);
IQ_INDEX(g_iq1s, NULL, cdx_iq1s_grid, 2048, 8, 2, 43692, 3, g_pos_iq1s, g_map_iq1s, g_nb_iq1s, IQ1S_NEIGH);

static void init_iq3xxs(void) { build(&g_iq3xxs, level_iq3xxs); }
static void init_iq3s(void) { build(&g_iq3s, level_iq3s); }
static void init_iq2s(void) { build(&g_iq2s, level_iq2); }
static void init_iq1s(void) { build(&g_iq1s, level_iq1); }

static const cdx_iq_index *get(iq_index_impl *ix, void (*init)(void))
{
    pthread_once(&ix->once, init);
    return ix->pub.map ? &ix->pub : NULL;
}

const cdx_iq_index *cdx_iq3xxs_index(void) { return get(&g_iq3xxs, init_iq3xxs); }
const cdx_iq_index *cdx_iq3s_index(void) { return get(&g_iq3s, init_iq3s); }
const cdx_iq_index *cdx_iq2s_index(void) { return get(&g_iq2s, init_iq2s); }
const cdx_iq_index *cdx_iq1s_index(void) { return get(&g_iq1s, init_iq1s); }
