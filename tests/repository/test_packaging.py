"""The package as setuptools builds it: every file of plantstore/ that git
tracks is in it (the SQL files beside the code too), and setuptools has
nothing to warn about (no "Package would be ignored" pages on install)."""
import subprocess
import sys

from helpers import REPO


def test_the_build_holds_every_tracked_file_of_the_package_and_warns_of_nothing(tmp_path):
    built = subprocess.run([sys.executable, "setup.py", "build_py", "--build-lib", str(tmp_path)],
                           cwd=REPO, capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    assert "would be ignored" not in built.stdout + built.stderr, built.stderr
    assert "Warning" not in built.stderr, built.stderr
    tracked = subprocess.run(["git", "ls-files", "plantstore"], cwd=REPO, capture_output=True,
                             text=True, timeout=60, check=True).stdout.split()
    shipped = {path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("*")
               if path.is_file()}
    assert set(tracked) - shipped == set()
