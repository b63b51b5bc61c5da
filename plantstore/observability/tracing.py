"""OpenTelemetry traces, exported over OTLP when the standard variables say so.

Tracing is on in a process when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set, unless ``OTEL_SDK_DISABLED``
is true or ``OTEL_TRACES_EXPORTER`` is ``none``. Everything else is the
OpenTelemetry SDK's to read, as the specification says: the service name
and resource, the sampler, the batch processor's ``OTEL_BSP_*``, the
exporter's headers, timeout and compression. With tracing off neither the
SDK's tracing, the exporter nor the instrumentations are imported, no
thread is started, and the hooks below cost a function call.

``start`` sets the SDK up in this process (a gunicorn worker after its fork,
``plantstore worker``, any ``plantstore`` command); ``init_app`` traces an
app's requests; ``shutdown`` flushes what is left, within ``FLUSH_SECONDS``.

What is traced: every request is a SERVER span (the Flask instrumentation,
continuing an incoming W3C ``traceparent``); each database statement run
inside a request is a CLIENT span (the psycopg2 and sqlite3
instrumentations); the webhook spans are ``webhooks/sending/spans.py``'s.
Statements run outside any span (a worker's claims, outcome batches,
housekeeping, the commands) are not traced.
"""
import atexit
import contextlib
import importlib
import importlib.util
import logging
import os
import threading

from opentelemetry import trace

from ..settings import SettingError

log = logging.getLogger(__name__)

SERVICE_NAME = "plantstore"
"""The ``service.name`` unless ``OTEL_SERVICE_NAME`` or ``OTEL_RESOURCE_ATTRIBUTES`` names one."""

FLUSH_SECONDS = 5.0
"""Longest a stopping process waits for its last spans to be exported."""

ENVIRON_KEY = "plantstore.trace"
"""Where a request's (trace id, span id) are left in the WSGI environ, for the
access log line gunicorn writes after the request's span has ended."""

UNTRACED_PATHS = r"/(healthz|readyz|metrics)(\?|$)"
"""Requests not traced unless ``OTEL_PYTHON_FLASK_EXCLUDED_URLS`` (or
``OTEL_PYTHON_EXCLUDED_URLS``) says otherwise: probes and scrapes."""

SEMCONV_OPT_IN = "http,database"
"""The instrumentations emit the stable HTTP and database semantic
conventions unless ``OTEL_SEMCONV_STABILITY_OPT_IN`` is set."""

# What OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL may name, and the module and
# package of the exporter that speaks it.
_EXPORTERS = {
    "http/protobuf": ("opentelemetry.exporter.otlp.proto.http.trace_exporter",
                      "opentelemetry-exporter-otlp-proto-http"),
    "grpc": ("opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
             "opentelemetry-exporter-otlp-proto-grpc"),
}



class _State:
    """This process's tracing: the provider, the tracer the hooks use, whose pid."""
    lock = threading.Lock()
    provider = None
    tracer = None
    pid = None


# --- configuration -----------------------------------------------------------

def _true(value):
    return (value or "").strip().lower() == "true"


def enabled(environ=None):
    """Whether the environment turns tracing on (see the module's docstring)."""
    environ = os.environ if environ is None else environ
    if _true(environ.get("OTEL_SDK_DISABLED")):
        return False
    if (environ.get("OTEL_TRACES_EXPORTER") or "otlp").strip().lower() == "none":
        return False
    return bool((environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or "").strip()
                or (environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "").strip())


def _protocol(environ):
    """The OTLP protocol the environment asks for, and the variable that says so."""
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = (environ.get(name) or "").strip()
        if value:
            return value, name
    return "http/protobuf", "OTEL_EXPORTER_OTLP_PROTOCOL"


def check_configuration(environ=None):
    """Raise ``SettingError`` (one line naming the variable) when tracing is on
    but cannot export as configured; imports nothing of the SDK."""
    environ = os.environ if environ is None else environ
    if not enabled(environ):
        return
    exporter = (environ.get("OTEL_TRACES_EXPORTER") or "otlp").strip().lower()
    if exporter != "otlp":
        raise SettingError(f"OTEL_TRACES_EXPORTER must be otlp or none, not {exporter!r}")
    protocol, variable = _protocol(environ)
    if protocol not in _EXPORTERS:
        raise SettingError(f"{variable} must be one of {', '.join(_EXPORTERS)}, "
                           f"not {protocol!r}")
    module, package = _EXPORTERS[protocol]
    if importlib.util.find_spec(module.rsplit(".", 1)[0]) is None:
        raise SettingError(f"{variable}={protocol} needs the {package} package: "
                           f"pip install {package}")


def preload():
    """Import the SDK, the exporter and the instrumentations when tracing is
    on, so that ``start`` after a fork is quick (gunicorn's master)."""
    if not enabled():
        return
    check_configuration()
    module, _ = _EXPORTERS[_protocol(os.environ)[0]]
    for name in ("opentelemetry.sdk.trace", "opentelemetry.sdk.trace.export",
                 "opentelemetry.sdk.resources", "opentelemetry.instrumentation.flask",
                 "opentelemetry.instrumentation.sqlite3", module):
        importlib.import_module(name)
    if importlib.util.find_spec("psycopg2") is not None:
        importlib.import_module("opentelemetry.instrumentation.psycopg2")


# --- setting up and stopping -------------------------------------------------

def is_started():
    """Whether tracing was set up in this process."""
    return _State.tracer is not None and _State.pid == os.getpid()


def start(processor=None):
    """Set tracing up in this process if the environment turns it on (or, for
    tests, with ``processor``, a span processor); whether it is on.

    One batch processor (one export thread) per process: call it after a
    fork, never before one. Calling it again in the same process does nothing.
    """
    if is_started():
        return True
    if processor is None and not enabled():
        return False
    with _State.lock:
        if is_started():
            return True
        from opentelemetry.sdk.trace import TracerProvider

        os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", SEMCONV_OPT_IN)
        install_globally = processor is None
        if processor is None:
            processor = _batch_processor()
        provider = TracerProvider(resource=_resource(), shutdown_on_exit=False)
        provider.add_span_processor(processor)
        if install_globally:
            trace.set_tracer_provider(provider)
            atexit.register(shutdown)
        for instrumentor in _driver_instrumentors():  # a statement's spans
            instrumentor.instrument(tracer_provider=_InsideOperations(provider))
        _State.provider, _State.pid = provider, os.getpid()
        _State.tracer = provider.get_tracer(__name__)
    return True


def _batch_processor():
    """A batch span processor exporting over OTLP as the environment says."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    check_configuration()
    module, _ = _EXPORTERS[_protocol(os.environ)[0]]
    return BatchSpanProcessor(importlib.import_module(module).OTLPSpanExporter())


def _resource():
    """The SDK's resource from the environment, with plantstore's name and
    version where the environment names none."""
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource

    from .. import __version__
    from_environment = OTELResourceDetector().detect().attributes
    defaults = {"service.name": SERVICE_NAME, "service.version": __version__}
    return Resource.create({key: value for key, value in defaults.items()
                            if key not in from_environment})


def _driver_instrumentors():
    """The instrumentors of the database drivers this process can load."""
    from opentelemetry.instrumentation.sqlite3 import SQLite3Instrumentor

    found = [SQLite3Instrumentor()]
    if importlib.util.find_spec("psycopg2") is not None:
        from opentelemetry.instrumentation.psycopg2 import Psycopg2Instrumentor
        found.append(Psycopg2Instrumentor())
    return found


def shutdown(timeout=FLUSH_SECONDS):
    """Export the spans still waiting and stop, in at most ``timeout`` seconds
    (a collector that does not answer loses them); tracing is then off."""
    with _State.lock:
        provider, started_here = _State.provider, _State.pid == os.getpid()
        _State.provider = _State.tracer = _State.pid = None
    if provider is None or not started_here:
        return
    for instrumentor in _driver_instrumentors():
        instrumentor.uninstrument()
    flushing = threading.Thread(target=provider.shutdown, name="otel-shutdown", daemon=True)
    flushing.start()
    flushing.join(timeout)
    if flushing.is_alive():
        log.warning("traces: the last spans were not exported within %gs", timeout)


class _InsideOperations(trace.TracerProvider):
    """A tracer provider whose tracers record a span only inside another one.

    Given to the database instrumentations: a statement is traced as part of
    a request, never on its own (a worker's claims, the outcome writer's
    batches, housekeeping, the commands would each make a trace of one span).
    """

    def __init__(self, provider):
        self._provider = provider

    def get_tracer(self, *args, **kwargs):
        return _InsideTracer(self._provider.get_tracer(*args, **kwargs))


class _InsideTracer(trace.Tracer):
    """A tracer recording spans only under a valid parent (see ``_InsideOperations``)."""

    def __init__(self, tracer):
        self._tracer = tracer

    def start_span(self, name, context=None, *args, **kwargs):
        if not trace.get_current_span(context).get_span_context().is_valid:
            return trace.INVALID_SPAN
        return self._tracer.start_span(name, context, *args, **kwargs)

    def start_as_current_span(self, name, context=None, *args, **kwargs):
        if not trace.get_current_span(context).get_span_context().is_valid:
            return contextlib.nullcontext(trace.INVALID_SPAN)
        return self._tracer.start_as_current_span(name, context, *args, **kwargs)


# --- requests ----------------------------------------------------------------

def init_app(app):
    """Trace ``app``'s requests when tracing is on (setting it up in this
    process if needed). Call it before anything registers ``before_request``
    hooks, so that a request's span covers them."""
    if not start():
        return
    from opentelemetry.instrumentation.flask import FlaskInstrumentor

    excluded = None if (os.environ.get("OTEL_PYTHON_FLASK_EXCLUDED_URLS")
                        or os.environ.get("OTEL_PYTHON_EXCLUDED_URLS")) else UNTRACED_PATHS
    FlaskInstrumentor.instrument_app(app, request_hook=_remember_ids,
                                     tracer_provider=_State.provider,
                                     excluded_urls=excluded, enable_commenter=False)


def _remember_ids(span, environ):
    """Leave the request span's ids in the environ, and its request id on the span."""
    ids = _hex_ids(span.get_span_context())
    if ids:
        environ[ENVIRON_KEY] = ids
        request_id = environ.get("plantstore.request_id")
        if request_id and span.is_recording():
            span.set_attribute("plantstore.request_id", request_id)


def _hex_ids(span_context):
    """(trace id, span id) in the W3C notation, or None for an invalid context."""
    if not span_context.is_valid:
        return None
    return format(span_context.trace_id, "032x"), format(span_context.span_id, "016x")


def tracer():
    """This process's tracer, or None while tracing is off."""
    return _State.tracer


def log_ids():
    """(trace id, span id) of the span active in this thread, or None."""
    if _State.tracer is None:
        return None
    return _hex_ids(trace.get_current_span().get_span_context())
