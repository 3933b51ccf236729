#!/usr/bin/env python3
"""Makes tests/golden/bf16-<family>.json: PyTorch bfloat16 goldens of the dense families beyond Llama / Qwen
(granite, olmo2, smollm3, gemma, gemma2, gemma3) on their ../shared/fixtures/hf checkpoints, computed the way
transformers computes a checkpoint loaded with from_pretrained(torch_dtype=torch.bfloat16) on CPU with eager
attention. Per case (the prompts of the fixture's own golden.json): the 16 greedy tokens, each step's top-5
logits (bf16 values read as float), the top-1/top-2 gap and near_tie (gap < 0.05).

The cast points shared with Llama are those of ../shared/fixtures/hf/INDEX.md ("bf16 semantics") and come from
../shared/tools/fixtures/hf/hf_reference_bf16.py: its matmul (bf16 operands, exact products summed in f32 in k
order, bias added, one rounding: what PyTorch 2.x's CPU gemm does; torch 1.13's own bf16 gemm, which rounds after
every term, is not used) and its generate() pick. Everything a family does on top is written out here from the
transformers modeling code, one comment per cast point (huggingface/transformers as stored in our snapshot index):

  granite   modeling_granite.py @ 00aca8155c457c087b7a14160f335fe8e40afc0c: GraniteRMSNorm is LlamaRMSNorm
            (bf16(h) then w·h in bf16); GraniteRotaryEmbedding returns cos/sin .to(x.dtype); GraniteModel:
            inputs_embeds * embedding_multiplier, GraniteDecoderLayer: residual + hidden_states *
            residual_multiplier (after attention and after the MLP), GraniteAttention.scaling =
            attention_multiplier, GraniteForCausalLM: logits / logits_scaling. Each "* multiplier" is a bf16
            tensor times a Python float: PyTorch 2.x's CPU mul/div kernels keep the scalar in float (opmath) and
            round once (mul_scalar / div_scalar below).
  olmo2     modeling_olmo2.py @ 000c33fdfde12e1ffafbfcdb3c926df5727a00b6: Olmo2RMSNorm returns
            (self.weight * hidden_states).to(input_dtype): the f32 normed value times the bf16 weight in f32, one
            rounding (not Llama's two); q_norm / k_norm over the whole projection; Olmo2RotaryEmbedding returns
            cos and sin in f32 (no .to(x.dtype)) and apply_rotary_pos_emb returns q_embed.to(q_type): q·cos +
            rotate_half(q)·sin computed in f32 (bf16 q promoted), rounded once; no input norms, post-norms.
  smollm3   modeling_smollm3.py (SmolLM3 is Llama: LlamaRMSNorm, cos/sin .to(x.dtype)) with use_rope =
            no_rope_layers[layer_idx]: a layer with 0 rotates nothing.
  gemma     modeling_gemma.py: GemmaRMSNorm: _norm(x.float()) * (1.0 + weight.float()), .type_as(x): f32 all
            through, one rounding; GemmaModel: hidden * torch.tensor(hidden_size**0.5, dtype=bf16) (the
            normalizer itself rounded to bf16, then a bf16 product); GemmaMLP: down(gelu_pytorch_tanh(gate) * up),
            the tanh GELU on bf16 computed in f32 and rounded once (PyTorch 2.x's GeluKernel for reduced floats);
            scaling head_dim**-0.5 (a Python float, as #8); GemmaRotaryEmbedding cos/sin .to(x.dtype).
  gemma2    modeling_gemma2.py @ 9a80143ca26066ee3266749a57c7b3850d8843be: Gemma's norms, normalizer and MLP,
            plus post_attention_layernorm / post_feedforward_layernorm, scaling query_pre_attn_scalar**-0.5,
            eager_attention_forward's softcap (scores / softcap, tanh, * softcap: three bf16 ops, each in f32 and
            rounded) before the mask, sliding window on the even layers, the final softcap on the bf16 logits.
  gemma3    modeling_gemma3.py @ f14d0cbc824e447ef294d8cdc0f8ad4222f3dfee: Gemma2's layer without softcaps
            (None in the fixture), q_norm / k_norm (Gemma3RMSNorm, (1 + w), per head) before RoPE,
            Gemma3TextScaledWordEmbedding: embed * embed_scale.to(weight.dtype) (bf16 sqrt(hidden)), sliding
            layers rotated with rope_local_base_freq, layer_types.
  starcoder2 modeling_starcoder2.py @ 73faa33f3c3a8588747d42dc7ca666d97b1a2a2c: nn.LayerNorm (with bias) on
            bf16: PyTorch 2.x's CPU layer_norm for a reduced-float input computes the moments and
            (x * rstd + (-rstd * mean)) * gamma + beta in float and rounds once (here F.layer_norm of the f32
            copies, whose kernel has that form, rounded); biases on q/k/v/o and the MLP (c_fc, c_proj: bias
            added before the one rounding, #4); Starcoder2MLP c_proj(gelu_pytorch_tanh(c_fc(x))), the GELU in
            f32 rounded once; the sliding window on every layer; cos/sin .to(x.dtype).
  stablelm  modeling_stablelm.py @ bf112caa961ac7814ed21209d449ac06b2ab65cc: nn.LayerNorm with bias (as
            starcoder2's), q/k/v biases, partial rotary (apply_rotary_pos_emb on the first
            int(head_dim * partial_rotary_factor) dims with bf16 cos/sin, the rest passed through, cat),
            scores / math.sqrt(head_dim) (a bf16 tensor / a Python float: f32, one rounding), SwiGLU MLP,
            sequential residual (use_parallel_residual false in the fixture).
  olmo      modeling_olmo.py (OlmoLayerNorm: F.layer_norm(x.to(f32), no weight, no bias).to(orig_dtype): f32, one
            rounding, the kernel's x * rstd + (-rstd * mean) form; OlmoRotaryEmbedding returns f32 cos/sin and
            apply_rotary_pos_emb rounds q_embed once, as OLMo 2's; clip_qkv clamps the bf16 q, k, v after their
            projections) on the tiny checkpoint scripts/goldens/tiny_fixtures.py writes (tests/model/
            test_families_c's, prompts of tests/golden/families-c.json's olmo cases).
  cohere    modeling_cohere.py @ dbb5a504d1ba0043124f7951c0ee3473be1dbcfc: CohereLayerNorm: (x - mean) *
            rsqrt(var + eps), times weight.to(f32), all in f32, one rounding; CohereRotaryEmbedding's cos/sin
            (repeat_interleave) .to(x.dtype), then apply_rotary_pos_emb computes q.float() * cos +
            rotate_half(q.float()) * sin in f32 (rotate_half on interleaved pairs) and rounds once; the
            parallel block: residual + attn + mlp, left to right, two bf16 adds; logits * logit_scale (a Python
            float: f32, one rounding).

The mixtures of experts (forward_moe below) are their dense families' layers (mixtral, olmoe, granitemoe: Llama's
cast points, granitemoe with Granite's four scalings; qwen2_moe: Qwen2's q/k/v biases; qwen3_moe: Qwen3's per-head
q/k norms, its mlp_only_layers dense; olmoe: OlmoeRMSNorm is LlamaRMSNorm, two roundings, on the whole q / k
projection) with the sparse block in place of the MLP:

  mixtral    modeling_mixtral.py @ 00d4b3d2142cb4ced2f51b90614b5d26bc045015, MixtralSparseMoeBlock.forward:
             router_logits = self.gate(hidden_states) (bf16, #4); F.softmax(router_logits, dim=1, dtype=torch.float)
             (the bf16 logits upcast, softmax in f32); torch.topk; routing_weights /= routing_weights.sum(...) in f32;
             routing_weights.to(hidden_states.dtype) (bf16); per expert, in ascending expert id (expert_hit):
             MixtralBlockSparseTop2MLP = w2(silu(w1(x)) * w3(x)) at #4 / #13, times routing_weights[top_x, idx, None]
             (a bf16 product, one rounding), final_hidden_states.index_add_(0, top_x, ...) into a bf16 zeros
             tensor (each add a bf16 add, one rounding).
  qwen3_moe  modeling_qwen3_moe.py @ 00d4b3d2142cb4ced2f51b90614b5d26bc045015, Qwen3MoeSparseMoeBlock: mixtral's
             block, the renormalisation only if norm_topk_prob; Qwen3MoeMLP down(silu(gate(x)) * up(x)).
  qwen2_moe  modeling_qwen2_moe.py @ 00a3f9386614dde0dc41cf4e9b8d0abd3af0671d, Qwen2MoeSparseMoeBlock: qwen3_moe's
             routed experts, then shared_expert(x) (a Qwen2MoeMLP), F.sigmoid(shared_expert_gate(x)) (the bf16
             [T, 1] gate logit, PyTorch 2.x's sigmoid kernel in f32 rounded once) * shared (a bf16 product), and
             final_hidden_states + shared_expert_output (a bf16 add); attention / math.sqrt(head_dim).
  olmoe      modular_olmoe.py @ 052b1dcdbe751ed16e8da95261021318f170a130 (the f32 reference's), OlmoeSparseMoeBlock.
             route_tokens_to_experts: softmax(router_logits.float()), topk, renormalised if norm_topk_prob,
             top_k_weights.to(hidden_states.dtype); MixtralExperts' loop (expert(x) * weight, index_add_);
             OlmoeMLP = GemmaMLP with hidden_act silu.
  granitemoe modeling_granitemoe.py @ c7a438e9d42b8c427670de4a674d06b7a728aa1b: GraniteMoeTopKGating: logits =
             self.layer(x).float() (bf16 logits upcast), logits.topk(k), torch.softmax(top_k_logits, dim=1)
             .type_as(hidden_states) (f32, rounded to bf16); GraniteMoeParallelExperts: F.linear per expert of
             input_linear.weight[e] ([2I, H]: gate rows, then up rows, chunk(2)), act(gate) * up, output_linear;
             expert_outputs * batch_gates[:, None] (bf16 product); zeros(bf16).index_add(0, batch_index, ...) with
             batch_index sorted by expert (each token's terms in ascending expert id, bf16 adds).
  index_add_ adds one term at a time in bf16 (PyTorch's CPU index_add_ on dim 0 is self_slice.add_(source_slice)):
  written out here as out[tok] = (out[tok].float() + term.float()).to(bf16), the tokens of one expert distinct.

  phi3       modeling_phi3.py @ 00d4b3d2142cb4ced2f51b90614b5d26bc045015: Llama's cast points with qkv_proj split
             (q, k, v rows of one bf16 projection), Phi3MLP's gate_up_proj chunked: up * silu(gate) (a bf16 product,
             the same bits as silu(gate) * up), and LongRoPE: _compute_longrope_parameters' 1.0 / (ext_factors *
             base ** (arange(0, dim, 2).float() / dim)) in f32 (short factors while the sequence has at most
             original_max_position_embeddings positions, then the long ones for every position: the golden recomputes
             the whole sequence per step, as transformers' longrope_frequency_update does), Phi3RotaryEmbedding's
             cos = emb.cos() * attention_scaling in f32, then .to(bf16); apply_rotary_pos_emb on the first
             rotary_dim = head_dim * partial_rotary_factor dims (three bf16 ops), the rest passed through.

  gpt_oss    modeling_gpt_oss.py @ 00d4b3d2142cb4ced2f51b90614b5d26bc045015 on the tiny checkpoint
             scripts/goldens/tiny_fixtures.py writes (tests/model/test_families_c's; prompts of tests/golden/families-c.json's
             gpt_oss fixture cases). GptOssPreTrainedModel._keep_in_fp32_modules keeps input_layernorm,
             post_attention_layernorm and norm in f32 under torch_dtype=bfloat16 (every other tensor .to(bf16));
             GptOssRMSNorm: (weight * h).to(input_dtype), the f32 weight times the f32 normed value, one rounding.
             q/k/v/o nn.Linear with biases (#4). GptOssRotaryEmbedding (YaRN): inv_freq from _compute_yarn_parameters
             in torch's f32 arithmetic, cos = freqs.cos() * attention_scaling in f32, then .to(bf16) (sin alike);
             _apply_rotary_emb on the halves: first*cos - second*sin, second*cos + first*sin, three bf16 ops each.
             eager_attention_forward: matmul(q, kᵀ) (bf16), * scaling (a Python float: f32, one rounding), + the
             bf16 mask (0 or finfo(bf16).min; sliding_attention layers: the window), cat with the bf16 sinks as a
             last column, combined - combined.max(-1) (a bf16 subtraction: rounded), F.softmax(dtype=bf16) (PyTorch
             2.x's kernel for a reduced float: exp in f32, Σ in f32, x / Σ, rounded once), the sink column dropped,
             matmul(p, v) (bf16). GptOssTopKRouter: F.linear with bias (bf16 logits, #4), torch.topk on the bf16
             logits (its choice among ties), softmax(top values, dtype=bf16) as above, scattered into bf16 zeros.
             GptOssExperts (the inference branch: every expert over every token, weight 0 where not chosen):
             bmm(h, gate_up_proj) (bf16) + gate_up_proj_bias (a second bf16 rounding: bmm and the add are two
             ops); gate, up = [::2], [1::2]; gate.clamp(max=limit), up.clamp(±limit) (exact); gate * alpha (a
             Python float: one rounding), sigmoid (f32, rounded), gate * that (bf16); up + 1 (rounded); their bf16
             product; bmm(., down_proj) (bf16) + down_proj_bias (rounded); * routing weight (bf16 product);
             .sum(dim=0) over the experts: PyTorch's sum of a bf16 tensor accumulates in f32 and rounds once.
             --variant sink_f32 computes the sink softmax Llama's way instead (the f32 upcast of the combined
             logits, no bf16 rounding of the max subtraction, times 1/Σ): not what these goldens are, to show the
             test tells the two apart.

Router code that assigns the f32 softmax back to router_logits before `router_top_value.to(router_logits.dtype)`
(seen in v5-style TopKRouter classes) keeps the weights in f32, and the expert term is then rounded once from an f32
product: --variant f32_routing computes that, to show the goldens tell the two rules apart (it is not what these
goldens are; --variant writes to --out, never over tests/golden unless asked). --variant att_after_cast does the
same for Phi-3: LongRoPE's attention factor applied to the bf16 cos / sin (a bf16 product) instead of before the cast.

Not taken from the installed torch 1.13: its bf16 gemm (bf16 accumulation), bf16 SiLU / GELU / tanh (they round
intermediates) and bf16 x scalar (rounds the scalar to bf16): each is computed here in f32 and rounded once, as
PyTorch 2.x does. Batch 1, the whole sequence recomputed at every step (INDEX.md measured KV-cache decoding
bit-identical).

    /usr/bin/python3 scripts/goldens/torch-bf16-families.py [--only granite,...] [--shared ../shared] [--out tests/golden]

(system python with Debian's python3-torch). Deterministic: a rerun writes the same bytes.
"""
import argparse
import math
import json
import os
import sys

import torch
import torch.nn.functional as F

BF16, F32 = torch.bfloat16, torch.float32
TOPK, STEPS, NEAR_TIE, LOGIT_TOL = 5, 16, 0.05, 0.25  # as ../shared/tools/fixtures/hf/make_hf_bf16.py states them
FAMILIES = ["granite", "olmo2", "smollm3", "gemma", "gemma2", "gemma3", "starcoder2", "stablelm", "cohere", "olmo",
            "mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "granitemoe", "phi3", "gpt_oss"]
MOE = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "granitemoe")
TINY = ("olmo", "gpt_oss")  # checkpoints written at test time by scripts/goldens/tiny_fixtures.py
VARIANT = ""  # --variant: one cast rule swapped on purpose (to show the golden tells it apart); "" for the golden
R = None  # hf_reference_bf16, imported in main once the shared folder is known


# ---- elementwise steps at transformers' cast points ----

def mm(a, b, bias=None):
    return R.matmul(a, b, "seq32", bias=bias)  # bf16 operands, f32 sum in k order, one rounding


def lin(x, W, name):
    return mm(x, W[name + ".weight"].t(), W.get(name + ".bias"))


def mul_scalar(x, s):
    return (x.to(F32) * s).to(BF16)      # bf16 tensor * Python float: opmath f32, one rounding


def div_scalar(x, s):
    return (x.to(F32) / s).to(BF16)      # bf16 tensor / Python float: div_true_kernel's opmath path


def tanh_bf16(x):
    return torch.tanh(x.to(F32)).to(BF16)


def softcap(x, cap):
    # Gemma2: x / cap; tanh(x); x * cap: three bf16 tensors
    return mul_scalar(tanh_bf16(div_scalar(x, cap)), cap)


def rms_llama(x, w, eps):
    # LlamaRMSNorm (Granite, SmolLM3): f32 statistics, .to(bf16), then weight * h in bf16 (two roundings)
    h = x.to(F32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(BF16)


def rms_olmo2(x, w, eps):
    # Olmo2RMSNorm: (weight * h).to(input_dtype): bf16 weight promoted, product in f32, one rounding
    h = x.to(F32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (w * h).to(BF16)


def rms_gemma(x, w, eps):
    # GemmaRMSNorm / Gemma2RMSNorm / Gemma3RMSNorm: _norm(x.float()) * (1.0 + weight.float()), .type_as(x)
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (h * (1.0 + w.float())).to(BF16)


def layer_norm(x, w, b, eps):
    # nn.LayerNorm on bf16 (PyTorch 2.x's mixed-type CPU kernel): f32 moments and affine, one rounding
    return F.layer_norm(x.to(F32), (x.shape[-1],), w.to(F32), None if b is None else b.to(F32), eps).to(BF16)


def silu(x):
    return F.silu(x.to(F32)).to(BF16)


def gelu_tanh(x):
    return F.gelu(x.to(F32), approximate="tanh").to(BF16)


def inv_freq(base, dim):
    # _compute_default_rope_parameters
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def cos_sin(inv, T):
    # *RotaryEmbedding.forward: f32 angles and cos / sin (autocast off)
    freqs = (inv[None, :, None].float() @ torch.arange(T)[None, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos()[0], emb.sin()[0]


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope(x, cos, sin, f32_trig):
    if f32_trig:  # Olmo2: cos/sin stay f32; q*cos promotes to f32; q_embed.to(q_type): one rounding
        return ((x * cos[None]) + (rotate_half(x) * sin[None])).to(BF16)
    c, s = cos.to(BF16)[None], sin.to(BF16)[None]  # cos.to(x.dtype): three bf16 ops
    return (x * c) + (rotate_half(x) * s)


def allowed_mask(T, window):
    q, kv = torch.arange(T)[:, None], torch.arange(T)[None, :]
    m = kv <= q
    return m & (kv > q - window) if window else m


def attention(q, k, v, scaling, allowed, cap=None):
    """eager_attention_forward on bf16 q [nh,T,hd], k/v [nkv,T,hd] -> [T, nh*hd] bf16."""
    nh, T, hd = q.shape
    nkv = k.shape[0]
    k = k[:, None].expand(nkv, nh // nkv, T, hd).reshape(nh, T, hd)  # repeat_kv
    v = v[:, None].expand(nkv, nh // nkv, T, hd).reshape(nh, T, hd)
    a = mul_scalar(mm(q, k.transpose(1, 2)), scaling)
    if cap:
        a = softcap(a, cap)
    a = a + torch.where(allowed, torch.tensor(0.0, dtype=BF16), torch.tensor(torch.finfo(BF16).min, dtype=BF16))[None]
    a = F.softmax(a, dim=-1, dtype=F32).to(BF16)
    return mm(a, v).transpose(0, 1).reshape(T, nh * hd)


# ---- the forward pass ----

@torch.no_grad()
def forward(W, cfg, ids):
    """bf16 logits [T, vocab] for ids at positions 0..T-1."""
    mt = cfg["model_type"]
    gemma = mt in ("gemma", "gemma2", "gemma3_text")
    T, H, L = len(ids), cfg["hidden_size"], cfg["num_hidden_layers"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or H // nh
    if mt == "starcoder2":
        return forward_starcoder2(W, cfg, ids)
    if mt == "stablelm":
        return forward_stablelm(W, cfg, ids)
    if mt == "cohere":
        return forward_cohere(W, cfg, ids)
    if mt == "olmo":
        return forward_olmo(W, cfg, ids)
    if mt in MOE:
        return forward_moe(W, cfg, ids)
    if mt == "phi3":
        return forward_phi3(W, cfg, ids)
    if mt == "gpt_oss":
        return forward_gpt_oss(W, cfg, ids)
    eps = cfg["rms_norm_eps"]
    for k in ("rope_scaling", "attention_bias", "mlp_bias", "use_sliding_window"):
        assert not cfg.get(k), (mt, k)
    norm = rms_gemma if gemma else rms_olmo2 if mt == "olmo2" else rms_llama
    if mt == "gemma":
        scaling = hd ** -0.5
    elif gemma:
        scaling = cfg["query_pre_attn_scalar"] ** -0.5
    elif mt == "granite":
        scaling = cfg["attention_multiplier"]
    else:
        scaling = hd ** -0.5
    attn_cap = cfg.get("attn_logit_softcapping") if mt == "gemma2" else None
    final_cap = cfg.get("final_logit_softcapping") if mt in ("gemma2", "gemma3_text") else None
    if mt == "gemma2":
        types = cfg.get("layer_types") or ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(L)]
    elif mt == "gemma3_text":
        types = cfg["layer_types"]
    else:
        types = ["full_attention"] * L
    cs_g = cos_sin(inv_freq(cfg["rope_theta"], hd), T)
    cs_l = cos_sin(inv_freq(cfg["rope_local_base_freq"], hd), T) if mt == "gemma3_text" else cs_g
    full, swa = allowed_mask(T, None), allowed_mask(T, cfg.get("sliding_window"))
    if gemma:
        act = cfg.get("hidden_activation") or "gelu_pytorch_tanh"
        assert act == "gelu_pytorch_tanh", act
    else:
        assert cfg["hidden_act"] == "silu"

    x = W["model.embed_tokens.weight"][torch.tensor(ids)]                 # nn.Embedding: rows of the bf16 table
    if gemma:
        x = x * torch.tensor(H ** 0.5, dtype=BF16)                        # the normalizer, rounded to bf16
    elif mt == "granite":
        x = mul_scalar(x, cfg["embedding_multiplier"])
    for i in range(L):
        p = f"model.layers.{i}"
        sliding = types[i] == "sliding_attention"
        residual = x
        h = x if mt == "olmo2" else norm(x, W[p + ".input_layernorm.weight"], eps)
        q, k, v = (lin(h, W, p + ".self_attn." + n) for n in ("q_proj", "k_proj", "v_proj"))
        if mt == "olmo2":                                                 # over the whole projection
            q = norm(q, W[p + ".self_attn.q_norm.weight"], eps)
            k = norm(k, W[p + ".self_attn.k_norm.weight"], eps)
        q, k, v = (t.view(T, -1, hd).transpose(0, 1) for t in (q, k, v))
        if mt == "gemma3_text":                                           # per head, before RoPE
            q = norm(q, W[p + ".self_attn.q_norm.weight"], eps)
            k = norm(k, W[p + ".self_attn.k_norm.weight"], eps)
        if mt != "smollm3" or cfg["no_rope_layers"][i]:
            cos, sin = cs_l if sliding else cs_g
            q, k = rope(q, cos, sin, mt == "olmo2"), rope(k, cos, sin, mt == "olmo2")
        o = attention(q, k, v, scaling, swa if sliding else full, attn_cap)
        a = lin(o, W, p + ".self_attn.o_proj")
        if mt == "granite":
            x = residual + mul_scalar(a, cfg["residual_multiplier"])
        elif mt in ("olmo2", "gemma2", "gemma3_text"):
            x = residual + norm(a, W[p + ".post_attention_layernorm.weight"], eps)
        else:
            x = residual + a
        residual = x
        if mt == "olmo2":
            h = x
        elif mt in ("gemma2", "gemma3_text"):
            h = norm(x, W[p + ".pre_feedforward_layernorm.weight"], eps)
        else:
            h = norm(x, W[p + ".post_attention_layernorm.weight"], eps)
        g, u = lin(h, W, p + ".mlp.gate_proj"), lin(h, W, p + ".mlp.up_proj")
        m = lin((gelu_tanh(g) if gemma else silu(g)) * u, W, p + ".mlp.down_proj")
        if mt == "granite":
            m = mul_scalar(m, cfg["residual_multiplier"])
        elif mt in ("olmo2", "gemma2", "gemma3_text"):
            m = norm(m, W[p + ".post_feedforward_layernorm.weight"], eps)
        x = residual + m
    x = norm(x, W["model.norm.weight"], eps)
    logits = mm(x, (W["lm_head.weight"] if "lm_head.weight" in W else W["model.embed_tokens.weight"]).t())
    if mt == "granite":
        logits = div_scalar(logits, cfg["logits_scaling"])
    if final_cap:
        logits = softcap(logits, final_cap)
    return logits


@torch.no_grad()
def forward_starcoder2(W, cfg, ids):
    """Starcoder2ForCausalLM: LayerNorms with biases, biased linears, c_proj(gelu_tanh(c_fc(x))), a window on
    every layer (create_sliding_window_causal_mask when sliding_window is set)."""
    T, H, L = len(ids), cfg["hidden_size"], cfg["num_hidden_layers"]
    nh = cfg["num_attention_heads"]
    hd = H // nh
    eps = cfg["norm_epsilon"]
    assert cfg["hidden_act"] == "gelu_pytorch_tanh" and not cfg.get("rope_scaling")
    cos, sin = cos_sin(inv_freq(cfg["rope_theta"], hd), T)
    allowed = allowed_mask(T, cfg.get("sliding_window"))

    def ln(x, name):
        return layer_norm(x, W[name + ".weight"], W.get(name + ".bias"), eps)

    x = W["model.embed_tokens.weight"][torch.tensor(ids)]                 # embedding_dropout: eval, none
    for i in range(L):
        p = f"model.layers.{i}"
        h = ln(x, p + ".input_layernorm")
        q, k, v = (lin(h, W, p + ".self_attn." + n).view(T, -1, hd).transpose(0, 1)
                   for n in ("q_proj", "k_proj", "v_proj"))
        q, k = rope(q, cos, sin, False), rope(k, cos, sin, False)
        x = x + lin(attention(q, k, v, hd ** -0.5, allowed), W, p + ".self_attn.o_proj")
        h = ln(x, p + ".post_attention_layernorm")
        x = x + lin(gelu_tanh(lin(h, W, p + ".mlp.c_fc")), W, p + ".mlp.c_proj")  # residual_dropout: eval
    x = ln(x, "model.norm")
    return mm(x, (W["lm_head.weight"] if "lm_head.weight" in W else W["model.embed_tokens.weight"]).t())


@torch.no_grad()
def forward_stablelm(W, cfg, ids):
    """StableLmForCausalLM, sequential residual: LayerNorms with biases, q/k/v biases, partial rotary."""
    T, H, L = len(ids), cfg["hidden_size"], cfg["num_hidden_layers"]
    nh = cfg["num_attention_heads"]
    hd = H // nh
    rd = int(hd * cfg["partial_rotary_factor"])
    eps = cfg["layer_norm_eps"]
    assert cfg["hidden_act"] == "silu" and not cfg.get("rope_scaling") and not cfg.get("qk_layernorm")
    assert not cfg.get("use_parallel_residual")
    cos, sin = cos_sin(inv_freq(cfg["rope_theta"], rd), T)                # StableLmRotaryEmbedding(dim=rd)
    allowed = allowed_mask(T, None)

    def ln(x, name):
        return layer_norm(x, W[name + ".weight"], W.get(name + ".bias"), eps)

    def prope(t):  # query_rot, query_pass = t[..., :rd], t[..., rd:]; apply_rotary_pos_emb on rot; cat
        return torch.cat((rope(t[..., :rd], cos, sin, False), t[..., rd:]), dim=-1)

    x = W["model.embed_tokens.weight"][torch.tensor(ids)]
    for i in range(L):
        p = f"model.layers.{i}"
        h = ln(x, p + ".input_layernorm")
        q, k, v = (lin(h, W, p + ".self_attn." + n).view(T, -1, hd).transpose(0, 1)
                   for n in ("q_proj", "k_proj", "v_proj"))
        q, k = prope(q), prope(k)
        # attn_weights = matmul(q, k^T) / math.sqrt(head_dim): div_scalar, then the eager rest of attention()
        nkv = k.shape[0]
        kk = k[:, None].expand(nkv, nh // nkv, T, hd).reshape(nh, T, hd)
        vv = v[:, None].expand(nkv, nh // nkv, T, hd).reshape(nh, T, hd)
        a = div_scalar(mm(q, kk.transpose(1, 2)), hd ** 0.5)
        a = a + torch.where(allowed, torch.tensor(0.0, dtype=BF16), torch.tensor(torch.finfo(BF16).min, dtype=BF16))[None]
        a = F.softmax(a, dim=-1, dtype=F32).to(BF16)
        o = mm(a, vv).transpose(0, 1).reshape(T, nh * hd)
        x = x + lin(o, W, p + ".self_attn.o_proj")
        h = ln(x, p + ".post_attention_layernorm")
        x = x + lin(silu(lin(h, W, p + ".mlp.gate_proj")) * lin(h, W, p + ".mlp.up_proj"), W, p + ".mlp.down_proj")
    x = ln(x, "model.norm")
    return mm(x, (W["lm_head.weight"] if "lm_head.weight" in W else W["model.embed_tokens.weight"]).t())


@torch.no_grad()
def forward_cohere(W, cfg, ids):
    """CohereForCausalLM: one LayerNorm (no bias) feeding attention and MLP in parallel, interleaved RoPE."""
    T, H, L = len(ids), cfg["hidden_size"], cfg["num_hidden_layers"]
    nh = cfg["num_attention_heads"]
    hd = H // nh
    eps = cfg["layer_norm_eps"]
    assert cfg["hidden_act"] == "silu" and not cfg.get("rope_scaling") and not cfg.get("use_qk_norm")
    inv = inv_freq(cfg["rope_theta"], hd)
    freqs = (inv[None, :, None].float() @ torch.arange(T)[None, None, :].float()).transpose(1, 2)[0]
    emb = torch.repeat_interleave(freqs, 2, dim=-1)
    cos, sin = emb.cos().to(BF16), emb.sin().to(BF16)                     # CohereRotaryEmbedding: .to(x.dtype)
    allowed = allowed_mask(T, None)

    def ln(x, w):  # CohereLayerNorm
        h = x.to(F32)
        mean = h.mean(-1, keepdim=True)
        var = (h - mean).pow(2).mean(-1, keepdim=True)
        h = (h - mean) * torch.rsqrt(var + eps)
        return (w.to(F32) * h).to(BF16)

    def crope(t):  # apply_rotary_pos_emb: in float, rotate_half on (2i, 2i+1), one rounding
        tf = t.float()
        rh = torch.stack([-tf[..., 1::2], tf[..., ::2]], dim=-1).flatten(-2)
        return ((tf * cos[None]) + (rh * sin[None])).to(BF16)

    x = W["model.embed_tokens.weight"][torch.tensor(ids)]
    for i in range(L):
        p = f"model.layers.{i}"
        h = ln(x, W[p + ".input_layernorm.weight"])
        q, k, v = (lin(h, W, p + ".self_attn." + n).view(T, -1, hd).transpose(0, 1)
                   for n in ("q_proj", "k_proj", "v_proj"))
        q, k = crope(q), crope(k)
        a = lin(attention(q, k, v, hd ** -0.5, allowed), W, p + ".self_attn.o_proj")
        m = lin(silu(lin(h, W, p + ".mlp.gate_proj")) * lin(h, W, p + ".mlp.up_proj"), W, p + ".mlp.down_proj")
        x = x + a + m                                                     # (residual + attn) + mlp, bf16 adds
    x = ln(x, W["model.norm.weight"])
    logits = mm(x, (W["lm_head.weight"] if "lm_head.weight" in W else W["model.embed_tokens.weight"]).t())
    return mul_scalar(logits, cfg["logit_scale"])


@torch.no_grad()
def forward_olmo(W, cfg, ids):
    """OlmoForCausalLM: weightless LayerNorms, clip_qkv, OLMo's f32 rotation."""
    T, H, L = len(ids), cfg["hidden_size"], cfg["num_hidden_layers"]
    nh = cfg["num_attention_heads"]
    hd = H // nh
    c = cfg.get("clip_qkv")
    assert cfg["hidden_act"] == "silu" and not cfg.get("rope_scaling") and not cfg.get("attention_bias")
    cos, sin = cos_sin(inv_freq(cfg["rope_theta"], hd), T)
    allowed = allowed_mask(T, None)

    def ln(x):  # OlmoLayerNorm: eps 1e-5 whatever the config says
        return F.layer_norm(x.to(F32), (H,), None, None, 1e-5).to(BF16)

    x = W["model.embed_tokens.weight"][torch.tensor(ids)]
    for i in range(L):
        p = f"model.layers.{i}"
        h = ln(x)
        q, k, v = (lin(h, W, p + ".self_attn." + n) for n in ("q_proj", "k_proj", "v_proj"))
        if c is not None:
            q, k, v = q.clamp(-c, c), k.clamp(-c, c), v.clamp(-c, c)
        q, k, v = (t.view(T, -1, hd).transpose(0, 1) for t in (q, k, v))
        q, k = rope(q, cos, sin, True), rope(k, cos, sin, True)
        x = x + lin(attention(q, k, v, hd ** -0.5, allowed), W, p + ".self_attn.o_proj")
        h = ln(x)
        x = x + lin(silu(lin(h, W, p + ".mlp.gate_proj")) * lin(h, W, p + ".mlp.up_proj"), W, p + ".mlp.down_proj")
    x = ln(x)
    return mm(x, (W["lm_head.weight"] if "lm_head.weight" in W else W["model.embed_tokens.weight"]).t())


# ---- the mixtures of experts ----

def index_add(out, tok, y):
    # index_add_(0, tok, y) on bf16: one bf16 add a term (tok distinct within one call)
    out[tok] = (out[tok].to(F32) + y.to(F32)).to(BF16)


def swiglu_mlp(x, W, g, u, d):
    return lin(silu(lin(x, W, g)) * lin(x, W, u), W, d)


def moe_block(x, W, p, cfg):
    """The sparse block of layer p on the normed bf16 rows x [T, H] (the families' cast points: see the top)."""
    mt, T, H = cfg["model_type"], x.shape[0], x.shape[1]
    k = cfg["num_experts_per_tok"]
    out = torch.zeros(T, H, dtype=BF16)
    if mt == "granitemoe":
        E = cfg["num_local_experts"]
        logits = lin(x, W, p + ".block_sparse_moe.router.layer").to(F32)
        top_l, sel = logits.topk(k, dim=1)
        w32 = F.softmax(top_l, dim=1)
        Win, Wout = W[p + ".block_sparse_moe.input_linear.weight"], W[p + ".block_sparse_moe.output_linear.weight"]
    else:
        gate = p + (".block_sparse_moe.gate" if mt == "mixtral" else ".mlp.gate")
        E = cfg["num_local_experts"] if mt == "mixtral" else cfg["num_experts"]
        probs = F.softmax(lin(x, W, gate).to(F32), dim=-1)
        w32, sel = torch.topk(probs, k, dim=-1)
        if mt == "mixtral" or cfg["norm_topk_prob"]:
            w32 = w32 / w32.sum(dim=-1, keepdim=True)
    wb = w32.to(BF16)                                                     # .to(hidden_states.dtype) / type_as
    for e in range(E):                                                    # ascending expert id
        tok, slot = torch.where(sel == e)
        if tok.numel() == 0:
            continue
        xe = x[tok]
        if mt == "granitemoe":
            h = mm(xe, Win[e].t())
            gp, up = h.chunk(2, dim=-1)
            y = mm(silu(gp) * up, Wout[e].t())
        elif mt == "mixtral":
            q = f"{p}.block_sparse_moe.experts.{e}"
            y = swiglu_mlp(xe, W, q + ".w1", q + ".w3", q + ".w2")
        else:
            q = f"{p}.mlp.experts.{e}"
            y = swiglu_mlp(xe, W, q + ".gate_proj", q + ".up_proj", q + ".down_proj")
        if VARIANT == "f32_routing":                                      # weights kept f32: one rounding
            term = (y.to(F32) * w32[tok, slot, None]).to(BF16)
        else:
            term = y * wb[tok, slot, None]                                # bf16 x bf16
        index_add(out, tok, term)
    if mt == "qwen2_moe":
        q = p + ".mlp.shared_expert"
        sh = swiglu_mlp(x, W, q + ".gate_proj", q + ".up_proj", q + ".down_proj")
        g = torch.sigmoid(lin(x, W, p + ".mlp.shared_expert_gate").to(F32)).to(BF16)
        out = out + g * sh                                                # bf16 product, bf16 add
    return out


def sparse_layer(cfg, i):
    mt = cfg["model_type"]
    if mt in ("qwen2_moe", "qwen3_moe"):                                  # Qwen*MoeDecoderLayer
        return i not in cfg.get("mlp_only_layers", []) and cfg["num_experts"] > 0 and \
            (i + 1) % cfg["decoder_sparse_step"] == 0
    return True


@torch.no_grad()
def forward_moe(W, cfg, ids):
    mt = cfg["model_type"]
    T, H, L = len(ids), cfg["hidden_size"], cfg["num_hidden_layers"]
    nh = cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or H // nh
    eps = cfg["rms_norm_eps"]
    assert cfg["hidden_act"] == "silu" and not cfg.get("rope_scaling") and not cfg.get("use_sliding_window")
    assert mt != "mixtral" or cfg.get("sliding_window") is None
    assert not cfg.get("clip_qkv")
    scaling = cfg["attention_multiplier"] if mt == "granitemoe" else hd ** -0.5
    cos, sin = cos_sin(inv_freq(cfg["rope_theta"], hd), T)
    allowed = allowed_mask(T, None)
    x = W["model.embed_tokens.weight"][torch.tensor(ids)]
    if mt == "granitemoe":
        x = mul_scalar(x, cfg["embedding_multiplier"])
    rm = cfg.get("residual_multiplier") if mt == "granitemoe" else None

    def branch(a):  # Granite: residual + hidden_states * residual_multiplier
        return mul_scalar(a, rm) if rm is not None else a

    for i in range(L):
        p = f"model.layers.{i}"
        h = rms_llama(x, W[p + ".input_layernorm.weight"], eps)
        q, k, v = (lin(h, W, p + ".self_attn." + n) for n in ("q_proj", "k_proj", "v_proj"))  # qwen2_moe: biases
        if mt == "olmoe":                                                 # over the whole projection
            q = rms_llama(q, W[p + ".self_attn.q_norm.weight"], eps)
            k = rms_llama(k, W[p + ".self_attn.k_norm.weight"], eps)
        q, k, v = (t.view(T, -1, hd).transpose(0, 1) for t in (q, k, v))
        if mt == "qwen3_moe":                                             # per head, before RoPE
            q = rms_llama(q, W[p + ".self_attn.q_norm.weight"], eps)
            k = rms_llama(k, W[p + ".self_attn.k_norm.weight"], eps)
        q, k = rope(q, cos, sin, False), rope(k, cos, sin, False)
        x = x + branch(lin(attention(q, k, v, scaling, allowed), W, p + ".self_attn.o_proj"))
        h = rms_llama(x, W[p + ".post_attention_layernorm.weight"], eps)
        if sparse_layer(cfg, i):
            m = moe_block(h, W, p, cfg)
        else:
            m = swiglu_mlp(h, W, p + ".mlp.gate_proj", p + ".mlp.up_proj", p + ".mlp.down_proj")
        x = x + branch(m)
    x = rms_llama(x, W["model.norm.weight"], eps)
    logits = mm(x, (W["lm_head.weight"] if "lm_head.weight" in W else W["model.embed_tokens.weight"]).t())
    if mt == "granitemoe":
        logits = div_scalar(logits, cfg["logits_scaling"])
    return logits


@torch.no_grad()
def forward_phi3(W, cfg, ids):
    """Phi3ForCausalLM: fused qkv / gate_up, partial rotary, LongRoPE (short / long factors by the length T)."""
    T, H, L = len(ids), cfg["hidden_size"], cfg["num_hidden_layers"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or H // nh
    rd = int(hd * cfg.get("partial_rotary_factor", 1.0))
    eps = cfg["rms_norm_eps"]
    rs = cfg["rope_scaling"]
    assert cfg["hidden_act"] == "silu" and rs and rs.get("rope_type", rs.get("type")) in ("longrope", "su")
    assert cfg.get("sliding_window") is None
    orig = cfg["original_max_position_embeddings"]                        # Phi3Config has it: factor from it
    factor = cfg["max_position_embeddings"] / orig
    att = rs.get("attention_factor")
    if att is None:
        att = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
    ext = torch.tensor(rs[("long" if T > orig else "short") + "_factor"], dtype=F32)
    inv = 1.0 / (ext * cfg["rope_theta"] ** (torch.arange(0, rd, 2, dtype=torch.int64).float() / rd))
    cos, sin = cos_sin(inv, T)
    if VARIANT == "att_after_cast":                                       # cos.to(bf16) first, then * att
        cos, sin = mul_scalar(cos.to(BF16), att).to(F32), mul_scalar(sin.to(BF16), att).to(F32)
    else:
        cos, sin = cos * att, sin * att                                   # f32, rounded by rope()
    allowed = allowed_mask(T, None)

    def prope(t):
        return torch.cat((rope(t[..., :rd], cos, sin, False), t[..., rd:]), dim=-1)

    x = W["model.embed_tokens.weight"][torch.tensor(ids)]
    qp, kvp = nh * hd, nkv * hd
    for i in range(L):
        p = f"model.layers.{i}"
        h = rms_llama(x, W[p + ".input_layernorm.weight"], eps)
        qkv = lin(h, W, p + ".self_attn.qkv_proj")
        q = qkv[..., :qp].reshape(T, nh, hd).transpose(0, 1)
        k = qkv[..., qp:qp + kvp].reshape(T, nkv, hd).transpose(0, 1)
        v = qkv[..., qp + kvp:].reshape(T, nkv, hd).transpose(0, 1)
        q, k = prope(q), prope(k)
        x = x + lin(attention(q, k, v, hd ** -0.5, allowed), W, p + ".self_attn.o_proj")
        h = rms_llama(x, W[p + ".post_attention_layernorm.weight"], eps)
        gate, up = lin(h, W, p + ".mlp.gate_up_proj").chunk(2, dim=-1)
        x = x + lin(up * silu(gate), W, p + ".mlp.down_proj")
    x = rms_llama(x, W["model.norm.weight"], eps)
    return mm(x, (W["lm_head.weight"] if "lm_head.weight" in W else W["model.embed_tokens.weight"]).t())



# ---- GPT-OSS ----

def yarn_inv_freq(cfg):
    """modeling_rope_utils._compute_yarn_parameters in torch's f32 arithmetic (base ** (arange.float() / dim) a
    torch pow in f32; the ramp (i - low) / (high - low) in f32): (inv_freq, attention_factor)."""
    rs = cfg["rope_scaling"]
    base, dim = cfg["rope_theta"], cfg["head_dim"]
    factor, orig = rs["factor"], rs.get("original_max_position_embeddings", cfg["max_position_embeddings"])
    att = rs.get("attention_factor")
    if att is None:
        att = 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0
    beta_fast, beta_slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1

    def corr(rot):
        return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))

    low, high = corr(beta_fast), corr(beta_slow)
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=F32) - low) / (high - low), 0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2).to(dtype=F32) / dim)
    extra, inter = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    ef = 1 - ramp
    return inter * (1 - ef) + extra * ef, att


def softmax_reduced(x):
    """F.softmax(x, dim=-1, dtype=bf16) on a bf16 x, as PyTorch 2.x's CPU kernel for a reduced float computes it
    (_vec_softmax_lastdim): the max, exp(x - max), their sum, x / sum, all in f32, rounded once."""
    xf = x.to(F32)
    e = torch.exp(xf - xf.max(dim=-1, keepdim=True).values)
    return (e / e.sum(dim=-1, keepdim=True)).to(BF16)


@torch.no_grad()
def forward_gpt_oss(W, cfg, ids):
    """GptOssForCausalLM at its bf16 cast points (see the top)."""
    T, H, L = len(ids), cfg["hidden_size"], cfg["num_hidden_layers"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    nx, k, eps = cfg["num_local_experts"], cfg["num_experts_per_tok"], cfg["rms_norm_eps"]
    limit, alpha = cfg.get("swiglu_limit", 7.0), cfg.get("swiglu_alpha", 1.702)
    inv, att = yarn_inv_freq(cfg)
    freqs = (inv[None, :, None].float() @ torch.arange(T)[None, None, :].float()).transpose(1, 2)[0]
    cos, sin = (freqs.cos() * att).to(BF16), (freqs.sin() * att).to(BF16)   # [T, hd/2]

    def rot(x):  # _apply_rotary_emb: bf16 products, a bf16 difference / sum
        a, b = torch.chunk(x, 2, dim=-1)
        return torch.cat((a * cos[None] - b * sin[None], b * cos[None] + a * sin[None]), dim=-1)

    def norm(x, w):  # GptOssRMSNorm, its weight kept f32 (_keep_in_fp32_modules)
        h = x.to(F32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return (w * h).to(BF16)

    def bf_add(a, b):  # a bf16 tensor plus a bf16 tensor: f32 sum, one rounding
        return (a.to(F32) + b.to(F32)).to(BF16)

    x = W["model.embed_tokens.weight"][torch.tensor(ids)]
    for i in range(L):
        p = f"model.layers.{i}"
        window = cfg["sliding_window"] if cfg["layer_types"][i] == "sliding_attention" else None
        h = norm(x, W[p + ".input_layernorm.weight"])
        q, kk, v = (lin(h, W, p + ".self_attn." + n).view(T, -1, hd).transpose(0, 1)
                    for n in ("q_proj", "k_proj", "v_proj"))
        q, kk = rot(q), rot(kk)
        kk = kk[:, None].expand(nkv, nh // nkv, T, hd).reshape(nh, T, hd)    # repeat_kv
        v = v[:, None].expand(nkv, nh // nkv, T, hd).reshape(nh, T, hd)
        a = mul_scalar(mm(q, kk.transpose(1, 2)), hd ** -0.5)
        allowed = allowed_mask(T, window)
        a = bf_add(a, torch.where(allowed, torch.tensor(0.0, dtype=BF16),
                                  torch.tensor(torch.finfo(BF16).min, dtype=BF16))[None])
        sinks = W[p + ".self_attn.sinks"].reshape(-1, 1, 1).expand(-1, T, -1)
        comb = torch.cat([a, sinks], dim=-1)
        if VARIANT == "sink_f32":                                          # Llama's softmax(dtype=f32).to(bf16)
            cf = comb.to(F32)
            e = torch.exp(cf - cf.max(dim=-1, keepdim=True).values)
            probs = (e * (1.0 / e.sum(dim=-1, keepdim=True))).to(BF16)
        else:
            comb = (comb.to(F32) - comb.max(dim=-1, keepdim=True).values.to(F32)).to(BF16)
            probs = softmax_reduced(comb)
        o = mm(probs[..., :-1], v).transpose(0, 1).reshape(T, nh * hd)
        x = bf_add(x, lin(o, W, p + ".self_attn.o_proj"))
        h = norm(x, W[p + ".post_attention_layernorm.weight"])
        # GptOssTopKRouter
        logits = lin(h, W, p + ".mlp.router")
        top_v, top_i = torch.topk(logits, k, dim=-1)
        scores = torch.zeros_like(logits).scatter_(1, top_i, softmax_reduced(top_v))
        # GptOssExperts, the inference branch
        hs = h.repeat(nx, 1).view(nx, T, H)
        gu = (mm(hs, W[p + ".mlp.experts.gate_up_proj"]).to(F32) +
              W[p + ".mlp.experts.gate_up_proj_bias"][:, None, :].to(F32)).to(BF16)
        gate, up = gu[..., ::2], gu[..., 1::2]
        gate = gate.clamp(min=None, max=limit)
        up = up.clamp(min=-limit, max=limit)
        glu = gate * torch.sigmoid(mul_scalar(gate, alpha).to(F32)).to(BF16)
        up1 = (up.to(F32) + 1).to(BF16)
        ns = mm(up1 * glu, W[p + ".mlp.experts.down_proj"])
        ns = (ns.to(F32) + W[p + ".mlp.experts.down_proj_bias"][:, None, :].to(F32)).to(BF16)
        ns = ns * scores.transpose(0, 1)[..., None]                       # bf16 product
        m = ns.to(F32).sum(dim=0).to(BF16)                                 # sum of bf16: f32 accumulation
        x = bf_add(x, m)
    x = norm(x, W["model.norm.weight"])
    return mm(x, W["lm_head.weight"].t())


def make(fix, fam):
    from st_io import read_safetensors
    if fam in TINY:  # a tiny checkpoint written at test time, its f32 goldens in tests/golden/families-c.json
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import tiny_fixtures
        cfg, ts = tiny_fixtures.tensors(fam, {})
        stored = {n: torch.tensor(v, dtype=F32).view(*sh) for n, sh, v in ts}
        W = R.cast_weights(stored)
        if fam == "gpt_oss":  # _keep_in_fp32_modules: the norms' weights stay f32
            W.update({n: t for n, t in stored.items() if n.endswith("layernorm.weight") or n == "model.norm.weight"})
        g32 = [x for x in json.load(open("tests/golden/families-c.json"))["variants"]
               if x["family"] == fam and not x["config"]][0]
        fix = "scripts/goldens/tiny_fixtures.py " + fam
    else:
        cfg = json.load(open(os.path.join(fix, "config.json")))
        g32 = json.load(open(os.path.join(fix, "golden.json")))
        W = R.cast_weights(read_safetensors(os.path.join(fix, "model.safetensors")))  # Tensor.to(bfloat16)
    cases = []
    for c in g32["cases"]:
        ids, toks, steps = list(c["prompt_ids"]), [], []
        for _ in range(STEPS):
            tok, top, gap = R.pick(forward(W, cfg, ids)[-1].to(F32), TOPK)
            steps.append({"token": tok, "top": top, "gap": gap, "near_tie": gap < NEAR_TIE})
            toks.append(tok)
            ids.append(tok)
        cases.append({"name": c["name"], "prompt_ids": c["prompt_ids"], "tokens": toks, "steps": steps,
                      "min_gap": min(s["gap"] for s in steps), "f32_tokens_equal": toks == c["tokens"]})
        print("%s %s: min gap %.4f, near ties %s, f32 tokens %s" % (fam, c["name"], cases[-1]["min_gap"],
              [i for i, s in enumerate(steps) if s["near_tie"]], "equal" if toks == c["tokens"] else "differ"),
              file=sys.stderr)
    return {"family": fam, "fixture": fix if fam in TINY else "../shared/fixtures/hf/" + fam,
            "architecture": cfg["architectures"][0],
            "reference": "PyTorch %s CPU, bfloat16 compute as PyTorch 2.x runs it, transformers' modeling code "
                         "transcribed in scripts/goldens/torch-bf16-families.py; %d greedy steps, whole sequence "
                         "recomputed per step" % (torch.__version__, STEPS),
            "logit_tolerance": LOGIT_TOL, "near_tie_threshold": NEAR_TIE, "min_fraction_of_steps_bit_identical": 0.5,
            "cases": cases, **({"variant": VARIANT} if VARIANT else {})}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--shared", default="../shared")
    ap.add_argument("--out", default="tests/golden")
    ap.add_argument("--variant", default="", choices=["", "f32_routing", "att_after_cast", "sink_f32"])
    args = ap.parse_args()
    global R, VARIANT
    VARIANT = args.variant
    sys.path.insert(0, os.path.join(args.shared, "tools/fixtures/hf"))
    import hf_reference_bf16
    R = hf_reference_bf16
    torch.set_num_threads(1)
    for fam in [f for f in args.only.split(",") if f] or FAMILIES:
        g = make(os.path.join(args.shared, "fixtures/hf", fam), fam)
        with open(os.path.join(args.out, "bf16-%s.json" % fam), "w") as f:
            json.dump(g, f, indent=1, sort_keys=True)
            f.write("\n")


if __name__ == "__main__":
    main()
