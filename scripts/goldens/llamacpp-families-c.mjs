#!/usr/bin/env node
// Makes tests/golden/families-c-llamacpp.json: llama.cpp's greedy tokens on the families without a fixture
// in ../shared (the tiny checkpoints scripts/goldens/tiny_fixtures.py writes, under the `config` of each
// entry below) as `caldrix convert` writes them (F32, general.name "tiny-random"), and on those files
// quantized by `caldrix quantize` to Q8_0, with each file's sha256 (tests/cli/test_families_c_gguf.sh
// regenerates the files and checks it before comparing tokens). The prompts are the cases of the family's
// first variant in tests/golden/families-c.json; the script also says whether llama.cpp's tokens on the F32
// file equal PyTorch's there.
//
//   node scripts/goldens/llamacpp-families-c.mjs --nlc DIR [--caldrix build/caldrix] [--only a,b]
//
// DIR holds node_modules/node-llama-cpp (3.21.1); settings as llamacpp-lib.mjs's greedy: context 256,
// batch 256, flash attention off, F32 KV cache, greedy, 16 steps, EOG fed back.
import {execFileSync} from "node:child_process";
import {readFileSync, mkdtempSync, existsSync} from "node:fs";
import os from "node:os";
import path from "node:path";
import {caldrix, opt, version, loadLlama, sha256 as sha, greedy, writeGolden} from "./llamacpp-lib.mjs";

export const FAMILIES = [
    {name: "olmo", config: {}},
];
const only = opt("--only", null);
const outFile = "tests/golden/families-c-llamacpp.json";
const tmp = mkdtempSync(path.join(os.tmpdir(), "cdx-fc-"));
const llama = await loadLlama();
const run = (cmd, args) => execFileSync(cmd, args, {stdio: ["ignore", "ignore", "inherit"]});
const gold = JSON.parse(readFileSync("tests/golden/families-c.json", "utf8"));
const out = existsSync(outFile) && only ? JSON.parse(readFileSync(outFile, "utf8")) : {
    reference: `llama.cpp via node-llama-cpp ${version} (prebuilt linux-x64 CPU), context 256, batch 256, ` +
        `flash attention off, F32 KV cache, greedy, 16 steps, EOG fed back`,
    source: "python3 scripts/goldens/tiny_fixtures.py NAME DIR CONFIG; caldrix convert DIR --type F32 --name " +
        "tiny-random, then caldrix quantize F32 Q8_0", models: []};
for (const fam of FAMILIES) {
    if (only && !only.split(",").includes(fam.name)) continue;
    out.models = out.models.filter((m) => m.name !== fam.name);
    const dir = path.join(tmp, fam.name);
    run("python3", ["scripts/goldens/tiny_fixtures.py", fam.name, dir, JSON.stringify(fam.config)]);
    const g = gold.variants.find((v) => v.family === fam.name);
    const f32 = path.join(tmp, `${fam.name}-F32.gguf`), q8 = path.join(tmp, `${fam.name}-Q8_0.gguf`);
    run(caldrix, ["convert", dir, f32, "--type", "F32", "--name", "tiny-random"]);
    run(caldrix, ["quantize", f32, q8, "Q8_0"]);
    for (const [type, file] of [["F32", f32], ["Q8_0", q8]]) {
        const model = await llama.loadModel({modelPath: file, gpuLayers: 0});
        const cases = [];
        let same = 0;
        for (const c of g.cases) {
            const r = await greedy(model, c.prompt_ids, 16);
            if (JSON.stringify(r.tokens) === JSON.stringify(c.tokens)) same++;
            cases.push({name: c.name, prompt_ids: c.prompt_ids, ...r});
        }
        await model.dispose();
        out.models.push({name: fam.name, type, config: fam.config, sha256: sha(file),
            same_as_pytorch: `${same}/${cases.length}`, cases});
        console.error(`${fam.name} ${type}: llama.cpp equals PyTorch's goldens on ${same}/${cases.length} cases`);
    }
}
writeGolden(outFile, out);
