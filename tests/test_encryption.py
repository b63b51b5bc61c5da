"""Receivers' secrets encrypted at rest (PLANTSTORE_ENCRYPTION_KEYS): nothing
to forge webhooks with in a dump of the database, every delivery still
verified by a real receiver, the key rotation an operator follows run for
real (the ``plantstore`` command, in processes of its own), and a process
that holds no key for a stored secret refusing to start in one line."""
import json
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import psycopg2
import pytest
from cryptography.fernet import Fernet

from helpers import (
    POSTGRES_URL,
    REPO,
    bearer,
    free_port,
    plantstore_env,
    run_plantstore,
    setting,
)
from plantstore import encryption
from plantstore.db import database, erasure
from plantstore.db.models import Subscription
from plantstore.settings import SettingError
from plantstore.webhooks.subscriptions import stored_secrets
from plugins.webhooks import PATIENT_SENDS, store_plants, subscribe, verify

KEY_A, KEY_B = Fernet.generate_key().decode(), Fernet.generate_key().decode()
LOOPBACK = {**PATIENT_SENDS, "WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
            "WEBHOOK_RETRY_SCHEDULE": ""}

pytestmark = pytest.mark.app_config({**LOOPBACK, "ENCRYPTION_KEYS": KEY_A})


def plantstore(database_url, *args, keys):
    """Run the real ``plantstore`` command with these keys; the finished process."""
    env = {"PATH": "/usr/bin:/bin",
           **plantstore_env(database_url, ENCRYPTION_KEYS=keys, **LOOPBACK)}
    return run_plantstore(*args, env=env)


def register(client, token, url, bearer_token):
    response = client.post("/webhooks", json={"url": url, "bearer": bearer_token},
                           headers=bearer(token))
    assert response.status_code == 201, response.data
    return response.get_json()


def stored_values():
    """Every secret and bearer token as the database stores them."""
    values = []
    for subscription in Subscription.select():
        values += [subscription.secret, subscription.bearer_token]
        values += [entry["secret"] for entry in json.loads(subscription.retired_secrets or "[]")]
    return [value for value in values if value is not None]


def everything_stored(database_url):
    """All the bytes of the database: a pg_dump of it, or the SQLite files."""
    if database_url.startswith("postgresql"):
        pg_dump = shutil.which("pg_dump") or "/usr/lib/postgresql/15/bin/pg_dump"
        parts = urlsplit(database_url)
        dumped = subprocess.run(
            [pg_dump, "-h", parts.hostname, "-p", str(parts.port or 5432),
             "-U", parts.username or "postgres", "-d", parts.path.lstrip("/")],
            capture_output=True, timeout=120, check=True)
        return dumped.stdout
    path = Path(urlsplit(database_url).path[1:])
    return b"".join(file.read_bytes() for file in path.parent.glob(path.name + "*"))


def verified_by_every_secret(received, secrets):
    """The body of a received request, checked against each of ``secrets``."""
    return [verify(secret, received) for secret in secrets]


@pytest.mark.parametrize("written, hint", [
    (f"{KEY_A};{KEY_B}", "separate keys with commas"),
    (f"{KEY_A} {KEY_B}", "separate keys with commas"),
    (f"{KEY_A}garbage!!", ""), (f"{KEY_A}{KEY_B}", ""), (KEY_A.rstrip("="), "")])
def test_keys_run_together_or_with_garbage_after_them_are_refused_not_cut_to_the_first(
        written, hint):
    with pytest.raises(SettingError) as refused:
        setting("ENCRYPTION_KEYS").read(written)
    message = str(refused.value)
    assert message.startswith("PLANTSTORE_ENCRYPTION_KEYS ") and "\n" not in message
    assert "key 1 of 1 is not a Fernet key" in message and hint in message
    assert KEY_A not in message and KEY_B not in message


def test_a_malformed_key_is_one_line_that_never_shows_the_key():
    almost = KEY_A[:-2]
    result = run_plantstore("users", "list", env={
        "PATH": "/usr/bin:/bin", "PLANTSTORE_ENCRYPTION_KEYS": f"{KEY_A},{almost}"})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Error: PLANTSTORE_ENCRYPTION_KEYS") and "key 2 of 2" in line
    assert almost not in line and KEY_A not in line


def test_keys_generate_prints_a_key_the_setting_takes():
    result = run_plantstore("keys", "generate", env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    key = result.stdout.strip()
    assert encryption.parse_keys(key) == (key,)
    Fernet(key)


def test_no_secret_or_bearer_token_is_in_the_database_yet_every_delivery_verifies(
        app, client, runner, alice, make_receiver, database_url):
    users, operators = make_receiver(), make_receiver()
    body = register(client, alice, users.url, "users-bearer-token")
    rotated = client.post(f"/webhooks/{body['id']}/rotate-secret",
                          headers=bearer(alice)).get_json()["secret"]
    added = runner.invoke(args=["webhooks", "add", operators.url,
                                "--bearer", "operators-bearer-token"])
    assert added.exit_code == 0, added.output
    operator_secret = json.loads(added.stdout)["secret"]

    store_plants(app, [1, 2], give_back=True)
    worked = plantstore(database_url, "worker", "--once", keys=KEY_A)
    assert worked.returncode == 0, worked.stderr

    for got in users.wait_for(2):
        assert got.headers["authorization"] == "Bearer users-bearer-token"
        verified_by_every_secret(got, [body["secret"], rotated])
    for got in operators.wait_for(2):
        assert got.headers["authorization"] == "Bearer operators-bearer-token"
        verify(operator_secret, got)
    assert all(value.startswith(encryption.PREFIX) for value in stored_values())
    database.close_all()  # everything written is in the files (SQLite) or committed
    stored = everything_stored(database_url)
    assert b"fernet:" in stored  # the dump holds the subscriptions, encrypted
    for plain in (body["secret"], rotated, operator_secret, "users-bearer-token",
                  "operators-bearer-token"):
        assert plain.encode() not in stored
    assert b"whsec_" not in stored


def test_the_rotation_procedure_keeps_every_delivery_verified(
        app, client, alice, make_receiver, database_url):
    receiver = make_receiver()
    body = register(client, alice, receiver.url, "a-bearer-token")
    sent = 0

    def deliver_and_verify(keys, plant_id):
        nonlocal sent
        store_plants(app, [plant_id], give_back=True)
        worked = plantstore(database_url, "worker", "--once", keys=keys)
        assert worked.returncode == 0, worked.stderr
        sent += 1
        got = receiver.wait_for(sent)[-1]
        assert verify(body["secret"], got)["id"] == plant_id
        assert got.headers["authorization"] == "Bearer a-bearer-token"

    deliver_and_verify(KEY_A, 1)
    # 1. The new key last, on every node: it decrypts, it does not encrypt yet.
    deliver_and_verify(f"{KEY_A},{KEY_B}", 2)
    # 2. The new key first, the old one still there to decrypt.
    deliver_and_verify(f"{KEY_B},{KEY_A}", 3)
    # 3. Rewrite what is stored under the new key.
    reencrypted = plantstore(database_url, "keys", "reencrypt", keys=f"{KEY_B},{KEY_A}")
    assert reencrypted.returncode == 0, reencrypted.stderr
    assert "rewrote the secrets of 1 subscription(s)" in reencrypted.stdout
    for value in stored_values():
        Fernet(KEY_B).decrypt(value[len(encryption.PREFIX):].encode())
    deliver_and_verify(f"{KEY_B},{KEY_A}", 4)
    # 4. Drop the old key.
    deliver_and_verify(KEY_B, 5)
    again = plantstore(database_url, "keys", "reencrypt", keys=KEY_B)
    assert "rewrote the secrets of 0 subscription(s); 1 already" in again.stdout


@pytest.mark.app_config({**LOOPBACK, "ENCRYPTION_KEYS": ""})
def test_reencrypt_encrypts_a_database_written_in_plain_text(
        app, client, runner, alice, make_receiver, database_url):
    receiver = make_receiver()
    body = register(client, alice, receiver.url, "plain-bearer")
    client.post(f"/webhooks/{body['id']}/rotate-secret", headers=bearer(alice))
    runner.invoke(args=["webhooks", "add", "http://127.0.0.1:9/op"])
    assert not any(value.startswith(encryption.PREFIX) for value in stored_values())

    refused = plantstore(database_url, "keys", "reencrypt", keys="")
    assert refused.returncode == 1 and "PLANTSTORE_ENCRYPTION_KEYS is empty" in refused.stderr

    done = plantstore(database_url, "keys", "reencrypt", keys=KEY_A)

    assert done.returncode == 0, done.stderr
    assert "rewrote the secrets of 2 subscription(s); 0 already" in done.stdout
    values = stored_values()
    assert len(values) == 4 and all(v.startswith(encryption.PREFIX) for v in values)
    store_plants(app, [1], give_back=True)
    assert plantstore(database_url, "worker", "--once", keys=KEY_A).returncode == 0
    [got] = receiver.wait_for(1)
    assert got.headers["authorization"] == "Bearer plain-bearer"


def subscription_files(database_url):
    """The bytes of the files that hold the subscription table: PostgreSQL's
    (after a CHECKPOINT, so that they hold what the server has), or every
    SQLite file; the test is skipped when PostgreSQL's files are elsewhere."""
    if not database_url.startswith("postgresql"):
        return everything_stored(database_url)
    database.execute_sql("CHECKPOINT")
    [(directory, relation)] = database.execute_sql(
        "SELECT current_setting('data_directory'), pg_relation_filepath('subscription')")
    path = Path(directory) / relation
    if not path.exists():
        pytest.skip(f"PostgreSQL's files are not on this machine ({path})")
    return b"".join(file.read_bytes() for file in path.parent.glob(path.name + "*"))


@pytest.mark.app_config({**LOOPBACK, "ENCRYPTION_KEYS": ""})
def test_reencrypt_leaves_no_plain_secret_in_the_databases_files(runner, database_url):
    plain = []
    for n in range(50):
        _, secret = subscribe(runner, f"http://127.0.0.1:9/{n}", bearer=f"plain-bearer-{n}")
        plain += [secret.encode(), f"plain-bearer-{n}".encode()]
    before = subscription_files(database_url)
    assert all(value in before for value in plain)  # the files are where the values are

    done = plantstore(database_url, "keys", "reencrypt", keys=KEY_A)

    assert done.returncode == 0, done.stderr
    assert "removed the old values from the database's files" in done.stdout
    after = subscription_files(database_url)
    assert [value for value in plain if value in after] == []
    assert b"whsec_" not in after


@pytest.mark.skipif(not POSTGRES_URL, reason="PostgreSQL's snapshots; SQLite has none to wait for")
@pytest.mark.app_config({**LOOPBACK, "ENCRYPTION_KEYS": ""})
def test_old_values_a_transaction_begun_before_the_rewrite_may_see_are_named_then_removed(
        runner, database_url, monkeypatch):
    plain = [subscribe(runner, f"http://127.0.0.1:9/{n}", bearer=f"plain-bearer-{n}")[1].encode()
             for n in range(5)]
    reader = psycopg2.connect(database_url)  # a report running meanwhile, on one snapshot
    try:
        reader.set_session(isolation_level="REPEATABLE READ")
        reading = reader.cursor()
        reading.execute("SELECT count(*), pg_backend_pid() FROM plant")
        [(_, pid)] = reading.fetchall()
        monkeypatch.setattr(erasure, "VACUUM_TRY_FOR_SECONDS", 1)
        encryption.use((KEY_A,))
        stored_secrets.reencrypt()

        left = stored_secrets.remove_old_versions()

        assert left.startswith(f"session {pid}, in a transaction since "), left
        assert left.endswith("then run `VACUUM FULL subscription`")
        assert all(value in subscription_files(database_url) for value in plain)
    finally:
        reader.close()
    assert stored_secrets.remove_old_versions() is None
    assert not any(value in subscription_files(database_url) for value in plain)


def assert_refused_in_one_line(result):
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.strip().splitlines()
             if line.startswith("Error:")]
    assert len(lines) == 1 and "PLANTSTORE_ENCRYPTION_KEYS" in lines[0], result.stderr
    return lines[0]


@pytest.mark.parametrize("keys", [KEY_B, ""], ids=["another key", "no key"])
def test_a_worker_refuses_to_start_with_a_secret_no_key_opens(client, alice,
                                                              database_url, keys):
    register(client, alice, "http://127.0.0.1:9/hook", "tok")
    result = plantstore(database_url, "worker", "--once", keys=keys)
    line = assert_refused_in_one_line(result)
    assert "webhook subscription" in line
    assert result.stdout == ""


@pytest.mark.app_config({**LOOPBACK, "ENCRYPTION_KEYS": ""})
def test_without_keys_a_worker_runs_and_says_once_that_secrets_are_plain(
        client, alice, database_url):
    register(client, alice, "http://127.0.0.1:9/hook", "tok")
    result = plantstore(database_url, "worker", "--once", keys="")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("stored in plain text") == 1


@pytest.mark.slow
def test_a_web_server_refuses_to_start_with_a_secret_no_key_opens(client, alice,
                                                                  database_url):
    register(client, alice, "http://127.0.0.1:9/hook", "tok")
    env = {"PATH": "/usr/bin:/bin", **plantstore_env(database_url, ENCRYPTION_KEYS=KEY_B),
           "PORT": str(free_port()), "WEB_CONCURRENCY": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.conf.py", "wsgi:app"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert_refused_in_one_line(result)


def test_a_bearer_token_changed_by_patch_is_stored_encrypted_and_sent_plain(
        client, alice, make_receiver):
    receiver = make_receiver()
    body = register(client, alice, receiver.url, "first-token")

    changed = client.patch(f"/webhooks/{body['id']}", json={"bearer": "second-token"},
                           headers=bearer(alice))

    assert changed.status_code == 200, changed.data
    stored = Subscription.get_by_id(body["id"]).bearer_token
    assert stored.startswith(encryption.PREFIX) and "second-token" not in stored
    client.post("/plants", json={"id": 1, "name": "fern"}, headers=bearer(alice))
    [got] = receiver.wait_for(1)
    assert got.headers["authorization"] == "Bearer second-token"
    verify(body["secret"], got)


def test_reencrypt_leaves_a_subscription_changed_meanwhile_as_the_change_left_it(
        client, alice):
    body = register(client, alice, "http://127.0.0.1:9/hook", "a-token")
    read = next(iter(stored_secrets._batches()))[0]
    rotated = client.post(f"/webhooks/{body['id']}/rotate-secret", headers=bearer(alice))
    assert rotated.status_code == 200
    after_rotation = Subscription.get_by_id(body["id"]).secret

    outcome = stored_secrets._rewrite(encryption.Keyring((KEY_B, KEY_A)), read)

    assert outcome == "changed"
    assert Subscription.get_by_id(body["id"]).secret == after_rotation
