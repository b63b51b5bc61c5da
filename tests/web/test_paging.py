"""The one builder of the next page's ``Link`` header (``web/paging.py``)."""
from flask import Flask

from plantstore.web.paging import link_header_doc, next_page_link


def test_the_link_keeps_the_query_in_order_under_the_apps_root_leaving_none_out():
    app = Flask(__name__)
    with app.test_request_context("/plants", base_url="http://localhost/store"):
        assert next_page_link("/webhooks/3/deliveries", limit=2, status=None, after=9) \
            == '</store/webhooks/3/deliveries?limit=2&after=9>; rel="next"'
        assert next_page_link("/plants", limit=1, status="failed", after=-5) \
            == '</store/plants?limit=1&status=failed&after=-5>; rel="next"'


def test_a_value_is_escaped_in_the_query():
    with Flask(__name__).test_request_context("/"):
        assert next_page_link("/x", tag="a&b c") == '</x?tag=a%26b+c>; rel="next"'


def test_the_document_says_what_follows():
    assert link_header_doc("more plants")["Link"]["description"] == (
        'RFC 8288 link to the next page (rel="next"), present when more plants follow')
