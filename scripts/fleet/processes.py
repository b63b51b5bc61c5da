"""The fleet's processes: each in a process group of its own, with its output
in a log file, stopped by process group (SIGTERM, then SIGKILL at a
deadline); and ``wait_until``, the one way the fleet waits."""
import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class Deadline(AssertionError):
    """A wait ran past its deadline."""


def wait_until(condition, timeout, message, interval=0.1):
    """Poll ``condition`` until it returns something true (returned), or fail
    with ``message`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise Deadline(f"{message} (waited {timeout} s)")
        time.sleep(interval)


class Process:
    """A started command: ``argv`` (already wrapped to run on its host), run
    in ``cwd`` (the code of the release it runs)."""

    def __init__(self, name, argv, log_path, env, cwd=REPO):
        self.name = name
        self.argv = argv
        self.log_path = Path(log_path)
        self.env = env
        self.cwd = cwd
        self.popen = None

    def start(self):
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                self.argv, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    @property
    def pid(self):
        return self.popen.pid

    def alive(self):
        return self.popen is not None and self.popen.poll() is None

    def signal_group(self, sig):
        """Send ``sig`` to the process's whole group (it leads one)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)

    def stop(self, timeout=30):
        """SIGTERM to the group; SIGKILL to it after ``timeout`` seconds.
        Returns the exit status (negative: the signal that ended it)."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            self.signal_group(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal_group(signal.SIGKILL)
                self.popen.wait(10)
        self.signal_group(signal.SIGKILL)  # whatever of the group outlived its leader
        return self.popen.returncode

    def stop_main(self, timeout):
        """SIGTERM to the main process only, as systemd's ``KillMode=mixed``
        does; SIGKILL to the whole group after ``timeout`` seconds (systemd's
        ``TimeoutStopSec``). Returns the exit status."""
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        return self.stop(timeout=0)

    def kill(self):
        """SIGKILL to the whole group, at once."""
        if self.popen is not None:
            self.signal_group(signal.SIGKILL)
            self.popen.wait(10)

    def tail(self, lines=25):
        """The last ``lines`` lines of the process's output."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def run(argv, timeout=60, env=None, input=None, cwd=REPO):
    """Run ``argv`` to its end; its stdout. A failure raises, with its stderr."""
    done = subprocess.run(argv, cwd=cwd, env=env, input=input, capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: "
                           f"{(done.stderr or done.stdout).strip()[-2000:]}")
    return done.stdout
