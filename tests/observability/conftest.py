"""An OTLP/HTTP trace collector on loopback: the ``otlp_collector`` fixture.

It accepts what the OpenTelemetry exporters POST to ``/v1/traces``
(protobuf, gzip or not), decodes it with ``opentelemetry-proto`` and keeps
every span as a ``ReceivedSpan``. ``env()`` gives the ``OTEL_*`` variables
that point a plantstore process at it.
"""
import dataclasses
import gzip
import http.server
import threading

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from helpers import wait_until

KINDS = {Span.SPAN_KIND_INTERNAL: "INTERNAL", Span.SPAN_KIND_SERVER: "SERVER",
         Span.SPAN_KIND_CLIENT: "CLIENT", Span.SPAN_KIND_PRODUCER: "PRODUCER",
         Span.SPAN_KIND_CONSUMER: "CONSUMER", Span.SPAN_KIND_UNSPECIFIED: "UNSPECIFIED"}


@dataclasses.dataclass
class ReceivedSpan:
    """One exported span, ids in hex as W3C ``traceparent`` writes them."""
    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: str
    attributes: dict
    links: list  # (trace id, span id) pairs
    status: str  # "UNSET", "OK" or "ERROR"
    resource: dict
    scope: str
    start_ns: int
    end_ns: int


def _value(any_value):
    """A Python value of an OTLP ``AnyValue``."""
    field = any_value.WhichOneof("value")
    if field == "array_value":
        return [_value(item) for item in any_value.array_value.values]
    if field == "kvlist_value":
        return _attributes(any_value.kvlist_value.values)
    return getattr(any_value, field) if field else None


def _attributes(key_values):
    return {item.key: _value(item.value) for item in key_values}


def _received(span, resource, scope):
    status = {0: "UNSET", 1: "OK", 2: "ERROR"}[span.status.code]
    return ReceivedSpan(
        trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
        parent_span_id=span.parent_span_id.hex() or None, name=span.name,
        kind=KINDS[span.kind], attributes=_attributes(span.attributes),
        links=[(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
        status=status, resource=resource, scope=scope,
        start_ns=span.start_time_unix_nano, end_ns=span.end_time_unix_nano)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/v1/traces":
            self._answer(404, b"")
            return
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.server.collector.keep(request)
        self._answer(200, ExportTraceServiceResponse().SerializeToString())

    def _answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        """Silence the per-request log lines."""


class Collector:
    """An OTLP/HTTP endpoint on 127.0.0.1 keeping every span it is sent."""

    def __init__(self):
        self.spans = []
        self.exports = 0
        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.collector = self
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._server.shutdown()
        self._server.server_close()

    def keep(self, request):
        spans = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                spans += [_received(span, resource, scope_spans.scope.name)
                          for span in scope_spans.spans]
        with self._lock:
            self.spans += spans
            self.exports += 1

    def received(self):
        """The spans received so far."""
        with self._lock:
            return list(self.spans)

    def trace(self, trace_id):
        """The spans received so far of the trace ``trace_id`` (hex)."""
        return [span for span in self.received() if span.trace_id == trace_id]

    def wait_for(self, predicate, timeout=20.0, message="the spans"):
        """Wait until ``predicate(spans received)`` is true; return its value."""
        return wait_until(lambda: predicate(self.received()), timeout=timeout,
                          interval=0.05,
                          message=lambda: f"{message}; received: "
                                          f"{[(s.name, s.kind) for s in self.received()]}")

    def env(self, **variables):
        """``OTEL_*`` variables that send a process's spans here, quickly
        (the batch processor exports every 100 ms), plus ``variables``."""
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_BSP_SCHEDULE_DELAY": "100", **variables}


@pytest.fixture
def otlp_collector():
    """A running ``Collector``; stopped afterwards."""
    collector = Collector().start()
    yield collector
    collector.stop()
