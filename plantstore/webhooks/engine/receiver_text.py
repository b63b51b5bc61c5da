"""Text a receiver sent back, made storable and bounded before it is stored.

Everything of a receiver's answer the attempt log keeps (the body's
excerpt, the reason, a ``Location``, any header value) may hold what a
database refuses (PostgreSQL's text cannot hold NUL; lone surrogates are
not UTF-8) and may be of any length. ``storable`` replaces each such
character with U+FFFD and cuts the text to ``EXCERPT_CHARS``, so no
receiver can make an outcome unwritable or flood the store.
"""
import re

EXCERPT_CHARS = 1024
"""The most characters of any receiver text an attempt keeps."""

UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def storable(text, limit=EXCERPT_CHARS):
    """``text`` (str or bytes, decoded as UTF-8) with NUL and invalid
    Unicode replaced, at most ``limit`` characters; None stays None."""
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text[:4 * limit].decode("utf-8", errors="replace")
    return UNSTORABLE.sub(REPLACEMENT, text[:limit])
