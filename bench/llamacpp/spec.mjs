#!/usr/bin/env node
// llama.cpp's speculative decoding through node-llama-cpp's token predictors (pinned in package.json),
// the same measurement as `caldrix bench --draft` / `--spec lookup`:
//
//   node bench/llamacpp/spec.mjs MODEL.gguf [--draft DRAFT.gguf | --lookup] [--draft-max K]
//                                [--threads 2] [--prompt 128] [--gen 64] [--runs 3]
//
// Without --draft or --lookup: plain decode. --draft: a DraftSequenceTokenPredictor on a sequence of
// DRAFT's own context (maxTokens = minTokens = K, minConfidence 0: each step waits for K draft tokens,
// as llama.cpp's speculative example drafts; with minTokens 0 the draft, running beside the target,
// is never ready in time and nothing is proposed); --lookup: an InputLookupTokenPredictor (maxTokens K). Prints one
// JSON object: decode_tok_s (--gen tokens after the synthetic prompt, greedy), its runs, and the
// predictions validated and refuted (seq.tokenPredictions), medians over --runs runs after a warm-up.
import {getLlama, LlamaLogLevel, DraftSequenceTokenPredictor, InputLookupTokenPredictor} from "node-llama-cpp";

function parseArgs(argv) {
    const o = {threads: 2, prompt: 128, gen: 64, runs: 3, model: null, draft: null, lookup: false, k: 8};
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
        else if (a === "--draft-max") o.k = num(a);
        else if (a === "--draft") { o.draft = v; i++; }
        else if (a === "--lookup") o.lookup = true;
        else if (a.startsWith("-")) throw new Error(`unknown option ${a}`);
        else o.model = a;
    }
    if (!o.model) throw new Error("MODEL.gguf is required");
    if (o.draft && o.lookup) throw new Error("--draft and --lookup: one proposer");
    return o;
}

const median = (v) => {
    const s = [...v].sort((a, b) => a - b), n = s.length;
    return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
};

async function main() {
    const opt = parseArgs(process.argv.slice(2));
    const llama = await getLlama({gpu: false, build: "never", maxThreads: opt.threads, logLevel: LlamaLogLevel.error});
    const ctxSize = opt.prompt + opt.gen + opt.k + 32;
    const model = await llama.loadModel({modelPath: opt.model, gpuLayers: 0});
    const context = await model.createContext({contextSize: ctxSize, batchSize: opt.prompt, sequences: 1, threads: opt.threads});
    let dmodel = null, dcontext = null, predictor;
    if (opt.draft) {
        dmodel = await llama.loadModel({modelPath: opt.draft, gpuLayers: 0});
        dcontext = await dmodel.createContext({contextSize: ctxSize, batchSize: opt.prompt, sequences: 1, threads: opt.threads});
        predictor = new DraftSequenceTokenPredictor(dcontext.getSequence(), {maxTokens: opt.k, minTokens: opt.k, minConfidence: 0});
    } else if (opt.lookup) {
        predictor = new InputLookupTokenPredictor({patternLength: {min: 2}, predictionLength: {max: opt.k}});
    }
    const seq = context.getSequence(predictor ? {tokenPredictor: predictor} : undefined);

    // synthetic prompt ids: the same generator as bench/llamacpp/bench.mjs
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
        let n = 0;
        const tokens = [];
        // the prompt and the greedy continuation in one evaluate (the predictor drafts from it)
        for await (const tok of seq.evaluate(ids.slice(0, nPrompt), {temperature: 0})) {
            if (n === 0) var b = performance.now(); // the prompt is in, the first token sampled
            tokens.push(tok);
            if (++n >= nGen + 1) break;
        }
        const c = performance.now();
        return {decode: nGen / ((c - b) / 1e3), tokens};
    }

    await once(Math.min(opt.prompt, 16), 2); // warm-up
    const dec = [];
    let tokens = null;
    const p0 = {...seq.tokenPredictions};
    for (let r = 0; r < opt.runs; r++) {
        const x = await once(opt.prompt, opt.gen);
        dec.push(x.decode);
        tokens = x.tokens;
    }
    const p1 = seq.tokenPredictions;
    console.log(JSON.stringify({
        engine: "llama.cpp (node-llama-cpp 3.21.1)", model: opt.model, draft: opt.draft,
        proposer: opt.draft ? "draft" : opt.lookup ? "lookup" : "off", draft_max: opt.k, threads: opt.threads,
        n_prompt: opt.prompt, n_gen: opt.gen, runs: opt.runs, decode_tok_s: median(dec), decode_tok_s_runs: dec,
        validated: p1.validated - p0.validated, refuted: p1.refuted - p0.refuted, tokens,
    }));
    await context.dispose();
    await dcontext?.dispose();
    await model.dispose();
    await dmodel?.dispose();
    await llama.dispose();
}

main().catch((e) => {
    console.error(`spec.mjs: ${e.message ?? e}`);
    process.exit(1);
});
