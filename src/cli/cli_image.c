/* Images for run and serve (see cli_image.h). */
#include "cli_image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_images_add(cli_images *im, const cdx_image_proc *pp, const void *data, size_t n, const char *name, cdx_err *err)
{
    cdx_image img;
    int rc = cdx_image_decode(data, n, name, &img, err);
    if (rc)
        return rc;
    cdx_image_tiles *t = realloc(im->tiles, (size_t)(im->n + 1) * sizeof *t);
    if (t)
        im->tiles = t;
    cdx_request_image *r = t ? realloc(im->req, (size_t)(im->n + 1) * sizeof *r) : NULL;
    if (r)
        im->req = r;
    if (!t || !r) {
        cdx_image_free(&img);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    rc = cdx_image_preprocess(pp, &img, &im->tiles[im->n], err);
    cdx_image_free(&img);
    if (rc)
        return cdx_err_prefix(err, "%s", name);
    im->req[im->n] = (cdx_request_image){ .pixels = im->tiles[im->n].pixels, .n_tiles = im->tiles[im->n].n_tiles };
    im->n++;
    im->seq_len = pp->image_seq_len;
    return CDX_OK;
}

int cli_images_add_file(cli_images *im, const cdx_image_proc *pp, const char *path, cdx_err *err)
{
    char *data = NULL;
    size_t n = 0;
    int rc = cdx_file_read_all(path, CDX_IMAGE_MAX_FILE_BYTES, &data, &n, err);
    if (!rc)
        rc = cli_images_add(im, pp, data, n, path, err);
    free(data);
    return rc;
}

void cli_images_free(cli_images *im)
{
    for (int i = 0; i < im->n; i++)
        cdx_image_tiles_free(&im->tiles[i]);
    free(im->tiles);
    free(im->req);
    memset(im, 0, sizeof *im);
}

int cli_images_expand(const cli_images *im, const char *text, char **out, cdx_err *err)
{
    return cdx_idefics3_expand(text, im->tiles, im->n, im->seq_len, out, err);
}
