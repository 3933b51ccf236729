/* config.json reader: the ten HF fixtures (values from their README/INDEX.md), transformers'
 * class defaults, and bad configs that must be refused naming the field and the value. */
#include "caldrix.h"
#include "test.h"

#include <jansson.h>

#include <unistd.h>

#define HF SHARED "/fixtures/hf/"

typedef struct {
    const char *dir;
    cdx_hf_arch arch;
    const char *model_type, *dtype;
    int64_t head_dim, ff;
    double theta;
    bool tied, llama3, qkv_bias;
    int64_t window;      /* effective sliding window */
    int64_t experts, per_tok, moe_ff, shared_ff;
    bool norm_topk;
    uint8_t moe_layers;  /* bit l: layer l is sparse */
} fixture;

static const fixture k_fixtures[] = {
    { "llama", CDX_HF_LLAMA, "llama", "float32", 16, 160, 1e4, false, false, false, 0, 0, 0, 0, 0, false, 0 },
    { "llama_bf16", CDX_HF_LLAMA, "llama", "bfloat16", 16, 160, 1e4, false, false, false, 0, 0, 0, 0, 0, false, 0 },
    { "llama_f16", CDX_HF_LLAMA, "llama", "float16", 16, 160, 1e4, false, false, false, 0, 0, 0, 0, 0, false, 0 },
    { "llama3_rope", CDX_HF_LLAMA, "llama", "float32", 16, 160, 5e5, true, true, false, 0, 0, 0, 0, 0, false, 0 },
    { "mistral", CDX_HF_MISTRAL, "mistral", "float32", 16, 160, 1e4, false, false, false, 8, 0, 0, 0, 0, false, 0 },
    { "qwen2", CDX_HF_QWEN2, "qwen2", "float32", 16, 160, 1e6, true, false, true, 0, 0, 0, 0, 0, false, 0 },
    { "qwen3", CDX_HF_QWEN3, "qwen3", "float32", 32, 160, 1e6, false, false, false, 0, 0, 0, 0, 0, false, 0 },
    { "qwen3_moe", CDX_HF_QWEN3_MOE, "qwen3_moe", "float32", 32, 160, 1e6, false, false, false, 0, 8, 2, 48, 0, true, 5 },
    { "mixtral", CDX_HF_MIXTRAL, "mixtral", "float32", 16, 96, 1e6, false, false, false, 0, 4, 2, 96, 0, true, 7 },
    { "qwen2_moe", CDX_HF_QWEN2_MOE, "qwen2_moe", "float32", 16, 160, 1e6, false, false, true, 0, 8, 2, 32, 96, false, 7 },
};

static void the_ten_fixture_configs_read_as_their_readme_says(void)
{
    for (size_t i = 0; i < sizeof k_fixtures / sizeof k_fixtures[0]; i++) {
        const fixture *f = &k_fixtures[i];
        char path[128];
        snprintf(path, sizeof path, HF "%s", f->dir);
        cdx_err e = {0};
        cdx_hf_config c;
        int rc = cdx_hf_config_read(path, &c, &e);
        CHECKF(rc == CDX_OK, "%s: %s", f->dir, e.msg);
        if (rc)
            continue;
        /* Common to all (README): vocab 320, hidden 64, 3 layers, 4/2 heads, eps 1e-6, bos 1, eos 2, 256 positions. */
        CHECKF(c.arch == f->arch && !strcmp(c.architecture, cdx_hf_arch_name(f->arch)) && !strcmp(c.model_type, f->model_type),
               "%s arch", f->dir);
        CHECKF(c.vocab_size == 320 && c.hidden_size == 64 && c.n_layers == 3 && c.n_heads == 4 && c.n_kv_heads == 2 &&
                   c.head_dim == f->head_dim && c.intermediate_size == f->ff,
               "%s dims", f->dir);
        CHECKF(c.rms_norm_eps == 1e-6 && c.rope_theta == f->theta && c.max_position_embeddings == 256, "%s eps/theta", f->dir);
        CHECKF(c.bos_token_id == 1 && c.n_eos == 1 && c.eos_token_ids[0] == 2 && cdx_hf_config_is_eos(&c, 2) &&
                   !cdx_hf_config_is_eos(&c, 1),
               "%s ids", f->dir);
        CHECKF(c.tie_word_embeddings == f->tied && !strcmp(c.torch_dtype, f->dtype), "%s tie/dtype", f->dir);
        CHECKF(c.attn_qkv_bias == f->qkv_bias && !c.attn_o_bias && !c.mlp_bias, "%s bias", f->dir);
        CHECKF(c.rope_type == (f->llama3 ? CDX_HF_ROPE_LLAMA3 : CDX_HF_ROPE_DEFAULT), "%s rope", f->dir);
        CHECKF(c.sliding_window == f->window, "%s window %lld", f->dir, (long long)c.sliding_window);
        for (int l = 0; l < 3; l++) {
            CHECKF(!!(c.layer_flags[l] & CDX_HF_LAYER_SLIDING) == (f->window > 0), "%s layer %d sliding", f->dir, l);
            CHECKF(!!(c.layer_flags[l] & CDX_HF_LAYER_MOE) == !!(f->moe_layers >> l & 1), "%s layer %d moe", f->dir, l);
        }
        CHECKF(c.n_experts == f->experts && c.n_experts_per_tok == f->per_tok && c.moe_intermediate_size == f->moe_ff &&
                   c.shared_expert_intermediate_size == f->shared_ff && c.norm_topk_prob == f->norm_topk,
               "%s moe", f->dir);
        CHECKF(c.has_generation_config && !c.has_temperature, "%s generation config", f->dir);
        if (f->llama3)
            CHECK(c.rope_factor == 8 && c.rope_low_freq_factor == 1 && c.rope_high_freq_factor == 4 &&
                  c.rope_original_max_position == 64);
    }
}

static int parse(const char *json, cdx_hf_config *c, cdx_err *e)
{
    return cdx_hf_config_parse(json, strlen(json), "config.json", c, e);
}

#define LLAMA_DIMS "\"hidden_size\":64,\"intermediate_size\":160,\"num_hidden_layers\":3,\"num_attention_heads\":4,\"vocab_size\":320"

static void missing_fields_take_the_class_defaults(void)
{
    cdx_err e = {0};
    cdx_hf_config c;
    REQUIRE(parse("{\"architectures\":[\"LlamaForCausalLM\"]," LLAMA_DIMS "}", &c, &e) == CDX_OK);
    CHECK(c.n_kv_heads == 4 && c.head_dim == 16 && c.rope_theta == 10000 && !c.tie_word_embeddings);
    CHECK(c.bos_token_id == 1 && c.n_eos == 1 && c.eos_token_ids[0] == 2 && c.rms_norm_eps == 1e-6);
    CHECK(c.max_position_embeddings == 2048 && c.sliding_window == 0 && c.layer_flags[0] == 0);
    /* model_type alone picks the class to read with (seed 000 refuses a config.json without its one
     * architecture, and the struct still holds what was read); explicit nulls fall back too. */
    REQUIRE(parse("{\"model_type\":\"mistral\",\"num_key_value_heads\":null,\"bos_token_id\":null," LLAMA_DIMS "}", &c, &e) == CDX_EUNSUPPORTED);
    CHECK(strstr(e.msg, "architectures is absent"));
    CHECK(c.arch == CDX_HF_MISTRAL && c.n_kv_heads == 4 && c.bos_token_id == -1);
    CHECK(c.sliding_window == 4096 && (c.layer_flags[2] & CDX_HF_LAYER_SLIDING)); /* MistralConfig default window */
    REQUIRE(parse("{\"architectures\":[\"MistralForCausalLM\"],\"sliding_window\":null,\"num_key_value_heads\":2," LLAMA_DIMS "}", &c, &e) == CDX_OK);
    CHECK(c.sliding_window == 0 && c.layer_flags[0] == 0);
    /* Qwen2: tie false and no bos/eos by default; qkv bias always. */
    REQUIRE(parse("{\"architectures\":[\"Qwen2ForCausalLM\"],\"num_key_value_heads\":2," LLAMA_DIMS "}", &c, &e) == CDX_OK);
    CHECK(!c.tie_word_embeddings && c.bos_token_id == -1 && c.n_eos == 0 && c.attn_qkv_bias && !c.attn_o_bias);
    CHECK(c.sliding_window == 0 && c.max_window_layers == 28);
    /* Qwen3 without head_dim: Qwen3Config's 128, not hidden/heads. */
    REQUIRE(parse("{\"architectures\":[\"Qwen3ForCausalLM\"],\"num_key_value_heads\":2," LLAMA_DIMS "}", &c, &e) == CDX_OK);
    CHECK(c.head_dim == 128);
    /* Mixtral's own eps and theta. */
    REQUIRE(parse("{\"architectures\":[\"MixtralForCausalLM\"],\"hidden_size\":256,\"intermediate_size\":96,"
                  "\"num_hidden_layers\":2,\"num_attention_heads\":32,\"vocab_size\":320}", &c, &e) == CDX_OK);
    CHECK(c.rms_norm_eps == 1e-5 && c.rope_theta == 1e6 && c.n_kv_heads == 8 && c.head_dim == 8);
    CHECK(c.n_experts == 8 && c.n_experts_per_tok == 2 && c.moe_intermediate_size == 96 && c.norm_topk_prob);
    CHECK(c.sliding_window == 0 && c.layer_flags[1] == CDX_HF_LAYER_MOE);
    /* Llama's attention_bias covers q, k, v and o: read, and refused (caldrix has no o_proj or MLP bias) */
    REQUIRE(parse("{\"architectures\":[\"LlamaForCausalLM\"],\"attention_bias\":true,\"mlp_bias\":true," LLAMA_DIMS "}", &c, &e) == CDX_EUNSUPPORTED);
    CHECK(c.attn_qkv_bias && c.attn_o_bias && c.mlp_bias && strstr(e.msg, "attention_bias is true"));
    /* Old Llama configs carry pad_token_id -1 (no padding token). */
    REQUIRE(parse("{\"architectures\":[\"LlamaForCausalLM\"],\"pad_token_id\":-1,\"rms_norm_eps\":1e-05," LLAMA_DIMS "}", &c, &e) == CDX_OK);
    CHECK(c.pad_token_id == -1 && c.rms_norm_eps == 1e-5);
}

static void qwen_sliding_window_applies_only_when_switched_on(void)
{
    cdx_err e = {0};
    cdx_hf_config c;
    REQUIRE(parse("{\"architectures\":[\"Qwen2ForCausalLM\"],\"num_key_value_heads\":2,\"sliding_window\":16,\"use_sliding_window\":false," LLAMA_DIMS "}", &c, &e) == CDX_OK);
    CHECK(c.sliding_window == 0 && !c.use_sliding_window && c.layer_flags[0] == 0 && c.layer_flags[2] == 0);
    /* a window over some layers only: read as transformers computes it, and refused */
    REQUIRE(parse("{\"architectures\":[\"Qwen2ForCausalLM\"],\"num_key_value_heads\":2,\"sliding_window\":16,\"use_sliding_window\":true,"
                  "\"max_window_layers\":1," LLAMA_DIMS "}", &c, &e) == CDX_EUNSUPPORTED);
    CHECK(c.sliding_window == 16 && c.use_sliding_window && strstr(e.msg, "some layers only"));
    CHECK(!(c.layer_flags[0] & CDX_HF_LAYER_SLIDING) && (c.layer_flags[1] & CDX_HF_LAYER_SLIDING) &&
          (c.layer_flags[2] & CDX_HF_LAYER_SLIDING));
    REQUIRE(parse("{\"architectures\":[\"Qwen3ForCausalLM\"],\"num_key_value_heads\":2,\"sliding_window\":16,\"use_sliding_window\":true,"
                  "\"layer_types\":[\"sliding_attention\",\"full_attention\",\"sliding_attention\"]," LLAMA_DIMS "}", &c, &e) == CDX_EUNSUPPORTED);
    CHECK(c.layer_flags[0] == CDX_HF_LAYER_SLIDING && c.layer_flags[1] == 0 && c.layer_flags[2] == CDX_HF_LAYER_SLIDING);
    /* All layers full attention (max_window_layers >= layers): no window at all. */
    REQUIRE(parse("{\"architectures\":[\"Qwen2ForCausalLM\"],\"num_key_value_heads\":2,\"sliding_window\":16,\"use_sliding_window\":true,"
                  "\"max_window_layers\":3," LLAMA_DIMS "}", &c, &e) == CDX_OK);
    CHECK(c.sliding_window == 0 && c.layer_flags[2] == 0);
}

static void rope_and_ids_in_every_accepted_form(void)
{
    cdx_err e = {0};
    cdx_hf_config c;
    REQUIRE(parse("{\"architectures\":[\"LlamaForCausalLM\"],\"rope_theta\":500000,\"rope_scaling\":{\"type\":\"llama3\","
                  "\"factor\":32,\"low_freq_factor\":1,\"high_freq_factor\":4,\"original_max_position_embeddings\":8192},"
                  "\"eos_token_id\":[128001,128008,128009]," LLAMA_DIMS "}", &c, &e) == CDX_OK);
    CHECK(c.rope_type == CDX_HF_ROPE_LLAMA3 && c.rope_factor == 32 && c.rope_original_max_position == 8192 && c.rope_theta == 5e5);
    CHECK(c.n_eos == 3 && cdx_hf_config_is_eos(&c, 128008) && !cdx_hf_config_is_eos(&c, 2));
    REQUIRE(parse("{\"architectures\":[\"LlamaForCausalLM\"],\"rope_scaling\":{\"rope_type\":\"default\"}," LLAMA_DIMS "}", &c, &e) == CDX_OK);
    CHECK(c.rope_type == CDX_HF_ROPE_DEFAULT);
    /* transformers v5 form */
    REQUIRE(parse("{\"architectures\":[\"LlamaForCausalLM\"],\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":250000.0}," LLAMA_DIMS "}", &c, &e) == CDX_OK);
    CHECK(c.rope_type == CDX_HF_ROPE_DEFAULT && c.rope_theta == 250000);
    /* generation_config.json replaces the ids and brings sampling defaults. */
    const char *gen = "{\"bos_token_id\":5,\"eos_token_id\":[6,7],\"do_sample\":true,\"temperature\":0.6,\"top_p\":0.9,\"top_k\":20}";
    REQUIRE(cdx_hf_config_apply_generation(&c, gen, strlen(gen), "generation_config.json", &e) == CDX_OK);
    CHECK(c.bos_token_id == 5 && c.n_eos == 2 && c.eos_token_ids[1] == 7 && c.has_generation_config);
    CHECK(c.has_do_sample && c.do_sample && c.has_temperature && c.temperature == 0.6 && c.top_p == 0.9 && c.top_k == 20);
    CHECK(!c.has_repetition_penalty);
    const char *badgen = "{\"temperature\":\"hot\"}";
    CHECK(cdx_hf_config_apply_generation(&c, badgen, strlen(badgen), "generation_config.json", &e) == CDX_EFORMAT &&
          strstr(e.msg, "generation_config.json: temperature is \"hot\""));
}

static const struct {
    const char *json;
    int code;
    const char *msg;
} k_bad[] = {
    { "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"intermediate_size\":160,\"num_hidden_layers\":\"three\","
      "\"num_attention_heads\":4,\"vocab_size\":320}",
      CDX_EFORMAT, "config.json: num_hidden_layers is \"three\"; expected an integer" },
    { "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_act\":\"gelu\"," LLAMA_DIMS "}", CDX_EUNSUPPORTED,
      "config.json: hidden_act is \"gelu\"; only \"silu\" is supported" },
    { "{\"architectures\":[\"GPT2LMHeadModel\"]," LLAMA_DIMS "}", CDX_EUNSUPPORTED, "architectures is [\"GPT2LMHeadModel\"]" },
    { "{\"architectures\":\"LlamaForCausalLM\"," LLAMA_DIMS "}", CDX_EUNSUPPORTED, "architectures is \"LlamaForCausalLM\", not exactly one name" },
    { "{" LLAMA_DIMS "}", CDX_EUNSUPPORTED, "architectures is absent" },
    { "{\"architectures\":[\"LlamaForCausalLM\"],\"rope_scaling\":{\"rope_type\":\"xpos\",\"factor\":4}," LLAMA_DIMS "}",
      CDX_EUNSUPPORTED, "rope_scaling.rope_type is \"xpos\"" },
    { "{\"architectures\":[\"LlamaForCausalLM\"],\"rope_scaling\":{\"type\":\"ntk\",\"factor\":4}," LLAMA_DIMS "}",
      CDX_EUNSUPPORTED, "rope_scaling.type is \"ntk\"" },
    { "{\"architectures\":[\"LlamaForCausalLM\"],\"rope_scaling\":{\"rope_type\":\"llama3\",\"low_freq_factor\":1,"
      "\"high_freq_factor\":4,\"original_max_position_embeddings\":64}," LLAMA_DIMS "}",
      CDX_EFORMAT, "rope_scaling.factor is missing" },
    { "{\"architectures\":[\"LlamaForCausalLM\"],\"rope_scaling\":[1]," LLAMA_DIMS "}", CDX_EFORMAT, "rope_scaling is [1]" },
    { "{\"architectures\":[\"LlamaForCausalLM\"],\"rope_theta\":-1," LLAMA_DIMS "}", CDX_ERANGE, "rope_theta is -1" },
    { "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"intermediate_size\":160,\"num_hidden_layers\":3,"
      "\"num_attention_heads\":0,\"vocab_size\":320}",
      CDX_ERANGE, "num_attention_heads is 0" },
    { "{\"architectures\":[\"LlamaForCausalLM\"],\"num_key_value_heads\":3," LLAMA_DIMS "}", CDX_ERANGE,
      "num_key_value_heads is 3" },
    { "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":-64,\"intermediate_size\":160,\"num_hidden_layers\":3,"
      "\"num_attention_heads\":4,\"vocab_size\":320}",
      CDX_ERANGE, "hidden_size is -64" },
    { "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"intermediate_size\":160,\"num_hidden_layers\":3,"
      "\"num_attention_heads\":4,\"vocab_size\":4000000000}",
      CDX_ERANGE, "vocab_size is 4000000000" },
    { "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"intermediate_size\":160,\"num_hidden_layers\":100000,"
      "\"num_attention_heads\":4,\"vocab_size\":320}",
      CDX_ERANGE, "num_hidden_layers is 100000" },
    { "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64.5,\"intermediate_size\":160,\"num_hidden_layers\":3,"
      "\"num_attention_heads\":4,\"vocab_size\":320}",
      CDX_EFORMAT, "hidden_size is 64.5; expected an integer" },
    { "{\"architectures\":[\"LlamaForCausalLM\"],\"intermediate_size\":160,\"num_hidden_layers\":3,"
      "\"num_attention_heads\":4,\"vocab_size\":320}",
      CDX_EFORMAT, "hidden_size is missing" },
    { "{\"architectures\":[\"LlamaForCausalLM\"],\"tie_word_embeddings\":\"yes\"," LLAMA_DIMS "}", CDX_EFORMAT,
      "tie_word_embeddings is \"yes\"; expected true or false" },
    { "{\"architectures\":[\"LlamaForCausalLM\"],\"eos_token_id\":[2,\"x\"]," LLAMA_DIMS "}", CDX_EFORMAT,
      "eos_token_id[1] is \"x\"" },
    { "{\"architectures\":[\"LlamaForCausalLM\"],\"eos_token_id\":{\"a\":1}," LLAMA_DIMS "}", CDX_EFORMAT,
      "eos_token_id is {\"a\":1}" },
    { "{\"architectures\":[\"LlamaForCausalLM\"],\"rms_norm_eps\":\"1e-6\"," LLAMA_DIMS "}", CDX_EFORMAT,
      "rms_norm_eps is \"1e-6\"; expected a number" },
    { "{\"architectures\":[\"LlamaForCausalLM\"],\"head_dim\":15," LLAMA_DIMS "}", CDX_ERANGE, "head_dim is 15" },
    { "{\"architectures\":[\"MistralForCausalLM\"],\"num_key_value_heads\":2,\"sliding_window\":-1," LLAMA_DIMS "}", CDX_ERANGE, "sliding_window is -1" },
    { "{\"architectures\":[\"Qwen2ForCausalLM\"],\"num_key_value_heads\":2,\"layer_types\":[\"full_attention\"]," LLAMA_DIMS "}", CDX_EFORMAT,
      "layer_types is [\"full_attention\"]" },
    { "{\"architectures\":[\"Qwen2ForCausalLM\"],\"num_key_value_heads\":2,\"layer_types\":[\"full_attention\",\"x\",\"full_attention\"]," LLAMA_DIMS "}",
      CDX_EFORMAT, "layer_types[1] is \"x\"" },
    { "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"num_key_value_heads\":2,\"num_experts\":8,\"num_experts_per_tok\":2,\"mlp_only_layers\":[5]," LLAMA_DIMS "}",
      CDX_ERANGE, "mlp_only_layers[0] is 5" },
    { "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"num_key_value_heads\":2,\"num_experts\":8,\"num_experts_per_tok\":9," LLAMA_DIMS "}", CDX_ERANGE,
      "num_experts_per_tok is 9" },
    { "{\"architectures\":[\"MixtralForCausalLM\"],\"num_key_value_heads\":2,\"num_local_experts\":\"4\"," LLAMA_DIMS "}", CDX_EFORMAT,
      "num_local_experts is \"4\"" },
    { "{\"architectures\":[\"Qwen2MoeForCausalLM\"],\"num_key_value_heads\":2,\"norm_topk_prob\":1," LLAMA_DIMS "}", CDX_EFORMAT, "norm_topk_prob is 1" },
    /* SmolLM3's NoPE layers: a list of 0/1, one per layer at least */
    { "{\"architectures\":[\"SmolLM3ForCausalLM\"],\"no_rope_layers\":[1,1]," LLAMA_DIMS "}", CDX_EFORMAT,
      "no_rope_layers is [1,1]; expected a list of at least 3 entries" },
    { "{\"architectures\":[\"SmolLM3ForCausalLM\"],\"no_rope_layers\":[1,2,0]," LLAMA_DIMS "}", CDX_EFORMAT,
      "no_rope_layers[1] is 2; expected 0 or 1" },
    { "{\"architectures\":[\"SmolLM3ForCausalLM\"],\"no_rope_layer_interval\":0," LLAMA_DIMS "}", CDX_ERANGE,
      "no_rope_layer_interval is 0" },
    { "{\"architectures\":[\"LlamaForCausalLM\"]," LLAMA_DIMS, CDX_EFORMAT, "config.json: not valid JSON" },
    { "[1,2]", CDX_EFORMAT, "config.json: not a JSON object" },
};

static void bad_configs_are_refused_naming_field_and_value(void)
{
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
        cdx_err e = {0};
        cdx_hf_config c;
        int rc = parse(k_bad[i].json, &c, &e);
        CHECKF(rc == k_bad[i].code && strstr(e.msg, k_bad[i].msg), "case %zu: rc %d msg \"%s\"; expected %d \"%s\"", i, rc,
               e.msg, k_bad[i].code, k_bad[i].msg);
    }
}

static void a_checkpoint_folder_and_a_config_path_both_read(void)
{
    char dir[64];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/cdx-config-XXXXXX", tmp && strlen(tmp) < 40 ? tmp : "/tmp");
    REQUIRE(mkdtemp(dir));
    char p1[128], p2[128];
    snprintf(p1, sizeof p1, "%s/config.json", dir);
    snprintf(p2, sizeof p2, "%s/generation_config.json", dir);
    FILE *f = fopen(p1, "w");
    REQUIRE(f);
    fputs("{\"architectures\":[\"Qwen2ForCausalLM\"],\"num_key_value_heads\":2,\"num_hidden_layers\":\"three\","
          "\"hidden_size\":64,\"intermediate_size\":160,\"num_attention_heads\":4,\"vocab_size\":320}", f);
    fclose(f);
    cdx_err e = {0};
    cdx_hf_config c;
    CHECK(cdx_hf_config_read(dir, &c, &e) == CDX_EFORMAT && strstr(e.msg, "config.json: num_hidden_layers is \"three\"") &&
          strstr(e.msg, dir));
    f = fopen(p1, "w");
    REQUIRE(f);
    fputs("{\"architectures\":[\"Qwen2ForCausalLM\"],\"num_key_value_heads\":2," LLAMA_DIMS "}", f);
    fclose(f);
    f = fopen(p2, "w");
    REQUIRE(f);
    fputs("{\"eos_token_id\":[151645,151643],\"bos_token_id\":151643,\"repetition_penalty\":1.05}", f);
    fclose(f);
    REQUIRE(cdx_hf_config_read(dir, &c, &e) == CDX_OK);
    CHECK(c.n_eos == 2 && c.eos_token_ids[0] == 151645 && c.bos_token_id == 151643 && c.repetition_penalty == 1.05);
    REQUIRE(cdx_hf_config_read(p1, &c, &e) == CDX_OK);
    CHECK(c.n_eos == 2 && c.has_generation_config);
    f = fopen(p2, "w");
    REQUIRE(f);
    fputs("{\"eos_token_id\":\"2\"}", f);
    fclose(f);
    CHECK(cdx_hf_config_read(dir, &c, &e) == CDX_EFORMAT && strstr(e.msg, "generation_config.json: eos_token_id is \"2\""));
    unlink(p1);
    unlink(p2);
    rmdir(dir);
    CHECK(cdx_hf_config_read("tests/no-such-checkpoint", &c, &e) == CDX_ENOTFOUND && strstr(e.msg, "no-such-checkpoint"));
}

/* ---- Qwen3.5: both layouts, and every malformed variant refused naming its field ---- */

static char *qwen35_variant(const char *fixture, const char *edit_path, json_t *value)
{
    char path[256];
    snprintf(path, sizeof path, SHARED "/fixtures/hf/%s/config.json", fixture);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root)
        return NULL;
    /* edit_path: "key" (in the text config), "^key" (the top level), "key.sub" (one object down) */
    json_t *obj = json_object_get(root, "text_config");
    if (!obj || edit_path[0] == '^')
        obj = root;
    const char *key = edit_path[0] == '^' ? edit_path + 1 : edit_path;
    char head[64];
    const char *dot = strchr(key, '.');
    if (dot) {
        snprintf(head, sizeof head, "%.*s", (int)(dot - key), key);
        obj = json_object_get(obj, head);
        key = dot + 1;
    }
    if (value)
        json_object_set_new(obj, key, value);
    else
        json_object_del(obj, key);
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return text;
}

static void qwen35_configs(void)
{
    const char *fx[] = { "qwen3_5", "qwen3_5_vl" };
    for (int f = 0; f < 2; f++) {
        char path[256];
        snprintf(path, sizeof path, SHARED "/fixtures/hf/%s", fx[f]);
        cdx_hf_config c;
        cdx_err e = { 0 };
        REQUIRE(cdx_hf_config_read(path, &c, &e) == 0);
        CHECK(c.arch == (f ? CDX_HF_QWEN3_5_VL : CDX_HF_QWEN3_5) && c.text_config == (f == 1));
        CHECK(c.hidden_size == 64 && c.n_layers == 4 && c.n_heads == 4 && c.n_kv_heads == 2 && c.head_dim == 32);
        CHECK(c.linear_n_k_heads == 2 && c.linear_n_v_heads == 4 && c.linear_k_dim == 16 && c.linear_v_dim == 16 &&
              c.linear_conv_kernel == 4 && c.partial_rotary_factor == 0.25 && c.rope_theta == 1e7);
        CHECK(c.tie_word_embeddings && !strcmp(c.torch_dtype, "bfloat16") && c.sliding_window == 0);
        for (int l = 0; l < 4; l++)
            CHECKF(!!(c.layer_flags[l] & CDX_HF_LAYER_LINEAR) == (l < 3), "%s layer %d", fx[f], l);
    }
    static const struct {
        const char *edit, *value; /* value as JSON; NULL: the key removed */
        int code;
        const char *msg;
        bool vl_only;
    } bad[] = {
        { "new_key", "1", CDX_EUNSUPPORTED, "new_key is 1; caldrix's Qwen3.5 import does not read this key", false },
        { "use_sliding_window", "true", CDX_OK, NULL, false },
        { "sliding_window", "16", CDX_OK, NULL, false }, /* inactive without use_sliding_window */
        { "layer_types", "[\"linear_attention\",\"linear_attention\",\"full_attention\"]", CDX_EFORMAT,
          "layer_types is [\"linear_attention\",\"linear_attention\",\"full_attention\"]; expected a list of 4", false },
        { "layer_types", "[\"linear_attention\",\"sliding_attention\",\"linear_attention\",\"full_attention\"]",
          CDX_EFORMAT, "layer_types[1] is \"sliding_attention\"", false },
        { "layer_types", "[\"linear_attention\",\"linear_attention\",\"full_attention\",\"linear_attention\"]",
          CDX_EFORMAT, "layer_types[2] is \"full_attention\", but full_attention_interval 4", false },
        { "full_attention_interval", "0", CDX_ERANGE, "full_attention_interval is 0", false },
        { "linear_num_value_heads", "3", CDX_ERANGE, "linear_num_value_heads is 3; it must be a multiple of "
          "linear_num_key_heads (2)", false },
        { "linear_key_head_dim", "0", CDX_ERANGE, "linear_key_head_dim is 0", false },
        { "linear_conv_kernel_dim", "\"4\"", CDX_EFORMAT, "linear_conv_kernel_dim is \"4\"", false },
        { "rope_parameters.partial_rotary_factor", "0.3", CDX_ERANGE, "partial_rotary_factor 0.3 of head_dim 32", false },
        { "rope_parameters.mrope_section", "[2,1,2]", CDX_EFORMAT, "rope_parameters.mrope_section is [2,1,2]", false },
        { "rope_parameters.rope_type", "\"yarn\"", CDX_EUNSUPPORTED, "rope_parameters.rope_type is \"yarn\"", false },
        { "attn_output_gate", "false", CDX_EUNSUPPORTED, "attn_output_gate is false", false },
        { "mamba_ssm_dtype", "\"bfloat16\"", CDX_EUNSUPPORTED, "mamba_ssm_dtype is \"bfloat16\"", false },
        { "mlp_only_layers", "[1]", CDX_EFORMAT, "mlp_only_layers is [1]", false },
        { "hidden_act", "\"gelu\"", CDX_EUNSUPPORTED, "hidden_act is \"gelu\"", false },
        { "^text_config", NULL, CDX_EFORMAT, "text_config is missing", true },
        { "^vision_tower", "{}", CDX_EUNSUPPORTED, "vision_tower is {}", true },
        { "^dtype", "\"int8\"", CDX_EUNSUPPORTED, "dtype is \"int8\"", true },
    };
    for (int f = 0; f < 2; f++)
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            if (bad[i].vl_only && f == 0)
                continue;
            json_error_t je;
            json_t *v = bad[i].value ? json_loads(bad[i].value, JSON_DECODE_ANY, &je) : NULL;
            char *text = qwen35_variant(fx[f], bad[i].edit, v);
            REQUIRE(text);
            cdx_hf_config c;
            cdx_err e = { 0 };
            int rc = cdx_hf_config_parse(text, strlen(text), "x/config.json", &c, &e);
            CHECKF(rc == bad[i].code && (!bad[i].msg || strstr(e.msg, bad[i].msg)), "%s, %s = %s: rc %d \"%s\"; "
                   "expected %d \"%s\"", fx[f], bad[i].edit, bad[i].value ? bad[i].value : "(removed)", rc, e.msg,
                   bad[i].code, bad[i].msg ? bad[i].msg : "");
            free(text);
        }
    /* both switches on: an active sliding window is refused naming both */
    json_error_t je;
    char *t1 = qwen35_variant("qwen3_5", "use_sliding_window", json_true());
    cdx_hf_config c;
    cdx_err e = { 0 };
    json_t *r = json_loads(t1, 0, &je);
    json_object_set_new(r, "sliding_window", json_integer(16));
    char *t2 = json_dumps(r, JSON_COMPACT);
    CHECKF(cdx_hf_config_parse(t2, strlen(t2), "x/config.json", &c, &e) == CDX_EUNSUPPORTED &&
           strstr(e.msg, "use_sliding_window is true with sliding_window 16"), "%s", e.msg);
    free(t1);
    free(t2);
    json_decref(r);
}

int main(void)
{
    RUN("the ten fixture configs read as their README says", the_ten_fixture_configs_read_as_their_readme_says);
    RUN("missing fields take the transformers class defaults", missing_fields_take_the_class_defaults);
    RUN("a Qwen sliding window applies only when switched on", qwen_sliding_window_applies_only_when_switched_on);
    RUN("rope scaling and token ids in every accepted form", rope_and_ids_in_every_accepted_form);
    RUN("bad configs are refused naming the field and the value", bad_configs_are_refused_naming_field_and_value);
    RUN("a checkpoint folder and a config.json path both read", a_checkpoint_folder_and_a_config_path_both_read);
    RUN("Qwen3.5: both layouts read, malformed variants refused naming the field", qwen35_configs);
    return t_done("config");
}
