"""Keyset pages: the RFC 8288 ``Link`` header that points at the next page,
and its entry in the OpenAPI document. Every paged list builds it here."""
from urllib.parse import urlencode

from flask import request


def next_page_link(path, **query):
    """The ``Link`` header's value for the next page: ``path`` under the
    app's root, with ``query``'s pairs in order (those that are None left out)."""
    pairs = urlencode([(name, value) for name, value in query.items() if value is not None])
    return f'<{request.script_root}{path}?{pairs}>; rel="next"'


def link_header_doc(what_follows):
    """The document's entry for the ``Link`` header of a list: present when
    ``what_follows`` (e.g. "more plants") follow."""
    return {"Link": {
        "description": f'RFC 8288 link to the next page (rel="next"), present when '
                       f"{what_follows} follow",
        "schema": {"type": "string"}}}
