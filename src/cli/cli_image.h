/* Images for run and serve: decoded and preprocessed with the model's processor settings, and
 * the prompt text's <image> markers expanded as the Idefics3 processor writes them. */
#ifndef CDX_CLI_IMAGE_H
#define CDX_CLI_IMAGE_H

#include "caldrix.h"
#include "caldrix/engine.h"
#include "caldrix/image.h"

typedef struct {
    int n;
    cdx_image_tiles *tiles;       /* [n] */
    cdx_request_image *req;       /* [n]: views of tiles[i].pixels, for cdx_request.images */
    int64_t seq_len;              /* image tokens per tile */
} cli_images;

/* Adds one image (its encoded bytes; name for messages) to im. */
int cli_images_add(cli_images *im, const cdx_image_proc *pp, const void *data, size_t n, const char *name, cdx_err *err);
int cli_images_add_file(cli_images *im, const cdx_image_proc *pp, const char *path, cdx_err *err);
void cli_images_free(cli_images *im);
/* text with each "<image>" replaced, in order, by its image's expansion; with no marker, the
 * images come first. The counts must agree. Caller frees. */
int cli_images_expand(const cli_images *im, const char *text, char **out, cdx_err *err);

#endif
