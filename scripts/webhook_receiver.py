#!/usr/bin/env python3
"""A throwaway webhook receiver for smoke tests.

Listens on loopback, answers every POST with 204, and appends one JSON line
per request to OUT: ``{"path", "headers", "body"}``. The port it got is
written to PORT_FILE once it listens (so callers can ask for port 0).

    python3 scripts/webhook_receiver.py OUT PORT_FILE [--port N]
"""
import argparse
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 1024 * 1024


class Receiver(BaseHTTPRequestHandler):
    """Records each POST it is sent, then answers 204."""
    lock = threading.Lock()
    out_path = None

    def do_POST(self):
        """Record the request, answer 204 No Content."""
        length = min(int(self.headers.get("Content-Length") or 0), MAX_BODY)
        body = self.rfile.read(length).decode("utf-8", "replace")
        entry = {"path": self.path, "headers": dict(self.headers.items()), "body": body}
        with self.lock, open(self.out_path, "a", encoding="utf-8") as out:
            out.write(json.dumps(entry) + "\n")
        self.send_response(204)
        self.end_headers()

    def log_message(self, format, *args):
        """Stay quiet: the recorded file is the log."""


def main():
    """Parse the arguments, announce the port, serve until killed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("port_file")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    Receiver.out_path = args.out
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Receiver)
    with open(args.port_file + ".tmp", "w") as port_file:
        port_file.write(str(server.server_address[1]))
    # Renamed into place so a reader never sees a half-written port.
    os.replace(args.port_file + ".tmp", args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
