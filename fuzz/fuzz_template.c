/* libFuzzer target: parse any bytes as a chat template and render it with a fixed conversation.
 * Must never crash, leak or print; tight limits keep each run short. */
#include "caldrix.h"

#include <jansson.h>
#include <stdlib.h>

static const char k_vars[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"},"
    " {\"role\": \"user\", \"content\": \"Hi <think>x</think> there\"},"
    " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"abcdefghi\", \"type\": \"function\","
    "   \"function\": {\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5, true, null]}}}]},"
    " {\"role\": \"tool\", \"content\": \"22\"},"
    " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"t\"}, {\"type\": \"image\"}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\","
    "   \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"array\"}}}}}],"
    " \"documents\": null, \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static json_t *vars;
    if (!vars)
        vars = json_loads(k_vars, 0, NULL);
    cdx_err err = {0};
    cdx_tmpl *t = NULL;
    if (cdx_tmpl_parse((const char *)data, size, &t, &err) == 0) {
        cdx_tmpl_opts o = { .max_output_bytes = 1 << 20, .max_memory_bytes = 64 << 20, .max_steps = 200000,
                            .max_depth = 200, .now_s = 1700000000 };
        char *out = NULL;
        size_t n = 0;
        if (cdx_tmpl_render(t, vars, &o, &out, &n, &err) == 0)
            free(out);
        cdx_tmpl_free(t);
    }
    return 0;
}
