/* hub layer: SHA-256 (FIPS vectors), references, environment, the import rules, memory estimates,
 * folder checks and inspect reports against the format layer's own readers. No network here:
 * tests/hub/test_hub_net.sh runs the fake Hub and registry. */
#include "caldrix.h"
#include "caldrix/model.h"
#include "hub/hub_int.h"
#include "test.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_tmp[256];

static void hex_of(const uint8_t d[32], char out[65])
{
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void sha256_matches_fips_180_examples(void)
{
    /* FIPS 180-2 appendix B and the NIST CSRC SHA-256 examples */
    static const struct { const char *msg; const char *hex; } v[] = {
        { "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" },
        { "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
        { "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1" },
        { "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrst"
          "nopqrstu", "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1" },
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        cdx_sha256 s;
        uint8_t d[32];
        char hex[65];
        REQUIRE(cdx_sha256_init(&s) == 0);
        cdx_sha256_update(&s, v[i].msg, strlen(v[i].msg));
        REQUIRE(cdx_sha256_final(&s, d) == 0 && s.ctx == NULL);
        hex_of(d, hex);
        CHECKF(!strcmp(hex, v[i].hex), "\"%.20s\": %s", v[i].msg, hex);
    }
    /* one million 'a', fed in awkward pieces */
    static char chunk[1000];
    memset(chunk, 'a', sizeof chunk);
    cdx_sha256 s;
    uint8_t d[32];
    char hex[65];
    REQUIRE(cdx_sha256_init(&s) == 0);
    size_t fed = 0, step[] = { 1, 63, 64, 65, 7, 1000, 127 };
    for (int k = 0; fed < 1000000; k++) {
        size_t n = step[k % 7];
        if (n > 1000000 - fed)
            n = 1000000 - fed;
        cdx_sha256_update(&s, chunk, n);
        fed += n;
    }
    REQUIRE(cdx_sha256_final(&s, d) == 0);
    hex_of(d, hex);
    CHECK(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
}

static void sha256_of_a_file_equals_the_streamed_digest(void)
{
    char p[300];
    snprintf(p, sizeof p, "%s/abc", g_tmp);
    FILE *f = fopen(p, "w");
    REQUIRE(f);
    fputs("abc", f);
    fclose(f);
    char hex[65];
    cdx_err err = { 0 };
    REQUIRE(cdx_sha256_file(p, hex, &err) == 0);
    CHECK(!strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    CHECK(cdx_sha256_file("/nonexistent/x", hex, &err) == CDX_EIO);
}

static void references_parse_into_their_kinds(void)
{
    cdx_err err = { 0 };
    cdx_hub_ref r;
    CHECK(cdx_hub_parse_ref("qwen3-0.6b", &r, &err) == 0 && r.kind == CDX_REF_ALIAS && !strcmp(r.repo, "Qwen/Qwen3-0.6B") &&
          !strcmp(r.revision, "c1899de289a04d12100db370d81485cdf75e47ca"));
    CHECK(cdx_hub_parse_ref("Qwen/Qwen3-0.6B", &r, &err) == 0 && r.kind == CDX_REF_HF && !strcmp(r.revision, "main"));
    CHECK(cdx_hub_parse_ref("Qwen/Qwen3-0.6B@refs/pr/1", &r, &err) == 0 && !strcmp(r.revision, "refs/pr/1") &&
          !strcmp(r.repo, "Qwen/Qwen3-0.6B"));
    CHECK(cdx_hub_parse_ref("ollama:smollm2:135m-instruct-q8_0", &r, &err) == 0 && r.kind == CDX_REF_OLLAMA &&
          !strcmp(r.ns, "library") && !strcmp(r.name, "smollm2") && !strcmp(r.tag, "135m-instruct-q8_0"));
    CHECK(cdx_hub_parse_ref("ollama:someone/model", &r, &err) == 0 && !strcmp(r.ns, "someone") &&
          !strcmp(r.name, "model") && !strcmp(r.tag, "latest"));
    CHECK(cdx_hub_parse_ref(SHARED "/fixtures/hf/llama", &r, &err) == 0 && r.kind == CDX_REF_PATH);
    CHECK(cdx_hub_parse_ref(SHARED "/fixtures/hf-gguf/qwen3.gguf", &r, &err) == 0 && r.kind == CDX_REF_PATH);
    static const struct { const char *ref; int code; const char *msg; } bad[] = {
        { "", CDX_EINVAL, "empty" },
        { "./nope", CDX_ENOTFOUND, "no such file" },
        { "missing.gguf", CDX_ENOTFOUND, "no such file" },
        { "a--b/c", CDX_EINVAL, "not a Hugging Face repo id" },
        { "owner/na..me", CDX_EINVAL, "not a Hugging Face repo id" },
        { "owner/name@", CDX_EINVAL, "revision" },
        { "owner/name@../../etc", CDX_EINVAL, "revision" },
        { "owner/name@a b", CDX_EINVAL, "revision" },
        { "a/b/c", CDX_EINVAL, "not a Hugging Face repo id" },
        { "ollama:", CDX_EINVAL, "not an Ollama name" },
        { "ollama:x:", CDX_EINVAL, "not an Ollama name" },
        { "ollama:a/b/c", CDX_EINVAL, "not an Ollama name" },
        { "justaword", CDX_EINVAL, "not an alias" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&err, 0, sizeof err);
        int rc = cdx_hub_parse_ref(bad[i].ref, &r, &err);
        CHECKF(rc == bad[i].code && strstr(err.msg, bad[i].msg), "\"%s\": rc %d, %s", bad[i].ref, rc, err.msg);
    }
}

static void the_alias_table_is_the_seeds(void)
{
    size_t n;
    const cdx_hub_alias *a = cdx_hub_aliases(&n);
    CHECK(n == 8);
    for (size_t i = 0; i < n; i++) {
        CHECKF(strlen(a[i].revision) == 40, "%s", a[i].alias);
        CHECK(cdx_hub_alias_find(a[i].alias) == &a[i]);
    }
    const cdx_hub_alias *s = cdx_hub_alias_find("smolvlm-256m");
    CHECK(s && !strcmp(s->repo, "HuggingFaceTB/SmolVLM-256M-Instruct") &&
          !strcmp(s->revision, "7e3e67edbbed1bf9888184d9df282b700a323964"));
    CHECK(!cdx_hub_alias_find("qwen3"));
}

static void environment_follows_huggingface_hub(void)
{
    const char *vars[] = { "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HF_ENDPOINT",
                           "HF_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE", "CALDRIX_OFFLINE", "CALDRIX_CACHE",
                           "CALDRIX_OLLAMA_REGISTRY" };
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
    cdx_hub_env env;
    cdx_err err = { 0 };
    setenv("HOME", g_tmp, 1);
    REQUIRE(cdx_hub_env_load(&env, &err) == 0);
    char want[400];
    snprintf(want, sizeof want, "%s/.cache/huggingface/hub", g_tmp);
    CHECK(!strcmp(env.hf_cache, want));
    CHECK(!strcmp(env.endpoint, "https://huggingface.co"));
    CHECK(!strcmp(env.ollama_registry, "https://registry.ollama.ai"));
    CHECK(!env.hf_offline && !env.offline && !env.token);
    cdx_hub_env_free(&env);

    setenv("XDG_CACHE_HOME", "/x", 1);
    setenv("HF_ENDPOINT", "http://mirror.example/", 1);
    setenv("HF_HUB_OFFLINE", "YES", 1);
    REQUIRE(cdx_hub_env_load(&env, &err) == 0);
    CHECK(!strcmp(env.hf_cache, "/x/huggingface/hub") && !strcmp(env.caldrix_cache, "/x/caldrix"));
    CHECK(!strcmp(env.endpoint, "http://mirror.example"));
    CHECK(env.hf_offline && !env.offline && !strcmp(env.offline_var, "HF_HUB_OFFLINE"));
    cdx_hub_env_free(&env);

    char home[300], tok[340];
    snprintf(home, sizeof home, "%s/hfhome", g_tmp);
    mkdir(home, 0755);
    snprintf(tok, sizeof tok, "%s/token", home);
    FILE *f = fopen(tok, "w");
    REQUIRE(f);
    fputs("  hf_file_token \n", f);
    fclose(f);
    setenv("HF_HOME", home, 1);
    setenv("HF_HUB_OFFLINE", "0", 1);
    setenv("CALDRIX_OFFLINE", "true", 1);
    REQUIRE(cdx_hub_env_load(&env, &err) == 0);
    snprintf(want, sizeof want, "%s/hub", home);
    CHECK(!strcmp(env.hf_cache, want));
    CHECK(env.token && !strcmp(env.token, "hf_file_token") && !strcmp(env.token_source, "$HF_HOME/token"));
    CHECK(env.offline && env.hf_offline && !strcmp(env.offline_var, "CALDRIX_OFFLINE"));
    cdx_hub_env_free(&env);

    setenv("HF_HUB_CACHE", "/c", 1);
    setenv("HF_TOKEN", "hf_env", 1);
    REQUIRE(cdx_hub_env_load(&env, &err) == 0);
    CHECK(!strcmp(env.hf_cache, "/c") && !strcmp(env.token, "hf_env"));
    cdx_hub_env_free(&env);

    setenv("HF_ENDPOINT", "ftp://x", 1);
    CHECK(cdx_hub_env_load(&env, &err) == CDX_EINVAL && strstr(err.msg, "HF_ENDPOINT"));
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
    CHECK(cdx_hub_env_truthy("On") && cdx_hub_env_truthy("1") && !cdx_hub_env_truthy("2") && !cdx_hub_env_truthy(NULL));
}

static void the_cache_folder_and_refs_are_huggingface_hubs(void)
{
    char *d = cdx_hub_repo_dir("/c", "Qwen/Qwen3-0.6B");
    CHECK(d && !strcmp(d, "/c/models--Qwen--Qwen3-0.6B"));
    free(d);
    char cache[300], refdir[400], ref[450];
    snprintf(cache, sizeof cache, "%s/cache", g_tmp);
    snprintf(refdir, sizeof refdir, "%s/models--o--n/refs", cache);
    cdx_err err = { 0 };
    REQUIRE(hub_mkdirs(refdir, &err) == 0);
    snprintf(ref, sizeof ref, "%s/main", refdir);
    FILE *f = fopen(ref, "w");
    REQUIRE(f);
    fputs("0123456789abcdef0123456789abcdef01234567\n", f);
    fclose(f);
    char commit[41];
    CHECK(cdx_hub_cache_commit(cache, "o/n", "main", commit, &err) == 0 &&
          !strcmp(commit, "0123456789abcdef0123456789abcdef01234567"));
    CHECK(cdx_hub_cache_commit(cache, "o/n", "fedcba9876543210fedcba9876543210fedcba98", commit, &err) == 0 &&
          !strcmp(commit, "fedcba9876543210fedcba9876543210fedcba98"));
    CHECK(cdx_hub_cache_commit(cache, "o/n", "dev", commit, &err) == CDX_ENOTFOUND);
    f = fopen(ref, "w");
    fputs("not a commit", f);
    fclose(f);
    CHECK(cdx_hub_cache_commit(cache, "o/n", "main", commit, &err) == CDX_EFORMAT && strstr(err.msg, "40-hex"));
}

/* ---- the import rules ---- */

static char *read_text(const char *path, size_t *len)
{
    char *t = NULL;
    cdx_err err = { 0 };
    return cdx_file_read_all(path, 1 << 20, &t, len, &err) == 0 ? t : NULL;
}

static void every_fixture_config_is_judged_by_architecture(void)
{
    static const struct { const char *dir; bool accepted; } fx[] = {
        { "llama", true }, { "llama_bf16", true }, { "llama_f16", true }, { "llama3_rope", true },
        { "mistral", true }, { "qwen2", true }, { "qwen3", true }, { "qwen3_moe", true },
        { "mixtral", true }, { "qwen2_moe", true },
    };
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        char p[300];
        snprintf(p, sizeof p, SHARED "/fixtures/hf/%s/config.json", fx[i].dir);
        size_t len;
        char *t = read_text(p, &len);
        REQUIRE(t);
        cdx_hub_config c;
        cdx_err err = { 0 };
        int rc = cdx_hub_check_config(t, len, p, &c, &err);
        free(t);
        if (fx[i].accepted) {
            CHECKF(rc == 0, "%s: %s", fx[i].dir, err.msg);
            CHECK(c.n_layer == 3 && c.hidden == 64 && c.n_head == 4 && c.n_kv_head == 2 && c.ctx_max == 256);
        } else {
            CHECKF(rc == CDX_EUNSUPPORTED && strstr(err.msg, "architectures is"), "%s: %s", fx[i].dir, err.msg);
        }
        if (!strcmp(fx[i].dir, "qwen3"))
            CHECK(c.head_dim == 32 && !c.tied);
        if (!strcmp(fx[i].dir, "llama3_rope"))
            CHECK(c.llama3_rope && c.tied);
        if (!strcmp(fx[i].dir, "mistral"))
            CHECK(c.sliding_window == 8);
        if (!strcmp(fx[i].dir, "qwen3_moe"))
            CHECK(c.n_expert == 8 && c.n_expert_used == 2 && c.moe_ffn == 48);
        if (!strcmp(fx[i].dir, "mixtral"))
            CHECK(c.n_expert == 4 && c.n_expert_used == 2 && c.moe_ffn == 96);
        if (!strcmp(fx[i].dir, "qwen2_moe"))
            CHECK(c.n_expert == 8 && c.n_expert_used == 2 && c.moe_ffn == 32);
    }
}

#define BASE "\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2," \
             "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":128,\"vocab_size\":100"

#define STR_(x) #x
#define DIMS(hidden, kv) "\"architectures\":[\"LlamaForCausalLM\"],\"num_hidden_layers\":2,\"num_attention_heads\":4," \
                         "\"intermediate_size\":128,\"hidden_size\":" STR_(hidden) ",\"vocab_size\":100" ",\"num_key_value_heads\":" STR_(kv)

static void each_refusal_names_the_field_and_the_value(void)
{
    static const struct { const char *json; int code; const char *a, *b; } cases[] = {
        { "{" BASE "}", 0, NULL, NULL },
        { "[1]", CDX_EFORMAT, "JSON object", NULL },
        { "{\"a\":", CDX_EFORMAT, "not valid JSON", NULL },
        { "{\"a\":1,\"a\":2}", CDX_EFORMAT, "not valid JSON", NULL },
        { "{\"architectures\":[\"GPT2LMHeadModel\"]}", CDX_EUNSUPPORTED, "architectures is [\"GPT2LMHeadModel\"]", "LlamaForCausalLM" },
        { "{\"architectures\":[\"LlamaForCausalLM\",\"X\"]}", CDX_EUNSUPPORTED, "not exactly one", NULL },
        { "{\"model_type\":\"llama\"}", CDX_EUNSUPPORTED, "architectures is absent", NULL },
        { "{" BASE ",\"torch_dtype\":\"int8\"}", CDX_EUNSUPPORTED, "torch_dtype is \"int8\"", NULL },
        { "{" BASE ",\"dtype\":\"float8_e4m3fn\"}", CDX_EUNSUPPORTED, "dtype is \"float8_e4m3fn\"", NULL },
        { "{" BASE ",\"quantization_config\":{\"quant_method\":\"awq\"}}", CDX_EUNSUPPORTED, "quantization_config", "awq" },
        { "{" BASE ",\"hidden_act\":\"gelu\"}", CDX_EUNSUPPORTED, "hidden_act is \"gelu\"", "silu" },
        { "{" BASE ",\"mlp_bias\":true}", CDX_EUNSUPPORTED, "mlp_bias is true", NULL },
        { "{" BASE ",\"attention_bias\":true}", CDX_EUNSUPPORTED, "attention_bias is true", "Qwen2" },
        { "{" BASE ",\"rope_interleaved\":true}", CDX_EUNSUPPORTED, "rope_interleaved is true", NULL },
        { "{" BASE ",\"rope_scaling\":{\"rope_type\":\"proportional\",\"factor\":4}}", CDX_EUNSUPPORTED, "rope_scaling.rope_type is \"proportional\"", "longrope" },
        { "{" BASE ",\"rope_scaling\":{\"type\":\"dynamic\"}}", CDX_EFORMAT, "rope_scaling.factor is missing", "dynamic" },
        { "{" BASE ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4}}", 0, NULL, NULL },
        { "{" BASE ",\"rope_scaling\":{\"type\":\"dynamic\",\"factor\":2.0}}", 0, NULL, NULL },
        /* Llama 3 scaling needs all four of its keys: the loader's reader says so before the download */
        { "{" BASE ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8}}", CDX_EFORMAT,
          "rope_scaling.low_freq_factor is missing", NULL },
        { "{" BASE ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":1,"
          "\"high_freq_factor\":4,\"original_max_position_embeddings\":64}}", 0, NULL, NULL },
        { "{" BASE ",\"rope_scaling\":null}", 0, NULL, NULL },
        { "{" BASE ",\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000}}", 0, NULL, NULL },
        /* the loader's reader: the dimensions are required, and must agree */
        { "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64}", CDX_EFORMAT, "intermediate_size is missing", NULL },
        { "{" DIMS(64, 3) "}", CDX_EUNSUPPORTED, "num_key_value_heads is 3", "must divide" },
        { "{" DIMS(64, 8) "}", CDX_EUNSUPPORTED, "num_key_value_heads is 8", NULL },
        /* LlamaConfig's head_dim is hidden_size // heads (16): q_proj 66 -> 64, o_proj 64 -> 66, as transformers runs it */
        { "{" DIMS(66, 2) "}", 0, NULL, NULL },
        { "{" BASE ",\"head_dim\":15}", CDX_EUNSUPPORTED, "head_dim is 15", NULL },
        { "{" DIMS("64", 2) "}", CDX_EFORMAT, "hidden_size is \"64\"", "integer" },
        { "{\"architectures\":[\"LlamaForCausalLM\"],\"num_hidden_layers\":2,\"num_attention_heads\":4,\"hidden_size\":64,\"intermediate_size\":128,\"vocab_size\":-1}", CDX_EUNSUPPORTED, "vocab_size is -1", NULL },
        { "{" BASE ",\"max_position_embeddings\":1e30}", CDX_EFORMAT, "max_position_embeddings", NULL },
        { "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"
          "\"num_attention_heads\":4,\"vocab_size\":100,\"intermediate_size\":128,\"num_experts\":8,\"num_experts_per_tok\":9,"
          "\"moe_intermediate_size\":32}", CDX_EUNSUPPORTED, "num_experts_per_tok is 9", NULL },
        { "{\"architectures\":[\"Qwen2ForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
          "\"intermediate_size\":128,\"vocab_size\":100,\"attention_bias\":true,\"num_key_value_heads\":2}", 0, NULL, NULL },
        /* absent num_key_value_heads: Qwen2Config's default 32, as the loader reads it, not num_attention_heads */
        { "{\"architectures\":[\"Qwen2ForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
          "\"intermediate_size\":128,\"vocab_size\":100}", CDX_EUNSUPPORTED, "num_key_value_heads is 32", NULL },
        /* absent head_dim: Qwen3Config's default 128, not hidden_size / heads */
        { "{\"architectures\":[\"Qwen3ForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
          "\"num_key_value_heads\":2,\"intermediate_size\":128,\"vocab_size\":100}", 0, NULL, NULL },
        { "{\"architectures\":[\"Qwen3_5ForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
          "\"intermediate_size\":128,\"vocab_size\":100,\"layer_types\":[\"linear_attention\",\"full_attention\"]}", 0, NULL, NULL },
        { "{\"architectures\":[\"Qwen3_5ForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
          "\"intermediate_size\":128,\"vocab_size\":100,\"new_thing\":1}", CDX_EUNSUPPORTED, "new_thing is 1", "does not read" },
        { "{\"architectures\":[\"Qwen3_5ForConditionalGeneration\"],\"text_config\":{\"hidden_size\":64,"
          "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"intermediate_size\":128,\"vocab_size\":100,"
          "\"use_sliding_window\":true,\"sliding_window\":16}}", CDX_EUNSUPPORTED, "sliding window", "16" },
        { "{\"architectures\":[\"Qwen3_5ForConditionalGeneration\"],\"text_config\":{\"hidden_size\":64,"
          "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"intermediate_size\":128,\"vocab_size\":100,"
          "\"hidden_act\":\"gelu\"}}", CDX_EUNSUPPORTED, "text_config: hidden_act is \"gelu\"", NULL },
        /* the architectures refused by name: the reason, not the list of accepted ones */
        { "{\"architectures\":[\"BitnetForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":2,"
          "\"num_attention_heads\":4,\"intermediate_size\":128,\"vocab_size\":100,\"hidden_act\":\"silu\"}",
          CDX_EUNSUPPORTED, "architectures is [\"BitnetForCausalLM\"] (bitnet), refused: 1bitLLM's remote-code BitNet b1.58",
          "inner_attn_ln" },
        /* BitNet (transformers' class): quantization_config other than BitNet's packed BitLinear, another activation */
        { "{\"architectures\":[\"BitNetForCausalLM\"],\"model_type\":\"bitnet\",\"hidden_size\":64,\"num_hidden_layers\":2,"
          "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":128,\"vocab_size\":100,"
          "\"quantization_config\":{\"quant_method\":\"bitnet\",\"linear_class\":\"autobitlinear\",\"quantization_mode\":\"online\"}}",
          CDX_EUNSUPPORTED, "quantization_config.linear_class is \"autobitlinear\"", "linear_class \"bitlinear\"" },
        { "{\"architectures\":[\"BitNetForCausalLM\"],\"model_type\":\"bitnet\",\"hidden_size\":64,\"num_hidden_layers\":2,"
          "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":128,\"vocab_size\":100,"
          "\"quantization_config\":{\"quant_method\":\"gptq\"}}",
          CDX_EUNSUPPORTED, "quantization_config.quant_method is \"gptq\"", "BitNet's packed weights" },
        { "{\"architectures\":[\"BitNetForCausalLM\"],\"model_type\":\"bitnet\",\"hidden_size\":64,\"num_hidden_layers\":2,"
          "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":128,\"vocab_size\":100,\"hidden_act\":\"gelu\"}",
          CDX_EUNSUPPORTED, "hidden_act is \"gelu\"; only \"relu2\" or \"silu\" is supported", NULL },
        /* Qwen2-VL's text path runs; its attention needs the sections */
        { "{\"architectures\":[\"Qwen2VLForConditionalGeneration\"],\"model_type\":\"qwen2_vl\",\"hidden_size\":64,"
          "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":128,"
          "\"vocab_size\":100}", CDX_EFORMAT, "rope_scaling.mrope_section is missing", "Qwen2VLForConditionalGeneration" },
        { "{\"architectures\":[\"Gemma3ForConditionalGeneration\"],\"text_config\":{\"hidden_size\":64}}",
          CDX_EUNSUPPORTED, "(gemma3), refused: vision-language Gemma 3", "Gemma3ForCausalLM" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cdx_err err = { 0 };
        cdx_hub_config c;
        int rc = cdx_hub_check_config(cases[i].json, strlen(cases[i].json), "x/config.json", &c, &err);
        bool ok = rc == cases[i].code;
        if (ok && cases[i].a)
            ok = strstr(err.msg, cases[i].a) && (!cases[i].b || strstr(err.msg, cases[i].b)) &&
                 !strncmp(err.msg, "x/config.json: ", 15);
        CHECKF(ok, "case %zu: rc %d, msg %s", i, rc, err.msg);
    }
}

static void the_rule_table_has_ids_fields_and_docs(void)
{
    size_t n, na;
    const cdx_hub_rule *r = cdx_hub_rules(&n);
    const cdx_hub_arch *a = cdx_hub_archs(&na);
    CHECK(n >= 10 && na == CDX_HF_ARCH_COUNT); /* every config.json architecture the family rows read */
    for (size_t i = 0; i < n; i++)
        CHECKF(r[i].id[0] && r[i].field[0] && strlen(r[i].doc) > 10, "rule %zu", i);
    /* docs/models.md documents every rule, alias, architecture and variable */
    size_t len;
    char *doc = read_text("docs/models.md", &len);
    REQUIRE(doc);
    for (size_t i = 0; i < n; i++)
        CHECKF(strstr(doc, r[i].id) && strstr(doc, r[i].doc), "docs/models.md lacks rule %s", r[i].id);
    size_t nal;
    const cdx_hub_alias *al = cdx_hub_aliases(&nal);
    for (size_t i = 0; i < nal; i++)
        CHECKF(strstr(doc, al[i].alias) && strstr(doc, al[i].revision), "docs/models.md lacks alias %s", al[i].alias);
    for (size_t i = 0; i < na; i++) { /* the table row as the family rows give it */
        char row[256];
        snprintf(row, sizeof row, "| %s | %s | %s |", a[i].name, a[i].family, a[i].note);
        CHECKF(strstr(doc, row), "docs/models.md lacks the row \"%s\"", row);
    }
    size_t nr;
    const cdx_refused_arch *rf = cdx_refused_archs(&nr);
    CHECK(nr >= 2); /* 1bitLLM's BitNet, vision-language Gemma 3 */
    for (size_t i = 0; i < nr; i++) { /* the refused rows, each with its reason */
        char row[512];
        snprintf(row, sizeof row, "| %s | %s | %s | %s |", rf[i].hf ? rf[i].hf : "-", rf[i].gguf ? rf[i].gguf : "-",
                 rf[i].family, rf[i].reason);
        CHECKF(strstr(doc, row), "docs/models.md lacks the refused row \"%s\"", row);
    }
    const char *vars[] = { "HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HF_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE",
                           "CALDRIX_OFFLINE", "CALDRIX_CACHE", "CALDRIX_OLLAMA_REGISTRY", "CALDRIX_MEM_AVAILABLE" };
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        CHECKF(strstr(doc, vars[i]), "docs/models.md lacks %s", vars[i]);
    free(doc);
}

static void memory_estimate_is_weights_plus_kv(void)
{
    cdx_hub_config c = { .n_layer = 28, .n_kv_head = 8, .head_dim = 128, .ctx_max = 40960 };
    /* 2 (K,V) * 28 layers * 8 kv heads * 128 * 4096 tokens * 4 bytes */
    CHECK(cdx_hub_kv_bytes(&c, 0) == 2ull * 28 * 8 * 128 * 4096 * 4);
    CHECK(cdx_hub_ctx_for(&c, 100000) == 40960);
    /* a sliding window does not shrink the estimate: the engine's cache holds the whole context */
    c.sliding_window = 1024;
    CHECK(cdx_hub_ctx_for(&c, 0) == 4096 && cdx_hub_kv_bytes(&c, 0) == 2ull * 28 * 8 * 128 * 4096 * 4);
    cdx_hub_opts o = { .mem_available = 1000000 };
    cdx_err err = { 0 };
    CHECK(hub_check_memory("x/y", &c, 1000, &o, "Nothing was downloaded.", &err) == CDX_ERANGE);
    CHECK(strstr(err.msg, "x/y needs") && strstr(err.msg, "976.6 KiB available") && strstr(err.msg, "Options") &&
          strstr(err.msg, "--ctx"));
    o.skip_memory_check = true;
    CHECK(hub_check_memory("x/y", &c, 1000, &o, "", &err) == 0);
    o = (cdx_hub_opts){ .mem_available = 1ull << 40 };
    CHECK(hub_check_memory("x/y", &c, 1000, &o, "", &err) == 0);
    static const struct { const char *v; uint64_t bytes; } good[] = {
        { "2G", 2ull << 30 }, { "512KiB", 512ull << 10 }, { "1000", 1000 }, { "1.5M", 3ull << 19 }, { "7mb", 7ull << 20 },
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t m = 1;
        setenv("CALDRIX_MEM_AVAILABLE", good[i].v, 1);
        CHECKF(cdx_hub_mem_available(&m, &err) == 0 && m == good[i].bytes, "%s: %llu", good[i].v, (unsigned long long)m);
    }
    /* a malformed figure is refused by name, never replaced by /proc/meminfo's */
    static const char *const bad[] = { "lots", "2X", "-5", "2GG", "1e400", "nan", "inf", " 2G", "2G ", "0x10", "Gi" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t m = 1;
        memset(&err, 0, sizeof err);
        setenv("CALDRIX_MEM_AVAILABLE", bad[i], 1);
        CHECKF(cdx_hub_mem_available(&m, &err) == CDX_EINVAL && strstr(err.msg, "CALDRIX_MEM_AVAILABLE is \"") &&
               strstr(err.msg, bad[i]), "%s: %s", bad[i], err.msg);
        o = (cdx_hub_opts){ 0 };
        CHECKF(hub_check_memory("x/y", &c, 1000, &o, "", &err) == CDX_EINVAL, "admission with %s", bad[i]);
    }
    unsetenv("CALDRIX_MEM_AVAILABLE");
    uint64_t t, a;
    cdx_hub_meminfo(&t, &a);
    CHECK(t > 0 && a > 0 && a <= t);
}

/* Qwen3-30B-A3B's config.json in bf16 (61 GB): too big for 24 GB whole, admitted under a budget. */
static void a_mixture_of_experts_too_big_is_admitted_under_a_budget(void)
{
    cdx_hub_config c = { .n_layer = 48, .n_head = 32, .n_kv_head = 4, .head_dim = 128, .hidden = 2048, .vocab = 151936,
                         .ctx_max = 40960, .n_expert = 128, .n_expert_used = 8, .moe_ffn = 768 };
    const uint64_t w = 61060000000ull, gb = 1ull << 30;
    uint64_t dense, one;
    CHECK(cdx_hub_expert_split(&c, w, &dense, &one));
    /* 48 x 128 x 3 x 2048 x 768 expert parameters of ~30.5 B: about 29 GB of 30.5 B x 2 bytes are experts */
    CHECKF(dense > 1 * gb && dense < 4 * gb && one > 9000000 && one < 10000000, "dense %llu, one expert %llu",
           (unsigned long long)dense, (unsigned long long)one);
    cdx_hub_config dense_cfg = c;
    dense_cfg.n_expert = 0;
    CHECK(!cdx_hub_expert_split(&dense_cfg, w, &dense, &one));
    uint64_t chosen = 1;
    cdx_hub_opts o = { .mem_available = 24 * gb, .budget_out = &chosen };
    cdx_err err = { 0 };
    CHECKF(hub_check_memory("Qwen/Qwen3-30B-A3B", &c, w, &o, "", &err) == 0, "%s", err.msg);
    const uint64_t kv = cdx_hub_kv_bytes(&c, 0);
    CHECKF(chosen > 20 * gb && chosen + kv <= 24 * gb, "admitted with a budget of %llu", (unsigned long long)chosen);
    /* a budget given is what admission counts */
    o = (cdx_hub_opts){ .mem_available = 24 * gb, .weight_budget = 20 * gb, .budget_out = &chosen };
    CHECK(hub_check_memory("Qwen/Qwen3-30B-A3B", &c, w, &o, "", &err) == 0 && chosen == 0);
    o.weight_budget = 30 * gb;
    CHECK(hub_check_memory("Qwen/Qwen3-30B-A3B", &c, w, &o, "", &err) == CDX_ERANGE);
    CHECKF(strstr(err.msg, "--weight-budget") && strstr(err.msg, "fits; the least this model takes is"), "%s", err.msg);
    /* below the least budget nothing is admitted, and the refusal says a budget does not help */
    o = (cdx_hub_opts){ .mem_available = 1 * gb, .budget_out = &chosen };
    CHECK(hub_check_memory("Qwen/Qwen3-30B-A3B", &c, w, &o, "", &err) == CDX_ERANGE && chosen == 0);
    CHECKF(strstr(err.msg, "a weight budget does not help"), "%s", err.msg);
}

/* ---- folders and inspect ---- */

static void put(const char *dir, const char *name, const char *text)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void copy(const char *from, const char *dir, const char *name)
{
    size_t len;
    char *t = NULL;
    cdx_err err = { 0 };
    if (cdx_file_read_all(from, 64 << 20, &t, &len, &err) < 0)
        return;
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (f) {
        fwrite(t, 1, len, f);
        fclose(f);
    }
    free(t);
}

static void a_folder_is_checked_and_notes_name_files_not_read(void)
{
    char d[300];
    snprintf(d, sizeof d, "%s/ckpt", g_tmp);
    mkdir(d, 0755);
    copy(SHARED "/fixtures/hf/llama/config.json", d, "config.json");
    copy(SHARED "/fixtures/hf/llama/model.safetensors", d, "model.safetensors");
    cdx_err err = { 0 };
    char *note = NULL;
    CHECK(cdx_hub_check_dir(d, true, &note, &err) == CDX_ENOTFOUND && strstr(err.msg, "no supported tokenizer"));
    copy(SHARED "/fixtures/tokenizers/llama3/tokenizer.json", d, "tokenizer.json");
    CHECK(cdx_hub_check_dir(d, true, &note, &err) == 0 && note == NULL);
    copy(SHARED "/fixtures/hf/llama/model.safetensors", d, "consolidated.safetensors");
    CHECK(cdx_hub_check_dir(d, true, &note, &err) == 0 && note &&
          strstr(note, "reads model.safetensors (as transformers loads it); not read: consolidated.safetensors"));
    free(note);
    note = NULL;
    /* resolving the folder passes the note on and returns the folder */
    char *path = NULL;
    CHECK(cdx_hub_resolve(d, NULL, &path, &err) == 0 && path && !strcmp(path, d));
    free(path);
    /* a sharded folder whose index names a missing shard */
    char s[300];
    snprintf(s, sizeof s, "%s/sharded", g_tmp);
    mkdir(s, 0755);
    copy(SHARED "/fixtures/hf/llama3_rope/config.json", s, "config.json");
    copy(SHARED "/fixtures/hf/llama3_rope/model.safetensors.index.json", s, "model.safetensors.index.json");
    copy(SHARED "/fixtures/hf/llama3_rope/model-00001-of-00002.safetensors", s, "model-00001-of-00002.safetensors");
    copy(SHARED "/fixtures/tokenizers/llama3/tokenizer.json", s, "tokenizer.json");
    CHECK(cdx_hub_check_dir(s, true, &note, &err) == CDX_EFORMAT && strstr(err.msg, "model-00002-of-00002"));
    /* a refused config fails the check only when asked to apply the rules */
    char m[300];
    snprintf(m, sizeof m, "%s/mixtral", g_tmp);
    mkdir(m, 0755);
    copy(SHARED "/fixtures/hf/mixtral/config.json", m, "config.json");
    copy(SHARED "/fixtures/hf/mixtral/model.safetensors", m, "model.safetensors");
    put(m, "vocab.json", "{\"a\":0,\"b\":1}");
    put(m, "merges.txt", "#version: 0.2\na b\n");
    put(m, "config.json", "{\"architectures\":[\"MixtralForCausalLM\"],\"hidden_act\":\"gelu\",\"hidden_size\":64,"
                          "\"num_hidden_layers\":3,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":96,\"vocab_size\":320}");
    CHECK(cdx_hub_check_dir(m, false, NULL, &err) == 0);
    CHECKF(cdx_hub_check_dir(m, true, NULL, &err) == CDX_EUNSUPPORTED && strstr(err.msg, "hidden_act is \"gelu\""), "%s", err.msg);
    put(m, "merges.txt", "a b c\n");
    CHECK(cdx_hub_check_dir(m, false, NULL, &err) == CDX_EFORMAT && strstr(err.msg, "merges.txt line 1"));
    put(m, "merges.txt", "a b\n");
    put(m, "tokenizer_config.json", "{\"tokenizer_class\":\"BertTokenizer\"}");
    CHECK(cdx_hub_check_dir(m, false, NULL, &err) == CDX_EUNSUPPORTED && strstr(err.msg, "BertTokenizer"));
}

static void inspect_agrees_with_the_format_readers_on_every_fixture(void)
{
    static const char *const hf[] = { "llama", "llama_bf16", "llama_f16", "llama3_rope", "mistral", "qwen2", "qwen3",
                                      "qwen3_moe", "mixtral", "qwen2_moe" };
    for (size_t i = 0; i < sizeof hf / sizeof hf[0]; i++) {
        char p[300];
        snprintf(p, sizeof p, SHARED "/fixtures/hf/%s", hf[i]);
        cdx_hub_report r;
        cdx_err err = { 0 };
        int rc = cdx_hub_inspect_path(p, &r, &err);
        CHECKF(rc == 0, "%s: %s", hf[i], err.msg);
        cdx_safetensors *st = NULL;
        REQUIRE(cdx_st_open(p, &st, &err) == 0);
        CHECKF(r.n_tensors == st->n_tensors, "%s: %llu vs %llu", hf[i], (unsigned long long)r.n_tensors,
               (unsigned long long)st->n_tensors);
        uint64_t bytes = 0;
        for (uint64_t k = 0; k < st->n_tensors; k++)
            bytes += st->tensors[k].n_bytes;
        CHECK(r.weight_bytes == bytes);
        cdx_st_close(st);
        CHECKF(!strcmp(r.missing_required_tensors, "none"), "%s: %s", hf[i], r.missing_required_tensors);
        CHECKF(!strcmp(r.unused_tensors, "none"), "%s: %s", hf[i], r.unused_tensors);
        CHECK(!strcmp(r.unsupported_tensor_types, "none"));
        CHECK(r.n_layer == 3 && r.hidden == 64 && r.n_head == 4 && r.n_kv_head == 2 && r.ctx == 256);
        CHECKF(!r.refusal[0], "%s: refusal \"%s\"", hf[i], r.refusal);
    }
    static const char *const gg[] = { "llama", "llama3_rope", "llama_bf16", "llama_f16", "mixtral", "qwen2",
                                      "qwen2_moe", "qwen3" };
    for (size_t i = 0; i < sizeof gg / sizeof gg[0]; i++) {
        char p[300];
        snprintf(p, sizeof p, SHARED "/fixtures/hf-gguf/%s.gguf", gg[i]);
        cdx_hub_report r;
        cdx_err err = { 0 };
        CHECKF(cdx_hub_inspect_path(p, &r, &err) == 0, "%s: %s", gg[i], err.msg);
        cdx_gguf *g = NULL;
        REQUIRE(cdx_gguf_open(p, &g, &err) == 0);
        CHECK(r.n_tensors == g->n_tensors && r.n_metadata == g->n_kv);
        cdx_gguf_close(g);
        CHECKF(!strcmp(r.missing_required_tensors, "none"), "%s: %s", gg[i], r.missing_required_tensors);
        CHECK(!strcmp(r.unsupported_tensor_types, "none") && !strncmp(r.tensor_types, "f32=", 4));
        CHECK(r.n_layer == 3 && r.n_head == 4 && r.n_kv_head == 2 && r.kv_ctx == 256 && !r.refusal[0]);
        CHECK(!strcmp(r.family, !strcmp(gg[i], "mixtral") ? "mixtral" : !strcmp(gg[i], "qwen2_moe") ? "qwen2_moe"
                               : !strncmp(gg[i], "llama", 5) ? "llama" : gg[i]));
    }
    cdx_hub_report r;
    cdx_err err = { 0 };
    CHECK(cdx_hub_inspect_path(SHARED "/models/stories260K/stories260K.gguf", &r, &err) == 0 &&
          !strcmp(r.architecture, "llama") && !strcmp(r.missing_required_tensors, "none"));
}

static void inspect_reports_missing_tensors_and_refuses_malformed_files(void)
{
    char d[300];
    cdx_err err = { 0 };
    cdx_hub_report r;
    /* a checkpoint missing a layer's tensor: a count and the names */
    snprintf(d, sizeof d, "%s/missing", g_tmp);
    mkdir(d, 0755);
    copy(SHARED "/fixtures/hf/llama/config.json", d, "config.json");
    cdx_safetensors *st = NULL;
    REQUIRE(cdx_st_open(SHARED "/fixtures/hf/llama", &st, &err) == 0);
    cdx_st_writer *w = NULL;
    REQUIRE(cdx_st_writer_new(&w, &err) == 0);
    for (uint64_t i = 0; i < st->n_tensors; i++) {
        const cdx_st_tensor *t = &st->tensors[i];
        if (!strcmp(t->name, "model.layers.1.mlp.up_proj.weight"))
            continue;
        REQUIRE(cdx_st_writer_add(w, t->name, t->type, t->n_dims, t->shape, t->data, &err) == 0);
    }
    uint64_t shape[1] = { 4 };
    float extra[4] = { 0 };
    REQUIRE(cdx_st_writer_add(w, "model.layers.0.mlp.extra.weight", CDX_TYPE_F32, 1, shape, extra, &err) == 0);
    char p[400];
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    REQUIRE(cdx_st_writer_write(w, p, &err) == 0);
    cdx_st_writer_free(w);
    cdx_st_close(st);
    CHECK(cdx_hub_inspect_path(d, &r, &err) == 0);
    CHECK(r.n_missing == 1 && strstr(r.missing_required_tensors, "model.layers.1.mlp.up_proj.weight"));
    /* the verdict is the loader's, with its message: the first tensor it misses */
    CHECKF(r.n_unused == 1 && strstr(r.unused_tensors, "model.layers.0.mlp.extra.weight") &&
           strstr(r.refusal, "\"model.layers.1.mlp.up_proj.weight\" is missing"), "refusal %s", r.refusal);

    /* malformed files give an error, never a crash */
    static const struct { const char *name; const char *bytes; size_t n; const char *msg; } bad[] = {
        { "short.gguf", "GGUF\3\0\0\0", 8, "" },
        { "garbage.bin", "hello world", 11, "not a GGUF file" },
        { "empty.gguf", "", 0, "" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", g_tmp, bad[i].name);
        FILE *f = fopen(p, "wb");
        REQUIRE(f);
        fwrite(bad[i].bytes, 1, bad[i].n, f);
        fclose(f);
        memset(&err, 0, sizeof err);
        int rc = cdx_hub_inspect_path(p, &r, &err);
        CHECKF(rc < 0 && err.msg[0] && strstr(err.msg, bad[i].msg), "%s: rc %d %s", bad[i].name, rc, err.msg);
    }
    /* a truncated copy of a real GGUF */
    cdx_file *fm = NULL;
    REQUIRE(cdx_file_map(SHARED "/fixtures/hf-gguf/qwen3.gguf", &fm, &err) == 0);
    snprintf(p, sizeof p, "%s/trunc.gguf", g_tmp);
    FILE *tf = fopen(p, "wb");
    REQUIRE(tf);
    fwrite(fm->data, 1, fm->size / 2, tf);
    fclose(tf);
    cdx_file_unmap(fm);
    memset(&err, 0, sizeof err);
    CHECK(cdx_hub_inspect_path(p, &r, &err) < 0 && err.msg[0]);
    /* safetensors headers: a length past the end, offsets outside the data, not JSON */
    snprintf(d, sizeof d, "%s/badst", g_tmp);
    mkdir(d, 0755);
    copy(SHARED "/fixtures/hf/llama/config.json", d, "config.json");
    static const struct { const char *hdr; const char *msg; } sth[] = {
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,80]}}", "outside" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", "data_offsets" },
        { "not json at all", "not a JSON object" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3,4,5,6,7,8,9,10],\"data_offsets\":[0,8]}}", "at most 8 dimensions" },
        /* a size the dtype and shape contradict, in a dtype caldrix does not compute with: still checked */
        { "{\"a\":{\"dtype\":\"I8\",\"shape\":[3],\"data_offsets\":[0,8]}}", "need 3" },
    };
    for (size_t i = 0; i < sizeof sth / sizeof sth[0]; i++) {
        snprintf(p, sizeof p, "%s/model.safetensors", d);
        FILE *f = fopen(p, "wb");
        REQUIRE(f);
        uint64_t hl = strlen(sth[i].hdr);
        uint8_t b8[8];
        for (int k = 0; k < 8; k++)
            b8[k] = (uint8_t)(hl >> (8 * k));
        fwrite(b8, 1, 8, f);
        fwrite(sth[i].hdr, 1, hl, f);
        fwrite("12345678", 1, 8, f);
        fclose(f);
        memset(&err, 0, sizeof err);
        CHECKF(cdx_hub_inspect_path(d, &r, &err) == CDX_EFORMAT && strstr(err.msg, sth[i].msg), "%zu: %s", i, err.msg);
    }
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    FILE *f = fopen(p, "wb");
    REQUIRE(f);
    fwrite("\xff\xff\xff\xff\x00\x00\x00\x00{}", 1, 10, f);
    fclose(f);
    CHECK(cdx_hub_inspect_path(d, &r, &err) == CDX_EFORMAT && strstr(err.msg, "header length"));
    put(d, "config.json", "{not json");
    CHECK(cdx_hub_inspect_path(d, &r, &err) == CDX_EFORMAT && strstr(err.msg, "not valid JSON"));
    CHECK(cdx_hub_inspect_path("/nonexistent", &r, &err) == CDX_ENOTFOUND);
}

/* A one-file checkpoint from a header and zero data (the bytes the header's offsets span). */
static void put_st(const char *dir, const char *hdr, size_t n_data)
{
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    FILE *f = fopen(p, "wb");
    if (!f)
        return;
    uint64_t hl = strlen(hdr);
    uint8_t b8[8];
    for (int k = 0; k < 8; k++)
        b8[k] = (uint8_t)(hl >> (8 * k));
    fwrite(b8, 1, 8, f);
    fwrite(hdr, 1, hl, f);
    for (size_t i = 0; i < n_data; i++)
        fputc(0, f);
    fclose(f);
}

/* Seed 000's tensor rules, which only the weights' headers can show. */
static void inspect_applies_the_seeds_tensor_rules(void)
{
    char d[300];
    cdx_err err = { 0 };
    cdx_hub_report r;
    snprintf(d, sizeof d, "%s/tensor_rules", g_tmp);
    mkdir(d, 0755);
    /* any tensor stored as a type other than f32, f16 or bf16 */
    copy(SHARED "/fixtures/hf/llama/config.json", d, "config.json");
    put_st(d, "{\"model.embed_tokens.weight\":{\"dtype\":\"I8\",\"shape\":[2,2],\"data_offsets\":[0,4]},"
              "\"model.norm.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[4,6]}}", 6);
    /* the report lists both; the refusal is the loader's (its reader stops at the first) */
    CHECKF(cdx_hub_inspect_path(d, &r, &err) == 0 && strstr(r.unsupported_tensor_types, "I8") &&
           strstr(r.unsupported_tensor_types, "F8_E4M3") && strstr(r.refusal, "has dtype I8") &&
           strstr(r.refusal, "F32, F16 and BF16"), "rc msg %s, refusal %s", err.msg, r.refusal);
    /* an lm_head.weight beside a tied embedding (llama3_rope is tied): one of another shape is refused,
     * one of another type runs (the loader binds a head of any type it computes with), as transformers does */
    cdx_safetensors *st = NULL;
    REQUIRE(cdx_st_open(SHARED "/fixtures/hf/llama3_rope", &st, &err) == 0);
    const cdx_st_tensor *emb = cdx_st_find(st, "model.embed_tokens.weight");
    REQUIRE(emb && emb->type == CDX_TYPE_F32 && emb->n_dims == 2);
    copy(SHARED "/fixtures/hf/llama3_rope/config.json", d, "config.json");
    const uint64_t n = emb->shape[0] * emb->shape[1];
    uint16_t *half = calloc((size_t)n, sizeof *half);
    REQUIRE(half);
    for (uint64_t i = 0; i < n; i++)
        half[i] = cdx_f32_to_f16(((const float *)emb->data)[i]);
    const uint64_t wide[2] = { emb->shape[0], emb->shape[1] + 1 };
    static const struct { int kind; bool refused; } heads[] = { { 0, true }, { 1, false }, { 2, false } };
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
        cdx_st_writer *w = NULL;
        REQUIRE(cdx_st_writer_new(&w, &err) == 0);
        for (uint64_t k = 0; k < st->n_tensors; k++)
            REQUIRE(cdx_st_writer_add(w, st->tensors[k].name, st->tensors[k].type, st->tensors[k].n_dims,
                                      st->tensors[k].shape, st->tensors[k].data, &err) == 0);
        float *pad = heads[i].kind == 0 ? calloc((size_t)(wide[0] * wide[1]), sizeof(float)) : NULL;
        REQUIRE(heads[i].kind != 0 || pad);
        REQUIRE((heads[i].kind == 0 ? cdx_st_writer_add(w, "lm_head.weight", CDX_TYPE_F32, 2, wide, pad, &err)
                 : heads[i].kind == 1 ? cdx_st_writer_add(w, "lm_head.weight", CDX_TYPE_F16, 2, emb->shape, half, &err)
                                      : cdx_st_writer_add(w, "lm_head.weight", CDX_TYPE_F32, 2, emb->shape, emb->data,
                                                          &err)) == 0);
        char p[400];
        snprintf(p, sizeof p, "%s/model.safetensors", d);
        REQUIRE(cdx_st_writer_write(w, p, &err) == 0);
        cdx_st_writer_free(w);
        free(pad);
        memset(&err, 0, sizeof err);
        REQUIRE(cdx_hub_inspect_path(d, &r, &err) == 0);
        bool refused = strstr(r.refusal, "\"lm_head.weight\" has shape") != NULL;
        CHECKF(refused == heads[i].refused, "head %zu: refusal \"%s\"", i, r.refusal);
        if (!heads[i].refused)
            CHECKF(!r.refusal[0] && strstr(r.note, "runs with the shipped head"), "head %zu: note \"%s\" refusal "
                   "\"%s\"", i, r.note, r.refusal);
    }
    free(half);
    cdx_st_close(st);
}

static void the_gguf_peek_sizes_a_model_from_its_first_bytes(void)
{
    cdx_file *f = NULL;
    cdx_err err = { 0 };
    REQUIRE(cdx_file_map(SHARED "/fixtures/hf-gguf/qwen3.gguf", &f, &err) == 0);
    cdx_hub_config c;
    size_t n = f->size < (512u << 10) ? f->size : (512u << 10);
    CHECK(hub_gguf_peek(f->data, n, &c) && !strcmp(c.arch, "qwen3") && c.n_layer == 3 && c.n_kv_head == 2 &&
          c.head_dim == 32 && c.ctx_max == 256);
    /* every shorter prefix is judged without reading past it (ASan watches) */
    for (size_t k = 0; k < 2048 && k < f->size; k += 7) {
        uint8_t *copy_buf = malloc(k ? k : 1);
        memcpy(copy_buf, f->data, k);
        hub_gguf_peek(copy_buf, k, &c);
        free(copy_buf);
    }
    cdx_file_unmap(f);
    CHECK(!hub_gguf_peek((const uint8_t *)"GGML....", 8, &c));
}

/* What cdx_hub_resolve returns for a Hub model (a snapshot of relative links into blobs/) is what
 * the model layer opens. */
static void a_cache_snapshot_opens_in_the_model_layer(void)
{
    char snap[400], blobs[400];
    cdx_err err = { 0 };
    snprintf(snap, sizeof snap, "%s/models--o--m/snapshots/0123456789abcdef0123456789abcdef01234567", g_tmp);
    snprintf(blobs, sizeof blobs, "%s/models--o--m/blobs", g_tmp);
    REQUIRE(hub_mkdirs(snap, &err) == 0 && hub_mkdirs(blobs, &err) == 0);
    static const char *const files[] = { "config.json", "model.safetensors", "generation_config.json" };
    for (int i = 0; i < 3; i++) {
        char src[300], blob[500], link[500], hex[65];
        snprintf(src, sizeof src, SHARED "/fixtures/hf/qwen3/%s", files[i]);
        REQUIRE(cdx_sha256_file(src, hex, &err) == 0);
        copy(src, blobs, hex);
        snprintf(blob, sizeof blob, "%s/%s", blobs, hex);
        snprintf(link, sizeof link, "%s/%s", snap, files[i]);
        REQUIRE(hub_symlink_relative(blob, link, &err) == 0);
        char target[200];
        ssize_t n = readlink(link, target, sizeof target - 1);
        REQUIRE(n > 0);
        target[n] = 0;
        char want[200];
        snprintf(want, sizeof want, "../../blobs/%s", hex);
        CHECKF(!strcmp(target, want), "%s -> %s", files[i], target);
    }
    cdx_model *m = NULL;
    CHECKF(cdx_model_open(snap, NULL, &m, &err) == 0, "%s", err.msg);
    if (m) {
        CHECK(cdx_model_hparams(m)->n_layer == 3);
        cdx_model_close(m);
    }
}

static void disk_free_finds_the_nearest_parent(void)
{
    uint64_t fb = 0;
    CHECK(cdx_hub_disk_free("/nonexistent/deeper/path", &fb, NULL) == 0 && fb > 0);
}

int main(void)
{
    snprintf(g_tmp, sizeof g_tmp, "/tmp/caldrix-hub-test.XXXXXX");
    if (!mkdtemp(g_tmp))
        return 1;
    RUN("sha256 matches the FIPS 180 examples", sha256_matches_fips_180_examples);
    RUN("a mixture of experts too big for memory is admitted under a weight budget, and the refusal proposes one",
        a_mixture_of_experts_too_big_is_admitted_under_a_budget);
    RUN("sha256 of a file equals the streamed digest", sha256_of_a_file_equals_the_streamed_digest);
    RUN("references parse into their kinds", references_parse_into_their_kinds);
    RUN("the alias table is the seed's", the_alias_table_is_the_seeds);
    RUN("environment follows huggingface_hub", environment_follows_huggingface_hub);
    RUN("the cache folder and refs are huggingface_hub's", the_cache_folder_and_refs_are_huggingface_hubs);
    RUN("every fixture config is judged by architecture", every_fixture_config_is_judged_by_architecture);
    RUN("each refusal names the field and the value", each_refusal_names_the_field_and_the_value);
    RUN("the rule table has ids, fields and docs", the_rule_table_has_ids_fields_and_docs);
    RUN("inspect applies the seed's tensor rules (stored types, a tied head that differs)",
        inspect_applies_the_seeds_tensor_rules);
    RUN("memory estimate is weights plus KV", memory_estimate_is_weights_plus_kv);
    RUN("a folder is checked and notes name files not read", a_folder_is_checked_and_notes_name_files_not_read);
    RUN("inspect agrees with the format readers on every fixture", inspect_agrees_with_the_format_readers_on_every_fixture);
    RUN("inspect reports missing tensors and refuses malformed files",
        inspect_reports_missing_tensors_and_refuses_malformed_files);
    RUN("the gguf peek sizes a model from its first bytes", the_gguf_peek_sizes_a_model_from_its_first_bytes);
    RUN("a cache snapshot opens in the model layer", a_cache_snapshot_opens_in_the_model_layer);
    RUN("disk free finds the nearest existing parent", disk_free_finds_the_nearest_parent);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_tmp);
    return t_done("hub");
}
