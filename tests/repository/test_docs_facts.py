"""Sentences of the docs that state a fact of the code, checked against it:
a default, what a command deletes, which module holds the migrations
runner, the install commands as root on a Debian without sudo."""
import re

from helpers import REPO, setting
from plantstore.cli.accounts import users_delete


def read(page):
    return (REPO / page).read_text()


def test_scaling_md_gives_the_redis_timeout_the_setting_has():
    [stated] = re.findall(r"`PLANTSTORE_RATE_LIMIT_REDIS_TIMEOUT` \(([\d.]+) s\s+unless set\)",
                          read("docs/scaling.md"))
    assert float(stated) == setting("RATE_LIMIT_REDIS_TIMEOUT").default


def test_operating_md_says_what_users_delete_deletes_as_the_command_does():
    [row] = [line for line in read("docs/operating.md").splitlines()
             if line.startswith("| `plantstore users delete NAME` |")]
    for deleted in ("tokens", "plants", "webhook subscriptions"):
        assert deleted in row and deleted in users_delete.help, deleted


def test_the_code_map_names_existing_modules_and_the_migrations_runner_where_it_is():
    code_map = read("README.md").split("## Code map", 1)[1].split("\nOutside the package", 1)[0]
    decides = {}
    for modules, what in re.findall(r"^\| (`[^|]+`) \| (.+) \|$", code_map, flags=re.M):
        for module in re.findall(r"`([^`]+)`", modules):
            decides[module] = what
            assert (REPO / "plantstore" / module).exists(), module
    assert "`runner.py` (the migrations runner" in decides["db/"]
    assert "class GivingWayRunner" in read("plantstore/db/runner.py")


def test_the_install_as_root_needs_no_sudo():
    install = read("docs/operating.md").split("## Install (Debian 12, as root)", 1)[1]
    install = install.split("\n## ", 1)[0]
    assert "sudo" not in install
    assert 'runuser -u postgres -- psql -c "CREATE DATABASE plantstore OWNER plantstore"' \
        in install
