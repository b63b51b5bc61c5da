"""An action refused while its subscription is disabled is worded once
(``engine/refusals.py``), whoever refuses it."""
import pathlib

from plantstore.db.models import Subscription
from plantstore.webhooks.engine.refusals import disabled_refusal, enable_command

PACKAGE = pathlib.Path(__file__).resolve().parents[3] / "plantstore"


def test_the_refusal_says_why_and_how_to_enable_on_one_line():
    subscription = Subscription(id=4, disabled_reason="the receiver answered 410\n\x1b[2J")
    assert disabled_refusal(subscription, enable_command(4)) == (
        "webhook subscription 4 is disabled (the receiver answered 410\\n\\x1b[2J); "
        "enable it first with `plantstore webhooks enable 4`")
    assert disabled_refusal(Subscription(id=5), "POST /webhooks/5/enable") == (
        "webhook subscription 5 is disabled (no reason recorded); "
        "enable it first with POST /webhooks/5/enable")


def test_no_other_module_words_the_refusal():
    wording = {path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")
               if "enable it first with" in path.read_text()}
    assert wording == {"webhooks/engine/refusals.py"}
