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

function handleHf(req, res, url) {
  let m = /^\/api\/models\/([^/]+)\/([^/]+)\/revision\/([^/?]+)$/.exec(url.pathname);
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
    const buf = fs.readFileSync(p);
    if (sha256(buf) !== sha) return send(res, 404, {}, 'no such object');
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
