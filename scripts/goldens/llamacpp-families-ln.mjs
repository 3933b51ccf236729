#!/usr/bin/env node
// Makes tests/golden/families-ln-llamacpp.json: llama.cpp's greedy tokens on the LayerNorm families'
// fixtures (../shared/fixtures/hf/{stablelm,starcoder2,cohere}) as `caldrix convert` writes them (F32),
// and on those files quantized by `caldrix quantize` to Q8_0. The sha256 of each file is recorded (a pin
// of caldrix's output: tests/cli/test_families_ln_gguf.sh regenerates the files and checks it before
// comparing tokens); the script also says whether llama.cpp's tokens on the F32 file equal PyTorch's
// goldens. llama.cpp's starcoder2 has no sliding window, so starcoder2 is converted from the fixture's
// config.json with "sliding_window": null (the same weights; caldrix then computes without one too).
//
//   node scripts/goldens/llamacpp-families-ln.mjs --nlc DIR [--caldrix build/caldrix] [--set ln|b] [--only a,b]
//
// DIR holds node_modules/node-llama-cpp (3.21.1); settings as llamacpp-lib.mjs's greedy: context 256,
// batch 256, flash attention off, F32 KV cache, greedy, 16 steps, EOG fed back.
import {execFileSync} from "node:child_process";
import {readFileSync, writeFileSync, mkdtempSync, mkdirSync, symlinkSync, existsSync} from "node:fs";
import os from "node:os";
import path from "node:path";
import {caldrix, opt, version, loadLlama, sha256 as sha, greedy, writeGolden} from "./llamacpp-lib.mjs";

// --set b: the other fixtures whose GGUF llama.cpp runs as transformers does (granite, olmo2, smollm3,
// mixtral, qwen2_moe, granitemoe; olmoe's GQA k_norm llama.cpp cannot load, qwen3_moe's dense mlp_only_layers
// neither), written to tests/golden/families-b-llamacpp.json; tests/cli/test_families_ln_gguf.sh checks both files.
const SETS = {
    ln: {out: "tests/golden/families-ln-llamacpp.json",
         families: [{name: "stablelm"}, {name: "starcoder2", config: {sliding_window: null}}, {name: "cohere"}]},
    b: {out: "tests/golden/families-b-llamacpp.json", families: [{name: "granite"}, {name: "olmo2"}, {name: "smollm3"},
                  {name: "mixtral"}, {name: "qwen2_moe"}, {name: "granitemoe"}]},
};
const set = SETS[opt("--set", "ln")];
if (!set) throw new Error("--set is ln or b");
export const FAMILIES = set.families;
const only = opt("--only", null);
const outFile = set.out;
const tmp = mkdtempSync(path.join(os.tmpdir(), "cdx-ln-"));
const llama = await loadLlama();
const run = (args) => execFileSync(caldrix, args, {stdio: ["ignore", "ignore", "inherit"]});
const out = existsSync(outFile) && only ? JSON.parse(readFileSync(outFile, "utf8")) : {
    reference: `llama.cpp via node-llama-cpp ${version} (prebuilt linux-x64 CPU), context 256, batch 256, ` +
        `flash attention off, F32 KV cache, greedy, 16 steps, EOG fed back`,
    source: "caldrix convert DIR --type F32 (DIR: ../shared/fixtures/hf/NAME, config.json keys replaced by `config`), " +
        "then caldrix quantize F32 Q8_0", models: []};
for (const fam of FAMILIES) {
    if (only && !only.split(",").includes(fam.name)) continue;
    out.models = out.models.filter((m) => m.name !== fam.name);
    const src = path.resolve(`../shared/fixtures/hf/${fam.name}`);
    let dir = src;
    if (fam.config) { // the fixture's weights under other config.json keys
        dir = path.join(tmp, fam.name);
        mkdirSync(dir);
        const cfg = {...JSON.parse(readFileSync(path.join(src, "config.json"), "utf8")), ...fam.config};
        writeFileSync(path.join(dir, "config.json"), JSON.stringify(cfg, null, 2));
        symlinkSync(path.join(src, "model.safetensors"), path.join(dir, "model.safetensors"));
    }
    const gold = JSON.parse(readFileSync(path.join(src, "golden.json"), "utf8"));
    const f32 = path.join(tmp, `${fam.name}-F32.gguf`), q8 = path.join(tmp, `${fam.name}-Q8_0.gguf`);
    run(["convert", dir, f32, "--type", "F32"]);
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
        out.models.push({name: fam.name, type, config: fam.config || {}, sha256: sha(file),
            same_as_pytorch: `${same}/${cases.length}`, cases});
        console.error(`${fam.name} ${type}: llama.cpp equals PyTorch's fixture goldens on ${same}/${cases.length} cases`);
    }
}
writeGolden(outFile, out);
