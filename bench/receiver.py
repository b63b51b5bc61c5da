"""A webhook receiver for the benchmark: answers every POST with 200 after
about a millisecond, keeping connections alive, and counts what it got.

    python bench/receiver.py PORT
"""
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ANSWER_DELAY_SECONDS = 0.001


class Receiver(BaseHTTPRequestHandler):
    """Reads the delivery, waits ~1 ms, answers 200 with an empty body."""
    protocol_version = "HTTP/1.1"
    received = 0
    lock = threading.Lock()

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        time.sleep(ANSWER_DELAY_SECONDS)
        with self.lock:
            Receiver.received += 1
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        """The number of deliveries received so far, for the benchmark to check."""
        body = str(Receiver.received).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):
        """Quiet: one line per delivery would cost more than the answer."""


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Receiver)
    server.daemon_threads = True
    server.serve_forever()
