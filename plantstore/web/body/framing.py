"""Request bodies the app reads are capped, complete and well framed.

Every body is read through ``RequestBody``, so each way a client can send a
broken one is a 4xx in the error shape, decided here once for every route:

- over ``MAX_CONTENT_LENGTH``: 413. Flask refuses a declared
  ``Content-Length`` over the cap; a streamed body (``Transfer-Encoding:
  chunked``) is read up to one byte past the cap, and that byte is a 413
  (werkzeug alone would hand back the body truncated at the cap);
- shorter than its ``Content-Length`` (the client stopped sending or
  half-closed the connection): 400, so a truncated body is never parsed;
- malformed framing the server detects while the body is read (a chunk
  size of ``zz``, a chunk without its CRLF: gunicorn raises its own
  ``ParseException`` subclasses from ``wsgi.input``), or a connection that
  fails mid-body: 400, logged in one line as a client error.
"""
import logging
import sys

import flask
from werkzeug.exceptions import BadRequest, HTTPException, RequestEntityTooLarge
from werkzeug.utils import cached_property
from werkzeug.wsgi import LimitedStream

log = logging.getLogger(__name__)


class IncompleteBody(BadRequest):
    """The body ended before the length its Content-Length declared."""


class MalformedBody(BadRequest):
    """The server's input stream failed: bad framing or a broken connection."""
    description = ("The request body could not be read: its chunked framing is "
                   "malformed or the connection failed while it was sent.")


class RequestBody(LimitedStream):
    """The server's ``wsgi.input``, read as declared and never past the cap.

    With a ``declared`` length, exactly that many bytes (fewer is a 400);
    without one (chunked), whatever the server decodes, up to ``cap``.
    """

    def __init__(self, stream, declared, cap):
        self.declared = declared
        self.cap = sys.maxsize - 1 if cap is None else cap
        if declared is None:
            super().__init__(stream, self.cap + 1, is_max=True)
        else:
            super().__init__(stream, declared)

    def readinto(self, buffer):
        try:
            size = super().readinto(buffer)
        except HTTPException:
            raise
        except Exception as error:  # whatever the server's stream raises
            self._refuse(error)
        if self.declared is None and self._pos > self.cap:
            raise RequestEntityTooLarge()
        return size

    def on_disconnect(self, error=None):
        """The stream ended (or failed, ``error``) before the declared length."""
        if error is not None:
            self._refuse(error)
        if self.declared is not None:
            log.info("request body refused: %d of %d declared bytes received",
                     self._pos, self.declared)
            raise IncompleteBody(
                f"The request body ended after {self._pos} of the {self.declared} "
                "bytes its Content-Length declares.")

    @staticmethod
    def _refuse(error):
        log.info("request body refused: %s: %s", type(error).__name__,
                 str(error)[:200] or "-")
        raise MalformedBody() from error


class Request(flask.Request):
    """Flask's request, whose body is read through ``RequestBody``."""

    @cached_property
    def stream(self):
        environ = self.environ
        declared = self.content_length
        if self.shallow or (declared is None
                            and "wsgi.input_terminated" not in environ):
            # werkzeug's answer: an error (shallow) or an empty body.
            return super().stream
        cap = self.max_content_length
        if declared is not None and cap is not None and declared > cap:
            raise RequestEntityTooLarge()
        return RequestBody(environ["wsgi.input"], declared, cap)
