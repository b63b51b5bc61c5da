"""User names through the real ``plantstore`` command: one spelling per
person (PRECIS UsernameCasePreserved, RFC 8265: NFC, fullwidth made usual),
no look-alike in another script, no stray spaces; every refusal one line,
exit status 2, nothing stored, no traceback."""
import os
import unicodedata

import pytest

from helpers import plantstore_env, run_plantstore

NFC_E = unicodedata.normalize("NFC", "\u00e9")
NFD_E = unicodedata.normalize("NFD", "\u00e9")


@pytest.fixture
def plantstore(app, database_url, tmp_path):
    """Run the installed command on the test's database."""
    def run(*args):
        return run_plantstore(*args, env={**os.environ, **plantstore_env(database_url)},
                              cwd=tmp_path)
    return run


def users(plantstore):
    listed = plantstore("users", "list")
    assert listed.returncode == 0, listed.stderr
    return [line.split("\t")[0] for line in listed.stdout.splitlines()]


def assert_refused(result, *fragments):
    """Exit 2, one ``Error:`` line (after click's usage lines), no traceback."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("Error: Invalid value for 'NAME': "), error
    for fragment in fragments:
        assert fragment in error, error
    return error


@pytest.mark.parametrize("name, fragments", [
    pytest.param(" alice", ["has a space", "e.g. alice"], id="leading space"),
    pytest.param("alice ", ["has a space"], id="trailing space"),
    pytest.param("al ice", ["has a space"], id="inner space"),
    pytest.param("\u0430lice", ["mixes scripts", "Cyrillic, Latin"], id="Cyrillic a"),
    pytest.param("\u03a9mega", ["mixes scripts", "Greek, Latin"], id="Greek omega"),
    pytest.param("x\u200d", ["U+200D"], id="zero-width joiner"),
    pytest.param("smile\U0001f600", ["has a symbol"], id="emoji"),
    pytest.param("\u2163", ["compatibility character"], id="roman numeral four"),
    pytest.param("", ["is empty"], id="empty"),
    pytest.param("x" * 101, ["at most 100 characters"], id="101 characters"),
])
def test_a_name_the_rules_refuse_is_one_line_and_creates_nobody(
        plantstore, name, fragments):
    assert_refused(plantstore("users", "create", name), *fragments)
    assert users(plantstore) == []


def test_nfc_and_nfd_spellings_are_one_user(plantstore):
    created = plantstore("users", "create", f"Ren{NFD_E}")
    assert created.returncode == 0, created.stderr
    assert created.stdout.strip() == f"created user Ren{NFC_E}"
    again = plantstore("users", "create", f"Ren{NFC_E}")
    assert again.returncode == 1 and "already exists" in again.stderr, again.stderr
    assert "Traceback" not in again.stderr
    assert users(plantstore) == [f"Ren{NFC_E}"]
    # Either spelling finds the user.
    token = plantstore("tokens", "create", f"Ren{NFD_E}")
    assert token.returncode == 0, token.stderr


def test_a_look_alike_in_another_script_cannot_join_the_original(plantstore):
    assert plantstore("users", "create", "alice").returncode == 0
    assert_refused(plantstore("users", "create", "\u0430lice"), "mixes scripts")
    assert users(plantstore) == ["alice"]


@pytest.mark.parametrize("name, stored", [
    ("\uff41\uff4c\uff49\uff43\uff45", "alice"),   # fullwidth letters
    ("Zo\u00eb", "Zo\u00eb"),
    ("\u3084\u307e\u3060\u592a\u90ce", "\u3084\u307e\u3060\u592a\u90ce"),  # Hiragana + Han
    ("\u0438\u0432\u0430\u043d", "\u0438\u0432\u0430\u043d"),  # all Cyrillic
    ("alice.smith_2-b", "alice.smith_2-b"),
    ("Alice", "Alice"),   # case is kept
])
def test_names_in_one_script_are_stored_in_their_one_form(plantstore, name, stored):
    created = plantstore("users", "create", name)
    assert created.returncode == 0, created.stderr
    assert users(plantstore) == [stored]


def test_case_makes_another_user_as_the_profile_compares(plantstore):
    assert plantstore("users", "create", "alice").returncode == 0
    assert plantstore("users", "create", "Alice").returncode == 0
    assert sorted(users(plantstore)) == ["Alice", "alice"]
