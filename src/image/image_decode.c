/* PNG (libpng) and JPEG (libjpeg-turbo) to 8-bit RGB. The PNG chunk list and the JPEG header are
 * checked before the decoders size anything from them: dimensions against CDX_IMAGE_MAX_SIDE and
 * CDX_IMAGE_MAX_PIXELS, bit depth and colour type against what is converted here, and an APNG's
 * acTL chunk (libpng would silently decode only the default image) is refused. */
#include "caldrix/image.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h> /* after stdio.h: it uses FILE */
#include <png.h>

void cdx_image_free(cdx_image *im)
{
    if (!im)
        return;
    free(im->rgb);
    memset(im, 0, sizeof *im);
}

static int check_dims(const char *name, const char *kind, int64_t w, int64_t h, cdx_err *err)
{
    if (w <= 0 || h <= 0)
        return cdx_err_set(err, CDX_EFORMAT, "%s: the %s header says %lld x %lld pixels; an image needs at least one",
                           name, kind, (long long)w, (long long)h);
    if (w > CDX_IMAGE_MAX_SIDE || h > CDX_IMAGE_MAX_SIDE || w * h > CDX_IMAGE_MAX_PIXELS)
        return cdx_err_set(err, CDX_ERANGE, "%s: the %s header says %lld x %lld pixels; caldrix takes at most %d per "
                           "edge and %lld in all", name, kind, (long long)w, (long long)h, CDX_IMAGE_MAX_SIDE,
                           (long long)CDX_IMAGE_MAX_PIXELS);
    return CDX_OK;
}

/* transformers' convert_to_rgb: RGBA over an opaque white background with Pillow's
 * alpha_composite (AlphaComposite.c: 7 extra bits, divisions by 255 rounded by shifts). */
#define SHIFTFORDIV255(a) ((((a) >> 8) + (a)) >> 8)
static void over_white(const uint8_t *rgba, uint8_t *rgb, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const uint32_t a = rgba[4 * i + 3];
        if (a == 0) {
            rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = 255;
            continue;
        }
        const uint32_t blend = 255 * (255 - a), outa255 = a * 255 + blend;
        const uint32_t coef1 = a * 255 * 255 * (1u << 7) / outa255, coef2 = 255 * (1u << 7) - coef1;
        for (int c = 0; c < 3; c++) {
            const uint32_t t = rgba[4 * i + c] * coef1 + 255 * coef2;
            rgb[3 * i + c] = (uint8_t)(SHIFTFORDIV255(t + (0x80u << 7)) >> 7);
        }
    }
}

/* ---- PNG ---- */

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* Walks the chunks up to the first IDAT: IHDR's fields, and whether the file is animated. */
static int png_precheck(const uint8_t *d, size_t n, const char *name, cdx_err *err)
{
    size_t off = 8;
    bool ihdr = false;
    for (;;) {
        if (n - off < 8)
            return cdx_err_set(err, CDX_EFORMAT, "%s: the PNG file ends after %zu bytes, before its image data "
                               "(truncated)", name, n);
        const uint32_t len = be32(d + off);
        const uint8_t *type = d + off + 4;
        if (len > 0x7fffffffu || n - off - 8 < (size_t)len + 4)
            return cdx_err_set(err, CDX_EFORMAT, "%s: PNG chunk \"%.4s\" at byte %zu says %u bytes; the file has %zu "
                               "left (truncated)", name, (const char *)type, off, len, n - off - 8);
        const uint8_t *body = d + off + 8;
        if (!ihdr) {
            if (memcmp(type, "IHDR", 4) || len != 13)
                return cdx_err_set(err, CDX_EFORMAT, "%s: the first PNG chunk is \"%.4s\" of %u bytes; expected IHDR "
                                   "of 13", name, (const char *)type, len);
            const int64_t w = be32(body), h = be32(body + 4);
            const int depth = body[8], ct = body[9];
            int rc = check_dims(name, "PNG", w, h, err);
            if (rc)
                return rc;
            if (depth == 16)
                return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: the PNG has 16 bits per sample; caldrix reads 8-bit "
                                   "images (convert it to 8 bits)", name);
            const bool ok = (ct == 0 && (depth == 1 || depth == 2 || depth == 4 || depth == 8)) ||
                            (ct == 3 && (depth == 1 || depth == 2 || depth == 4 || depth == 8)) ||
                            ((ct == 2 || ct == 4 || ct == 6) && depth == 8);
            if (!ok)
                return cdx_err_set(err, CDX_EFORMAT, "%s: PNG colour type %d with bit depth %d is not a valid pair",
                                   name, ct, depth);
            ihdr = true;
        } else if (!memcmp(type, "acTL", 4)) {
            return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: the PNG is animated (APNG acTL chunk); caldrix takes still "
                               "images", name);
        } else if (!memcmp(type, "IDAT", 4)) {
            return CDX_OK;
        } else if (!memcmp(type, "IEND", 4)) {
            return cdx_err_set(err, CDX_EFORMAT, "%s: the PNG has no image data (IEND before any IDAT)", name);
        }
        off += 12 + (size_t)len;
    }
}

typedef struct {
    const uint8_t *d;
    size_t n, off;
    char msg[160];
    jmp_buf jb;
} png_src;

static void png_read_mem(png_structp p, png_bytep out, png_size_t len)
{
    png_src *s = png_get_io_ptr(p);
    if (s->n - s->off < len)
        png_error(p, "the file ends inside the image data (truncated)");
    memcpy(out, s->d + s->off, len);
    s->off += len;
}

static void png_on_error(png_structp p, png_const_charp msg)
{
    png_src *s = png_get_error_ptr(p);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    longjmp(s->jb, 1);
}

static void png_on_warning(png_structp p, png_const_charp msg) { (void)p; (void)msg; /* the library never prints */ }

static int decode_png(const uint8_t *d, size_t n, const char *name, cdx_image *out, cdx_err *err)
{
    const int pre = png_precheck(d, n, name, err);
    if (pre)
        return pre;
    volatile int rc = CDX_OK; /* set between setjmp and longjmp */
    png_src s = { .d = d, .n = n };
    png_structp p = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s, png_on_error, png_on_warning);
    png_infop info = p ? png_create_info_struct(p) : NULL;
    /* volatile: written before longjmp can return here */
    uint8_t *volatile buf = NULL;
    png_bytep *volatile rows = NULL;
    if (!p || !info) {
        png_destroy_read_struct(p ? &p : NULL, NULL, NULL);
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    }
    if (setjmp(s.jb)) {
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: PNG: %s", name, s.msg);
        goto out;
    }
    png_set_user_limits(p, CDX_IMAGE_MAX_SIDE, CDX_IMAGE_MAX_SIDE);
    png_set_read_fn(p, &s, png_read_mem);
    png_read_info(p, info);
    const int64_t w = png_get_image_width(p, info), h = png_get_image_height(p, info);
    /* palette -> RGB, gray < 8 bits -> 8, tRNS -> alpha; except an RGB image's tRNS colour key,
     * which Pillow keeps aside (the image opens as "RGB") and convert_to_rgb then ignores. */
    if (png_get_color_type(p, info) == PNG_COLOR_TYPE_RGB) {
        if (png_get_valid(p, info, PNG_INFO_tRNS))
            png_set_strip_alpha(p);
    } else
        png_set_expand(p);
    png_set_gray_to_rgb(p);
    png_set_interlace_handling(p);
    png_read_update_info(p, info);
    const int ch = png_get_channels(p, info);
    if ((ch != 3 && ch != 4) || png_get_bit_depth(p, info) != 8 || png_get_rowbytes(p, info) != (size_t)(w * ch)) {
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: PNG decodes to %d channels of %d bits; expected 8-bit RGB or RGBA", name,
                         ch, png_get_bit_depth(p, info));
        goto out;
    }
    buf = malloc((size_t)(w * h * ch));
    rows = malloc((size_t)h * sizeof *rows);
    if (!buf || !rows) {
        rc = cdx_err_set(err, CDX_ENOMEM, "%s: out of memory for %lld x %lld pixels", name, (long long)w, (long long)h);
        goto out;
    }
    for (int64_t y = 0; y < h; y++)
        rows[y] = buf + (size_t)(y * w * ch);
    png_read_image(p, rows);
    if (ch == 4) {
        uint8_t *rgb = malloc((size_t)(w * h * 3));
        if (!rgb) {
            rc = cdx_err_set(err, CDX_ENOMEM, "%s: out of memory", name);
            goto out;
        }
        over_white(buf, rgb, (size_t)(w * h));
        free(buf);
        buf = rgb;
    }
    out->w = w;
    out->h = h;
    out->rgb = buf;
    buf = NULL;
out:
    png_destroy_read_struct(&p, &info, NULL);
    free(buf);
    free(rows);
    return rc;
}

/* ---- JPEG ---- */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
    bool warned;
} jpeg_err;

static void jpeg_on_error(j_common_ptr c)
{
    jpeg_err *e = (jpeg_err *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jb, 1);
}

/* Warnings (level -1) are corrupt data, e.g. "Premature end of JPEG file": refused, not shown. */
static void jpeg_on_message(j_common_ptr c, int level)
{
    jpeg_err *e = (jpeg_err *)c->err;
    if (level < 0 && !e->warned) {
        e->warned = true;
        c->err->format_message(c, e->msg);
    }
}

static int decode_jpeg(const uint8_t *d, size_t n, const char *name, cdx_image *out, cdx_err *err)
{
    struct jpeg_decompress_struct c;
    jpeg_err je;
    memset(&je, 0, sizeof je);
    c.err = jpeg_std_error(&je.pub);
    je.pub.error_exit = jpeg_on_error;
    je.pub.emit_message = jpeg_on_message;
    uint8_t *volatile buf = NULL;
    volatile int rc = CDX_OK;
    jpeg_create_decompress(&c);
    if (setjmp(je.jb)) {
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: JPEG: %s", name, je.msg);
        goto out;
    }
    jpeg_mem_src(&c, d, (unsigned long)n);
    jpeg_read_header(&c, TRUE);
    if ((rc = check_dims(name, "JPEG", c.image_width, c.image_height, err)))
        goto out;
    if (c.jpeg_color_space == JCS_CMYK || c.jpeg_color_space == JCS_YCCK) {
        rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: the JPEG is %s (%d components); caldrix reads grayscale and RGB "
                         "JPEGs", name, c.jpeg_color_space == JCS_CMYK ? "CMYK" : "YCCK", c.num_components);
        goto out;
    }
    if (c.num_components != 1 && c.num_components != 3) {
        rc = cdx_err_set(err, CDX_EUNSUPPORTED, "%s: the JPEG has %d components; caldrix reads 1 or 3", name,
                         c.num_components);
        goto out;
    }
    c.out_color_space = JCS_RGB;
    jpeg_start_decompress(&c);
    const int64_t w = c.output_width, h = c.output_height;
    if (c.output_components != 3 || w != c.image_width || h != c.image_height) {
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: JPEG decodes to %d components; expected RGB", name, c.output_components);
        goto out;
    }
    buf = malloc((size_t)(w * h * 3));
    if (!buf) {
        rc = cdx_err_set(err, CDX_ENOMEM, "%s: out of memory for %lld x %lld pixels", name, (long long)w, (long long)h);
        goto out;
    }
    while (c.output_scanline < c.output_height) {
        JSAMPROW row = buf + (size_t)c.output_scanline * (size_t)w * 3;
        jpeg_read_scanlines(&c, &row, 1);
        if (je.warned)
            break;
    }
    if (je.warned) {
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: JPEG: %s (corrupt or truncated)", name, je.msg);
        goto out;
    }
    jpeg_finish_decompress(&c);
    if (je.warned) {
        rc = cdx_err_set(err, CDX_EFORMAT, "%s: JPEG: %s (corrupt or truncated)", name, je.msg);
        goto out;
    }
    out->w = w;
    out->h = h;
    out->rgb = buf;
    buf = NULL;
out:
    jpeg_destroy_decompress(&c);
    free(buf);
    return rc;
}

/* ---- entry points ---- */

int cdx_image_decode(const void *data, size_t n, const char *name, cdx_image *out, cdx_err *err)
{
    memset(out, 0, sizeof *out);
    const uint8_t *d = data;
    if (!name)
        name = "image";
    static const uint8_t k_png[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
    if (!d || n == 0)
        return cdx_err_set(err, CDX_EFORMAT, "%s: the image is empty (0 bytes)", name);
    if (n >= 8 && !memcmp(d, k_png, 8))
        return decode_png(d, n, name, out, err);
    if (n >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff)
        return decode_jpeg(d, n, name, out, err);
    return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: neither a PNG nor a JPEG (first bytes %02x %02x %02x); caldrix "
                       "reads those two", name, d[0], n > 1 ? d[1] : 0, n > 2 ? d[2] : 0);
}

int cdx_image_load(const char *path, cdx_image *out, cdx_err *err)
{
    memset(out, 0, sizeof *out);
    char *data = NULL;
    size_t n = 0;
    int rc = cdx_file_read_all(path, CDX_IMAGE_MAX_FILE_BYTES, &data, &n, err);
    if (rc)
        return rc;
    rc = cdx_image_decode(data, n, path, out, err);
    free(data);
    return rc;
}
