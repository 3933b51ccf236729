#!/usr/bin/env node
// Makes tests/golden/qwen3-quant.json: llama.cpp's greedy tokens for a random-weight Qwen3-shaped model
// (`caldrix synth --shape tiny-qwen3-64`: hidden 256, 4 heads / 2 KV heads, head_dim 64, FFN 512,
// 2 layers, vocab 512, QK-norm, tied embedding, θ 1e6, eps 1e-6) in every llama.cpp file type that
// llama.cpp's quantizer makes without an importance matrix and caldrix runs.
//
//   node scripts/goldens/llamacpp-quant-qwen3.mjs --nlc DIR [--caldrix build/caldrix]
//
// For each type the file is made twice: by `caldrix quantize` of the synth F32 model (what the test
// regenerates; its sha256 is recorded) and by llama.cpp's own quantizer (llama_model_quantize of the
// shipped libllama, scripts/goldens/llama-quantize.c). Their tensors (names, types, shapes, offsets
// and data) are compared and the verdict recorded as tensors_equal_llamacpp_quantizer; llama.cpp's
// tokens are computed on llama.cpp's own file. DIR holds node_modules/node-llama-cpp (3.21.1) and,
// in DIR/src, a clone of its llama/gitRelease.bundle (for llama.h). Settings as
// scripts/goldens/llamacpp-quant.mjs: context 256, batch 256, flash attention off, F32 KV cache,
// greedy, EOG fed back.
import {execFileSync} from "node:child_process";
import {mkdtempSync} from "node:fs";
import os from "node:os";
import path from "node:path";
import {caldrix, version, loadLlama, sha256 as sha, greedy, writeGolden, buildQuantizer, sameTensors} from "./llamacpp-lib.mjs";

const SHAPE = "tiny-qwen3-64", SEED = "1", STEPS = 24;
// llama_ftype ids (include/llama.h); the IQ2_XXS/IQ2_XS/IQ2_S/IQ1_S file types need an importance
// matrix, NVFP4 is not a type caldrix quantizes to
const ftypes = {F32: 0, F16: 1, Q4_0: 2, Q4_1: 3, Q8_0: 7, Q5_0: 8, Q5_1: 9, Q2_K: 10, Q3_K_S: 11, Q3_K_M: 12, Q3_K_L: 13,
    Q4_K_S: 14, Q4_K_M: 15, Q5_K_S: 16, Q5_K_M: 17, Q6_K: 18, Q2_K_S: 21, IQ3_XS: 22, IQ3_XXS: 23, IQ4_NL: 25, IQ3_S: 26,
    IQ3_M: 27, IQ2_M: 29, IQ4_XS: 30, IQ1_M: 31, BF16: 32, TQ1_0: 36, TQ2_0: 37, MXFP4_MOE: 38, Q1_0: 40, Q2_0: 41};
// prompts: 16 ids each (the step-0 case is the first), fixed, within the 512-token vocabulary
const prompts = [
    [1, 5, 9, 20, 33, 47, 60, 72, 88, 99, 101, 150, 200, 250, 300, 400],
    [1, 300, 439, 12, 77, 256, 3, 511, 128, 64, 32, 480, 91, 205, 333, 17],
    [1, 260, 261, 262, 263, 264, 265, 266, 267, 268, 269, 270, 271, 272, 273, 274],
];


const tmp = mkdtempSync(path.join(os.tmpdir(), "cdx-qwen3-quant-"));
const lq = buildQuantizer(tmp);
const f32 = path.join(tmp, "source-F32.gguf");
execFileSync(caldrix, ["synth", f32, "--shape", SHAPE, "--type", "F32", "--seed", SEED], {stdio: ["ignore", "ignore", "inherit"]});

const llama = await loadLlama();
const out = {reference: `llama.cpp via node-llama-cpp ${version} (prebuilt linux-x64 CPU), context 256, batch 256, ` +
    `flash attention off, F32 KV cache, greedy, ${STEPS} steps, EOG fed back`,
    source: `caldrix synth --shape ${SHAPE} --type F32 --seed ${SEED}, then caldrix quantize F32 TYPE`, files: []};
for (const [t, id] of Object.entries(ftypes)) {
    const mine = path.join(tmp, `qwen3-${t}.gguf`), theirs = path.join(tmp, `qwen3-${t}-llama.gguf`);
    if (t === "F32") execFileSync("cp", [f32, mine]);
    else {
        try { execFileSync(caldrix, ["quantize", f32, mine, t], {stdio: ["ignore", "ignore", "ignore"]}); }
        catch { console.error(`${t}: caldrix quantize cannot make it; skipped`); continue; }
    }
    try { execFileSync(lq, [f32, theirs, String(id)], {stdio: ["ignore", "ignore", "ignore"]}); }
    catch { console.error(`${t}: llama.cpp's quantizer refuses it; skipped`); continue; }
    const same = sameTensors(mine, theirs);
    const sha256 = sha(mine);
    const model = await llama.loadModel({modelPath: theirs, gpuLayers: 0});
    const cases = [];
    for (const ids of prompts)
        cases.push({prompt_ids: ids, ...await greedy(model, ids, STEPS)});
    await model.dispose();
    out.files.push({type: t, sha256, tensors_equal_llamacpp_quantizer: same, cases});
    console.error(`${t}: ${sha256.slice(0, 12)}… tensors ${same ? "equal" : "DIFFER from"} llama.cpp's quantizer`);
}
writeGolden("tests/golden/qwen3-quant.json", out);
