#!/usr/bin/env node
// Makes tests/golden/gemma-llamacpp.json: llama.cpp's greedy tokens on the Gemma, Gemma 2 and Gemma 3
// fixtures (../shared/fixtures/hf/{gemma,gemma2,gemma3}) as `caldrix convert` writes them (F32), and
// on those files quantized by `caldrix quantize` to Q8_0. The sha256 of each file is recorded (a pin
// of caldrix's output: tests/cli/test_gemma_gguf.sh regenerates the files and checks it before
// comparing tokens); the script also says whether llama.cpp's tokens on the F32 file equal PyTorch's
// goldens.
//
//   node scripts/goldens/llamacpp-gemma.mjs --nlc DIR [--caldrix build/caldrix]
//
// DIR holds node_modules/node-llama-cpp (3.21.1); settings as llamacpp-lib.mjs's greedy: context 256,
// batch 256, flash attention off, F32 KV cache, greedy, 16 steps, EOG fed back.
import {execFileSync} from "node:child_process";
import {readFileSync, mkdtempSync} from "node:fs";
import os from "node:os";
import path from "node:path";
import {caldrix, version, loadLlama, sha256 as sha, greedy, writeGolden} from "./llamacpp-lib.mjs";

const tmp = mkdtempSync(path.join(os.tmpdir(), "cdx-gemma-"));
const llama = await loadLlama();
const run = (args) => execFileSync(caldrix, args, {stdio: ["ignore", "ignore", "inherit"]});
const out = {reference: `llama.cpp via node-llama-cpp ${version} (prebuilt linux-x64 CPU), context 256, batch 256, ` +
    `flash attention off, F32 KV cache, greedy, 16 steps, EOG fed back`,
    source: "caldrix convert ../shared/fixtures/hf/NAME --type F32, then caldrix quantize F32 Q8_0", models: []};
for (const name of ["gemma", "gemma2", "gemma3"]) {
    const gold = JSON.parse(readFileSync(`../shared/fixtures/hf/${name}/golden.json`, "utf8"));
    const f32 = path.join(tmp, `${name}-F32.gguf`), q8 = path.join(tmp, `${name}-Q8_0.gguf`);
    run(["convert", `../shared/fixtures/hf/${name}`, f32, "--type", "F32"]);
    run(["quantize", f32, q8, "Q8_0"]);
    for (const [type, file] of [["F32", f32], ["Q8_0", q8]]) {
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
}
writeGolden("tests/golden/gemma-llamacpp.json", out);
