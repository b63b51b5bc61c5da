"""Operators' commands for the keys that encrypt receivers' secrets at rest:
``plantstore keys generate`` and ``plantstore keys reencrypt`` (see
``plantstore/encryption.py``, and docs/operating.md for the rotation)."""
import click
from flask.cli import AppGroup

from .. import encryption
from ..webhooks.subscriptions import stored_secrets


@click.group("keys", cls=AppGroup, short_help="Keys that encrypt webhook secrets at rest.")
def keys_cli():
    """Keys that encrypt webhook secrets at rest (PLANTSTORE_ENCRYPTION_KEYS)."""


@keys_cli.command("generate")
def keys_generate():
    """Print a new random key for PLANTSTORE_ENCRYPTION_KEYS."""
    click.echo(encryption.generate_key())


@keys_cli.command("reencrypt")
def keys_reencrypt():
    """Rewrite every stored webhook secret and bearer token under the first key
    of PLANTSTORE_ENCRYPTION_KEYS, in small batches, while the service runs.

    Encrypts what is stored in plain text too. Safe to run again: what the
    first key already encrypts is left as it is. Then no old value is left in
    the database's files (PostgreSQL: VACUUM FULL subscription).
    """
    if not encryption.keyring().encrypts:
        raise click.ClickException(f"{encryption.SETTING} is empty: set it to the keys "
                                   "to encrypt under (`plantstore keys generate`)")
    try:
        tally = stored_secrets.reencrypt()
    except encryption.SecretUnreadable as error:
        raise click.ClickException(f"{error}: add the key it was encrypted under to "
                                   f"{encryption.SETTING}; nothing more was rewritten") from None
    click.echo(f"rewrote the secrets of {tally.rewritten} subscription(s); "
               f"{tally.current} already under the first key")
    left = stored_secrets.remove_old_versions()
    if left:
        raise click.ClickException(f"the old values may still be in the database's files: "
                                   f"{left}")
    click.echo("removed the old values from the database's files (backups and PostgreSQL's "
               "WAL from before keep them: see docs/operating.md)")
    if tally.changed_meanwhile:
        ids = ", ".join(str(i) for i in tally.changed_meanwhile)
        raise click.ClickException(f"subscription(s) {ids} kept changing while being "
                                   "rewritten; run `plantstore keys reencrypt` again")
