"""CPU time a server spends, from /proc: user + system time of its whole
process tree (a gunicorn or uvicorn master and its workers), including the
time of children that have already exited and been reaped.

Read before and after a measured window; the difference divided by the
requests served is the server's CPU per request. /proc counts in clock
ticks (usually 10 ms) per process, so a window should hold seconds of
CPU, not milliseconds.
"""
import os
from pathlib import Path

TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def process_tree(pid):
    """``pid`` and every process descended from it that is alive now."""
    tree, unvisited = [], [pid]
    while unvisited:
        current = unvisited.pop()
        tree.append(current)
        try:
            tasks = list(Path(f"/proc/{current}/task").iterdir())
        except OSError:
            continue  # gone meanwhile
        for task in tasks:  # a child belongs to the thread that forked it
            try:
                unvisited += [int(child) for child in (task / "children").read_text().split()]
            except OSError:
                continue
    return tree


def _ticks(pid):
    """utime + stime + cutime + cstime of ``pid`` in clock ticks (0 when gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    # The command name (field 2) is in parentheses and may hold spaces:
    # fields 14-17 are counted from the last ")".
    fields = stat[stat.rindex(")") + 2:].split()
    return sum(int(value) for value in fields[11:15])


def tree_cpu_seconds(pid):
    """User + system CPU seconds of ``pid``'s process tree so far."""
    return sum(_ticks(member) for member in process_tree(pid)) / TICKS_PER_SECOND
