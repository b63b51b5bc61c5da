"""The service as a newcomer runs it: ``make run`` and the shells of a
walkthrough, in a checkout of their own (the ``checkout`` fixture), and the
code blocks of a docs page.

A test that uses any of these starts server processes: mark it ``slow``.
"""
import fcntl
import os
import pty
import queue
import re
import signal
import subprocess
import sys
import tempfile
import termios
import threading
import time
import uuid

import pytest

from helpers import REPO, wait_until

# What a checkout holds besides the repository's files: the suite's own
# virtualenv (so `make run` installs nothing), and nothing a run leaves.
LEFT_OUT = {".git", ".venv", ".env", "artifacts", "plantstore.db", "plantstore.db-wal",
            "plantstore.db-shm", "webhook.json", ".pytest_cache"}
# Ctrl-C to every process of `make run` gone: about a second here.
STOP_SECONDS = 30


def code_blocks(page, heading, language):
    """The ``language`` fenced blocks of the section of ``page`` (under docs/,
    or README.md) under ``heading`` (up to the next heading of its level)."""
    text = (REPO / page if page == "README.md" else REPO / "docs" / page).read_text()
    level = heading.split(" ", 1)[0]
    section = text.split(f"\n{heading}\n", 1)[1]
    section = re.split(rf"\n{level} ", section, maxsplit=1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


def session(block):
    """A shell session written as commands, each followed by what it prints as
    ``# `` comment lines: (command, printed lines) pairs."""
    pairs, command = [], []
    for line in block.splitlines():
        if line.startswith("# ") and pairs and not command:
            pairs[-1][1].append(line[2:])
        elif line.strip():
            command.append(line)
            if not line.endswith("\\"):
                pairs.append(("\n".join(command), []))
                command = []
    return pairs


@pytest.fixture
def checkout(tmp_path):
    """A directory that looks like a fresh clone (every top-level file of the
    repository, linked) with the suite's virtualenv as its ``.venv``."""
    root = tmp_path / "checkout"
    root.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in LEFT_OUT:
            (root / entry.name).symlink_to(entry)
    (root / ".venv").symlink_to(sys.prefix)
    return root


def newcomer_env(**variables):
    """This process's environment without plantstore's or gunicorn's settings,
    plus ``variables``: what a newcomer's shell holds."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PLANTSTORE_", "GUNICORN_", "WEB_CONCURRENCY", "OTEL_"))
           and key not in ("PORT", "HOST", "LOG_LEVEL", "MAKEFLAGS", "MAKELEVEL")}
    env.update(variables)
    return env


class Background:
    """A shell command left running, as in a terminal of its own: its own
    process group (Ctrl-C signals the group), its output in a file."""

    def __init__(self, command, cwd, env):
        self.log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=env,
                                        stdout=self.log, stderr=subprocess.STDOUT,
                                        start_new_session=True)

    def output(self):
        """Everything it wrote so far (read at offset 0 without moving the
        file's offset, which the command's own writes share: a seek here
        would make them land at the start, over what it wrote before)."""
        fd = self.log.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def wait_for_output(self, pattern, timeout=90.0):
        """The first match of ``pattern`` in its output; fails if it exits first."""
        def found():
            match = re.search(pattern, self.output())
            if not match and self.process.poll() is not None:
                raise AssertionError(f"exited with {self.process.returncode} before "
                                     f"{pattern!r}: {self.output()[-12000:]}")
            return match
        return wait_until(found, timeout, interval=0.05,
                          message=lambda: f"{pattern!r} in {self.output()[-12000:]}")

    def interrupt(self, timeout=STOP_SECONDS):
        """Ctrl-C: SIGINT to its process group; its exit status once it exited."""
        os.killpg(self.process.pid, signal.SIGINT)
        return self.process.wait(timeout=timeout)

    def kill(self):
        """SIGKILL its process group, and those of the processes honcho said
        it started (each in a session of its own), if anything still runs."""
        for pgid in (self.process.pid, *started_pids(self.output()).values()):
            if group_alive(pgid):
                os.killpg(pgid, signal.SIGKILL)
        self.process.wait(timeout=30)


class Terminal(Background):
    """A command run as a terminal's foreground job (a pseudo-terminal is its
    controlling terminal), so a Ctrl-C typed there is one (``ctrl_c``)."""

    def __init__(self, command, cwd, env):
        self.controller, terminal = pty.openpty()
        self.shown = bytearray()
        self.process = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=env,
                                        stdin=terminal, stdout=terminal, stderr=terminal,
                                        start_new_session=True,
                                        preexec_fn=_take_the_terminal)
        os.close(terminal)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        while True:
            try:
                chunk = os.read(self.controller, 65536)
            except OSError:  # EIO: every process holding the terminal has ended
                return
            if not chunk:
                return
            self.shown += chunk

    def output(self):
        """Everything shown on the terminal so far."""
        return bytes(self.shown).decode(errors="replace")

    def ctrl_c(self, timeout=STOP_SECONDS):
        """Type Ctrl-C: the terminal signals SIGINT to its foreground job.
        Returns its exit status once it exited, and everything that still
        held the terminal let go of it (all it printed is read by then)."""
        began = time.monotonic()
        os.write(self.controller, b"\x03")
        status = self.process.wait(timeout=timeout)
        self.reader.join(timeout=max(0.0, timeout - (time.monotonic() - began)))
        return status


def _take_the_terminal():
    """In the child of ``Terminal``, after setsid: make its stdin (the
    pseudo-terminal) the session's controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def started_pids(output):
    """The pids honcho says it started, by process name (``web.1``, ``worker.1``)."""
    return {name: int(pid) for name, pid in
            re.findall(r"\| (\S+) started \(pid=(\d+)\)", output)}


def group_alive(pgid):
    """Whether any process of process group ``pgid`` still runs."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


class Shell:
    """An interactive-like bash session: each ``run`` feeds it commands and
    waits for them, so variables carry from one block to the next."""

    def __init__(self, cwd, env):
        self.process = subprocess.Popen(["bash"], cwd=cwd, env=env, text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.put(line)

    def run(self, commands, timeout=60.0):
        """What ``commands`` printed, and the status of the last one."""
        marker = f"__done_{uuid.uuid4().hex}__"
        self.process.stdin.write(f"{commands}\necho; echo {marker} $?\n")
        self.process.stdin.flush()
        printed = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                continue
            if line.startswith(marker):
                return "".join(printed), int(line.split()[1])
            printed.append(line)
        raise AssertionError(f"the shell did not finish within {timeout}s: {printed}")

    def close(self):
        """End the session (and anything it still runs)."""
        if group_alive(self.process.pid):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)


@pytest.fixture
def background():
    """Start ``Background`` commands (``background(command, cwd, env)``); any
    still running is killed with its process group afterwards."""
    started = []

    def start(command, cwd, env):
        started.append(Background(command, cwd, env))
        return started[-1]
    yield start
    for process in started:
        process.kill()


@pytest.fixture
def terminal():
    """Start ``Terminal`` jobs (``terminal(command, cwd, env)``); any still
    running is killed afterwards."""
    started = []

    def start(command, cwd, env):
        started.append(Terminal(command, cwd, env))
        return started[-1]
    yield start
    for job in started:
        job.kill()
        os.close(job.controller)


@pytest.fixture
def shell():
    """Start ``Shell`` sessions (``shell(cwd, env)``); closed afterwards."""
    started = []

    def start(cwd, env):
        started.append(Shell(cwd, env))
        return started[-1]
    yield start
    for session in started:
        session.close()
