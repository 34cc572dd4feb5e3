"""Tests of the Python runtime against the shared contract fixtures
(../fixtures/contract.json) and its timeout, concurrency, error and drain
behaviour. Run: python3 -m unittest -v test_runtime.py"""

import base64
import http.client
import json
import mmap
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RuntimeProcess:
    def __init__(self, code_dir, entrypoint="main.handler", timeout="1", concurrency="2", workers=None, memory_mb=None):
        self.port = free_port()
        env = dict(os.environ, PORT=str(self.port), SLESS_HOST="127.0.0.1", SLESS_FUNCTION="fixtures", SLESS_TENANT="test",
                   SLESS_CODE_DIR=code_dir, SLESS_ENTRYPOINT=entrypoint, SLESS_TIMEOUT_SEC=timeout, SLESS_CONCURRENCY=concurrency,
                   SLESS_FUNCTION_VERSION="7")
        if workers:
            env["SLESS_WORKERS"] = workers
        preexec = None
        if memory_mb:
            # What the local driver does: an address-space limit the workers
            # inherit, and few malloc arenas (each reserves 64 MiB of it).
            env["MALLOC_ARENA_MAX"] = "2"
            limit = (memory_mb + 256) << 20
            preexec = lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))  # noqa: E731
        self.log = tempfile.TemporaryFile()  # closed by stop()
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "runtime.py")], env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT, preexec_fn=preexec, start_new_session=True)

    def wait_health(self, want=200, within=20):
        deadline = time.time() + within
        while time.time() < deadline:
            try:
                status, _, _ = self.request("GET", "/_/health")
                if status == want:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"health never answered {want}; log:\n{self.logs()}")

    def request(self, method, path, body=None, headers=None, conn=None):
        c = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        if conn is None:
            c.close()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data

    def logs(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        self.log.close()


class ContractTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rt = RuntimeProcess(os.path.join(FIXTURES, "handlers"))
        cls.rt.wait_health()

    @classmethod
    def tearDownClass(cls):
        cls.rt.stop()

    def test_fixtures(self):
        with open(os.path.join(FIXTURES, "contract.json")) as f:
            cases = json.load(f)
        self.assertGreater(len(cases), 10)
        for case in cases:
            with self.subTest(case["name"]):
                check_case(self, self.rt, case)

    def test_keep_alive_reuses_the_connection_and_the_worker(self):
        c = http.client.HTTPConnection("127.0.0.1", self.rt.port, timeout=5)
        ids = set()
        for _ in range(20):
            status, _, body = self.rt.request("GET", "/text", conn=c)
            self.assertEqual(status, 200)
            ids.add(body)
        c.close()
        self.assertEqual(ids, {b"hello, world"})

    def test_handler_output_is_logged_as_json_with_the_invocation_id(self):
        self.rt.request("GET", "/logs", headers={"X-Sless-Invocation-Id": "inv-logs"})
        time.sleep(0.2)
        lines = [json.loads(l) for l in self.rt.logs().splitlines() if l.startswith("{")]
        mine = [l for l in lines if l.get("invocationId") == "inv-logs"]
        self.assertEqual([l["msg"] for l in mine], ["line one", "line two"])
        # Every line, the runtime's own ("listening", "handler loaded") and
        # the handler's, names the version the process runs; msg stays last.
        self.assertGreater(len(lines), len(mine))
        for l in lines:
            self.assertEqual(l.get("version"), 7, l)
            self.assertEqual(list(l)[-1], "msg", l)


def check_case(tc, rt, case):
    req, want = case["request"], case["response"]
    body = None
    if "body" in req:
        body = req["body"].encode()
    elif "bodyBase64" in req:
        body = base64.b64decode(req["bodyBase64"])
    path = req["path"] + ("?" + req["query"] if req.get("query") else "")
    status, headers, data = rt.request(req["method"], path, body=body, headers=req.get("headers"))
    tc.assertEqual(status, want["status"], data)
    for k, v in want.get("headers", {}).items():
        tc.assertEqual(headers.get(k), v, f"header {k}")
    for k in want.get("headersPresent", []):
        tc.assertTrue(headers.get(k), f"header {k} missing")
    if "body" in want:
        tc.assertEqual(data.decode(), want["body"])
    if "bodyBase64" in want:
        tc.assertEqual(data, base64.b64decode(want["bodyBase64"]))
    if "json" in want:
        tc.assertEqual(json.loads(data), want["json"])
    if "jsonSubset" in want:
        got = json.loads(data)
        for k, v in want["jsonSubset"].items():
            tc.assertEqual(got.get(k), v, f"field {k}")
    for s in want.get("bodyExcludes", []):
        tc.assertNotIn(s, data.decode(errors="replace"))
    for s in want.get("bodyContains", []):
        tc.assertIn(s, data.decode(errors="replace"))
    for k in want.get("headersAbsent", []):
        tc.assertNotIn(k, headers, f"header {k} present")


def wait_gone(tc, pid, within=10):
    """Waits until pid has exited (a zombie counts as exited)."""
    deadline = time.time() + within
    while time.time() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except FileNotFoundError:
            return
        time.sleep(0.05)
    tc.fail(f"process {pid} that the handler started still runs")


class BehaviourTest(unittest.TestCase):
    def start(self, **kw):
        rt = RuntimeProcess(os.path.join(FIXTURES, "handlers"), **kw)
        self.addCleanup(rt.stop)
        rt.wait_health()
        return rt

    def test_timeout_answers_504_and_the_next_request_is_served(self):
        rt = self.start(timeout="1", concurrency="1")
        start = time.time()
        status, _, body = rt.request("GET", "/spin")
        self.assertEqual(status, 504)
        self.assertIn("timed out after 1s", json.loads(body)["error"])
        print(f"\n504 for a busy loop after {(time.time() - start) * 1000:.0f} ms (limit 1 s)", file=sys.stderr)
        start = time.time()
        status, _, body = rt.request("GET", "/text")
        self.assertEqual((status, body), (200, b"hello, world"))
        print(f"next request after a timeout served in {(time.time() - start) * 1000:.0f} ms", file=sys.stderr)
        self.assertIn("worker recycled", rt.logs())

    def test_timeout_kills_the_children_a_handler_started(self):
        for busy in (True, False):
            with self.subTest(busy=busy):
                rt = self.start(timeout="1", concurrency="2")
                with tempfile.TemporaryDirectory() as d:
                    pidfile = os.path.join(d, "pid")
                    status, _, _ = rt.request("POST", "/spawn", body=json.dumps({"pidfile": pidfile, "busy": busy}).encode(),
                                              headers={"Content-Type": "application/json"})
                    self.assertEqual(status, 504)
                    with open(pidfile) as f:
                        pid = int(f.read())
                wait_gone(self, pid)
                status, _, _ = rt.request("GET", "/text")
                self.assertEqual(status, 200)

    def test_many_invocations_at_once_under_the_memory_limit(self):
        # The local driver's address-space limit (128 MiB + 256) must not
        # refuse the threads of a high concurrency: 150 slow calls at
        # once all answer 200, and no worker dies.
        rt = self.start(concurrency="200", workers="2", memory_mb=128, timeout="10")
        results = []
        lock = threading.Lock()

        def one():
            try:
                status, _, _ = rt.request("POST", "/slow", body=b'{"seconds": 1}', headers={"Content-Type": "application/json"})
            except OSError as e:
                status = repr(e)
            with lock:
                results.append(status)

        threads = [threading.Thread(target=one) for _ in range(150)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(results.count(200), 150, f"statuses: {sorted(set(map(str, results)))}; log:\n{rt.logs()[-2000:]}")
        self.assertNotIn("worker exited", rt.logs())

    def test_other_invocations_finish_while_a_timed_out_worker_is_recycled(self):
        rt = self.start(timeout="1.5", concurrency="4", workers="1")
        out = {}

        def slow():
            out["r"] = rt.request("POST", "/slow", body=b'{"seconds": 1}', headers={"Content-Type": "application/json"})

        spin = threading.Thread(target=lambda: out.setdefault("spin", rt.request("GET", "/spin")))
        spin.start()
        time.sleep(0.7)  # the slow call starts in the same worker before the spin times out
        t = threading.Thread(target=slow)
        t.start()
        spin.join()
        t.join()
        self.assertEqual(out["spin"][0], 504)
        self.assertEqual((out["r"][0], out["r"][2]), (200, b"done"))

    def test_a_killed_worker_gives_back_its_share_of_the_concurrency_limit(self):
        rt = self.start(timeout="10", concurrency="1", workers="1")
        threading.Thread(target=lambda: rt.request("POST", "/slow", body=b'{"seconds": 5}',
                                                   headers={"Content-Type": "application/json"}), daemon=True).start()
        time.sleep(0.5)
        self.assertEqual(rt.request("GET", "/text")[0], 429)  # the one unit is held
        worker = int(subprocess.check_output(["pgrep", "-P", str(rt.proc.pid)]).split()[0])
        os.kill(worker, signal.SIGKILL)
        deadline = time.time() + 10
        while True:
            try:
                status = rt.request("GET", "/text")[0]
            except OSError:
                status = None
            if status == 200 or time.time() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(status, 200, rt.logs())

    def test_a_worker_holding_the_gil_past_the_timeout_is_killed_and_replaced(self):
        rt = self.start(timeout="1", concurrency="2", workers="1")
        with self.assertRaises((http.client.HTTPException, OSError)):
            rt.request("GET", "/gil")  # the watchdog thread cannot run: no 504, the connection drops
        # The replacement may still be loading its handler (503 NotReady,
        # Retry-After 1) when the next request comes: it must serve soon.
        deadline = time.time() + 20
        while True:
            status, _, body = rt.request("GET", "/text")
            if status == 200 or time.time() > deadline:
                break
            self.assertEqual(status, 503, body)
            self.assertEqual(json.loads(body)["type"], "NotReady", body)
            time.sleep(0.05)
        self.assertEqual(status, 200, f"{body!r}\n{rt.logs()}")
        self.assertIn("worker unresponsive past the timeout; killed", rt.logs())

    def test_memory_limit_answers_500_and_the_runtime_keeps_serving(self):
        rt = self.start(timeout="5", concurrency="2", memory_mb=64)
        status, _, body = rt.request("POST", "/hog", body=b'{"mb": 1024}', headers={"Content-Type": "application/json"})
        self.assertEqual(status, 500, body)
        self.assertEqual(json.loads(body)["type"], "WorkerCrashed")
        status, _, body = rt.request("POST", "/hog", body=b'{"mb": 16}', headers={"Content-Type": "application/json"})
        self.assertEqual((status, body), (200, str(16 << 20).encode()))

    def test_exit_in_a_handler_answers_500_and_the_runtime_keeps_serving(self):
        rt = self.start(timeout="5", concurrency="2")
        status, _, body = rt.request("GET", "/exit")
        self.assertEqual(status, 500)
        self.assertEqual(json.loads(body)["type"], "WorkerCrashed")
        self.assertEqual(rt.request("GET", "/text")[0], 200)

    def test_concurrency_limit_answers_429_with_retry_after(self):
        rt = self.start(timeout="5", concurrency="2")
        results = []

        def slow():
            results.append(rt.request("POST", "/slow", body=b'{"seconds": 1}', headers={"Content-Type": "application/json"})[0])

        threads = [threading.Thread(target=slow) for _ in range(2)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        status, headers, body = rt.request("GET", "/text")
        for t in threads:
            t.join()
        self.assertEqual(status, 429, body)
        self.assertEqual(headers.get("retry-after"), "1")
        self.assertEqual(sorted(results), [200, 200])

    def health_while_stopping(self, rt, stop):
        """Health asked on a connection that the worker already holds, after
        stop() made it stop: the request line goes first, so the worker keeps
        the connection open while it stops."""
        with socket.create_connection(("127.0.0.1", rt.port), timeout=10) as s:
            s.sendall(b"GET /_/health HTTP/1.1\r\n")
            time.sleep(0.3)
            stop()
            s.sendall(b"Host: runtime\r\n\r\n")
            f = s.makefile("rb")
            status = int(f.readline().split()[1])
            headers = {}
            while (line := f.readline()) not in (b"\r\n", b""):
                k, _, v = line.decode().partition(":")
                headers[k.strip().lower()] = v.strip()
            return status, json.loads(f.read(int(headers["content-length"])))

    def test_health_stays_ok_while_a_worker_recycles(self):
        # A 503 from a recycling worker took the function out of its
        # endpoints (local driver) while its other workers served.
        rt = self.start(timeout="1", concurrency="4", workers="1")
        status, body = self.health_while_stopping(rt, lambda: self.assertEqual(rt.request("GET", "/spin")[0], 504))
        self.assertEqual((status, body["status"]), (200, "ok"))
        self.assertEqual(rt.request("GET", "/text")[0], 200)

    def test_idle_connections_close_before_the_timeout_answers(self):
        # A client that reused a kept-alive connection of the recycling
        # worker right after the 504 had its request reset (a 502 from the
        # gateway): the worker closed its idle connections only on its
        # accept loop's next tick. Now they are closed before the 504 is
        # sent, so by the time the client has it, the idle one is at EOF.
        rt = self.start(timeout="1", concurrency="4", workers="1")
        with socket.create_connection(("127.0.0.1", rt.port), timeout=10) as idle:
            idle.sendall(b"GET /text HTTP/1.1\r\nHost: runtime\r\n\r\n")
            f = idle.makefile("rb")
            self.assertIn(b" 200 ", f.readline())
            length = 0
            while (line := f.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            self.assertEqual(f.read(length), b"hello, world")
            self.assertEqual(rt.request("GET", "/spin")[0], 504)
            idle.setblocking(False)  # peek at what is there now, without waiting
            try:
                waiting = idle.recv(1, socket.MSG_PEEK)
            except BlockingIOError:
                waiting = None
            self.assertEqual(waiting, b"", "the recycled worker's idle connection is still open after its 504")
        self.assertEqual(rt.request("GET", "/text")[0], 200)

    def test_health_says_draining_after_sigterm(self):
        rt = self.start(timeout="5", workers="1")
        status, body = self.health_while_stopping(rt, lambda: (rt.proc.send_signal(signal.SIGTERM), time.sleep(0.3)))
        self.assertEqual((status, body["status"]), (503, "draining"))

    def test_sigterm_finishes_in_flight_requests(self):
        rt = self.start(timeout="5")
        out = {}

        def slow():
            out["r"] = rt.request("POST", "/slow", body=b'{"seconds": 0.8}', headers={"Content-Type": "application/json"})

        t = threading.Thread(target=slow)
        t.start()
        time.sleep(0.3)
        rt.proc.send_signal(signal.SIGTERM)
        t.join()
        self.assertEqual(out["r"][0], 200)
        self.assertEqual(out["r"][2], b"done")
        self.assertEqual(rt.proc.wait(10), 0)

    def test_import_error_keeps_health_503_and_logs_once(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "main.py"), "w") as f:
                f.write("def handler(event, context)\n    return 1\n")
            rt = RuntimeProcess(d)
            self.addCleanup(rt.stop)
            rt.wait_health(want=503)
            deadline = time.time() + 20
            while True:
                status, _, body = rt.request("GET", "/_/health")
                if json.loads(body)["status"] != "loading" or time.time() > deadline:
                    break
                time.sleep(0.05)
            self.assertEqual(status, 503)
            self.assertEqual(json.loads(body)["status"], "error")
            self.assertIn("SyntaxError", json.loads(body)["error"])
            status, _, body = rt.request("GET", "/anything")
            self.assertEqual(status, 503)
            time.sleep(0.3)
            self.assertEqual(rt.logs().count("handler failed to load"), 1)


class RecycleRaceTest(unittest.TestCase):
    """The worker's own connection handling, in this process, where the
    moment a recycle lands can be chosen."""

    def serve_with_recycle_after_line(self, n):
        """A worker serving one kept-alive connection; it recycles right
        after the connection's nth request line is read. Returns the
        client's socket and the connection's thread."""
        sys.path.insert(0, HERE)
        import runtime
        status_r, status_w = os.pipe()
        self.addCleanup(os.close, status_r)
        self.addCleanup(os.close, status_w)
        cfg = runtime.Config({"SLESS_TIMEOUT_SEC": "5", "SLESS_CONCURRENCY": "2", "SLESS_FUNCTION": "race"})
        worker = runtime.Worker(cfg, None, threading.BoundedSemaphore(2), mmap.mmap(-1, runtime.SLOT.size), 0, status_w)
        worker.handler = lambda event, context: "answered"
        lines = []

        class RecyclingReader:
            def __init__(self, raw):
                self.raw = raw

            def readline(self, limit=-1):
                line = self.raw.readline(limit)
                if line.startswith(b"POST "):
                    lines.append(line)
                    if len(lines) == n:
                        worker.recycle()
                return line

            def read(self, size=-1):
                return self.raw.read(size)

            def close(self):
                self.raw.close()

        class RacingSocket(socket.socket):
            def makefile(self, *args, **kwargs):
                return RecyclingReader(super().makefile(*args, **kwargs))

        with socket.create_server(("127.0.0.1", 0)) as listener:
            client = socket.create_connection(listener.getsockname(), timeout=10)
            self.addCleanup(client.close)
            accepted, _ = listener.accept()
        served = threading.Thread(target=worker.serve_conn, args=(RacingSocket(fileno=accepted.detach()),), daemon=True)
        served.start()
        def recycled():
            ready, _, _ = select.select([status_r], [], [], 10)
            self.assertEqual(os.read(status_r, 100) if ready else b"", b"recycle\n", "the worker did not report its recycle")
        self.addCleanup(recycled)
        return client, served

    def test_a_request_read_as_the_worker_recycles_is_answered(self):
        # A kept-alive connection's thread had read the next request line
        # but not yet marked itself busy when a recycle closed the idle
        # connections: the request was dropped (the client saw the
        # connection end with no answer).
        client, served = self.serve_with_recycle_after_line(2)
        c = http.client.HTTPConnection("127.0.0.1", 0, timeout=10)
        c.sock = client
        for i in range(2):
            with self.subTest(request=i + 1):
                c.request("POST", "/", body=b"{}")
                r = c.getresponse()
                self.assertEqual((r.status, r.read()), (200, b"answered"))
        served.join(10)
        self.assertFalse(served.is_alive(), "the connection's thread did not end after the recycle")

    def test_a_request_cut_by_the_recycle_is_not_called_malformed(self):
        # The recycle lands after a kept-alive connection's request line,
        # before the body came:
        # the request ends early because the worker closed its reading
        # side, not because the client sent a bad one, so no 400.
        client, served = self.serve_with_recycle_after_line(2)
        f = client.makefile("rb")
        client.sendall(b"POST / HTTP/1.1\r\nHost: w\r\nContent-Length: 2\r\n\r\n{}")
        self.assertIn(b" 200 ", f.readline())
        while f.readline() not in (b"\r\n", b""):
            pass
        self.assertEqual(f.read(8), b"answered")
        client.sendall(b"POST / HTTP/1.1\r\nHost: w\r\nContent-Length: 2\r\n\r\n")
        served.join(10)
        self.assertFalse(served.is_alive(), "the connection's thread did not end after the recycle")
        self.assertEqual(f.read(), b"", "an answer to a request the worker cut short")

if __name__ == "__main__":
    unittest.main()
