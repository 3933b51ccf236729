#!/usr/bin/env node
// Makes tests/golden/stories260K-quant.json: llama.cpp's greedy tokens for stories260K quantized by
// `caldrix quantize` to Q8_0, Q4_0, Q4_K_M and Q6_K. The sha256 of each file (caldrix's own output)
// is recorded as a regression pin, and the test checks it before comparing tokens. No llama.cpp
// quantizer runs here, so the pin does not show that llama.cpp would write the same file (the
// per-type blocks are checked against ggml's in ../shared/fixtures/quant; the tensor type mix is not).
//
//   node scripts/goldens/llamacpp-quant.mjs --nlc DIR [--caldrix build/caldrix]
//
// DIR holds node_modules/node-llama-cpp (3.21.1: `NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install -E
// node-llama-cpp@3.21.1`). Same settings as ../shared/fixtures/llamacpp: context 256, batch 256,
// flash attention off, but an F32 KV cache as caldrix keeps, 32 greedy steps, EOG fed back.
import {execFileSync} from "node:child_process";
import {readFileSync, mkdtempSync} from "node:fs";
import os from "node:os";
import path from "node:path";
import {caldrix, version, loadLlama, sha256 as sha, greedy, writeGolden} from "./llamacpp-lib.mjs";

const src = "../shared/models/stories260K/stories260K.gguf";
const shared = JSON.parse(readFileSync("../shared/fixtures/llamacpp/stories260K.json", "utf8"));
const prompts = shared.cases.map((c) => c.prompt_ids);
const types = ["Q8_0", "Q4_0", "Q4_K_M", "Q6_K", "Q5_0", "F16"];
const tmp = mkdtempSync(path.join(os.tmpdir(), "cdx-quant-"));
const llama = await loadLlama();

const out = {reference: `llama.cpp via node-llama-cpp ${version} (prebuilt linux-x64 CPU), context 256, batch 256, ` +
    `flash attention off, F32 KV cache, greedy, 32 steps, EOG fed back`, source: "stories260K.gguf", files: []};
for (const t of types) {
    const file = path.join(tmp, `stories260K-${t}.gguf`);
    execFileSync(caldrix, ["quantize", src, file, t], {stdio: ["ignore", "ignore", "inherit"]});
    const sha256 = sha(file);
    const model = await llama.loadModel({modelPath: file, gpuLayers: 0});
    const cases = [];
    for (const ids of prompts)
        cases.push({prompt_ids: ids, ...await greedy(model, ids, 32)});
    await model.dispose();
    out.files.push({type: t, sha256, cases});
    console.error(`${t}: ${sha256.slice(0, 12)}… ${cases.length} cases`);
}
writeGolden("tests/golden/stories260K-quant.json", out);
