#!/usr/bin/env node
// Makes tests/golden/embed-llamacpp.json: llama.cpp's pooled vectors (createEmbeddingContext) on the BERT
// fixtures of ../shared/fixtures/embed as `caldrix convert` writes them (F32), for every golden input that
// sentence-transformers does not truncate, from the golden's token ids (llama.cpp's own WordPiece
// differs from transformers' on accents and punctuation). The sha256 of each file is recorded (a pin of
// caldrix's output: tests/cli/test_embed_gguf.sh regenerates the files and checks it before comparing).
// llama.cpp's embedding context returns the pooled vector of its pooling_type, not normalized.
//
//   node scripts/goldens/llamacpp-embed.mjs --nlc bench/llamacpp [--caldrix build/caldrix]
import {execFileSync} from "node:child_process";
import {readFileSync, mkdtempSync} from "node:fs";
import os from "node:os";
import path from "node:path";
import {caldrix, version, loadLlama, sha256, writeGolden} from "./llamacpp-lib.mjs";

const tmp = mkdtempSync(path.join(os.tmpdir(), "cdx-embed-"));
const llama = await loadLlama();
const out = {reference: `llama.cpp via node-llama-cpp ${version} (prebuilt linux-x64 CPU): createEmbeddingContext, ` +
    `contextSize 64, 2 threads, getEmbeddingFor(token ids) (pooled as the file's pooling_type, not normalized)`,
    source: "caldrix convert ../shared/fixtures/embed/NAME OUT --type F32", models: []};
for (const name of ["bert_mean", "bert_cls"]) {
    const gold = JSON.parse(readFileSync(`../shared/fixtures/embed/${name}/golden.json`, "utf8"));
    const file = path.join(tmp, `${name}.gguf`);
    execFileSync(caldrix, ["convert", `../shared/fixtures/embed/${name}`, file, "--type", "F32"], {stdio: ["ignore", "ignore", "inherit"]});
    const model = await llama.loadModel({modelPath: file});
    const ctx = await model.createEmbeddingContext({contextSize: 64, threads: 2});
    const inputs = [];
    for (const i of gold.inputs.filter((x) => !x.truncated)) {
        const e = await ctx.getEmbeddingFor(i.input_ids);
        inputs.push({name: i.name, input_ids: i.input_ids, pooled: [...e.vector].map((x) => Number(x.toPrecision(9)))});
    }
    await ctx.dispose();
    await model.dispose();
    out.models.push({name, sha256: sha256(file), inputs});
}
writeGolden("tests/golden/embed-llamacpp.json", out);
