"""User names: one spelling per person, and no look-alikes.

A name is checked and put in its one form by the PRECIS
``UsernameCasePreserved`` profile (RFC 8265, the ``precis-i18n`` library):
fullwidth letters become their usual form, the result is in Unicode NFC (so
``é`` typed as one code point or as ``e`` plus a combining accent is the
same user), and spaces, control and format characters, symbols and
compatibility characters are refused. Spaces are refused, not trimmed: the
profile has none, and a name typed with a stray space is better told than
silently changed into another. Case is kept (``Alice`` and ``alice`` are
two users, as the profile compares them).

On top of the profile, a name is written in one script (Latin, Cyrillic,
Greek, ...; digits and ``. _ -`` go with any; Japanese may mix Han, Hiragana
and Katakana, Korean Han and Hangul, Chinese Han and Bopomofo): ``аlice``
with a Cyrillic ``а`` beside ``alice`` would be a second user who looks the
same. Scripts are looked up with ``confusable_homoglyphs``, the library
Django's registration apps use for the same check.
"""
import precis_i18n
from confusable_homoglyphs import categories

PROFILE = precis_i18n.get_profile("UsernameCasePreserved")
MAX_LENGTH = 100
EXAMPLE = "e.g. alice, alice.smith or Zoë"

NEUTRAL_SCRIPTS = frozenset({"COMMON", "INHERITED"})
WRITTEN_TOGETHER = (frozenset({"HAN", "HIRAGANA", "KATAKANA"}),
                    frozenset({"HAN", "HANGUL"}), frozenset({"HAN", "BOPOMOFO"}))

# What the profile's refusals mean, by the reason precis-i18n gives.
_REFUSALS = {
    "spaces": "has a space",
    "empty": "is empty",
    "controls": "has a control character",
    "has_compat": "has a compatibility character",
    "symbols": "has a symbol",
    "punctuation": "has punctuation the profile refuses",
    "bidi_rule": "mixes right-to-left and left-to-right text in a way RFC 5893 refuses",
}


class InvalidUserName(ValueError):
    """A name that is not a valid user name; the message says why, in one line."""


def _refusal(name, error):
    reason = str(getattr(error, "reason", "")).split("/", 1)[-1]
    why = _REFUSALS.get(reason)
    if why is None:
        why = "has a character user names may not have"
    start = getattr(error, "start", -1)
    if 0 <= start < len(name) and reason != "empty":
        why += f" (U+{ord(name[start]):04X} at position {start + 1})"
    return InvalidUserName(f"{name!r} is not a valid user name: it {why}; {EXAMPLE}")


def scripts_of(name):
    """The scripts ``name`` is written in, digits and punctuation aside."""
    return {categories.alias(character) for character in name} - NEUTRAL_SCRIPTS


def enforce(name):
    """``name`` in its one form (PRECIS ``UsernameCasePreserved``, NFC), or
    ``InvalidUserName`` saying why it is not a user name."""
    try:
        enforced = PROFILE.enforce(name)
    except UnicodeError as error:
        raise _refusal(name, error) from None
    if len(enforced) > MAX_LENGTH:
        raise InvalidUserName(f"a user name has at most {MAX_LENGTH} characters, "
                              f"not {len(enforced)}; {EXAMPLE}")
    scripts = scripts_of(enforced)
    if len(scripts) > 1 and not any(scripts <= together for together in WRITTEN_TOGETHER):
        raise InvalidUserName(
            f"{name!r} is not a valid user name: it mixes scripts "
            f"({', '.join(sorted(script.title() for script in scripts))}), so it could "
            f"pass for another name; write it in one script, {EXAMPLE}")
    return enforced
