"""flask-smorest, adapted to the contract: 400 for invalid input (not 422)
and the ``{error, message}`` body for every error (not smorest's own)."""
import flask_smorest
from webargs.flaskparser import FlaskParser

from .errors import ErrorSchema, handle_http_exception


class ArgumentsParser(FlaskParser):
    """webargs' Flask parser answering 400 when arguments fail validation."""
    DEFAULT_VALIDATION_STATUS = 400


class Blueprint(flask_smorest.Blueprint):
    """A smorest Blueprint whose documented and real validation status is 400."""
    ARGUMENTS_PARSER = ArgumentsParser()


class Api(flask_smorest.Api):
    """A smorest Api whose errors all take the contract's shape."""
    ERROR_SCHEMA = ErrorSchema

    def handle_http_exception(self, error):
        return handle_http_exception(error)
