"""Times clients send: recover's ``since`` (the one time any request body or
query string carries) and the ``--since`` of ``plantstore deliveries
recover``. A time outside years 1 to 9999 once converted to UTC is a 400
naming the field (the command: a usage error), never a 500; hypothesis
fuzzes the field through the real API and checks each answer against an
oracle that does its own arithmetic."""
import datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import assert_error, bearer
from plantstore import db
from plantstore.db.models import Subscription, User

FIRST = datetime.datetime(1, 1, 1)
LAST = datetime.datetime(9999, 12, 31, 23, 59, 59, 999999)

OUT_OF_RANGE = ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-00:01",
                "0001-01-01T00:00:00.999999+00:01", "9999-12-31T23:59:59.999999-23:59"]
AT_THE_EDGES = ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z",
                "0001-01-01T00:00:00-14:00", "9999-12-31T23:59:59+00:01",
                "0001-01-01T23:59:00+23:59"]

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


@pytest.fixture
def send_since(app, client, alice):
    """A function posting ``{"since": value}`` to the recover route of an
    active subscription of alice's, as alice; it returns the response."""
    with app.app_context(), db.database.atomic():
        subscription = Subscription.create(
            owner=User.get(User.name == "alice"), url="http://127.0.0.1:9/hook",
            secret=SECRET)
    path = f"/webhooks/{subscription.id}/recover"
    return lambda since: client.post(path, json={"since": since}, headers=bearer(alice))


def in_utc_range(moment):
    """Whether aware ``moment`` falls in years 1 to 9999 in UTC, computed with
    timedeltas (which reach far beyond those years), not with astimezone."""
    since_first = (moment.replace(tzinfo=None) - FIRST) - moment.utcoffset()
    return datetime.timedelta(0) <= since_first <= LAST - FIRST


def assert_contract(response):
    """A 202 with the count queued, or a 400 naming ``since``; never anything else."""
    assert response.status_code in (202, 400), (response.status_code, response.data)
    if response.status_code == 202:
        assert response.get_json() == {"queued": 0}
    else:
        assert "since" in assert_error(response, 400)["details"]


@pytest.mark.parametrize("since", OUT_OF_RANGE)
def test_a_since_outside_utc_years_1_to_9999_is_400_naming_since(send_since, since):
    body = assert_error(send_since(since), 400)
    assert body["details"] == {"since": [
        "Must be a time between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z once "
        "converted to UTC."]}


@pytest.mark.parametrize("since", AT_THE_EDGES)
def test_a_since_at_the_edges_of_utc_is_taken(send_since, since):
    response = send_since(since)
    assert (response.status_code, response.get_json()) == (202, {"queued": 0})


offsets = st.builds(datetime.timezone, st.timedeltas(
    min_value=-datetime.timedelta(hours=23, minutes=59),
    max_value=datetime.timedelta(hours=23, minutes=59)).map(
        lambda delta: datetime.timedelta(minutes=delta // datetime.timedelta(minutes=1))))
aware_times = st.builds(lambda moment, offset: moment.replace(tzinfo=offset),
                        st.datetimes(min_value=FIRST, max_value=LAST), offsets)
# Most draws sit near the ends of the range, where the conversion can leave it.
edge_times = st.builds(
    lambda moment, offset: moment.replace(tzinfo=offset),
    st.one_of(st.datetimes(min_value=FIRST, max_value=datetime.datetime(1, 1, 2)),
              st.datetimes(min_value=datetime.datetime(9999, 12, 31), max_value=LAST)),
    offsets)


@FUZZ
@given(moment=st.one_of(edge_times, aware_times),
       spelling=st.sampled_from(["iso", "z", "space", "minutes"]))
def test_every_aware_time_is_202_or_400_as_its_utc_year_says(send_since, moment, spelling):
    text = moment.isoformat()
    if spelling == "z" and moment.utcoffset() == datetime.timedelta(0):
        text = text.replace("+00:00", "Z")
    elif spelling == "space":
        text = text.replace("T", " ", 1)
    elif spelling == "minutes":
        text = moment.isoformat(timespec="minutes")
        moment = moment.replace(second=0, microsecond=0)
    response = send_since(text)
    assert_contract(response)
    assert (response.status_code == 202) == in_utc_range(moment), text


TIME_LIKE = (r"[0-9]{1,5}-[0-9]{1,2}-[0-9]{1,2}([T ][0-9]{1,2}:[0-9]{1,2}"
             r"(:[0-9]{1,2}(\.[0-9]{1,12})?)?)?(Z|z|[+-][0-9]{1,2}(:?[0-9]{1,2}){0,2})?")


@FUZZ
@given(since=st.one_of(
    st.from_regex(TIME_LIKE, fullmatch=True), st.text(max_size=40),
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
    st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3)))
def test_anything_sent_as_since_is_202_or_a_400_naming_it(send_since, since):
    assert_contract(send_since(since))


@pytest.mark.parametrize("since", OUT_OF_RANGE)
def test_the_commands_since_outside_utc_years_is_a_usage_error(runner, app, since):
    with app.app_context(), db.database.atomic():
        subscription = Subscription.create(url="http://127.0.0.1:9/hook",
                                           secret=SECRET)
    result = runner.invoke(args=["deliveries", "recover", "--subscription",
                                 str(subscription.id), "--since", since])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--since'" in result.stderr
    assert "once converted to UTC" in result.stderr
    assert "Traceback" not in result.output


@FUZZ
@given(moment=edge_times)
def test_the_command_takes_every_since_the_api_takes(runner, app, moment):
    with app.app_context():
        subscription = Subscription.get_or_none() or Subscription.create(
            url="http://127.0.0.1:9/hook", secret=SECRET)
    result = runner.invoke(args=["deliveries", "recover", "--subscription",
                                 str(subscription.id), "--since", moment.isoformat()])
    assert result.exit_code == (0 if in_utc_range(moment) else 2), result.output
    assert "Traceback" not in result.output
