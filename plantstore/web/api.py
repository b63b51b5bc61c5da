"""flask-smorest, adapted to the contract, and the plumbing every route shares.

- 400 for invalid input (not 422) and the ``{error, message}`` body for
  every error (not smorest's own);
- ``Blueprint.login_required``: a bearer token with a scope, enforced and
  its 401/403 answers documented; ``Blueprint.json_body``: a JSON body
  (415 otherwise) parsed by a schema; ``Blueprint.idempotent``: the
  ``Idempotency-Key`` header, enforced and documented;
  ``Blueprint.documents_errors``;
- ``json_response``: an answer already shaped by the view (the measured
  fast paths that skip a schema's dump);
- ``App``: Flask, whose automatic ``OPTIONS`` answer (an empty body) has
  no content type, whose routing redirects are paths (``redirects.py``),
  and whose every JSON answer is written one way (``AnswerJSON``).
"""
import functools
import json
import types
from inspect import CO_COROUTINE

import flask
import flask_smorest
import marshmallow as ma
from flask.json.provider import DefaultJSONProvider
from flask_smorest import abort
from webargs import core
from webargs.flaskparser import FlaskParser, is_json_request

from .auth import require_scope
from .body import decoding as json_body
from .errors import handle_http_exception
from .idempotency import HEADER as IDEMPOTENCY_HEADER
from .idempotency import IdempotencyKeyHeaderSchema, idempotent
from .redirects import options_of_target, raise_redirect


class ArgumentsParser(FlaskParser):
    """webargs' Flask parser, answering 400 when arguments fail validation."""
    DEFAULT_VALIDATION_STATUS = 400

    def _raw_load_json(self, req):
        """The JSON body, read so that no input can make it fail with a 500
        (see ``json_body``)."""
        if not is_json_request(req):
            return core.missing
        return json_body.loads(req.get_data(cache=True).decode("utf-8"))

    def _handle_invalid_json_error(self, error, req, *args, **kwargs):
        """A body that is not JSON: where it stops being JSON, and what is expected."""
        if isinstance(error, UnicodeDecodeError):
            where = f"byte {error.start + 1} is not UTF-8"
        else:
            where = f"{error.msg.lower()} at line {error.lineno}, column {error.colno}"
        abort(400, messages={"json": [
            f"The body is not JSON ({where}); send one JSON object, e.g. "
            '{"name": "Fern"}, as the document at /docs/ shows for this route.']})


class Blueprint(flask_smorest.Blueprint):
    """A smorest Blueprint whose documented and real validation status is 400,
    with the checks every plantstore route shares."""
    ARGUMENTS_PARSER = ArgumentsParser()

    def arguments(self, schema, **kwargs):
        """flask-smorest's ``arguments``, with a schema class instantiated
        once, here: given a class, webargs makes an instance per request,
        copying every field."""
        # Kept for creates: without it 1.19x the CPU per create and 0.56x
        # the creates per second (make bench-ab AB_B_CHECKOUT=..., SQLite,
        # medians of 5 paired runs); in process, 1.25x a create's CPU on
        # SQLite, 1.24x on PostgreSQL.
        return super().arguments(schema() if isinstance(schema, type) else schema, **kwargs)

    @staticmethod
    def doc(**kwargs):
        """flask-smorest's ``doc``, documenting ``view`` without wrapping it."""
        return _documenting(flask_smorest.Blueprint.doc(**kwargs))

    def alt_response(self, status_code, *args, **kwargs):
        """flask-smorest's ``alt_response``, documenting ``view`` without wrapping it."""
        return _documenting(super().alt_response(status_code, *args, **kwargs))

    def documents_errors(self, *statuses):
        """Document the error answers (``ErrorSchema``) an operation really gives."""
        def decorate(view):
            for status in statuses:
                view = self.alt_response(status, schema=ErrorSchema)(view)
            return view
        return decorate

    def login_required(self, scope, checked_by_write=None):
        """A valid bearer token with ``scope``, else 401/403; all three documented
        (the scope as the role OpenAPI 3.1 lets a bearer requirement name).

        Put it right under ``route``, so the token is checked before anything
        about the request is (``checked_by_write``: a function saying, per
        request, whether the view's write checks it, see ``auth.require_scope``).
        """
        def decorate(view):
            guarded = self.documents_errors(401, 403)(
                require_scope(scope, checked_by_write)(view))
            return self.doc(security=[{"bearerAuth": [scope]}])(guarded)
        return decorate

    def json_body(self, schema, **kwargs):
        """A JSON body loaded by ``schema`` (passed as the view's argument);
        415 if the body is not declared JSON, 413 past the size cap."""
        def decorate(view):
            loaded = self.arguments(schema, **kwargs)(view)

            @functools.wraps(loaded)
            def checked(*args, **kw):
                if not flask.request.is_json:
                    abort(415, message="The request body must be JSON "
                                       "(Content-Type: application/json).")
                return loaded(*args, **kw)
            return self.documents_errors(413, 415)(checked)
        return decorate

    def idempotent(self, claimed_by_write=None):
        """An optional ``Idempotency-Key`` header (see ``plantstore.web.idempotency``):
        400 if malformed, 409 while in progress, 422 if reused for another
        request; all documented. Put it under ``login_required`` and ``json_body``.
        ``claimed_by_write``: see ``idempotency.idempotent``."""
        def decorate(view):
            run = idempotent(view, claimed_by_write)
            keyed = self.arguments(IdempotencyKeyHeaderSchema, location="headers",
                                   as_kwargs=True)(run)

            @functools.wraps(keyed)
            def read_key(*args, **kwargs):
                """The view, given the key parsed by the schema when the
                header is there; without it, the view as the schema would
                run it (no key), without parsing every header for none."""
                # Kept for creates: without it, in process, a SQLite create
                # ran 1.08x the instructions (valgrind, 2026-11-29).
                if IDEMPOTENCY_HEADER not in flask.request.headers:
                    return run(*args, **kwargs)
                return keyed(*args, **kwargs)
            return self.documents_errors(400, 409, 422)(read_key)
        return decorate


def _documenting(decorator):
    """A flask-smorest decorator that only documents a view, made to add
    nothing to a request: the view it returns is a copy of the one given
    (the same code, no call more), carrying the ``_apidoc`` the smorest
    decorator's wrapper would. smorest's own wrapper calls the view through
    ``current_app.ensure_sync`` at every request; a create went through
    ten of them (the errors each route documents, its ``doc``)."""
    # Kept for every route: without it, in process, a create ran 1.08x the
    # instructions, a list of 10 1.04x, a list of 100 1.02x (valgrind's
    # instruction count, SQLite and PostgreSQL alike; 2026-11-28).
    def decorate(view):
        documented = decorator(view)
        copy = types.FunctionType(view.__code__, view.__globals__, view.__name__,
                                  view.__defaults__, view.__closure__)
        functools.update_wrapper(copy, view, updated=())
        copy.__kwdefaults__ = view.__kwdefaults__
        copy.__dict__.update(view.__dict__)
        copy._apidoc = documented._apidoc
        return copy
    return decorate


def no_content():
    """A 204 answer: no body, so no content type either."""
    response = flask.current_app.response_class(status=204)
    del response.headers["Content-Type"]
    return response


def json_response(body, status=200, headers=None):
    """A response whose body is ``body`` dumped as the app's JSON provider does."""
    app = flask.current_app._get_current_object()
    return app.response_class(app.json.dumps(body), status=status, headers=headers or None,
                              mimetype="application/json")


class AnswerJSON(DefaultJSONProvider):
    """Every JSON answer in one style: ``{"name": "Fern", "tag": "green"}``.

    A space after ``:`` and ``,``, keys in the order schemas declare them,
    no trailing newline, ASCII only (``\\u00e9``). Flask's ``jsonify`` (which
    flask-smorest's ``response`` and dicts returned by views use) would
    otherwise write compact JSON with a newline while ``flask.json.dumps``
    (the error shape, ``json_response``) writes the spaced style.
    """
    sort_keys = False
    _encoder = None  # (the settings it was made with, a JSONEncoder)

    def dumps(self, obj, **kwargs):
        """``json.dumps`` as Flask's provider calls it, with one encoder made
        once for this provider's settings (``json.dumps`` given ``default``
        makes one per call)."""
        # Kept for every JSON answer: without it (and json_body's decoders
        # made once), in process, a create ran 1.03x the instructions, a list
        # of 10 1.02-1.03x, a list of 100 1.02x (valgrind, 2026-11-28).
        if kwargs:
            return super().dumps(obj, **kwargs)
        made = self._encoder
        settings = (self.default, self.ensure_ascii, self.sort_keys)
        if made is None or made[0] != settings:
            made = self._encoder = (settings, json.JSONEncoder(
                default=self.default, ensure_ascii=self.ensure_ascii, sort_keys=self.sort_keys))
        return made[1].encode(obj)

    def response(self, *args, **kwargs):
        body = self.dumps(self._prepare_response_obj(args, kwargs))
        return self._app.response_class(body, mimetype=self.mimetype)


class App(flask.Flask):
    """Flask, whose JSON answers share one style (``AnswerJSON``) and whose
    automatic ``OPTIONS`` answer claims no content type.

    Flask answers ``OPTIONS`` with an empty body labelled ``text/html``;
    an empty answer has no media type, so the label goes.
    """
    json_provider_class = AnswerJSON

    def ensure_sync(self, func):
        """Flask's, answering at once for a plain function (a view, a hook):
        one look at its code's flags, instead of ``inspect`` unwrapping it,
        five times a request."""
        # Kept for every route: without it, in process, a SQLite list of 10
        # ran 1.02x the instructions (valgrind, 2026-11-29).
        if type(func) is types.FunctionType and not func.__code__.co_flags & CO_COROUTINE:
            return func
        return super().ensure_sync(func)

    def make_default_options_response(self):
        response = super().make_default_options_response()
        del response.headers["Content-Type"]
        return response

    def dispatch_request(self):
        """Flask's, but ``OPTIONS`` of a path routing would redirect is
        answered as its target would answer it (``redirects.py``)."""
        if flask.request.method == "OPTIONS":
            answer = options_of_target(self, flask.request.routing_exception)
            if answer is not None:
                return answer
        return super().dispatch_request()

    def raise_routing_exception(self, request):
        """Flask's, but a redirect routing asks for is a path on this host in
        the contract's shape, never built from ``Host`` (``redirects.py``)."""
        raise_redirect(request.routing_exception)
        super().raise_routing_exception(request)


class ErrorSchema(ma.Schema):
    """An error answer (documentation of the shape ``errors.error_response`` writes)."""
    error = ma.fields.Integer(required=True, metadata={
        "description": "The HTTP status code", "format": "int32"})
    message = ma.fields.String(required=True, metadata={
        "description": "What went wrong, as a sentence"})
    details = ma.fields.Dict(
        keys=ma.fields.String(), values=ma.fields.List(ma.fields.String()),
        metadata={"description": "Validation messages by field"})


class Api(flask_smorest.Api):
    """A smorest Api whose errors all take the contract's shape."""
    ERROR_SCHEMA = ErrorSchema

    def handle_http_exception(self, error):
        return handle_http_exception(error)
