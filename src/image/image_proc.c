/* The Idefics3 image processor (transformers' image_processing_idefics3.py, PIL path) and the
 * Pillow LANCZOS resize it calls (Pillow src/libImaging/Resample.c). Each step is its own
 * function; ../shared/fixtures/hf/INDEX.md ("Preprocessing: the pixel arrays the engine must
 * produce") states them and the fixture checks their bits. */
#include "caldrix/image.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IMAGE_SIZE 4096 /* image_processing_idefics3.MAX_IMAGE_SIZE */
#define PRECISION_BITS (32 - 8 - 2)

/* ---- Pillow's LANCZOS, 8 bits per channel ---- */

static double sinc(double x)
{
    if (x == 0.0)
        return 1.0;
    x = x * M_PI;
    return sin(x) / x;
}

static double lanczos(double x) { return -3.0 <= x && x < 3.0 ? sinc(x) * sinc(x / 3.0) : 0.0; }

/* precompute_coeffs + normalize_coeffs_8bpc over the box (0, in): per output index its first
 * source index, its tap count and ksize fixed-point weights. */
typedef struct {
    int64_t ksize;
    int64_t *bounds;  /* [out][2]: xmin, count */
    int32_t *k;       /* [out][ksize] */
} coeffs;

static int make_coeffs(int64_t in, int64_t out, coeffs *c, cdx_err *err)
{
    const double scale = (double)in / (double)out;
    const double filterscale = scale < 1.0 ? 1.0 : scale;
    const double support = 3.0 * filterscale;
    c->ksize = (int64_t)ceil(support) * 2 + 1;
    c->bounds = malloc((size_t)out * 2 * sizeof *c->bounds);
    c->k = calloc((size_t)(out * c->ksize), sizeof *c->k);
    double *w = malloc((size_t)c->ksize * sizeof *w);
    if (!c->bounds || !c->k || !w) {
        free(w);
        free(c->bounds);
        free(c->k);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory for resize coefficients");
    }
    for (int64_t xx = 0; xx < out; xx++) {
        const double center = ((double)xx + 0.5) * scale, ss = 1.0 / filterscale;
        int64_t xmin = (int64_t)(center - support + 0.5); /* C truncates toward zero */
        if (xmin < 0)
            xmin = 0;
        int64_t xmax = (int64_t)(center + support + 0.5);
        if (xmax > in)
            xmax = in;
        xmax -= xmin;
        double ww = 0.0;
        for (int64_t x = 0; x < xmax; x++) {
            w[x] = lanczos(((double)(x + xmin) - center + 0.5) * ss);
            ww += w[x];
        }
        for (int64_t x = 0; x < xmax; x++) {
            const double v = ww != 0.0 ? w[x] / ww : w[x];
            c->k[xx * c->ksize + x] = v < 0 ? (int32_t)(-0.5 + v * (1 << PRECISION_BITS))
                                            : (int32_t)(0.5 + v * (1 << PRECISION_BITS));
        }
        c->bounds[2 * xx] = xmin;
        c->bounds[2 * xx + 1] = xmax;
    }
    free(w);
    return CDX_OK;
}

static void free_coeffs(coeffs *c)
{
    free(c->bounds);
    free(c->k);
}

static inline uint8_t clip8(int64_t acc)
{
    const int64_t v = acc >> PRECISION_BITS; /* arithmetic shift: floor, as Pillow's clip8 table */
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* One pass: horizontal (axis 1, along x) or vertical (axis 0, along y), HWC u8. */
static int resample_axis(const cdx_image *in, int64_t out_size, int axis, cdx_image *out, cdx_err *err)
{
    const int64_t in_size = axis ? in->w : in->h;
    coeffs c;
    int rc = make_coeffs(in_size, out_size, &c, err);
    if (rc)
        return rc;
    out->w = axis ? out_size : in->w;
    out->h = axis ? in->h : out_size;
    out->rgb = malloc((size_t)(out->w * out->h * 3));
    if (!out->rgb) {
        free_coeffs(&c);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory for a %lld x %lld image", (long long)out->h, (long long)out->w);
    }
    for (int64_t y = 0; y < out->h; y++)
        for (int64_t x = 0; x < out->w; x++) {
            const int64_t o = axis ? x : y;
            const int64_t xmin = c.bounds[2 * o], n = c.bounds[2 * o + 1];
            const int32_t *k = c.k + o * c.ksize;
            int64_t acc[3] = { 1 << (PRECISION_BITS - 1), 1 << (PRECISION_BITS - 1), 1 << (PRECISION_BITS - 1) };
            for (int64_t j = 0; j < n; j++) {
                const uint8_t *p = axis ? in->rgb + (size_t)((y * in->w + xmin + j) * 3)
                                        : in->rgb + (size_t)(((xmin + j) * in->w + x) * 3);
                acc[0] += (int64_t)p[0] * k[j];
                acc[1] += (int64_t)p[1] * k[j];
                acc[2] += (int64_t)p[2] * k[j];
            }
            uint8_t *q = out->rgb + (size_t)((y * out->w + x) * 3);
            q[0] = clip8(acc[0]);
            q[1] = clip8(acc[1]);
            q[2] = clip8(acc[2]);
        }
    free_coeffs(&c);
    return CDX_OK;
}

int cdx_image_resize_lanczos(const cdx_image *in, int64_t out_h, int64_t out_w, cdx_image *out, cdx_err *err)
{
    memset(out, 0, sizeof *out);
    if (out_h < 1 || out_w < 1 || out_h > CDX_IMAGE_MAX_SIDE || out_w > CDX_IMAGE_MAX_SIDE ||
        out_h * out_w > CDX_IMAGE_MAX_PIXELS)
        return cdx_err_set(err, CDX_ERANGE, "resize to %lld x %lld pixels; expected 1..%d per edge", (long long)out_h,
                           (long long)out_w, CDX_IMAGE_MAX_SIDE);
    if (out_h == in->h && out_w == in->w) /* Image.resize: the same size is a copy */
        return cdx_image_crop(in, 0, 0, in->h, in->w, out, err);
    cdx_image tmp = { 0 };
    const cdx_image *src = in;
    int rc;
    if (out_w != in->w) {
        if ((rc = resample_axis(in, out_w, 1, &tmp, err)))
            return rc;
        src = &tmp;
    }
    if (out_h != in->h) {
        rc = resample_axis(src, out_h, 0, out, err);
        cdx_image_free(&tmp);
        return rc;
    }
    *out = tmp;
    return CDX_OK;
}

int cdx_image_crop(const cdx_image *in, int64_t y0, int64_t x0, int64_t h, int64_t w, cdx_image *out, cdx_err *err)
{
    memset(out, 0, sizeof *out);
    if (y0 < 0 || x0 < 0 || h < 1 || w < 1 || y0 + h > in->h || x0 + w > in->w)
        return cdx_err_set(err, CDX_ERANGE, "crop [%lld, %lld) x [%lld, %lld) is outside the %lld x %lld image",
                           (long long)y0, (long long)(y0 + h), (long long)x0, (long long)(x0 + w), (long long)in->h,
                           (long long)in->w);
    out->rgb = malloc((size_t)(h * w * 3));
    if (!out->rgb)
        return cdx_err_set(err, CDX_ENOMEM, "out of memory for a %lld x %lld image", (long long)h, (long long)w);
    out->h = h;
    out->w = w;
    for (int64_t y = 0; y < h; y++)
        memcpy(out->rgb + (size_t)(y * w * 3), in->rgb + (size_t)(((y0 + y) * in->w + x0) * 3), (size_t)(w * 3));
    return CDX_OK;
}

/* ---- sizes ---- */

void cdx_idefics3_resize_size(int64_t h, int64_t w, int64_t L, int64_t *out_h, int64_t *out_w)
{
    /* _resize_output_size_rescale_to_max_len (min_len 1) */
    double aspect = (double)w / (double)h;
    if (w >= h) {
        w = L;
        h = (int64_t)((double)w / aspect);
        if (h % 2)
            h++;
    } else {
        h = L;
        w = (int64_t)((double)h * aspect);
        if (w % 2)
            w++;
    }
    h = h < 1 ? 1 : h;
    w = w < 1 ? 1 : w;
    /* _resize_output_size_scale_below_upper_bound */
    aspect = (double)w / (double)h;
    if (w >= h && w > MAX_IMAGE_SIZE) {
        w = MAX_IMAGE_SIZE;
        h = (int64_t)((double)w / aspect);
    } else if (h > w && h > MAX_IMAGE_SIZE) {
        h = MAX_IMAGE_SIZE;
        w = (int64_t)((double)h * aspect);
    }
    *out_h = h < 1 ? 1 : h;
    *out_w = w < 1 ? 1 : w;
}

static int64_t ceil_mult(double v, int64_t m) { return (int64_t)ceil(v / (double)m) * m; }

void cdx_idefics3_vision_size(int64_t h, int64_t w, int64_t m, int64_t *out_h, int64_t *out_w)
{
    const double aspect = (double)w / (double)h;
    if (w >= h) {
        w = ceil_mult((double)w, m);
        h = (int64_t)((double)w / aspect);
        h = ceil_mult((double)h, m);
    } else {
        h = ceil_mult((double)h, m);
        w = (int64_t)((double)h * aspect);
        w = ceil_mult((double)w, m);
    }
    *out_h = h < m ? m : h;
    *out_w = w < m ? m : w;
}

/* ---- rescale, normalize ---- */

void cdx_image_rescale_normalize(const cdx_image *in, bool do_rescale, double rescale, bool do_normalize,
                                 const float mean[3], const float std[3], float *out)
{
    const size_t plane = (size_t)(in->h * in->w);
    for (size_t i = 0; i < plane; i++)
        for (int c = 0; c < 3; c++) {
            const uint8_t u = in->rgb[3 * i + (size_t)c];
            /* image_transforms.rescale: the product in float64, cast to float32 */
            float v = do_rescale ? (float)((double)u * rescale) : (float)u;
            if (do_normalize) /* image_transforms.normalize: float32 */
                v = (v - mean[c]) / std[c];
            out[(size_t)c * plane + i] = v;
        }
}

/* ---- the settings ---- */

typedef struct {
    const char *file;
    cdx_err *err;
} pctx;

static int bad(pctx *c, const char *key, const json_t *v, const char *expected)
{
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    int rc = cdx_err_set(c->err, CDX_EINVAL, "%s: %s is %.60s; expected %s", c->file, key, s ? s : "?", expected);
    free(s);
    return rc;
}

/* {"longest_edge": N} or N */
static int edge_value(pctx *c, const char *key, const json_t *v, int64_t *out)
{
    const json_t *e = json_is_object(v) ? json_object_get(v, "longest_edge") : v;
    if (!json_is_integer(e) || json_integer_value(e) < 1 || json_integer_value(e) > MAX_IMAGE_SIZE)
        return bad(c, key, v, "{\"longest_edge\": N} with N in 1..4096");
    *out = json_integer_value(e);
    return CDX_OK;
}

static int set_one(pctx *c, cdx_image_proc *p, const char *key, const json_t *v)
{
    static const struct { const char *key; size_t off; } k_bools[] = {
        { "do_resize", offsetof(cdx_image_proc, do_resize) },
        { "do_image_splitting", offsetof(cdx_image_proc, do_image_splitting) },
        { "do_rescale", offsetof(cdx_image_proc, do_rescale) },
        { "do_normalize", offsetof(cdx_image_proc, do_normalize) },
        { "do_convert_rgb", offsetof(cdx_image_proc, do_convert_rgb) },
        { "do_pad", offsetof(cdx_image_proc, do_pad) },
    };
    for (size_t i = 0; i < sizeof k_bools / sizeof k_bools[0]; i++)
        if (!strcmp(key, k_bools[i].key)) {
            if (!json_is_boolean(v))
                return bad(c, key, v, "true or false");
            *(bool *)((char *)p + k_bools[i].off) = json_is_true(v);
            return CDX_OK;
        }
    if (!strcmp(key, "size"))
        return edge_value(c, key, v, &p->longest_edge);
    if (!strcmp(key, "max_image_size"))
        return edge_value(c, key, v, &p->max_image_size);
    if (!strcmp(key, "resample")) {
        if (!json_is_integer(v) || json_integer_value(v) != 1)
            return bad(c, key, v, "1 (LANCZOS, the only filter caldrix implements)");
        p->resample = 1;
        return CDX_OK;
    }
    if (!strcmp(key, "rescale_factor")) {
        if (!json_is_number(v) || !(json_number_value(v) > 0) || json_number_value(v) > 1)
            return bad(c, key, v, "a number in (0, 1]");
        p->rescale_factor = json_number_value(v);
        return CDX_OK;
    }
    if (!strcmp(key, "image_mean") || !strcmp(key, "image_std")) {
        const bool is_std = key[6] == 's';
        float *dst = is_std ? p->std : p->mean;
        if (json_is_number(v)) {
            dst[0] = dst[1] = dst[2] = (float)json_number_value(v);
        } else if (json_is_array(v) && json_array_size(v) == 3) {
            for (int i = 0; i < 3; i++) {
                const json_t *e = json_array_get(v, (size_t)i);
                if (!json_is_number(e))
                    return bad(c, key, v, "a list of 3 numbers");
                dst[i] = (float)json_number_value(e);
            }
        } else
            return bad(c, key, v, "a list of 3 numbers");
        for (int i = 0; i < 3; i++)
            if (!isfinite(dst[i]) || (is_std && !(dst[i] > 0)))
                return bad(c, key, v, is_std ? "3 positive numbers" : "3 finite numbers");
        return CDX_OK;
    }
    if (!strcmp(key, "image_seq_len")) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 65536)
            return bad(c, key, v, "an integer in 1..65536");
        p->image_seq_len = json_integer_value(v);
        return CDX_OK;
    }
    return cdx_err_set(c->err, CDX_EINVAL, "%s: %s is not a setting caldrix knows (do_resize, do_image_splitting, "
                       "do_rescale, do_normalize, rescale_factor, image_mean, image_std, size, max_image_size, resample, "
                       "image_seq_len)", c->file, key);
}

/* Keys of the files that are not settings of the pixels. */
static bool ignored_key(const char *k)
{
    static const char *const k_ign[] = { "image_processor_type", "processor_class", "do_convert_rgb", "do_pad",
                                         "image_seq_len", "chat_template", "feature_extractor_type",
                                         "return_row_col_info", "vision_feature_select_strategy" };
    for (size_t i = 0; i < sizeof k_ign / sizeof k_ign[0]; i++)
        if (!strcmp(k, k_ign[i]))
            return true;
    return false;
}

static int read_json(const char *path, json_t **out, cdx_err *err)
{
    char *text = NULL;
    size_t n = 0;
    int rc = cdx_file_read_all(path, (size_t)1 << 20, &text, &n, err);
    if (rc)
        return rc;
    json_error_t je;
    *out = json_loadb(text, n, 0, &je);
    free(text);
    if (!*out || !json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return cdx_err_set(err, CDX_EFORMAT, "%s: not a JSON object (%s, line %d)", path, je.text, je.line);
    }
    return CDX_OK;
}

int cdx_image_proc_read(const char *dir, cdx_image_proc *p, cdx_err *err)
{
    /* Idefics3ImageProcessor's defaults */
    *p = (cdx_image_proc){ .do_resize = true, .do_image_splitting = true, .do_rescale = true, .do_normalize = true,
                           .do_convert_rgb = true, .do_pad = true, .longest_edge = 4 * 364, .max_image_size = 364,
                           .resample = 1, .rescale_factor = 1.0 / 255, .mean = { 0.5f, 0.5f, 0.5f },
                           .std = { 0.5f, 0.5f, 0.5f }, .image_seq_len = 169 };
    char path[4096];
    json_t *root = NULL;
    int rc;
    snprintf(path, sizeof path, "%s/preprocessor_config.json", dir);
    if ((rc = read_json(path, &root, err)))
        return rc;
    pctx c = { path, err };
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (ignored_key(key) && strcmp(key, "do_convert_rgb") && strcmp(key, "do_pad"))
            continue;
        if ((rc = set_one(&c, p, key, v))) {
            json_decref(root);
            return rc;
        }
    }
    json_decref(root);
    snprintf(path, sizeof path, "%s/processor_config.json", dir);
    if ((rc = read_json(path, &root, err)))
        return rc;
    v = json_object_get(root, "image_seq_len");
    if (v)
        rc = set_one(&c, p, "image_seq_len", v);
    json_decref(root);
    return rc;
}

int cdx_image_proc_set(cdx_image_proc *p, const char *key, const char *text, cdx_err *err)
{
    json_error_t je;
    json_t *v = json_loads(text, JSON_DECODE_ANY, &je);
    if (!v)
        return cdx_err_set(err, CDX_EINVAL, "--image-opt %s=%s: the value is not JSON (%s)", key, text, je.text);
    pctx c = { "--image-opt", err };
    int rc = set_one(&c, p, key, v);
    json_decref(v);
    return rc;
}

/* ---- the whole processor, one image ---- */

void cdx_image_tiles_free(cdx_image_tiles *t)
{
    if (!t)
        return;
    free(t->rgb);
    free(t->pixels);
    memset(t, 0, sizeof *t);
}

int cdx_image_preprocess(const cdx_image_proc *p, const cdx_image *im, cdx_image_tiles *out, cdx_err *err)
{
    memset(out, 0, sizeof *out);
    if (p->resample != 1)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "resample is %d; caldrix implements 1 (LANCZOS)", p->resample);
    const int64_t m = p->max_image_size;
    if (m < 1 || m > MAX_IMAGE_SIZE || p->longest_edge < 1)
        return cdx_err_set(err, CDX_EINVAL, "max_image_size %lld / size %lld out of range", (long long)m,
                           (long long)p->longest_edge);
    cdx_image cur = { 0 }, tmp = { 0 };
    int rc = cdx_image_crop(im, 0, 0, im->h, im->w, &cur, err);
    if (rc)
        return rc;
    if (p->do_resize) {
        int64_t h, w;
        cdx_idefics3_resize_size(cur.h, cur.w, p->longest_edge, &h, &w);
        if ((rc = cdx_image_resize_lanczos(&cur, h, w, &tmp, err)))
            goto out;
        cdx_image_free(&cur);
        cur = tmp;
        tmp = (cdx_image){ 0 };
    }
    int64_t rows = 0, cols = 0;
    if (p->do_image_splitting) {
        int64_t h, w;
        cdx_idefics3_vision_size(cur.h, cur.w, m, &h, &w);
        if ((rc = cdx_image_resize_lanczos(&cur, h, w, &tmp, err)))
            goto out;
        cdx_image_free(&cur);
        cur = tmp;
        tmp = (cdx_image){ 0 };
        if (cur.h > m || cur.w > m) {
            rows = (cur.h + m - 1) / m;
            cols = (cur.w + m - 1) / m;
        }
    }
    const int64_t n_tiles = rows * cols + 1, side = m;
    size_t tile_px = (size_t)(side * side), n_px;
    if (!cdx_mul_size(tile_px, (size_t)n_tiles, &n_px) || n_tiles > 4096) {
        rc = cdx_err_set(err, CDX_ERANGE, "%lld tiles of %lld pixels is too many", (long long)n_tiles, (long long)side);
        goto out;
    }
    out->rgb = malloc(n_px * 3);
    out->pixels = malloc(n_px * 3 * sizeof(float));
    if (!out->rgb || !out->pixels) {
        rc = cdx_err_set(err, CDX_ENOMEM, "out of memory for %lld tiles", (long long)n_tiles);
        goto out;
    }
    out->n_tiles = n_tiles;
    out->side = side;
    out->rows = (int)rows;
    out->cols = (int)cols;
    for (int64_t t = 0; t < n_tiles; t++) {
        cdx_image tile = { 0 };
        if (t < rows * cols) {
            /* split_image: row-major crops of ceil(h / rows) x ceil(w / cols) (= m x m here) */
            const int64_t oh = (cur.h + rows - 1) / rows, ow = (cur.w + cols - 1) / cols;
            const int64_t y0 = (t / cols) * oh, x0 = (t % cols) * ow;
            rc = cdx_image_crop(&cur, y0, x0, oh, ow, &tile, err);
        } else /* the global image (or the only one): resized to m x m */
            rc = cdx_image_resize_lanczos(&cur, m, m, &tile, err);
        if (!rc && (tile.h != side || tile.w != side))
            rc = cdx_err_set(err, CDX_EUNSUPPORTED, "tile %lld is %lld x %lld; caldrix pads no tiles (expected %lld x %lld)",
                             (long long)t, (long long)tile.h, (long long)tile.w, (long long)side, (long long)side);
        if (rc) {
            cdx_image_free(&tile);
            goto out;
        }
        memcpy(out->rgb + (size_t)t * tile_px * 3, tile.rgb, tile_px * 3);
        cdx_image_rescale_normalize(&tile, p->do_rescale, p->rescale_factor, p->do_normalize, p->mean, p->std,
                                    out->pixels + (size_t)t * tile_px * 3);
        cdx_image_free(&tile);
    }
out:
    cdx_image_free(&cur);
    cdx_image_free(&tmp);
    if (rc)
        cdx_image_tiles_free(out);
    return rc;
}
