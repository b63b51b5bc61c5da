"""Operator input the ``plantstore`` command cannot use: every bad argument
is exit 2 with one ``Error:`` line naming it and changes nothing; every
unusable setting value is one line naming its variable."""
import pytest

from helpers import setting
from plantstore.db.models import Subscription, Token, User
from plantstore.settings import SettingError


def assert_usage_error(result, *fragments):
    """Exit status 2, one ``Error: ...`` sentence, no traceback."""
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("Error: ")
    for fragment in fragments:
        assert fragment in error, error


BEYOND = str(2 ** 63)


@pytest.mark.parametrize("args, named", [
    (["tokens", "revoke", BEYOND], "TOKEN_ID"),
    (["tokens", "revoke", "0"], "TOKEN_ID"),
    (["tokens", "create", "alice", "--expires-in", "99999999"], "--expires-in"),
    (["webhooks", "remove", BEYOND], "SUBSCRIPTION_ID"),
    (["webhooks", "rotate-secret", BEYOND], "SUBSCRIPTION_ID"),
    (["webhooks", "enable", "0"], "SUBSCRIPTION_ID"),
    (["deliveries", "show", BEYOND], "DELIVERY_ID"),
    (["deliveries", "retry", BEYOND], "DELIVERY_ID"),
    (["deliveries", "list", "--limit", BEYOND], "--limit"),
    (["users", "create", "ann\nbob"], "NAME"),
    (["users", "create", "x" * 101], "NAME"),
    (["users", "delete", "alice\n"], "NAME"),
    (["tokens", "create", "alice\r"], "NAME"),
    (["tokens", "list", "   "], "NAME"),
    (["webhooks", "add", "http://example.com/ x"], "URL"),
    (["webhooks", "add", " http://example.com/"], "URL"),
    (["webhooks", "add", "http://example.com/\n"], "URL"),
    (["webhooks", "add", "http://example.com/" + "a" * 2048], "URL"),
    (["webhooks", "add", "http://example.com/", "--bearer", "abc\r\nX-Evil: 1"], "--bearer"),
    (["webhooks", "add", "http://example.com/", "--bearer", "a b"], "--bearer"),
    (["webhooks", "add", "http://example.com/", "--bearer", "\u00e9t\u00e9"], "--bearer"),
])
def test_a_bad_command_argument_is_exit_2_naming_it_and_changes_nothing(
        runner, make_token, args, named):
    make_token("alice")
    result = runner.invoke(args=args)
    assert_usage_error(result, named)
    assert Subscription.select().count() == 0
    assert User.select().count() == 1 and Token.select().count() == 1


@pytest.mark.parametrize("key, value", [
    ("WEBHOOK_READ_TIMEOUT", "1e999"), ("WEBHOOK_READ_TIMEOUT", "1_0"),
    ("WEBHOOK_READ_TIMEOUT", "nan"), ("WORKER_POLL_INTERVAL", "\u0661"),
    ("WEBHOOK_RETRY_SCHEDULE", "inf"), ("WEBHOOK_RETRY_SCHEDULE", "5,1_0"),
    ("MAX_CONTENT_LENGTH", "-1"), ("MAX_CONTENT_LENGTH", "1_000"),
    ("DATABASE_URL", "sqlite:///" + "a" * 5000),
])
def test_an_unusable_setting_is_one_line_naming_it(key, value):
    with pytest.raises(SettingError) as refused:
        setting(key).read(value)
    message = str(refused.value)
    assert message.startswith(f"PLANTSTORE_{key} ") and "\n" not in message


@pytest.mark.parametrize("args, expected", [
    (["tokens", "revoke", "abc"], "expected an id from 1 to 2147483647, e.g. 12, not 'abc'"),
    (["tokens", "revoke", "1e99999999999999999999"], "expected an id from 1 to"),
    (["tokens", "create", "alice", "--expires-in", "soon"],
     "expected a number of days from 1 to 36500, e.g. 30, not 'soon'"),
    (["deliveries", "list", "--limit", "all"],
     "expected a whole number from 1 to 100000, e.g. 100, not 'all'"),
    (["deliveries", "purge", "--older-than", "-1"],
     "expected a number of days from 1 to 3650, e.g. 30, not '-1'"),
    (["users", "create", " alice"], "has a space (U+0020 at position 1); e.g. alice"),
])
def test_a_bad_command_argument_says_what_is_expected_with_an_example(
        runner, make_token, args, expected):
    make_token("alice")
    assert_usage_error(runner.invoke(args=args), expected)
