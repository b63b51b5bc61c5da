"""The fleet run's figures as a Markdown page (``FLEET_REPORT=PATH``).

Every scenario prints its figures as it goes (``say``); they are also kept
here, per scenario and database path, and written at the end of the run to
the page ``FLEET_REPORT`` names: what docs/fleet-run.md holds is such a
page, never figures copied by hand.
"""
import datetime
import os
import platform
import subprocess

from .processes import REPO

PATHS = {"direct": "directly", "pgbouncer": "through PgBouncer"}


class Report:
    """The figures of the scenarios run so far."""

    def __init__(self):
        self.rows = {}  # scenario -> {path: [lines]}
        self.outcomes = {}  # (scenario, path) -> "passed" / "failed"
        self.current = None  # (scenario, path) of the scenario under way
        self.load_at_start = os.getloadavg()[0]

    def begin(self, scenario, path):
        """The scenario now running, on ``path`` (a key of PATHS)."""
        self.current = (scenario, path)
        self.rows.setdefault(scenario, {}).setdefault(path, [])

    def line(self, text):
        """One figure of the scenario under way."""
        if self.current is not None:
            scenario, path = self.current
            self.rows[scenario][path].append(text)

    def end(self, passed):
        """The scenario under way ended; whether its checks held."""
        if self.current is not None:
            self.outcomes[self.current] = "passed" if passed else "**failed**"
            self.current = None

    def markdown(self):
        """The page: how the run was made, then a row per scenario."""
        load_now = os.getloadavg()[0]
        lines = [
            "# The fleet test's figures", "",
            f"Written by `make test-fleet FLEET_REPORT=...` on "
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, at "
            f"{_commit()}, on {platform.system()} with {os.cpu_count()} cores shared by "
            f"every host (load average {self.load_at_start:.1f} at the start, "
            f"{load_now:.1f} at the end). What the fleet is made of and what each "
            "scenario promises: [scaling.md](scaling.md). Rates are the machine's, "
            "not a fleet's: compare them with each other.", "",
            "| scenario | " + " | ".join(PATHS.values()) + " |",
            "|---|" + "---|" * len(PATHS),
        ]
        for scenario, by_path in self.rows.items():
            cells = []
            for path in PATHS:
                if path not in by_path:
                    cells.append("not run")
                    continue
                outcome = self.outcomes.get((scenario, path), "not finished")
                cells.append("<br>".join([outcome, *by_path[path]]).replace("|", "\\|"))
            lines.append(f"| {scenario} | " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"

    def write(self, path):
        """Write the page to ``path`` (relative to the repository)."""
        target = REPO / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(self.markdown())
        print(f"\nfleet figures written to {target}", flush=True)


def _commit():
    """The commit under test, marked when the service's code differs from it."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True,
                              text=True).stdout.strip()
    commit = git("rev-parse", "--short=12", "HEAD") or "an unknown commit"
    changed = git("status", "--porcelain", "--untracked-files=no", "--", "plantstore",
                  "config", "wsgi.py")
    return f"commit `{commit}`" + (" with uncommitted changes" if changed else "")


run_report = Report()
"""This run's report: the scenarios add to it, the session writes it."""
