"""SPEC §3: RFC 6750 bearer tokens — the 401 challenges, 403 for a missing
scope, the token format and its hashed storage, and what needs no token."""
import base64
import hashlib
import re
import secrets
from datetime import timedelta

import pytest

from helpers import POSTGRES_URL, assert_error, bearer, skew_process_clock
from plantstore import db
from plantstore.db.models import Delivery, IdempotencyKey, Plant, Subscription, Token, utcnow
from plantstore.web.auth import READ, WRITE, issue_token, revoke_token

CHALLENGE = 'Bearer realm="plantstore"'
INVALID_TOKEN_CHALLENGE = 'Bearer realm="plantstore", error="invalid_token"'

# One request per plant operation, each valid but for its credentials.
OPERATIONS = [
    pytest.param("GET", "/plants", None, id="list"),
    pytest.param("POST", "/plants", {"id": 7, "name": "fern"}, id="create"),
    pytest.param("DELETE", "/plants/7", None, id="delete"),
]


def call(client, method, path, body, headers):
    """Send one plant operation with ``headers``."""
    return client.open(path, method=method, json=body, headers=headers)


def token_of(secret):
    """The stored row of a token, found by its secret."""
    return Token.get(Token.digest == hashlib.sha256(secret.encode()).hexdigest())


@pytest.mark.parametrize("method, path, body", OPERATIONS)
def test_missing_token_is_401_with_the_bearer_challenge(client, method, path, body):
    response = call(client, method, path, body, {})
    assert_error(response, 401)
    assert response.headers["WWW-Authenticate"] == CHALLENGE


MALFORMED_AUTHORIZATION = [
    pytest.param("Bearer", id="scheme only"),
    pytest.param("Bearer ", id="empty token"),
    pytest.param("bearer  pst_x", id="two spaces"),
    pytest.param("Basic YWxpY2U6c2VjcmV0", id="basic scheme"),
    pytest.param("Bearer pst_a pst_b", id="token with a space"),
    pytest.param("Token pst_x", id="other scheme"),
    pytest.param("", id="empty header"),
]


@pytest.mark.parametrize("method, path, body", OPERATIONS)
@pytest.mark.parametrize("authorization", MALFORMED_AUTHORIZATION)
def test_malformed_authorization_is_401_invalid_token(
        client, alice, method, path, body, authorization):
    response = call(client, method, path, body, {"Authorization": authorization})
    assert_error(response, 401)
    assert response.headers["WWW-Authenticate"] == INVALID_TOKEN_CHALLENGE


@pytest.mark.parametrize("method, path, body", OPERATIONS)
def test_unknown_token_is_401_invalid_token(client, alice, method, path, body):
    response = call(client, method, path, body,
                    bearer("pst_" + secrets.token_urlsafe(32)))
    assert_error(response, 401)
    assert response.headers["WWW-Authenticate"] == INVALID_TOKEN_CHALLENGE


def test_revoked_token_is_401_invalid_token(client, alice):
    assert client.get("/plants", headers=bearer(alice)).status_code == 200
    assert revoke_token(token_of(alice).id)
    response = client.get("/plants", headers=bearer(alice))
    assert_error(response, 401)
    assert response.headers["WWW-Authenticate"] == INVALID_TOKEN_CHALLENGE


def test_expired_token_is_401_invalid_token(client, make_token):
    secret = make_token("alice", expires_in_days=1)
    assert client.get("/plants", headers=bearer(secret)).status_code == 200
    (Token.update(expires_at=utcnow() - timedelta(seconds=1))
     .where(Token.id == token_of(secret).id).execute())
    response = client.get("/plants", headers=bearer(secret))
    assert_error(response, 401)
    assert response.headers["WWW-Authenticate"] == INVALID_TOKEN_CHALLENGE


def test_token_of_a_deleted_user_is_401(client, runner, alice):
    assert client.get("/plants", headers=bearer(alice)).status_code == 200
    result = runner.invoke(args=["users", "delete", "alice"])
    assert result.exit_code == 0, result.output
    response = client.get("/plants", headers=bearer(alice))
    assert_error(response, 401)
    assert response.headers["WWW-Authenticate"] == INVALID_TOKEN_CHALLENGE


def test_bearer_scheme_is_case_insensitive(client, alice):
    for scheme in ("bearer", "BEARER", "Bearer"):
        response = client.get("/plants", headers={"Authorization": f"{scheme} {alice}"})
        assert response.status_code == 200, scheme


def test_read_only_token_lists_but_gets_403_on_create_and_delete(client, make_token):
    writer = make_token("alice")
    assert client.post("/plants", json={"id": 7, "name": "fern"},
                       headers=bearer(writer)).status_code == 200
    reader = make_token("alice", scopes=[READ])
    assert client.get("/plants", headers=bearer(reader)).get_json() == [{"name": "fern"}]
    for response in (client.post("/plants", json={"id": 8, "name": "moss"},
                                 headers=bearer(reader)),
                     client.delete("/plants/7", headers=bearer(reader))):
        assert "plants:write" in assert_error(response, 403)["message"]
        assert 'error="insufficient_scope"' in response.headers["WWW-Authenticate"]
    assert client.get("/plants", headers=bearer(writer)).get_json() == [{"name": "fern"}]


def test_write_only_token_gets_403_on_list(client, make_token):
    writer = make_token("alice", scopes=[WRITE])
    assert_error(client.get("/plants", headers=bearer(writer)), 403)


@pytest.mark.parametrize("method, path, kwargs", [
    pytest.param("POST", "/plants", {"data": "id=7", "content_type": "text/plain"},
                 id="non-JSON create"),
    pytest.param("POST", "/plants", {"data": "{bad", "content_type": "application/json"},
                 id="malformed JSON create"),
    pytest.param("GET", "/plants?limit=abc", {}, id="bad limit"),
    pytest.param("DELETE", "/plants/abc", {}, id="bad path id"),
])
def test_credentials_are_checked_before_the_request_itself(client, method, path, kwargs):
    response = client.open(path, method=method, **kwargs)
    assert_error(response, 401)
    assert response.headers["WWW-Authenticate"] == CHALLENGE


def test_scope_is_checked_before_the_body(client, make_token):
    reader = make_token("alice", scopes=[READ])
    response = client.post("/plants", data="id=7", content_type="text/plain",
                           headers=bearer(reader))
    assert_error(response, 403)


BAD_CREATES = [
    pytest.param({"data": "id=7", "content_type": "text/plain"}, id="non-JSON"),
    pytest.param({"data": "{bad", "content_type": "application/json"}, id="malformed JSON"),
    pytest.param({"json": {"id": "seven", "name": 5}}, id="invalid plant"),
    pytest.param({"json": {"id": 7, "name": "fern"},
                  "headers": {"Idempotency-Key": " padded"}}, id="malformed key"),
]


def _revoked(make_token):
    secret = make_token("alice")
    assert revoke_token(token_of(secret).id)
    return secret


@pytest.mark.parametrize("kwargs", BAD_CREATES)
@pytest.mark.parametrize("token", [
    pytest.param(lambda make_token: "pst_" + secrets.token_urlsafe(32), id="unknown"),
    pytest.param(_revoked, id="revoked"),
])
def test_an_invalid_token_is_401_before_a_bad_create_is_400(client, make_token, kwargs, token):
    """On PostgreSQL a create's own statement checks its token; a request
    that fails before that statement still answers for its token first."""
    kwargs = dict(kwargs)  # the parameter is shared between tests
    headers = {**kwargs.pop("headers", {}), **bearer(token(make_token))}
    response = client.post("/plants", headers=headers, **kwargs)
    assert_error(response, 401)
    assert response.headers["WWW-Authenticate"] == INVALID_TOKEN_CHALLENGE


@pytest.mark.parametrize("kwargs", BAD_CREATES)
def test_a_missing_scope_is_403_before_a_bad_create_is_400(client, make_token, kwargs):
    reader = make_token("alice", scopes=[READ])
    kwargs = dict(kwargs)  # the parameter is shared between tests
    response = client.post("/plants", headers={**kwargs.pop("headers", {}), **bearer(reader)},
                           **kwargs)
    assert_error(response, 403)


BAD_LISTS = [
    pytest.param("/plants?limit=abc", id="limit not a number"),
    pytest.param("/plants?limit=100000", id="limit over the maximum"),
    pytest.param("/plants?after=1.5", id="cursor not an integer"),
]


@pytest.mark.parametrize("path", BAD_LISTS)
@pytest.mark.parametrize("token", [
    pytest.param(lambda make_token: "pst_" + secrets.token_urlsafe(32), id="unknown"),
    pytest.param(_revoked, id="revoked"),
])
def test_an_invalid_token_is_401_before_a_bad_list_is_400(client, make_token, path, token):
    """A list's token is answered for before its query string."""
    response = client.get(path, headers=bearer(token(make_token)))
    assert_error(response, 401)
    assert response.headers["WWW-Authenticate"] == INVALID_TOKEN_CHALLENGE


@pytest.mark.parametrize("path", BAD_LISTS)
def test_a_missing_scope_is_403_before_a_bad_list_is_400(client, make_token, path):
    writer = make_token("alice", scopes=[WRITE])
    assert_error(client.get(path, headers=bearer(writer)), 403)


def test_a_list_sees_a_token_revoked_after_the_last_list(client, make_token):
    """A revocation binds the next list, first page or after a cursor,
    whether or not the page is empty."""
    secret = make_token("alice")
    assert client.post("/plants", json={"id": 1, "name": "fern"},
                       headers=bearer(secret)).status_code == 200
    assert [plant["name"] for plant in client.get(
        "/plants", headers=bearer(secret)).get_json()] == ["fern"]
    assert client.get("/plants?after=1", headers=bearer(secret)).get_json() == []
    assert revoke_token(token_of(secret).id)
    for path in ("/plants", "/plants?after=1"):
        response = client.get(path, headers=bearer(secret))
        assert_error(response, 401)
        assert response.headers["WWW-Authenticate"] == INVALID_TOKEN_CHALLENGE


@pytest.mark.parametrize("headers", [{}, {"Idempotency-Key": "k-1"}], ids=["plain", "keyed"])
def test_a_create_with_a_token_that_is_not_valid_writes_nothing(
        app, client, make_token, headers):
    """The create's statement that checks the token writes nothing without
    it: not the plant, not its deliveries, not the key; a taken id or a used
    key changes nothing about that."""
    writer = make_token("alice")
    with app.app_context():  # an operator's: hears about every plant (nothing answers)
        subscription = Subscription.create(url="http://127.0.0.1:1/hook", secret="whsec_a")
    assert client.post("/plants", json={"id": 1, "name": "fern"},
                       headers={**headers, **bearer(writer)}).status_code == 200
    for secret, status in ((_revoked(make_token), 401),
                           (make_token("alice", scopes=[READ]), 403)):
        for plant in ({"id": 1, "name": "fern"}, {"id": 2, "name": "moss"}):
            response = client.post("/plants", json=plant, headers={**headers, **bearer(secret)})
            assert_error(response, status)
            assert "Idempotent-Replayed" not in response.headers
    with app.app_context():
        assert [plant.id for plant in Plant.select()] == [1]
        assert Delivery.select().where(Delivery.subscription == subscription.id).count() == 1
        assert IdempotencyKey.select().count() == len(headers)


def test_tokens_are_prefixed_and_carry_256_bits_of_randomness(make_token):
    tokens = [make_token("alice") for _ in range(20)]
    assert len(set(tokens)) == len(tokens)
    for token in tokens:
        assert re.fullmatch(r"pst_[A-Za-z0-9_-]{43}", token), token
        assert len(base64.urlsafe_b64decode(token[4:] + "=")) * 8 >= 256


def test_tokens_are_stored_only_as_their_sha256_hex_digest(app, make_token):
    secret = make_token("alice")
    cursor = db.database.execute_sql('SELECT * FROM "token"')
    rows = [dict(zip([column[0] for column in cursor.description], row))
            for row in cursor.fetchall()]
    assert len(rows) == 1
    assert rows[0]["digest"] == hashlib.sha256(secret.encode()).hexdigest()
    stored = " ".join(str(value) for value in rows[0].values())
    assert secret not in stored
    # At most a short hint of the token is kept, for telling tokens apart.
    assert secret[len(rows[0]["hint"]):] not in stored
    assert len(rows[0]["hint"]) <= len("pst_") + 4


@pytest.mark.parametrize("path", ["/openapi.json", "/docs/", "/healthz", "/readyz"])
def test_documents_and_probes_need_no_token(client, path):
    assert client.get(path).status_code == 200
    garbage = client.get(path, headers={"Authorization": "Bearer not-a-token"})
    assert garbage.status_code == 200


# --- the database's clock: hosts whose clocks disagree judge tokens alike -------

postgres_clock_only = pytest.mark.skipif(
    not POSTGRES_URL, reason="SQLite serves one host: its clock is the process's")


def _set_expiry(secret, seconds_from_database_now):
    """Store a token's expiry relative to the database's clock, in SQL."""
    db.database.execute_sql(
        "UPDATE token SET expires_at = (now() AT TIME ZONE 'UTC') + %s * interval '1 second' "
        "WHERE digest = %s", (seconds_from_database_now, token_of(secret).digest))


def _seconds_from_database_now(column, secret):
    [(seconds,)] = db.database.execute_sql(
        f"SELECT extract(epoch FROM {column} - (now() AT TIME ZONE 'UTC')) FROM token "
        "WHERE digest = %s", (token_of(secret).digest,)).fetchall()
    return seconds


@postgres_clock_only
@pytest.mark.parametrize("process_clock_off_by, expires_in, valid", [
    pytest.param(timedelta(hours=1), 600, True, id="process ahead, token good 10 minutes"),
    pytest.param(-timedelta(hours=1), -600, False, id="process behind, token expired"),
])
@pytest.mark.parametrize("method, path, body", OPERATIONS[:2])
def test_token_expiry_is_judged_by_the_databases_clock(
        client, make_token, monkeypatch, process_clock_off_by, expires_in, valid,
        method, path, body):
    secret = make_token("alice", expires_in_days=1)
    _set_expiry(secret, expires_in)
    skew_process_clock(monkeypatch, process_clock_off_by)
    response = call(client, method, path, body, bearer(secret))
    if valid:
        assert response.status_code == 200, response.data
    else:
        assert_error(response, 401)
        assert response.headers["WWW-Authenticate"] == INVALID_TOKEN_CHALLENGE


@postgres_clock_only
def test_token_expiry_and_revocation_times_are_set_by_the_database(
        make_token, monkeypatch):
    skew_process_clock(monkeypatch, timedelta(days=3))
    secret = make_token("alice", expires_in_days=1)
    assert 86400 - 60 < _seconds_from_database_now("expires_at", secret) <= 86400
    assert token_of(secret).expires_at is not None
    assert revoke_token(token_of(secret).id)
    assert -60 < _seconds_from_database_now("revoked_at", secret) <= 0


@pytest.fixture
def cli_output(app, runner):
    """Run a ``plantstore`` command in-process; its stdout (it must succeed)."""
    def run(*args):
        with app.app_context():
            result = runner.invoke(args=list(args))
        assert result.exit_code == 0, result.output
        return result.stdout
    return run


@postgres_clock_only
def test_tokens_list_says_expired_by_the_databases_clock(cli_output, make_token, monkeypatch):
    good = make_token("alice", expires_in_days=1)
    expired = make_token("alice", expires_in_days=1)
    _set_expiry(good, 600)
    _set_expiry(expired, -600)
    skew_process_clock(monkeypatch, timedelta(hours=1))
    listing = cli_output("tokens", "list", "alice").splitlines()
    states = {line.split("\t")[2]: line.split("\t")[4] for line in listing}
    assert states[token_of(good).hint + "..."].startswith("expires ")
    assert states[token_of(expired).hint + "..."].startswith("expired ")


def test_a_token_issued_with_an_expiry_is_returned_with_the_time_stored(app, alice):
    with app.app_context(), db.database.atomic():
        row, secret = issue_token(token_of(alice).user, expires_in_days=2)
    assert row.expires_at == token_of(secret).expires_at
    left = row.expires_at - utcnow()
    assert timedelta(days=2) - timedelta(minutes=1) < left <= timedelta(days=2)
