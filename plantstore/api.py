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
  no content type.
"""
import functools
import json
from decimal import Decimal

import flask
import flask_smorest
import marshmallow as ma
from flask_smorest import abort
from webargs import core
from webargs.flaskparser import FlaskParser, is_json_request

from .auth import require_scope
from .errors import ErrorSchema, handle_http_exception
from .idempotency import IdempotencyKeyHeaderSchema, idempotent

# Integer literals longer than this are read as Decimal: Python's int() refuses
# more than 4300 digits with a ValueError, which would otherwise be a 500.
LONGEST_INT_LITERAL = 100


def _parse_int(text):
    """An integer literal of a JSON body: an int, or a Decimal when very long."""
    return int(text) if len(text) <= LONGEST_INT_LITERAL else Decimal(text)


def _is_schema(argmap):
    """True for a marshmallow Schema class or instance (not a dict or a callable)."""
    return isinstance(argmap, ma.Schema) or (
        isinstance(argmap, type) and issubclass(argmap, ma.Schema))


class ArgumentsParser(FlaskParser):
    """webargs' Flask parser answering 400 when arguments fail validation.

    Query strings repeat (``?limit=100`` on every request of a client), and
    loading one through its schema costs more than a page of plants, so the
    arguments a query string parses to are remembered, per schema, for the
    most recent ``QUERY_CACHE_SIZE`` query strings; likewise the arguments of
    a headers schema when none of its headers was sent (a create without an
    ``Idempotency-Key``). Parsing is a pure function of those inputs: a
    remembered result is the one the schema would make again. Failures are
    not remembered; they raise each time.
    """
    DEFAULT_VALIDATION_STATUS = 400
    QUERY_CACHE_SIZE = 512

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._parsed_queries = {}
        self._schemas = {}

    def _get_schema(self, argmap, req):
        """One instance per schema class, made once (webargs makes one per request).

        A marshmallow schema keeps no state between loads, so one instance
        serves every request and thread.
        """
        if isinstance(argmap, type) and issubclass(argmap, ma.Schema):
            schema = self._schemas.get(argmap)
            if schema is None:
                schema = self._schemas[argmap] = argmap()
            return schema
        return super()._get_schema(argmap, req)

    def parse(self, argmap, req=None, *, location=None, unknown=core._UNKNOWN_DEFAULT_PARAM,
              validate=None, **kwargs):
        """webargs' parse; for a query string seen lately, its remembered
        arguments; for a JSON body, the schema's ``fast_load`` when it has one
        and it takes the body."""
        if location == "json" and validate is None and hasattr(argmap, "fast_load"):
            loaded = self._fast_load_json(argmap, req or flask.request)
            if loaded is not None:
                return loaded
        req = req or flask.request
        key = None
        if validate is None and _is_schema(argmap):
            key = self._cache_key(argmap, location, unknown, req)
        if key is None:
            return super().parse(argmap, req, location=location, unknown=unknown,
                                 validate=validate, **kwargs)
        parsed = self._parsed_queries.get(key)
        if parsed is None:
            parsed = super().parse(argmap, req, location=location, unknown=unknown, **kwargs)
            if len(self._parsed_queries) >= self.QUERY_CACHE_SIZE:
                self._parsed_queries.clear()
            self._parsed_queries[key] = parsed
        return dict(parsed)

    def _cache_key(self, argmap, location, unknown, req):
        """What the arguments are a pure function of, or None to parse anew."""
        if location == "query":
            return argmap, unknown, location, req.query_string
        if location == "headers":
            fields = self._get_schema(argmap, req).fields.items()
            if not any((field.data_key or name) in req.headers for name, field in fields):
                return argmap, unknown, location, None
        return None

    def _fast_load_json(self, schema, req):
        """``schema.fast_load`` of the body, or None to load it through the schema.

        A body the fast path does not take, or cannot even read (the schema's
        own load then answers the error), goes the schema's way.
        """
        try:
            body = self._raw_load_json(req)
        except ValueError:
            return None
        return None if body is core.missing else schema.fast_load(body)

    def _raw_load_json(self, req):
        """The JSON body, read so that no input can make it fail with a 500.

        Numbers with a fraction or an exponent become exact Decimals (JSON
        Schema counts ``12.0`` as an integer; a float would round large ids),
        and nesting deeper than the parser's recursion allows is a 400.
        """
        if not is_json_request(req):
            return core.missing
        text = req.get_data(cache=True).decode("utf-8")
        try:
            return json.loads(text, parse_float=Decimal, parse_int=_parse_int)
        except RecursionError:
            abort(400, messages={"json": ["The JSON body is nested too deeply."]})


class Blueprint(flask_smorest.Blueprint):
    """A smorest Blueprint whose documented and real validation status is 400,
    with the checks every plantstore route shares."""
    ARGUMENTS_PARSER = ArgumentsParser()

    def documents_errors(self, *statuses):
        """Document the error answers (``ErrorSchema``) an operation really gives."""
        def decorate(view):
            for status in statuses:
                view = self.alt_response(status, schema=ErrorSchema)(view)
            return view
        return decorate

    def login_required(self, scope):
        """A valid bearer token with ``scope``, else 401/403; all three documented
        (the scope as the role OpenAPI 3.1 lets a bearer requirement name).

        Put it right under ``route``, so the token is checked before anything
        about the request is.
        """
        def decorate(view):
            guarded = self.documents_errors(401, 403)(require_scope(scope)(view))
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

    def idempotent(self):
        """An optional ``Idempotency-Key`` header (see ``plantstore.idempotency``):
        400 if malformed, 409 while in progress, 422 if reused for another
        request; all documented. Put it under ``login_required`` and ``json_body``."""
        def decorate(view):
            keyed = self.arguments(IdempotencyKeyHeaderSchema, location="headers",
                                   as_kwargs=True)(idempotent(view))
            return self.documents_errors(400, 409, 422)(keyed)
        return decorate


def no_content():
    """A 204 answer: no body, so no content type either."""
    response = flask.current_app.response_class(status=204)
    del response.headers["Content-Type"]
    return response


def json_response(body, status=200, headers=None):
    """A response whose body is ``body`` dumped as the app's JSON provider does."""
    return flask.current_app.response_class(
        flask.json.dumps(body), status=status, headers=headers,
        mimetype="application/json")


class App(flask.Flask):
    """Flask, whose automatic ``OPTIONS`` answer claims no content type.

    Flask answers ``OPTIONS`` with an empty body labelled ``text/html``;
    an empty answer has no media type, so the label goes.
    """

    def make_default_options_response(self):
        response = super().make_default_options_response()
        del response.headers["Content-Type"]
        return response


class Api(flask_smorest.Api):
    """A smorest Api whose errors all take the contract's shape."""
    ERROR_SCHEMA = ErrorSchema

    def handle_http_exception(self, error):
        return handle_http_exception(error)
