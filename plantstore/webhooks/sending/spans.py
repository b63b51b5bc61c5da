"""The webhook queue's traces, all cheap no-ops while tracing is off
(``plantstore/observability/tracing.py`` sets tracing up):

- ``current_traceparent`` (stored with a delivery), ``capture_context`` and
  ``run_in_context`` (to carry a request's context to a sender thread),
  ``context_of`` (the context of a stored traceparent);
- ``attempt_span``: one HTTP CLIENT span per attempt;
- ``claim_span``: one INTERNAL span per worker claim, linked to the
  creates it claimed;
- ``traceparent_header``: the header a receiver may get.
"""
import contextlib
import time
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ...observability import tracing

_PROPAGATOR = TraceContextTextMapPropagator()


def current_traceparent():
    """The W3C ``traceparent`` of the span active in this thread (None when
    tracing is off or no span is active): stored with a delivery, so that
    later attempts join the create's trace."""
    if tracing.tracer() is None:
        return None
    carrier = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


def capture_context():
    """This thread's OpenTelemetry context (None when tracing is off), to hand
    to another thread (``run_in_context``, ``attempt_span(context=...)``)."""
    if tracing.tracer() is None:
        return None
    return otel_context.get_current()


def run_in_context(captured, function, *args, **kwargs):
    """Call ``function`` with the context ``capture_context`` returned active."""
    if captured is None:
        return function(*args, **kwargs)
    token = otel_context.attach(captured)
    try:
        return function(*args, **kwargs)
    finally:
        otel_context.detach(token)


def context_of(traceparent):
    """The context continuing a stored ``traceparent``, or None if it is not one."""
    if not traceparent:
        return None
    continued = _PROPAGATOR.extract({"traceparent": traceparent})
    if not trace.get_current_span(continued).get_span_context().is_valid:
        return None
    return continued


class Attempt:
    """The span of one webhook attempt, as ``attempt_span`` yields it.

    Tell it what came of the attempt: ``record(result)`` with the sender's
    result (anything with ``status_code`` and ``error``), or
    ``set_status_code(code)`` / ``set_error(text)``. An answer of 400 or
    more, or an error, marks the span as failed, as the HTTP semantic
    conventions say for client spans.
    """

    def __init__(self, span):
        self.span = span

    def set_status_code(self, code):
        """The receiver answered with HTTP status ``code``."""
        self.span.set_attribute("http.response.status_code", code)
        if code >= 400:
            self.span.set_attribute("error.type", str(code))
            self.span.set_status(StatusCode.ERROR)

    def set_error(self, text):
        """No answer came (timeout, refused, cut off at the deadline): ``text`` says why."""
        self.span.set_attribute("error.type", _error_type(text))
        self.span.set_status(StatusCode.ERROR, text[:500])

    def record(self, result):
        """Record a sender result: its status code if it has one, else its error."""
        if result.status_code is not None:
            self.set_status_code(result.status_code)
        elif result.error:
            self.set_error(result.error)


class _UntracedAttempt(Attempt):
    """What ``attempt_span`` yields while tracing is off: records nothing."""

    def __init__(self):
        super().__init__(trace.INVALID_SPAN)

    def set_status_code(self, code):
        pass

    def set_error(self, text):
        pass


_UNTRACED_ATTEMPT = _UntracedAttempt()


def _error_type(text):
    """A low-cardinality class of an attempt's error text (``timeout``,
    ``connection failed``, ``deadline``, an exception's name), as ``error.type``."""
    label = text.split(":", 1)[0].split("(", 1)[0].strip()
    return label[:64] or "_OTHER"


def _url_attributes(url):
    """HTTP client attributes of a receiver's URL, without credentials or query
    (a receiver's URL may carry a secret in its query string)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname or ""
    literal = f"[{host}]" if ":" in host else host
    shown = literal if parts.port is None else f"{literal}:{parts.port}"
    return {"url.full": f"{parts.scheme}://{shown}{parts.path or '/'}",
            "server.address": host, "server.port": port}


@contextlib.contextmanager
def attempt_span(message_id, delivery_id, url, attempt_number, traceparent=None,
                 context=None, event_type=None):
    """The span of one webhook attempt, active in this thread while it runs;
    yields an ``Attempt`` to record its outcome on.

    It is the attempt's HTTP CLIENT span (``POST``, with the HTTP semantic
    conventions' attributes and the delivery's): the sender's transport
    adapter is called directly, so no HTTP instrumentation adds another.
    Its parent is ``context`` (what ``capture_context`` returned on the
    create's request thread, for the web process's own attempt), else the
    delivery's stored ``traceparent`` (a worker's retry joins the create's
    trace), else the context active in this thread.
    """
    if tracing.tracer() is None:
        yield _UNTRACED_ATTEMPT
        return
    parent = context if context is not None else context_of(traceparent)
    attributes = {
        "http.request.method": "POST",
        **_url_attributes(url),
        "plantstore.webhook.message_id": message_id,
        "plantstore.webhook.delivery_id": delivery_id,
        "plantstore.webhook.attempt": attempt_number,
    }
    if event_type is not None:
        attributes["plantstore.webhook.event_type"] = event_type
    if attempt_number > 1:
        attributes["http.request.resend_count"] = attempt_number - 1
    with tracing.tracer().start_as_current_span("POST", context=parent, kind=SpanKind.CLIENT,
                                             attributes=attributes) as span:
        yield Attempt(span)


class Claim:
    """What ``claim_span`` yields: tell it which deliveries were claimed."""

    def __init__(self):
        self.started_ns = time.time_ns()
        self.traceparents = None

    def claimed(self, traceparents):
        """The claim took deliveries whose stored traceparents (None where a
        delivery has none) are ``traceparents``, one per delivery."""
        self.traceparents = list(traceparents)


@contextlib.contextmanager
def claim_span():
    """Around a worker's claim: an INTERNAL span ``claim deliveries`` from the
    claim's start to its end, with how many it took
    (``plantstore.webhook.claimed``) and a link to each claimed delivery's
    create. A claim that took nothing (an idle poll) leaves no span::

        with spans.claim_span() as claim:
            jobs = claim_due(...)
            claim.claimed(job.traceparent for job in jobs)
    """
    claim = Claim()
    yield claim
    if tracing.tracer() is None or not claim.traceparents:
        return
    links = []
    for traceparent in claim.traceparents:
        created = context_of(traceparent)
        if created is not None:
            links.append(trace.Link(trace.get_current_span(created).get_span_context()))
    span = tracing.tracer().start_span(
        "claim deliveries", kind=SpanKind.INTERNAL, start_time=claim.started_ns, links=links,
        attributes={"plantstore.webhook.claimed": len(claim.traceparents)})
    span.end()


def traceparent_header(receivers, restricted):
    """The ``traceparent`` header for a webhook request made inside its
    ``attempt_span``, if ``receivers`` (``PLANTSTORE_WEBHOOK_TRACEPARENT``)
    allows it for this subscription (``restricted``: one a user added through
    the API, rather than an operator with ``plantstore webhooks add``); else
    no header. Nothing else of the context (no baggage, no tracestate) is sent.
    """
    if receivers == "none" or (receivers == "operator" and restricted):
        return {}
    traceparent = current_traceparent()
    return {"traceparent": traceparent} if traceparent else {}
