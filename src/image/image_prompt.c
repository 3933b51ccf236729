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
    if (!cdx_bytes_reserve(&b->s, &b->cap, b->n + k + 1)) {
        b->oom = true;
        return;
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

int cdx_idefics3_expand(const char *text, const cdx_image_tiles *tiles, int n_images, int64_t seq_len, char **out,
                        cdx_err *err)
{
    *out = NULL;
    const char *mk = CDX_IDEFICS3_IMAGE;
    const size_t mk_len = strlen(mk);
    int markers = 0;
    for (const char *p = strstr(text, mk); p; p = strstr(p + mk_len, mk))
        markers++;
    if (markers && markers != n_images)
        return cdx_err_set(err, CDX_EINVAL, "the prompt has %d <image> markers and there are %d images", markers, n_images);
    char **ex = calloc((size_t)(n_images ? n_images : 1), sizeof *ex);
    size_t total = strlen(text) + 1;
    int rc = ex ? CDX_OK : CDX_ENOMEM;
    for (int i = 0; !rc && i < n_images; i++) {
        if (!(ex[i] = cdx_idefics3_prompt_string(tiles[i].rows, tiles[i].cols, seq_len)))
            rc = CDX_ENOMEM;
        else
            total += strlen(ex[i]);
    }
    char *s = rc ? NULL : malloc(total);
    if (!s) {
        for (int i = 0; ex && i < n_images; i++)
            free(ex[i]);
        free(ex);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    size_t n = 0;
    if (!markers) {
        for (int i = 0; i < n_images; i++) {
            memcpy(s + n, ex[i], strlen(ex[i]));
            n += strlen(ex[i]);
        }
        strcpy(s + n, text);
    } else {
        const char *p = text;
        for (int i = 0; i < n_images; i++) {
            const char *q = strstr(p, mk);
            memcpy(s + n, p, (size_t)(q - p));
            n += (size_t)(q - p);
            memcpy(s + n, ex[i], strlen(ex[i]));
            n += strlen(ex[i]);
            p = q + mk_len;
        }
        strcpy(s + n, p);
    }
    for (int i = 0; i < n_images; i++)
        free(ex[i]);
    free(ex);
    *out = s;
    return CDX_OK;
}
