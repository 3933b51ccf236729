/* caldrix image layer: PNG / JPEG decoding to 8-bit RGB and the Idefics3 (SmolVLM) image
 * processor, each step a function of its own.
 *
 *   cdx_image im;           cdx_image_load("cat.png", &im, &err);
 *   cdx_image_proc pp;      cdx_image_proc_read("path/to/checkpoint", &pp, &err);
 *   cdx_image_tiles t;      cdx_image_preprocess(&pp, &im, &t, &err);   // t.pixels: [n][3][side][side]
 *   ... the vision tower reads t.pixels ...
 *   cdx_image_tiles_free(&t); cdx_image_free(&im);
 *
 * The steps follow transformers' Idefics3ImageProcessor (the PIL path) and Pillow's Resample.c;
 * ../shared/fixtures/hf/INDEX.md ("idefics3") states each one. Every size read from a file is
 * checked against CDX_IMAGE_MAX_SIDE / CDX_IMAGE_MAX_PIXELS before any memory is sized from it.
 * Nothing here keeps state: every function is thread-safe on distinct outputs.
 */
#ifndef CALDRIX_IMAGE_H
#define CALDRIX_IMAGE_H

#include "caldrix/base.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CDX_IMAGE_MAX_SIDE 16384              /* pixels per edge of a decoded image */
#define CDX_IMAGE_MAX_PIXELS ((int64_t)1 << 26) /* 67 M pixels (192 MiB of RGB) */
#define CDX_IMAGE_MAX_FILE_BYTES ((size_t)64 << 20)

/* An 8-bit RGB image: rgb[(y * w + x) * 3 + c]. Owned; free with cdx_image_free. */
typedef struct cdx_image {
    int64_t w, h;
    uint8_t *rgb;
} cdx_image;

/* Decodes a PNG (8-bit gray, gray+alpha, RGB, RGBA or palette; not animated) or a baseline /
 * progressive JPEG (gray, YCbCr or RGB; not CMYK/YCCK) from memory. Alpha is composited over
 * white, as transformers' convert_to_rgb does. name is used in messages. A truncated, empty,
 * zero-sized, oversized, 16-bit, animated or CMYK image is refused (CDX_EFORMAT or
 * CDX_EUNSUPPORTED) before any pixel memory is allocated. */
CDX_API int cdx_image_decode(const void *data, size_t n, const char *name, cdx_image *out, cdx_err *err);
/* The same from a file (at most CDX_IMAGE_MAX_FILE_BYTES). */
CDX_API int cdx_image_load(const char *path, cdx_image *out, cdx_err *err);
CDX_API void cdx_image_free(cdx_image *im); /* NULL or empty: no-op */

/* ---- the processor's steps ---- */

/* Pillow's Image.resize(..., LANCZOS) for 8-bit RGB: horizontal pass first (when the width
 * changes) into 8 bits, then the vertical pass; an unchanged size is a copy. Bit-exact with
 * Pillow's Resample.c (fixed point, 22 fraction bits). out_h, out_w in 1..CDX_IMAGE_MAX_SIDE. */
CDX_API int cdx_image_resize_lanczos(const cdx_image *in, int64_t out_h, int64_t out_w, cdx_image *out, cdx_err *err);
/* A copy of the rectangle [y0, y0+h) x [x0, x0+w), which must lie inside in. */
CDX_API int cdx_image_crop(const cdx_image *in, int64_t y0, int64_t x0, int64_t h, int64_t w, cdx_image *out,
                           cdx_err *err);
/* get_resize_output_image_size: the longest edge becomes longest_edge (up or down), the other
 * by int() of the aspect ratio rounded up to even; then both capped at 4096. */
CDX_API void cdx_idefics3_resize_size(int64_t h, int64_t w, int64_t longest_edge, int64_t *out_h, int64_t *out_w);
/* resize_for_vision_encoder's size: both edges up to multiples of m (aspect via int()). */
CDX_API void cdx_idefics3_vision_size(int64_t h, int64_t w, int64_t m, int64_t *out_h, int64_t *out_w);
/* rescale then normalize, HWC u8 -> CHW f32: v = f32(f32(u8 * rescale, in double) - mean) / std
 * (each step only when asked, as the processor's do_rescale / do_normalize). */
CDX_API void cdx_image_rescale_normalize(const cdx_image *in, bool do_rescale, double rescale, bool do_normalize,
                                         const float mean[3], const float std[3], float *out);

/* preprocessor_config.json + processor_config.json of an Idefics3 checkpoint. */
typedef struct cdx_image_proc {
    bool do_resize, do_image_splitting, do_rescale, do_normalize, do_convert_rgb, do_pad;
    int64_t longest_edge;    /* size.longest_edge */
    int64_t max_image_size;  /* max_image_size.longest_edge: the tile side */
    int resample;            /* PIL filter id; only 1 (LANCZOS) is implemented */
    double rescale_factor;
    float mean[3], std[3];
    int64_t image_seq_len;   /* processor_config.json: image tokens per tile */
} cdx_image_proc;

/* dir: the checkpoint folder. Both files are required (a vision model's processor settings);
 * values are checked for type and range, each error names the file, the field and the value. */
CDX_API int cdx_image_proc_read(const char *dir, cdx_image_proc *out, cdx_err *err);
/* Overrides one setting with a JSON value (--image-opt KEY=JSON): do_resize, do_image_splitting,
 * do_rescale, do_normalize, rescale_factor, image_mean, image_std, size ({"longest_edge":N} or N),
 * max_image_size (likewise), resample, image_seq_len. */
CDX_API int cdx_image_proc_set(cdx_image_proc *p, const char *key, const char *json, cdx_err *err);

/* One image's tiles in processor order: rows x cols crops (row-major), then the global image;
 * rows = cols = 0 when the image is a single tile. */
typedef struct cdx_image_tiles {
    int64_t n_tiles, side;
    int rows, cols;
    uint8_t *rgb;            /* [n_tiles][side][side][3]: the tiles before rescaling */
    float *pixels;           /* [n_tiles][3][side][side]: pixel_values */
} cdx_image_tiles;

CDX_API int cdx_image_preprocess(const cdx_image_proc *p, const cdx_image *im, cdx_image_tiles *out, cdx_err *err);
CDX_API void cdx_image_tiles_free(cdx_image_tiles *t); /* NULL or empty: no-op */

/* ---- the prompt (processing_idefics3.py) ---- */

#define CDX_IDEFICS3_IMAGE "<image>"
#define CDX_IDEFICS3_FAKE "<fake_token_around_image>"
#define CDX_IDEFICS3_GLOBAL "<global-img>"

/* get_image_prompt_string as pieces, in order: special-token strings ("<fake_token_around_image>",
 * "<row_R_col_C>", "<global-img>", "<image>") and the text chunks between them ("\n" after each tile
 * row but the last, "\n\n" for the last row's and the one before the global image, which a
 * tokenizer sees as one piece). rows = cols = 0: a single tile. fn is called once per piece. */
CDX_API void cdx_idefics3_prompt_pieces(int rows, int cols, int64_t image_seq_len,
                                        void (*fn)(void *ctx, const char *piece), void *ctx);
/* The same pieces joined: the text that stands for one image. Owned by the caller (free);
 * NULL when out of memory. */
CDX_API char *cdx_idefics3_prompt_string(int rows, int cols, int64_t image_seq_len);
/* Idefics3Processor.__call__ on text: each "<image>" in text is replaced, in order, by the
 * expansion of the matching image's grid (tiles[i].rows / cols); text without a marker gets the
 * images first. The marker count must equal n_images (CDX_EINVAL naming both). *out: caller frees. */
CDX_API int cdx_idefics3_expand(const char *text, const cdx_image_tiles *tiles, int n_images, int64_t seq_len,
                                char **out, cdx_err *err);

#ifdef __cplusplus
}
#endif
#endif
