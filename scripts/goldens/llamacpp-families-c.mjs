#!/usr/bin/env node
// Makes tests/golden/families-c-llamacpp.json: llama.cpp's greedy tokens on the families without a fixture
// in ../shared (the tiny checkpoints scripts/goldens/tiny_fixtures.py writes, under the `config` of each
// entry below) as `caldrix convert` writes them (F32, general.name "tiny-random"), and on those files
// quantized by `caldrix quantize` to each of the entry's types (Q8_0; GPT-OSS also MXFP4_MOE, the published
// GGUF files' layout: MXFP4 experts, Q8_0 elsewhere; BitNet also TQ1_0 and TQ2_0, on a 256-wide SiLU fixture
// since llama.cpp's bitnet graph gates with SiLU and the ternary types take rows of 256), with each file's sha256 (tests/cli/test_families_c_gguf.sh
// regenerates the files and checks it before comparing tokens). The prompts are the cases of the family's
// variant in tests/golden/families-c.json with the entry's config (else its first); the script also says whether
// llama.cpp's tokens on the F32 file equal PyTorch's there. Where DIR/src holds llama.cpp's source at the library's version (a clone of
// node-llama-cpp's llama/gitRelease.bundle, for llama.h), each quantized file is also made by llama.cpp's own
// quantizer (llama-quantize.c) and `tensors_equal_llamacpp_quantizer` says whether its tensors are caldrix's.
//
//   node scripts/goldens/llamacpp-families-c.mjs --nlc DIR [--caldrix build/caldrix] [--only a,b]
//
// DIR holds node_modules/node-llama-cpp (3.21.1); settings as llamacpp-lib.mjs's greedy: context 256,
// batch 256, flash attention off, F32 KV cache, greedy, 16 steps, EOG fed back.
import {execFileSync} from "node:child_process";
import {readFileSync, mkdtempSync, existsSync} from "node:fs";
import os from "node:os";
import path from "node:path";
import {caldrix, opt, nlc, version, loadLlama, sha256 as sha, greedy, writeGolden, buildQuantizer, sameTensors}
    from "./llamacpp-lib.mjs";

// types: what `caldrix quantize` makes of the F32 file (llama_ftype ids for llama.cpp's quantizer)
export const FAMILIES = [
    {name: "olmo", config: {}, types: {Q8_0: 7}},
    {name: "gpt_oss", config: {}, types: {Q8_0: 7, MXFP4_MOE: 38}},
    {name: "bitnet", config: {hidden_act: "silu", hidden_size: 256, intermediate_size: 256, num_key_value_heads: 4},
     types: {Q8_0: 7, TQ1_0: 36, TQ2_0: 37}},
];
const only = opt("--only", null);
const outFile = "tests/golden/families-c-llamacpp.json";
const tmp = mkdtempSync(path.join(os.tmpdir(), "cdx-fc-"));
const llama = await loadLlama();
const run = (cmd, args) => execFileSync(cmd, args, {stdio: ["ignore", "ignore", "inherit"]});
const gold = JSON.parse(readFileSync("tests/golden/families-c.json", "utf8"));
const lq = existsSync(path.join(nlc, "src", "include", "llama.h")) ? buildQuantizer(tmp) : null;
const out = existsSync(outFile) && only ? JSON.parse(readFileSync(outFile, "utf8")) : {
    reference: `llama.cpp via node-llama-cpp ${version} (prebuilt linux-x64 CPU), context 256, batch 256, ` +
        `flash attention off, F32 KV cache, greedy, 16 steps, EOG fed back`,
    source: "python3 scripts/goldens/tiny_fixtures.py NAME DIR CONFIG; caldrix convert DIR --type F32 --name " +
        "tiny-random, then caldrix quantize F32 TYPE for each type (Q8_0; gpt_oss also MXFP4_MOE; bitnet also TQ1_0, " +
        "TQ2_0)", models: []};
for (const fam of FAMILIES) {
    if (only && !only.split(",").includes(fam.name)) continue;
    out.models = out.models.filter((m) => m.name !== fam.name);
    const dir = path.join(tmp, fam.name);
    run("python3", ["scripts/goldens/tiny_fixtures.py", fam.name, dir, JSON.stringify(fam.config)]);
    const own = gold.variants.find((v) => v.family === fam.name && JSON.stringify(v.config) === JSON.stringify(fam.config));
    const g = own ?? gold.variants.find((v) => v.family === fam.name);
    const f32 = path.join(tmp, `${fam.name}-F32.gguf`);
    run(caldrix, ["convert", dir, f32, "--type", "F32", "--name", "tiny-random"]);
    const files = [["F32", f32]], sameQuant = {};
    for (const [t, id] of Object.entries(fam.types)) {
        const file = path.join(tmp, `${fam.name}-${t}.gguf`);
        run(caldrix, ["quantize", f32, file, t]);
        files.push([t, file]);
        if (lq) {
            const theirs = path.join(tmp, `${fam.name}-${t}-llama.gguf`);
            run(lq, [f32, theirs, String(id)]);
            sameQuant[t] = sameTensors(file, theirs);
            console.error(`${fam.name} ${t}: llama.cpp's quantizer writes ${sameQuant[t] ? "the same" : "OTHER"} tensors`);
        }
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
            ...(type in sameQuant ? {tensors_equal_llamacpp_quantizer: sameQuant[type]} : {}),
            same_as_pytorch: own ? `${same}/${cases.length}` : "n/a (no PyTorch golden of this config)", cases});
        console.error(`${fam.name} ${type}: llama.cpp equals PyTorch's goldens on ${same}/${cases.length} cases`);
    }
}
writeGolden(outFile, out);
