"""OpenTelemetry traces: on with the standard OTEL_* variables, off (and free)
without them.

In-process tests collect spans with the SDK's in-memory exporter; the
end-to-end ones run gunicorn and ``plantstore worker`` against a real OTLP
collector on loopback (``observability/conftest.py``) and follow one trace from the
caller to the receiver.
"""
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading

import pytest
import requests
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from helpers import (
    POSTGRES_URL,
    REPO,
    bearer,
    free_port,
    plantstore_env,
    run_plantstore,
    seed,
    wait_until,
)
from plantstore import db
from plantstore.observability import logs, tracing
from plantstore.settings import SettingError
from plantstore.webhooks.sending import spans as webhook_spans
from plugins.webhooks import Answer, subscribe

BACKEND = "postgresql" if POSTGRES_URL else "sqlite"


def a_traceparent(sampled=True):
    """A caller's W3C traceparent: (header value, trace id, span id)."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-{'01' if sampled else '00'}", trace_id, span_id


def without_otel_variables(environ):
    """``environ`` without any ``OTEL_*`` variable."""
    return {key: value for key, value in environ.items() if not key.startswith("OTEL_")}


# --- in process: spans collected in memory ------------------------------------

@pytest.fixture
def spans(monkeypatch):
    """Tracing on in this process, spans kept in memory; off again afterwards."""
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", tracing.SEMCONV_OPT_IN)
    exporter = InMemorySpanExporter()
    tracing.start(SimpleSpanProcessor(exporter))
    yield exporter
    tracing.shutdown()


def hex_ids(span):
    return format(span.context.trace_id, "032x"), format(span.context.span_id, "016x")


def server_span(exporter):
    [span] = [span for span in exporter.get_finished_spans() if span.kind is SpanKind.SERVER]
    return span


def children_of(exporter, parent):
    return [span for span in exporter.get_finished_spans()
            if span.parent is not None and span.parent.span_id == parent.context.span_id]


class TestTracedInProcess:
    """Requests of an app created once tracing is on, and the hooks, with the
    spans kept in memory."""

    @pytest.fixture
    def app(self, spans, app):
        """The test's app, created once tracing is on (so its requests are traced)."""
        return app

    def test_a_request_is_a_server_span_continuing_the_callers_traceparent(
            self, spans, client, alice):
        traceparent, trace_id, caller_span_id = a_traceparent()
        response = client.get("/plants?limit=10",
                              headers={**bearer(alice), "traceparent": traceparent})
        assert response.status_code == 200
        span = server_span(spans)
        assert hex_ids(span)[0] == trace_id
        assert format(span.parent.span_id, "016x") == caller_span_id and span.parent.is_remote
        assert span.name == "GET /plants"
        assert span.attributes["http.request.method"] == "GET"
        assert span.attributes["http.route"] == "/plants"
        assert span.attributes["url.path"] == "/plants"
        assert span.attributes["http.response.status_code"] == 200
        assert span.attributes["plantstore.request_id"] == response.headers["X-Request-ID"]

    def test_a_request_without_traceparent_starts_a_trace(self, spans, client, alice):
        assert client.get("/plants", headers=bearer(alice)).status_code == 200
        assert server_span(spans).parent is None

    def test_a_requests_statements_are_client_spans_with_the_db_conventions(
            self, spans, client, alice):
        client.get("/plants?limit=10", headers=bearer(alice))
        statements = children_of(spans, server_span(spans))
        assert len(statements) >= 2  # the token lookup, the page
        for span in statements:
            assert span.kind is SpanKind.CLIENT
            assert span.attributes["db.system.name"] == BACKEND
            assert span.attributes["db.query.text"].upper().startswith(span.name)
            assert "db.statement" not in span.attributes  # the stable conventions only
        assert any("FROM plant" in span.attributes["db.query.text"].replace('"', "")
               for span in statements)
        if POSTGRES_URL:
            assert {span.attributes["db.namespace"] for span in statements} == {
                POSTGRES_URL.rsplit("/", 1)[1]}
            assert {span.attributes["server.address"] for span in statements} == {"127.0.0.1"}

    def test_statements_outside_a_traced_operation_are_not_traced(self, spans, app):
        with app.app_context(), db.database.connection_context():
            db.database.execute_sql("SELECT 1").fetchone()
        assert spans.get_finished_spans() == ()

    def test_health_probes_and_metrics_are_not_traced(self, spans, client):
        for path in ("/healthz", "/readyz", "/metrics"):
            assert client.get(path).status_code == 200
        assert spans.get_finished_spans() == ()

    def test_a_failing_request_is_still_one_server_span(self, spans, client):
        response = client.get("/plants", headers={"Authorization": "Bearer pst_nope"})
        assert response.status_code == 401
        span = server_span(spans)
        assert span.attributes["http.response.status_code"] == 401
        assert children_of(spans, span)  # the token lookup ran inside it

    def test_log_lines_carry_the_active_spans_ids(self, spans):
        formatter = logs.JSONFormatter()

        def line():
            record = logging.LogRecord("plantstore.test", logging.INFO, __file__, 1,
                                       "a line", None, None)
            return json.loads(formatter.format(record))

        assert "trace_id" not in line() and "span_id" not in line()
        with webhook_spans.attempt_span("msg_1", 1, "http://127.0.0.1:9/hook", 1):
            inside = line()
        [span] = spans.get_finished_spans()
        assert (inside["trace_id"], inside["span_id"]) == hex_ids(span)

    def test_the_current_traceparent_names_the_active_span(self, spans):
        assert webhook_spans.current_traceparent() is None
        with webhook_spans.attempt_span("msg_1", 1, "http://127.0.0.1:9/hook", 1):
            traceparent = webhook_spans.current_traceparent()
        [span] = spans.get_finished_spans()
        trace_id, span_id = hex_ids(span)
        assert traceparent == f"00-{trace_id}-{span_id}-{int(span.context.trace_flags):02x}"
        assert span.context.trace_flags.sampled

    def test_an_attempt_on_a_sender_thread_is_a_child_of_the_captured_context(self, spans):
        parent_traceparent, trace_id, parent_span_id = a_traceparent()
        captured = []

        def on_request_thread():
            captured.append(webhook_spans.capture_context())

        webhook_spans.run_in_context(webhook_spans.context_of(parent_traceparent),
                                     on_request_thread)

        def on_sender_thread():
            with webhook_spans.attempt_span("msg_1", 7, "http://127.0.0.1:9/hook", 1,
                                      traceparent=None, context=captured[0]) as attempt:
                attempt.set_status_code(204)

        sender = threading.Thread(target=on_sender_thread)
        sender.start()
        sender.join(timeout=10)
        [span] = spans.get_finished_spans()
        assert span.kind is SpanKind.CLIENT and span.name == "POST"
        assert hex_ids(span)[0] == trace_id
        assert format(span.parent.span_id, "016x") == parent_span_id
        assert span.attributes["http.response.status_code"] == 204
        assert span.status.status_code is StatusCode.UNSET

    def test_run_in_context_makes_the_captured_context_current_on_another_thread(self, spans):
        traceparent, trace_id, _ = a_traceparent()
        seen = []
        context = webhook_spans.context_of(traceparent)
        thread = threading.Thread(target=webhook_spans.run_in_context,
                                  args=(context, lambda: seen.append(tracing.log_ids())))
        thread.start()
        thread.join(timeout=10)
        assert seen[0][0] == trace_id
        assert tracing.log_ids() is None  # this thread's context is untouched

    def test_a_workers_retry_joins_the_creates_trace_from_the_stored_traceparent(self, spans):
        stored, trace_id, create_span_id = a_traceparent()
        with webhook_spans.attempt_span("msg_2", 8, "https://user:pw@hooks.example:8443/in?key=s3cret",
                                  3, traceparent=stored) as attempt:
            attempt.set_status_code(503)
        [span] = spans.get_finished_spans()
        assert hex_ids(span)[0] == trace_id
        assert format(span.parent.span_id, "016x") == create_span_id
        assert span.attributes["url.full"] == "https://hooks.example:8443/in"  # no secret
        assert span.attributes["server.address"] == "hooks.example"
        assert span.attributes["server.port"] == 8443
        assert span.attributes["plantstore.webhook.message_id"] == "msg_2"
        assert span.attributes["plantstore.webhook.delivery_id"] == 8
        assert span.attributes["plantstore.webhook.attempt"] == 3
        assert span.attributes["http.request.resend_count"] == 2
        assert span.attributes["error.type"] == "503"
        assert span.status.status_code is StatusCode.ERROR

    def test_an_attempt_without_an_answer_records_its_error(self, spans):
        class Result:
            status_code = None
            error = "timeout (connect 2s, read 5s)"

        with webhook_spans.attempt_span("msg_3", 9, "http://127.0.0.1:9/hook", 1) as attempt:
            attempt.record(Result())
        [span] = spans.get_finished_spans()
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == Result.error
        assert span.attributes["error.type"] == "timeout"
        assert "http.response.status_code" not in span.attributes
        assert span.parent is None  # no stored traceparent: a trace of its own

    def test_a_stored_traceparent_that_is_not_one_starts_a_new_trace(self, spans):
        with webhook_spans.attempt_span("msg_4", 10, "http://127.0.0.1:9/hook", 2,
                                  traceparent="00-not-a-traceparent"):
            pass
        [span] = spans.get_finished_spans()
        assert span.parent is None

    def test_a_claim_is_an_internal_span_linked_to_the_creates_it_took(self, spans):
        first, first_trace, first_span = a_traceparent()
        second, second_trace, second_span = a_traceparent(sampled=False)
        with webhook_spans.claim_span() as claim:
            claim.claimed([first, None, second])
        [span] = spans.get_finished_spans()
        assert span.kind is SpanKind.INTERNAL and span.name == "claim deliveries"
        assert span.attributes["plantstore.webhook.claimed"] == 3
        assert [(format(link.context.trace_id, "032x"), format(link.context.span_id, "016x"))
                for link in span.links] == [(first_trace, first_span), (second_trace, second_span)]
        assert span.start_time <= span.end_time

    def test_an_idle_claim_leaves_no_span(self, spans):
        with webhook_spans.claim_span() as claim:
            claim.claimed([])
        with webhook_spans.claim_span():
            pass
        assert spans.get_finished_spans() == ()

    @pytest.mark.parametrize(("receivers", "restricted", "sent"), [
        ("none", False, False), ("none", True, False),
        ("operator", False, True), ("operator", True, False),
        ("all", False, True), ("all", True, True),
    ])
    def test_which_receivers_get_a_traceparent(self, spans, receivers, restricted, sent):
        with webhook_spans.attempt_span("msg_5", 11, "http://127.0.0.1:9/hook", 1):
            headers = webhook_spans.traceparent_header(receivers, restricted)
            expected = {"traceparent": webhook_spans.current_traceparent()} if sent else {}
        assert headers == expected

    def test_the_receivers_setting_defaults_to_none_and_is_checked(self, app):
        assert app.config["WEBHOOK_TRACEPARENT"] == "none"
        with pytest.raises(SettingError, match="PLANTSTORE_WEBHOOK_TRACEPARENT"):
            from plantstore.settings import read
            read(overrides={"WEBHOOK_TRACEPARENT": "everyone"})


# --- in process: tracing off ----------------------------------------------------

def test_with_tracing_off_the_hooks_do_nothing():
    assert not tracing.is_started()
    assert webhook_spans.current_traceparent() is None
    assert webhook_spans.capture_context() is None
    assert tracing.log_ids() is None
    assert webhook_spans.run_in_context(None, lambda value: value + 1, 1) == 2
    with webhook_spans.attempt_span("msg_6", 12, "http://127.0.0.1:9/hook", 1, "00-x") as attempt:
        attempt.set_status_code(500)
        attempt.set_error("timeout")
        assert webhook_spans.traceparent_header("all", False) == {}
    with webhook_spans.claim_span() as claim:
        claim.claimed([None])


@pytest.mark.parametrize(("variables", "on"), [
    ({}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": " "}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "TRUE"},
     False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "false"},
     True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"},
     False),
    ({"OTEL_SERVICE_NAME": "plantstore"}, False),
])
def test_tracing_is_on_when_an_endpoint_is_set_and_the_sdk_is_not_disabled(variables, on):
    assert tracing.enabled(variables) is on


@pytest.mark.parametrize(("variables", "named"), [
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
    ({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "udp"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
    ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
])
def test_an_unusable_exporter_setting_is_an_error_naming_its_variable(variables, named):
    with pytest.raises(SettingError, match=named):
        tracing.check_configuration({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
                                     **variables})


def test_the_service_name_is_plantstore_unless_the_environment_names_one(monkeypatch):
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")
    default = tracing._resource().attributes
    assert default["service.name"] == "plantstore"
    assert default["deployment.environment.name"] == "test"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "plants-eu")
    assert tracing._resource().attributes["service.name"] == "plants-eu"
    monkeypatch.delenv("OTEL_SERVICE_NAME")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=plants-us,service.version=9")
    attributes = tracing._resource().attributes
    assert (attributes["service.name"], attributes["service.version"]) == ("plants-us", "9")


UNTRACED_PROCESS = """
import sys, threading
from plantstore import create_app, db
app = create_app({"DATABASE_URL": sys.argv[1]})
if sys.argv[1].startswith("sqlite"):
    db.upgrade()
assert app.test_client().get("/plants").status_code == 401
# (Other libraries may import parts of the SDK: redis imports its metrics.)
print(sorted(name for name in sys.modules if name.startswith("opentelemetry.sdk.trace")
             or name.startswith("opentelemetry.exporter")
             or name.startswith("opentelemetry.instrumentation")))
print(sorted(thread.name for thread in threading.enumerate()))
"""


def test_without_variables_no_tracing_is_loaded_and_no_thread_started(database_url):
    result = subprocess.run(
        [sys.executable, "-c", UNTRACED_PROCESS, database_url], cwd=REPO, timeout=60,
        env=without_otel_variables(os.environ), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    modules, threads = result.stdout.splitlines()
    assert modules == "[]"
    assert threads == "['MainThread']"


def test_an_unusable_exporter_setting_stops_the_command_in_one_line(database_url):
    env = {**without_otel_variables(os.environ), **plantstore_env(database_url),
           "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
           "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}
    result = run_plantstore("db", "check", env=env)
    assert result.returncode == 1
    assert result.stderr.strip() == ("Error: OTEL_EXPORTER_OTLP_PROTOCOL must be one of "
                                     "http/protobuf, grpc, not 'http/json'")


# --- end to end: gunicorn, the worker and a real collector ---------------------

def caller(collector):
    """The test's own tracer, exporting to ``collector`` as service ``caller``."""
    provider = TracerProvider(resource=Resource.create({"service.name": "caller"}),
                              shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(
        OTLPSpanExporter(endpoint=collector.endpoint + "/v1/traces")))
    return provider


def call(provider, name, method, url, **kwargs):
    """Make a request inside a CLIENT span of the caller; (response, trace id, span id)."""
    with provider.get_tracer("tests").start_as_current_span(name, kind=SpanKind.CLIENT) as span:
        headers = dict(kwargs.pop("headers", {}))
        TraceContextTextMapPropagator().inject(headers)
        response = requests.request(method, url, headers=headers, timeout=10, **kwargs)
    context = span.get_span_context()
    return response, format(context.trace_id, "032x"), format(context.span_id, "016x")


def descends_from(spans, span, ancestor_id):
    """Whether ``span`` is ``ancestor_id``'s span or under it, within ``spans``."""
    by_id = {candidate.span_id: candidate for candidate in spans}
    while span is not None:
        if span.span_id == ancestor_id:
            return True
        span = by_id.get(span.parent_span_id)
    return False


def access_lines(server):
    return [json.loads(line) for line in server.stdout_lines()
            if json.loads(line)["logger"] == "gunicorn.access"]


@pytest.mark.slow
def test_one_trace_runs_from_the_caller_through_gunicorn_to_the_database(
        split_gunicorn, otlp_collector, make_token, app):
    token = make_token("alice")
    with app.app_context():
        seed("alice", range(1, 21))
    server = split_gunicorn(workers=2, env=otlp_collector.env(OTEL_SERVICE_NAME="plantstore-e2e"))
    provider = caller(otlp_collector)
    response, trace_id, caller_span_id = call(
        provider, "list plants", "GET", server.url + "/plants?limit=10", headers=bearer(token))
    provider.shutdown()
    assert response.status_code == 200 and len(response.json()) == 10

    def complete(spans):
        trace = [span for span in spans if span.trace_id == trace_id]
        servers = [span for span in trace if span.kind == "SERVER"]
        return servers and [span for span in trace if span.parent_span_id
                            == servers[0].span_id] and trace
    trace = otlp_collector.wait_for(complete, message="the request's trace")
    [caller_span] = [span for span in trace if span.span_id == caller_span_id]
    assert caller_span.resource["service.name"] == "caller"
    [request] = [span for span in trace if span.kind == "SERVER"]
    assert request.parent_span_id == caller_span_id
    assert request.name == "GET /plants"
    assert request.resource["service.name"] == "plantstore-e2e"
    assert request.resource["service.version"] == "1.0.0"
    assert request.attributes["http.response.status_code"] == 200
    statements = [span for span in trace if span.parent_span_id == request.span_id]
    assert statements and all(span.kind == "CLIENT" for span in statements)
    assert {span.attributes["db.system.name"] for span in statements} == {BACKEND}
    assert any("FROM plant" in span.attributes["db.query.text"].replace('"', "")
               for span in statements)
    # The access line, written after the span ended, leads to the same trace.
    line = wait_until(lambda: next((entry for entry in access_lines(server)
                                    if entry.get("trace_id") == trace_id), None),
                      timeout=10, message=lambda: server.stdout_lines())
    assert line["span_id"] == request.span_id and line["path"] == "/plants"
    # Probes are not traced, and their access lines carry no trace id.
    requests.get(server.url + "/healthz", headers={"X-Request-ID": "probe"}, timeout=5)
    probe = wait_until(lambda: next((entry for entry in access_lines(server)
                                     if entry.get("request_id") == "probe"), None),
                       timeout=10, message=lambda: server.stdout_lines())
    assert "trace_id" not in probe


@pytest.mark.slow
def test_a_graceful_stop_exports_the_spans_still_waiting(
        gunicorn_server, otlp_collector, make_token):
    token = make_token("alice")
    # Batches would wait ten minutes: only the stop can send them in time.
    server = gunicorn_server(workers=1, env=otlp_collector.env(OTEL_BSP_SCHEDULE_DELAY="600000"))
    traceparent, trace_id, _ = a_traceparent()
    response = requests.get(server.url + "/plants", timeout=10,
                            headers={**bearer(token), "traceparent": traceparent})
    assert response.status_code == 200
    assert otlp_collector.trace(trace_id) == []
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=30) == 0
    assert [span.kind for span in otlp_collector.trace(trace_id)].count("SERVER") == 1


@pytest.mark.slow
def test_without_variables_nothing_is_exported_and_nothing_breaks(
        gunicorn_server, otlp_collector, make_token, monkeypatch):
    for name in [name for name in os.environ if name.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    token = make_token("alice")
    server = gunicorn_server(workers=1)
    traceparent, _, _ = a_traceparent()
    headers = {**bearer(token), "traceparent": traceparent}
    created = requests.post(server.url + "/plants", json={"id": 1, "name": "fern"},
                            headers=headers, timeout=10)
    assert created.status_code == 200
    listed = requests.get(server.url + "/plants", headers=headers, timeout=10)
    assert listed.json() == [{"name": "fern"}]
    assert "traceparent" not in listed.headers
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=30) == 0
    assert otlp_collector.exports == 0


@pytest.mark.slow
def test_an_unusable_exporter_setting_stops_gunicorn_in_one_line(database_url):
    env = {**without_otel_variables(os.environ), **plantstore_env(database_url),
           "PORT": str(free_port()), "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
           "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"}
    result = subprocess.run(
        [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.conf.py", "wsgi:app"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: OTEL_EXPORTER_OTLP_PROTOCOL must be one of http/protobuf, grpc, "
        "not 'carrier-pigeon'")


RETRY_AT_ONCE = {"WEBHOOK_CONNECT_TIMEOUT": 0.5, "WEBHOOK_READ_TIMEOUT": 2,
                 "WEBHOOK_RETRY_SCHEDULE": "0", "WEBHOOK_TRACEPARENT": "operator"}


@pytest.mark.slow
@pytest.mark.app_config(RETRY_AT_ONCE)
def test_the_webhook_attempt_and_the_workers_retry_join_the_creates_trace(
        gunicorn_server, otlp_collector, make_receiver, runner, make_token, database_url):
    token = make_token("alice")
    answers = iter([Answer(status=503), Answer(status=200)])
    receiver = make_receiver(answer=lambda received: next(answers))
    subscribe(runner, receiver.url)  # an operator's receiver: it gets the traceparent
    env = otlp_collector.env(**{f"PLANTSTORE_{key}": str(value)
                                for key, value in RETRY_AT_ONCE.items()})
    server = gunicorn_server(workers=1, env=env)
    provider = caller(otlp_collector)
    response, trace_id, caller_span_id = call(
        provider, "create a plant", "POST", server.url + "/plants",
        json={"id": 1, "name": "fern"}, headers=bearer(token))
    provider.shutdown()
    assert response.status_code == 200
    first = receiver.wait_for(1)[0]

    worker_env = {**os.environ, **plantstore_env(database_url, **RETRY_AT_ONCE),
                  **otlp_collector.env()}
    wait_until(lambda: "delivered 1" in run_plantstore("worker", "--once",
                                                        env=worker_env).stdout,
               timeout=30, interval=0.2, message="the worker did not deliver the retry")
    second = receiver.wait_for(2)[1]

    def attempts(spans):
        found = [span for span in spans if span.trace_id == trace_id
                 and span.scope == "plantstore.observability.tracing" and span.kind == "CLIENT"]
        return len(found) == 2 and found
    tried = otlp_collector.wait_for(attempts, message="both attempts in the create's trace")
    trace = otlp_collector.trace(trace_id)
    [request] = [span for span in trace if span.kind == "SERVER"]
    assert request.parent_span_id == caller_span_id
    assert any(span.attributes.get("db.system.name") == BACKEND
               and span.parent_span_id == request.span_id for span in trace)
    by_attempt = {span.attributes["plantstore.webhook.attempt"]: span for span in tried}
    web, retry = by_attempt[1], by_attempt[2]
    for span in (web, retry):
        assert span.name == "POST"
        assert span.attributes["url.full"] == receiver.url
        assert span.attributes["plantstore.webhook.message_id"] == first.headers["webhook-id"]
        assert descends_from(trace, span, request.span_id)
    assert web.attributes["http.response.status_code"] == 503 and web.status == "ERROR"
    assert retry.attributes["http.response.status_code"] == 200 and retry.status == "UNSET"
    # The worker's claim links to the create; its process is a resource of its own.
    [claim] = otlp_collector.wait_for(
        lambda spans: [span for span in spans if span.name == "claim deliveries"],
        message="the worker's claim")
    assert claim.kind == "INTERNAL" and claim.attributes["plantstore.webhook.claimed"] == 1
    assert [link[0] for link in claim.links] == [trace_id]
    # The operator's receiver was told the trace, each attempt as its own parent.
    for received, span in ((first, web), (second, retry)):
        assert received.headers["traceparent"].startswith(f"00-{trace_id}-{span.span_id}-")
