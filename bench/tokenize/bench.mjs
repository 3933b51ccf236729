// Tokenizes the same ~1 MB text with transformers.js and with `caldrix tokenize`, prints both
// speeds and their ratio, and checks that the ids agree.
//   node bench/tokenize/bench.mjs [TOKENIZER_DIR] [TEXT] [RUNS]
// Run bench/tokenize/setup.sh first; build caldrix (make) from the repository root.
import { AutoTokenizer, env } from '@huggingface/transformers';
import { spawnSync } from 'child_process';
import fs from 'fs';
import path from 'path';
import { fileURLToPath } from 'url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const dir = path.resolve(process.argv[2] || path.join(root, '..', 'shared', 'fixtures', 'tokenizers', 'qwen3'));
const textPath = path.resolve(process.argv[3] || path.join(root, 'bench', 'out', 'tokenize_text.txt'));
const runs = Number(process.argv[4] || 5);
const caldrix = process.env.CALDRIX || path.join(root, 'build', 'caldrix');
const text = fs.readFileSync(textPath, 'utf8');
const bytes = Buffer.byteLength(text, 'utf8');

env.allowRemoteModels = false;
env.localModelPath = path.dirname(dir) + path.sep;
const t0 = performance.now();
const tok = await AutoTokenizer.from_pretrained(path.basename(dir));
const loadMs = performance.now() - t0;

let best = Infinity, first = 0, jsIds = null;
for (let r = 0; r < runs; r++) {
  const a = performance.now();
  jsIds = tok.encode(text, { add_special_tokens: false });
  const ms = performance.now() - a;
  if (r === 0) first = ms;
  best = Math.min(best, ms);
}
const jsMBs = bytes / 1e6 / (best / 1e3);

const run = spawnSync(caldrix, ['tokenize', dir, '--file', textPath, '--bench', String(runs), '--json', '--no-special'],
                      { encoding: 'utf8' });
if (run.status !== 0) { console.error(run.stderr); process.exit(1); }
const c = JSON.parse(run.stdout);

const line = JSON.stringify({ text, add_special_tokens: false }) + '\n';
const ids = spawnSync(caldrix, ['tokenize', dir, '--jsonl'], { input: line, encoding: 'utf8', maxBuffer: 1 << 28 });
const cIds = JSON.parse(ids.stdout).ids;
const same = cIds.length === jsIds.length && cIds.every((v, i) => v === jsIds[i]);

const pkg = JSON.parse(fs.readFileSync(path.join(root, 'bench', 'tokenize', 'node_modules', '@huggingface', 'transformers', 'package.json')));
console.log(`text: ${textPath} (${bytes} bytes), tokenizer: ${dir}, best of ${runs}`);
console.log(`transformers.js ${pkg.version}: ${jsIds.length} tokens, ${best.toFixed(1)} ms (first ${first.toFixed(1)} ms), ${jsMBs.toFixed(2)} MB/s, load ${loadMs.toFixed(0)} ms`);
console.log(`caldrix:            ${c.tokens} tokens, ${c.encode_ms.toFixed(1)} ms (first ${c.first_ms.toFixed(1)} ms), ${c.mb_s.toFixed(2)} MB/s, load ${c.load_ms.toFixed(0)} ms`);
console.log(`ratio caldrix / transformers.js: ${(c.mb_s / jsMBs).toFixed(2)}x   ids identical: ${same ? 'yes' : 'NO'}`);
if (!same) process.exit(2);
