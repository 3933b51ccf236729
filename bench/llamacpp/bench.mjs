#!/usr/bin/env node
// llama.cpp through node-llama-cpp (pinned in package.json): the same measurement as `caldrix bench`.
//
//   node bench/llamacpp/bench.mjs MODEL.gguf [--threads 2] [--prompt 128] [--gen 64] [--runs 3]
//
// Prints one JSON object: load_ms (loadModel + createContext), prefill_tok_s (the prompt, synthetic
// ids, in one batch), decode_tok_s (--gen tokens one at a time, greedy), medians over --runs runs
// after a warm-up, and cpu_variant: the ggml CPU backend library the process actually mapped
// (node-llama-cpp ships one per x86 level and ggml loads the best this CPU scores).
//
// node-llama-cpp has no thread-pool option: each llama_decode lets ggml make and join its
// threads. bench/llamacpp/llama_bench.c is the same measurement through the shipped library with a
// persistent ggml thread pool attached.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
import fs from "node:fs";

function parseArgs(argv) {
    const o = {threads: 2, prompt: 128, gen: 64, runs: 3, model: null};
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i], v = argv[i + 1];
        const num = (name) => {
            const n = Number(v);
            if (!Number.isInteger(n) || n < 1) throw new Error(`${name}: "${v}" is not a positive integer`);
            i++;
            return n;
        };
        if (a === "--threads" || a === "-t") o.threads = num(a);
        else if (a === "--prompt" || a === "-p") o.prompt = num(a);
        else if (a === "--gen" || a === "-n") o.gen = num(a);
        else if (a === "--runs" || a === "-r") o.runs = num(a);
        else if (a === "--help" || a === "-h") {
            console.log("usage: node bench.mjs MODEL.gguf [--threads N] [--prompt P] [--gen N] [--runs R]");
            process.exit(0);
        } else if (a.startsWith("-")) throw new Error(`unknown option ${a}`);
        else o.model = a;
    }
    if (!o.model) throw new Error("MODEL.gguf is required");
    return o;
}

const median = (v) => {
    const s = [...v].sort((a, b) => a - b), n = s.length;
    return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
};

// The ggml CPU variant this process mapped (e.g. libggml-cpu-zen4.so).
function cpuVariant() {
    const maps = fs.readFileSync("/proc/self/maps", "utf8");
    const libs = new Set([...maps.matchAll(/\/(libggml-cpu[^\/\s]*\.so)/g)].map((m) => m[1]));
    return [...libs].join(",") || "unknown";
}

async function main() {
    const opt = parseArgs(process.argv.slice(2));
    const logs = [];
    const llama = await getLlama({
        gpu: false, build: "never", maxThreads: opt.threads, logLevel: LlamaLogLevel.warn,
        logger: (level, message) => logs.push(message),
    });
    const t0 = performance.now();
    const model = await llama.loadModel({modelPath: opt.model, gpuLayers: 0});
    const context = await model.createContext({
        contextSize: opt.prompt + opt.gen + 16, batchSize: opt.prompt, sequences: 1, threads: opt.threads,
    });
    const loadMs = performance.now() - t0;
    const seq = context.getSequence();

    // synthetic prompt ids (never the first three, the specials), the same spread as caldrix bench
    const embd = model.fileInfo.tensorInfo?.find((t) => t.name === "token_embd.weight");
    const vocab = Number(embd?.dimensions?.[1] ?? 0);
    if (vocab < 4) throw new Error(`${opt.model}: cannot read the vocabulary size from token_embd.weight`);
    const ids = [];
    let s = 0x2545f4914f6cdd1dn;
    for (let i = 0; i < opt.prompt; i++) {
        s = (s * 6364136223846793005n + 1442695040888963407n) & 0xffffffffffffffffn;
        ids.push(Number(3n + (s >> 33n) % BigInt(vocab - 3)));
    }

    async function once(nPrompt, nGen) {
        await seq.clearHistory();
        const a = performance.now();
        await seq.evaluateWithoutGeneratingNewTokens(ids.slice(0, nPrompt));
        const b = performance.now();
        let n = 0;
        // each step evaluates one token and samples the next (greedy)
        for await (const tok of seq.evaluate([ids[nPrompt - 1]], {temperature: 0})) {
            void tok;
            if (++n >= nGen) break;
        }
        const c = performance.now();
        return {prefill: nPrompt / ((b - a) / 1e3), decode: nGen / ((c - b) / 1e3)};
    }

    await once(Math.min(opt.prompt, 16), 2); // warm-up: pages the weights in
    const pre = [], dec = [];
    for (let r = 0; r < opt.runs; r++) {
        const x = await once(opt.prompt, opt.gen);
        pre.push(x.prefill);
        dec.push(x.decode);
    }
    const out = {
        engine: "llama.cpp (node-llama-cpp 3.21.1, no thread pool)",
        model: opt.model, threads: context.currentThreads ?? opt.threads, n_prompt: opt.prompt, n_gen: opt.gen,
        runs: opt.runs, load_ms: loadMs, prefill_tok_s: median(pre), decode_tok_s: median(dec),
        prefill_tok_s_best: Math.max(...pre), decode_tok_s_best: Math.max(...dec),
        prefill_tok_s_runs: pre, decode_tok_s_runs: dec, cpu_variant: cpuVariant(),
    };
    console.log(JSON.stringify(out));
    await context.dispose();
    await model.dispose();
    await llama.dispose();
}

main().catch((e) => {
    console.error(`bench.mjs: ${e.message ?? e}`);
    process.exit(1);
});
