#!/usr/bin/env node
// Makes tests/golden/lora-gguf-llamacpp.json: llama.cpp running the shared train fixtures' final
// PEFT adapters as GGUF LoRA adapters (tests/cli/lora_to_gguf.py, written as llama.cpp's
// convert_lora_to_gguf.py writes them) on the base checkpoints converted to F32 GGUF by
// `caldrix convert`: 16 greedy tokens for each prompt of the adapter's golden_adapter.json
// (PyTorch + PEFT), and whether they equal PyTorch's. The sha256 of both files pins the inputs:
// tests/cli/test_lora_gguf.sh makes them again and checks the pins before comparing.
//
//   node scripts/goldens/llamacpp-lora-gguf.mjs --nlc DIR [--caldrix build/caldrix]
import {execFileSync} from "node:child_process";
import {readFileSync, mkdtempSync} from "node:fs";
import os from "node:os";
import path from "node:path";
import {caldrix, version, loadLlama, sha256 as sha, greedy, writeGolden} from "./llamacpp-lib.mjs";
const tmp = mkdtempSync(path.join(os.tmpdir(), "cdx-lora-gguf-"));
const llama = await loadLlama();
const out = {reference: `llama.cpp via node-llama-cpp ${version} (prebuilt linux-x64 CPU): the base GGUF with the ` +
    `GGUF adapter at scale 1 (createContext lora), context 256, batch 256, flash attention off, F32 KV cache, greedy, ` +
    `16 steps, EOG fed back`, adapters: []};
for (const [base, fix, step] of [["llama", "lora_llama", "adapter_step30"], ["qwen3", "lora_qwen3_all", "adapter_step20"]]) {
    const baseFile = path.join(tmp, `${base}-F32.gguf`), adFile = path.join(tmp, `${fix}.gguf`);
    execFileSync(caldrix, ["convert", `../shared/fixtures/hf/${base}`, baseFile, "--type", "F32"], {stdio: "ignore"});
    execFileSync("python3", ["tests/cli/lora_to_gguf.py", `../shared/fixtures/hf/${base}`,
        `../shared/fixtures/train/${fix}/${step}`, adFile]);
    const gold = JSON.parse(readFileSync(`../shared/fixtures/train/${fix}/golden_adapter.json`, "utf8"));
    const model = await llama.loadModel({modelPath: baseFile, gpuLayers: 0});
    const cases = [];
    let same = 0;
    for (const c of gold.cases) {
        const r = await greedy(model, c.prompt_ids, 16, {lora: adFile});
        if (JSON.stringify(r.tokens) === JSON.stringify(c.steps.map((s) => s.token))) same++;
        cases.push({prompt_ids: c.prompt_ids, ...r});
    }
    await model.dispose();
    out.adapters.push({base, adapter: `${fix}/${step}`, base_sha256: sha(baseFile), adapter_sha256: sha(adFile),
        same_as_pytorch: `${same}/${cases.length}`, cases});
    console.error(`${fix}: llama.cpp equals PyTorch on ${same}/${cases.length} cases`);
}
writeGolden("tests/golden/lora-gguf-llamacpp.json", out);
