/* The compute-type table (cdx_dtype_choose): the default per format, stored type and architecture,
 * what --dtype may ask for, and the KV bytes memory admission counts for it. */
#include "caldrix.h"
#include "caldrix/hub.h"
#include "test.h"

static void defaults_follow_format_and_stored_type(void)
{
    static const struct { bool gguf; uint32_t stored; cdx_arch arch; cdx_dtype want; int rc; cdx_dtype got; bool f32_only; } k[] = {
        { false, CDX_TYPE_BF16, CDX_ARCH_LLAMA, CDX_DTYPE_AUTO, 0, CDX_DTYPE_BF16, false },
        { false, CDX_TYPE_F16, CDX_ARCH_QWEN3, CDX_DTYPE_AUTO, 0, CDX_DTYPE_BF16, false },
        { false, CDX_TYPE_F32, CDX_ARCH_QWEN2, CDX_DTYPE_AUTO, 0, CDX_DTYPE_F32, false },
        { false, CDX_TYPE_BF16, CDX_ARCH_BITNET, CDX_DTYPE_AUTO, 0, CDX_DTYPE_F32, false },    /* no bf16 forward */
        { false, CDX_TYPE_BF16, CDX_ARCH_GPT_OSS, CDX_DTYPE_AUTO, 0, CDX_DTYPE_BF16, false },  /* its bf16 pass */
        { false, CDX_TYPE_BF16, CDX_ARCH_QWEN3_MOE, CDX_DTYPE_AUTO, 0, CDX_DTYPE_BF16, false }, /* MoE: model_moe */
        { true, CDX_TYPE_BF16, CDX_ARCH_LLAMA, CDX_DTYPE_AUTO, 0, CDX_DTYPE_F32, false },     /* ggml's semantics */
        { false, CDX_TYPE_BF16, CDX_ARCH_LLAMA, CDX_DTYPE_F32, 0, CDX_DTYPE_F32, false },
        { false, CDX_TYPE_F32, CDX_ARCH_LLAMA, CDX_DTYPE_BF16, 0, CDX_DTYPE_BF16, false },
        { true, CDX_TYPE_BF16, CDX_ARCH_LLAMA, CDX_DTYPE_BF16, CDX_EUNSUPPORTED, 0, false },
        { false, CDX_TYPE_BF16, CDX_ARCH_BITNET, CDX_DTYPE_BF16, CDX_EUNSUPPORTED, 0, false },
        { false, CDX_TYPE_F32, CDX_ARCH_MIXTRAL, CDX_DTYPE_BF16, 0, CDX_DTYPE_BF16, false },
        /* a bf16-pass family, but this model's RoPE scaling is computed in f32 only */
        { false, CDX_TYPE_BF16, CDX_ARCH_QWEN2, CDX_DTYPE_AUTO, 0, CDX_DTYPE_F32, true },
        { false, CDX_TYPE_BF16, CDX_ARCH_QWEN2, CDX_DTYPE_BF16, CDX_EUNSUPPORTED, 0, true },
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        cdx_dtype d = CDX_DTYPE_COUNT;
        const char *why = NULL;
        cdx_err e = { 0 };
        int rc = cdx_dtype_choose(k[i].gguf, k[i].stored, k[i].arch, k[i].f32_only, k[i].want, &d, &why, &e);
        CHECKF(rc == k[i].rc, "row %zu: rc %d", i, rc);
        if (!rc)
            CHECKF(d == k[i].got && why && *why, "row %zu: %s", i, cdx_dtype_name(d));
        else
            CHECKF(strstr(e.msg, "--dtype bf16"), "row %zu: %s", i, e.msg);
    }
    cdx_dtype d;
    CHECK(cdx_dtype_from_name("bf16", &d) == 0 && d == CDX_DTYPE_BF16);
    CHECK(cdx_dtype_from_name("fp16", &d) == CDX_EINVAL);
    CHECK(strstr(cdx_dtype_help(), "GGUF: f32") && strstr(cdx_dtype_help(), "bf16 or f16: bf16"));
}

static void admission_counts_a_bf16_cache_at_two_bytes(void)
{
    cdx_hub_config c = { .arch = "LlamaForCausalLM", .dtype = "bfloat16", .n_layer = 16, .n_kv_head = 8,
                         .head_dim = 64, .ctx_max = 131072 };
    CHECK(cdx_hub_kv_value_bytes(&c, CDX_DTYPE_AUTO) == 2);
    CHECK(cdx_hub_kv_value_bytes(&c, CDX_DTYPE_F32) == 4);
    c.kv_value_bytes = cdx_hub_kv_value_bytes(&c, CDX_DTYPE_AUTO);
    /* 2 (K, V) x 16 layers x 8 heads x 64 x 4096 positions x 2 bytes */
    CHECK(cdx_hub_kv_bytes(&c, 4096) == 2ull * 16 * 8 * 64 * 4096 * 2);
    snprintf(c.dtype, sizeof c.dtype, "float32");
    CHECK(cdx_hub_kv_value_bytes(&c, CDX_DTYPE_AUTO) == 4);
    CHECK(cdx_hub_kv_value_bytes(&c, CDX_DTYPE_BF16) == 2);
    snprintf(c.arch, sizeof c.arch, "MixtralForCausalLM"); /* a mixture of experts with a bf16 pass */
    snprintf(c.dtype, sizeof c.dtype, "bfloat16");
    c.n_expert = 8;
    CHECK(cdx_hub_kv_value_bytes(&c, CDX_DTYPE_AUTO) == 2);
    snprintf(c.arch, sizeof c.arch, "BitNetForCausalLM"); /* a family without */
    c.n_expert = 0;
    CHECK(cdx_hub_kv_value_bytes(&c, CDX_DTYPE_AUTO) == 4);
}

static void a_bf16_checkpoint_loads_as_bf16_and_keeps_its_mapped_weights(void)
{
    cdx_model *m = NULL;
    cdx_err e = { 0 };
    REQUIRE(cdx_model_open(SHARED "/fixtures/hf/llama_bf16", NULL, &m, &e) == 0);
    CHECK(cdx_model_dtype(m) == CDX_DTYPE_BF16 && cdx_model_kv_type_default(m) == CDX_TYPE_BF16);
    const size_t bf = cdx_model_weight_bytes(m);
    cdx_model_close(m);
    const cdx_model_opts f32 = { .dtype = CDX_DTYPE_F32 }, bf16 = { .dtype = CDX_DTYPE_BF16 };
    REQUIRE(cdx_model_open(SHARED "/fixtures/hf/llama", &f32, &m, &e) == 0);
    CHECK(cdx_model_dtype(m) == CDX_DTYPE_F32 && cdx_model_kv_type_default(m) == CDX_TYPE_F32);
    const size_t f = cdx_model_weight_bytes(m);
    cdx_model_close(m);
    CHECKF(2 * bf == f, "bf16 %zu, f32 %zu bytes per token", bf, f); /* same shapes: half the bytes */
    REQUIRE(cdx_model_open(SHARED "/fixtures/hf/llama", &bf16, &m, &e) == 0);
    CHECK(cdx_model_dtype(m) == CDX_DTYPE_BF16 && cdx_model_weight_bytes(m) == bf);
    cdx_model_close(m);
    CHECK(cdx_model_open(SHARED "/fixtures/hf-gguf/llama_bf16.gguf", &bf16, &m, &e) == CDX_EUNSUPPORTED);
    CHECKF(strstr(e.msg, "llama_bf16.gguf") && strstr(e.msg, "safetensors"), "%s", e.msg);
}

int main(void)
{
    RUN("the default compute type follows the format, the stored type and the architecture", defaults_follow_format_and_stored_type);
    RUN("memory admission counts a bf16 model's KV cache at 2 bytes a value", admission_counts_a_bf16_cache_at_two_bytes);
    RUN("a bf16 checkpoint loads as bf16; an f32 one as f32, or cast to bf16 when asked", a_bf16_checkpoint_loads_as_bf16_and_keeps_its_mapped_weights);
    return t_done("dtype");
}
