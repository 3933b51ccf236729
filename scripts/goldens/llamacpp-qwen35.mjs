#!/usr/bin/env node
// Makes tests/golden/qwen35-llamacpp.json: what llama.cpp (its qwen35 architecture) does with the
// GGUF files `caldrix convert` writes from ../shared/fixtures/hf/qwen3_5 and qwen3_5_vl (F32):
// 16 greedy tokens for every golden prompt (F32 KV cache), and whether they equal PyTorch's
// goldens. That checks the names, metadata, value-head order and norm offsets against llama.cpp's
// own reader and graph; the sha256 of each file is a regression pin (caldrix's own output).
//
//   node scripts/goldens/llamacpp-qwen35.mjs --nlc bench/llamacpp [--caldrix build/caldrix]
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
const tmp = mkdtempSync(path.join(os.tmpdir(), "cdx-q35-"));
const llama = await getLlama({gpu: false, build: "never", logLevel: "warn", logger: () => {}});
const sha = (f) => createHash("sha256").update(readFileSync(f)).digest("hex");
const out = {reference: `llama.cpp via node-llama-cpp ${version} (prebuilt linux-x64 CPU), architecture qwen35; ` +
    `context 256, batch 256, F32 KV cache, greedy, 16 steps`, models: []};
for (const name of ["qwen3_5", "qwen3_5_vl"]) {
    const file = path.join(tmp, `${name}.gguf`);
    execFileSync(caldrix, ["convert", `../shared/fixtures/hf/${name}`, file, "--type", "F32"], {stdio: ["ignore", "ignore", "ignore"]});
    const gold = JSON.parse(readFileSync(`../shared/fixtures/hf/${name}/golden.json`, "utf8"));
    const model = await llama.loadModel({modelPath: file, gpuLayers: 0});
    const cases = [];
    let same = 0;
    for (const c of gold.cases) {
        const ctx = await model.createContext({contextSize: 256, batchSize: 256, flashAttention: false, sequences: 1,
            threads: 2, experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"});
        const seq = ctx.getSequence();
        const tokens = [];
        for await (const r of seq.evaluateWithMetadata(c.prompt_ids, {}, {temperature: 0, yieldEogToken: true})) {
            tokens.push(r.token);
            if (tokens.length >= 16) break;
        }
        await ctx.dispose();
        if (JSON.stringify(tokens) === JSON.stringify(c.tokens)) same++;
        cases.push({name: c.name, prompt_ids: c.prompt_ids, tokens});
    }
    await model.dispose();
    out.models.push({name, type: "F32", sha256: sha(file), same_as_pytorch: `${same}/${cases.length}`, cases});
    console.error(`${name}: llama.cpp equals PyTorch on ${same}/${cases.length} cases`);
}
const text = JSON.stringify(out, null, 1).replace(/\[\s*([-0-9.e+,\s]+?)\s*\]/g, (_, b) => "[" + b.split(/,\s*/).join(",") + "]");
writeFileSync("tests/golden/qwen35-llamacpp.json", text + "\n");
console.error("wrote tests/golden/qwen35-llamacpp.json");
