"""One HTTP attempt at a delivery, with requests, and what came of it.

Bounded on every side: connect and read timeouts, the whole attempt cut off
at their sum even if a receiver trickles its answer (``deadline``),
redirects never followed (a 3xx is an answer like any other non-2xx), and
at most ``max_response_bytes`` of the response read. Every thread of a
process sends through one requests transport adapter per subscription,
which keeps its own keep-alive connections (``connections``): no two
tenants share one. No ``requests.Session`` is involved:
no cookies (a receiver cannot plant any), no proxies or ``.netrc``
credentials from the environment, no redirects. Requests are built from a
per-URL template whose URL is parsed once.
"""
import dataclasses
import datetime
import email.utils
import functools
import logging
import re
import time

import requests

from ...db.clock import local_now
from ...encryption import SecretUnreadable, reveal
from ..engine.receiver_text import EXCERPT_CHARS, storable
from ..receivers.secrets import signing_secrets
from . import attempt_errors, connections, spans
from .deadline import LeaseRanOut, NotWritten, attempt_deadline
from .own_trouble import NotSent
from .signing import signature_headers

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SendResult:
    """What one attempt gave: a status code or an error, and how long it took."""
    started_at: datetime.datetime
    duration_ms: int
    status_code: int | None = None
    error: str | None = None
    retry_after: float | None = None  # seconds, from a 429/503's Retry-After
    response_body: str | None = None  # the start of the answer's body, storable

    @property
    def ok(self):
        """A 2xx within the timeout: the receiver has the event."""
        return self.status_code is not None and 200 <= self.status_code < 300

    def summary(self):
        """A short line for the delivery's ``last_error``."""
        if self.status_code is not None:
            text = f"HTTP {self.status_code}"
            return f"{text}: {self.error}" if self.error else text
        return self.error


@functools.lru_cache(maxsize=256)
def _template(url):
    """A POST to ``url`` with the URL already parsed and checked (copy it)."""
    return requests.Request("POST", url).prepare()


def _prepared(url, headers, body):
    """The request of one attempt: the URL's template with these headers and body."""
    prepared = _template(url).copy()
    prepared.prepare_headers(headers)
    prepared.prepare_body(body, None)
    return prepared


DELAY_SECONDS = re.compile(r"[0-9]+", re.ASCII)
"""A Retry-After in seconds: ASCII digits only (RFC 9110's delay-seconds)."""


def parse_retry_after(value, now=None):
    """Seconds a ``Retry-After`` value asks to wait (delay-seconds or an HTTP
    date), or None for anything else (which is ignored)."""
    if not value:
        return None
    value = value.strip()
    if DELAY_SECONDS.fullmatch(value):
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return max(0.0, (when - now).total_seconds())


def _read_capped(response, limit):
    """At most ``limit`` bytes of the body."""
    body = bytearray()
    for chunk in response.iter_content(chunk_size=8192):
        body += chunk
        if len(body) >= limit:
            return bytes(body[:limit])
    return bytes(body)


def _excerpt(body):
    """The start of a response body, as storable text, for the attempt log."""
    return storable(body.decode("utf-8", errors="replace").strip()) or None


def attempt(job, settings, context=None, still_current=None):
    """One attempt at ``job``, in its trace span (whose parent is ``context``,
    the create's, or the delivery's stored traceparent): its ``SendResult``,
    never an exception (a bug must not lose the delivery: it is retried).
    ``NotSent`` when this process could not send it, ``NotWritten`` when
    ``still_current()`` refused it once connected (nothing left it)."""
    with spans.attempt_span(job.message_id, job.delivery_id, job.url, job.attempts + 1,
                            job.traceparent, context, job.event_type) as span:
        started_at, clock = local_now(), time.monotonic()
        try:
            result = send(job, settings, still_current)
        except (NotSent, NotWritten):
            raise
        except Exception:
            log.exception("delivery %s: the attempt could not be made", job.delivery_id)
            result = SendResult(started_at, int((time.monotonic() - clock) * 1000),
                                error=attempt_errors.INTERNAL_FAILURE)
        span.record(result)
        return result


def _headers(job, settings):
    """The attempt's headers, signed; ``NotSent`` if this process cannot open
    the subscription's secret or bearer token (a key it lacks)."""
    timestamp = datetime.datetime.now(datetime.timezone.utc)
    try:
        headers = {
            "Content-Type": "application/json",
            "User-Agent": settings.user_agent,
            **signature_headers(job.message_id, timestamp, job.payload, signing_secrets(job)),
        }
        if job.bearer_token:
            headers["Authorization"] = f"Bearer {reveal(job.bearer_token)}"
    except SecretUnreadable as error:
        raise NotSent("no key", str(error)) from None
    headers.update(spans.traceparent_header(settings.traceparent_receivers, job.restricted))
    return headers


def send(job, settings, still_current=None):
    """POST ``job``'s payload to its receiver once; never raises for HTTP
    trouble. ``NotSent`` for this process's own trouble before the first byte
    left: a secret it cannot open, no descriptor left to connect with, a
    lease that ran out before the request was written, an error before it
    was; ``NotWritten`` when ``still_current()``, called once connected,
    refused it."""
    started_at = local_now()
    headers = _headers(job, settings)
    clock = time.monotonic()

    def elapsed_ms():
        return int((time.monotonic() - clock) * 1000)

    with attempt_deadline(settings.send_bound, job.latest_start(settings.send_bound),
                          still_current) as attempt:
        try:
            response = connections.adapter_for(job, settings).send(
                _prepared(job.url, headers, job.payload.encode("utf-8")),
                timeout=(settings.connect_timeout, settings.read_timeout), stream=True)
            try:
                body = _read_capped(response, settings.max_response_bytes)
            finally:
                attempt.end()  # before its connection goes back to the pool
                response.close()  # closes the connection if the answer was not read to its end
        except LeaseRanOut as error:
            raise NotSent("lease ran out", str(error)) from None
        except (NotSent, NotWritten):
            raise
        except requests.Timeout as error:
            return SendResult(started_at, elapsed_ms(),
                              error=attempt_errors.timed_out(error, settings))
        except requests.RequestException as error:
            running_out = attempt_errors.out_of_descriptors(error)
            if running_out and not attempt.written:
                raise NotSent("out of file descriptors", running_out) from None
            if not attempt.cut:
                return SendResult(started_at, elapsed_ms(), error=attempt_errors.describe(error))
        except Exception as error:
            if attempt.written:
                raise
            raise NotSent("internal error", f"an internal error before the request: {error!r}"
                          ) from None
        if attempt.cut:  # whatever was parsed of a cut-off answer is not an answer
            return SendResult(started_at, elapsed_ms(),
                              error=attempt_errors.cut_off(settings))
    status = response.status_code
    retry_after = None
    if status in (429, 503):
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
    excerpt, detail = _excerpt(body[:4 * EXCERPT_CHARS]), None
    if not 200 <= status < 300:
        detail = excerpt
        location = response.headers.get("Location")
        if 300 <= status < 400 and location:
            detail = storable(f"redirect to {storable(location)} not followed")
    return SendResult(started_at, elapsed_ms(), status_code=status, error=detail,
                      retry_after=retry_after, response_body=excerpt)
