#!/usr/bin/env node
// Makes tests/golden/moe-quant.json: llama.cpp's greedy tokens for random-weight mixtures of experts
// (`caldrix synth --shape tiny-qwen3moe` and `tiny-qwen2moe`: hidden 256, 4 heads / 2 KV heads,
// head_dim 64, 2 layers, every layer sparse with 8 experts, top-2, expert FFN 256, vocab 512, an
// untied head; qwen2moe adds q/k/v biases and a 512-wide shared expert behind its sigmoid gate) in
// Q8_0, Q4_K_M and Q4_0 (and F32, the unquantized baseline).
//
//   node scripts/goldens/llamacpp-quant-moe.mjs --nlc DIR [--caldrix build/caldrix]
//
// As scripts/goldens/llamacpp-quant-qwen3.mjs: each file is made twice, by `caldrix quantize` of the
// synth F32 model (what tests/cli/test_quant_moe.sh regenerates; its sha256 is recorded) and by
// llama.cpp's own quantizer (llama_model_quantize of the shipped libllama, llama-quantize.c), their
// tensors compared (tensors_equal_llamacpp_quantizer), and llama.cpp's tokens computed on llama.cpp's
// own file. DIR holds node_modules/node-llama-cpp (3.21.1) and, in DIR/src, llama.cpp's source at
// that version (for llama.h). Context 256, batch 256, flash attention off, F32 KV cache, greedy.
import {execFileSync} from "node:child_process";
import {mkdtempSync} from "node:fs";
import os from "node:os";
import path from "node:path";
import {caldrix, version, loadLlama, sha256 as sha, greedy, writeGolden, buildQuantizer, sameTensors} from "./llamacpp-lib.mjs";

const SHAPES = ["tiny-qwen3moe", "tiny-qwen2moe"], SEED = "1", STEPS = 24;
// llama_ftype ids (include/llama.h)
const ftypes = {F32: 0, Q4_0: 2, Q8_0: 7, Q4_K_M: 15};
// prompts: 16 ids each (the step-0 case is the first), fixed, within the 512-token vocabulary
const prompts = [
    [1, 5, 9, 20, 33, 47, 60, 72, 88, 99, 101, 150, 200, 250, 300, 400],
    [1, 300, 439, 12, 77, 256, 3, 511, 128, 64, 32, 480, 91, 205, 333, 17],
    [1, 260, 261, 262, 263, 264, 265, 266, 267, 268, 269, 270, 271, 272, 273, 274],
];


const tmp = mkdtempSync(path.join(os.tmpdir(), "cdx-moe-quant-"));
const lq = buildQuantizer(tmp);
const llama = await loadLlama();
const out = {reference: `llama.cpp via node-llama-cpp ${version} (prebuilt linux-x64 CPU), context 256, batch 256, ` +
    `flash attention off, F32 KV cache, greedy, ${STEPS} steps, EOG fed back`, files: []};
for (const SHAPE of SHAPES) {
const f32 = path.join(tmp, `${SHAPE}-source-F32.gguf`);
execFileSync(caldrix, ["synth", f32, "--shape", SHAPE, "--type", "F32", "--seed", SEED], {stdio: ["ignore", "ignore", "inherit"]});
for (const [t, id] of Object.entries(ftypes)) {
    const mine = path.join(tmp, `${SHAPE}-${t}.gguf`), theirs = path.join(tmp, `${SHAPE}-${t}-llama.gguf`);
    if (t === "F32") execFileSync("cp", [f32, mine]);
    else {
        try { execFileSync(caldrix, ["quantize", f32, mine, t], {stdio: ["ignore", "ignore", "ignore"]}); }
        catch { console.error(`${SHAPE} ${t}: caldrix quantize cannot make it; skipped`); continue; }
    }
    if (t === "F32") execFileSync("cp", [f32, theirs]);
    else {
        try { execFileSync(lq, [f32, theirs, String(id)], {stdio: ["ignore", "ignore", "ignore"]}); }
        catch { console.error(`${SHAPE} ${t}: llama.cpp's quantizer refuses it; skipped`); continue; }
    }
    const same = sameTensors(mine, theirs);
    const sha256 = sha(mine);
    const model = await llama.loadModel({modelPath: theirs, gpuLayers: 0});
    const cases = [];
    for (const ids of prompts)
        cases.push({prompt_ids: ids, ...await greedy(model, ids, STEPS)});
    await model.dispose();
    out.files.push({shape: SHAPE, type: t,
        source: `caldrix synth --shape ${SHAPE} --type F32 --seed ${SEED}` + (t === "F32" ? "" : `, then caldrix quantize F32 ${t}`),
        sha256, tensors_equal_llamacpp_quantizer: same, cases});
    console.error(`${SHAPE} ${t}: ${sha256.slice(0, 12)}… tensors ${same ? "equal" : "DIFFER from"} llama.cpp's quantizer`);
}
}
writeGolden("tests/golden/moe-quant.json", out);
