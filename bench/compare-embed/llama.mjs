#!/usr/bin/env node
// bench/compare-embed/llama.mjs --nlc DIR --model FILE.gguf --threads T --batch B --tokens N --repeat R [--rank] [--bos ID --eos ID]:
// llama.cpp through node-llama-cpp on B inputs of N token ids (bench.py's ids: BOS, N-2 ids, EOS); prints
// {"batch", "best_ms", "inputs_per_s"}: the fastest of R rounds after one warm-up.
//   embedding (default): createEmbeddingContext, getEmbeddingFor(ids) — node-llama-cpp embeds one input per
//     call, so a batch of B is B calls in a row.
//   --rank: createRankingContext (template "{{query}}{{document}}", the ids as the whole pair), rankAll([], docs):
//     node-llama-cpp evaluates the pairs one at a time under its lock.
// Contexts: node-llama-cpp's defaults (flash attention "auto", F16 KV cache), contextSize/batchSize max(N, 512).
import {loadLlama, opt} from "../../scripts/goldens/llamacpp-lib.mjs";
const B = +opt("--batch", 1), N = +opt("--tokens", 128), R = +opt("--repeat", 3), T = +opt("--threads", 2);
const bos = +opt("--bos", 101), eos = +opt("--eos", 102), span = +opt("--span", 20000);
const rank = process.argv.includes("--rank");
const llama = await loadLlama();
const model = await llama.loadModel({modelPath: opt("--model")});
const size = Math.max(N + 1, 512);
const ctx = rank ? await model.createRankingContext({contextSize: size, batchSize: size, threads: T, template: "{{query}}{{document}}"})
                 : await model.createEmbeddingContext({contextSize: size, batchSize: size, threads: T});
const inputs = Array.from({length: B}, (_, b) => [bos, ...Array.from({length: N - 2}, (_, i) => 1000 + ((b * 131 + i * 7) % span)), eos]);
let best = Infinity;
for (let r = 0; r <= R; r++) {
    const t0 = performance.now();
    if (rank) await ctx.rankAll([], inputs);
    else for (const ids of inputs) await ctx.getEmbeddingFor(ids);
    const ms = performance.now() - t0;
    if (r > 0) best = Math.min(best, ms);
}
console.log(JSON.stringify({batch: B, best_ms: +best.toFixed(3), inputs_per_s: +(B * 1e3 / best).toFixed(2)}));
await ctx.dispose(); await model.dispose();
