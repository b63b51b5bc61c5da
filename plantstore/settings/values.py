"""The kinds of value a setting takes: each parser reads a raw value (text
from the environment, or a Python value handed to ``create_app``), bounds
it, raises ``ValueError`` saying what is allowed, and carries ``allowed``,
the same in words for docs/settings.md.
"""
import ipaddress
import math
import re

_INTEGER = re.compile(r"-?[0-9]+")
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?|-?\.[0-9]+([eE][+-]?[0-9]+)?")


def integer(minimum, maximum):
    """A parser of whole numbers from ``minimum`` to ``maximum``."""
    def parse(raw):
        if isinstance(raw, str) and _INTEGER.fullmatch(raw.strip()):
            value = int(raw.strip())
        elif isinstance(raw, int) and not isinstance(raw, bool):
            value = raw
        else:
            raise ValueError(f"must be a whole number, not {raw!r}")
        if not minimum <= value <= maximum:
            raise ValueError(f"must be from {minimum} to {maximum}, not {raw!r}")
        return value
    parse.allowed = f"{minimum} to {maximum}"
    return parse


def _seconds_value(raw):
    """A finite number of seconds from text (ASCII decimal notation) or a number.

    ``float()`` alone would also take ``1_0``, ``nan``, ``inf`` and
    non-ASCII digits.
    """
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise ValueError(f"must be a number, not {raw!r}")
    if isinstance(raw, str) and not _NUMBER.fullmatch(raw.strip()):
        raise ValueError(f"must be a number in decimal notation, not {raw!r}")
    value = float(raw)
    if not math.isfinite(value):
        raise ValueError(f"must be a finite number, not {raw!r}")
    return value


def number(minimum, maximum, above_minimum=False):
    """A parser of numbers from ``minimum`` (excluded if ``above_minimum``) to ``maximum``."""
    def parse(raw):
        value = _seconds_value(raw)
        if value > maximum or value < minimum or (above_minimum and value == minimum):
            low = f"above {minimum:g}" if above_minimum else f"from {minimum:g}"
            raise ValueError(f"must be {low} to {maximum:g}, not {raw!r}")
        return value
    parse.allowed = f"{'above' if above_minimum else 'from'} {minimum:g} to {maximum:g}"
    return parse


def schedule(longest, most_steps):
    """A parser of comma-separated delays in seconds (``5,300,1800``); empty: none."""
    step = number(0, longest)

    def parse(raw):
        if isinstance(raw, (list, tuple)):
            items = list(raw)
        elif isinstance(raw, str):
            items = [part.strip() for part in raw.strip("[] ").split(",") if part.strip()]
        else:
            items = [raw]
        if len(items) > most_steps:
            raise ValueError(f"must have at most {most_steps} delays, not {len(items)}")
        try:
            return tuple(step(item) for item in items)
        except ValueError as error:
            raise ValueError(f"must be seconds, comma-separated (e.g. 5,300,1800): "
                             f"a delay {error}") from None
    parse.allowed = f"at most {most_steps} delays, each {step.allowed} s"
    return parse


def text(pattern, description, shown=repr):
    """A parser of text matching ``pattern`` (a regular expression); a value
    refused is quoted as ``shown`` makes it (``url``: its password hidden)."""
    compiled = re.compile(pattern)

    def parse(raw):
        if not isinstance(raw, str) or not compiled.fullmatch(raw):
            raise ValueError(f"must be {description}, not {shown(raw)}")
        return raw
    parse.allowed = description
    return parse


def redacted_url(url):
    """``url`` with the password of its user info as ``***``. The user info
    runs to the last ``@``, so a password holding an unencoded ``/``, ``#``,
    ``?`` or ``@`` (which URL parsers cut short) is hidden whole."""
    scheme, separator, rest = url.partition("://")
    userinfo, at, place = rest.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    if not (separator and at and colon):
        return url
    return f"{scheme}://{user}:***@{place}"


def quoted_url(raw):
    """A URL quoted in an error line: its password hidden (``redacted_url``)."""
    return repr(redacted_url(raw)) if isinstance(raw, str) else repr(raw)


def rate_limits(raw):
    """Flask-Limiter's notation (``600/minute``; several separated by ``;``), or
    empty for none."""
    if not isinstance(raw, str):
        raise ValueError(f"must be limits like 600/minute, not {raw!r}")
    if raw.strip():
        import limits  # with its storages: only where a limit is set
        try:
            limits.parse_many(raw)
        except ValueError:
            raise ValueError(f"must be limits like 600/minute or 10/second;600/hour, "
                             f"not {raw!r}") from None
    return raw.strip()


rate_limits.allowed = "empty (no limit), or limits like `600/minute;20/second`"


def networks(most):
    """A parser of comma-separated CIDR networks (``10.0.0.0/8,fd00::/8``); empty: none."""
    def parse(raw):
        if isinstance(raw, (list, tuple)):
            items = [str(item).strip() for item in raw]
        elif isinstance(raw, str):
            items = [part.strip() for part in raw.split(",") if part.strip()]
        else:
            raise ValueError(f"must be comma-separated CIDR networks, not {raw!r}")
        if len(items) > most:
            raise ValueError(f"must list at most {most} networks, not {len(items)}")
        try:
            return tuple(ipaddress.ip_network(item, strict=True) for item in items)
        except ValueError as error:
            raise ValueError(f"must be comma-separated CIDR networks such as "
                             f"10.0.0.0/8 (host bits unset): {error}") from None
    parse.allowed = f"at most {most} CIDR networks, comma-separated"
    return parse
