#!/usr/bin/env python3
"""The sless runtime for Python 3.11 (runtimes/README.md has the contract).

A supervisor process binds the port and forks worker processes that import
the user's handler and serve the listening socket themselves: the handler
runs in the process that owns the connection, in a thread per connection,
with no hop between processes per request. A watchdog thread in each worker
answers 504 itself when an invocation overruns SLESS_TIMEOUT_SEC and
recycles its process: the supervisor forks a replacement at once, the old
worker stops accepting, lets its other invocations finish and then kills its
whole process group (children a handler spawned included). One semaphore
shared by the workers bounds the invocations in flight (429 over it).
Standard library only.
"""

import asyncio
import base64
import ctypes
import importlib
import inspect
import json
import math
import mmap
import multiprocessing
import os
import re
import select
import signal
import socket
import struct
import sys
import threading
import time
import traceback
import uuid
from http import HTTPStatus
from urllib.parse import parse_qsl

HEALTH_PATH = "/_/health"
TICK = 0.05  # the watchdog's period: a 504 leaves at most this late
SLOT = struct.Struct("dI4x")  # per worker in shared memory: heartbeat, invocations held
BEAT, HELD = struct.Struct("d"), struct.Struct("I")


def cpu_count():
    """CPUs this process may use: the cgroup quota when there is one."""
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()
        if quota != "max":
            return max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    return len(os.sched_getaffinity(0))


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
        workers = env.get("SLESS_WORKERS")
        self.workers = max(1, int(workers)) if workers else min(self.concurrency, cpu_count())


def _version(env):
    """The function version this process runs (SLESS_FUNCTION_VERSION), or None."""
    v = env.get("SLESS_FUNCTION_VERSION", "")
    return int(v) if v.isdigit() and int(v) > 0 else None


VERSION = _version(os.environ)  # on every log line


def log(level, msg, **fields):
    now = time.time()
    rec = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + ".%03dZ" % (int(now * 1000) % 1000), "level": level}
    rec.update({k: v for k, v in fields.items() if v is not None})
    if VERSION is not None:
        rec["version"] = VERSION
    # msg last: a reader that cuts a long line keeps the other fields.
    rec["msg"] = msg
    # One write per line, so that lines of several threads and processes never interleave.
    os.write(1, (json.dumps(rec) + "\n").encode())


# ------------------------------------------------------- handler in and out


class Context:
    """What a handler learns about its invocation."""

    __slots__ = ("invocation_id", "function", "tenant", "trigger", "traceparent", "deadline")

    def __init__(self, invocation_id, function, tenant, trigger, traceparent, deadline):
        self.invocation_id = invocation_id
        self.function = function
        self.tenant = tenant
        self.trigger = trigger
        self.traceparent = traceparent
        self.deadline = deadline  # seconds since the epoch

    def get_remaining_time_ms(self):
        return max(0, int((self.deadline - time.time()) * 1000))


current = threading.local()  # the invocation id a thread works for, for print()


class _LogWriter:
    """Turns a handler's print() output into JSON log lines with its invocation id."""

    def __init__(self, level, stream, function):
        self.level, self.stream, self.function = level, stream, function
        self.lock = threading.Lock()
        self.buf = ""

    def write(self, s):
        with self.lock:
            self.buf += s
            if "\n" not in self.buf:
                return len(s)
            *lines, self.buf = self.buf.split("\n")
        for line in lines:
            log(self.level, line, invocationId=getattr(current, "id", None), function=self.function, stream=self.stream)
        return len(s)

    def flush(self):
        if self.buf:
            self.write("\n")


class InvalidResponse(Exception):
    """The handler returned something that cannot become an HTTP response."""


TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
FIELD_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")
# Framing is the runtime's: a handler's Content-Length could desynchronise a
# keep-alive connection.
OWN_HEADERS = frozenset(("content-length", "transfer-encoding", "connection", "keep-alive", "x-sless-invocation-id"))


def response_headers(given):
    """Validated (name, value) pairs of a handler's headers."""
    if given is None:
        return []
    if not isinstance(given, dict):
        raise InvalidResponse(f"headers must be an object, got {type(given).__name__}")
    out = []
    for k, v in given.items():
        if not isinstance(k, str) or not TOKEN.fullmatch(k):
            raise InvalidResponse(f"invalid header name {k!r}")
        if k.lower() in OWN_HEADERS:
            continue
        s = v if isinstance(v, str) else str(v)
        if not FIELD_VALUE.fullmatch(s):
            raise InvalidResponse(f"invalid value for header {k!r}: only visible characters, spaces and tabs are allowed (no CR, LF or NUL)")
        out.append((k, s))
    return out


def encode_result(result):
    """Maps a handler's return value to (status, [(name, value)], body bytes)."""
    if result is None:
        return 204, [], b""
    if isinstance(result, str):
        return 200, [("Content-Type", "text/plain; charset=utf-8")], result.encode()
    if isinstance(result, (bytes, bytearray, memoryview)):
        return 200, [("Content-Type", "application/octet-stream")], bytes(result)
    if isinstance(result, dict) and "statusCode" in result:
        status = result["statusCode"]
        if type(status) is not int or not 200 <= status <= 599:
            raise InvalidResponse(f"statusCode must be an integer from 200 to 599, got {status!r}")
        headers = response_headers(result.get("headers"))
        has_type = any(k.lower() == "content-type" for k, _ in headers)
        body = result.get("body")
        if result.get("isBase64Encoded") and isinstance(body, str):
            try:
                data = base64.b64decode(body, validate=True)
            except ValueError as e:
                raise InvalidResponse(f"isBase64Encoded is set but the body is not base64: {e}") from None
        elif body is None:
            data = b""
        elif isinstance(body, str):
            data = body.encode()
            if not has_type:
                headers.append(("Content-Type", "text/plain; charset=utf-8"))
        elif isinstance(body, (bytes, bytearray)):
            data = bytes(body)
            if not has_type:
                headers.append(("Content-Type", "application/octet-stream"))
        else:
            data = json.dumps(body).encode()
            if not has_type:
                headers.append(("Content-Type", "application/json"))
        if status in (204, 304):
            data = b""
        return status, headers, data
    return 200, [("Content-Type", "application/json")], json.dumps(result).encode()


def build_event(method, path, raw_query, headers, raw):
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
        "query": dict(parse_qsl(raw_query, keep_blank_values=True)) if raw_query else {},
        "headers": headers, "body": text, "isBase64Encoded": b64, "json": parsed,
    }


REASONS = {s.value: s.phrase for s in HTTPStatus}

# SERVED is a byte in memory shared by the supervisor's workers: 0 until
# the runtime answered its first invocation. That one answer carries
# X-Sless-Cold-Start, which the platform records as cold_start.
SERVED = None


def first_invocation():
    if SERVED is None or SERVED.value:
        return False
    with SERVED.get_lock():  # across workers; taken only until the first answer
        if SERVED.value:
            return False
        SERVED.value = 1
        return True


def render(status, headers, invocation_id, body, close, head_only=False, keep_alive_10=False):
    """One buffer: status line, headers, framing and the body."""
    out = [f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\n"]
    for k, v in headers:
        out.append(f"{k}: {v}\r\n")
    if invocation_id:
        out.append(f"X-Sless-Invocation-Id: {invocation_id}\r\n")
    if status != 204:
        out.append(f"Content-Length: {len(body)}\r\n")
    if close:
        out.append("Connection: close\r\n")
    elif keep_alive_10:
        out.append("Connection: keep-alive\r\n")
    out.append("\r\n")
    head = "".join(out).encode("latin-1")
    return head if head_only or status == 204 else head + body


def problem(status, typ, message, invocation_id, extra=()):
    body = json.dumps({"error": message, "type": typ, "invocationId": invocation_id}).encode()
    return status, [("Content-Type", "application/json"), *extra], body


# ------------------------------------------------------------------- worker


class BadRequest(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class Invocation:
    __slots__ = ("conn", "state", "id", "deadline")

    def __init__(self, conn, state, invocation_id, deadline):
        self.conn, self.state, self.id, self.deadline = conn, state, invocation_id, deadline


class Worker:
    """One pre-forked process: serves its share of the listening socket and
    runs the handler in the thread of each connection."""

    def __init__(self, cfg, listener, sem, shm, slot, status_fd):
        self.cfg, self.listener, self.sem, self.shm, self.status_fd = cfg, listener, sem, shm, status_fd
        self.offset = slot * SLOT.size
        self.handler = None
        self.load_error = None
        self.loaded = threading.Event()
        self.stopping = False  # draining or recycling: no new connections, close when idle
        self.draining = False  # SIGTERM: the runtime as a whole is going away
        self.lock = threading.Lock()  # the semaphore, inflight and the published count move together
        self.inflight = {}  # token -> Invocation
        self.next_token = 0
        self.conns = {}  # socket -> [busy, abandoned, fresh, accepted at, reading side shut]
        self.loop = threading.local()

    # -- lifecycle

    def load(self):
        cfg = self.cfg
        sys.stdout = _LogWriter("info", "stdout", cfg.function)
        sys.stderr = _LogWriter("error", "stderr", cfg.function)
        sys.path.insert(0, cfg.code_dir)
        os.chdir(cfg.code_dir)
        try:
            module_name, _, attr = cfg.entrypoint.rpartition(".")
            handler = getattr(importlib.import_module(module_name), attr)
            if not callable(handler):
                raise TypeError(f"{cfg.entrypoint} is not a function")
            self.handler = handler
            self.report("ready")
        except BaseException as e:  # noqa: BLE001 - any import failure is reported
            self.load_error = f"cannot load {cfg.entrypoint}: {type(e).__name__}: {e}"
            self.report("error " + self.load_error.replace("\n", " "))
        self.loaded.set()

    def report(self, line):
        try:
            os.write(self.status_fd, (line + "\n").encode())
        except OSError:
            pass

    def serve(self, accept_before_load):
        threading.Thread(target=self.watchdog, daemon=True).start()
        threading.Thread(target=self.load, daemon=True).start()
        if not accept_before_load:
            self.loaded.wait()
        self.listener.settimeout(0.2)
        while not self.stopping:
            try:
                conn, _ = self.listener.accept()
            except (socket.timeout, BlockingIOError, InterruptedError):
                continue
            except OSError:
                break
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                threading.Thread(target=self.serve_conn, args=(conn,), daemon=True).start()
            except RuntimeError:
                # No thread to be had (the memory limit): this connection
                # is refused with a 503, and the worker goes on serving.
                refuse(conn)
        self.listener.close()
        self.finish()

    def stop(self):
        """Stops accepting; open connections close once idle."""
        self.stopping = True

    def drain(self):
        """SIGTERM: stops, and health says draining."""
        self.draining = True
        self.stop()

    def recycle(self):
        if self.stopping:
            return
        self.report("recycle")  # the supervisor forks a replacement now
        self.stop()
        # At once, not after the accept loop's next tick: a client that
        # learns of the recycle and reuses a kept-alive connection of this
        # worker would have its request reset as the worker closes it.
        self.close_idle()

    def close_idle(self):
        """Closes the connections that wait for a request; reports whether any
        connection is still busy."""
        busy = False
        now = time.monotonic()
        shut = []
        for conn, st in list(self.conns.items()):
            if st[1]:
                continue
            # A connection accepted a moment ago has a request on its way;
            # so has one with bytes waiting (a kept-alive connection the
            # client just reused): closing it would drop that request.
            if st[0] or (st[2] and now - st[3] < 1) or has_input(conn):
                busy = True
                continue
            # Only its reading side: its thread may have read a request
            # line an instant ago, not yet marked busy, and still answers
            # it. A thread that waits for a request sees the end of input
            # and closes the connection itself.
            st[4] = True
            shutdown(conn, socket.SHUT_RD)
            shut.append(conn)
        # Those threads close their connections at once, so a client that
        # has an answer after this (a 504) finds them closed, not reset
        # later; or they mark themselves busy, having read a request. A
        # connection still open is busy.
        deadline = time.monotonic() + 1
        while any(not self.conns.get(c, (True,))[0] for c in shut) and time.monotonic() < deadline:
            time.sleep(0.001)
        return busy or any(c in self.conns for c in shut)

    def finish(self):
        """After the accept loop: wait for the invocations still running (not
        the abandoned ones), close idle connections, end the process group."""
        deadline = time.monotonic() + self.cfg.timeout + 5
        while time.monotonic() < deadline and self.close_idle():
            time.sleep(TICK)
        os.killpg(0, signal.SIGKILL)  # this worker and whatever its handlers started

    # -- the watchdog

    def watchdog(self):
        while True:
            BEAT.pack_into(self.shm, self.offset, time.monotonic())
            now = time.time()
            for token, inv in list(self.inflight.items()):
                if inv.deadline <= now:
                    self.time_out(token, inv)
            time.sleep(TICK)

    def time_out(self, token, inv):
        with self.lock:
            if self.inflight.pop(token, None) is None:
                return  # answered just now
            self.sem.release()
            self.publish()
        inv.state[1] = True  # its thread is lost to the handler; the connection is ours
        log("warn", "invocation timed out; worker recycled", invocationId=inv.id, function=self.cfg.function)
        # The idle connections close before the client has the 504 (a
        # client that reused one after it would have its request reset);
        # the recycle comes after the 504 is sent: once stopping, the accept
        # loop may end the process, and this connection, abandoned, would
        # not hold it.
        self.close_idle()
        status, headers, body = problem(504, "Timeout", f"function timed out after {self.cfg.timeout:g}s", inv.id)
        try:
            # Never block the watchdog on a client that does not read.
            inv.conn.send(render(status, headers, inv.id, body, True), socket.MSG_DONTWAIT)
        except OSError:
            pass
        shutdown(inv.conn, socket.SHUT_WR)
        self.recycle()

    def publish(self):
        """Publishes how many semaphore units this worker holds (under self.lock),
        so that the supervisor gives them back if the worker dies."""
        HELD.pack_into(self.shm, self.offset + 8, len(self.inflight))

    # -- HTTP

    def serve_conn(self, conn):
        # busy, abandoned (its invocation timed out), fresh, accepted at, reading side shut by close_idle
        state = [False, False, True, time.monotonic(), False]
        self.conns[conn] = state
        rfile = conn.makefile("rb", 65536)
        try:
            while not state[1]:
                line = rfile.readline(65537)
                if not line:
                    return
                if line in (b"\r\n", b"\n"):
                    continue  # a stray line break before a request is allowed
                state[0] = True
                try:
                    keep = self.one_request(conn, rfile, line, state)
                except BadRequest as e:
                    if state[4]:
                        return  # cut short by close_idle, not malformed: no answer, as a reset would have had
                    status, headers, body = problem(e.status, "BadRequest", str(e), None)
                    conn.sendall(render(status, headers, None, body, True))
                    return
                except OverflowError:
                    status, headers, body = problem(413, "PayloadTooLarge", f"request body over {self.cfg.max_body} bytes", None)
                    conn.sendall(render(status, headers, None, body, True))
                    return
                if not keep or self.stopping or state[1]:
                    return
                state[0] = state[2] = False
        except OSError:
            pass
        finally:
            if not state[1]:
                rfile.close()
                conn.close()
            self.conns.pop(conn, None)  # after the close: close_idle waits for it

    def one_request(self, conn, rfile, line, state):
        """Reads and answers one request; returns whether the connection stays open."""
        cfg = self.cfg
        if len(line) > 65536:
            raise BadRequest(414, "request line too long")
        parts = line.split()
        if len(parts) != 3:
            raise BadRequest(400, "malformed request line")
        method, target, version = parts[0].decode("latin-1"), parts[1].decode("latin-1"), parts[2]
        if version == b"HTTP/1.1":
            keep, v10 = True, False
        elif version == b"HTTP/1.0":
            keep, v10 = False, True
        else:
            raise BadRequest(505, "HTTP version not supported")
        headers = {}
        for _ in range(101):
            h = rfile.readline(65537)
            if h in (b"\r\n", b"\n"):
                break
            if not h:
                raise BadRequest(400, "the request ended in its headers")
            if len(h) > 65536:
                raise BadRequest(431, "header line too long")
            name, sep, value = h.partition(b":")
            name = name.decode("latin-1")
            if not sep or not TOKEN.fullmatch(name):
                raise BadRequest(400, "malformed header line")
            k, v = name.lower(), value.strip().decode("latin-1")
            headers[k] = headers[k] + ", " + v if k in headers else v
        else:
            raise BadRequest(431, "too many headers")
        c = headers.get("connection")
        if c:
            tokens = c.lower()
            if "close" in tokens:
                keep = False
            elif v10 and "keep-alive" in tokens:
                keep = True
        path, _, raw_query = target.partition("?")
        head_only = method == "HEAD"

        def reply(status, hdrs, body, invocation_id):
            conn.sendall(render(status, hdrs, invocation_id, body, not keep or self.stopping, head_only, keep and v10))

        invocation_id = None if path == HEALTH_PATH else headers.get("x-sless-invocation-id") or str(uuid.uuid4())
        try:
            raw = self.read_body(conn, rfile, headers, v10)
        except OverflowError:
            keep = False
            reply(*problem(413, "PayloadTooLarge", f"request body over {cfg.max_body} bytes", invocation_id), invocation_id)
            return False
        if path == HEALTH_PATH:
            # A recycling worker still says ok: the runtime serves on (its
            # other workers, and the replacement being forked), and a 503
            # here would take the whole function out of its endpoints.
            if self.handler and not self.draining:
                reply(200, [("Content-Type", "application/json")], b'{"status":"ok"}', None)
            else:
                st = "draining" if self.draining else ("error" if self.load_error else "loading")
                reply(503, [("Content-Type", "application/json")], json.dumps({"status": st, "error": self.load_error}).encode(), None)
            return keep
        if self.handler is None:
            reply(*problem(503, "NotReady", self.load_error or "the handler is loading", invocation_id, [("Retry-After", "1")]), invocation_id)
            return keep
        with self.lock:
            if not self.sem.acquire(False):
                admitted = False
            else:
                admitted = True
                token = self.next_token = self.next_token + 1
                now = time.time()
                inv = Invocation(conn, state, invocation_id, now + cfg.timeout)
                self.inflight[token] = inv
                self.publish()
        if not admitted:
            reply(*problem(429, "TooManyRequests", f"more than {cfg.concurrency} invocations in flight", invocation_id, [("Retry-After", "1")]), invocation_id)
            return keep
        out = self.call(method, path, raw_query, headers, raw, invocation_id, inv.deadline)
        if first_invocation():
            out = (out[0], [*out[1], ("X-Sless-Cold-Start", "true")], out[2])
        with self.lock:
            if self.inflight.pop(token, None) is None:
                return False  # the watchdog answered 504
            self.sem.release()
            self.publish()
        reply(*out, invocation_id)
        return keep

    def read_body(self, conn, rfile, headers, v10):
        te = headers.get("transfer-encoding")
        if te is not None:
            if "content-length" in headers or te.strip().lower() != "chunked":
                raise BadRequest(400, "unsupported Transfer-Encoding")
            self.continue_100(conn, headers, v10)
            chunks, total = [], 0
            while True:
                try:
                    size = int(rfile.readline(1024).split(b";")[0].strip(), 16)
                except ValueError:
                    raise BadRequest(400, "malformed chunk size") from None
                if size == 0:
                    while rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                total += size
                if total > self.cfg.max_body:
                    raise OverflowError
                chunks.append(rfile.read(size))
                rfile.readline(3)
        cl = headers.get("content-length")
        if not cl:
            return b""
        if not cl.isdigit():
            raise BadRequest(400, "malformed Content-Length")
        length = int(cl)
        if length > self.cfg.max_body:
            raise OverflowError
        if length == 0:
            return b""
        self.continue_100(conn, headers, v10)
        data = rfile.read(length)
        if len(data) < length:
            raise BadRequest(400, "the request body ended early")
        return data

    @staticmethod
    def continue_100(conn, headers, v10):
        if not v10 and headers.get("expect", "").lower() == "100-continue":
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")

    def call(self, method, path, raw_query, headers, raw, invocation_id, deadline):
        """Runs the handler; returns (status, headers, body)."""
        cfg = self.cfg
        current.id = invocation_id
        try:
            event = build_event(method, path, raw_query, headers, raw)
            ctx = Context(invocation_id, cfg.function, cfg.tenant, headers.get("x-sless-trigger") or "http",
                          headers.get("traceparent"), deadline)
            result = self.handler(event, ctx)
            if inspect.isawaitable(result):
                loop = getattr(self.loop, "v", None)
                if loop is None:
                    loop = self.loop.v = asyncio.new_event_loop()
                result = loop.run_until_complete(result)
            return encode_result(result)
        except InvalidResponse as e:
            log("error", "handler returned an invalid response", invocationId=invocation_id, function=cfg.function, error=str(e))
            status, hdrs, body = problem(502, "InvalidResponse", f"the function returned an invalid response: {e}", invocation_id)
        except MemoryError:
            log("error", "handler ran out of memory; worker recycled", invocationId=invocation_id, function=cfg.function)
            self.recycle()
            status, hdrs, body = problem(500, "WorkerCrashed", "the function ran out of memory", invocation_id)
        except Exception as e:  # noqa: BLE001 - the caller gets the message, the log the traceback
            log("error", "handler raised", invocationId=invocation_id, function=cfg.function,
                error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
            status, hdrs, body = problem(500, "HandlerError", str(e) or type(e).__name__, invocation_id)
        except BaseException as e:  # noqa: BLE001 - sys.exit() and the like end this worker, not the caller's answer
            log("error", "handler exited; worker recycled", invocationId=invocation_id, function=cfg.function, error=f"{type(e).__name__}: {e}")
            self.recycle()
            status, hdrs, body = problem(500, "WorkerCrashed", f"the function exited during the invocation ({type(e).__name__})", invocation_id)
        finally:
            current.id = None
        return status, hdrs, body


def has_input(conn):
    try:
        return bool(conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except OSError:  # nothing waiting (EAGAIN), or the connection is gone
        return False


def shutdown(conn, how=socket.SHUT_RDWR):
    try:
        conn.shutdown(how)
    except OSError:
        pass


def set_parent_death_signal(sig):
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(sig))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# A connection's thread needs little stack: Python calls do not recurse on
# the C stack in 3.11. The default of 8 MiB per thread would let an
# address-space limit (the local driver's memory limit) refuse threads
# long before the function's concurrency is reached.
THREAD_STACK = 512 << 10


def refuse(conn):
    """Answers 503 on a connection no thread can serve, and closes it."""
    try:
        status, headers, body = problem(503, "Overloaded", "the runtime cannot take another connection now", None, [("Retry-After", "1")])
        conn.settimeout(1)
        conn.sendall(render(status, headers, None, body, True))
    except OSError:
        pass
    finally:
        conn.close()


def worker_main(cfg, listener, sem, shm, slot, status_fd, supervisor_pid, first):
    # Its own process group, so that a recycle ends whatever its handlers started.
    os.setpgid(0, 0)
    threading.stack_size(THREAD_STACK)
    signal.set_wakeup_fd(-1)
    w = Worker(cfg, listener, sem, shm, slot, status_fd)

    def on_term(signum, frame):
        if os.getppid() != supervisor_pid:
            os.killpg(0, signal.SIGKILL)  # the supervisor is gone: no one would replace or reap us
        w.drain()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != supervisor_pid:
        os.killpg(0, signal.SIGKILL)
    try:
        w.serve(first)
    finally:
        os._exit(0)


# --------------------------------------------------------------- supervisor


class Child:
    def __init__(self, pid, slot, status_r):
        self.pid, self.slot, self.status_r = pid, slot, status_r
        self.buf = b""
        self.recycling = False
        self.started = time.monotonic()


class Supervisor:
    def __init__(self, cfg):
        self.cfg = cfg
        self.listener = socket.socket(socket.AF_INET6 if ":" in cfg.host else socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((cfg.host, cfg.port))
        self.listener.listen(256)
        self.sem = multiprocessing.get_context("fork").BoundedSemaphore(cfg.concurrency)
        global SERVED
        SERVED = multiprocessing.get_context("fork").Value("b", 0)  # inherited by every worker
        self.slots = cfg.workers * 2 + 2  # room for replacements while old workers drain
        self.shm = mmap.mmap(-1, self.slots * SLOT.size)
        self.children = {}  # pid -> Child
        self.loaded = None  # None until the first worker reported, then True or False
        self.draining = False
        self.crashes = 0

    def free_slot(self):
        used = {c.slot for c in self.children.values()}
        return next(i for i in range(self.slots) if i not in used)

    def fork(self, first=False):
        slot = self.free_slot()
        SLOT.pack_into(self.shm, slot * SLOT.size, time.monotonic(), 0)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            for c in self.children.values():
                os.close(c.status_r)
            worker_main(self.cfg, self.listener, self.sem, self.shm, slot, w, os.getppid(), first)
        os.close(w)
        os.set_blocking(r, False)
        self.children[pid] = Child(pid, slot, r)

    def serving(self):
        return sum(1 for c in self.children.values() if not c.recycling)

    def run(self):
        rsig, wsig = os.pipe()
        os.set_blocking(wsig, False)
        os.set_blocking(rsig, False)
        signal.set_wakeup_fd(wsig)
        signal.signal(signal.SIGTERM, self.on_term)
        signal.signal(signal.SIGINT, self.on_term)
        signal.signal(signal.SIGCHLD, lambda *a: None)
        log("info", "listening", port=self.cfg.port, function=self.cfg.function, workers=self.cfg.workers)
        self.fork(first=True)
        deadline = None
        while self.children:
            fds = [rsig] + [c.status_r for c in self.children.values()]
            try:
                ready, _, _ = select.select(fds, [], [], 0.5)
            except InterruptedError:
                ready = []
            if rsig in ready:
                try:
                    os.read(rsig, 512)
                except BlockingIOError:
                    pass
            for c in list(self.children.values()):
                if c.status_r in ready:
                    self.read_status(c)
            self.reap()
            self.check_heartbeats()
            if self.draining:
                deadline = deadline or time.monotonic() + self.cfg.timeout + 5
                if time.monotonic() > deadline:
                    for c in self.children.values():
                        kill_group(c.pid)
            elif self.loaded and self.serving() < self.cfg.workers:
                self.fork()
        log("info", "stopped", function=self.cfg.function)

    def on_term(self, signum, frame):
        if self.draining:
            return
        self.draining = True
        log("info", "draining: finishing in-flight invocations", function=self.cfg.function)
        self.listener.close()  # the workers hold the socket until they stop accepting
        for c in self.children.values():
            try:
                os.kill(c.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def read_status(self, c):
        try:
            data = os.read(c.status_r, 4096)
        except BlockingIOError:
            return
        c.buf += data
        while b"\n" in c.buf:
            line, c.buf = c.buf.split(b"\n", 1)
            kind, _, detail = line.decode(errors="replace").partition(" ")
            if kind == "ready" and self.loaded is None:
                self.loaded = True
                log("info", "handler loaded", function=self.cfg.function, entrypoint=self.cfg.entrypoint)
            elif kind == "error" and self.loaded is None:
                self.loaded = False  # this worker stays up and answers 503 with the reason
                log("error", "handler failed to load", function=self.cfg.function, error=detail)
            elif kind == "recycle":
                c.recycling = True

    def reap(self):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            c = self.children.pop(pid, None)
            if c is None:
                continue
            kill_group(pid)
            os.close(c.status_r)
            # Give back what a worker that died mid-invocation held.
            _, held = SLOT.unpack_from(self.shm, c.slot * SLOT.size)
            for _ in range(held):
                try:
                    self.sem.release()
                except ValueError:
                    break
            if not c.recycling and not self.draining:
                log("warn", "worker exited; replacing it", function=self.cfg.function, pid=pid,
                    status=os.waitstatus_to_exitcode(status))
                if time.monotonic() - c.started < 1:
                    self.crashes += 1
                    time.sleep(min(5, 0.05 * 2 ** self.crashes))
                else:
                    self.crashes = 0
                if self.loaded is not True:
                    self.loaded = None
                    self.fork(first=True)

    def check_heartbeats(self):
        """A handler that holds the GIL in C code starves the watchdog thread;
        past its deadline by a margin, the whole worker is killed."""
        now = time.monotonic()
        for c in self.children.values():
            beat, _ = SLOT.unpack_from(self.shm, c.slot * SLOT.size)
            if now - beat > self.cfg.timeout + 2:
                log("error", "worker unresponsive past the timeout; killed", function=self.cfg.function, pid=c.pid)
                kill_group(c.pid)
                SLOT.pack_into(self.shm, c.slot * SLOT.size, now, SLOT.unpack_from(self.shm, c.slot * SLOT.size)[1])


def kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def main():
    cfg = Config(os.environ)
    Supervisor(cfg).run()


if __name__ == "__main__":
    main()
