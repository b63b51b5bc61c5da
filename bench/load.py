"""Drive a server with wrk and read back throughput and latency percentiles."""
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

POST_SCRIPT = Path(__file__).with_name("post.lua")
PACED_POST_SCRIPT = Path(__file__).with_name("post_paced.lua")
THREADS, CONNECTIONS = 1, 8
TIMEOUT_SECONDS = 10
"""An answer slower than this counts as an error (wrk's default, 2 s, is
reached by a healthy server on a machine others are loading too)."""

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


@dataclass
class Result:
    """One wrk run: requests per second and latency percentiles in ms; the
    runner adds the server's CPU per request (µs) and statements per request
    (None when not counted)."""
    requests: int
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    failures: str = ""  # wrk's lines counting them
    cpu_us: float | None = None
    statements: float | None = None


class LoadError(RuntimeError):
    """wrk is missing, or a run got errors instead of answers."""


def ensure_wrk():
    """The path of wrk, installing the Debian package when it is missing."""
    path = shutil.which("wrk")
    if path:
        return path
    print("wrk not found: installing it from Debian (apt-get install wrk)", flush=True)
    subprocess.run(["apt-get", "update", "-qq"], check=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], check=True)
    path = shutil.which("wrk")
    if not path:
        raise LoadError("wrk is not installed and could not be installed")
    return path


def _ms(text):
    """A wrk duration ("812.00us", "3.1ms", "1.2s") in milliseconds."""
    number, unit = re.fullmatch(r"([0-9.]+)(us|ms|s|m)", text).groups()
    return float(number) * _UNITS[unit]


def parse(output):
    """A Result from wrk --latency output."""
    failures = []
    percentiles = dict(re.findall(r"^\s+(50|99)(?:\.000)?%\s+(\S+)\s*$", output, re.M))
    requests = int(re.search(r"^\s+(\d+) requests in", output, re.M).group(1))
    errors = 0
    for pattern in (r"Non-2xx or 3xx responses: (\d+)",
                    r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)"):
        match = re.search(pattern, output)
        if match:
            errors += sum(int(n) for n in match.groups())
            failures.append(match.group(0))
    return Result(requests=requests,
                  rps=float(re.search(r"Requests/sec:\s+([0-9.]+)", output).group(1)),
                  p50_ms=_ms(percentiles["50"]), p99_ms=_ms(percentiles["99"]),
                  errors=errors, failures="; ".join(failures))


def run(wrk, url, token, seconds, script=None, script_args=(), connections=CONNECTIONS):
    """Run wrk against ``url`` for ``seconds``; the parsed Result."""
    argv = [wrk, f"-t{THREADS}", f"-c{connections}", f"-d{seconds}s", "--latency",
            f"--timeout={TIMEOUT_SECONDS}s", "-H", f"Authorization: Bearer {token}"]
    if script:
        argv += ["-s", str(script)]
    argv.append(url)
    if script_args:
        argv += ["--", *map(str, script_args)]
    out = subprocess.run(argv, check=True, capture_output=True, text=True,
                         timeout=seconds + 60)
    try:
        return parse(out.stdout)
    except (AttributeError, KeyError) as error:
        raise LoadError(f"unreadable wrk output:\n{out.stdout}\n{out.stderr}") from error
