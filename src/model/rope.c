/* RoPE frequencies and their scaling: one computation for every family, from config.json's
 * rope_scaling or a GGUF file's rope.scaling.* keys (model_load.c fills a rope_scaling from either).
 * Each kind transcribes transformers' modeling_rope_utils.py (v5: _compute_*_parameters and
 * dynamic_rope_update), in the same float32 steps where the result is a float32 tensor. */
#include "arch.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void note(cdx_model *m, const char *fmt, ...)
{
    size_t used = strlen(m->notes);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->notes + used, sizeof m->notes - used, fmt, ap);
    va_end(ap);
}

/* _compute_default_rope_parameters: 1 / base^(2i/d), the exponent a float32 */
static void default_freqs(double base, int64_t n_rot, float *out)
{
    for (int64_t i = 0; i < n_rot / 2; i++) {
        const float e = (float)(2 * i) / (float)n_rot;
        out[i] = (float)(1.0 / pow(base, (double)e));
    }
}

/* _compute_default_rope_parameters as PyTorch computes it: 1.0 / (base ** (arange(0, dim, 2).float() / dim)),
 * every step in f32 (the base cast to float, powf). default_freqs' double arithmetic differs from it by an ulp in
 * about a third of the entries, which the f32 pass does not see and the bf16 pass does: positions times an ulp
 * move cos/sin across bf16 rounding points (OLMo 2's f32 rotation most: 15 of 48 golden steps bit-identical on
 * AVX2 with default_freqs). */
static void torch_freqs(double base, int64_t n_rot, float *out)
{
    for (int64_t i = 0; i < n_rot / 2; i++)
        out[i] = 1.0f / powf((float)base, (float)(2 * i) / (float)n_rot);
}

/* _compute_llama3_parameters */
static void llama3(const rope_scaling *rs, int64_t half, float *f)
{
    const double factor = rs->factor, low = rs->low_freq_factor, high = rs->high_freq_factor, orig = (double)rs->orig_ctx;
    const double low_wl = orig / low, high_wl = orig / high;
    for (int64_t i = 0; i < half; i++) {
        const double x = f[i], wl = 2 * M_PI / x;
        double nf;
        if (wl < high_wl)
            nf = x;
        else if (wl > low_wl)
            nf = x / factor;
        else {
            const double s = (orig / wl - low) / (high - low);
            nf = (1 - s) * x / factor + s * x;
        }
        f[i] = (float)nf;
    }
}

/* _compute_yarn_parameters: get_mscale(scale, mscale) */
static double yarn_mscale(double scale, double mscale)
{
    return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

/* find_correction_dim */
static double yarn_corr_dim(double rot, double dim, double base, double orig)
{
    return dim * log(orig / (rot * 2 * M_PI)) / (2 * log(base));
}

/* _compute_yarn_parameters: the extrapolated and interpolated frequencies mixed by a linear ramp over
 * the pairs between the correction dims of beta_fast and beta_slow rotations; the attention factor.
 * torch: pos_freqs as PyTorch computes base ** (arange(0, dim, 2).float() / dim), a powf in f32 (the bf16
 * pass's frequencies, as torch_freqs); else the base's power in double, rounded (the f32 pass's). */
static double yarn(const rope_scaling *rs, double base, int64_t n_rot, float *f, bool torch)
{
    const double factor = rs->factor, dim = (double)n_rot;
    double att = rs->attn_factor;
    if (!(att > 0))
        att = rs->mscale > 0 && rs->mscale_all_dim > 0
                  ? yarn_mscale(factor, rs->mscale) / yarn_mscale(factor, rs->mscale_all_dim)
                  : yarn_mscale(factor, 1);
    const double beta_fast = rs->beta_fast > 0 ? rs->beta_fast : 32, beta_slow = rs->beta_slow > 0 ? rs->beta_slow : 1;
    double low = yarn_corr_dim(beta_fast, dim, base, (double)rs->orig_ctx);
    double high = yarn_corr_dim(beta_slow, dim, base, (double)rs->orig_ctx);
    if (rs->truncate) {
        low = floor(low);
        high = ceil(high);
    }
    low = low > 0 ? low : 0;
    high = high < dim - 1 ? high : dim - 1;
    if (low == high)
        high += 0.001; /* linear_ramp_factor: prevent singularity */
    const float flo = (float)low, span = (float)(high - low), ff = (float)factor;
    for (int64_t i = 0; i < n_rot / 2; i++) {
        const float e = (float)(2 * i) / (float)n_rot;
        const float pos = torch ? powf((float)base, e) : (float)pow(base, (double)e); /* pos_freqs */
        const float extra = 1.0f / pos, inter = 1.0f / (ff * pos);
        float ramp = ((float)i - flo) / span;
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        const float ext = 1.0f - ramp;                    /* inv_freq_extrapolation_factor */
        f[i] = inter * (1.0f - ext) + extra * ext;
    }
    return att;
}

/* _compute_longrope_parameters: 1 / (ext · base^(2i/d)) per factor set; the attention factor */
static double longrope(const rope_scaling *rs, double base, int64_t n_rot, float *shrt, float *lng)
{
    double att = rs->attn_factor;
    if (!(att > 0))
        att = rs->factor <= 1.0 ? 1.0 : sqrt(1 + log(rs->factor) / log((double)rs->orig_ctx));
    for (int64_t i = 0; i < n_rot / 2; i++) {
        const float e = (float)(2 * i) / (float)n_rot;
        const float p = (float)pow(base, (double)e);
        shrt[i] = 1.0f / (rs->short_f[i] * p);
        lng[i] = 1.0f / (rs->long_f[i] * p);
    }
    return att;
}

/* The same frequencies as PyTorch computes them (the bf16 pass's): 1.0 / (ext_factors * base ** (arange(0, dim,
 * 2).float() / dim)), every step in f32 (the factors as float32, powf, as torch_freqs). */
static void longrope_torch(const rope_scaling *rs, double base, int64_t n_rot, float *shrt, float *lng)
{
    for (int64_t i = 0; i < n_rot / 2; i++) {
        const float p = powf((float)base, (float)(2 * i) / (float)n_rot);
        shrt[i] = 1.0f / ((float)rs->short_f[i] * p);
        lng[i] = 1.0f / ((float)rs->long_f[i] * p);
    }
}

static const char *kind_name(cdx_hf_rope_type t)
{
    switch (t) {
    case CDX_HF_ROPE_LINEAR: return "linear";
    case CDX_HF_ROPE_LLAMA3: return "llama3";
    case CDX_HF_ROPE_DYNAMIC: return "dynamic";
    case CDX_HF_ROPE_YARN: return "yarn";
    case CDX_HF_ROPE_LONGROPE: return "longrope";
    default: return "default";
    }
}

int rope_init(cdx_model *m, const float *freq_factors, const rope_scaling *rs, const char *path, cdx_err *err)
{
    cdx_hparams *hp = &m->hp;
    const int64_t half = hp->n_rot / 2;
    if (!(m->inv_freq = malloc((size_t)half * sizeof(float))))
        return cdx_err_set(err, CDX_ENOMEM, "out of memory");
    default_freqs(hp->rope_theta, hp->n_rot, m->inv_freq);
    for (int64_t i = 0; freq_factors && i < half; i++) /* GGUF rope_freqs.weight (Llama 3's, as a tensor) */
        m->inv_freq[i] /= freq_factors[i];
    if (hp->rope_theta_swa > 0) { /* Gemma3's sliding layers: their own base, the default rotation */
        if (!(m->inv_freq_swa = malloc((size_t)half * sizeof(float))))
            return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        default_freqs(hp->rope_theta_swa, hp->n_rot, m->inv_freq_swa);
    }
    const cdx_hf_rope_type t = rs ? rs->type : CDX_HF_ROPE_DEFAULT;
    if (hp->rope_theta_swa > 0) {
        if (!(m->bf16_freq_swa = malloc((size_t)half * sizeof(float))))
            return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        torch_freqs(hp->rope_theta_swa, hp->n_rot, m->bf16_freq_swa);
    }
    if (t == CDX_HF_ROPE_DEFAULT && !freq_factors) {
        if (!(m->bf16_freq = malloc((size_t)half * sizeof(float))))
            return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        torch_freqs(hp->rope_theta, hp->n_rot, m->bf16_freq);
    }
    if (t == CDX_HF_ROPE_DEFAULT)
        return CDX_OK;
    if (hp->linear_layer && t != CDX_HF_ROPE_LINEAR && t != CDX_HF_ROPE_LLAMA3)
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: rope scaling \"%s\" is computed for the dense families; "
                           "the %s architecture's pass does not apply it", path, kind_name(t), hp->arch_name);
    if (!(rs->factor > 0) || rs->factor >= 1e6)
        return cdx_err_set(err, CDX_EFORMAT, "%s: rope scaling \"%s\": factor %g; expected a positive factor", path,
                           kind_name(t), rs->factor);
    if ((t != CDX_HF_ROPE_LINEAR && t != CDX_HF_ROPE_DYNAMIC) && rs->orig_ctx < 1)
        return cdx_err_set(err, CDX_EFORMAT, "%s: rope scaling \"%s\" needs the original context length "
                           "(original_max_position_embeddings)", path, kind_name(t));
    switch (t) {
    case CDX_HF_ROPE_LINEAR: /* _compute_linear_scaling_rope_parameters: inv_freq / factor (f32) */
        for (int64_t i = 0; i < half; i++)
            m->inv_freq[i] /= (float)rs->factor;
        note(m, "linear rope scaling applied (factor %g)\n", rs->factor);
        return CDX_OK;
    case CDX_HF_ROPE_LLAMA3:
        if (!(rs->low_freq_factor > 0) || !(rs->high_freq_factor > rs->low_freq_factor))
            return cdx_err_set(err, CDX_EFORMAT,
                               "%s: rope_scaling (llama3) needs factor, low_freq_factor < high_freq_factor and "
                               "original_max_position_embeddings, all positive", path);
        llama3(rs, half, m->inv_freq);
        note(m, "llama3 rope scaling applied (factor %g)\n", rs->factor);
        return CDX_OK;
    case CDX_HF_ROPE_YARN:
        hp->rope_attn_factor = (float)yarn(rs, hp->rope_theta, hp->n_rot, m->inv_freq, false);
        if (!(m->bf16_freq = malloc((size_t)half * sizeof(float))))
            return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        yarn(rs, hp->rope_theta, hp->n_rot, m->bf16_freq, true);
        note(m, "yarn rope scaling applied (factor %g, original context %lld, attention factor %g)\n", rs->factor,
             (long long)rs->orig_ctx, (double)hp->rope_attn_factor);
        return CDX_OK;
    case CDX_HF_ROPE_DYNAMIC:
        if (hp->n_rot < 4 || rs->max_pos < 1)
            return cdx_err_set(err, CDX_EFORMAT, "%s: dynamic rope scaling needs max_position_embeddings and at least "
                               "4 rotated dimensions (it has %lld)", path, (long long)hp->n_rot);
        hp->rope_pass = CDX_ROPE_PASS_DYNAMIC;
        hp->rope_pass_ctx = rs->max_pos;
        hp->rope_pass_factor = rs->factor;
        note(m, "dynamic NTK rope scaling applied past %lld positions (factor %g)\n", (long long)rs->max_pos,
             rs->factor);
        return CDX_OK;
    case CDX_HF_ROPE_LONGROPE:
        if (!rs->short_f || !rs->long_f)
            return cdx_err_set(err, CDX_EFORMAT, "%s: longrope needs short and long factors, %lld each", path,
                               (long long)half);
        if (!(m->inv_freq_long = malloc((size_t)half * sizeof(float))))
            return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        hp->rope_attn_factor = (float)longrope(rs, hp->rope_theta, hp->n_rot, m->inv_freq, m->inv_freq_long);
        if (!(m->bf16_freq = malloc((size_t)half * sizeof(float))) ||
            !(m->bf16_freq_long = malloc((size_t)half * sizeof(float))))
            return cdx_err_set(err, CDX_ENOMEM, "out of memory");
        longrope_torch(rs, hp->rope_theta, hp->n_rot, m->bf16_freq, m->bf16_freq_long);
        hp->rope_pass = CDX_ROPE_PASS_LONGROPE;
        hp->rope_pass_ctx = rs->orig_ctx;
        note(m, "longrope scaling applied (long factors past %lld positions, attention factor %g)\n",
             (long long)rs->orig_ctx, (double)hp->rope_attn_factor);
        return CDX_OK;
    default:
        return cdx_err_set(err, CDX_EUNSUPPORTED, "%s: rope scaling kind %d is not computed", path, (int)t);
    }
}

void rope_dynamic_freqs(const cdx_hparams *hp, int64_t T, float *out)
{
    /* _compute_dynamic_ntk_parameters with seq_len = max(T, max_position_embeddings) */
    const double maxp = (double)hp->rope_pass_ctx, f = hp->rope_pass_factor, d = (double)hp->n_rot;
    const double seq = (double)T > maxp ? (double)T : maxp;
    const double base = hp->rope_theta * pow(f * seq / maxp - (f - 1), d / (d - 2));
    default_freqs(base, hp->n_rot, out);
}

bool cdx_model_rope_restart(const cdx_model *m, int64_t cached_len, int64_t len)
{
    const cdx_hparams *hp = &m->hp;
    return hp->rope_pass == CDX_ROPE_PASS_LONGROPE && cached_len > 0 &&
           (cached_len > hp->rope_pass_ctx) != (len > hp->rope_pass_ctx);
}
