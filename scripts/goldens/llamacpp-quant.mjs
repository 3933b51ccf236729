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
import {createHash} from "node:crypto";
import {execFileSync} from "node:child_process";
import {readFileSync, writeFileSync, mkdtempSync} from "node:fs";
import os from "node:os";
import path from "node:path";
import {pathToFileURL} from "node:url";

const argv = process.argv.slice(2);
const opt = (k, d) => { const i = argv.indexOf(k); return i >= 0 ? argv[i + 1] : d; };
const nlc = opt("--nlc", process.env.NODE_LLAMA_CPP_DIR);
const caldrix = opt("--caldrix", "build/caldrix");
if (!nlc) throw new Error("give --nlc DIR (a folder holding node_modules/node-llama-cpp)");
const {getLlama} = await import(pathToFileURL(path.join(path.resolve(nlc), "node_modules", "node-llama-cpp", "dist", "index.js")).href);
const version = JSON.parse(readFileSync(path.join(path.resolve(nlc), "node_modules", "node-llama-cpp", "package.json"), "utf8")).version;

const src = "../shared/models/stories260K/stories260K.gguf";
const shared = JSON.parse(readFileSync("../shared/fixtures/llamacpp/stories260K.json", "utf8"));
const prompts = shared.cases.map((c) => c.prompt_ids);
const types = ["Q8_0", "Q4_0", "Q4_K_M", "Q6_K", "Q5_0", "F16"];
const tmp = mkdtempSync(path.join(os.tmpdir(), "cdx-quant-"));
const llama = await getLlama({gpu: false, build: "never", logLevel: "warn", logger: () => {}});

const out = {reference: `llama.cpp via node-llama-cpp ${version} (prebuilt linux-x64 CPU), context 256, batch 256, ` +
    `flash attention off, F32 KV cache, greedy, 32 steps, EOG fed back`, source: "stories260K.gguf", files: []};
for (const t of types) {
    const file = path.join(tmp, `stories260K-${t}.gguf`);
    execFileSync(caldrix, ["quantize", src, file, t], {stdio: ["ignore", "ignore", "inherit"]});
    const sha256 = createHash("sha256").update(readFileSync(file)).digest("hex");
    const model = await llama.loadModel({modelPath: file, gpuLayers: 0});
    const cases = [];
    for (const ids of prompts) {
        // F32 KV cache: caldrix keeps K and V in f32 (llama.cpp's default F16 cache also rounds q and the
        // softmax weights to f16, which moves near-ties)
        const ctx = await model.createContext({contextSize: 256, batchSize: 256, flashAttention: false, sequences: 1, threads: 2,
            experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"});
        const seq = ctx.getSequence();
        const tokens = [], gaps = [];
        for await (const r of seq.evaluateWithMetadata(ids, {probabilities: true}, {temperature: 0, yieldEogToken: true})) {
            tokens.push(r.token);
            // logit gap between llama.cpp's top two: log(p1/p2); the test uses it to recognise near-ties
            const p = [...r.probabilities.values()];
            gaps.push(Number(Math.log(p[0] / p[1]).toPrecision(4)));
            if (tokens.length >= 32) break;
        }
        await ctx.dispose();
        cases.push({prompt_ids: ids, tokens, top2_logit_gap: gaps});
    }
    await model.dispose();
    out.files.push({type: t, sha256, cases});
    console.error(`${t}: ${sha256.slice(0, 12)}… ${cases.length} cases`);
}
const text = JSON.stringify(out, null, 1).replace(/\[\s*([-0-9.e+,\s]+?)\s*\]/g, (_, b) => "[" + b.split(/,\s*/).join(",") + "]");
writeFileSync("tests/golden/stories260K-quant.json", text + "\n");
console.error("wrote tests/golden/stories260K-quant.json");
