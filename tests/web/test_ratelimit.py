"""Rate limits: per caller, 429 in the error shape with Flask-Limiter's headers,
never on the probes, metrics and docs, exact across gunicorn workers with
Redis, and failing open while Redis is away or hung, at the cost of one
timeout per period."""
import concurrent.futures
import logging
import shutil
import signal
import subprocess
import time

import pytest
import redis
import requests

from helpers import assert_error, bearer, free_port, system_program_missing, wait_until

SHARED_REDIS = "redis://127.0.0.1:6379/7"  # this suite's own database number
RATE_HEADERS = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")
UNLIMITED_PATHS = ("/healthz", "/readyz", "/metrics", "/openapi.json", "/docs/")


@pytest.fixture
def app_config():
    return {"RATE_LIMIT": "3/minute", "RATE_LIMIT_STORAGE_URI": "memory://"}


def test_a_caller_over_the_limit_gets_429_in_the_error_shape(client, alice):
    for remaining in (2, 1, 0):
        response = client.get("/plants", headers=bearer(alice))
        assert response.status_code == 200
        assert response.headers["X-RateLimit-Limit"] == "3"
        assert response.headers["X-RateLimit-Remaining"] == str(remaining)
        assert int(response.headers["X-RateLimit-Reset"]) > time.time()
    refused = client.post("/plants", headers=bearer(alice), json={"id": 1, "name": "x"})
    assert_error(refused, 429)
    assert 0 < int(refused.headers["Retry-After"]) <= 60
    assert all(name in refused.headers for name in RATE_HEADERS)


def test_two_tokens_have_independent_budgets(client, alice, bob):
    for _ in range(3):
        assert client.get("/plants", headers=bearer(alice)).status_code == 200
    assert client.get("/plants", headers=bearer(alice)).status_code == 429
    response = client.get("/plants", headers=bearer(bob))
    assert response.status_code == 200
    assert response.headers["X-RateLimit-Remaining"] == "2"


def test_two_tokens_of_one_user_share_its_budget(client, make_token):
    first, second = make_token("carol"), make_token("carol")
    for token in (first, second, first):
        assert client.get("/plants", headers=bearer(token)).status_code == 200
    assert client.get("/plants", headers=bearer(second)).status_code == 429


def test_requests_without_a_valid_token_are_limited_by_address(client, alice):
    for headers in ({}, bearer("pst_not-a-token"), {}):
        assert client.get("/plants", headers=headers).status_code == 401
    assert_error(client.get("/plants", headers=bearer("pst_another")), 429)
    # The address's budget is not the user's.
    assert client.get("/plants", headers=bearer(alice)).status_code == 200


@pytest.mark.parametrize("app_config", [{"RATE_LIMIT": "3/minute;2/hour"}])
def test_several_limits_are_all_counted_and_the_spent_one_is_shown(client, alice):
    # The shortest window is shown while none is spent ...
    for remaining in (2, 1):
        response = client.get("/plants", headers=bearer(alice))
        assert response.status_code == 200
        assert response.headers["X-RateLimit-Limit"] == "3"
        assert response.headers["X-RateLimit-Remaining"] == str(remaining)
        assert int(response.headers["X-RateLimit-Reset"]) <= time.time() + 61
    # ... then the one that refuses the request: here the hour's.
    refused = client.get("/plants", headers=bearer(alice))
    assert_error(refused, 429)
    assert refused.headers["X-RateLimit-Limit"] == "2"
    assert refused.headers["X-RateLimit-Remaining"] == "0"
    assert int(refused.headers["X-RateLimit-Reset"]) > time.time() + 3000
    assert int(refused.headers["Retry-After"]) > 3000
    # Once the shorter window is spent too, it is the one that refuses.
    refused = client.get("/plants", headers=bearer(alice))
    assert_error(refused, 429)
    assert refused.headers["X-RateLimit-Limit"] == "3"
    assert 0 < int(refused.headers["Retry-After"]) <= 60


def test_probes_metrics_and_docs_are_never_limited(client):
    for _ in range(5):
        for path in UNLIMITED_PATHS:
            response = client.get(path)
            assert response.status_code == 200, path
            assert "X-RateLimit-Limit" not in response.headers, path


@pytest.mark.parametrize("app_config", [{}, {"RATE_LIMIT": "3/minute"}])
def test_the_document_shows_429_and_the_headers_on_every_operation(client):
    document = client.get("/openapi.json").get_json()
    assert document["components"]["responses"]["TooManyRequests"]["headers"].keys() == {
        "Retry-After", *RATE_HEADERS}
    operations = [operation for path in document["paths"].values()
                  for method, operation in path.items() if method != "parameters"]
    assert len(operations) >= 3
    for operation in operations:
        responses = operation["responses"]
        assert responses["429"] == {"$ref": "#/components/responses/TooManyRequests"}
        assert set(RATE_HEADERS) <= responses["401"]["headers"].keys()


@pytest.mark.parametrize("app_config", [{}])
def test_without_a_limit_nothing_is_limited_nor_announced(client, alice):
    for _ in range(5):
        response = client.get("/plants", headers=bearer(alice))
        assert response.status_code == 200
        assert "X-RateLimit-Limit" not in response.headers


# --- real gunicorn, real Redis -------------------------------------------------

@pytest.fixture
def shared_redis():
    """Database 7 of the shared Redis, empty before and after the test."""
    client = redis.Redis.from_url(SHARED_REDIS, socket_timeout=5)
    try:
        client.flushdb()
    except redis.ConnectionError:
        client.close()
        system_program_missing("no Redis answers at 127.0.0.1:6379 "
                               "(apt-get install redis-server)")
    yield client
    client.flushdb()
    client.close()


class OwnRedis:
    """A redis-server of the test's own on a free loopback port."""

    def __init__(self):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process = None

    def start(self):
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self.answers, interval=0.05, message="redis-server answering")
        return self

    def answers(self):
        """Whether the server answers a PING."""
        client = redis.Redis(port=self.port, socket_timeout=1)
        try:
            return client.ping()
        except redis.ConnectionError:
            return False
        finally:
            client.close()

    def hang(self):
        """Stop the server (SIGSTOP): connections are accepted, never answered."""
        self.process.send_signal(signal.SIGSTOP)

    def wake(self):
        """Let a hung server go on (SIGCONT), its counts as they were."""
        self.process.send_signal(signal.SIGCONT)

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)  # a stopped process ends only once woken
            self.process.kill()
            self.process.wait(timeout=10)


@pytest.fixture
def own_redis():
    if shutil.which("redis-server") is None:
        system_program_missing("redis-server is missing (apt-get install redis-server)")
    server = OwnRedis()
    yield server
    server.stop()


HUNG_TIMEOUT = 0.5
"""Each Redis call's timeout in the hung-Redis test: what every request would
pay if each asked the hung Redis (the bound below is 150 ms)."""


class TestHungRedis:
    """Redis accepting connections but never answering (SIGSTOP)."""

    @pytest.fixture
    def app_config(self, own_redis):
        own_redis.start()
        return {"RATE_LIMIT": "5/minute", "RATE_LIMIT_STORAGE_URI": own_redis.url,
                "RATE_LIMIT_REDIS_TIMEOUT": HUNG_TIMEOUT, "RATE_LIMIT_FAIL_OPEN_SECONDS": 5}

    def test_a_hung_redis_costs_one_timeout_then_nothing_and_limits_resume(
            self, client, alice, own_redis, caplog):
        def timed_get():
            """GET /plants as alice; the response and its seconds."""
            started = time.monotonic()
            response = client.get("/plants", headers=bearer(alice))
            return response, time.monotonic() - started

        assert [timed_get()[0].status_code for _ in range(6)] == [200] * 5 + [429]
        failures_before = _storage_failures_in(client)
        caplog.set_level(logging.INFO, logger="plantstore.web.rate_limiter")

        own_redis.hang()
        first, _ = timed_get()  # pays the timeout once, and is served
        during = [timed_get() for _ in range(10)]

        assert first.status_code == 200 and "X-RateLimit-Limit" not in first.headers
        for response, seconds in during:
            assert response.status_code == 200
            assert "X-RateLimit-Limit" not in response.headers
            # In-process requests take a few ms; asking the hung Redis would
            # cost HUNG_TIMEOUT (500 ms) each.
            assert seconds < HUNG_TIMEOUT / 2, [round(took, 3) for _, took in during]
        assert _storage_failures_in(client) - failures_before == 11
        warnings = [record for record in caplog.records
                    if "rate limit storage unreachable" in record.getMessage()]
        assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING

        own_redis.wake()
        # Within one fail-open period (5 s) a request asks Redis again: the
        # window's count is still there, spent.
        refused = wait_until(lambda: client.get("/plants", headers=bearer(alice)).status_code
                             == 429 or None, timeout=20, interval=0.1,
                             message="limits applying again after Redis woke")
        assert refused
        again = client.get("/plants", headers=bearer(alice))
        assert_error(again, 429)
        assert again.headers["X-RateLimit-Limit"] == "5"
        assert any("answers again" in record.getMessage() for record in caplog.records)


def _storage_failures_in(client):
    """plantstore_rate_limit_storage_failures_total, scraped through ``client``."""
    for line in client.get("/metrics").get_data(as_text=True).splitlines():
        if line.startswith("plantstore_rate_limit_storage_failures_total "):
            return float(line.split()[1])
    return 0.0


def _get(server, token, path="/plants"):
    """One request on a fresh connection (so gunicorn spreads them over workers)."""
    return requests.get(server.url + path, headers=bearer(token), timeout=10)


def _storage_failures(server):
    metrics = requests.get(server.url + "/metrics", timeout=10).text
    for line in metrics.splitlines():
        if line.startswith("plantstore_rate_limit_storage_failures_total "):
            return float(line.split()[1])
    return 0.0


@pytest.mark.slow
def test_a_limit_is_exact_across_gunicorn_workers(gunicorn_server, shared_redis, alice, bob):
    server = gunicorn_server(workers=3, env={
        "PLANTSTORE_RATE_LIMIT": "25/minute", "PLANTSTORE_RATE_LIMIT_STORAGE_URI": SHARED_REDIS})
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: _get(server, alice), range(40)))
    statuses = sorted(answer.status_code for answer in answers)
    assert statuses == [200] * 25 + [429] * 15
    refused = next(answer for answer in answers if answer.status_code == 429)
    assert refused.json()["error"] == 429
    assert int(refused.headers["Retry-After"]) > 0
    # Another token has its own budget; the probes and docs have none.
    assert _get(server, bob).headers["X-RateLimit-Remaining"] == "24"
    for path in UNLIMITED_PATHS:
        assert _get(server, alice, path).status_code == 200, path


@pytest.mark.slow
def test_every_worker_tells_the_same_window(gunicorn_server, shared_redis, alice):
    server = gunicorn_server(workers=3, env={
        "PLANTSTORE_RATE_LIMIT": "30/minute", "PLANTSTORE_RATE_LIMIT_STORAGE_URI": SHARED_REDIS})
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: _get(server, alice), range(24)))
    assert [answer.status_code for answer in answers] == [200] * 24
    # Each request was counted once: every remaining count is told exactly once.
    assert sorted(int(answer.headers["X-RateLimit-Remaining"]) for answer in answers) == \
        list(range(6, 30))
    # One window, whichever worker answered (Redis tells its end in whole seconds).
    resets = {int(answer.headers["X-RateLimit-Reset"]) for answer in answers}
    assert max(resets) - min(resets) <= 1
    assert time.time() < min(resets) <= time.time() + 61


@pytest.mark.slow
def test_redis_going_away_fails_open_and_limits_resume_when_it_is_back(
        gunicorn_server, own_redis, alice):
    own_redis.start()
    server = gunicorn_server(workers=2, env={
        "PLANTSTORE_RATE_LIMIT": "3/minute", "PLANTSTORE_RATE_LIMIT_STORAGE_URI": own_redis.url,
        "PLANTSTORE_RATE_LIMIT_FAIL_OPEN_SECONDS": "1"})
    assert [_get(server, alice).status_code for _ in range(4)] == [200, 200, 200, 429]

    own_redis.stop()
    during = [_get(server, alice) for _ in range(6)]
    assert [answer.status_code for answer in during] == [200] * 6
    assert all("X-RateLimit-Limit" not in answer.headers for answer in during)
    assert _storage_failures(server) >= 6
    assert "rate limit storage unreachable" in server.output()

    own_redis.start()  # same port, empty: a fresh window

    def limited_in_every_worker():
        """Whether a burst of 8 gets at most the 3 allowed (each worker asks
        Redis again once its fail-open second has passed)."""
        return [_get(server, alice).status_code for _ in range(8)].count(429) >= 5
    wait_until(limited_in_every_worker, timeout=20, interval=0.2,
               message="limits applying again in every worker")
