#!/usr/bin/env node
// The sless runtime for Node.js 20 (runtimes/README.md has the contract).
//
// Three roles in this one file:
// - the supervisor (the process started as `node runtime.js`) binds the port
//   and keeps one serving process running, replacing it when it recycles or
//   dies; the bound socket outlives every serving process, so connections
//   wait in its backlog during a replacement instead of being refused;
// - the serving process runs the HTTP server and calls the handler inline,
//   on its own event loop: nothing crosses a thread or a process per request;
// - a watchdog thread in the serving process watches the deadlines in shared
//   memory. The serving process answers its own timeouts while its event
//   loop runs; when a busy loop blocks it, the watchdog writes the 504 on the
//   connection's file descriptor itself and kills the serving process with
//   every process it started (its process tree, children a handler spawned
//   included).
// The serving process stays in the supervisor's session: a session of its
// own (setsid, Node's only way to a new process group) puts it in another
// scheduler autogroup, which cost half its throughput on a shared machine.
// Node built-ins only.
'use strict';

const http = require('node:http');
const net = require('node:net');
const fs = require('node:fs');
const path = require('node:path');
const crypto = require('node:crypto');
const { isUtf8 } = require('node:buffer');
const { spawn } = require('node:child_process');
const { pathToFileURL } = require('node:url');
const { Worker, isMainThread, workerData } = require('node:worker_threads');
const { AsyncLocalStorage } = require('node:async_hooks');

const HEALTH_PATH = '/_/health';
const LISTEN_FD = 4; // the bound socket, handed to the serving process (fd 3 is the IPC channel)
const ID_BYTES = 128; // of an invocation id kept in shared memory for the watchdog's answer
const IDLE = 0; const RUNNING = 1; const DONE = 2; // slot states; only a RUNNING slot may be answered
const TICK_MS = 50;
const STUCK_MS = 250; // the event loop blocked this long past a deadline: a busy loop

// The function version this process runs (SLESS_FUNCTION_VERSION), on every log line; undefined when unset.
const VERSION = /^[0-9]+$/.test(process.env.SLESS_FUNCTION_VERSION || '') && Number(process.env.SLESS_FUNCTION_VERSION) > 0
  ? Number(process.env.SLESS_FUNCTION_VERSION) : undefined;

// logLine is one JSON log line; msg last: a reader that cuts a long line keeps the other fields.
function logLine(level, msg, fields) {
  const rec = { time: new Date().toISOString(), level };
  if (fields) for (const k in fields) if (fields[k] !== undefined && fields[k] !== null) rec[k] = fields[k];
  if (VERSION !== undefined) rec.version = VERSION;
  rec.msg = msg;
  return JSON.stringify(rec) + '\n';
}

function log(level, msg, fields) {
  process.stdout.write(logLine(level, msg, fields));
}

function config(env) {
  return {
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
}

// Shared memory between the serving thread and its watchdog: per slot (one
// per invocation in flight) its state, socket fd, deadline and invocation id.
function views(sab, slots) {
  return {
    state: new Int32Array(sab, 0, slots),
    fd: new Int32Array(sab, 4 * slots, slots),
    idLen: new Int32Array(sab, 8 * slots, slots),
    beat: new Int32Array(sab, 12 * slots, 2),
    deadline: new Float64Array(sab, 8 * Math.ceil((12 * slots + 8) / 8), slots),
    ids: new Uint8Array(sab, 8 * Math.ceil((12 * slots + 8) / 8) + 8 * slots, ID_BYTES * slots),
  };
}
const sabSize = (slots) => 8 * Math.ceil((12 * slots + 8) / 8) + 8 * slots + ID_BYTES * slots;

// killTree SIGKILLs every process below root (read from /proc, so Linux
// only), then root: what a handler started dies with its serving process.
function killTree(root) {
  const kids = new Map();
  let entries = [];
  try { entries = fs.readdirSync('/proc'); } catch { /* no /proc: only root */ }
  for (const e of entries) {
    if (e.charCodeAt(0) < 48 || e.charCodeAt(0) > 57) continue;
    let stat;
    try { stat = fs.readFileSync(`/proc/${e}/stat`, 'latin1'); } catch { continue; }
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (!kids.has(ppid)) kids.set(ppid, []);
    kids.get(ppid).push(Number(e));
  }
  const all = [];
  const walk = (pid) => { for (const k of kids.get(pid) || []) { all.push(k); walk(k); } };
  walk(root);
  for (const pid of all) { try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ } }
  try { process.kill(root, 'SIGKILL'); } catch { /* gone */ }
}

function problemBody(type, message, invocationId) {
  return Buffer.from(JSON.stringify({ error: message, type, invocationId }));
}

// ------------------------------------------------------------ supervisor

function supervise() {
  const cfg = config(process.env);
  // Bound, not listening: each serving process listens on it; the
  // supervisor never accepts, it only keeps the socket (and its backlog)
  // alive across replacements.
  const handle = net._createServerHandle(cfg.host, cfg.port, net.isIPv6(cfg.host) ? 6 : 4);
  if (typeof handle === 'number') {
    log('error', 'cannot bind', { port: cfg.port, error: `errno ${handle}` });
    process.exit(1);
  }
  const children = new Set();
  let draining = false;
  let loaded = null; // null until the first serving process reports
  let crashes = 0;

  const start = (first) => {
    const args = cfg.memoryMB > 0 ? [`--max-old-space-size=${cfg.memoryMB}`] : [];
    const child = spawn(process.execPath, [...args, __filename], {
      env: { ...process.env, SLESS_ROLE: 'serve', SLESS_FIRST: first ? '1' : '' },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc', handle.fd],
    });
    child.startedAt = Date.now();
    child.recycling = false;
    children.add(child);
    child.on('message', (m) => {
      if (m.kind === 'ready' && loaded === null) {
        loaded = true;
        log('info', 'handler loaded', { function: cfg.function, entrypoint: cfg.entrypoint });
      } else if (m.kind === 'error' && loaded === null) {
        loaded = false; // this process stays up and answers 503 with the reason
        log('error', 'handler failed to load', { function: cfg.function, error: m.error });
      } else if (m.kind === 'recycle' && !child.recycling) {
        child.recycling = true;
        if (!draining) start(false);
      }
    });
    child.on('error', (e) => log('error', 'cannot start the serving process', { error: e.message }));
    child.on('exit', (code, signal) => {
      children.delete(child);
      if (draining) {
        if (children.size === 0) { log('info', 'stopped', { function: cfg.function }); process.exit(0); }
        return;
      }
      if (child.recycling) return;
      log('warn', 'serving process exited; restarting it', { function: cfg.function, code, signal });
      crashes = Date.now() - child.startedAt < 1000 ? crashes + 1 : 0;
      setTimeout(() => { if (!draining) start(loaded !== true); }, crashes ? Math.min(5000, 50 * 2 ** crashes) : 0);
    });
  };

  const onTerm = () => {
    if (draining) return;
    draining = true;
    log('info', 'draining: finishing in-flight invocations', { function: cfg.function });
    for (const c of children) c.kill('SIGTERM');
    if (children.size === 0) process.exit(0);
    setTimeout(() => {
      for (const c of children) killTree(c.pid);
      process.exit(0);
    }, (cfg.timeoutSec + 5) * 1000).unref();
  };
  process.on('SIGTERM', onTerm);
  process.on('SIGINT', onTerm);
  log('info', 'listening', { port: cfg.port, function: cfg.function });
  start(true);
}

// -------------------------------------------------------- serving process

class InvalidResponse extends Error {}
class HandlerExit extends Error {}

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
// Framing is the runtime's: a handler's Content-Length could desynchronise a
// keep-alive connection.
const OWN_HEADERS = new Set(['content-length', 'transfer-encoding', 'connection', 'keep-alive', 'x-sless-invocation-id']);
const TEXT = 'text/plain; charset=utf-8';

// encodeResult maps a handler's return value to [status, headers, body].
function encodeResult(result) {
  if (result === undefined || result === null) return [204, null, null];
  if (typeof result === 'string') return [200, TEXT, result];
  if (result instanceof Uint8Array) return [200, 'application/octet-stream', Buffer.from(result.buffer, result.byteOffset, result.byteLength)];
  if (typeof result === 'object' && !Array.isArray(result) && 'statusCode' in result) {
    const status = result.statusCode;
    if (!Number.isInteger(status) || status < 200 || status > 599) {
      throw new InvalidResponse(`statusCode must be an integer from 200 to 599, got ${JSON.stringify(status) ?? String(status)}`);
    }
    const headers = {};
    let type = null;
    if (result.headers !== undefined && result.headers !== null) {
      if (typeof result.headers !== 'object') throw new InvalidResponse(`headers must be an object, got ${typeof result.headers}`);
      for (const k of Object.keys(result.headers)) {
        if (!TOKEN.test(k)) throw new InvalidResponse(`invalid header name ${JSON.stringify(k)}`);
        const lower = k.toLowerCase();
        if (OWN_HEADERS.has(lower)) continue;
        const v = String(result.headers[k]);
        if (!FIELD_VALUE.test(v)) throw new InvalidResponse(`invalid value for header ${JSON.stringify(k)}: only visible characters, spaces and tabs are allowed (no CR, LF or NUL)`);
        if (lower === 'content-type') type = v;
        headers[k] = v;
      }
    }
    let body = result.body;
    if (result.isBase64Encoded && typeof body === 'string') body = Buffer.from(body, 'base64');
    else if (body === undefined || body === null) body = null;
    else if (typeof body === 'string') { if (type === null) headers['Content-Type'] = TEXT; } else if (body instanceof Uint8Array) {
      body = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
      if (type === null) headers['Content-Type'] = 'application/octet-stream';
    } else {
      body = JSON.stringify(body);
      if (type === null) headers['Content-Type'] = 'application/json';
    }
    return [status, headers, status === 204 || status === 304 ? null : body];
  }
  const json = JSON.stringify(result);
  if (json === undefined) throw new TypeError('the handler returned a value that is not JSON');
  return [200, 'application/json', json];
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
    mod = await import(pathToFileURL(require.resolve(file)).href);
  }
  const handler = mod[name] ?? (mod.default && mod.default[name]);
  if (typeof handler !== 'function') throw new TypeError(`${entrypoint} is not an exported function`);
  return handler;
}

class Context {
  constructor(invocationId, cfg, trigger, traceparent, deadline) {
    this.invocationId = invocationId;
    this.function = cfg.function;
    this.tenant = cfg.tenant;
    this.trigger = trigger;
    this.traceparent = traceparent;
    this.deadline = deadline; // epoch ms
  }

  getRemainingTimeMs() { return Math.max(0, this.deadline - Date.now()); }
}

function serve() {
  const cfg = config(process.env);
  const first = process.env.SLESS_FIRST === '1';
  delete process.env.SLESS_ROLE; // not for the handler's own child processes
  delete process.env.SLESS_FIRST;
  const C = cfg.concurrency;
  const sab = new SharedArrayBuffer(sabSize(C));
  const v = views(sab, C);
  const ids = Buffer.from(v.ids.buffer, v.ids.byteOffset, v.ids.byteLength);
  const realExit = process.exit.bind(process);
  const state = { handler: null, loadError: null, stopping: false, draining: false, inflight: 0 };
  const active = new Array(C).fill(null); // slot -> its invocation
  const free = Array.from({ length: C }, (_, i) => C - 1 - i);
  const fdOwner = new Map(); // fd -> slot of the invocation running on it
  // The invocation a console.* call belongs to, across the handler's awaits.
  // AsyncLocalStorage costs every promise of the process (about a quarter of
  // bare node:http's CPU per request), so it is on only while invocations
  // overlap: an invocation that starts alone runs outside it and is the
  // one without a store (plainId).
  const invocation = new AsyncLocalStorage();
  let plainId = null;
  let tracking = false;

  const endTree = () => { killTree(process.pid); realExit(0); };
  // The supervisor is gone: nobody would replace or reap this process.
  process.on('disconnect', endTree);

  // stream: where Node's console would have written it.
  const line = (level, stream) => (...args) => log(level, args.map((a) => (typeof a === 'string' ? a : require('node:util').inspect(a))).join(' '),
    { invocationId: invocation.getStore() ?? plainId, function: cfg.function, stream });
  console.log = console.info = line('info', 'stdout');
  console.warn = line('warn', 'stderr');
  console.error = line('error', 'stderr');
  console.debug = line('debug', 'stdout');
  // A handler's process.exit() ends its invocation (500) and recycles this
  // process, instead of dropping every connection at once.
  process.exit = (code) => { throw new HandlerExit(`the function called process.exit(${code ?? ''})`); };
  process.on('uncaughtException', (e) => {
    log('error', 'uncaught exception outside an invocation; process recycled', { function: cfg.function, error: `${e && e.name}: ${e && e.message}`, stack: e && e.stack });
    recycle();
  });
  process.on('unhandledRejection', (e) => {
    log('error', 'unhandled promise rejection', { function: cfg.function, error: `${e && e.name}: ${e && e.message}`, stack: e && e.stack });
  });

  const watchdog = new Worker(__filename, { workerData: { role: 'watchdog', sab, slots: C, timeoutSec: cfg.timeoutSec, function: cfg.function, ppid: process.ppid } });
  watchdog.unref();
  watchdog.on('error', (e) => log('error', 'watchdog failed', { error: e.message }));

  const send = (res, status, headers, body, id) => {
    if (state.stopping) res.shouldKeepAlive = false;
    if (typeof headers === 'string' && id && status !== 204) {
      // The common answer (a string, bytes or JSON value) in one object literal.
      res.writeHead(status, { 'Content-Type': headers, 'X-Sless-Invocation-Id': id, 'Content-Length': typeof body === 'string' ? Buffer.byteLength(body) : body.length });
      res.end(res.req.method === 'HEAD' ? undefined : body);
      return;
    }
    const h = headers === null ? {} : typeof headers === 'string' ? { 'Content-Type': headers } : headers;
    if (id) h['X-Sless-Invocation-Id'] = id;
    if (status !== 204) h['Content-Length'] = body === null ? 0 : typeof body === 'string' ? Buffer.byteLength(body) : body.length;
    res.writeHead(status, h);
    res.end(body === null || res.req.method === 'HEAD' ? undefined : body);
  };
  const sendProblem = (res, status, type, message, id, extra) => {
    send(res, status, extra ? { 'Content-Type': 'application/json', ...extra } : 'application/json', problemBody(type, message, id), id);
  };

  // Every invocation leaves through here once: the slot's CAS decides whether
  // the handler's answer or the timeout's goes out.
  const release = (inv) => {
    const i = inv.slot;
    active[i] = null;
    if (fdOwner.get(inv.fd) === i) fdOwner.delete(inv.fd);
    free.push(i);
    state.inflight--;
    if (inv.plain) plainId = null;
    if (state.inflight === 0 && tracking) { tracking = false; invocation.disable(); }
    if (state.stopping && state.inflight === 0) setImmediate(endTree);
  };
  const finish = (inv, value, failed) => {
    if (Atomics.compareExchange(v.state, inv.slot, RUNNING, DONE) !== RUNNING) return; // answered already
    release(inv);
    const { res, id } = inv;
    if (failed) {
      const e = value;
      if (e instanceof HandlerExit) {
        log('error', 'handler exited; process recycled', { invocationId: id, function: cfg.function, error: e.message });
        sendProblem(res, 500, 'WorkerCrashed', e.message, id);
        recycle();
        return;
      }
      log('error', 'handler raised', { invocationId: id, function: cfg.function, error: `${e && e.name}: ${e && e.message}`, stack: e && e.stack });
      sendProblem(res, 500, 'HandlerError', (e && e.message) || String(e), id);
      return;
    }
    let out;
    try {
      out = encodeResult(value);
    } catch (e) {
      if (e instanceof InvalidResponse) {
        log('error', 'handler returned an invalid response', { invocationId: id, function: cfg.function, error: e.message });
        sendProblem(res, 502, 'InvalidResponse', `the function returned an invalid response: ${e.message}`, id);
      } else {
        sendProblem(res, 500, 'HandlerError', e.message, id);
      }
      return;
    }
    send(res, out[0], out[1], out[2], id);
  };

  const invoke = (req, res, id, pathname, rawQuery, raw) => {
    const headers = req.headers;
    if (!state.served) { // the first invocation this serving process runs: a cold start
      state.served = true;
      res.setHeader('X-Sless-Cold-Start', 'true');
    }
    let body = '';
    let binary = false;
    let json = null;
    if (raw !== null) {
      if (isUtf8(raw)) {
        body = raw.toString('utf8');
        const ct = headers['content-type'];
        if (body && ct !== undefined && ct.includes('json')) { try { json = JSON.parse(body); } catch { json = null; } }
      } else {
        body = raw.toString('base64');
        binary = true;
      }
    }
    const deadline = Date.now() + cfg.timeoutSec * 1000;
    const i = free.pop();
    const handle = req.socket._handle;
    const fd = handle && handle.fd >= 0 ? handle.fd : -1;
    const inv = { slot: i, res, id, deadline, fd, plain: false };
    // A socket that died with its invocation running gave its fd number back;
    // the watchdog must never answer that invocation on this new connection.
    const prev = fdOwner.get(fd);
    if (prev !== undefined && active[prev] !== null && active[prev].res.socket !== res.socket) Atomics.compareExchange(v.state, prev, RUNNING, DONE);
    if (fd >= 0) fdOwner.set(fd, i);
    active[i] = inv;
    v.fd[i] = fd;
    v.deadline[i] = deadline;
    v.idLen[i] = ids.latin1Write(id, i * ID_BYTES, ID_BYTES);
    Atomics.store(v.state, i, RUNNING);
    const event = {
      method: req.method, path: pathname, rawQuery,
      query: rawQuery === '' ? {} : Object.fromEntries(new URLSearchParams(rawQuery)),
      headers, body, isBase64Encoded: binary, json,
    };
    const ctx = new Context(id, cfg, headers['x-sless-trigger'] || 'http', headers.traceparent || null, deadline);
    let out;
    try {
      if (state.inflight === 1 && plainId === null) {
        plainId = id;
        inv.plain = true;
        out = state.handler(event, ctx);
      } else {
        tracking = true;
        out = invocation.run(id, state.handler, event, ctx);
      }
    } catch (e) {
      finish(inv, e, true);
      return;
    }
    if (out !== null && typeof out === 'object' && typeof out.then === 'function') {
      out.then((value) => finish(inv, value, false), (e) => finish(inv, e, true));
    } else {
      finish(inv, out, false);
    }
  };

  const onRequest = (req, res) => {
    const url = req.url;
    const q = url.indexOf('?');
    const pathname = q === -1 ? url : url.slice(0, q);
    if (pathname === HEALTH_PATH) {
      // A recycling process still says ok: the runtime serves on (the
      // replacement takes the socket), and a 503 here would take the whole
      // function out of its endpoints. Only SIGTERM drains.
      const ok = state.handler !== null && !state.draining;
      const status = state.draining ? 'draining' : state.loadError ? 'error' : ok ? 'ok' : 'loading';
      send(res, ok ? 200 : 503, 'application/json', JSON.stringify(ok ? { status } : { status, error: state.loadError }), null);
      return;
    }
    const headers = req.headers;
    const id = headers['x-sless-invocation-id'] || crypto.randomUUID();
    if (state.handler === null) {
      req.resume();
      sendProblem(res, 503, 'NotReady', state.loadError || 'the handler is loading', id, { 'Retry-After': '1' });
      return;
    }
    if (state.inflight >= C) {
      req.resume();
      sendProblem(res, 429, 'TooManyRequests', `more than ${C} invocations in flight`, id, { 'Retry-After': '1' });
      return;
    }
    const rawQuery = q === -1 ? '' : url.slice(q + 1);
    state.inflight++;
    // A request without a body (most GETs) is handled at once, not after
    // its stream has ended on a later turn of the event loop.
    const cl = headers['content-length'];
    if (headers['transfer-encoding'] === undefined && (cl === undefined || cl === '0')) {
      invoke(req, res, id, pathname, rawQuery, null);
      return;
    }
    if (cl !== undefined && Number(cl) > cfg.maxBody) {
      state.inflight--;
      res.shouldKeepAlive = false;
      sendProblem(res, 413, 'PayloadTooLarge', `request body over ${cfg.maxBody} bytes`, id);
      return;
    }
    let first = null;
    let chunks = null;
    let size = 0;
    req.on('data', (c) => {
      size += c.length;
      if (size > cfg.maxBody) { chunks = []; first = null; return; }
      if (first === null && chunks === null) first = c;
      else { if (chunks === null) chunks = [first]; chunks.push(c); }
    });
    req.on('end', () => {
      if (size > cfg.maxBody) {
        state.inflight--;
        res.shouldKeepAlive = false;
        sendProblem(res, 413, 'PayloadTooLarge', `request body over ${cfg.maxBody} bytes`, id);
        return;
      }
      invoke(req, res, id, pathname, rawQuery, chunks !== null ? Buffer.concat(chunks) : first !== null ? first : Buffer.alloc(0));
    });
  };

  const server = http.createServer({ keepAliveTimeout: 65000, noDelay: true }, onRequest);

  // The event loop's own timeout check (the watchdog covers a blocked loop)
  // and its heartbeat for the watchdog.
  setInterval(() => {
    Atomics.add(v.beat, 0, 1);
    const now = Date.now();
    for (let i = 0; i < C; i++) {
      const inv = active[i];
      if (inv === null || inv.deadline > now) continue;
      if (Atomics.compareExchange(v.state, i, RUNNING, DONE) !== RUNNING) continue;
      release(inv);
      log('warn', 'invocation timed out; process recycled', { invocationId: inv.id, function: cfg.function });
      inv.res.shouldKeepAlive = false;
      sendProblem(inv.res, 504, 'Timeout', `function timed out after ${cfg.timeoutSec}s`, inv.id);
      recycle();
    }
  }, TICK_MS).unref();

  // Stops accepting and ends this process group once the invocations still
  // running are answered; the supervisor starts the next process.
  let stopped = false;
  function stop() {
    if (stopped) return;
    stopped = true;
    state.stopping = true;
    server.close();
    server.closeIdleConnections();
    if (state.inflight === 0) setImmediate(endTree);
    setTimeout(endTree, (cfg.timeoutSec + 5) * 1000).unref();
  }
  function recycle() {
    if (stopped) return;
    if (process.connected) process.send({ kind: 'recycle' });
    stop();
  }
  process.on('SIGTERM', () => { state.draining = true; stop(); });
  process.on('SIGINT', () => {});

  const listen = () => new Promise((resolve) => server.listen({ fd: LISTEN_FD }, resolve));
  const load = () => loadHandler(cfg.codeDir, cfg.entrypoint).then((h) => {
    state.handler = h;
    if (process.connected) process.send({ kind: 'ready' });
  }, (e) => {
    state.loadError = `cannot load ${cfg.entrypoint}: ${e.name}: ${e.message}`;
    if (process.connected) process.send({ kind: 'error', error: state.loadError });
  });
  // The first process answers health (503 loading) while it loads; a
  // replacement joins the socket only once its handler is loaded.
  if (first) listen().then(load);
  else load().then(listen);
}

// --------------------------------------------------------------- watchdog

function watch() {
  const { sab, slots, timeoutSec, ppid } = workerData;
  const v = views(sab, slots);
  let beat = Atomics.load(v.beat, 0);
  let beatAt = Date.now();
  setInterval(() => {
    if (process.ppid !== ppid) killTree(process.pid); // the supervisor is gone
    const now = Date.now();
    const b = Atomics.load(v.beat, 0);
    if (b !== beat) { beat = b; beatAt = now; return; }
    if (now - beatAt < STUCK_MS) return; // the event loop runs: it answers its own timeouts
    let overdue = false;
    for (let i = 0; i < slots; i++) if (Atomics.load(v.state, i) === RUNNING && v.deadline[i] <= now) overdue = true;
    if (!overdue) return;
    // A handler blocks the event loop past a deadline: answer every
    // invocation this process holds, then end the process group.
    for (let i = 0; i < slots; i++) {
      if (Atomics.compareExchange(v.state, i, RUNNING, DONE) !== RUNNING) continue;
      const id = Buffer.from(v.ids.buffer, v.ids.byteOffset + i * ID_BYTES, v.idLen[i]).toString('latin1');
      const [status, type, message] = v.deadline[i] <= now
        ? [504, 'Timeout', `function timed out after ${timeoutSec}s`]
        : [503, 'Recycled', 'the function blocked its event loop past an invocation\'s timeout; the process was restarted, retry'];
      const body = problemBody(type, message, id);
      const head = `HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\nContent-Type: application/json\r\nX-Sless-Invocation-Id: ${id}\r\n`
        + `${status === 503 ? 'Retry-After: 1\r\n' : ''}Content-Length: ${body.length}\r\nConnection: close\r\n\r\n`;
      // A worker thread's stdout goes through the blocked main thread: write the log line directly.
      fs.writeSync(1, logLine('warn', status === 504 ? 'invocation timed out in a blocked event loop; process recycled' : 'invocation cut short by a recycle',
        { invocationId: id, function: workerData.function }));
      try { fs.writeSync(v.fd[i], Buffer.concat([Buffer.from(head, 'latin1'), body])); } catch { /* the client is gone */ }
    }
    killTree(process.pid);
  }, TICK_MS);
}

if (!isMainThread) watch();
else if (process.env.SLESS_ROLE === 'serve') serve();
else supervise();
