#!/usr/bin/env node
// The sless runtime for Node.js 20 (runtimes/README.md has the contract).
//
// The main thread serves HTTP and hands each invocation to a worker thread
// that has loaded the user's handler. Workers are kept warm; one worker runs
// one invocation at a time, so SLESS_CONCURRENCY workers at most. A worker
// that overruns SLESS_TIMEOUT_SEC is terminated (which stops even a busy
// loop) and replaced, and the caller gets 504. Node built-ins only.
'use strict';

const http = require('node:http');
const path = require('node:path');
const crypto = require('node:crypto');
const { pathToFileURL } = require('node:url');
const { Worker, isMainThread, parentPort, workerData } = require('node:worker_threads');

const HEALTH_PATH = '/_/health';

function log(level, msg, fields) {
  const rec = { time: new Date().toISOString(), level, msg };
  for (const [k, v] of Object.entries(fields || {})) if (v !== undefined && v !== null) rec[k] = v;
  process.stdout.write(JSON.stringify(rec) + '\n');
}

// ------------------------------------------------------------ worker side

function encodeResult(result) {
  if (result === undefined || result === null) return { status: 204, headers: {}, body: null };
  if (typeof result === 'string') return { status: 200, headers: { 'Content-Type': 'text/plain; charset=utf-8' }, body: Buffer.from(result) };
  if (Buffer.isBuffer(result) || result instanceof Uint8Array) return { status: 200, headers: { 'Content-Type': 'application/octet-stream' }, body: Buffer.from(result) };
  if (typeof result === 'object' && !Array.isArray(result) && 'statusCode' in result) {
    const headers = {};
    for (const [k, v] of Object.entries(result.headers || {})) headers[k] = String(v);
    const has = (name) => Object.keys(headers).some((k) => k.toLowerCase() === name);
    let body = result.body;
    if (result.isBase64Encoded && typeof body === 'string') body = Buffer.from(body, 'base64');
    else if (body === undefined || body === null) body = null;
    else if (typeof body === 'string') {
      body = Buffer.from(body);
      if (!has('content-type')) headers['Content-Type'] = 'text/plain; charset=utf-8';
    } else if (Buffer.isBuffer(body) || body instanceof Uint8Array) {
      body = Buffer.from(body);
      if (!has('content-type')) headers['Content-Type'] = 'application/octet-stream';
    } else {
      body = Buffer.from(JSON.stringify(body));
      if (!has('content-type')) headers['Content-Type'] = 'application/json';
    }
    return { status: Number(result.statusCode), headers, body };
  }
  const json = JSON.stringify(result);
  if (json === undefined) throw new TypeError('the handler returned a value that is not JSON');
  return { status: 200, headers: { 'Content-Type': 'application/json' }, body: Buffer.from(json) };
}

async function loadHandler(codeDir, entrypoint) {
  const dot = entrypoint.lastIndexOf('.');
  const file = path.resolve(codeDir, entrypoint.slice(0, dot));
  const name = entrypoint.slice(dot + 1);
  let mod;
  try {
    mod = require(file);
  } catch (e) {
    if (e.code !== 'ERR_REQUIRE_ESM') throw e;
    const resolved = require.resolve(file);
    mod = await import(pathToFileURL(resolved).href);
  }
  const handler = mod[name] ?? (mod.default && mod.default[name]);
  if (typeof handler !== 'function') throw new TypeError(`${entrypoint} is not an exported function`);
  return handler;
}

async function runWorker() {
  const { codeDir, entrypoint, fn } = workerData;
  let current = null;
  const line = (level) => (...args) => log(level, args.map((a) => (typeof a === 'string' ? a : require('node:util').inspect(a))).join(' '),
    { invocationId: current, function: fn });
  console.log = console.info = line('info');
  console.warn = line('warn');
  console.error = line('error');
  console.debug = line('debug');
  let handler;
  try {
    handler = await loadHandler(codeDir, entrypoint);
  } catch (e) {
    parentPort.postMessage({ kind: 'error', error: `cannot load ${entrypoint}: ${e.name}: ${e.message}` });
    return;
  }
  parentPort.on('message', async ({ event, info }) => {
    current = info.invocationId;
    const context = {
      invocationId: info.invocationId, function: info.function, tenant: info.tenant, trigger: info.trigger,
      traceparent: info.traceparent, deadline: info.deadline,
      getRemainingTimeMs: () => Math.max(0, info.deadline - Date.now()),
    };
    let reply;
    try {
      reply = { kind: 'ok', ...encodeResult(await handler(event, context)) };
    } catch (e) {
      log('error', 'handler raised', { invocationId: info.invocationId, function: fn, error: `${e && e.name}: ${e && e.message}`, stack: e && e.stack });
      reply = { kind: 'error', error: (e && e.message) || String(e) };
    }
    current = null;
    parentPort.postMessage(reply);
  });
  parentPort.postMessage({ kind: 'ready' });
}

// -------------------------------------------------------------- main side

class LoadError extends Error {}

function spawnWorker(cfg) {
  return new Promise((resolve, reject) => {
    const w = new Worker(__filename, {
      workerData: { codeDir: cfg.codeDir, entrypoint: cfg.entrypoint, fn: cfg.function },
      resourceLimits: cfg.memoryMB > 0 ? { maxOldGenerationSizeMb: cfg.memoryMB } : undefined,
    });
    const onExit = (code) => reject(new LoadError(`the handler's worker exited with code ${code} while loading`));
    w.once('error', (e) => reject(new LoadError(`cannot load ${cfg.entrypoint}: ${e.message}`)));
    w.once('exit', onExit);
    w.once('message', (m) => {
      w.off('exit', onExit);
      if (m.kind !== 'ready') { w.terminate(); reject(new LoadError(m.error)); return; }
      // One set of listeners for the worker's life; each call sets
      // w.settle (adding and removing listeners per call cost throughput).
      w.settle = null;
      const settle = (kind, value) => { const f = w.settle; w.settle = null; if (f) f(kind, value); };
      w.on('message', (r) => settle('reply', r));
      w.on('exit', () => settle('crash'));
      w.on('error', (e) => settle('crash', e));
      resolve(w);
    });
  });
}

class Pool {
  constructor(cfg) { this.cfg = cfg; this.idle = []; }
  async get() { return this.idle.pop() || spawnWorker(this.cfg); }
  put(w) { this.idle.push(w); }
  replace(w) {
    w.terminate();
    spawnWorker(this.cfg).then((n) => this.put(n), (e) => log('error', 'worker restart failed', { error: e.message }));
  }
  close() { for (const w of this.idle.splice(0)) w.terminate(); }
}

function problem(status, type, message, info, extra) {
  return { status, headers: { 'Content-Type': 'application/json', ...(extra || {}) }, body: Buffer.from(JSON.stringify({ error: message, type, invocationId: info.invocationId })) };
}

function call(worker, event, info, timeoutMs) {
  return new Promise((resolve) => {
    const timer = setTimeout(() => { worker.settle = null; resolve({ kind: 'timeout' }); }, timeoutMs);
    worker.settle = (kind, value) => { clearTimeout(timer); resolve({ kind, value }); };
    worker.postMessage({ event, info });
  });
}

function main() {
  const env = process.env;
  const cfg = {
    port: Number(env.PORT || 8080),
    host: env.SLESS_HOST || '0.0.0.0',
    function: env.SLESS_FUNCTION || 'function',
    tenant: env.SLESS_TENANT || '',
    entrypoint: env.SLESS_ENTRYPOINT || 'index.handler',
    timeoutSec: Number(env.SLESS_TIMEOUT_SEC || 30),
    concurrency: Math.max(1, Number(env.SLESS_CONCURRENCY || 10)),
    memoryMB: Number(env.SLESS_MEMORY_MB || 0),
    codeDir: path.resolve(env.SLESS_CODE_DIR || process.cwd()),
    maxBody: Number(env.SLESS_MAX_BODY_BYTES || 10 * 1024 * 1024),
  };
  const pool = new Pool(cfg);
  const state = { ready: false, loadError: null, draining: false, inflight: 0 };

  spawnWorker(cfg).then((w) => {
    pool.put(w);
    state.ready = true;
    log('info', 'handler loaded', { function: cfg.function, entrypoint: cfg.entrypoint });
  }, (e) => {
    state.loadError = e.message;
    log('error', 'handler failed to load', { function: cfg.function, error: e.message });
  });

  const send = (res, r, invocationId) => {
    const headers = { ...r.headers };
    if (invocationId) headers['X-Sless-Invocation-Id'] = invocationId;
    if (state.draining) headers.Connection = 'close';
    const body = r.body && r.body.length ? Buffer.from(r.body.buffer, r.body.byteOffset, r.body.byteLength) : null;
    headers['Content-Length'] = body ? body.length : 0;
    res.writeHead(r.status, headers);
    res.end(body);
  };

  const server = http.createServer({ keepAliveTimeout: 65000, noDelay: true }, (req, res) => {
    const [pathname, rawQuery = ''] = req.url.split(/\?(.*)/s);
    if (pathname === HEALTH_PATH) {
      const ok = state.ready && !state.draining;
      const status = state.draining ? 'draining' : state.loadError ? 'error' : ok ? 'ok' : 'loading';
      send(res, { status: ok ? 200 : 503, headers: { 'Content-Type': 'application/json' }, body: Buffer.from(JSON.stringify(ok ? { status } : { status, error: state.loadError })) });
      return;
    }
    const info = {
      invocationId: req.headers['x-sless-invocation-id'] || crypto.randomUUID(),
      trigger: req.headers['x-sless-trigger'] || 'http',
      traceparent: req.headers.traceparent || null,
      function: cfg.function,
      tenant: cfg.tenant,
      deadline: Date.now() + cfg.timeoutSec * 1000,
    };
    if (state.inflight >= cfg.concurrency) {
      req.resume();
      send(res, problem(429, 'TooManyRequests', `more than ${cfg.concurrency} invocations in flight`, info, { 'Retry-After': '1' }), info.invocationId);
      return;
    }
    state.inflight++;
    const chunks = [];
    let size = 0;
    let tooLarge = false;
    const handle = async () => {
      try {
        if (tooLarge) return send(res, problem(413, 'PayloadTooLarge', `request body over ${cfg.maxBody} bytes`, info), info.invocationId);
        if (!state.ready) return send(res, problem(503, 'NotReady', state.loadError || 'the handler is loading', info, { 'Retry-After': '1' }), info.invocationId);
        if (!state.served) { // the first invocation this runtime process serves
          state.served = true;
          res.setHeader('X-Sless-Cold-Start', 'true');
        }
        const raw = Buffer.concat(chunks);
        const text = raw.toString('utf8');
        const binary = !Buffer.from(text, 'utf8').equals(raw);
        let json = null;
        if (!binary && text && (req.headers['content-type'] || '').includes('json')) {
          try { json = JSON.parse(text); } catch { json = null; }
        }
        const event = {
          method: req.method, path: pathname, rawQuery, query: Object.fromEntries(new URLSearchParams(rawQuery)),
          headers: req.headers, body: binary ? raw.toString('base64') : text, isBase64Encoded: binary, json,
        };
        let worker;
        try {
          worker = await pool.get();
        } catch (e) {
          return send(res, problem(503, 'NotReady', e.message, info), info.invocationId);
        }
        const out = await call(worker, event, info, Math.max(0, info.deadline - Date.now()));
        if (out.kind === 'timeout') {
          pool.replace(worker);
          log('warn', 'invocation timed out; worker replaced', { invocationId: info.invocationId, function: cfg.function });
          return send(res, problem(504, 'Timeout', `function timed out after ${cfg.timeoutSec}s`, info), info.invocationId);
        }
        if (out.kind === 'crash') {
          pool.replace(worker);
          return send(res, problem(500, 'WorkerCrashed', 'the function worker exited during the invocation (out of memory?)', info), info.invocationId);
        }
        pool.put(worker);
        const m = out.value;
        if (m.kind === 'ok') return send(res, m, info.invocationId);
        return send(res, problem(500, 'HandlerError', m.error, info), info.invocationId);
      } finally {
        state.inflight--;
        if (state.draining && state.inflight === 0) stop();
      }
    };
    // A request without a body (most GETs) is handled at once, not after
    // its stream has ended on a later turn of the event loop.
    if (req.complete || (req.headers['content-length'] === undefined && req.headers['transfer-encoding'] === undefined)) {
      handle();
      return;
    }
    req.on('data', (c) => {
      size += c.length;
      if (size > cfg.maxBody) tooLarge = true;
      else chunks.push(c);
    });
    req.on('end', handle);
  });

  let stopped = false;
  const stop = () => {
    if (stopped) return;
    stopped = true;
    pool.close();
    log('info', 'stopped', { function: cfg.function });
    process.exit(0);
  };
  const onTerm = () => {
    if (state.draining) return;
    state.draining = true;
    log('info', 'draining: finishing in-flight invocations', { inflight: state.inflight });
    server.close();
    server.closeIdleConnections();
    if (state.inflight === 0) stop();
    setTimeout(stop, (cfg.timeoutSec + 5) * 1000).unref();
  };
  process.on('SIGTERM', onTerm);
  process.on('SIGINT', onTerm);
  server.listen(cfg.port, cfg.host, () => log('info', 'listening', { port: cfg.port, function: cfg.function }));
}

if (isMainThread) main();
else runWorker();
