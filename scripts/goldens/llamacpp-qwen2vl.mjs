#!/usr/bin/env node
// Makes tests/golden/qwen2vl-llamacpp.json: llama.cpp's greedy tokens on Qwen2-VL's and Qwen2.5-VL's text path, as
// `caldrix convert` writes the tiny checkpoints scripts/goldens/tiny_fixtures.py makes (F32, general.name
// "tiny-random": llama.cpp's "qwen2vl" with rope.dimension_sections), and on those files quantized by
// `caldrix quantize` to Q8_0, with each file's sha256 (tests/cli/test_qwen2vl_gguf.sh regenerates the files and
// checks it before comparing tokens). The prompts are the cases of the family's first variant in
// tests/golden/qwen2vl.json; the script also says whether llama.cpp's tokens on the F32 file equal PyTorch's there.
// llama.cpp gives a text token of an M-RoPE model the positions (p, p, p, 0) (llm_graph_input_pos::set_input).
//
//   node scripts/goldens/llamacpp-qwen2vl.mjs --nlc DIR [--caldrix build/caldrix]
//
// DIR holds node_modules/node-llama-cpp (3.21.1); settings as llamacpp-lib.mjs's greedy: context 256, batch 256,
// flash attention off, F32 KV cache, greedy, 16 steps, EOG fed back.
import {execFileSync} from "node:child_process";
import {readFileSync, mkdtempSync} from "node:fs";
import os from "node:os";
import path from "node:path";
import {caldrix, version, loadLlama, sha256 as sha, greedy, writeGolden} from "./llamacpp-lib.mjs";

export const FAMILIES = [
    {name: "qwen2_vl", config: {}, types: ["Q8_0"]},
    {name: "qwen2_5_vl", config: {}, types: ["Q8_0"]},
];
const outFile = "tests/golden/qwen2vl-llamacpp.json";
const tmp = mkdtempSync(path.join(os.tmpdir(), "cdx-q2vl-"));
const llama = await loadLlama();
const run = (cmd, args) => execFileSync(cmd, args, {stdio: ["ignore", "ignore", "inherit"]});
const gold = JSON.parse(readFileSync("tests/golden/qwen2vl.json", "utf8"));
const out = {
    reference: `llama.cpp via node-llama-cpp ${version} (prebuilt linux-x64 CPU), context 256, batch 256, ` +
        `flash attention off, F32 KV cache, greedy, 16 steps, EOG fed back`,
    source: "python3 scripts/goldens/tiny_fixtures.py NAME DIR; caldrix convert DIR --type F32 --name tiny-random, " +
        "then caldrix quantize F32 Q8_0", models: []};
for (const fam of FAMILIES) {
    const dir = path.join(tmp, fam.name);
    run("python3", ["scripts/goldens/tiny_fixtures.py", fam.name, dir, JSON.stringify(fam.config)]);
    const g = gold.variants.find((v) => v.family === fam.name);
    const f32 = path.join(tmp, `${fam.name}-F32.gguf`);
    run(caldrix, ["convert", dir, f32, "--type", "F32", "--name", "tiny-random"]);
    const files = [["F32", f32]];
    for (const t of fam.types) {
        const file = path.join(tmp, `${fam.name}-${t}.gguf`);
        run(caldrix, ["quantize", f32, file, t]);
        files.push([t, file]);
    }
    for (const [type, file] of files) {
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
