"""gunicorn's own error answers in the contract's ``{error, message}`` shape.

gunicorn refuses some requests before the app sees them: a request line
longer than ``limit_request_line`` (414), too many or too large header
fields (431), malformed HTTP (400). It writes those as small HTML pages;
``install`` makes it write the JSON every other error of the service has.
"""
import json

from gunicorn import util


def write_json_error(sock, status_int, reason, mesg):
    """gunicorn's ``util.write_error``, answering JSON instead of HTML."""
    message = f"{reason}: {mesg}" if mesg else reason
    if not message.endswith("."):
        message += "."
    # ensure_ascii keeps the body ASCII, so its length in characters is its
    # length in bytes and latin-1 (what gunicorn writes) can encode it.
    body = json.dumps({"error": status_int, "message": message})
    head = (f"HTTP/1.1 {status_int} {reason}\r\n"
            "Connection: close\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    util.write_nonblock(sock, (head + body).encode("latin-1"))


def install():
    """Make gunicorn (this process and the workers it forks) answer in JSON."""
    util.write_error = write_json_error
