"""The settings have one source, plantstore/settings.py: the reference page
and the example environment file must agree with it."""
import re

from helpers import REPO
from plantstore import settings

REFERENCE = REPO / "docs" / "settings.md"
ENV_EXAMPLE = REPO / "config" / "plantstore.env.example"


_VARIABLE = re.compile(r"\b" + settings.ENV_PREFIX + r"[A-Z0-9_]+\b")
_ASSIGNMENT = re.compile(r"^\s*(#\s*)?(" + settings.ENV_PREFIX + r"[A-Z0-9_]+)=(.*)$")


def test_docs_settings_md_is_what_make_docs_generates_from_settings_py():
    assert REFERENCE.read_text(encoding="utf-8") == settings.reference(), (
        "docs/settings.md differs from the settings table in plantstore/settings.py: "
        "run `make docs` and commit docs/settings.md (never edit it by hand)")


def test_every_plantstore_variable_in_the_env_example_is_a_real_setting():
    named = set(_VARIABLE.findall(ENV_EXAMPLE.read_text(encoding="utf-8")))
    assert named, "config/plantstore.env.example names no PLANTSTORE_* variable"
    env_names = {entry.env_name for entry in settings.SETTINGS}
    unknown = sorted(named - env_names)
    assert not unknown, (
        f"config/plantstore.env.example names {', '.join(unknown)}, which "
        "plantstore/settings.py does not define (nothing would read it): "
        "remove it, or add the setting to settings.py and run `make docs`")


def test_defaults_shown_commented_out_in_the_env_example_are_the_real_defaults():
    for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        match = _ASSIGNMENT.match(line)
        if not match or not match.group(1):
            continue  # a value the operator is meant to set, not a default shown
        setting = next((entry for entry in settings.SETTINGS
                        if entry.env_name == match.group(2)), None)
        if setting is None:
            continue  # not a setting at all: the test above names it
        assert setting.read(match.group(3).strip()) == setting.read(setting.default), (
            f"config/plantstore.env.example shows {line.strip()!r}, but the default "
            f"of {setting.env_name} is {setting.default!r}")
