"""The request body cap (``MAX_CONTENT_LENGTH``), enforced on every body.

Flask refuses a declared ``Content-Length`` over the cap with a 413. A body
streamed without one (``Transfer-Encoding: chunked``) is different: werkzeug
stops reading at the cap and hands back the bytes read so far, so an
oversized body would be parsed truncated (a 400, or a padded body accepted).
Here such a body is read up to one byte past the cap, and that byte is a 413.
"""
import flask
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.utils import cached_property
from werkzeug.wsgi import LimitedStream, get_input_stream


class CappedStream(LimitedStream):
    """A streamed body that raises 413 as soon as it passes ``cap`` bytes."""

    def __init__(self, stream, cap):
        super().__init__(stream, cap + 1, is_max=True)
        self.cap = cap
        self.received = 0

    def readinto(self, buffer):
        size = super().readinto(buffer)
        self.received += size or 0
        if self.received > self.cap:
            raise RequestEntityTooLarge()
        return size


class Request(flask.Request):
    """Flask's request, whose body stream enforces the cap without Content-Length."""

    @cached_property
    def stream(self):
        cap = self.max_content_length
        streamed = (self.content_length is None
                    and "wsgi.input_terminated" in self.environ)
        if self.shallow or cap is None or not streamed:
            return super().stream
        return CappedStream(self.environ["wsgi.input"], cap)
