"""An endpoint's form, read from a POST: the same checks the API's schemas
make (``receivers``), each problem kept by field for the form shown again."""
import re

from ..webhooks.receivers import registration as receivers

WHOLE_NUMBER = re.compile(r"[0-9]{1,6}")


def _rate_limit(text, problems):
    """A rate limit typed in a form: blank for none, else 1 to the most."""
    text = text.strip()
    if not text:
        return None
    if WHOLE_NUMBER.fullmatch(text) and 1 <= int(text) <= receivers.RATE_LIMIT_MAX:
        return int(text)
    problems["rate_limit"] = (f"Type a whole number of deliveries a second from 1 to "
                              f"{receivers.RATE_LIMIT_MAX}, e.g. 5, or leave it blank "
                              "for no limit.")
    return None


def endpoint_fields(form, editing=False):
    """(values for ``operations``, problems by field) from a submitted form.

    Adding: ``url`` (required), ``bearer`` (blank: none), ``rate_limit``.
    Editing: the same, where a blank bearer keeps the one stored unless
    ``remove_bearer`` is ticked.
    """
    problems, values = {}, {}
    url = form.get("url", "").strip()
    problem = receivers.url_problem(url) if url else "Type the URL to send events to."
    if problem:
        problems["url"] = problem
    values["url"] = url
    bearer = form.get("bearer", "")
    if form.get("remove_bearer"):
        values["bearer"] = None
    elif bearer:
        problem = receivers.bearer_problem(bearer)
        if problem:
            problems["bearer"] = problem
        values["bearer"] = bearer
    elif not editing:
        values["bearer"] = None
    values["rate_limit"] = _rate_limit(form.get("rate_limit", ""), problems)
    return values, problems
