"""What a webhook receiver may be registered with: its URL and the bearer
token sent to it.

The API (``POST /webhooks``) and the command line (``plantstore webhooks
add``) both ask these functions, so what one way of registering takes the
other takes too, and a refusal says the same thing both ways. Where a URL
may lead (public addresses only, for the API's subscriptions) is a separate
question: ``ssrf.py``.
"""
from urllib.parse import urlsplit

URL_MAX_LENGTH = 2048
"""The longest receiver URL: 2,048 characters.

Every attempt sends the URL's path and query as its request line, so the
URL must fit what every server and proxy on the receiver's side accepts:
2,048 is the long-standing interoperable figure (browsers, CDNs and
sitemaps use it; servers' defaults accept 4 to 8 KB request lines) and far
above any real receiver's endpoint. It is also the larger of the two limits
the API (2,000) and the command line (2,048) used to apply, so no URL that
either way accepted is refused now.
"""

BEARER_MAX_LENGTH = 4096
"""The longest bearer token: 4,096 characters.

Receivers often expect a JWT, and signed JWTs with a few claims pass 1,000
characters; 4,096 takes them while the ``Authorization`` header stays well
inside the 8 KB header line that servers accept by default (nginx,
gunicorn). It is the larger of the two limits the command line (4,096) and
the API (1,000) used to apply.
"""

RATE_LIMIT_MAX = 10_000
"""The largest ``rate_limit``: 10,000 deliveries a second, past what one
receiver is ever sent; a limit is a receiver's protection, so any smaller
whole number of deliveries per second from 1 up is taken."""

BEARER_PATTERN = r"^[A-Za-z0-9\-._~+/]+=*$"
"""RFC 6750's ``b64token``: all that an ``Authorization: Bearer`` header
may carry, so a receiver can read the token it is sent."""

_BEARER_CHARACTERS = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/")


URL_EXAMPLE = '"https://hooks.example.com/plantstore"'
BEARER_EXAMPLE = '"rcv-token-1"'


def _with_example(sentence, example):
    """``sentence`` ending with ``e.g. <example>``: every refusal shows a valid value."""
    return f"{sentence.removesuffix('.')}, e.g. {example}."


def url_problem(url):
    """None if ``url`` may be a receiver's URL; else why not, as a sentence
    ending with an example.

    An absolute ``http://`` or ``https://`` URL with a host and a valid
    port, 1 to ``URL_MAX_LENGTH`` characters with no whitespace or control
    characters, and no credentials (they would be sent in place of the
    bearer token, and shown wherever the URL is).
    """
    problem = _url_problem(url)
    return problem and _with_example(problem, URL_EXAMPLE)


def _url_problem(url):
    if not 1 <= len(url) <= URL_MAX_LENGTH:
        return f"Must be 1 to {URL_MAX_LENGTH} characters."
    if not _is_visible_text(url):
        return ("Must not contain whitespace or control characters "
                "(percent-encode them).")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 -- raises ValueError on a malformed port
    except ValueError as error:
        return f"Is not a valid URL ({error})."
    if parts.scheme not in ("http", "https"):
        return "Must be an http:// or https:// URL; webhooks are sent only over HTTP(S)."
    if not host:
        return "Must name a host."
    if parts.username is not None or parts.password is not None:
        return ("Must not carry credentials (they would be sent instead of the bearer "
                "token); give the receiver a bearer token instead.")
    return None


def bearer_problem(token):
    """None if ``token`` may be sent as ``Authorization: Bearer <token>``;
    else why not, as a sentence ending with an example: 1 to
    ``BEARER_MAX_LENGTH`` characters of RFC 6750's ``b64token`` (letters,
    digits, ``-._~+/``, then ``=`` padding)."""
    if not 1 <= len(token) <= BEARER_MAX_LENGTH:
        return _with_example(f"Must be 1 to {BEARER_MAX_LENGTH} characters", BEARER_EXAMPLE)
    body = token.rstrip("=")
    if not body or not _BEARER_CHARACTERS.issuperset(body):
        return _with_example("Must be a bearer token (RFC 6750): letters, digits and "
                             "-._~+/ with optional = padding at the end", BEARER_EXAMPLE)
    return None


def _is_visible_text(text):
    """True when ``text`` has no whitespace and no control characters."""
    return text.isprintable() and not any(char.isspace() for char in text)
