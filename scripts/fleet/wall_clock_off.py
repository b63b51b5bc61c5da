"""``plantstore ARGS`` for a host whose wall clock is off, run under Debian's
faketime: ``FAKETIME_DONT_FAKE_MONOTONIC=1 faketime -f +120s python
wall_clock_off.py worker``.

Only the wall clock is faked: a host whose clock is off still counts
elapsed time truly (its monotonic clock), and with a faked monotonic clock
Python 3.11's timed waits hang under libfaketime 0.9.10
(wolfcw/libfaketime#390). That version also turns the absolute
``clock_nanosleep`` behind ``time.sleep`` into an invalid call when the
monotonic clock is left alone (wolfcw/libfaketime#426), so ``time.sleep``
waits in ``select`` here, with a relative timeout faketime leaves as it is.
"""
import select
import sys
import time


def _sleep(seconds):
    select.select([], [], [], seconds)


time.sleep = _sleep

from plantstore.cli import main  # noqa: E402  (after the sleep is replaced)

if __name__ == "__main__":
    sys.argv[0] = "plantstore"
    main()
