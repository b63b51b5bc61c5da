"""The releases fleet nodes run: this checkout, or an earlier commit of the
repository, archived into a temporary directory with a virtualenv of its own
(the upgrade scenario's previous release).

A node runs a release as an operator's host would: the release's
``plantstore`` and ``gunicorn`` from its virtualenv, in its directory (its
``config/gunicorn.conf.py``), with its code first on ``PYTHONPATH``. Which
release a running process is on is read from the system, never assumed: its
working directory and the program its command line names.
"""
import contextlib
import os
import shutil
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .processes import REPO, run

PREVIOUS_RELEASE = os.environ.get("FLEET_UPGRADE_FROM", "ee73b61")
"""The release the upgrade scenario starts from (``FLEET_UPGRADE_FROM``, a
git ref of this repository): by default the release before this one, its
own upgrade finished (0013 applied: this release's expand migrations come
after it, docs/scaling.md)."""
RELEASE_DIR_PREFIX, OWNER = "plantstore-release-", "owner.pid"
"""A materialised release lives in a temporary directory named so, holding
the pid of the run that made it: one whose run has ended is removed. (Not
deployment.py's prefix: a fleet's start removes those of runs that ended.)"""


@dataclass(frozen=True)
class Release:
    """A tree of plantstore's code and the virtualenv's ``bin`` that runs it."""

    name: str
    tree: Path
    bin: Path

    def runs(self, pid):
        """Whether process ``pid`` runs this release: its working directory is
        the release's tree and its command line names the release's program."""
        proc = Path(f"/proc/{pid}")
        try:
            cwd = (proc / "cwd").resolve(strict=True)
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            return False
        return cwd == self.tree.resolve() and any(
            arg.startswith(f"{self.bin}/") for arg in argv)


CURRENT = Release("this checkout", REPO, Path(sys.executable).parent)


def commit_of(ref):
    """The full commit ``ref`` names in this repository; a clear error if none."""
    try:
        return run(["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"]).strip()
    except RuntimeError:
        raise RuntimeError(
            f"FLEET_UPGRADE_FROM={ref} names no commit of {REPO} (a shallow clone? "
            "fetch the history, or name another release)") from None


@contextlib.contextmanager
def materialised(ref):
    """The release at ``ref``: its tree (``git archive``) and a virtualenv
    with it installed (``pip install -e 'TREE[postgres]'``), both removed at
    the end, whatever happens."""
    commit = commit_of(ref)
    _remove_abandoned()
    home = Path(tempfile.mkdtemp(prefix=RELEASE_DIR_PREFIX))
    try:
        (home / OWNER).write_text(str(os.getpid()))
        tree, venv = home / "tree", home / "venv"
        tree.mkdir()
        archive = home / "release.tar"
        run(["git", "archive", "--format=tar", "-o", str(archive), commit])
        with tarfile.open(archive) as tar:
            tar.extractall(tree, filter="data")
        archive.unlink()
        run([sys.executable, "-m", "venv", str(venv)], timeout=120)
        run([str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
             "--editable", f"{tree}[postgres]"], timeout=600)
        yield Release(commit[:12], tree, venv / "bin")
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _remove_abandoned():
    """Remove the releases of runs that ended without removing theirs."""
    for owner in Path(tempfile.gettempdir()).glob(f"{RELEASE_DIR_PREFIX}*/{OWNER}"):
        try:
            os.kill(int(owner.read_text()), 0)
        except ProcessLookupError:
            shutil.rmtree(owner.parent, ignore_errors=True)
        except (OSError, ValueError):
            continue

