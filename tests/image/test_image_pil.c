/* caldrix's PNG/JPEG decode against PIL's bytes after transformers' convert_to_rgb (alpha composited
 * over opaque white), for the modes the idefics3 fixtures do not have: RGBA with partial alpha, gray
 * + alpha, gray, palette with and without a tRNS chunk, and JPEGs (4:2:0 and 4:4:4 with odd sizes,
 * gray). Fixtures and tests/golden/image-pil.json are written by scripts/goldens/pil-image-decode.py
 * (Debian's python3-pil over the same libjpeg-turbo). */
#include "caldrix.h"
#include "test.h"

#include <jansson.h>
#include <openssl/evp.h>

static void hex_sha256(const void *d, size_t n, char out[65])
{
    unsigned char md[32];
    unsigned len = 0;
    EVP_Digest(d, n, md, &len, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static void decodes_equal_pil_after_convert_to_rgb(void)
{
    json_error_t je;
    json_t *g = json_load_file("tests/golden/image-pil.json", 0, &je);
    REQUIRE(g);
    json_t *imgs = json_object_get(g, "images");
    REQUIRE(json_object_size(imgs) == 8);
    const char *file;
    json_t *v;
    int checked = 0;
    json_object_foreach(imgs, file, v) {
        char path[512];
        snprintf(path, sizeof path, "tests/fixtures/image-pil/%s", file);
        cdx_err e = {0};
        cdx_image im = {0};
        if (cdx_image_load(path, &im, &e) != 0) {
            CHECKF(0, "%s: %s", file, e.msg);
            continue;
        }
        CHECKF(im.w == json_integer_value(json_object_get(v, "width")) &&
                   im.h == json_integer_value(json_object_get(v, "height")),
               "%s: %lldx%lld", file, (long long)im.w, (long long)im.h);
        char h[65];
        hex_sha256(im.rgb, (size_t)(im.w * im.h * 3), h);
        CHECKF(!strcmp(h, json_string_value(json_object_get(v, "rgb_sha256"))), "%s (%s): sha256 %s, PIL's %s", file,
               json_string_value(json_object_get(v, "mode")), h, json_string_value(json_object_get(v, "rgb_sha256")));
        checked++;
        cdx_image_free(&im);
    }
    CHECK(checked == 8);
    json_decref(g);
}

int main(void)
{
    RUN("PNG/JPEG decode equals PIL after convert_to_rgb (RGBA, LA, L, P, tRNS, JPEG)", decodes_equal_pil_after_convert_to_rgb);
    return t_done("image_pil");
}
