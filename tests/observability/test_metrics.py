"""/metrics: Prometheus text, requests by route template/method/status,
latency, webhook outcomes and the outbox backlog (its size and the oldest
due delivery's age), summed across gunicorn workers."""
import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from helpers import bearer, plantstore_env, run_plantstore, wait_until
from plantstore import create_app, db
from plantstore.db import clock
from plantstore.db.models import Delivery, Subscription


def sample(text, name, **labels):
    """The value of sample ``name`` with exactly ``labels`` (0.0 when absent)."""
    for family in text_string_to_metric_families(text):
        for found in family.samples:
            if found.name == name and found.labels == labels:
                return found.value
    return 0.0


def scrape(client):
    """The /metrics text, through the app's test client."""
    response = client.get("/metrics")
    assert response.status_code == 200
    return response.get_data(as_text=True)


def test_metrics_need_no_token_and_speak_prometheus_text(client):
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.content_type.startswith("text/plain")
    text = response.get_data(as_text=True)
    families = {family.name for family in text_string_to_metric_families(text)}
    assert {"plantstore_http_requests", "plantstore_http_request_duration_seconds",
            "plantstore_outbox_pending_deliveries"} <= families


def test_requests_are_counted_by_route_template_method_and_status(client, alice):
    before = scrape(client)
    client.post("/plants", json={"id": 7, "name": "fern"}, headers=bearer(alice))
    client.delete("/plants/7", headers=bearer(alice))
    client.delete("/plants/8", headers=bearer(alice))
    client.get("/plants")
    after = scrape(client)

    def grew(route, method, status):
        """How much the request counter of these labels grew."""
        name = "plantstore_http_requests_total"
        labels = {"route": route, "method": method, "status": str(status)}
        return sample(after, name, **labels) - sample(before, name, **labels)
    assert grew("/plants", "POST", 200) == 1
    assert grew("/plants/<plant_id:id>", "DELETE", 204) == 1
    assert grew("/plants/<plant_id:id>", "DELETE", 404) == 1
    assert grew("/plants", "GET", 401) == 1


def test_unrouted_paths_share_one_route_label(client):
    before = scrape(client)
    client.get("/wp-admin/1")
    client.get("/wp-admin/2")
    after = scrape(client)
    labels = {"route": "<unmatched>", "method": "GET", "status": "404"}
    assert (sample(after, "plantstore_http_requests_total", **labels)
            - sample(before, "plantstore_http_requests_total", **labels)) == 2
    assert "/wp-admin" not in after


def test_latency_histogram_observes_every_request(client):
    labels = {"route": "/healthz", "method": "GET"}
    before = sample(scrape(client), "plantstore_http_request_duration_seconds_count", **labels)
    for _ in range(3):
        client.get("/healthz")
    text = scrape(client)
    assert sample(text, "plantstore_http_request_duration_seconds_count", **labels) == before + 3
    assert sample(text, "plantstore_http_request_duration_seconds_bucket",
                  le="+Inf", **labels) == before + 3


def test_outbox_backlog_counts_pending_deliveries_at_scrape_time(app, client):
    with app.app_context(), db.database.atomic():
        subscription = Subscription.create(url="http://127.0.0.1:9/hook", secret="whsec_x")
        for number, status in enumerate([Delivery.PENDING, Delivery.PENDING,
                                         Delivery.DELIVERED, Delivery.FAILED]):
            Delivery.create(subscription=subscription, message_id=f"msg_{number}",
                            event_type="plant.created", payload="{}", status=status)
    assert sample(scrape(client), "plantstore_outbox_pending_deliveries") == 2
    with app.app_context(), db.database.atomic():
        Delivery.update(status=Delivery.DELIVERED).execute()
    assert sample(scrape(client), "plantstore_outbox_pending_deliveries") == 0


def test_the_oldest_due_deliverys_age_is_read_at_scrape_time(app, client):
    with app.app_context(), db.database.atomic():
        subscription = Subscription.create(url="http://127.0.0.1:9/hook", secret="whsec_x")
        for number, (due_for, lease_left) in enumerate([(90, None), (5000, 60), (-60, None)]):
            Delivery.create(subscription=subscription, message_id=f"msg_{number}",
                            event_type="plant.created", payload="{}",
                            next_attempt_at=clock.before(due_for),
                            locked_until=None if lease_left is None
                            else clock.after(lease_left))
    # The leased one and the one not yet due do not count.
    assert 90 <= sample(scrape(client), "plantstore_outbox_oldest_due_age_seconds") < 90 + 60
    with app.app_context(), db.database.atomic():
        Delivery.update(status=Delivery.DELIVERED).where(Delivery.message_id == "msg_0").execute()
    assert sample(scrape(client), "plantstore_outbox_oldest_due_age_seconds") == 0


def answering_pids(server, path):
    """The pids of the gunicorn workers whose access lines show ``path``."""
    entries = [json.loads(line) for line in server.output().splitlines()
               if line.endswith("}")]  # not a line still being written
    return {entry["pid"] for entry in entries
            if entry.get("logger") == "gunicorn.access" and entry.get("path") == path}


@pytest.mark.slow
def test_counts_are_exact_across_gunicorn_workers(gunicorn_server, alice):
    server = gunicorn_server(workers=3)

    def list_plants(_):
        """One GET /plants; its status."""
        return requests.get(server.url + "/plants", headers=bearer(alice), timeout=10).status_code
    sent = 0

    def two_workers_answered():
        """Whether two workers have answered; if not, another burst."""
        nonlocal sent
        if len(answering_pids(server, "/plants")) >= 2:
            return True
        with ThreadPoolExecutor(max_workers=6) as pool:
            assert set(pool.map(list_plants, range(20))) == {200}
        sent += 20
        return False
    # Bursts until at least two workers have answered (a worker still
    # booting under load leaves everything to the first one).
    wait_until(two_workers_answered, timeout=30, interval=0,
               message="one worker answered everything")

    scrapes = [requests.get(server.url + "/metrics", timeout=10).text for _ in range(6)]
    labels = {"route": "/plants", "method": "GET"}
    for text in scrapes:
        assert sample(text, "plantstore_http_requests_total", status="200", **labels) == sent
        assert sample(text, "plantstore_http_request_duration_seconds_count", **labels) == sent


@pytest.mark.slow
def test_webhook_deliveries_are_counted_by_outcome(gunicorn_server, runner, alice, httpserver):
    httpserver.expect_request("/delivered", method="POST").respond_with_data(status=204)
    httpserver.expect_request("/gone", method="POST").respond_with_data(status=410)
    for path in ("/delivered", "/gone"):
        added = runner.invoke(args=["webhooks", "add", httpserver.url_for(path)])
        assert added.exit_code == 0, added.output
    server = gunicorn_server(workers=2)
    created = requests.post(server.url + "/plants", json={"id": 1, "name": "fern"},
                            headers=bearer(alice), timeout=15)
    assert created.status_code == 200
    # The create's answer does not wait for its attempts: give them and
    # their outcomes a moment (a scrape may read the backlog just before the
    # outcomes commit and the counters just after), then the counts must be exact.

    def scrape_once_both_are_counted():
        """The /metrics text once two deliveries are counted and none is pending."""
        text = requests.get(server.url + "/metrics", timeout=10).text
        done = sum(sample(text, "plantstore_webhook_deliveries_total", outcome=outcome)
                   for outcome in ("delivered", "gone"))
        settled = sample(text, "plantstore_outbox_pending_deliveries") == 0
        return text if done >= 2 and settled else None
    text = wait_until(scrape_once_both_are_counted, timeout=10, interval=0.1,
                      message="the two deliveries were not counted")
    assert sample(text, "plantstore_webhook_deliveries_total", outcome="delivered") == 1
    assert sample(text, "plantstore_webhook_deliveries_total", outcome="gone") == 1
    assert sample(text, "plantstore_outbox_pending_deliveries") == 0


@pytest.mark.slow
def test_deliveries_by_the_webhook_worker_count_in_the_web_scrape(
        gunicorn_server, app, runner, database_url, httpserver, tmp_path):
    metrics_dir = tmp_path / "metrics"
    httpserver.expect_request("/hook", method="POST").respond_with_data(status=204)
    added = runner.invoke(args=["webhooks", "add", httpserver.url_for("/hook")])
    assert added.exit_code == 0, added.output
    with app.app_context(), db.database.atomic():
        Delivery.create(subscription=Subscription.get(), message_id="msg_worker",
                        event_type="plant.created", payload='{"id": 1, "name": "fern"}',
                        next_attempt_at=clock.before(120))
    server = gunicorn_server(workers=2, env={"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)})
    before = [requests.get(server.url + "/metrics", timeout=10).text for _ in range(4)]
    for text in before:  # whichever worker answers
        assert sample(text, "plantstore_outbox_pending_deliveries") == 1
        assert 120 <= sample(text, "plantstore_outbox_oldest_due_age_seconds") < 120 + 60
    worker = run_plantstore(
        "worker", "--once", cwd=None,
        env={**os.environ, **plantstore_env(database_url),
             "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)})
    assert worker.returncode == 0, worker.stderr
    after = requests.get(server.url + "/metrics", timeout=10).text
    assert sample(after, "plantstore_webhook_deliveries_total", outcome="delivered") == 1
    assert sample(after, "plantstore_outbox_pending_deliveries") == 0
    assert sample(after, "plantstore_outbox_oldest_due_age_seconds") == 0


def test_metrics_still_answer_when_the_database_is_down(tmp_path):
    unreachable = create_app({"TESTING": True,
                              "DATABASE_URL": f"sqlite:///{tmp_path / 'missing' / 'x.db'}"})
    response = unreachable.test_client().get("/metrics")
    assert response.status_code == 200
    text = response.get_data(as_text=True)
    assert "plantstore_http_requests_total" in text
    assert "plantstore_outbox_pending_deliveries" not in text
    assert "plantstore_outbox_oldest_due_age_seconds" not in text
