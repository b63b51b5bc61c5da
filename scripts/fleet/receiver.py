#!/usr/bin/env python3
"""The fleet's webhook receiver: records every attempt it gets, with the time
it arrived and the time its answer was sent, so that two attempts of one
webhook-id under way at the same moment can be seen (``records.overlaps``).

    receiver.py HOST:PORT OUT [--delay MIN[:MAX]] [--fail-first]

One JSON line per attempt is appended to OUT once it is answered:
``{"id", "plant", "peer", "arrived", "finished", "status", "timestamp", "nth"}``
(``timestamp`` is the sender's ``webhook-timestamp``; ``nth`` counts the
attempts of that id this process saw). ``--delay`` holds each answer for a
random time between MIN and MAX seconds; ``--fail-first`` answers the first
attempt of every id with a 503 (the sender retries it on its schedule) and
later ones with 200. Times are this process's clock: one clock for every
sender, whatever theirs say.
"""
import argparse
import json
import random
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 1024 * 1024


class Recorder:
    """The output file and what this process has seen per webhook-id."""

    def __init__(self, path, delay, fail_first):
        self.out = open(path, "a", encoding="utf-8", buffering=1)
        self.delay = delay
        self.fail_first = fail_first
        self.seen = {}
        self.lock = threading.Lock()

    def arrived(self, webhook_id):
        """How many attempts of ``webhook_id`` arrived, this one included."""
        with self.lock:
            self.seen[webhook_id] = nth = self.seen.get(webhook_id, 0) + 1
        return nth

    def write(self, entry):
        with self.lock:
            self.out.write(json.dumps(entry) + "\n")


class Handler(BaseHTTPRequestHandler):
    """Records each POST, answers after the configured delay."""

    protocol_version = "HTTP/1.1"  # keep-alive, as senders reuse connections
    recorder = None

    def do_POST(self):
        arrived = time.time()
        length = min(int(self.headers.get("Content-Length") or 0), MAX_BODY)
        body = self.rfile.read(length)
        webhook_id = self.headers.get("webhook-id")
        try:
            plant = json.loads(body).get("id")
        except (ValueError, AttributeError):
            plant = None
        nth = self.recorder.arrived(webhook_id)
        low, high = self.recorder.delay
        if high > 0:
            time.sleep(random.uniform(low, high))
        status = 503 if self.recorder.fail_first and nth == 1 else 200
        answer = b"{}"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)
        self.wfile.flush()
        self.recorder.write({
            "id": webhook_id, "plant": plant, "peer": self.client_address[0],
            "arrived": arrived, "finished": time.time(), "status": status,
            "timestamp": self.headers.get("webhook-timestamp"), "nth": nth})

    def log_message(self, format, *args):
        """Quiet: the recorded file is the log."""


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024


def delay_range(text):
    low, _, high = text.partition(":")
    return float(low), float(high or low)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("listen", help="HOST:PORT")
    parser.add_argument("out")
    parser.add_argument("--delay", type=delay_range, default=(0.0, 0.0))
    parser.add_argument("--fail-first", action="store_true")
    args = parser.parse_args()
    host, _, port = args.listen.rpartition(":")
    Handler.recorder = Recorder(args.out, args.delay, args.fail_first)
    server = Server((host, int(port)), Handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("listening", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
