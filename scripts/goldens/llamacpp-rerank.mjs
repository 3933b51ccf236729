#!/usr/bin/env node
// Makes tests/golden/rerank-llamacpp.json: llama.cpp's outputs on the Qwen3 fixtures of ../shared/fixtures/embed
// as `caldrix convert` writes them (F32):
//   qwen3_rerank (`--task rerank --yes-id 269 --no-id 104`: pooling_type 4, cls.output = the tied head's
//     [yes; no] rows): node-llama-cpp's createRankingContext, the score of every golden document's whole
//     formatted pair of token ids. rank(query, document) goes through the ranking template; the template
//     "{{query}}{{document}}" with an empty query leaves the ids as given (the placeholder vocabulary adds no
//     BOS/EOS: add_bos_token/add_eos_token false), and the same score read by the context's own evaluation
//     of the bare ids (_evaluateRankingForInput) is checked to be the same number. llama.cpp's rank pooling
//     on qwen3 is softmax(cls.output · h_last), and node-llama-cpp returns its first value, p("yes").
//   qwen3_embed (pooling_type 3, last, from 1_Pooling): createEmbeddingContext, the raw last-token vector of
//     every golden input's ids (llama.cpp does not normalize).
// Contexts: flash attention off, F32 KV cache (llama.cpp's default F16 cache moves Qwen3 by up to 2e-3, the
// fixture README's cross-check), 2 threads. The sha256 of each converted file is recorded: the test
// regenerates the files and checks it before comparing.
//
//   node scripts/goldens/llamacpp-rerank.mjs --nlc bench/llamacpp [--caldrix build/caldrix]
import {execFileSync} from "node:child_process";
import {readFileSync, mkdtempSync} from "node:fs";
import os from "node:os";
import path from "node:path";
import {caldrix, version, loadLlama, sha256, writeGolden} from "./llamacpp-lib.mjs";

const E = "../shared/fixtures/embed";
const tmp = mkdtempSync(path.join(os.tmpdir(), "cdx-rerank-"));
const llama = await loadLlama();
const modelOpts = (file) => ({modelPath: file, defaultContextFlashAttention: false,
    experimentalDefaultContextKvCacheKeyType: "F32", experimentalDefaultContextKvCacheValueType: "F32"});
const n9 = (x) => Number(x.toPrecision(9));
const out = {reference: `llama.cpp via node-llama-cpp ${version} (prebuilt linux-x64 CPU), flash attention off, F32 KV ` +
    `cache, 2 threads: createRankingContext (qwen3_rerank: score = p("yes") of llama.cpp's rank pooling) and ` +
    `createEmbeddingContext (qwen3_embed: the raw last-token vector)`, models: []};

{
    const name = "qwen3_rerank";
    const gold = JSON.parse(readFileSync(`${E}/${name}/golden.json`, "utf8"));
    const args = ["--type", "F32", "--task", "rerank", "--yes-id", String(gold.yes_token_id), "--no-id", String(gold.no_token_id)];
    const file = path.join(tmp, `${name}.gguf`);
    execFileSync(caldrix, ["convert", `${E}/${name}`, file, ...args], {stdio: ["ignore", "ignore", "inherit"]});
    const model = await llama.loadModel(modelOpts(file));
    const ctx = await model.createRankingContext({contextSize: 128, threads: 2, template: "{{query}}{{document}}"});
    const docs = [];
    for (const d of gold.documents) {
        const score = await ctx.rank([], d.input_ids);
        const bare = await ctx._evaluateRankingForInput(d.input_ids);
        if (score !== bare) throw new Error(`${d.name}: rank() gave ${score}, the bare ids ${bare}: the template changed the ids`);
        docs.push({name: d.name, input_ids: d.input_ids, score: n9(score)});
    }
    await ctx.dispose();
    await model.dispose();
    out.models.push({name, convert: args.join(" "), sha256: sha256(file), documents: docs});
}
{
    const name = "qwen3_embed";
    const gold = JSON.parse(readFileSync(`${E}/${name}/golden.json`, "utf8"));
    const file = path.join(tmp, `${name}.gguf`);
    execFileSync(caldrix, ["convert", `${E}/${name}`, file, "--type", "F32"], {stdio: ["ignore", "ignore", "inherit"]});
    const model = await llama.loadModel(modelOpts(file));
    const ctx = await model.createEmbeddingContext({contextSize: 128, threads: 2});
    const inputs = [];
    for (const i of gold.inputs) {
        const e = await ctx.getEmbeddingFor(i.input_ids);
        inputs.push({name: i.name, input_ids: i.input_ids, pooled: [...e.vector].map(n9)});
    }
    await ctx.dispose();
    await model.dispose();
    out.models.push({name, convert: "--type F32", sha256: sha256(file), inputs});
}
writeGolden("tests/golden/rerank-llamacpp.json", out);
