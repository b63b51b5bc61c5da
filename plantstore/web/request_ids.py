"""Request ids: every request gets one, returned in ``X-Request-ID`` and logged.

The client's ``X-Request-ID`` is kept when it is sane (1 to 128 characters
of ``[A-Za-z0-9._-]``, nothing token-shaped); otherwise a fresh id is made.
The id is left in the WSGI environ (the access log's) and, while the request
is served, in ``logs.serving_request_id`` (every log line's).
"""
import re
import secrets

from ..observability.logs import REQUEST_ID_ENVIRON_KEY, redact, serving_request_id

REQUEST_ID_HEADER = "X-Request-ID"
SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")


def request_id_from(header_value):
    """The client's request id if it is sane (and no token), else a new one."""
    if header_value and SANE_REQUEST_ID.fullmatch(header_value) \
            and redact(header_value) == header_value:
        return header_value
    return secrets.token_hex(16)


class RequestIdMiddleware:
    """WSGI middleware giving every request an id, returned on its response.

    Done at the WSGI level rather than in Flask hooks: it costs a request
    one function call, and errors answered by any layer still carry the id.
    """

    def __init__(self, wsgi_app):
        self.wsgi_app = wsgi_app

    def __call__(self, environ, start_response):
        request_id = request_id_from(environ.get("HTTP_X_REQUEST_ID"))
        environ[REQUEST_ID_ENVIRON_KEY] = request_id

        def start_with_request_id(status, headers, exc_info=None):
            headers.append((REQUEST_ID_HEADER, request_id))
            return start_response(status, headers, exc_info)
        serving = serving_request_id.set(request_id)
        try:
            return self.wsgi_app(environ, start_with_request_id)
        finally:
            serving_request_id.reset(serving)


def init_request_ids(app):
    """Give every request of ``app`` an id (see ``RequestIdMiddleware``)."""
    app.wsgi_app = RequestIdMiddleware(app.wsgi_app)
