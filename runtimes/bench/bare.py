"""Bare baseline for the runtime benchmark: the standard library's threaded
HTTP server with keep-alive and TCP_NODELAY, answering every request with
the body the benchmark handler returns, written in one buffer. BARE_WORKERS
processes serve the one listening socket, as many as the wrapper's workers."""
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BODY = b"hello, world"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_GET(self):
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY))

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256


server = Server(("127.0.0.1", int(os.environ["PORT"])), Handler)
for _ in range(int(os.environ.get("BARE_WORKERS", "1")) - 1):
    if os.fork() == 0:
        break
server.serve_forever()
