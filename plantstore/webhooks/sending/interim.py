"""Interim (1xx) answers before a receiver's answer, read as RFC 9110
section 15.2 says, within bounds that cap what a receiver's bytes cost.

Every interim answer counts, ``100 Continue`` included: http.client skips
100s itself in ``HTTPResponse.begin()``, restarting any count kept in
``_read_status``, so here none is ever handed back to it. An answer may
follow at most ``MOST_INTERIM_ANSWERS`` interim ones (the answer itself is
not one of them), whose status lines and header sections together hold at
most ``MOST_INTERIM_BYTES``; past either, the attempt fails at once, so a
receiver streaming interim answers holds a sender thread for a few
milliseconds, not until the attempt's deadline. A ``101 Switching
Protocols``, which no webhook asks for, fails the attempt too.
"""
import http.client

MOST_INTERIM_ANSWERS = 16
"""Interim 1xx answers skipped before an answer; one more fails the attempt."""

MOST_INTERIM_BYTES = 64 * 1024
"""Bytes of interim answers (status lines and header sections) skipped
before an answer; more fail the attempt."""


class SwitchedProtocols(http.client.HTTPException):
    """The receiver answered 101 Switching Protocols, which no webhook asks for."""


class TooManyInterimAnswers(http.client.HTTPException):
    """The receiver sent more interim answers than an answer may follow."""


def _skip_header_section(fp, spent):
    """Read past an interim answer's header section; the bytes spent on
    interim answers so far, ``TooManyInterimAnswers`` past the bound."""
    while True:
        line = fp.readline(MOST_INTERIM_BYTES - spent + 1)
        spent += len(line)
        if spent > MOST_INTERIM_BYTES:
            raise TooManyInterimAnswers(
                f"the receiver's interim 1xx answers took more than "
                f"{MOST_INTERIM_BYTES // 1024} KiB")
        if line in (b"\r\n", b"\n", b""):
            return spent


class InterimSkippingResponse(http.client.HTTPResponse):
    """An answer read past the interim 1xx answers before it."""

    def _read_status(self):
        spent = 0
        for _ in range(MOST_INTERIM_ANSWERS + 1):
            version, status, reason = super()._read_status()
            if status == 101:
                raise SwitchedProtocols("the receiver switched protocols (HTTP 101)")
            if not 100 <= status < 200:
                return version, status, reason
            spent += len(version) + len(reason) + 5  # the status line as it came
            spent = _skip_header_section(self.fp, spent)
        raise TooManyInterimAnswers(
            f"the receiver sent more than {MOST_INTERIM_ANSWERS} interim 1xx answers")
