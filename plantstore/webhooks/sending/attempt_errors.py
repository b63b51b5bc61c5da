"""What went wrong with an attempt that got no answer, in the words of the
people who read the delivery log: ``connection refused``, ``timed out after
5 s waiting for the answer``, ``name not resolved``, ``TLS certificate not
trusted``; never a class name, a repr or the HTTP library's internals
(``_GuardedConnection(host=..., port=...): Failed to establish ...``).

The exception requests raises wraps urllib3's, which wraps the socket's or
the TLS library's: the account is made from the first cause in that chain
that has a name here.
"""
import errno
import http.client
import re
import socket
import ssl

import requests

from ..receivers import ssrf
from . import interim

# X509_V_ERR_* codes of ssl.SSLCertVerificationError.verify_code
_CERTIFICATE_PROBLEMS = {
    10: "TLS certificate expired",
    9: "TLS certificate not yet valid",
    18: "TLS certificate not trusted (self-signed)",
    19: "TLS certificate not trusted (self-signed in its chain)",
    20: "TLS certificate not trusted (issuer unknown)",
    62: "TLS certificate does not match the host name",
}

_ERRNO_WORDS = {
    errno.ECONNREFUSED: "connection refused",
    errno.ECONNRESET: "connection reset by the receiver",
    errno.ECONNABORTED: "connection aborted",
    errno.ENETUNREACH: "network unreachable",
    errno.EHOSTUNREACH: "host unreachable",
    errno.ETIMEDOUT: "connection timed out",
    errno.EPIPE: "connection closed by the receiver while sending",
}

# "_GuardedConnection(host='127.0.0.1', port=44073): " and the like.
_POOL_REPR = re.compile(r"\b\w*(Connection|Pool)\(host=[^)]*\):\s*")


def _causes(error):
    """``error`` and what it wraps, outermost first (each at most once)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        # requests wraps urllib3's error in its args; urllib3's MaxRetryError
        # keeps its cause as ``reason``, a ProtocolError as its second
        # argument (``('Connection aborted.', RemoteDisconnected(...))``).
        wrapped = getattr(error, "reason", None)
        if not isinstance(wrapped, BaseException):
            wrapped = next((arg for arg in error.args if isinstance(arg, BaseException)),
                           None)
        error = wrapped or error.__cause__ or error.__context__


_LINE_TOO_LONG = re.compile(r"more than (\d+) bytes when reading (.+)")


def _too_long(cause):
    """A line of the answer over http.client's limit: which line, and the limit."""
    found = _LINE_TOO_LONG.search(str(cause))
    if not found:
        return "a line of the answer is too long"
    return f"a {found.group(2)} of the answer is too long (over {found.group(1)} bytes)"


def _cut_short(cause):
    """A body that ended before its Content-Length: how much of it came."""
    partial, remaining = cause.partial, cause.expected
    got = len(partial) if isinstance(partial, bytes) else partial
    if isinstance(got, int) and isinstance(remaining, int):
        return (f"the answer ended before its declared length "
                f"({got} of {got + remaining} bytes)")
    return "the answer ended before its declared length"


def _named(cause):
    """The plain words for one cause, or None when it has none here."""
    if isinstance(cause, ssrf.ForbiddenAddress):
        return f"address not allowed: {cause}"
    if isinstance(cause, ssrf.LookupTimeout):
        return f"name not resolved: {cause}"
    if isinstance(cause, socket.gaierror):
        return "name not resolved"
    if isinstance(cause, ssl.SSLCertVerificationError):
        return _CERTIFICATE_PROBLEMS.get(cause.verify_code, "TLS certificate not trusted")
    if isinstance(cause, ssl.SSLError):
        return "TLS handshake failed (is the receiver serving HTTPS on that port?)"
    if isinstance(cause, (interim.TooManyInterimAnswers, interim.SwitchedProtocols)):
        return str(cause)
    if isinstance(cause, http.client.RemoteDisconnected):
        return "connection closed by the receiver without an answer"
    if isinstance(cause, http.client.LineTooLong):
        return _too_long(cause)
    if isinstance(cause, http.client.BadStatusLine):
        return "the answer is not HTTP"
    if isinstance(cause, http.client.IncompleteRead):
        return _cut_short(cause)
    if isinstance(cause, requests.exceptions.InvalidURL):
        return f"URL not usable: {_plain(cause)}"
    if isinstance(cause, requests.exceptions.ChunkedEncodingError):
        return "the answer's chunked body is malformed"
    if isinstance(cause, requests.exceptions.ContentDecodingError):
        return "the answer's Content-Encoding could not be decoded"
    if isinstance(cause, OSError) and cause.errno in _ERRNO_WORDS:
        return _ERRNO_WORDS[cause.errno]
    return None


def _plain(error):
    """An error's text without the HTTP library's pool and connection reprs."""
    text = _POOL_REPR.sub("", str(error)).strip()
    return text.removeprefix("Failed to parse: ") or "no detail"


_PRECISE = (http.client.LineTooLong, http.client.IncompleteRead, ssl.SSLError,
            ssrf.ForbiddenAddress, ssrf.LookupTimeout, interim.TooManyInterimAnswers,
            interim.SwitchedProtocols)
"""Causes that say more than what wraps them: requests calls a body cut short
of its Content-Length a ``ChunkedEncodingError`` and a header line too long
a ``ConnectionError``."""


def describe(error):
    """A one-line account of a request that failed before any answer came."""
    causes = list(_causes(error))
    precise = [cause for cause in causes if isinstance(cause, _PRECISE)]
    for cause in precise + causes:
        words = _named(cause)
        if words:
            return words[:500]
    innermost = causes[-1]
    if isinstance(innermost, OSError) and innermost.strerror:
        return f"connection failed: {innermost.strerror[0].lower()}{innermost.strerror[1:]}"
    return f"connection failed: {_plain(innermost)}"[:500]


_OUT_OF_DESCRIPTORS = {
    errno.EMFILE: "no file descriptor left to connect: this process has too many open "
                  "files (its RLIMIT_NOFILE)",
    errno.ENFILE: "no file descriptor left to connect: the system has too many open files",
}


def out_of_descriptors(error):
    """What to say when ``error`` came of the process (or the system) having
    no file descriptor left, this process's trouble and not the receiver's;
    else None."""
    for cause in _causes(error):
        if isinstance(cause, OSError) and cause.errno in _OUT_OF_DESCRIPTORS:
            return _OUT_OF_DESCRIPTORS[cause.errno]
    return None


def timed_out(error, settings):
    """A connect, TLS handshake or read timeout, with the bound that ran out
    (the handshake runs under the connect timeout; urllib3 reports it as a
    read timeout)."""
    if any("handshake" in str(cause) for cause in _causes(error)):
        return f"timed out after {settings.connect_timeout:g} s in the TLS handshake"
    if isinstance(error, requests.ConnectTimeout):
        return f"timed out after {settings.connect_timeout:g} s connecting"
    return f"timed out after {settings.read_timeout:g} s waiting for the answer"


def cut_off(settings):
    """An answer that did not arrive complete within the attempt's deadline."""
    return (f"timed out after {settings.send_bound:g} s: the answer did not "
            "arrive complete")


INTERNAL_FAILURE = "the attempt could not be made (an internal error, logged by plantstore)"
