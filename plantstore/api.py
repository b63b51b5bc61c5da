"""flask-smorest, adapted to the contract: 400 for invalid input (not 422)
and the ``{error, message}`` body for every error (not smorest's own)."""
import json
from decimal import Decimal

import flask_smorest
from flask_smorest import abort
from webargs import core
from webargs.flaskparser import FlaskParser, is_json_request

from .errors import ErrorSchema, handle_http_exception


# Integer literals longer than this are read as Decimal: Python's int() refuses
# more than 4300 digits with a ValueError, which would otherwise be a 500.
LONGEST_INT_LITERAL = 100


def _parse_int(text):
    """An integer literal of a JSON body: an int, or a Decimal when very long."""
    return int(text) if len(text) <= LONGEST_INT_LITERAL else Decimal(text)


class ArgumentsParser(FlaskParser):
    """webargs' Flask parser answering 400 when arguments fail validation."""
    DEFAULT_VALIDATION_STATUS = 400

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
    """A smorest Blueprint whose documented and real validation status is 400."""
    ARGUMENTS_PARSER = ArgumentsParser()


class Api(flask_smorest.Api):
    """A smorest Api whose errors all take the contract's shape."""
    ERROR_SCHEMA = ErrorSchema

    def handle_http_exception(self, error):
        return handle_http_exception(error)
