/* The Idefics3 processor's prompt expansion (processing_idefics3.py: _prompt_split_image,
 * _prompt_single_image, get_image_prompt_string), as INDEX.md ("Model math") states it. */
#include "caldrix/image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cdx_idefics3_prompt_pieces(int rows, int cols, int64_t image_seq_len, void (*fn)(void *ctx, const char *piece),
                                void *ctx)
{
    if (rows > 0 && cols > 0) {
        char rc[48];
        for (int r = 0; r < rows; r++) {
            for (int c = 0; c < cols; c++) {
                snprintf(rc, sizeof rc, "<row_%d_col_%d>", r + 1, c + 1);
                fn(ctx, CDX_IDEFICS3_FAKE);
                fn(ctx, rc);
                for (int64_t i = 0; i < image_seq_len; i++)
                    fn(ctx, CDX_IDEFICS3_IMAGE);
            }
            fn(ctx, r < rows - 1 ? "\n" : "\n\n");
        }
    }
    fn(ctx, CDX_IDEFICS3_FAKE);
    fn(ctx, CDX_IDEFICS3_GLOBAL);
    for (int64_t i = 0; i < image_seq_len; i++)
        fn(ctx, CDX_IDEFICS3_IMAGE);
    fn(ctx, CDX_IDEFICS3_FAKE);
}

typedef struct {
    char *s;
    size_t n, cap;
    bool oom;
} sbuf;

static void join(void *ctx, const char *piece)
{
    sbuf *b = ctx;
    const size_t k = strlen(piece);
    if (b->oom)
        return;
    if (b->n + k + 1 > b->cap) {
        size_t cap = (b->n + k + 1) * 2;
        char *g = realloc(b->s, cap);
        if (!g) {
            b->oom = true;
            return;
        }
        b->s = g;
        b->cap = cap;
    }
    memcpy(b->s + b->n, piece, k + 1);
    b->n += k;
}

char *cdx_idefics3_prompt_string(int rows, int cols, int64_t image_seq_len)
{
    sbuf b = { 0 };
    join(&b, "");
    cdx_idefics3_prompt_pieces(rows, cols, image_seq_len, join, &b);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
