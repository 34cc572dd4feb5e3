#!/usr/bin/env python3
"""The sless runtime for Python 3.11 (runtimes/README.md has the contract).

A threaded HTTP server takes invocations and hands each to a worker process
that has imported the user's handler. Workers are forked from a clean fork
server and kept warm; one worker runs one invocation at a time, so
`SLESS_CONCURRENCY` workers at most. A worker that overruns `SLESS_TIMEOUT_SEC`
is killed and replaced, and the caller gets 504. Standard library only.
"""

import asyncio
import base64
import importlib
import inspect
import itertools
import json
import marshal
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl

HEALTH_PATH = "/_/health"
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


class Config:
    def __init__(self, env):
        self.port = int(env.get("PORT", "8080"))
        self.host = env.get("SLESS_HOST", "0.0.0.0")
        self.function = env.get("SLESS_FUNCTION", "function")
        self.tenant = env.get("SLESS_TENANT", "")
        self.entrypoint = env.get("SLESS_ENTRYPOINT", "main.handler")
        self.timeout = float(env.get("SLESS_TIMEOUT_SEC", "30"))
        self.concurrency = max(1, int(env.get("SLESS_CONCURRENCY", "10")))
        self.code_dir = os.path.abspath(env.get("SLESS_CODE_DIR", os.getcwd()))
        self.max_body = int(env.get("SLESS_MAX_BODY_BYTES", str(10 << 20)))


def log(level, msg, **fields):
    rec = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + "Z", "level": level, "msg": msg}
    rec.update({k: v for k, v in fields.items() if v is not None})
    sys.__stdout__.write(json.dumps(rec) + "\n")
    sys.__stdout__.flush()


# ---------------------------------------------------------------- worker side


class Context:
    """What a handler learns about its invocation."""

    def __init__(self, info):
        self.invocation_id = info["invocationId"]
        self.function = info["function"]
        self.tenant = info["tenant"]
        self.trigger = info["trigger"]
        self.traceparent = info["traceparent"]
        self.deadline = info["deadline"]  # seconds since the epoch

    def get_remaining_time_ms(self):
        return max(0, int((self.deadline - time.time()) * 1000))


class _LogWriter:
    """Turns a handler's print() output into JSON log lines with its invocation id."""

    def __init__(self, level, state):
        self.level, self.state, self.buf = level, state, ""

    def write(self, s):
        self.buf += s
        while "\n" in self.buf:
            line, self.buf = self.buf.split("\n", 1)
            log(self.level, line, invocationId=self.state.get("id"), function=self.state.get("function"))
        return len(s)

    def flush(self):
        if self.buf:
            self.write("\n")


def encode_result(result):
    """Maps a handler's return value to (status, headers, body bytes)."""
    if result is None:
        return 204, {}, b""
    if isinstance(result, str):
        return 200, {"Content-Type": "text/plain; charset=utf-8"}, result.encode()
    if isinstance(result, (bytes, bytearray, memoryview)):
        return 200, {"Content-Type": "application/octet-stream"}, bytes(result)
    if isinstance(result, dict) and "statusCode" in result:
        status = int(result["statusCode"])
        headers = {str(k): str(v) for k, v in (result.get("headers") or {}).items()}
        lower = {k.lower() for k in headers}
        body = result.get("body")
        if result.get("isBase64Encoded") and isinstance(body, str):
            data = base64.b64decode(body)
        elif body is None:
            data = b""
        elif isinstance(body, str):
            data = body.encode()
            if "content-type" not in lower:
                headers["Content-Type"] = "text/plain; charset=utf-8"
        elif isinstance(body, (bytes, bytearray)):
            data = bytes(body)
            if "content-type" not in lower:
                headers["Content-Type"] = "application/octet-stream"
        else:
            data = json.dumps(body).encode()
            if "content-type" not in lower:
                headers["Content-Type"] = "application/json"
        return status, headers, data
    return 200, {"Content-Type": "application/json"}, json.dumps(result).encode()


def worker_main(conn, code_dir, entrypoint, function, tenant):
    """Imports the handler, then runs one invocation per message until EOF."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    state = {"function": function}
    sys.stdout = _LogWriter("info", state)
    sys.stderr = _LogWriter("error", state)
    sys.path.insert(0, code_dir)
    os.chdir(code_dir)
    try:
        module_name, _, attr = entrypoint.rpartition(".")
        handler = getattr(importlib.import_module(module_name), attr)
        if not callable(handler):
            raise TypeError(f"{entrypoint} is not a function")
    except BaseException as e:  # noqa: BLE001 - any import failure is reported
        conn.send(("error", f"cannot load {entrypoint}: {type(e).__name__}: {e}"))
        return
    conn.send(("ready", None))
    loop = None
    while True:
        try:
            method, path, raw_query, header_text, raw, info = marshal.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        info = dict(zip(INFO_KEYS, info), function=function, tenant=tenant)
        state["id"] = info["invocationId"]
        try:
            result = handler(build_event(method, path, raw_query, header_text, raw), Context(info))
            if inspect.isawaitable(result):
                loop = loop or asyncio.new_event_loop()
                result = loop.run_until_complete(result)
            status, headers, body = encode_result(result)
        except Exception as e:  # noqa: BLE001 - the caller gets the message, the log the traceback
            log("error", "handler raised", invocationId=info["invocationId"], function=function,
                error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
            status, headers, body = problem(500, "HandlerError", str(e) or type(e).__name__, info)
        sys.stdout.flush()
        state["id"] = None
        conn.send_bytes(marshal.dumps((status, render_head(status, headers, info["invocationId"], len(body)), body)))


INFO_KEYS = ("invocationId", "trigger", "traceparent", "deadline")


def build_event(method, path, raw_query, header_text, raw):
    headers = {}
    for line in header_text.splitlines():
        k, sep, v = line.partition(":")
        if not sep:
            continue
        k, v = k.strip().lower(), v.strip()
        headers[k] = headers[k] + ", " + v if k in headers else v
    try:
        text, b64 = raw.decode("utf-8"), False
    except UnicodeDecodeError:
        text, b64 = base64.b64encode(raw).decode("ascii"), True
    parsed = None
    if not b64 and text and "json" in headers.get("content-type", ""):
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
    return {
        "method": method, "path": path, "rawQuery": raw_query,
        "query": dict(parse_qsl(raw_query, keep_blank_values=True)),
        "headers": headers, "body": text, "isBase64Encoded": b64, "json": parsed,
    }


def render_head(status, headers, invocation_id, length):
    """The status line and headers, without the blank line that ends them."""
    reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
    out = [f"HTTP/1.1 {status} {reason}\r\n"]
    for k, v in headers.items():
        out.append(f"{k}: {v}\r\n")
    out.append(f"X-Sless-Invocation-Id: {invocation_id}\r\nContent-Length: {length}\r\n")
    return "".join(out).encode("latin-1")


# ------------------------------------------------------------------ main side


class LoadError(Exception):
    pass


class Worker:
    timed_out = False

    def __init__(self, ctx, cfg):
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker_main, args=(child, cfg.code_dir, cfg.entrypoint, cfg.function, cfg.tenant), daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent
        if not self.conn.poll(60):
            self.kill()
            raise LoadError("the handler did not load within 60s")
        kind, detail = self.conn.recv()
        if kind != "ready":
            self.kill()
            raise LoadError(detail)

    def kill(self):
        try:
            self.proc.kill()
            self.proc.join(5)
        except (OSError, ValueError, AttributeError):
            pass
        self.conn.close()


class Pool:
    """Warm worker processes, at most `size`; the caller bounds concurrency."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.ctx = multiprocessing.get_context("forkserver")
        self.idle = []

    def get(self):
        try:
            return self.idle.pop()  # atomic under the GIL
        except IndexError:
            return Worker(self.ctx, self.cfg)

    def put(self, w):
        self.idle.append(w)

    def replace(self, w):
        """Kills a worker and starts a warm one in its place, off the request path."""
        w.kill()

        def warm():
            try:
                self.put(Worker(self.ctx, self.cfg))
            except LoadError as e:
                log("error", "worker restart failed", error=str(e))

        threading.Thread(target=warm, daemon=True).start()

    def close(self):
        idle, self.idle = self.idle, []
        for w in idle:
            w.kill()


class Watchdog:
    """One thread that kills workers whose invocation overran its deadline.
    A killed worker's pipe closes, which ends the blocked recv() waiting on it."""

    def __init__(self):
        self.cond = threading.Condition()
        self.deadlines = {}  # worker -> deadline
        threading.Thread(target=self.run, daemon=True).start()

    def arm(self, w, deadline):
        # No lock and no notify: dict updates are atomic under the GIL, and
        # the thread wakes every 100ms.
        w.timed_out = False
        self.deadlines[w] = deadline

    def disarm(self, w):
        """Returns False when the worker was already killed for its deadline."""
        self.deadlines.pop(w, None)
        return not w.timed_out

    def run(self):
        with self.cond:
            while True:
                now = time.time()
                for w, d in list(self.deadlines.items()):
                    if d <= now and self.deadlines.pop(w, None) is not None:
                        w.timed_out = True
                        try:
                            w.proc.kill()
                        except (OSError, ValueError, AttributeError):
                            pass
                nxt = min(self.deadlines.values(), default=now + 0.1)
                self.cond.wait(min(0.1, max(0.001, nxt - now)))


class Runtime:
    def __init__(self, cfg):
        self.cfg = cfg
        self.pool = Pool(cfg)
        self.watchdog = Watchdog()
        self.ready = False
        self.load_error = None
        self.served = itertools.count()  # next() is atomic: exactly one call is the cold one
        self.draining = False
        self.inflight = 0
        self.inflight_lock = threading.Lock()
        self.idle_event = threading.Event()
        self.idle_event.set()

    def load(self):
        try:
            self.pool.put(self.pool.get())
            self.ready = True
            log("info", "handler loaded", function=self.cfg.function, entrypoint=self.cfg.entrypoint)
        except LoadError as e:
            self.load_error = str(e)
            log("error", "handler failed to load", function=self.cfg.function, error=self.load_error)

    def begin(self):
        with self.inflight_lock:
            self.inflight += 1
            self.idle_event.clear()

    def end(self):
        with self.inflight_lock:
            self.inflight -= 1
            if self.inflight == 0:
                self.idle_event.set()

    def invoke(self, request, info):
        """Runs one invocation; returns (status, head bytes, body bytes)."""
        if self.inflight > self.cfg.concurrency:  # begin() already counted this one
            return rendered(problem(429, "TooManyRequests", f"more than {self.cfg.concurrency} invocations in flight", info, {"Retry-After": "1"}), info)
        try:
            w = self.pool.get()
        except LoadError as e:
            return rendered(problem(503, "NotReady", str(e), info), info)
        try:
            self.watchdog.arm(w, info["deadline"])
            w.conn.send_bytes(marshal.dumps(request + ((info["invocationId"], info["trigger"], info["traceparent"], info["deadline"]),)))
            reply = w.conn.recv_bytes()
        except (EOFError, OSError):
            self.watchdog.disarm(w)
            self.pool.replace(w)
            if w.timed_out:
                log("warn", "invocation timed out; worker replaced", invocationId=info["invocationId"], function=self.cfg.function)
                return rendered(problem(504, "Timeout", f"function timed out after {self.cfg.timeout:g}s", info), info)
            return rendered(problem(500, "WorkerCrashed", "the function process exited during the invocation (out of memory?)", info), info)
        if not self.watchdog.disarm(w):
            # The deadline passed as the reply arrived: the worker is being killed.
            self.pool.replace(w)
            return rendered(problem(504, "Timeout", f"function timed out after {self.cfg.timeout:g}s", info), info)
        self.pool.put(w)
        return marshal.loads(reply)


def rendered(p, info):
    status, headers, body = p
    return status, render_head(status, headers, info["invocationId"], len(body)), body


def problem(status, typ, message, info, extra=None):
    headers = {"Content-Type": "application/json"}
    if extra:
        headers.update(extra)
    body = json.dumps({"error": message, "type": typ, "invocationId": info["invocationId"]}).encode()
    return status, headers, body


def make_handler(rt):
    cfg = rt.cfg

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True
        server_version = "sless-python/1"

        def log_message(self, *args):  # no access log: the platform records invocations
            pass

        def reply(self, status, head, body):
            if rt.draining:
                self.close_connection = True
            end = b"Connection: close\r\n\r\n" if self.close_connection else b"\r\n"
            self.wfile.write(head + end + (body if self.command != "HEAD" else b""))

        def read_body(self):
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                chunks, total = [], 0
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(chunks)
                    total += size
                    if total > cfg.max_body:
                        raise ValueError("body too large")
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            length = int(self.headers.get("Content-Length") or 0)
            if length > cfg.max_body:
                raise ValueError("body too large")
            return self.rfile.read(length) if length else b""

        def dispatch(self):
            path, _, raw_query = self.path.partition("?")
            if path == HEALTH_PATH:
                if rt.ready and not rt.draining:
                    body = b'{"status":"ok"}'
                    status = 200
                else:
                    state = "draining" if rt.draining else ("error" if rt.load_error else "loading")
                    body, status = json.dumps({"status": state, "error": rt.load_error}).encode(), 503
                self.reply(status, render_head(status, {"Content-Type": "application/json"}, "-", len(body)), body)
                return
            rt.begin()
            try:
                self.invoke(path, raw_query)
            finally:
                rt.end()

        def invoke(self, path, raw_query):
            h = self.headers
            info = {
                "invocationId": h.get("X-Sless-Invocation-Id") or str(uuid.uuid4()),
                "trigger": h.get("X-Sless-Trigger") or "http",
                "traceparent": h.get("traceparent"),
                "deadline": time.time() + cfg.timeout,
            }
            try:
                raw = self.read_body()
            except ValueError:
                self.close_connection = True
                self.reply(*rendered(problem(413, "PayloadTooLarge", f"request body over {cfg.max_body} bytes", info), info))
                return
            if not rt.ready:
                self.reply(*rendered(problem(503, "NotReady", rt.load_error or "the handler is loading", info, {"Retry-After": "1"}), info))
                return
            header_text = "\n".join(f"{k}: {v}" for k, v in h.items())
            cold = next(rt.served) == 0
            status, head, body = rt.invoke((self.command, path, raw_query, header_text, raw), info)
            if cold:  # the first invocation this runtime process serves
                head += b"X-Sless-Cold-Start: true\r\n"
            self.reply(status, head, body)

    for m in METHODS:
        setattr(Handler, "do_" + m, Handler.dispatch)
    return Handler


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    allow_reuse_address = True


def main():
    cfg = Config(os.environ)
    sys.path.insert(0, cfg.code_dir)
    rt = Runtime(cfg)
    server = Server((cfg.host, cfg.port), make_handler(rt))

    def on_term(signum, frame):
        if rt.draining:
            return
        rt.draining = True
        log("info", "draining: finishing in-flight invocations", inflight=rt.inflight)
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    threading.Thread(target=rt.load, daemon=True).start()
    log("info", "listening", port=cfg.port, function=cfg.function)
    server.serve_forever(poll_interval=0.2)
    server.socket.close()  # stop accepting before the drain
    rt.idle_event.wait(cfg.timeout + 5)
    rt.pool.close()
    log("info", "stopped", function=cfg.function)


if __name__ == "__main__":
    main()
