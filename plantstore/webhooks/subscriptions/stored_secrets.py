"""The receivers' secrets as stored, across every subscription: checked when
a process starts, and rewritten under the first key (``plantstore keys
reencrypt``).

A subscription stores three kinds: its signing secret, its rotated-out
secrets (inside the ``retired_secrets`` JSON) and its bearer token; each
may be plain or encrypted (see ``plantstore.encryption``).
"""
import dataclasses
import json
import logging
import random
import re
import time

from peewee import DatabaseError

from ... import encryption
from ...db import database, is_sqlite
from ...db.migration_runner import sqlstate
from ...models import Subscription
from ...settings import SettingError

log = logging.getLogger(__name__)

BATCH = 100
"""Subscriptions one reencrypt transaction rewrites: each is short, so a
running service's registrations, rotations and deliveries barely wait."""

ROUNDS = 5
"""Times reencrypt reads a subscription again that changed while it was
being rewritten (a rotation, a PATCH) before it says so and moves on."""


def _stored_values(secret, bearer_token, retired_secrets):
    """Every stored value of one subscription's columns."""
    retired = [entry["secret"] for entry in json.loads(retired_secrets or "[]")]
    return [secret, bearer_token, *retired]


def _selected():
    """(id, secret, bearer token, retired secrets) of subscriptions, by id."""
    return (Subscription.select(Subscription.id, Subscription.secret,
                                Subscription.bearer_token, Subscription.retired_secrets)
            .order_by(Subscription.id).tuples())


def _rows(after_id, limit, only_sealed=False):
    query = _selected().where(Subscription.id > after_id).limit(limit)
    if only_sealed:
        query = query.where(Subscription.secret.startswith(encryption.PREFIX)
                            | Subscription.bearer_token.startswith(encryption.PREFIX)
                            | Subscription.retired_secrets.contains(encryption.PREFIX))
    return list(query)


def _batches(only_sealed=False):
    after_id = 0
    while True:
        rows = _rows(after_id, BATCH, only_sealed)
        if not rows:
            return
        yield rows
        after_id = rows[-1][0]


def check_at_start():
    """Before a web server or a worker starts: ``SettingError`` (naming
    PLANTSTORE_ENCRYPTION_KEYS, one line) if a stored secret is one that no
    configured key opens; without keys, log once that secrets are stored in
    plain text. A database without the table yet (or unreachable) is not
    checked: the process starts as it would have."""
    keyring = encryption.keyring()
    if not keyring.encrypts:
        log.warning("webhook signing secrets and bearer tokens are stored in plain text: "
                    "set %s (see docs/operating.md, \"Encryption at rest\")",
                    encryption.SETTING)
    try:
        with database.connection_context():
            unreadable = _first_unreadable(keyring)
    except DatabaseError as error:
        log.warning("stored webhook secrets not checked: the database failed: %s",
                    str(error).strip().splitlines()[0] if str(error).strip() else error)
        return
    if unreadable is not None:
        how = ("holds no key: set it to the keys they were encrypted under"
               if not keyring.encrypts else
               "opens none of them: add the key they were encrypted under")
        raise SettingError(f"{encryption.SETTING} {how} (webhook subscription "
                           f"{unreadable} stores encrypted secrets)")


def _first_unreadable(keyring):
    """The id of the first subscription with a value ``keyring`` cannot open."""
    for rows in _batches(only_sealed=True):
        for subscription_id, *columns in rows:
            try:
                for stored in _stored_values(*columns):
                    keyring.open(stored)
            except encryption.SecretUnreadable:
                return subscription_id
    return None


@dataclasses.dataclass
class Tally:
    """What a reencrypt did."""
    rewritten: int = 0  # subscriptions whose values were rewritten
    current: int = 0  # already as the first key would store them
    changed_meanwhile: list = dataclasses.field(default_factory=list)  # ids left as they were


def _resealed(keyring, secret, bearer_token, retired_secrets):
    """The three columns as ``keyring`` stores them now (None: no change needed)."""
    if all(keyring.is_current(value)
           for value in _stored_values(secret, bearer_token, retired_secrets)):
        return None
    retired = None
    if retired_secrets is not None:
        retired = json.dumps([{**entry, "secret": keyring.reseal(entry["secret"])}
                              for entry in json.loads(retired_secrets)])
    return {"secret": keyring.reseal(secret), "bearer_token": keyring.reseal(bearer_token),
            "retired_secrets": retired}


def _unchanged(column, value):
    return column.is_null() if value is None else column == value


def _rewrite(keyring, row):
    """Rewrite one subscription's values if they are still as read: 'rewritten',
    'current', or 'changed' (a rotation or a PATCH came first)."""
    subscription_id, secret, bearer_token, retired_secrets = row
    values = _resealed(keyring, secret, bearer_token, retired_secrets)
    if values is None:
        return "current"
    written = (Subscription.update(**values)
               .where(Subscription.id == subscription_id,
                      _unchanged(Subscription.secret, secret),
                      _unchanged(Subscription.bearer_token, bearer_token),
                      _unchanged(Subscription.retired_secrets, retired_secrets))
               .execute())
    return "rewritten" if written else "changed"


def reencrypt(progress=None):
    """Store every subscription's secrets as the first key seals them (plain
    text, if no keys), a batch of ``BATCH`` per transaction, while the service
    runs; a ``Tally``. ``SecretUnreadable`` if a value no key opens is found
    (nothing of its batch is written). On SQLite the pages it frees are
    zeroed (``secure_delete``); ``remove_old_versions`` does the rest."""
    keyring = encryption.keyring()
    tally = Tally()
    if is_sqlite():
        database.execute_sql("PRAGMA secure_delete = ON")
    for rows in _batches():
        for _ in range(ROUNDS):
            changed = []
            with database.atomic():
                for row in rows:
                    outcome = _rewrite(keyring, row)
                    if outcome == "changed":
                        changed.append(row[0])
                    else:
                        setattr(tally, outcome, getattr(tally, outcome) + 1)
            if not changed:
                break
            rows = list(_selected().where(Subscription.id.in_(changed)))
        else:
            tally.changed_meanwhile.extend(changed)
        if progress:
            progress(tally)
    return tally


VACUUM_LOCK_TIMEOUT_MS = 200
"""How long one try of ``VACUUM FULL`` waits for the table's lock: creates
that read subscriptions queue behind a waiting one, so it gives way soon."""

VACUUM_TRY_FOR_SECONDS = 60
"""How long ``remove_old_versions`` waits for older snapshots to end and for
the lock, in all, before it says it could not."""

_OLDER_SNAPSHOT = """
SELECT 'session ' || pid || ', in a transaction since ' || to_char(xact_start, 'HH24:MI:SS')
  FROM pg_stat_activity
 WHERE (datname = current_database() OR backend_type = 'walsender')
   AND backend_type <> 'autovacuum worker' AND pid <> pg_backend_pid()
   AND (age(backend_xmin) >= age(%(xid)s::text::xid)
        OR age(backend_xid) >= age(%(xid)s::text::xid))
UNION ALL
SELECT 'replication slot ' || slot_name FROM pg_replication_slots
 WHERE xmin IS NOT NULL AND age(xmin) >= age(%(xid)s::text::xid)
UNION ALL
SELECT 'prepared transaction ' || gid FROM pg_prepared_xacts
 WHERE database = current_database() AND age(transaction) >= age(%(xid)s::text::xid)
 LIMIT 1
"""
"""What holds PostgreSQL's horizon at or before transaction ``xid`` (a
snapshot, or a transaction, begun before it): while one does, ``VACUUM
FULL`` keeps the row versions replaced before ``xid`` (it copies every
version some transaction may still see)."""


def remove_old_versions():
    """Leave no copy of a value ``reencrypt`` replaced in the database's files;
    None once done, else why not (a sentence naming what to run).

    PostgreSQL keeps an updated row's old version in the table's file: plain
    ``VACUUM`` only marks its space reusable (measured: after a reencrypt of
    2,000 plain-text subscriptions and a ``VACUUM``, 1,249 plain secrets were
    still in the file), so the table is rewritten by ``VACUUM FULL`` (which
    cannot run in a transaction), once nothing holds the horizon from before
    the rewrite, under an ACCESS EXCLUSIVE lock asked for with a short
    ``lock_timeout``, again and again, never waited for; its own count of the
    dead versions it had to keep says whether it is done. SQLite (whose
    freed pages ``secure_delete`` zeroed) folds its WAL file, which may hold
    the pages as they were, into the database and empties it."""
    if is_sqlite():
        busy, _, _ = database.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return ("the WAL file could not be emptied while readers used it: run "
                "`plantstore keys reencrypt` again in a quiet moment") if busy else None
    deadline = time.monotonic() + VACUUM_TRY_FOR_SECONDS
    [(after,)] = database.execute_sql("SELECT mod(txid_current(), 4294967296)").fetchall()
    while True:
        holder = database.execute_sql(_OLDER_SNAPSHOT, {"xid": after}).fetchone()
        if holder is None:
            kept = _vacuum_full(deadline)
            if kept is None:
                return (f"the subscription table stayed locked for {VACUUM_TRY_FOR_SECONDS} s: "
                        "run `VACUUM FULL subscription` in a quiet moment")
            if kept == 0:
                return None
        if time.monotonic() > deadline:
            return (f"{holder[0] if holder else 'a transaction begun before the rewrite'} "
                    "may still see the old values, which stay until it ends: then run "
                    "`VACUUM FULL subscription`")
        time.sleep(0.2)


_KEPT = re.compile(r"(\d+) dead row versions cannot be removed yet")


def _vacuum_full(deadline):
    """``VACUUM FULL subscription``, trying for its lock until ``deadline``: how
    many dead row versions it had to keep (PostgreSQL's own count), or None
    if it never had the lock."""
    connection = database.connection()
    database.execute_sql(f"SET lock_timeout = '{VACUUM_LOCK_TIMEOUT_MS}ms'")
    try:
        while True:
            del connection.notices[:]
            try:
                database.execute_sql("VACUUM (FULL, VERBOSE) subscription")
            except DatabaseError as error:
                if sqlstate(error) != "55P03":  # lock_not_available
                    raise
            else:
                return sum(int(found) for notice in connection.notices
                           for found in _KEPT.findall(notice))
            if time.monotonic() > deadline:
                return None
            time.sleep(random.uniform(0.05, 0.25))  # let the queue of writers drain
    finally:
        database.execute_sql("RESET lock_timeout")
