// tests/golden/grammar-llamacpp.json: llama.cpp's own grammar sampler (node-llama-cpp 3.21.1's
// LlamaGrammar + LlamaGrammarEvaluationState) judges strings caldrix generated under llama.cpp's
// grammars (tests/text/data/llamacpp-grammars/*.gbnf). For each grammar and seed: `caldrix run`
// (the bundled model, temperature 1) writes a text; llama.cpp tokenizes it with Qwen3's tokenizer
// (a vocabulary-only GGUF from caldrix convert --vocab-only) and steps its grammar over every token
// (canBeNextToken, then accept); at the end it says whether the end of generation may follow (the
// grammar is complete). tests/text/test_grammar.c checks caldrix's matcher agrees on every text.
//   node scripts/goldens/llamacpp-grammars.mjs --nlc bench/llamacpp [--caldrix build/caldrix]
import {execFileSync} from "node:child_process";
import {readFileSync, readdirSync, mkdtempSync, copyFileSync, rmSync} from "node:fs";
import os from "node:os";
import path from "node:path";
import {pathToFileURL} from "node:url";
import {caldrix, nlc, version, loadLlama, writeGolden} from "./llamacpp-lib.mjs";

const dir = "tests/text/data/llamacpp-grammars";
const tmp = mkdtempSync(path.join(os.tmpdir(), "gram-"));
for (const f of ["tokenizer.json", "tokenizer_config.json"])
    copyFileSync(`../shared/fixtures/tokenizers/qwen3/${f}`, path.join(tmp, f));
execFileSync(caldrix, ["convert", tmp, path.join(tmp, "v.gguf"), "--vocab-only"], {stdio: "ignore"});
const llama = await loadLlama();
const {LlamaGrammarEvaluationState} = await import(pathToFileURL(path.join(nlc, "node_modules", "node-llama-cpp", "dist", "index.js")).href);
const model = await llama.loadModel({modelPath: path.join(tmp, "v.gguf"), vocabOnly: true});
const can = (st, t) => llama._bindings.AddonSampler.canBeNextTokenForGrammarEvaluationState(st._state, t);
const cases = [];
for (const g of readdirSync(dir).filter((f) => f.endsWith(".gbnf")).sort()) {
    const text = readFileSync(path.join(dir, g), "utf8");
    const grammar = await llama.createGrammar({grammar: text});
    for (const seed of [1, 2, 3]) {
        const out = JSON.parse(execFileSync(caldrix, ["run", "-p", "Once upon a time", "--grammar", path.join(dir, g), "--temp", "1",
            "--seed", String(seed), "-n", "120", "--json"], {encoding: "utf8", stdio: ["ignore", "pipe", "ignore"]}));
        const st = new LlamaGrammarEvaluationState({model, grammar});
        const toks = model.tokenize(out.text, false);
        let accepted = 0;
        for (const t of toks) {
            if (!can(st, t)) break;
            llama._bindings.AddonSampler.acceptGrammarEvaluationStateToken(st._state, t);
            accepted++;
        }
        const complete = accepted === toks.length && can(st, model.tokens.eos);
        cases.push({grammar: g, seed, finish: out.finish_reason, text: out.text, llama_tokens: toks.length,
                    llama_accepted: accepted, llama_complete: complete});
        console.error(`${g} seed ${seed}: ${out.finish_reason}, llama.cpp accepted ${accepted}/${toks.length}, complete ${complete}`);
    }
}
rmSync(tmp, {recursive: true});
writeGolden("tests/golden/grammar-llamacpp.json", {generator: "scripts/goldens/llamacpp-grammars.mjs", node_llama_cpp: version,
    tokenizer: "../shared/fixtures/tokenizers/qwen3", model: "caldrix's bundled stories260K", cases});
process.exit(0);
