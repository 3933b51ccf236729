// tests/ui/chat_page.mjs: drives the chat page of `caldrix serve` in Debian's headless Chromium
// through playwright-core (pinned in package.json; it downloads no browser). Not a test by itself:
// tests/ui/test_chat_page.sh starts the servers and passes them here as JSON in argv[2]:
//   { url, slow_url, key_url, key, ref: {text, prompt_tokens}, prompt, max_tokens, shot }
// Prints "ok - ..." / "not ok - ..." lines; the shell script counts them.
import { chromium } from './node_modules/playwright-core/index.mjs';

const cfg = JSON.parse(process.argv[2]);
const t0 = Date.now();
const mark = (what) => console.log(`# ${((Date.now() - t0) / 1000).toFixed(1)} s: ${what}`);
let failed = 0;
const check = (name, cond, detail) => {
    if (cond) console.log('ok - ' + name);
    else { failed++; console.log('not ok - ' + name + (detail !== undefined ? ': ' + JSON.stringify(detail).slice(0, 600) : '')); }
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const metric = (text, name) => {
    const m = text.split('\n').find((l) => l.startsWith(name + ' '));
    return m ? Number(m.slice(name.length + 1)) : NaN;
};

mark('start');
const browser = await chromium.launch({ executablePath: cfg.chromium, args: ['--no-sandbox', '--disable-gpu'] });
const ctx = await browser.newContext({ viewport: { width: 1100, height: 800 } });

// Every request the page makes, and every console message and page error
const watch = (page) => {
    const w = { requests: [], errors: [] };
    page.on('request', (r) => w.requests.push(r.url()));
    page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') w.errors.push(m.type() + ': ' + m.text()); });
    page.on('pageerror', (e) => w.errors.push('pageerror: ' + e.message));
    return w;
};
const origin = (u) => new URL(u).origin;
const chats = (page) => page.evaluate(() => JSON.parse(localStorage.getItem('caldrix.chats') || '[]'));
const idle = (page, ms = 30000) => page.waitForFunction(() => !document.getElementById('send').disabled &&
    document.getElementById('stop').disabled, null, { timeout: ms });
const setParams = async (page, t, n) => {
    if (await page.locator('#settings').isHidden()) await page.click('#settings-toggle');
    await page.fill('#temperature', String(t));
    await page.fill('#top-p', '1');
    await page.fill('#max-tokens', String(n));
};
const lastReply = (page) => page.evaluate(() => {
    const m = [...document.querySelectorAll('.msg.assistant')].pop();
    return m ? m.querySelector('.body').textContent : null;
});
const squash = (s) => (s || '').replace(/\s+/g, '');

// ---- 1. the page loads: nothing from another host, no console error, every control labelled ----
mark('1. the page loads: nothing from another host, no console error, every control labelled');
const page = await ctx.newPage();
const w = watch(page);
const resp = await page.goto(cfg.url + '/');
await page.waitForFunction(() => document.querySelectorAll('#model option').length > 0, null, { timeout: 10000 });
check('GET / answers the page (200, text/html)', resp.status() === 200 && /^text\/html/.test(resp.headers()['content-type']));
const csp = resp.headers()['content-security-policy'] || '';
check("its Content-Security-Policy allows nothing but itself (default-src 'none', connect-src 'self')",
      /default-src 'none'/.test(csp) && /connect-src 'self'/.test(csp) && /script-src 'sha256-/.test(csp), csp);
await sleep(300);
const foreign = w.requests.filter((u) => !u.startsWith('data:') && origin(u) !== origin(cfg.url));
check('the page requests nothing from any other host (' + w.requests.length + ' requests, all to the server)',
      w.requests.length > 0 && foreign.length === 0, foreign);
check('no console error or warning while loading', w.errors.length === 0, w.errors);
const models = await page.$$eval('#model option', (os) => os.map((o) => o.value));
check('the model picker lists the served model from /v1/models', models.length === 1 && models[0] === cfg.model, models);
// the accessibility tree (Chromium's own): every control has a name
const cdp = await ctx.newCDPSession(page);
const folded = await page.locator('#settings').isHidden();
await page.click('#settings-toggle');
check('the settings are folded until their button opens them', folded && (await page.locator('#temperature').isVisible()) &&
      (await page.getAttribute('#settings-toggle', 'aria-expanded')) === 'true');
const ax = (await cdp.send('Accessibility.getFullAXTree')).nodes;
const roles = new Set(['button', 'textbox', 'combobox', 'spinbutton', 'checkbox', 'slider', 'listbox']);
const controls = ax.filter((n) => !n.ignored && n.role && roles.has(n.role.value));
const unnamed = controls.filter((n) => !(n.name && n.name.value && n.name.value.trim()));
check('every control is labelled (' + controls.length + ' controls in the accessibility tree)', controls.length >= 9 && unnamed.length === 0,
      unnamed.map((n) => n.role.value));
await page.click('#settings-toggle');

// ---- 2. a message at temperature 0 streams /v1/chat/completions' greedy reply ----
mark("2. a message at temperature 0 streams /v1/chat/completions' greedy reply");
await setParams(page, 0, cfg.max_tokens);
let sent = null, sentType = null;
page.on('request', (r) => { if (r.url().endsWith('/v1/chat/completions')) sent = r.postDataJSON(); });
page.on('response', (r) => { if (r.url().endsWith('/v1/chat/completions')) sentType = r.headers()['content-type']; });
await page.fill('#input', cfg.prompt);
await page.press('#input', 'Enter');
await idle(page);
check('Enter sent the message as a streamed chat request at temperature 0',
      sent && sent.stream === true && sent.temperature === 0 && sent.max_tokens === cfg.max_tokens &&
      sent.messages.length === 1 && sent.messages[0].content === cfg.prompt, sent);
check('the answer came as text/event-stream', /^text\/event-stream/.test(sentType || ''), sentType);
let c = await chats(page);
const got = c[0] && c[0].messages[1] ? c[0].messages[1].content : null;
check('the streamed reply equals /v1/chat/completions\' greedy reply for the same conversation', got === cfg.ref.text,
      { got, want: cfg.ref.text });
const shown = await lastReply(page);
check('... and is what the page shows', squash(shown) === squash(cfg.ref.text) && squash(shown).length > 0, shown);
const stats = await page.textContent('#stats');
check('the stats line gives tokens per second and the prompt and cached tokens from usage',
      /tokens\/s/.test(stats) && stats.includes('prompt ' + cfg.ref.prompt_tokens + ' tokens (') && /cached/.test(stats), stats);
check('no console error during the exchange', w.errors.length === 0, w.errors);
await page.screenshot({ path: cfg.shot, fullPage: true });
check('a screenshot of the finished exchange is written to ' + cfg.shot, true);

// regenerate: the same greedy reply again, its prompt now from the prefix cache
await page.click('.msg.assistant button.regenerate');
await idle(page);
c = await chats(page);
check('Regenerate replaces the last reply with the same greedy text', c[0].messages.length === 2 && c[0].messages[1].content === cfg.ref.text,
      c[0].messages.map((m) => m.content));
// edit and resend: the last user message back in the box, the reply gone, a new reply to the edit
await page.click('.msg.user button.edit');
check('Edit puts the last message back in the input and takes it and its reply off', (await page.inputValue('#input')) === cfg.prompt &&
      (await page.locator('.msg').count()) === 0);
await page.fill('#input', cfg.prompt + ' there');
await page.press('#input', 'Enter');
await idle(page);
c = await chats(page);
check('... and sends the edited message', c[0].messages.length === 2 && c[0].messages[0].content === cfg.prompt + ' there' &&
      typeof c[0].messages[1].content === 'string' && c[0].messages[1].content.length > 0, c[0].messages);
// Shift+Enter is a new line, not a send
await page.fill('#input', 'one');
await page.press('#input', 'Shift+Enter');
await page.type('#input', 'two');
check('Shift+Enter adds a new line and sends nothing', (await page.inputValue('#input')) === 'one\ntwo' && (await page.locator('.msg').count()) === 2);
await page.fill('#input', '');
// a system prompt goes first
await page.fill('#system', 'You are a storyteller.');
await page.dispatchEvent('#system', 'change');
await page.fill('#input', 'Hi');
await page.press('#input', 'Enter');
await idle(page);
check('the system prompt is sent as the first message', sent.messages[0].role === 'system' && sent.messages[0].content === 'You are a storyteller.' &&
      sent.messages.length === 4, sent.messages);
// conversations survive a reload (local storage)
await page.reload();
await page.waitForFunction(() => document.querySelectorAll('#model option').length > 0);
check('after a reload the conversation is still there (local storage)', (await page.locator('.msg').count()) === 4 &&
      (await page.locator('#convs li').count()) === 1);
check('no console error in all that', w.errors.length === 0, w.errors);

// ---- 2b. several models: the picker shows each one's state and compatibility ----
mark('2b. several models');
const pm = await ctx.newPage();
const wm = watch(pm);
await pm.goto(cfg.multi_url + '/');
await pm.waitForFunction(() => document.querySelectorAll('#model option').length === 2, null, { timeout: 10000 });
let opts = await pm.$$eval('#model option', (os) => os.map((o) => ({ v: o.value, t: o.textContent, title: o.title })));
check('with several models the picker shows each one\'s state, and the compatibility of a refused one',
      opts[0].v === 'alpha' && opts[0].t === 'alpha (unloaded)' && opts[1].v === 'broken' && opts[1].t === 'broken (unloaded, incompatible)' &&
      /not a GGUF file/.test(opts[1].title), opts);
await pm.selectOption('#model', 'broken');
check('... and the reason beside it', /incompatible: .*not a GGUF file/.test(await pm.textContent('#model-info')), await pm.textContent('#model-info'));
await setParams(pm, 0, cfg.max_tokens);
await pm.fill('#input', cfg.prompt);
await pm.press('#input', 'Enter');
await idle(pm);
const merr = await pm.textContent('#error-text');
check('a message to the incompatible model shows the server\'s INCOMPATIBLE_MODEL error', /INCOMPATIBLE_MODEL/.test(merr) && !(await pm.locator('#error').isHidden()), merr);
await pm.selectOption('#model', 'alpha');
await pm.click('#retry');
await idle(pm);
await pm.waitForFunction(() => document.querySelector('#model option').textContent === 'alpha (loaded)', null, { timeout: 10000 }).catch(() => {});
opts = await pm.$$eval('#model option', (os) => os.map((o) => o.textContent));
const cm = await chats(pm);
check('the model picked answers (the request names it: the same greedy reply), and then shows as loaded',
      cm[0].messages[1] && cm[0].messages[1].content === cfg.ref.text && opts[0] === 'alpha (loaded)', { opts, m: cm[0].messages });
check('no console error there but the failed load of the 400', wm.errors.filter((e) => !/status of 400/.test(e)).length === 0, wm.errors);
await pm.close();

// ---- 3. model output is text: <script> and <img onerror> are shown, not run ----
mark('3. model output is text: <script> and <img onerror> are shown, not run');
const evil = '<script>window.__pwned = 1</script> and <img src="/pwned.png" onerror="window.__pwned = 2"> **bold** `tick`\n\n```html\n<b onmouseover="x()">code</b>\n```\n';
const sse = (pieces, done = true) => pieces.map((p, i) => 'data: ' + JSON.stringify({ id: 'chatcmpl-t', object: 'chat.completion.chunk', created: 1,
    model: cfg.model, choices: [{ index: 0, delta: i ? { content: p } : { role: 'assistant', content: p }, finish_reason: null }] }) + '\n\n').join('') +
    (done ? 'data: ' + JSON.stringify({ id: 'chatcmpl-t', object: 'chat.completion.chunk', created: 1, model: cfg.model,
        choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }) + '\n\ndata: [DONE]\n\n' : '');
await page.click('#new-chat');
await page.route('**/v1/chat/completions', (r) => r.fulfill({ status: 200, contentType: 'text/event-stream', body: sse(['', evil.slice(0, 20), evil.slice(20)]) }));
await page.fill('#input', 'show me html');
await page.press('#input', 'Enter');
await idle(page);
const x = await page.evaluate(() => {
    const b = [...document.querySelectorAll('.msg.assistant .body')].pop();
    return { pwned: window.__pwned, text: b.textContent, script: b.querySelectorAll('script').length, img: b.querySelectorAll('img').length,
             pre: b.querySelector('pre code') && b.querySelector('pre code').textContent, strong: b.querySelector('strong') && b.querySelector('strong').textContent,
             b: b.querySelectorAll('b').length };
});
check('an answer holding <script> and <img onerror> is shown as text: nothing ran, no element was made',
      x.pwned === undefined && x.script === 0 && x.img === 0 && x.b === 0 && x.text.includes('<script>window.__pwned = 1</script>') &&
      x.text.includes('onerror="window.__pwned = 2"'), x);
check('... while Markdown is rendered: **bold**, a fenced code block', x.strong === 'bold' && x.pre === '<b onmouseover="x()">code</b>', x);
check('... and the page asked for no image', !w.requests.some((u) => u.includes('pwned')));

// ---- 4. errors are shown, with a retry ----
mark('4. errors are shown, with a retry');
await page.unroute('**/v1/chat/completions');
await setParams(page, 0, 0); // the server refuses max_tokens 0
await page.fill('#input', 'Hello');
await page.press('#input', 'Enter');
await idle(page);
let err = await page.evaluate(() => ({ shown: !document.getElementById('error').hidden, text: document.getElementById('error-text').textContent,
                                       retry: !document.getElementById('retry').hidden, msgs: document.querySelectorAll('.msg').length }));
check("a 400 from the server shows the server's message and a Retry, the conversation stays", err.shown && err.retry && /max_tokens/.test(err.text) &&
      /400/.test(err.text) && err.msgs >= 3, err);
await setParams(page, 0, cfg.max_tokens);
await page.click('#retry');
await idle(page);
err = await page.evaluate(() => !document.getElementById('error').hidden);
c = await chats(page);
check('Retry sends it again and the reply comes', !err && c[0].messages.length === 4 && c[0].messages[3].role === 'assistant' && c[0].messages[3].content.length > 0,
      c[0].messages.map((m) => m.role));
await page.route('**/v1/chat/completions', (r) => r.fulfill({ status: 429, contentType: 'application/json', headers: { 'Retry-After': '1' },
    body: JSON.stringify({ error: { message: 'the model is busy; try again', type: 'server_error', param: 'model', code: 'MODEL_RESOURCE_BUSY' } }) }));
await page.click('.msg.assistant button.regenerate');
await idle(page);
err = await page.evaluate(() => ({ shown: !document.getElementById('error').hidden, text: document.getElementById('error-text').textContent }));
check('a 429 MODEL_RESOURCE_BUSY shows its message and code', err.shown && /busy/.test(err.text) && /MODEL_RESOURCE_BUSY/.test(err.text), err);
await page.unroute('**/v1/chat/completions');
await page.route('**/v1/chat/completions', (r) => r.fulfill({ status: 200, contentType: 'text/event-stream', body: sse(['', 'half a rep'], false) }));
await page.click('#retry');
await idle(page);
err = await page.evaluate(() => ({ shown: !document.getElementById('error').hidden, text: document.getElementById('error-text').textContent,
                                   last: [...document.querySelectorAll('.msg')].pop().textContent }));
check('a stream that drops before [DONE] is an error; the partial reply is kept and marked', err.shown && /dropped/.test(err.text) &&
      err.last.includes('half a rep') && /Error/.test(err.last), err);
await page.unroute('**/v1/chat/completions');
await page.click('#retry');
await idle(page);
c = await chats(page);
check('... and Retry replaces it with a whole reply', (await page.locator('#error').isHidden()) && !c[0].messages[3].error && c[0].messages[3].content !== 'half a rep',
      c[0].messages[3]);
// an image attachment goes as a data: URL (this model takes no images: the server's 400 is shown)
const fs = await import('node:fs');
await page.click('#new-chat');
await page.setInputFiles('#attach', { name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('hello') });
check('a file that is not PNG or JPEG is refused by the page', /only PNG and JPEG/.test(await page.textContent('#error-text')));
await page.setInputFiles('#attach', cfg.image);
await page.waitForSelector('#attachments img');
sent = null;
await page.fill('#input', 'What is this?');
await page.press('#input', 'Enter');
await idle(page);
const want = 'data:image/png;base64,' + fs.readFileSync(cfg.image).toString('base64');
const parts = sent && sent.messages[0].content;
check('an attached PNG is sent as an image_url part with its data: URL, after the text', Array.isArray(parts) && parts.length === 2 &&
      parts[0].type === 'text' && parts[0].text === 'What is this?' && parts[1].type === 'image_url' && parts[1].image_url.url === want,
      parts && parts.map((q) => q.type));
check('... shown in the message, and the server\'s 400 for a model without images is shown',
      (await page.locator('.msg.user .imgs img').count()) === 1 && /400/.test(await page.textContent('#error-text')), await page.textContent('#error-text'));
// errors expected above were logged by Chromium as failed loads; nothing else
const other = w.errors.filter((e) => !/status of (400|429)/.test(e));
check('no console error but the failed loads of those answers', other.length === 0, w.errors);

// ---- 5. Stop ends the stream; the server cancels it and frees its KV blocks ----
mark('5. Stop ends the stream; the server cancels it and frees its KV blocks');
const p2 = await ctx.newPage();
const w2 = watch(p2);
await p2.goto(cfg.slow_url + '/');
await p2.waitForFunction(() => document.querySelectorAll('#model option').length > 0);
await setParams(p2, 0, cfg.slow_max_tokens);
await p2.fill('#input', cfg.prompt);
await p2.press('#input', 'Enter');
await p2.waitForFunction(() => { const m = [...document.querySelectorAll('.msg.assistant .body')].pop(); return m && m.textContent.length > 0; },
                         null, { timeout: 20000 });
await p2.click('#stop');
await idle(p2, 10000);
const partial = await lastReply(p2);
const stopped = await p2.evaluate(() => [...document.querySelectorAll('.msg.assistant')].pop().textContent);
check('Stop ends the stream; the partial reply stays, marked as stopped', partial.length > 0 && /Stopped/.test(stopped), stopped.slice(-80));
let mt = '', cancelled = 0, used = -1, active = -1;
for (let i = 0; i < 50; i++) {
    mt = await (await fetch(cfg.slow_url + '/metrics')).text();
    cancelled = metric(mt, 'caldrix_generations_total{reason="cancelled"}');
    used = metric(mt, 'caldrix_kv_blocks{state="used"}');
    active = metric(mt, 'caldrix_active_sequences');
    if (cancelled >= 1 && used === 0 && active === 0) break;
    await sleep(100);
}
check(`/metrics: the request was cancelled and no KV block is held (cancelled=${cancelled} used=${used} active=${active})`,
      cancelled === 1 && used === 0 && active === 0);
// Escape stops too
await p2.fill('#input', 'again');
await p2.press('#input', 'Enter');
await p2.waitForFunction(() => document.querySelectorAll('.msg.assistant').length === 2 &&
                         [...document.querySelectorAll('.msg.assistant .body')].pop().textContent.length > 0, null, { timeout: 20000 });
await p2.keyboard.press('Escape');
await idle(p2, 10000);
for (let i = 0; i < 50; i++) {
    mt = await (await fetch(cfg.slow_url + '/metrics')).text();
    cancelled = metric(mt, 'caldrix_generations_total{reason="cancelled"}');
    if (cancelled >= 2 && metric(mt, 'caldrix_kv_blocks{state="used"}') === 0) break;
    await sleep(100);
}
check('Escape stops a reply the same way (cancelled=' + cancelled + ')', cancelled === 2 && metric(mt, 'caldrix_kv_blocks{state="used"}') === 0);
check('no console error on the Stop page', w2.errors.length === 0, w2.errors);
// a phone-sized screen: nothing wider than the screen, the composer in view
await p2.setViewportSize({ width: 390, height: 760 });
const phone = await p2.evaluate(() => {
    const r = (id) => document.getElementById(id).getBoundingClientRect();
    return { sw: document.documentElement.scrollWidth, send: r('send').right, sendBottom: r('send').bottom, input: r('input').width };
});
check('on a 390-pixel screen nothing is wider than the screen and the composer is in view', phone.sw <= 390 && phone.send <= 390 &&
      phone.sendBottom <= 760 && phone.input > 150, phone);
await p2.close();

// ---- 6. --api-key: the page asks for the key, keeps it for the tab, and works once given it ----
mark('6. --api-key: the page asks for the key, keeps it for the tab, and works once given it');
const ctx3 = await browser.newContext();
const p3 = await ctx3.newPage();
const w3 = watch(p3);
const r3 = await p3.goto(cfg.key_url + '/');
check('with --api-key the page itself loads without a key', r3.status() === 200);
await p3.waitForSelector('#key-dialog[open]', { timeout: 10000 });
check('the page asks for the key', await p3.isVisible('#key'));
await p3.fill('#key', 'not-the-key');
await p3.press('#key', 'Enter');
await p3.waitForFunction(() => /wrong/i.test(document.getElementById('key-msg').textContent), null, { timeout: 10000 });
check('a wrong key is refused and asked for again', await p3.isVisible('#key'));
await p3.fill('#key', cfg.key);
await p3.press('#key', 'Enter');
await p3.waitForFunction(() => document.querySelectorAll('#model option').length > 0, null, { timeout: 10000 });
await setParams(p3, 0, cfg.max_tokens);
await p3.fill('#input', cfg.prompt);
await p3.press('#input', 'Enter');
await idle(p3);
const c3 = await chats(p3);
check('with the key given, a message gets the same greedy reply', c3[0] && c3[0].messages[1] && c3[0].messages[1].content === cfg.ref.text,
      c3[0] && c3[0].messages);
const stored = await p3.evaluate(() => ({ session: sessionStorage.getItem('caldrix.key'), local: JSON.stringify({ ...localStorage }) }));
check('the key is kept in the tab (sessionStorage), never in local storage', stored.session === cfg.key && !stored.local.includes(cfg.key));
const fresh = await ctx3.newPage();
await fresh.goto(cfg.key_url + '/');
await fresh.waitForSelector('#key-dialog[open]', { timeout: 10000 });
check('a new tab asks again', await fresh.isVisible('#key'));
await fresh.keyboard.press('Escape');
await fresh.waitForFunction(() => !document.getElementById('error').hidden, null, { timeout: 10000 });
const ferr = await fresh.textContent('#error-text');
check('dismissing the key dialog (Escape) shows the 401 with a Retry', /needs an API key/.test(ferr) && /401/.test(ferr) &&
      (await fresh.isVisible('#retry')), ferr);
await fresh.click('#retry');
await fresh.waitForSelector('#key-dialog[open]', { timeout: 10000 });
await fresh.fill('#key', cfg.key);
await fresh.press('#key', 'Enter');
await fresh.waitForFunction(() => document.querySelectorAll('#model option').length > 0, null, { timeout: 10000 });
check('... and Retry asks again and then lists the models', (await fresh.locator('#error').isHidden()));
check('no console error with the key but the 401s', w3.errors.filter((e) => !/status of 401/.test(e)).length === 0, w3.errors);
await ctx3.close();

// a reasoning model's reasoning_content (gpt-oss's analysis channel) is shown apart, as text, folded
// when done, and not sent back with the conversation
mark('7. reasoning_content is shown apart from the answer and never sent back');
const chunk = (delta, finish = null) => 'data: ' + JSON.stringify({ id: 'chatcmpl-r', object: 'chat.completion.chunk', created: 1,
    model: cfg.model, choices: [{ index: 0, delta, finish_reason: finish }] }) + '\n\n';
const ctx4 = await browser.newContext();
const p4 = await ctx4.newPage();
const w4 = watch(p4);
await p4.goto(cfg.url + '/');
await p4.waitForFunction(() => document.querySelectorAll('#model option').length > 0);
await p4.route('**/v1/chat/completions', (r) => r.fulfill({ status: 200, contentType: 'text/event-stream',
    body: chunk({ role: 'assistant', content: '' }) + chunk({ reasoning_content: 'The user wants <b>one</b> word. ' }) +
          chunk({ reasoning_content: 'Say hi.' }) + chunk({ content: 'Hi' }) + chunk({}, 'stop') + 'data: [DONE]\n\n' }));
await p4.fill('#input', 'one word please');
await p4.press('#input', 'Enter');
await idle(p4);
const rs = await p4.evaluate(() => {
    const m = [...document.querySelectorAll('.msg.assistant')].pop(), d = m.querySelector('details.reasoning');
    return { reasoning: d && d.querySelector('p').textContent, open: d && d.open, b: m.querySelectorAll('b').length,
             body: m.querySelector('.body').textContent, summary: d && d.querySelector('summary').textContent };
});
check('the reasoning is shown apart from the answer, as text, folded once the reply is done',
      rs.reasoning === 'The user wants <b>one</b> word. Say hi.' && rs.summary === 'Reasoning' && rs.open === false && rs.b === 0 &&
      rs.body === 'Hi', rs);
let sentBack = null;
await p4.unroute('**/v1/chat/completions');
await p4.route('**/v1/chat/completions', (r) => { sentBack = r.request().postDataJSON(); r.fulfill({ status: 200, contentType: 'text/event-stream', body: sse(['', 'ok']) }); });
await p4.fill('#input', 'again');
await p4.press('#input', 'Enter');
await idle(p4);
const prev = sentBack && sentBack.messages.find((m) => m.role === 'assistant');
check('... and the next request sends the answer back without the reasoning',
      prev && prev.content === 'Hi' && !('reasoning_content' in prev) && !JSON.stringify(sentBack).includes('Say hi'), sentBack);
check('no console error on the reasoning page', w4.errors.length === 0, w4.errors);
await ctx4.close();

await browser.close();
mark('done');
console.log(`browser: ${failed} failed`);
