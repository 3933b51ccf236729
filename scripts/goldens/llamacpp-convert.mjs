#!/usr/bin/env node
// Makes tests/golden/convert-llamacpp.json: what llama.cpp does with files written by
// `caldrix convert`:
//   - models: every dense ../shared/fixtures/hf checkpoint converted to F32 (and llama/qwen3 to Q8_0),
//     loaded by llama.cpp, 16 greedy tokens for each golden prompt (F32 KV cache, as the shared
//     hf-gguf README ran it); the script also says whether they equal PyTorch's goldens;
//   - tokenizers: ../shared/fixtures/tokenizers/{llama3,qwen3,smollm2,mistral,bert} converted with
//     --vocab-only, loaded by llama.cpp (vocabOnly), every text of texts.jsonl tokenized with
//     parse_special and no BOS; the script says how many equal the transformers goldens
//     (golden.jsonl, add_special_tokens false).
// The sha256 of each file (caldrix's own output) is recorded as a regression pin; tests/cli/test_convert.sh
// checks it before comparing. It is not a check against llama.cpp's converter.
//
//   node scripts/goldens/llamacpp-convert.mjs --nlc DIR [--caldrix build/caldrix]
//
// DIR holds node_modules/node-llama-cpp (3.21.1: `NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install -E
// node-llama-cpp@3.21.1`).
import {execFileSync} from "node:child_process";
import {readFileSync, mkdtempSync} from "node:fs";
import os from "node:os";
import path from "node:path";
import {caldrix, version, loadLlama, sha256 as sha, greedy, writeGolden} from "./llamacpp-lib.mjs";
const tmp = mkdtempSync(path.join(os.tmpdir(), "cdx-convert-"));
const llama = await loadLlama();
const convert = (args) => execFileSync(caldrix, ["convert", ...args], {stdio: ["ignore", "ignore", "ignore"]});

const out = {reference: `llama.cpp via node-llama-cpp ${version} (prebuilt linux-x64 CPU); models: context 256, ` +
    `batch 256, flash attention off, F32 KV cache, greedy, 16 steps, EOG fed back; tokenizers: vocabOnly, ` +
    `tokenize(text, specialTokens=true), no BOS`, models: [], tokenizers: []};

const models = [["llama", "F32"], ["llama_bf16", "F32"], ["llama_f16", "F32"], ["llama3_rope", "F32"], ["qwen2", "F32"],
                ["qwen3", "F32"], ["llama", "Q8_0"], ["qwen3", "Q8_0"]];
for (const [name, type] of models) {
    const file = path.join(tmp, `${name}-${type}.gguf`);
    convert([`../shared/fixtures/hf/${name}`, file, "--type", type]);
    const gold = JSON.parse(readFileSync(`../shared/fixtures/hf/${name}/golden.json`, "utf8"));
    const model = await llama.loadModel({modelPath: file, gpuLayers: 0});
    const cases = [];
    let same = 0;
    for (const c of gold.cases) {
        const r = await greedy(model, c.prompt_ids, 16);
        if (JSON.stringify(r.tokens) === JSON.stringify(c.tokens)) same++;
        cases.push({prompt_ids: c.prompt_ids, ...r});
    }
    await model.dispose();
    out.models.push({name, type, sha256: sha(file), same_as_pytorch: `${same}/${cases.length}`, cases});
    console.error(`${name} ${type}: llama.cpp equals PyTorch on ${same}/${cases.length} cases`);
}

const texts = readFileSync("../shared/fixtures/tokenizers/texts.jsonl", "utf8").trim().split("\n").map((l) => JSON.parse(l));
for (const name of ["llama3", "qwen3", "smollm2", "mistral", "bert"]) {
    const file = path.join(tmp, `tok-${name}.gguf`);
    convert([`../shared/fixtures/tokenizers/${name}`, file, "--vocab-only"]);
    const gold = readFileSync(`../shared/fixtures/tokenizers/${name}/golden.jsonl`, "utf8").trim().split("\n")
        .map((l) => JSON.parse(l)).filter((g) => !g.add_special_tokens);
    const model = await llama.loadModel({modelPath: file, vocabOnly: true});
    const ids = [];
    let same = 0;
    for (const t of texts) {
        const r = Array.from(model.tokenize(t.text, true));
        ids.push(r);
        const g = gold.find((x) => x.text_id === t.id);
        if (g && JSON.stringify(g.ids) === JSON.stringify(r)) same++;
    }
    await model.dispose();
    out.tokenizers.push({name, sha256: sha(file), same_as_transformers: `${same}/${texts.length}`, ids});
    console.error(`tokenizer ${name}: llama.cpp on the converted vocabulary equals transformers on ${same}/${texts.length} texts`);
}
writeGolden("tests/golden/convert-llamacpp.json", out);
