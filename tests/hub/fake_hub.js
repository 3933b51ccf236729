// A fake Hugging Face Hub and a fake Ollama registry on 127.0.0.1, for tests/hub/test_hub_net.sh.
// Node 20, no packages. Serves what the test put under ROOT:
//
//   ROOT/hf/<owner>/<name>/repo.json   {"commit": "<40 hex>", "refs": {"main": "<commit>", ...},
//                                       "lfs": ["model.safetensors", ...], "gated": false,
//                                       "cut": {"model.safetensors": 300000}}   (all but commit optional)
//   ROOT/hf/<owner>/<name>/files/...   the repo's files at that commit (subfolders allowed)
//   ROOT/ollama/<ns>/<name>/<tag>/{model,template,params}   layers; a file "bad_digest" makes the
//                                       manifest announce a digest the blob does not have; a file
//                                       "cut" holding N cuts the model blob's first download at N bytes
//
// Paths and headers follow the real services: /api/models/{repo}/revision/{rev}?blobs=true,
// HEAD/GET /{repo}/resolve/{rev}/{file} with X-Repo-Commit, ETag (git blob id), X-Linked-Etag and
// X-Linked-Size for LFS files and a 302 to an absolute CDN URL, Range answered with 206, 401 with
// X-Error-Code GatedRepo / RepositoryNotFound, 404 RevisionNotFound / EntryNotFound;
// /v2/{ns}/{name}/manifests/{tag} and /v2/{ns}/{name}/blobs/sha256:{hex} (307 to a CDN URL).
// Every request is appended to LOG as "METHOD path [range=...] [auth=...]".
//
// The model listing (/api/models, for caldrix models update) serves a synthetic catalogue generated
// from ROOT/api/catalogue.json {"seed": S, "n": N, "generation": G, "touched": K}: families of
// architectures (supported and not), base models, fine-tunes, GGUF and GPTQ quantizations, adapters
// (adapter_config.json with a lora_alpha), merges, gated repos. Generation G > 0 re-dates (and re-shas)
// K repos and adds K new ones, all newer than anything before; "deleted": D then removes D leaf repos
// (none is another's base). The whole catalogue is written to
// ROOT/api/catalogue.dump.json for the test's own checks. Paging as the Hub: limit (at most 1000),
// sort=lastModified|downloads, direction=-1, search (a substring of the id), filter (tags, comma = all),
// expand[] (only those properties, with id), and a Link: <...&cursor=...>; rel="next" header.
// ROOT/api/faults.json, read at every request: {"malformed_page": P, "loop_page": P,
// "foreign_link": true, "bad_ids": true, "delay_ms": D}. A repo.json "tamper": [file] serves that
// file from the CDN with one byte changed while the listing and headers give the original's digest.
// Usage: node fake_hub.js ROOT PORTFILE LOG [LIFETIME_S]
'use strict';
const http = require('http');
const fs = require('fs');
const path = require('path');
const crypto = require('crypto');

const [root, portFile, logFile, lifetime] = process.argv.slice(2);
const GOOD_TOKEN = 'hf_good_token';
const cutDone = new Set();
let port = 0, cdnPort = 0;  // the CDN listens on a second port: another origin, as a real CDN is

function log(line) { fs.appendFileSync(logFile, line + '\n'); }
function sha256(buf) { return crypto.createHash('sha256').update(buf).digest('hex'); }
function gitBlobId(buf) {
  return crypto.createHash('sha1').update(Buffer.concat([Buffer.from(`blob ${buf.length}\0`), buf])).digest('hex');
}
function readJson(p) { try { return JSON.parse(fs.readFileSync(p, 'utf8')); } catch (e) { return null; } }

function listFiles(dir, prefix = '') {
  let out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const rel = prefix ? prefix + '/' + e.name : e.name;
    if (e.isDirectory()) out = out.concat(listFiles(path.join(dir, e.name), rel));
    else out.push(rel);
  }
  return out.sort();
}

function send(res, status, headers, body) {
  res.writeHead(status, headers);
  res.end(body);
}

function hfError(res, status, code, msg, head) {
  send(res, status, { 'X-Error-Code': code, 'X-Error-Message': msg, 'Content-Type': 'application/json' },
       head ? undefined : JSON.stringify({ error: msg }));
}

// Serves buf honouring Range; cuts the first answer at cutAt bytes when asked to.
function serveBytes(req, res, buf, headers, cutKey, cutAt) {
  const range = req.headers['range'];
  let start = 0, end = buf.length - 1, status = 200;
  const h = Object.assign({ 'Accept-Ranges': 'bytes', 'Content-Type': 'application/octet-stream' }, headers);
  if (range) {
    const m = /^bytes=(\d+)-(\d*)$/.exec(range);
    if (!m || parseInt(m[1], 10) >= buf.length) return send(res, 416, { 'Content-Range': `bytes */${buf.length}` });
    start = parseInt(m[1], 10);
    if (m[2] !== '') end = Math.min(parseInt(m[2], 10), buf.length - 1);
    status = 206;
    h['Content-Range'] = `bytes ${start}-${end}/${buf.length}`;
  }
  const body = buf.subarray(start, end + 1);
  h['Content-Length'] = String(body.length);
  if (req.method === 'HEAD') return send(res, status, h);
  // a probe of the first bytes (bytes=0-N) is never cut: only a download to the end is
  if (cutKey && cutAt > start && cutAt < end && (!range || range.endsWith("-")) && !cutDone.has(cutKey)) {
    cutDone.add(cutKey);
    res.writeHead(status, h);
    res.write(body.subarray(0, cutAt - start), () => setTimeout(() => res.socket.destroy(), 50));
    return;
  }
  send(res, status, h, body);
}

// ---- the synthetic catalogue ----
function mulberry32(a) {
  return function () {
    a |= 0; a = a + 0x6D2B79F5 | 0;
    let t = Math.imul(a ^ a >>> 15, 1 | a);
    t = t + Math.imul(t ^ t >>> 7, 61 | t) ^ t;
    return ((t ^ t >>> 14) >>> 0) / 4294967296;
  };
}
const FAMILIES = [
  { arch: 'Qwen3ForCausalLM', mt: 'qwen3', gguf: 'qwen3', org: 'Qwen', stem: 'Qwen3', vocab: 151936 },
  { arch: 'LlamaForCausalLM', mt: 'llama', gguf: 'llama', org: 'meta-llama', stem: 'Llama-3.2', vocab: 128256, gated: true },
  { arch: 'Qwen2ForCausalLM', mt: 'qwen2', gguf: 'qwen2', org: 'Qwen', stem: 'Qwen2.5', vocab: 151936 },
  { arch: 'MistralForCausalLM', mt: 'mistral', gguf: 'llama', org: 'mistralai', stem: 'Mistral', vocab: 32768 },
  { arch: 'Qwen3MoeForCausalLM', mt: 'qwen3_moe', gguf: 'qwen3moe', org: 'Qwen', stem: 'Qwen3-MoE', vocab: 151936, moe: true },
  { arch: 'GPT2LMHeadModel', mt: 'gpt2', gguf: 'gpt2', org: 'openai-community', stem: 'gpt2', vocab: 50257 },
  { arch: 'BloomForCausalLM', mt: 'bloom', gguf: 'bloom', org: 'bigscience', stem: 'bloom', vocab: 250880 },
];
const SIZES = [
  { tag: '0.5B', hidden: 896, layers: 24, heads: 14, kv: 2, ffn: 4864 },
  { tag: '1.5B', hidden: 1536, layers: 28, heads: 12, kv: 2, ffn: 8960 },
  { tag: '4B', hidden: 2560, layers: 36, heads: 32, kv: 8, ffn: 9728 },
  { tag: '8B', hidden: 4096, layers: 36, heads: 32, kv: 8, ffn: 12288 },
  { tag: '32B', hidden: 5120, layers: 64, heads: 64, kv: 8, ffn: 25600 },
];
const WORDS = ['chat', 'math', 'code', 'roleplay', 'medical', 'legal', 'tiny', 'reasoning', 'german', 'japanese'];
const ALPHAS = [0.1, 0.3, 7.5, 16, 32, 0.05, 1e-3, 3.3, 64, 0.7];

function configOf(f, s, extra) {
  const c = { architectures: [f.arch], model_type: f.mt, hidden_size: s.hidden, intermediate_size: s.ffn,
              num_hidden_layers: s.layers, num_attention_heads: s.heads, num_key_value_heads: s.kv,
              vocab_size: f.vocab, max_position_embeddings: 32768, rms_norm_eps: 1e-6, hidden_act: 'silu',
              torch_dtype: 'bfloat16', tie_word_embeddings: false, rope_theta: 1000000.0 };
  if (f.mt === 'qwen3' || f.mt === 'qwen3_moe') c.head_dim = 128;
  if (f.moe) Object.assign(c, { num_experts: 64, num_experts_per_tok: 8, moe_intermediate_size: 768,
                                decoder_sparse_step: 1, mlp_only_layers: [] });
  return Object.assign(c, extra || {});
}
function paramsOf(f, s) {
  const hd = f.mt.startsWith('qwen3') ? 128 : s.hidden / s.heads;
  const attn = s.hidden * hd * (2 * s.heads + 2 * s.kv);
  const mlp = f.moe ? 64 * 3 * s.hidden * 768 : 3 * s.hidden * s.ffn;
  return Math.round(2 * f.vocab * s.hidden + s.layers * (attn + mlp));
}
function sha1hex(s) { return crypto.createHash('sha1').update(s).digest('hex'); }

function makeCatalogue(spec) {
  const rnd = mulberry32(spec.seed | 0);
  const pick = (a) => a[Math.floor(rnd() * a.length)];
  let repos = [];
  let t = Date.UTC(2024, 0, 1);
  const add = (r) => { t += 1000 * (60 + Math.floor(rnd() * 3600)); r.lastModified = new Date(t).toISOString();
                       r.sha = sha1hex(r.id + ':0'); repos.push(r); return r; };
  const bases = [];
  for (const f of FAMILIES) {
    for (const s of SIZES) {
      const params = paramsOf(f, s);
      const tok = `tokenizer of ${f.stem}`;
      const files = { 'config.json': JSON.stringify(configOf(f, s)), 'tokenizer.json': tok,
                      'tokenizer_config.json': '{}', 'generation_config.json': '{}' };
      const b = add({ id: `${f.org}/${f.stem}-${s.tag}`, family: f, size: s, kind: 'base', params, files,
                      big: { 'model.safetensors': params * 2 }, tags: ['transformers', 'safetensors', f.mt, 'text-generation'],
                      downloads: 100000 + Math.floor(rnd() * 5000000), gated: !!f.gated,
                      card: { license: 'apache-2.0', language: ['en'], pipeline_tag: 'text-generation' } });
      bases.push(b);
      const ins = add({ id: `${f.org}/${f.stem}-${s.tag}-Instruct`, family: f, size: s, kind: 'finetune', parent: b.id,
                        params, files, big: b.big, tags: ['transformers', 'safetensors', f.mt, 'conversational',
                        `base_model:${b.id}`, `base_model:finetune:${b.id}`], downloads: 50000 + Math.floor(rnd() * 5000000),
                        gated: !!f.gated, card: { license: 'apache-2.0', base_model: b.id, pipeline_tag: 'text-generation' } });
      bases.push(ins);
    }
  }
  for (let k = 0; repos.length < spec.n; k++) {
    const p = pick(bases), f = p.family, s = p.size, word = pick(WORDS), r = rnd(), user = `user${k % 97}`;
    const dl = Math.floor(200000 * Math.pow(rnd(), 4));
    const common = { family: f, size: s, parent: p.id, downloads: dl, card: { base_model: p.id, tags: [word] } };
    if (r < 0.33) {
      const cfg = k % 23 === 0 ? { hidden_act: 'gelu' } : {};
      const own = k % 10 === 0;
      add(Object.assign({ id: `${user}/${f.stem}-${s.tag}-${word}-ft${k}`, kind: 'finetune', params: p.params,
        files: { 'config.json': JSON.stringify(configOf(f, s, cfg)), 'tokenizer.json': own ? `own tokenizer ${k}` : p.files['tokenizer.json'],
                 'tokenizer_config.json': '{}' }, big: { 'model.safetensors': p.params * 2 },
        tags: ['transformers', 'safetensors', f.mt, word, `base_model:${p.id}`, `base_model:finetune:${p.id}`] }, common));
    } else if (r < 0.58) {
      const name = `${f.stem}-${s.tag}-${word}-GGUF`;
      add(Object.assign({ id: `${user}/${name}${k}`, kind: 'gguf', params: p.params, files: { 'README.md': '# gguf' },
        big: { [`${name}.Q4_K_M.gguf`]: Math.round(p.params * 0.6), [`${name}.Q8_0.gguf`]: Math.round(p.params * 1.07) },
        gguf: { architecture: f.gguf, total: p.params, context_length: 32768 },
        tags: ['gguf', f.mt, word, `base_model:${p.id}`, `base_model:quantized:${p.id}`] }, common));
    } else if (r < 0.68) {
      add(Object.assign({ id: `${user}/${f.stem}-${s.tag}-GPTQ-${k}`, kind: 'gptq', params: p.params,
        files: { 'config.json': JSON.stringify(configOf(f, s, { quantization_config: { quant_method: 'gptq', bits: 4 } })),
                 'tokenizer.json': p.files['tokenizer.json'] }, big: { 'model.safetensors': Math.round(p.params * 0.6) },
        tags: ['transformers', 'safetensors', '4-bit', 'gptq', f.mt, `base_model:${p.id}`, `base_model:quantized:${p.id}`] }, common));
    } else if (r < 0.83) {
      const alpha = ALPHAS[k % ALPHAS.length];
      add(Object.assign({ id: `${user}/${f.stem}-${s.tag}-${word}-lora${k}`, kind: 'adapter', params: 0, alpha,
        files: { 'adapter_config.json': JSON.stringify({ base_model_name_or_path: p.id, peft_type: 'LORA', r: 8 << (k % 3),
                                                         lora_alpha: alpha }) },
        big: { 'adapter_model.safetensors': 1000000 + k },
        tags: ['peft', 'safetensors', word, `base_model:${p.id}`, `base_model:adapter:${p.id}`] }, common));
    } else if (r < 0.9) {
      add(Object.assign({ id: `${user}/${f.stem}-${s.tag}-${word}-merge${k}`, kind: 'merge', params: p.params,
        files: { 'config.json': JSON.stringify(configOf(f, s)), 'tokenizer.json': p.files['tokenizer.json'] },
        big: { 'model.safetensors': p.params * 2 },
        tags: ['transformers', 'safetensors', 'mergekit', f.mt, `base_model:${p.id}`, `base_model:merge:${p.id}`] }, common));
    } else {
      add({ id: `${user}/t5-${word}-${k}`, kind: 'other', params: 110000000, downloads: dl,
            files: { 'config.json': JSON.stringify({ architectures: ['T5ForConditionalGeneration'], model_type: 't5' }) },
            big: { 'model.safetensors': 440000000 }, tags: ['transformers', 't5', word], card: {} });
    }
  }
  // later generations: K repos re-dated and re-shaed, K new ones, all newer than the rest
  for (let g = 1; g <= (spec.generation | 0); g++) {
    const k = spec.touched | 0;
    for (let i = 0; i < k; i++) {
      const r = repos[(i * 7919 + g * 31) % repos.length];
      t += 60000; r.lastModified = new Date(t).toISOString(); r.sha = sha1hex(`${r.id}:${g}`);
      r.downloads += 1;
    }
    for (let i = 0; i < k; i++) {
      const p = bases[(i + g) % bases.length], f = p.family, s = p.size;
      t += 60000;
      const r = { id: `newcomer${g}/${f.stem}-${s.tag}-fresh${i}`, family: f, size: s, kind: 'finetune', parent: p.id,
                  params: p.params, downloads: 7, card: { base_model: p.id },
                  files: { 'config.json': p.files['config.json'], 'tokenizer.json': p.files['tokenizer.json'] },
                  big: { 'model.safetensors': p.params * 2 },
                  tags: ['transformers', 'safetensors', f.mt, `base_model:${p.id}`, `base_model:finetune:${p.id}`],
                  lastModified: new Date(t).toISOString(), sha: sha1hex(`new:${g}:${i}`) };
      repos.push(r);
    }
  }
  // then D repos deleted from the Hub (leaves only: no listed repo names them as its base), spread
  // over the listing, so a whole listing (update --full) must drop them from the index
  const d = spec.deleted | 0;
  if (d > 0) {
    const parents = new Set();
    for (const r of repos) for (const t of r.tags || []) if (t.startsWith('base_model:')) parents.add(t.split(':').pop());
    const leaves = repos.filter((r) => !parents.has(r.id));
    const gone = new Set();
    for (let i = 0; i < d && gone.size < leaves.length; i++) gone.add(leaves[(i * 104729 + 13) % leaves.length].id);
    repos = repos.filter((r) => !gone.has(r.id));
  }
  const byId = new Map(repos.map((r) => [r.id, r]));
  return { repos, byId };
}

let catalogue = null, catalogueMtime = 0;
function getCatalogue() {
  const p = path.join(root, 'api', 'catalogue.json');
  let st;
  try { st = fs.statSync(p); } catch (e) { return null; }
  if (!catalogue || st.mtimeMs !== catalogueMtime) {
    catalogue = makeCatalogue(JSON.parse(fs.readFileSync(p, 'utf8')));
    catalogueMtime = st.mtimeMs;
    const dump = catalogue.repos.map((r) => ({ id: r.id, kind: r.kind, parent: r.parent || null, arch: r.family ? r.family.arch : 'T5ForConditionalGeneration',
      gguf_arch: r.gguf ? r.gguf.architecture : null, params: r.params, downloads: r.downloads, lastModified: r.lastModified,
      sha: r.sha, tags: r.tags, gated: !!r.gated, alpha: r.alpha === undefined ? null : r.alpha,
      tokenizer: r.files['tokenizer.json'] || null, config: r.files['config.json'] || null, card: r.card || {}, files: Object.assign(
        Object.fromEntries(Object.entries(r.files).map(([k, v]) => [k, Buffer.byteLength(v)])), r.big) }));
    fs.writeFileSync(path.join(root, 'api', 'catalogue.dump.json'), JSON.stringify(dump));
  }
  return catalogue;
}
function faults() { return readJson(path.join(root, 'api', 'faults.json')) || {}; }

function modelView(r, expand) {
  const all = { id: r.id, _id: sha1hex(r.id).slice(0, 24), sha: r.sha, lastModified: r.lastModified,
    downloads: r.downloads, likes: Math.floor(r.downloads / 1000), gated: r.gated ? 'manual' : false, tags: r.tags,
    pipeline_tag: 'text-generation', library_name: r.kind === 'adapter' ? 'peft' : r.kind === 'gguf' ? null : 'transformers',
    config: r.files['config.json'] ? (() => { const c = JSON.parse(r.files['config.json']);
      return { architectures: c.architectures, model_type: c.model_type }; })() : undefined,
    cardData: r.card, gguf: r.gguf,
    safetensors: r.big['model.safetensors'] && r.kind !== 'gptq' ? { parameters: { BF16: r.params }, total: r.params } : undefined,
    childrenModelCount: 0, siblings: Object.keys(r.files).concat(Object.keys(r.big)).map((f) => ({ rfilename: f })) };
  const out = { _id: all._id, id: r.id };
  for (const k of expand) if (all[k] !== undefined) out[k] = all[k];
  return out;
}

function catalogueSiblings(r) {
  const s = [];
  for (const [f, v] of Object.entries(r.files)) {
    const buf = Buffer.from(v);
    s.push({ rfilename: f, blobId: gitBlobId(buf), size: buf.length });
  }
  for (const [f, size] of Object.entries(r.big))
    s.push({ rfilename: f, blobId: sha1hex('ptr:' + r.id + f), size, lfs: { sha256: crypto.createHash('sha256').update(r.id + f).digest('hex'), size, pointerSize: 134 } });
  return s.sort((a, b) => a.rfilename.localeCompare(b.rfilename));
}

const BAD_IDS = ['../../etc/passwd', 'acme/../../escape', 'acme/x/../../y', 'a/b/c', 'acme/%2e%2e', 'acme/.hidden'];

function handleListing(req, res, url) {
  const cat = getCatalogue();
  if (!cat) return send(res, 404, {}, 'no catalogue');
  const fl = faults();
  const q = url.searchParams;
  const limit = Math.min(parseInt(q.get('limit') || '1000', 10) || 1000, 1000);
  const offset = q.get('cursor') ? parseInt(Buffer.from(q.get('cursor'), 'base64').toString(), 10) : 0;
  const expand = q.getAll('expand[]');
  let list = cat.repos;
  const search = q.get('search');
  if (search) list = list.filter((r) => r.id.toLowerCase().includes(search.toLowerCase()));
  const filter = q.get('filter');
  if (filter) list = list.filter((r) => filter.split(',').every((t) => r.tags.includes(t)));
  const key = q.get('sort') === 'downloads' ? 'downloads' : 'lastModified';
  list = list.slice().sort((a, b) => (a[key] < b[key] ? 1 : a[key] > b[key] ? -1 : a.id.localeCompare(b.id)));
  if (q.get('direction') !== '-1') list.reverse();
  const page = list.slice(offset, offset + limit).map((r) => modelView(r, expand));
  const pageNo = Math.floor(offset / limit) + 1;
  if (fl.bad_ids && pageNo === 1)
    for (const id of BAD_IDS) page.unshift({ id, sha: sha1hex(id), lastModified: page.length ? page[0].lastModified : '2030-01-01T00:00:00.000Z',
                                           config: { architectures: ['Qwen3ForCausalLM'] }, tags: [] });
  const headers = { 'Content-Type': 'application/json' };
  const pageUrl = (off) => { const n = new URLSearchParams(q); n.set('cursor', Buffer.from(String(off)).toString('base64'));
                             return `http://127.0.0.1:${port}/api/models?${n.toString()}`; };
  if (offset + limit < list.length) {
    let next = pageUrl(offset + limit);
    if (fl.loop_page === pageNo) next = pageUrl(Math.max(0, offset - limit));
    if (fl.foreign_link) next = next.replace(`127.0.0.1:${port}`, `127.0.0.1:${cdnPort}`);
    headers.Link = `<${next}>; rel="next"`;
  }
  if (fl.malformed_page === pageNo) return send(res, 200, headers, JSON.stringify(page).slice(0, 200));
  return send(res, 200, headers, JSON.stringify(page));
}

function handleCatalogueRepo(req, res, url) {
  const cat = getCatalogue();
  if (!cat) return false;
  let m = /^\/api\/models\/([^/]+)\/([^/]+)$/.exec(url.pathname);
  if (m) {
    const r = cat.byId.get(`${m[1]}/${m[2]}`);
    if (!r) return false;
    const delay = faults().delay_ms || 0;
    const answer = () => send(res, 200, { 'Content-Type': 'application/json' },
                              JSON.stringify(modelView(r, url.searchParams.getAll('expand[]'))));
    if (delay) setTimeout(answer, delay); else answer();
    return true;
  }
  m = /^\/api\/models\/([^/]+)\/([^/]+)\/revision\/([^/?]+)$/.exec(url.pathname);
  if (m) {
    const r = cat.byId.get(`${m[1]}/${m[2]}`);
    if (!r) return false;
    if (decodeURIComponent(m[3]) !== r.sha && m[3] !== 'main') {
      hfError(res, 404, 'RevisionNotFound', 'Invalid rev id');
      return true;
    }
    send(res, 200, { 'Content-Type': 'application/json' }, JSON.stringify({ id: r.id, sha: r.sha, siblings: catalogueSiblings(r) }));
    return true;
  }
  m = /^\/([^/]+)\/([^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(url.pathname);
  if (m) {
    const r = cat.byId.get(`${m[1]}/${m[2]}`);
    if (!r) return false;
    const file = decodeURIComponent(m[4]);
    if (r.gated && req.headers['authorization'] !== `Bearer ${GOOD_TOKEN}`) {
      hfError(res, 401, 'GatedRepo', `Access to model ${r.id} is restricted.`, req.method === 'HEAD');
      return true;
    }
    if (r.files[file] === undefined) {
      hfError(res, 404, 'EntryNotFound', `${file} does not exist`, req.method === 'HEAD');
      return true;
    }
    const buf = Buffer.from(r.files[file]);
    serveBytes(req, res, buf, { 'X-Repo-Commit': r.sha, ETag: `"${gitBlobId(buf)}"` }, null, 0);
    return true;
  }
  return false;
}

function handleHf(req, res, url) {
  if (url.pathname === '/api/models') return handleListing(req, res, url);
  if (handleCatalogueRepo(req, res, url)) return;
  let m = /^\/api\/models\/([^/]+)\/([^/]+)$/.exec(url.pathname);
  if (m) {
    // a file-based repo's details (what models info asks for a repo the index lacks)
    const [, owner, name] = m;
    const dir = path.join(root, 'hf', owner, name);
    const repo = readJson(path.join(dir, 'repo.json'));
    if (!repo || repo.renamed_to) return hfError(res, 401, 'RepositoryNotFound', `Repository Not Found for url: ${url}.`);
    const cfg = readJson(path.join(dir, 'files', 'config.json'));
    const body = { _id: 'x', id: `${owner}/${name}`, sha: repo.commit, lastModified: '2025-01-01T00:00:00.000Z',
                   downloads: 3, likes: 0, gated: repo.gated ? 'manual' : false, tags: repo.tags || [],
                   config: cfg ? { architectures: cfg.architectures, model_type: cfg.model_type } : undefined };
    return send(res, 200, { 'Content-Type': 'application/json' }, JSON.stringify(body));
  }
  m = /^\/api\/models\/([^/]+)\/([^/]+)\/revision\/([^/?]+)$/.exec(url.pathname);
  const auth = req.headers['authorization'] || '';
  const authorized = auth === `Bearer ${GOOD_TOKEN}`;
  if (m) {
    const [, owner, name, revq] = m;
    const rev = decodeURIComponent(revq);
    const dir = path.join(root, 'hf', owner, name);
    const repo = readJson(path.join(dir, 'repo.json'));
    if (!repo) return hfError(res, 401, 'RepositoryNotFound', `Repository Not Found for url: ${url}.`);
    if (repo.renamed_to) return send(res, 307, { Location: `/api/models/${repo.renamed_to}/revision/${revq}${url.search}` });
    const refs = repo.refs || { main: repo.commit };
    const commit = rev === repo.commit ? repo.commit : refs[rev];
    if (!commit) return hfError(res, 404, 'RevisionNotFound', `Invalid rev id: ${rev}`);
    const lfs = new Set(repo.lfs || []);
    const siblings = listFiles(path.join(dir, 'files')).map((f) => {
      const buf = fs.readFileSync(path.join(dir, 'files', f));
      const s = { rfilename: f, blobId: gitBlobId(buf), size: buf.length };
      if (lfs.has(f)) s.lfs = { sha256: sha256(buf), size: buf.length, pointerSize: 134 };
      return s;
    });
    const body = { _id: 'x', id: `${owner}/${name}`, modelId: `${owner}/${name}`, sha: commit,
                   gated: repo.gated ? 'manual' : false, private: false, siblings };
    return send(res, 200, { 'Content-Type': 'application/json' }, JSON.stringify(body));
  }
  m = /^\/([^/]+)\/([^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(url.pathname);
  if (m) {
    const [, owner, name, revq, fileq] = m;
    const rev = decodeURIComponent(revq), file = decodeURIComponent(fileq);
    const dir = path.join(root, 'hf', owner, name);
    const repo = readJson(path.join(dir, 'repo.json'));
    const head = req.method === 'HEAD';
    if (!repo) return hfError(res, 401, 'RepositoryNotFound', 'Repository Not Found', head);
    if (repo.renamed_to) {
      return send(res, 307, { Location: `/${repo.renamed_to}/resolve/${revq}/${fileq}` });
    }
    if (repo.gated && !authorized) {
      return hfError(res, 401, 'GatedRepo', `Access to model ${owner}/${name} is restricted. You must have access ` +
                     'to it and be authenticated to access it. Please log in.', head);
    }
    const refs = repo.refs || { main: repo.commit };
    const commit = rev === repo.commit ? repo.commit : refs[rev];
    if (!commit) return hfError(res, 404, 'RevisionNotFound', `Invalid rev id: ${rev}`, head);
    const p = path.join(dir, 'files', file);
    if (!p.startsWith(path.join(dir, 'files') + path.sep) || !fs.existsSync(p))
      return hfError(res, 404, 'EntryNotFound', `${file} does not exist on "${rev}"`, head);
    const buf = fs.readFileSync(p);
    if ((repo.lfs || []).includes(file)) {
      const sha = sha256(buf);
      return send(res, 302, { 'X-Repo-Commit': commit, 'X-Linked-Etag': `"${sha}"`, 'X-Linked-Size': String(buf.length),
                              ETag: `"${gitBlobId(Buffer.from('pointer ' + sha))}"`,
                              Location: `http://127.0.0.1:${cdnPort}/cdn/${owner}/${name}/${sha}?file=${fileq}`,
                              'Content-Length': '0' });
    }
    const cut = repo.cut && repo.cut[file];
    return serveBytes(req, res, buf, { 'X-Repo-Commit': commit, ETag: `"${gitBlobId(buf)}"` },
                      cut ? `hf:${owner}/${name}/${file}` : null, cut || 0);
  }
  m = /^\/cdn\/([^/]+)\/([^/]+)\/([0-9a-f]{64})$/.exec(url.pathname);
  if (m) {
    const [, owner, name, sha] = m;
    const file = url.searchParams.get('file');
    const dir = path.join(root, 'hf', owner, name);
    const repo = readJson(path.join(dir, 'repo.json'));
    const p = path.join(dir, 'files', file || '');
    if (!repo || !file || !fs.existsSync(p)) return send(res, 404, {}, 'no such object');
    let buf = fs.readFileSync(p);
    if (sha256(buf) !== sha) return send(res, 404, {}, 'no such object');
    if ((repo.tamper || []).includes(file)) { buf = Buffer.from(buf); buf[buf.length - 1] ^= 0x55; }
    const cut = repo.cut && repo.cut[file];
    // a CDN answers with its own ETag, not the Hub's headers
    return serveBytes(req, res, buf, { ETag: `"cdn-${sha.slice(0, 8)}"` }, cut ? `hf:${owner}/${name}/${file}` : null,
                      cut || 0);
  }
  return false;
}

function ollamaLayers(dir) {
  const layers = [];
  const kinds = [['model', 'application/vnd.ollama.image.model'], ['template', 'application/vnd.ollama.image.template'],
                 ['params', 'application/vnd.ollama.image.params']];
  for (const [f, media] of kinds) {
    const p = path.join(dir, f);
    if (!fs.existsSync(p)) continue;
    const buf = fs.readFileSync(p);
    let digest = sha256(buf);
    if (f === 'model' && fs.existsSync(path.join(dir, 'bad_digest'))) digest = sha256(Buffer.from('something else'));
    layers.push({ mediaType: media, digest: `sha256:${digest}`, size: buf.length, file: f, buf });
  }
  return layers;
}

function handleOllama(req, res, url) {
  let m = /^\/v2\/([^/]+)\/([^/]+)\/manifests\/([^/]+)$/.exec(url.pathname);
  if (m) {
    const [, ns, name, tag] = m;
    const dir = path.join(root, 'ollama', ns, name, tag);
    if (!fs.existsSync(dir)) {
      return send(res, 404, { 'Content-Type': 'application/json' },
                  JSON.stringify({ errors: [{ code: 'MANIFEST_UNKNOWN', message: 'manifest unknown' }] }));
    }
    const layers = ollamaLayers(dir).map(({ mediaType, digest, size }) => ({ mediaType, digest, size }));
    const cfg = Buffer.from('{"model_format":"gguf","model_family":"llama"}');
    const manifest = { schemaVersion: 2, mediaType: 'application/vnd.docker.distribution.manifest.v2+json',
                       config: { mediaType: 'application/vnd.docker.container.image.v1+json',
                                 digest: `sha256:${sha256(cfg)}`, size: cfg.length }, layers };
    return send(res, 200, { 'Content-Type': 'application/vnd.docker.distribution.manifest.v2+json' },
                JSON.stringify(manifest));
  }
  m = /^\/v2\/([^/]+)\/([^/]+)\/blobs\/sha256:([0-9a-f]{64})$/.exec(url.pathname);
  if (m) {
    const [, ns, name, hex] = m;
    return send(res, 307, { Location: `http://127.0.0.1:${cdnPort}/ollama-cdn/${ns}/${name}/${hex}` });
  }
  m = /^\/ollama-cdn\/([^/]+)\/([^/]+)\/([0-9a-f]{64})$/.exec(url.pathname);
  if (m) {
    const [, ns, name, hex] = m;
    const base = path.join(root, 'ollama', ns, name);
    for (const tag of fs.existsSync(base) ? fs.readdirSync(base) : []) {
      const dir = path.join(base, tag);
      for (const l of ollamaLayers(dir)) {
        if (l.digest !== `sha256:${hex}`) continue;
        const cutFile = path.join(dir, 'cut');
        const cut = l.file === 'model' && fs.existsSync(cutFile) ? parseInt(fs.readFileSync(cutFile, 'utf8'), 10) : 0;
        return serveBytes(req, res, l.buf, {}, cut ? `ollama:${ns}/${name}/${tag}` : null, cut);
      }
    }
    return send(res, 404, {}, 'blob unknown');
  }
  return false;
}

function handler(req, res) {
  const url = new URL(req.url, 'http://127.0.0.1');
  let line = `${req.method} ${url.pathname}${url.search}`;
  if (req.headers['range']) line += ` range=${req.headers['range']}`;
  if (req.headers['authorization']) line += ` auth=${req.headers['authorization'] === `Bearer ${GOOD_TOKEN}` ? 'good' : 'bad'}`;
  log(line);
  try {
    if (handleHf(req, res, url) !== false) return;
    if (handleOllama(req, res, url) !== false) return;
    send(res, 404, {}, 'not found');
  } catch (e) {
    send(res, 500, {}, String(e));
  }
}
const server = http.createServer(handler);
const cdn = http.createServer(handler);

cdn.listen(0, '127.0.0.1', () => {
  cdnPort = cdn.address().port;
  server.listen(0, '127.0.0.1', () => {
    port = server.address().port;
    fs.writeFileSync(portFile + '.tmp', String(port));
    fs.renameSync(portFile + '.tmp', portFile);
  });
});
// never outlive the test
setTimeout(() => process.exit(0), (parseInt(lifetime || '300', 10)) * 1000).unref();
process.on('SIGTERM', () => process.exit(0));
