/* libFuzzer target: PNG / JPEG decoding and the Idefics3 processor on arbitrary bytes.
 * Build: make fuzz; run: build-fuzz/fuzz_image -max_total_time=60 -max_len=65536 fuzz/corpus/image (fuzz/README.md) */
#include "caldrix.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cdx_err err = {0};
    cdx_image im;
    if (cdx_image_decode(data, size, "fuzz", &im, &err) != 0) {
        if (im.rgb || !err.msg[0])
            __builtin_trap();
        return 0;
    }
    if (im.w < 1 || im.h < 1 || im.w * im.h > CDX_IMAGE_MAX_PIXELS)
        __builtin_trap();
    /* the processor on small images only (a fuzzer's time goes to the decoders) */
    if (im.w * im.h <= 128 * 128) {
        cdx_image_proc pp = { .do_resize = true, .do_image_splitting = true, .do_rescale = true, .do_normalize = true,
                              .longest_edge = 96, .max_image_size = 32, .resample = 1, .rescale_factor = 1.0 / 255,
                              .mean = { 0.5f, 0.5f, 0.5f }, .std = { 0.5f, 0.5f, 0.5f }, .image_seq_len = 4 };
        cdx_image_tiles t;
        if (cdx_image_preprocess(&pp, &im, &t, &err) == 0)
            cdx_image_tiles_free(&t);
    }
    cdx_image_free(&im);
    return 0;
}
