"""``PROMETHEUS_MULTIPROC_DIR``: the directory where every process of a server
writes its metric counts (``metrics.py``). prometheus_client writes there as
soon as a metric exists, so a process that writes metrics makes it first;
one that cannot be made stops the process with one line, exit status 2 (it
is one of the server's options, given through the environment: see
``server/launch.py``, which checks it with the others)."""
import os
import sys
import tempfile

VARIABLE = "PROMETHEUS_MULTIPROC_DIR"

USAGE_EXIT_STATUS = 2
"""The exit status of a variable the server cannot use, as of a bad argument."""


def problem(raw):
    """Make the directory ``raw``; None if it is there and writable, else
    what it must be."""
    try:
        os.makedirs(raw, exist_ok=True)
        with tempfile.TemporaryFile(dir=raw):  # each process writes its files there
            pass
    except OSError as error:
        return f"must be a directory this user can make and write ({error.strerror})"
    return None


def make_or_exit(environ):
    """Make the directory ``environ`` names (none when unset or empty); if it
    cannot be made, its line on stderr and exit status 2 (nothing would catch
    a refusal where this runs: an import)."""
    raw = environ.get(VARIABLE)
    found = raw and problem(raw)
    if found:
        print(f"Error: {VARIABLE} {found}, not {raw!r}", file=sys.stderr)
        sys.exit(USAGE_EXIT_STATUS)
