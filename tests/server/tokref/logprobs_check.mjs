// Not a test by itself (tests/server/test_logprobs.sh runs it): checks that a running caldrix
// server's logprobs spell its text, against the Rust HF `tokenizers` (npm @anush008/tokenizers,
// pinned in package.json beside this file) loaded from the same tokenizer.json as the model.
//   node logprobs_check.mjs URL TOKENIZER_DIR NAME
// Prints one "ok - ..." / "not ok - ..." line per check.
//
// The golden for a completion of token ids P that generated G (return_tokens) is the Rust decode:
// text = decode(P + G) minus decode(P) (skip_special_tokens true, as the server leaves special
// tokens out of the text); at every b where decode(P + G[:b]) is a clean prefix of the whole (no
// U+FFFD, so no character is cut there), the bytes of the first b logprobs entries decode to
// decode(P + G[:b]) minus decode(P): each token's piece, from Rust, not from caldrix.
import { createRequire } from 'module';
import path from 'path';
const require = createRequire(import.meta.url);
const { Tokenizer } = require('@anush008/tokenizers');

const [url, dir, name] = process.argv.slice(2);
const tok = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
const enc = async (t, add) => Array.from((await tok.encode(t, null, { addSpecialTokens: add })).getIds());
const dec = async (ids) => tok.decode(ids, true);
const utf8 = (bytes) => Buffer.from(bytes).toString('utf8'); // WHATWG: maximal subparts -> U+FFFD
const cps = (s) => Array.from(s).length;

let nOk = 0, nBad = 0;
function check(what, cond, detail) {
    if (cond) { nOk++; console.log(`ok - ${name}: ${what}`); }
    else { nBad++; console.log(`not ok - ${name}: ${what}${detail === undefined ? '' : '\n    ' + JSON.stringify(detail).slice(0, 1500)}`); }
}

async function post(route, body) {
    const r = await fetch(url + route, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    const t = await r.text();
    if (!body.stream) return JSON.parse(t);
    return t.split('\n\n').filter((b) => b.startsWith('data: ') && b !== 'data: [DONE]').map((b) => JSON.parse(b.slice(6)));
}

// completions' logprobs as a list of {token, logprob, top, offset}
const cmplEntries = (lp) => lp.tokens.map((t, i) => ({ token: t, logprob: lp.token_logprobs[i], top: lp.top_logprobs[i], offset: lp.text_offset[i] }));

// A token string for bytes, as OpenAI writes it: valid UTF-8 as it is, other bytes as \xNN.
function tokenString(bytes) {
    let out = '', i = 0;
    const b = Buffer.from(bytes);
    while (i < b.length) {
        let ok = 0;
        for (let n = Math.min(4, b.length - i); n >= 1 && !ok; n--) {
            const s = b.subarray(i, i + n).toString('utf8');
            if (Array.from(s).length === 1 && !s.includes('\ufffd') && Buffer.from(s).length === n) ok = n;
        }
        if (ok) { out += b.subarray(i, i + ok).toString('utf8'); i += ok; }
        else { out += '\\x' + b[i].toString(16).padStart(2, '0'); i++; }
    }
    return out;
}

// The checks every reply must pass: bytes spell the text; token strings are the bytes as OpenAI
// writes them (so they concatenate to the text when no token splits a character); text_offset.
let nSplit = 0; // tokens seen that split a character
function spells(what, text, entries, bytesOf) {
    const all = entries.flatMap(bytesOf);
    nSplit += entries.filter((e) => e.token.includes('\\x') && tokenString(bytesOf(e)) === e.token).length;
    check(`${what}: the entries' bytes spell the text`, utf8(all) === text, { text, entries });
    check(`${what}: each token string is its bytes (split characters as \\xNN)`,
        entries.every((e) => e.token === tokenString(bytesOf(e))), entries);
    if (entries.every((e) => !e.token.includes('\\x') || tokenString(bytesOf(e)) !== e.token))
        check(`${what}: the token strings concatenate to the text`, entries.map((e) => e.token).join('') === text, { text, entries });
}

async function completion(what, P, extra, golden = true) {
    const body = { prompt: P, max_tokens: 24, temperature: 1, seed: 7, logprobs: 2, return_tokens: true, ...extra };
    const r = await post('/v1/completions', body);
    const c = r.choices[0], G = c.tokens, text = c.text;
    const ents = cmplEntries(c.logprobs);
    spells(what, text, ents, (e) => rawBytes(e.token));
    // text_offset: code points of the text before each token
    let off = 0, offOk = true;
    for (const e of ents) { offOk &&= e.offset === off; off += cps(utf8(rawBytes(e.token))); }
    check(`${what}: text_offset counts the text's code points before each token`, offOk && ents.length > 0 ? ents[0].offset === 0 : offOk, ents.map((e) => e.offset));
    // streamed: the same text and the same entries
    const chunks = await post('/v1/completions', { ...body, stream: true, return_tokens: false });
    const sText = chunks.map((k) => k.choices[0]?.text ?? '').join('');
    const sEnts = chunks.flatMap((k) => (k.choices[0]?.logprobs ? cmplEntries(k.choices[0].logprobs) : []));
    check(`${what}: streamed, the same text and the same logprobs`, sText === text && JSON.stringify(sEnts) === JSON.stringify(ents), { sText, text, sEnts, ents });
    if (!golden)
        return { c, ents, G };
    const dP = await dec(P), dAll = await dec(P.concat(G));
    check(`${what}: the Rust decode starts with the prompt's`, dAll.startsWith(dP), { dP, dAll });
    const want = dAll.slice(dP.length);
    if (!want.includes('\ufffd'))
        check(`${what}: the text is the Rust decode of prompt + tokens, less the prompt's`, text === want, { text, want, G });
    check(`${what}: one logprobs entry per generated token`, ents.length === G.length, { n: ents.length, G });
    let boundaries = 0, bad = [];
    for (let b = 1; b <= G.length && ents.length === G.length; b++) {
        const d = await dec(P.concat(G.slice(0, b)));
        if (!d.startsWith(dP) || !dAll.startsWith(d) || d.includes('\ufffd'))
            continue;
        boundaries++;
        const got = utf8(ents.slice(0, b).flatMap((e) => rawBytes(e.token)));
        if (got !== d.slice(dP.length)) bad.push({ b, got, want: d.slice(dP.length), tok: G[b - 1] });
    }
    check(`${what}: at each of ${boundaries} clean token boundaries the entries so far spell the Rust decode so far`, boundaries > 0 && bad.length === 0, bad);
    return { c, ents, G, text };
}

// The raw bytes of a token string (\xNN back to its byte).
function rawBytes(s) {
    const out = [];
    for (let i = 0; i < s.length;) {
        const m = /^\\x([0-9a-f]{2})/.exec(s.slice(i, i + 4));
        if (m) { out.push(parseInt(m[1], 16)); i += 4; continue; }
        const cp = s.codePointAt(i);
        const ch = String.fromCodePoint(cp);
        out.push(...Buffer.from(ch));
        i += ch.length;
    }
    return out;
}

async function main() {
    // forced tokens: one that starts with a space after a word (" the"), and punctuation (",")
    const hello = await enc('Hello', false), forced = {};
    for (const w of [' the', ',']) {
        const ids = await enc('Hello' + w, false), id = ids[ids.length - 1];
        check(`${JSON.stringify(w)} is one token after "Hello" (a forced token)`, ids.length === hello.length + 1, { hello, ids });
        forced[w] = { id, want: (await dec(hello.concat([id, id, id]))).slice((await dec(hello)).length) };
    }
    const the = forced[' the'].id, wantThe = forced[' the'].want;

    // completions: prompts as the Rust tokenizer encodes them, a sampled continuation
    for (const [i, t] of ['Hello', 'The cat sat on the mat. It was', '日本語のテキスト', 'x'].entries()) {
        const P = await enc(t, true);
        await completion(`completion ${i} (${JSON.stringify(t)}), sampled`, P, { seed: 11 + i });
    }
    // the forced tokens first after the prompt (" the": the SentencePiece case of issue 35)
    const P = await enc('Hello', true);
    for (const [w, { id, want }] of Object.entries(forced)) {
        const f = await completion(`completion, ${JSON.stringify(w)} forced 3 times`, P, { max_tokens: 3, logit_bias: { [id]: 100 } });
        check(`completion: the forced tokens are ${JSON.stringify(want)} as Rust decodes them, token by token`,
            f.text === want && f.ents.map((e) => e.token).join('|') === [1, 2, 3].map(() => want.slice(0, want.length / 3)).join('|'),
            { text: f.text, tokens: f.ents.map((e) => e.token), want });
    }
    // a prompt of special tokens only: the first token is the text's start
    if (P.length > 1 && await dec([P[0]]) === '')
        await completion('completion after the BOS alone, sampled', [P[0]], { seed: 5 });

    // stop strings: the logprobs cover exactly the returned text
    const PS = await enc('The cat sat on the mat. It was', true);
    const base = await completion('completion for the stop cases', PS, { seed: 21, max_tokens: 16 });
    const bT = base.text, starts = [];
    let o = 0;
    for (const e of base.ents) { starts.push(o); o += rawBytes(e.token).length; }
    const tb = Buffer.from(bT);
    // a stop string that begins inside a token's piece, and one that begins where a token begins
    const whole = (e) => rawBytes(e.token).length > 0 && utf8(rawBytes(e.token)) === e.token;
    const inside = base.ents.findIndex((e, k) => k > 1 && whole(e) && rawBytes(e.token).length >= 3 && rawBytes(e.token)[0] < 0x80);
    const cases = [];
    if (inside > 0) cases.push(['inside a token', starts[inside] + 1]);
    const at = base.ents.findIndex((e, k) => k > 1 && k !== inside && whole(e));
    if (at > 0) cases.push(['at a token', starts[at]]);
    check('the stop cases found a place to cut', cases.length === 2, { bT, tokens: base.ents.map((e) => e.token) });
    for (const [where, cut] of cases) {
        const stop = Array.from(tb.subarray(cut).toString('utf8')).slice(0, 3).join('');
        const firstAt = Buffer.from(bT.slice(0, bT.indexOf(stop))).length;
        const r = await completion(`completion with a stop string ${where}`, PS, { seed: 21, max_tokens: 16, stop: [stop] }, false);
        const txt = r.c.text, want = tb.subarray(0, firstAt).toString('utf8');
        check(`stop ${where}: the text ends before the stop string`, txt === want, { txt, want, stop });
        const nWant = starts.filter((s) => s < firstAt).length;
        check(`stop ${where}: the entries are the tokens before the cut (${nWant}), the last one cut to the text`,
            r.ents.length === nWant && r.ents.every((e, k) => k === nWant - 1 ? base.ents[k].token.startsWith(e.token) : e.token === base.ents[k].token),
            { got: r.ents.map((e) => e.token), base: base.ents.map((e) => e.token), firstAt });
    }

    // chat: the same rules; the prompt is the template's (not known here), so the golden is the
    // forced " the" and the text spelled by the bytes
    const cb = { messages: [{ role: 'user', content: 'Say the' }], max_tokens: 3, temperature: 0, logprobs: true, top_logprobs: 2, logit_bias: { [the]: 100 } };
    const ch = await post('/v1/chat/completions', cb);
    const cont = ch.choices[0].logprobs.content, ctext = ch.choices[0].message.content;
    check(`chat: the forced tokens are ${JSON.stringify(wantThe)} token by token, their bytes too`,
        ctext === wantThe && cont.length === 3 && cont.every((e) => e.token === wantThe.slice(0, wantThe.length / 3) && utf8(e.bytes) === e.token)
        && cont.every((e) => e.top_logprobs.length === 2), { ctext, cont });
    const cs = { ...cb, logit_bias: undefined, temperature: 1, seed: 3, max_tokens: 24 };
    const ch2 = await post('/v1/chat/completions', cs);
    spells('chat, sampled', ch2.choices[0].message.content, ch2.choices[0].logprobs.content, (e) => e.bytes);
    const sc = await post('/v1/chat/completions', { ...cs, stream: true });
    const scText = sc.map((k) => k.choices[0]?.delta?.content ?? '').join('');
    const scEnts = sc.flatMap((k) => k.choices[0]?.logprobs?.content ?? []);
    check('chat, sampled: streamed, the same text and the same logprobs', scText === ch2.choices[0].message.content
        && JSON.stringify(scEnts) === JSON.stringify(ch2.choices[0].logprobs.content), { scText, scEnts });
    // byte-level BPE vocabularies hold many tokens that end inside a character: the runs above met some
    if (['qwen3', 'llama3'].includes(name))
        check(`the sampled tokens included some that split a character (${nSplit})`, nSplit > 0);
    console.log(`${name}: ${nOk} passed, ${nBad} failed`);
}
main().catch((e) => { console.log(`not ok - ${name}: the checker ran (${e.stack})`); process.exit(1); });
