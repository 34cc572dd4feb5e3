// Tests of the Node runtime against the shared contract fixtures
// (../fixtures/contract.json) and its timeout, concurrency, error and drain
// behaviour. Run: node --test
'use strict';

const test = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const http = require('node:http');
const net = require('node:net');
const { spawn } = require('node:child_process');

const FIXTURES = path.join(__dirname, '..', 'fixtures');

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

function request(port, method, p, body, headers, agent) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path: p, headers: headers || {}, agent: agent || false }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
    });
    req.on('error', reject);
    if (body) req.write(body);
    req.end();
  });
}

async function startRuntime(opts = {}) {
  const port = await freePort();
  const env = {
    ...process.env, PORT: String(port), SLESS_HOST: '127.0.0.1', SLESS_FUNCTION: 'fixtures', SLESS_TENANT: 'test',
    SLESS_CODE_DIR: opts.codeDir || path.join(FIXTURES, 'handlers'), SLESS_ENTRYPOINT: 'index.handler',
    SLESS_TIMEOUT_SEC: opts.timeout || '1', SLESS_CONCURRENCY: opts.concurrency || '2', SLESS_MEMORY_MB: opts.memoryMB || '',
    SLESS_FUNCTION_VERSION: '7',
  };
  const proc = spawn(process.execPath, [path.join(__dirname, 'runtime.js')], { env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let logs = '';
  proc.stdout.on('data', (d) => { logs += d; });
  proc.stderr.on('data', (d) => { logs += d; });
  const rt = {
    port, proc, logs: () => logs,
    req: (method, p, body, headers, agent) => request(port, method, p, body, headers, agent),
    // The supervisor first, so that its serving process sees it gone and ends its own group.
    stop: () => { if (proc.exitCode === null) { try { process.kill(-proc.pid, 'SIGKILL'); } catch { /* gone */ } } },
    async waitHealth(want = 200, notStatus) {
      const deadline = Date.now() + 20000;
      for (;;) {
        try {
          const r = await rt.req('GET', '/_/health');
          if (r.status === want && (!notStatus || JSON.parse(r.body).status !== notStatus)) return r;
        } catch { /* not listening yet */ }
        if (Date.now() > deadline) throw new Error(`health never answered ${want}; log:\n${logs}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
  };
  return rt;
}

async function checkCase(rt, c) {
  const { request: req, response: want } = c;
  let body;
  if ('body' in req) body = Buffer.from(req.body);
  else if ('bodyBase64' in req) body = Buffer.from(req.bodyBase64, 'base64');
  const p = req.path + (req.query ? `?${req.query}` : '');
  const r = await rt.req(req.method, p, body, req.headers);
  assert.strictEqual(r.status, want.status, r.body.toString());
  for (const [k, v] of Object.entries(want.headers || {})) assert.strictEqual(r.headers[k], v, `header ${k}`);
  for (const k of want.headersPresent || []) assert.ok(r.headers[k], `header ${k} missing`);
  if ('body' in want) assert.strictEqual(r.body.toString(), want.body);
  if ('bodyBase64' in want) assert.ok(r.body.equals(Buffer.from(want.bodyBase64, 'base64')), 'body bytes differ');
  if ('json' in want) assert.deepStrictEqual(JSON.parse(r.body), want.json);
  if ('jsonSubset' in want) {
    const got = JSON.parse(r.body);
    for (const [k, v] of Object.entries(want.jsonSubset)) assert.deepStrictEqual(got[k] ?? null, v, `field ${k}`);
  }
  for (const s of want.bodyExcludes || []) assert.ok(!r.body.toString().includes(s), `body leaks ${s}`);
  for (const s of want.bodyContains || []) assert.ok(r.body.toString().includes(s), `body lacks ${s}`);
  for (const k of want.headersAbsent || []) assert.ok(!(k in r.headers), `header ${k} present`);
}

test('contract fixtures', async (t) => {
  const rt = await startRuntime();
  t.after(rt.stop);
  await rt.waitHealth();
  const cases = JSON.parse(fs.readFileSync(path.join(FIXTURES, 'contract.json'), 'utf8'));
  assert.ok(cases.length > 10);
  for (const c of cases) await t.test(c.name, () => checkCase(rt, c));
  await t.test('handler output is logged as JSON with the invocation id', async () => {
    await rt.req('GET', '/logs', null, { 'X-Sless-Invocation-Id': 'inv-logs' });
    await new Promise((r) => setTimeout(r, 200));
    const lines = rt.logs().split('\n').filter((l) => l.startsWith('{')).map(JSON.parse);
    const mine = lines.filter((l) => l.invocationId === 'inv-logs');
    assert.deepStrictEqual(mine.map((l) => l.msg), ['line one', 'line two']);
    // Every line, the runtime's own and the handler's, names the version the process runs; msg stays last.
    assert.ok(lines.length > mine.length);
    for (const l of lines) {
      assert.strictEqual(l.version, 7, JSON.stringify(l));
      assert.strictEqual(Object.keys(l).at(-1), 'msg', JSON.stringify(l));
    }
  });
  await t.test('a line logged after an await carries its own invocation id while others run', async () => {
    await Promise.all(['inv-a', 'inv-b'].map((id) => rt.req('GET', '/logsAfterAwait', null, { 'X-Sless-Invocation-Id': id })));
    await new Promise((r) => setTimeout(r, 200));
    const mine = rt.logs().split('\n').filter((l) => l.startsWith('{')).map(JSON.parse).filter((l) => l.msg === 'after await');
    assert.deepStrictEqual(mine.map((l) => l.invocationId).sort(), ['inv-a', 'inv-b']);
  });
  await t.test('keep-alive serves many requests on one connection', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    for (let i = 0; i < 20; i++) {
      const r = await rt.req('GET', '/text', null, null, agent);
      assert.strictEqual(r.body.toString(), 'hello, world');
    }
    agent.destroy();
  });
});

for (const [name, p, body] of [['a busy loop', '/spin', null], ['an awaited promise', '/slow', '{"seconds":30}']]) {
  test(`a timeout in ${name} answers 504 and the next request is served`, async (t) => {
    const rt = await startRuntime({ timeout: '1', concurrency: '1' });
    t.after(rt.stop);
    await rt.waitHealth();
    let start = Date.now();
    const r = await rt.req(body ? 'POST' : 'GET', p, body, body ? { 'Content-Type': 'application/json' } : {});
    assert.strictEqual(r.status, 504);
    assert.match(JSON.parse(r.body).error, /timed out after 1s/);
    t.diagnostic(`504 after ${Date.now() - start} ms (limit 1 s)`);
    start = Date.now();
    const next = await rt.req('GET', '/text');
    assert.strictEqual(next.status, 200);
    assert.strictEqual(next.body.toString(), 'hello, world');
    t.diagnostic(`next request after a timeout served in ${Date.now() - start} ms`);
    assert.match(rt.logs(), /process recycled/);
  });
}

test('a blocked event loop answers every invocation of the process, then the runtime serves again', async (t) => {
  const rt = await startRuntime({ timeout: '1', concurrency: '2' });
  t.after(rt.stop);
  await rt.waitHealth();
  const slow = rt.req('POST', '/slow', '{"seconds":5}', { 'Content-Type': 'application/json' });
  await new Promise((r) => setTimeout(r, 300));
  const spin = rt.req('GET', '/spin');
  const [s, p] = await Promise.all([slow, spin]);
  // The earlier deadline is the awaiting call's: it times out, and the
  // spinning one is cut short with the process.
  assert.strictEqual(s.status, 504);
  assert.strictEqual(p.status, 503);
  assert.strictEqual(JSON.parse(p.body).type, 'Recycled');
  assert.strictEqual(p.headers['retry-after'], '1');
  assert.strictEqual((await rt.req('GET', '/text')).status, 200);
});

// waitGone waits until pid has exited (a zombie counts as exited).
async function waitGone(pid) {
  const deadline = Date.now() + 10000;
  for (;;) {
    let st;
    try { st = fs.readFileSync(`/proc/${pid}/stat`, 'utf8'); } catch { return; }
    if (st.slice(st.lastIndexOf(')') + 2).startsWith('Z')) return;
    if (Date.now() > deadline) throw new Error(`process ${pid} that the handler started still runs`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

for (const busy of [true, false]) {
  test(`a timeout kills the children a handler started (${busy ? 'busy loop' : 'awaiting'})`, async (t) => {
    const rt = await startRuntime({ timeout: '1', concurrency: '2' });
    t.after(rt.stop);
    await rt.waitHealth();
    const pidfile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'sless-pid-')), 'pid');
    const r = await rt.req('POST', '/spawn', JSON.stringify({ pidfile, busy }), { 'Content-Type': 'application/json' });
    assert.strictEqual(r.status, 504);
    await waitGone(Number(fs.readFileSync(pidfile, 'utf8')));
    assert.strictEqual((await rt.req('GET', '/text')).status, 200);
  });
}

test('the memory limit ends the serving process, and the runtime serves again', async (t) => {
  const rt = await startRuntime({ timeout: '20', concurrency: '2', memoryMB: '64' });
  t.after(rt.stop);
  await rt.waitHealth();
  // The heap limit aborts the process that owns the connection: the call
  // fails without an answer (the gateway turns that into 502).
  await assert.rejects(rt.req('GET', '/hog'));
  const next = await rt.req('GET', '/text');
  assert.strictEqual(next.status, 200);
  assert.match(rt.logs(), /serving process exited; restarting it/);
});

test('process.exit in a handler answers 500 and the runtime keeps serving', async (t) => {
  const rt = await startRuntime({ timeout: '5', concurrency: '2' });
  t.after(rt.stop);
  await rt.waitHealth();
  const r = await rt.req('GET', '/exit');
  assert.strictEqual(r.status, 500);
  assert.strictEqual(JSON.parse(r.body).type, 'WorkerCrashed');
  assert.strictEqual((await rt.req('GET', '/text')).status, 200);
});

test('the concurrency limit answers 429 with Retry-After', async (t) => {
  const rt = await startRuntime({ timeout: '5', concurrency: '2' });
  t.after(rt.stop);
  await rt.waitHealth();
  const slow = () => rt.req('POST', '/slow', '{"seconds":1}', { 'Content-Type': 'application/json' });
  const running = [slow(), slow()];
  await new Promise((r) => setTimeout(r, 300));
  const r = await rt.req('GET', '/text');
  assert.strictEqual(r.status, 429);
  assert.strictEqual(r.headers['retry-after'], '1');
  assert.deepStrictEqual((await Promise.all(running)).map((x) => x.status), [200, 200]);
});

test('SIGTERM finishes in-flight requests, then exits 0', async (t) => {
  const rt = await startRuntime({ timeout: '5' });
  t.after(rt.stop);
  await rt.waitHealth();
  const pending = rt.req('POST', '/slow', '{"seconds":0.8}', { 'Content-Type': 'application/json' });
  await new Promise((r) => setTimeout(r, 300));
  const exited = new Promise((r) => rt.proc.once('exit', (code) => r(code)));
  rt.proc.kill('SIGTERM');
  const r = await pending;
  assert.strictEqual(r.status, 200);
  assert.strictEqual(r.body.toString(), 'done');
  assert.strictEqual(await exited, 0);
});

// Health asked on a connection the serving process already holds, after
// stop() made it stop: the request line goes first, so the process keeps
// the connection while it stops.
async function healthWhileStopping(rt, stop) {
  const sock = net.connect(rt.port, '127.0.0.1');
  await new Promise((r) => sock.once('connect', r));
  let data = '';
  sock.on('data', (d) => { data += d; });
  const closed = new Promise((r) => sock.once('close', r));
  sock.write('GET /_/health HTTP/1.1\r\n');
  await new Promise((r) => setTimeout(r, 300));
  await stop();
  sock.write('Host: runtime\r\nConnection: close\r\n\r\n');
  await closed;
  const [head, body] = data.split('\r\n\r\n');
  return { status: Number(head.split(' ')[1]), body: JSON.parse(body) };
}

test('health stays ok while the serving process recycles', async (t) => {
  // A 503 from a recycling process took the function out of its endpoints
  // (local driver) while the replacement took over.
  const rt = await startRuntime({ timeout: '2', concurrency: '3' });
  t.after(rt.stop);
  await rt.waitHealth();
  let other;
  const h = await healthWhileStopping(rt, async () => {
    const timedOut = rt.req('POST', '/slow', '{"seconds":10}', { 'Content-Type': 'application/json' });
    await new Promise((r) => setTimeout(r, 1000));
    // Still running when the first one times out: the process stays while it runs.
    other = rt.req('POST', '/slow', '{"seconds":1.5}', { 'Content-Type': 'application/json' });
    assert.strictEqual((await timedOut).status, 504);
  });
  assert.deepStrictEqual([h.status, h.body.status], [200, 'ok']);
  assert.strictEqual((await other).status, 200);
});

test('health says draining after SIGTERM', async (t) => {
  const rt = await startRuntime({ timeout: '5' });
  t.after(rt.stop);
  await rt.waitHealth();
  const pending = rt.req('POST', '/slow', '{"seconds":1.5}', { 'Content-Type': 'application/json' });
  const h = await healthWhileStopping(rt, async () => {
    rt.proc.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 300));
  });
  assert.deepStrictEqual([h.status, h.body.status], [503, 'draining']);
  assert.strictEqual((await pending).status, 200);
});

test('an import error keeps health 503 and is logged once', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sless-bad-'));
  fs.writeFileSync(path.join(dir, 'index.js'), 'exports.handler = async (event => {\n');
  const rt = await startRuntime({ codeDir: dir });
  t.after(rt.stop);
  const h = await rt.waitHealth(503, 'loading');
  assert.strictEqual(JSON.parse(h.body).status, 'error');
  assert.match(JSON.parse(h.body).error, /SyntaxError/);
  assert.strictEqual((await rt.req('GET', '/anything')).status, 503);
  await new Promise((r) => setTimeout(r, 300));
  assert.strictEqual(rt.logs().split('handler failed to load').length - 1, 1);
});
