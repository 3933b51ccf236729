#!/usr/bin/env node
// Makes tests/golden/qwen35-llamacpp.json: what llama.cpp (its qwen35 architecture) does with the
// GGUF files `caldrix convert` writes from ../shared/fixtures/hf/qwen3_5 and qwen3_5_vl (F32):
// 16 greedy tokens for every golden prompt (F32 KV cache), and whether they equal PyTorch's
// goldens. That checks the names, metadata, value-head order and norm offsets against llama.cpp's
// own reader and graph; the sha256 of each file is a regression pin (caldrix's own output).
//
//   node scripts/goldens/llamacpp-qwen35.mjs --nlc bench/llamacpp [--caldrix build/caldrix]
import {execFileSync} from "node:child_process";
import {readFileSync, mkdtempSync} from "node:fs";
import os from "node:os";
import path from "node:path";
import {caldrix, version, loadLlama, sha256 as sha, greedy, writeGolden} from "./llamacpp-lib.mjs";
const tmp = mkdtempSync(path.join(os.tmpdir(), "cdx-q35-"));
const llama = await loadLlama();
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
        const {tokens} = await greedy(model, c.prompt_ids, 16, {gaps: false});
        if (JSON.stringify(tokens) === JSON.stringify(c.tokens)) same++;
        cases.push({name: c.name, prompt_ids: c.prompt_ids, tokens});
    }
    await model.dispose();
    out.models.push({name, type: "F32", sha256: sha(file), same_as_pytorch: `${same}/${cases.length}`, cases});
    console.error(`${name}: llama.cpp equals PyTorch on ${same}/${cases.length} cases`);
}
writeGolden("tests/golden/qwen35-llamacpp.json", out);
