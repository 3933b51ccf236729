#!/usr/bin/env node
// Makes tests/golden/moe-quant.json: llama.cpp's greedy tokens for random-weight mixtures of experts
// (`caldrix synth --shape tiny-qwen3moe` and `tiny-qwen2moe`: hidden 256, 4 heads / 2 KV heads,
// head_dim 64, 2 layers, every layer sparse with 8 experts, top-2, expert FFN 256, vocab 512, an
// untied head; qwen2moe adds q/k/v biases and a 512-wide shared expert behind its sigmoid gate) in
// Q8_0, Q4_K_M and Q4_0 (and F32, the unquantized baseline).
//
//   node scripts/goldens/llamacpp-quant-moe.mjs --nlc DIR [--caldrix build/caldrix]
//
// As scripts/goldens/llamacpp-quant-qwen3.mjs: each file is made twice, by `caldrix quantize` of the
// synth F32 model (what tests/cli/test_quant_moe.sh regenerates; its sha256 is recorded) and by
// llama.cpp's own quantizer (llama_model_quantize of the shipped libllama, llama-quantize.c), their
// tensors compared (tensors_equal_llamacpp_quantizer), and llama.cpp's tokens computed on llama.cpp's
// own file. DIR holds node_modules/node-llama-cpp (3.21.1) and, in DIR/src, llama.cpp's source at
// that version (for llama.h). Context 256, batch 256, flash attention off, F32 KV cache, greedy.
import {createHash} from "node:crypto";
import {execFileSync} from "node:child_process";
import {readFileSync, writeFileSync, mkdtempSync, existsSync} from "node:fs";
import os from "node:os";
import path from "node:path";
import {pathToFileURL} from "node:url";

const argv = process.argv.slice(2);
const opt = (k, d) => { const i = argv.indexOf(k); return i >= 0 ? argv[i + 1] : d; };
const nlc = path.resolve(opt("--nlc", process.env.NODE_LLAMA_CPP_DIR || ""));
const caldrix = opt("--caldrix", "build/caldrix");
const {getLlama} = await import(pathToFileURL(path.join(nlc, "node_modules", "node-llama-cpp", "dist", "index.js")).href);
const version = JSON.parse(readFileSync(path.join(nlc, "node_modules", "node-llama-cpp", "package.json"), "utf8")).version;
const bins = path.join(nlc, "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64");
const src = path.join(nlc, "src");
if (!existsSync(path.join(src, "include", "llama.h"))) throw new Error(`${src}/include/llama.h is missing: git clone the bundle there`);

const SHAPES = ["tiny-qwen3moe", "tiny-qwen2moe"], SEED = "1", STEPS = 24;
// llama_ftype ids (include/llama.h)
const ftypes = {F32: 0, Q4_0: 2, Q8_0: 7, Q4_K_M: 15};
// prompts: 16 ids each (the step-0 case is the first), fixed, within the 512-token vocabulary
const prompts = [
    [1, 5, 9, 20, 33, 47, 60, 72, 88, 99, 101, 150, 200, 250, 300, 400],
    [1, 300, 439, 12, 77, 256, 3, 511, 128, 64, 32, 480, 91, 205, 333, 17],
    [1, 260, 261, 262, 263, 264, 265, 266, 267, 268, 269, 270, 271, 272, 273, 274],
];

// ---- GGUF: the tensor table and the data section, enough to compare two files' tensors ----
function ggufTensors(file) {
    const b = readFileSync(file);
    let o = 0;
    const u32 = () => { const v = b.readUInt32LE(o); o += 4; return v; };
    const u64 = () => { const v = Number(b.readBigUInt64LE(o)); o += 8; return v; };
    const str = () => { const n = u64(); const s = b.toString("utf8", o, o + n); o += n; return s; };
    const size = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8};
    const skip = (t) => {
        if (t === 8) { str(); return; }
        if (t === 9) { const et = u32(), n = u64(); for (let i = 0; i < n; i++) skip(et); return; }
        o += size[t];
    };
    if (b.toString("latin1", 0, 4) !== "GGUF") throw new Error(`${file}: not GGUF`);
    o = 4; u32();
    const nt = u64(), nkv = u64();
    let align = 32;
    for (let i = 0; i < nkv; i++) {
        const k = str(), t = u32();
        if (k === "general.alignment" && t === 4) { align = b.readUInt32LE(o); o += 4; } else skip(t);
    }
    const tensors = [];
    for (let i = 0; i < nt; i++) {
        const name = str(), nd = u32(), ne = [];
        for (let d = 0; d < nd; d++) ne.push(u64());
        tensors.push({name, ne, type: u32(), offset: u64()});
    }
    const data = Math.ceil(o / align) * align;
    // each tensor's bytes run to the next one's offset (padding included, zero in both writers)
    const byOff = [...tensors].sort((p, q) => p.offset - q.offset);
    const m = new Map();
    byOff.forEach((t, i) => m.set(t.name, {type: t.type, ne: t.ne.join(","),
        bytes: b.subarray(data + t.offset, i + 1 < byOff.length ? data + byOff[i + 1].offset : b.length)}));
    return m;
}
// the same tensors (names, types, shapes, bytes), whatever order the two writers put them in
function sameTensors(a, b) {
    const x = ggufTensors(a), y = ggufTensors(b);
    if (x.size !== y.size) return false;
    for (const [k, t] of x) {
        const u = y.get(k);
        if (!u || u.type !== t.type || u.ne !== t.ne || !u.bytes.equals(t.bytes)) return false;
    }
    return true;
}

const tmp = mkdtempSync(path.join(os.tmpdir(), "cdx-moe-quant-"));
const lq = path.join(tmp, "llama-quantize");
execFileSync("cc", ["-O1", "-std=c11", `-I${src}/include`, `-I${src}/ggml/include`, "scripts/goldens/llama-quantize.c", "-o", lq,
    `${bins}/libllama.v0.4.0.so`, `${bins}/libggml.v0.4.0.so`, `${bins}/libggml-base.so`, `-Wl,-rpath,${bins}`]);
const llama = await getLlama({gpu: false, build: "never", logLevel: "warn", logger: () => {}});
const out = {reference: `llama.cpp via node-llama-cpp ${version} (prebuilt linux-x64 CPU), context 256, batch 256, ` +
    `flash attention off, F32 KV cache, greedy, ${STEPS} steps, EOG fed back`, files: []};
for (const SHAPE of SHAPES) {
const f32 = path.join(tmp, `${SHAPE}-source-F32.gguf`);
execFileSync(caldrix, ["synth", f32, "--shape", SHAPE, "--type", "F32", "--seed", SEED], {stdio: ["ignore", "ignore", "inherit"]});
for (const [t, id] of Object.entries(ftypes)) {
    const mine = path.join(tmp, `${SHAPE}-${t}.gguf`), theirs = path.join(tmp, `${SHAPE}-${t}-llama.gguf`);
    if (t === "F32") execFileSync("cp", [f32, mine]);
    else {
        try { execFileSync(caldrix, ["quantize", f32, mine, t], {stdio: ["ignore", "ignore", "ignore"]}); }
        catch { console.error(`${SHAPE} ${t}: caldrix quantize cannot make it; skipped`); continue; }
    }
    if (t === "F32") execFileSync("cp", [f32, theirs]);
    else {
        try { execFileSync(lq, [f32, theirs, String(id)], {stdio: ["ignore", "ignore", "ignore"]}); }
        catch { console.error(`${SHAPE} ${t}: llama.cpp's quantizer refuses it; skipped`); continue; }
    }
    const same = sameTensors(mine, theirs);
    const sha256 = createHash("sha256").update(readFileSync(mine)).digest("hex");
    const model = await llama.loadModel({modelPath: theirs, gpuLayers: 0});
    const cases = [];
    for (const ids of prompts) {
        const ctx = await model.createContext({contextSize: 256, batchSize: 256, flashAttention: false, sequences: 1, threads: 2,
            experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"});
        const seq = ctx.getSequence();
        const tokens = [], gaps = [];
        for await (const r of seq.evaluateWithMetadata(ids, {probabilities: true}, {temperature: 0, yieldEogToken: true})) {
            tokens.push(r.token);
            const p = [...r.probabilities.values()];
            gaps.push(Number(Math.log(p[0] / p[1]).toPrecision(4)));
            if (tokens.length >= STEPS) break;
        }
        await ctx.dispose();
        cases.push({prompt_ids: ids, tokens, top2_logit_gap: gaps});
    }
    await model.dispose();
    out.files.push({shape: SHAPE, type: t,
        source: `caldrix synth --shape ${SHAPE} --type F32 --seed ${SEED}` + (t === "F32" ? "" : `, then caldrix quantize F32 ${t}`),
        sha256, tensors_equal_llamacpp_quantizer: same, cases});
    console.error(`${SHAPE} ${t}: ${sha256.slice(0, 12)}… tensors ${same ? "equal" : "DIFFER from"} llama.cpp's quantizer`);
}
}
const text = JSON.stringify(out, null, 1).replace(/\[\s*([-0-9.e+,\s]+?)\s*\]/g, (_, b) => "[" + b.split(/,\s*/).join(",") + "]");
writeFileSync("tests/golden/moe-quant.json", text + "\n");
console.error("wrote tests/golden/moe-quant.json");
