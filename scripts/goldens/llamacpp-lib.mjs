// What the llama.cpp golden generators share: the command line (--nlc DIR, --caldrix BIN), loading
// node-llama-cpp's prebuilt CPU library, one greedy run with llama.cpp's top-two logit gap, the GGUF
// tensor comparison, the build of llama.cpp's own quantizer (llama-quantize.c) and the compact JSON
// the goldens are written in. DIR holds node_modules/node-llama-cpp (3.21.1:
// `NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install -E node-llama-cpp@3.21.1`; bench/llamacpp has it).
import {createHash} from "node:crypto";
import {execFileSync} from "node:child_process";
import {readFileSync, writeFileSync, existsSync} from "node:fs";
import path from "node:path";
import {pathToFileURL} from "node:url";

const argv = process.argv.slice(2);
export const opt = (k, d) => { const i = argv.indexOf(k); return i >= 0 ? argv[i + 1] : d; };
export const caldrix = opt("--caldrix", "build/caldrix");
const nlcArg = opt("--nlc", process.env.NODE_LLAMA_CPP_DIR);
if (!nlcArg) throw new Error("give --nlc DIR (a folder holding node_modules/node-llama-cpp)");
export const nlc = path.resolve(nlcArg);
const pkg = path.join(nlc, "node_modules", "node-llama-cpp");
export const version = JSON.parse(readFileSync(path.join(pkg, "package.json"), "utf8")).version;
export const bins = path.join(nlc, "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64");

export async function loadLlama() {
    const {getLlama} = await import(pathToFileURL(path.join(pkg, "dist", "index.js")).href);
    return getLlama({gpu: false, build: "never", logLevel: "warn", logger: () => {}});
}

export const sha256 = (file) => createHash("sha256").update(readFileSync(file)).digest("hex");

// One greedy run on a fresh context (with lora: that GGUF LoRA adapter at scale 1): context 256, batch 256, flash attention off, F32 KV cache (caldrix
// keeps K and V in f32; llama.cpp's default F16 cache also rounds q and the softmax weights to f16,
// which moves near-ties), 2 threads, EOG fed back. With gaps, also the logit gap between llama.cpp's
// top two, log(p1/p2), which the tests use to recognise near-ties.
export async function greedy(model, ids, steps, {gaps = true, lora = null} = {}) {
    const ctx = await model.createContext({contextSize: 256, batchSize: 256, flashAttention: false, sequences: 1, threads: 2,
        experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
        ...(lora ? {lora: {adapters: [{filePath: lora, scale: 1}]}} : {})});
    const seq = ctx.getSequence();
    const tokens = [], gap = [];
    for await (const r of seq.evaluateWithMetadata(ids, gaps ? {probabilities: true} : {}, {temperature: 0, yieldEogToken: true})) {
        tokens.push(r.token);
        if (gaps) {
            const p = [...r.probabilities.values()];
            gap.push(Number(Math.log(p[0] / p[1]).toPrecision(4)));
        }
        if (tokens.length >= steps) break;
    }
    await ctx.dispose();
    return gaps ? {tokens, top2_logit_gap: gap} : {tokens};
}

// The goldens' JSON: one space of indent, arrays of numbers on one line.
export function writeGolden(file, obj) {
    const text = JSON.stringify(obj, null, 1).replace(/\[\s*([-0-9.e+,\s]+?)\s*\]/g, (_, b) => "[" + b.split(/,\s*/).join(",") + "]");
    writeFileSync(file, text + "\n");
    console.error(`wrote ${file}`);
}

// llama.cpp's own quantizer (llama_model_quantize of the shipped libllama), built into dir; needs
// llama.cpp's headers at that version in DIR/src (a clone of node-llama-cpp's llama/gitRelease.bundle).
export function buildQuantizer(dir) {
    const src = path.join(nlc, "src");
    if (!existsSync(path.join(src, "include", "llama.h"))) throw new Error(`${src}/include/llama.h is missing: git clone the bundle there`);
    const lq = path.join(dir, "llama-quantize");
    execFileSync("cc", ["-O1", "-std=c11", `-I${src}/include`, `-I${src}/ggml/include`, "scripts/goldens/llama-quantize.c", "-o", lq,
        `${bins}/libllama.v0.4.0.so`, `${bins}/libggml.v0.4.0.so`, `${bins}/libggml-base.so`, `-Wl,-rpath,${bins}`]);
    return lq;
}

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
export function sameTensors(a, b) {
    const x = ggufTensors(a), y = ggufTensors(b);
    if (x.size !== y.size) return false;
    for (const [k, t] of x) {
        const u = y.get(k);
        if (!u || u.type !== t.type || u.ne !== t.ne || !u.bytes.equals(t.bytes)) return false;
    }
    return true;
}
