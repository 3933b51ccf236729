#!/usr/bin/env node
// Makes tests/golden/q8k-quant.json: llama.cpp's greedy tokens for random-weight llama- and
// qwen3-shaped models (`caldrix synth --shape tiny` and `--shape tiny-qwen3-64`, several seeds) in
// the file types whose matrices are mostly dotted against q8_K activations (IQ4_XS, Q3_K_M, Q5_K_M:
// issue 35, where caldrix's answer depended on its kernel set), many prompts each, so that steps
// whose top two logits lie close together come up. tests/cli/test_quant_q8k.sh runs them on every
// kernel set the CPU has. Default models: tiny seeds 1 and 2, tiny-qwen3-64 seed 1.
//
//   node scripts/goldens/llamacpp-quant-q8k.mjs --nlc DIR [--caldrix build/caldrix] [--out FILE]
//        [--seeds 1,2,...] [--prompts 8] [--only SHAPE:SEED:TYPE,...]
//
// As scripts/goldens/llamacpp-quant-qwen3.mjs: each file is made by `caldrix quantize` of the synth
// F32 model (its sha256 recorded: the test regenerates it) and by llama.cpp's own quantizer
// (llama_model_quantize, scripts/goldens/llama-quantize.c); their tensors are compared and the
// verdict recorded as tensors_equal_llamacpp_quantizer; llama.cpp's tokens are computed on
// llama.cpp's own file. DIR holds node_modules/node-llama-cpp (3.21.1) and, in DIR/src, a clone of
// its llama/gitRelease.bundle. Settings: context 256, batch 256, flash attention off, F32 KV cache,
// greedy, EOG fed back (llamacpp-lib.mjs).
import {execFileSync} from "node:child_process";
import {mkdtempSync} from "node:fs";
import os from "node:os";
import path from "node:path";
import {caldrix, opt, version, loadLlama, sha256 as sha, greedy, writeGolden, buildQuantizer, sameTensors} from "./llamacpp-lib.mjs";

// the models: (shape, seed); --seeds S,S,... takes those seeds of both shapes instead
const RUNS = opt("--seeds", "") ? ["tiny", "tiny-qwen3-64"].flatMap((sh) => opt("--seeds").split(",").map((se) => [sh, Number(se)]))
    : [["tiny", 1], ["tiny", 2], ["tiny-qwen3-64", 1]];
const ONLY = opt("--only", ""); /* a few files of the set (to redo some), comma-separated */
const NPROMPTS = Number(opt("--prompts", "8"));
const STEPS = 24, PROMPT_LEN = 16, VOCAB = 512;
const OUT = opt("--out", "tests/golden/q8k-quant.json");
// llama_ftype ids (include/llama.h)
const ftypes = {Q3_K_M: 12, Q5_K_M: 17, IQ4_XS: 30};

// prompts: BOS (1) then 15 ids from a fixed xorshift stream, within the 512-token vocabulary
let st = 0x9E3779B9 >>> 0;
const next = () => { st ^= st << 13; st >>>= 0; st ^= st >>> 17; st ^= st << 5; st >>>= 0; return st; };
const prompts = [];
for (let p = 0; p < NPROMPTS; p++) {
    const ids = [1];
    while (ids.length < PROMPT_LEN) ids.push(3 + next() % (VOCAB - 3));
    prompts.push(ids);
}

const tmp = mkdtempSync(path.join(os.tmpdir(), "cdx-q8k-quant-"));
const lq = buildQuantizer(tmp);
const llama = await loadLlama();
const out = {reference: `llama.cpp via node-llama-cpp ${version} (prebuilt linux-x64 CPU), context 256, batch 256, ` +
    `flash attention off, F32 KV cache, greedy, ${STEPS} steps, EOG fed back`,
    source: "caldrix synth --shape SHAPE --type F32 --seed SEED, then caldrix quantize F32 TYPE", files: []};
for (const [shape, seed] of RUNS) {
    const f32 = path.join(tmp, `${shape}-${seed}-F32.gguf`);
    execFileSync(caldrix, ["synth", f32, "--shape", shape, "--type", "F32", "--seed", String(seed)],
        {stdio: ["ignore", "ignore", "inherit"]});
    for (const [t, id] of Object.entries(ftypes)) {
        if (ONLY && !ONLY.split(",").includes(`${shape}:${seed}:${t}`)) continue;
        const mine = path.join(tmp, `${shape}-${seed}-${t}.gguf`), theirs = path.join(tmp, `${shape}-${seed}-${t}-llama.gguf`);
        execFileSync(caldrix, ["quantize", f32, mine, t], {stdio: ["ignore", "ignore", "inherit"]});
        execFileSync(lq, [f32, theirs, String(id)], {stdio: ["ignore", "ignore", "inherit"]});
        const same = sameTensors(mine, theirs);
        const sha256 = sha(mine);
        const model = await llama.loadModel({modelPath: theirs, gpuLayers: 0});
        const cases = [];
        for (const ids of prompts)
            cases.push({prompt_ids: ids, ...await greedy(model, ids, STEPS)});
        await model.dispose();
        out.files.push({shape, seed, type: t, sha256, tensors_equal_llamacpp_quantizer: same, cases});
        console.error(`${shape} seed ${seed} ${t}: ${sha256.slice(0, 12)}… tensors ${same ? "equal" : "DIFFER from"} llama.cpp's quantizer`);
        writeGolden(OUT, out); /* after every file: a long run can be looked at as it goes */
    }
}
