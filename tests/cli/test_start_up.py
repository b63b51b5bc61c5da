"""A command imports what it uses: ``plantstore --help`` none of the app's
modules, the worker none of the web's nor Flask. (How long a start takes is measured
in ``make bench``, not here.)"""
import json
import os
import subprocess
import sys

import pytest

from helpers import REPO, plantstore_env
from plantstore.cli import COMMANDS

PROBE = """
import json, sys
sys.argv = ["plantstore", *json.loads(sys.argv[1])]
from plantstore.cli import main
try:
    main()
except SystemExit as exit:
    code = exit.code
print(json.dumps([code, sorted(sys.modules)]), file=sys.stderr)
"""

WEB_ONLY = ("flask_smorest", "apispec", "marshmallow", "limits", "limits.aio", "redis",
            "plantstore.web.api", "plantstore.plants.routes", "plantstore.web.ratelimit",
            "plantstore.web.openapi")


def imported_by(*args, env):
    """The modules ``plantstore ARGS`` has imported when it ends."""
    result = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args)], cwd=REPO,
                            env=env, capture_output=True, text=True, timeout=60)
    code, modules = json.loads(result.stderr.splitlines()[-1])
    assert code in (0, None), result.stderr
    return set(modules)


def test_help_imports_no_part_of_the_app():
    modules = imported_by("--help", env=os.environ)
    unwanted = {*WEB_ONLY, "flask", "werkzeug.serving", "peewee", "requests",
                "prometheus_client", "plantstore.cli.webhooks", "plantstore.webhooks"}
    assert not unwanted & modules, unwanted & modules
    assert "click" in modules


@pytest.mark.slow
def test_the_worker_imports_none_of_the_webs_modules_nor_flask(app, database_url):
    modules = imported_by("worker", "--once", env={**os.environ, **plantstore_env(database_url)})
    assert "plantstore.webhooks.sending.worker" in modules
    unwanted = {*WEB_ONLY, "flask", "werkzeug", "jinja2", "plantstore.web.metrics_endpoint"}
    assert not unwanted & modules, unwanted & modules
    assert not {"plantstore.cli.webhooks", "plantstore.cli.deliveries"} & modules


@pytest.mark.slow
def test_a_rate_limit_storage_is_imported_only_when_a_limit_is_set(database_url):
    probe = ("import sys, plantstore; plantstore.create_app({'DATABASE_URL': sys.argv[1], "
             "'RATE_LIMIT': sys.argv[2]}); print('limits.aio' in sys.modules, "
             "'redis' in sys.modules)")
    answers = [subprocess.run([sys.executable, "-c", probe, database_url, limit], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
               for limit in ("", "10/second")]
    assert [answer.stdout for answer in answers] == ["False False\n", "True True\n"], answers


def test_each_listed_group_is_the_command_its_help_line_describes():
    for name, listed in COMMANDS.items():
        command = listed.load()
        assert command.name == name
        assert listed.short_help == (command.short_help or command.help.strip().splitlines()[0])
