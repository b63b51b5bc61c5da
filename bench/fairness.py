"""Fair delivery in ``make bench``: a quiet user's webhooks while another
user's receivers are slow but healthy.

User A has ``WEBHOOK_MAX_PER_USER`` (10) subscriptions whose receivers
answer 200 after 3 s (inside every timeout, so no circuit breaker opens);
user B has one receiver that answers at once. A creates with 3 clients and
B with 2 for BENCH_FAIR_SECONDS (20), one ``plantstore worker`` running
beside the web server. For each of B's plants, its delay is the time from
the create's answer to the event's arrival at B's receiver (one clock: the
same machine). Reported: B's p95 and largest delay, and how many of B's
events had not arrived 10 s after the load.
"""
import http.server
import json
import os
import statistics
import subprocess
import threading
import time

import requests

import servers
import webhooks

SLOW_SECONDS = 3.0
WAIT_AFTER_SECONDS = 10.0


class _Receiver(http.server.ThreadingHTTPServer):
    """A receiver on loopback that answers after ``delay`` and notes when
    each plant's event arrived (time.monotonic())."""
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, delay):
        self.delay = delay
        self.arrivals = {}
        super().__init__(("127.0.0.1", 0), _Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        arrived = time.monotonic()
        self.server.arrivals.setdefault(json.loads(body)["id"], arrived)
        if self.server.delay:
            time.sleep(self.server.delay)  # a slow, healthy receiver
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def _token(venv_bin, url, user):
    webhooks.plantstore(venv_bin, "users", "create", user, url=url)
    return webhooks.plantstore(venv_bin, "tokens", "create", user, url=url).stdout.strip()


def _subscribe(base_url, token, receiver_url):
    answer = requests.post(f"{base_url}/webhooks", json={"url": receiver_url}, timeout=30,
                           headers={"Authorization": f"Bearer {token}"})
    answer.raise_for_status()


def _creator(base_url, token, ids, until, answered):
    """Create plants with the given ids until ``until``; note each answer's time."""
    with requests.Session() as session:
        for plant_id in ids:
            if time.monotonic() >= until:
                return
            response = session.post(f"{base_url}/plants", json={"id": plant_id, "name": "p"},
                                    headers={"Authorization": f"Bearer {token}"}, timeout=60)
            if response.status_code == 200:
                answered[plant_id] = time.monotonic()


def measure_fairness(workdir, started, venv_bin, database_url, seconds):
    """B's delivery delays while A's ten receivers take 3 s each."""
    webhooks.plantstore(venv_bin, "db", "upgrade", url=database_url)
    env = {**webhooks.ENV, "PLANTSTORE_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8"}
    server = servers.plantstore(database_url, workdir, venv_bin, name="plantstore-fair",
                                env=env)
    started.append(server)
    server.start()
    worker = subprocess.Popen([str(venv_bin / "plantstore"), "worker"], start_new_session=True,
                              env={**os.environ, **env,
                                   "PLANTSTORE_DATABASE_URL": database_url})
    slow = [_Receiver(SLOW_SECONDS) for _ in range(10)]
    quiet = _Receiver(0)
    try:
        token_a, token_b = _token(venv_bin, database_url, "a"), _token(venv_bin, database_url, "b")
        for receiver in slow:
            _subscribe(server.url, token_a, receiver.url)
        _subscribe(server.url, token_b, quiet.url)
        print(f"fair delivery: A (10 receivers, {SLOW_SECONDS:g} s each) and B for "
              f"{seconds}s", flush=True)
        until = time.monotonic() + seconds
        answered_a, answered_b = {}, {}
        clients = [threading.Thread(target=_creator, args=(
            server.url, token_a, range(n * 10**6, (n + 1) * 10**6), until, answered_a))
            for n in range(3)]
        clients += [threading.Thread(target=_creator, args=(
            server.url, token_b, range((10 + n) * 10**6, (11 + n) * 10**6), until, answered_b))
            for n in range(2)]
        for client in clients:
            client.start()
        for client in clients:
            client.join()
        load_ended = time.monotonic()
        while (time.monotonic() < load_ended + WAIT_AFTER_SECONDS
               and len(quiet.arrivals) < len(answered_b)):
            time.sleep(0.1)
        delays = sorted(quiet.arrivals[plant_id] - at for plant_id, at in answered_b.items()
                        if plant_id in quiet.arrivals)
        result = {
            "created A": len(answered_a), "created B": len(answered_b),
            "B p95 s": statistics.quantiles(delays, n=20)[18] if len(delays) > 1 else float("nan"),
            "B max s": delays[-1] if delays else float("nan"),
            "B missing 10 s after": len(answered_b) - len(quiet.arrivals),
            "A delivered": sum(len(receiver.arrivals) for receiver in slow),
        }
        print(f"  {result}", flush=True)
        return result
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
        server.stop()
        for receiver in [*slow, quiet]:
            receiver.shutdown()
