/* libFuzzer target: the tokenizer.json loader, then a short encode/decode round on what loaded.
 * Input: bytes of a tokenizer.json; the first line of a successful load is also used as text.
 * Must not crash, leak or print. */
#include "caldrix.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    cdx_err err = {0};
    cdx_tok *t = NULL;
    if (cdx_tok_open_json((const char *)d, n, NULL, 0, "fuzz.json", &t, &err) == 0) {
        static const char *const texts[] = { "Hello world", "  a<s>b\n\n12345 ", "\xc3\xa9t\xc3\xa9 \xe2\x96\x81x", "" };
        for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
            int32_t ids[256];
            size_t need = 0;
            if (cdx_tok_encode(t, texts[i], strlen(texts[i]), true, i & 1, ids, 256, &need, &err) == 0) {
                size_t m = need < 256 ? need : 256, len = 0;
                char out[1024];
                cdx_tok_decode(t, ids, m, i & 1, out, sizeof out, &len, &err);
                cdx_tok_stream st;
                cdx_tok_stream_init(&st, t, false);
                for (size_t k = 0; k < m; k++)
                    cdx_tok_stream_put(&st, ids[k], out, sizeof out);
                cdx_tok_stream_flush(&st, out, sizeof out);
            }
        }
        cdx_tok_close(t);
    }
    return 0;
}
