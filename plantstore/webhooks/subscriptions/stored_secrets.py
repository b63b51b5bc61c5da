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

from peewee import DatabaseError

from ... import encryption
from ...db import database, erasure
from ...db.models import Subscription
from ...settings import SettingError
from . import store

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


def _rewrite(keyring, row):
    """Rewrite one subscription's values if they are still as read: 'rewritten',
    'current', or 'changed' (a rotation or a PATCH came first)."""
    subscription_id, secret, bearer_token, retired_secrets = row
    values = _resealed(keyring, secret, bearer_token, retired_secrets)
    if values is None:
        return "current"
    read = {"secret": secret, "bearer_token": bearer_token, "retired_secrets": retired_secrets}
    written = store.rewrite_if_unchanged(subscription_id, read, values)
    return "rewritten" if written else "changed"


def reencrypt(progress=None):
    """Store every subscription's secrets as the first key seals them (plain
    text, if no keys), a batch of ``BATCH`` per transaction, while the service
    runs; a ``Tally``. ``SecretUnreadable`` if a value no key opens is found
    (nothing of its batch is written). The space the old values free is
    zeroed where the database can (``erasure.zero_freed_space``);
    ``remove_old_versions`` does the rest."""
    keyring = encryption.keyring()
    tally = Tally()
    erasure.zero_freed_space()
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


def remove_old_versions():
    """Leave no copy of a value ``reencrypt`` replaced in the database's files;
    None once done, else why not (a sentence naming what to run)."""
    return erasure.remove_replaced_versions(
        Subscription._meta.table_name, rerun="`plantstore keys reencrypt`")
