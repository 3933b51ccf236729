#!/usr/bin/env node
// bench/compare-embed/llama.mjs --nlc DIR --model FILE.gguf --threads T --batch B --tokens N --repeat R:
// llama.cpp's embedding context (node-llama-cpp createEmbeddingContext) on B inputs of N token ids; prints
// {"batch", "best_ms", "inputs_per_s"}: the fastest of R rounds after one warm-up. node-llama-cpp embeds
// one input per call (getEmbeddingFor), so a batch of B is B calls in a row.
import {loadLlama, opt} from "../../scripts/goldens/llamacpp-lib.mjs";
const B = +opt("--batch", 1), N = +opt("--tokens", 128), R = +opt("--repeat", 3), T = +opt("--threads", 2);
const llama = await loadLlama();
const model = await llama.loadModel({modelPath: opt("--model")});
const ctx = await model.createEmbeddingContext({contextSize: Math.max(N, 512), batchSize: Math.max(N, 512), threads: T});
const inputs = Array.from({length: B}, (_, b) => [101, ...Array.from({length: N - 2}, (_, i) => 1000 + ((b * 131 + i * 7) % 20000)), 102]);
let best = Infinity;
for (let r = 0; r <= R; r++) {
    const t0 = performance.now();
    for (const ids of inputs) await ctx.getEmbeddingFor(ids);
    const ms = performance.now() - t0;
    if (r > 0) best = Math.min(best, ms);
}
console.log(JSON.stringify({batch: B, best_ms: +best.toFixed(3), inputs_per_s: +(B * 1e3 / best).toFixed(1)}));
await ctx.dispose(); await model.dispose();
