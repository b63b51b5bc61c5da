#!/usr/bin/env python3
"""A throwaway webhook receiver, for trying webhooks out and for smoke tests.

Listens on loopback, answers every POST with 204 and prints one line per
request: its path, its ``webhook-id`` and whether its signature verified.
With ``--secret-from FILE`` (the JSON answer of ``POST /webhooks``, which
holds the subscription's ``secret``) each request's Standard Webhooks
signature is verified (with the ``standardwebhooks`` package, so run it with
``.venv/bin/python``), and a request that fails is answered 400. Also appends
one JSON line per request to OUT (``{"path", "headers", "body"}``) and writes
the port it got to PORT_FILE once it listens, so callers can ask for port 0.

    .venv/bin/python scripts/webhook_receiver.py --port 9000 --secret-from webhook.json
    python3 scripts/webhook_receiver.py OUT PORT_FILE [--port N]
"""
import argparse
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 1024 * 1024


class Receiver(BaseHTTPRequestHandler):
    """Records and prints each POST it is sent, then answers 204 (400 when a
    signature it was asked to verify does not)."""
    lock = threading.Lock()
    out_path = None
    verifier = None  # a standardwebhooks.Webhook, with --secret-from

    def do_POST(self):
        """Record the request, verify it if asked, answer."""
        length = min(int(self.headers.get("Content-Length") or 0), MAX_BODY)
        raw = self.rfile.read(length)
        body = raw.decode("utf-8", "replace")
        verdict, status = self.verdict(raw)
        with self.lock:
            if self.out_path:
                entry = {"path": self.path, "headers": dict(self.headers.items()),
                         "body": body}
                with open(self.out_path, "a", encoding="utf-8") as out:
                    out.write(json.dumps(entry) + "\n")
            print(f"POST {self.path} webhook-id={self.headers.get('webhook-id')} "
                  f"{verdict}: {body}", flush=True)
        self.send_response(status)
        self.end_headers()

    def verdict(self, raw):
        """What the signature check says, and the status to answer."""
        if self.verifier is None:
            return "signature not checked (no --secret-from)", 204
        from standardwebhooks.webhooks import WebhookVerificationError
        try:
            self.verifier.verify(raw, dict(self.headers.items()))
        except WebhookVerificationError as error:
            return f"signature NOT verified ({error})", 400
        return "signature verified", 204

    def log_message(self, format, *args):
        """Stay quiet: the printed lines and the recorded file are the log."""


def verifier_from(path):
    """A verifier with the ``secret`` of the JSON file at ``path``."""
    from standardwebhooks import Webhook
    with open(path, encoding="utf-8") as answer:
        return Webhook(json.load(answer)["secret"])


def main():
    """Parse the arguments, announce the port, serve until stopped."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", help="append each request here as a JSON line")
    parser.add_argument("port_file", nargs="?", help="write the port here once listening")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--secret-from", metavar="FILE",
                        help="verify signatures with the secret in this JSON file")
    args = parser.parse_args()
    Receiver.out_path = args.out
    if args.secret_from:
        try:
            Receiver.verifier = verifier_from(args.secret_from)
        except (OSError, ValueError, KeyError, ImportError) as error:
            sys.exit(f"Error: no webhook secret in {args.secret_from}: {error!r}")
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Receiver)
    port = server.server_address[1]
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as port_file:
            port_file.write(str(port))
        # Renamed into place so a reader never sees a half-written port.
        os.replace(args.port_file + ".tmp", args.port_file)
    print(f"receiving webhooks on http://127.0.0.1:{port}/ (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
