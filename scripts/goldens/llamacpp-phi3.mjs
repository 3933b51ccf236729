#!/usr/bin/env node
// Makes tests/golden/phi3-llamacpp.json: llama.cpp's greedy tokens on the Phi-3 fixture
// (../shared/fixtures/hf/phi3) as `caldrix convert` writes it (F32), and on that file quantized by
// `caldrix quantize` to Q8_0, with each file's sha256 (tests/cli/test_phi3_gguf.sh regenerates the
// files and checks it before comparing tokens).
//
// llama.cpp picks LongRoPE's factor set once per context (long when the context is longer than
// rope.scaling.original_context_length, 32 here), where transformers switches when the sequence passes
// it. So only the case where the two agree runs: "long" (40 + 16 positions: the long factors from the
// first pass). "medium" (20 + 16) crosses 32 mid-way, which llama.cpp cannot compute, and "short"
// (5 + 16) never passes 32, but llama.cpp pads a context of 32 to more and takes the long factors
// there too (tried: its tokens leave PyTorch's at step 8, as the fixture's sensitivity_always_long_factor
// says); both are left out.
//
//   node scripts/goldens/llamacpp-phi3.mjs --nlc DIR [--caldrix build/caldrix]
//
// Settings otherwise as llamacpp-lib.mjs's greedy: flash attention off, F32 KV cache, greedy, 16 steps.
import {execFileSync} from "node:child_process";
import {readFileSync, mkdtempSync} from "node:fs";
import os from "node:os";
import path from "node:path";
import {caldrix, version, loadLlama, sha256 as sha, writeGolden} from "./llamacpp-lib.mjs";

async function greedy(model, ids, steps, contextSize) {
    const ctx = await model.createContext({contextSize, batchSize: contextSize, flashAttention: false, sequences: 1,
        threads: 2, experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"});
    const seq = ctx.getSequence();
    const tokens = [], gap = [];
    for await (const r of seq.evaluateWithMetadata(ids, {probabilities: true}, {temperature: 0, yieldEogToken: true})) {
        tokens.push(r.token);
        const p = [...r.probabilities.values()];
        gap.push(Number(Math.log(p[0] / p[1]).toPrecision(4)));
        if (tokens.length >= steps) break;
    }
    await ctx.dispose();
    return {tokens, top2_logit_gap: gap};
}

const tmp = mkdtempSync(path.join(os.tmpdir(), "cdx-phi3-"));
const llama = await loadLlama();
const run = (args) => execFileSync(caldrix, args, {stdio: ["ignore", "ignore", "inherit"]});
const out = {reference: `llama.cpp via node-llama-cpp ${version} (prebuilt linux-x64 CPU), flash attention off, ` +
    `F32 KV cache, greedy, 16 steps, context 256; case long only (LongRoPE's long factors throughout)`,
    source: "caldrix convert ../shared/fixtures/hf/phi3 --type F32 --name tiny-random, then caldrix quantize F32 Q8_0", models: []};
const gold = JSON.parse(readFileSync("../shared/fixtures/hf/phi3/golden.json", "utf8"));
const f32 = path.join(tmp, "phi3-F32.gguf"), q8 = path.join(tmp, "phi3-Q8_0.gguf");
// general.name "tiny-random" (the folder's name "phi3" makes llama.cpp's vocabulary loader look up
// Phi-3's <|endoftext|>, which the placeholder vocabulary has not)
run(["convert", "../shared/fixtures/hf/phi3", f32, "--type", "F32", "--name", "tiny-random"]);
run(["quantize", f32, q8, "Q8_0"]);
for (const [type, file] of [["F32", f32], ["Q8_0", q8]]) {
    const model = await llama.loadModel({modelPath: file, gpuLayers: 0});
    const cases = [];
    let same = 0;
    for (const c of gold.cases) {
        if (c.name !== "long") continue;
        const r = await greedy(model, c.prompt_ids, 16, 256);
        if (JSON.stringify(r.tokens) === JSON.stringify(c.tokens)) same++;
        cases.push({name: c.name, prompt_ids: c.prompt_ids, ...r});
    }
    await model.dispose();
    out.models.push({name: "phi3", type, sha256: sha(file), same_as_pytorch: `${same}/${cases.length}`, cases});
    console.error(`phi3 ${type}: llama.cpp equals PyTorch on ${same}/${cases.length} cases`);
}
writeGolden("tests/golden/phi3-llamacpp.json", out);
