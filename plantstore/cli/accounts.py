"""``plantstore users`` and ``plantstore tokens``: the accounts API clients
use, and their bearer tokens."""
import click
from flask import current_app
from flask.cli import AppGroup
from peewee import IntegrityError

from .. import db
from ..db import clock
from ..db.models import Subscription, Token, User
from ..web.auth import ALL_SCOPES, issue_token, revoke_token
from ..webhooks.engine import queue
from .params import NEW_USER_NAME, ROW_ID, USER_NAME, days


def _find_user(name):
    """The user called ``name``, or a one-line error."""
    user = User.get_or_none(User.name == name)
    if user is None:
        raise click.ClickException(f"no user named {name!r}")
    return user


@click.group("users", cls=AppGroup)
def users_cli():
    """Create, list and delete users."""


@users_cli.command("create")
@click.argument("name", type=NEW_USER_NAME)
@click.option("--admin", is_flag=True, help="The user sees every user's plants.")
def users_create(name, admin):
    """Create a user called NAME.

    NAME is kept in its one form (PRECIS UsernameCasePreserved, RFC 8265:
    Unicode NFC, fullwidth letters made usual) and must be written in one
    script, without spaces, e.g. alice, alice.smith or Zoë.
    """
    try:
        with db.database.atomic():
            User.create(name=name, is_admin=admin)
    except IntegrityError:
        raise click.ClickException(f"a user named {name!r} already exists") from None
    click.echo(f"created user {name}" + (" (admin)" if admin else ""))


@users_cli.command("list")
def users_list():
    """List users."""
    for user in User.select().order_by(User.name):
        click.echo(f"{user.name}\t{'admin' if user.is_admin else 'user'}")


@users_cli.command("delete")
@click.argument("name", type=USER_NAME)
def users_delete(name):
    """Delete user NAME with their tokens, plants and webhook subscriptions."""
    user = _find_user(name)
    with db.database.atomic():
        # Each subscription first, as DELETE /webhooks/{id} deletes it (its
        # row before its deliveries: the one lock order of
        # docs/webhooks-isolation.md); then the rest. delete_nullable: a
        # subscription without an owner would be an operator's.
        for subscription in Subscription.select(Subscription.id).where(
                Subscription.owner == user.id):
            queue.delete_subscription(subscription.id)
        user.delete_instance(recursive=True, delete_nullable=True)
    click.echo(f"deleted user {name}")


@click.group("tokens", cls=AppGroup)
def tokens_cli():
    """Issue, list and revoke bearer tokens."""


@tokens_cli.command("create")
@click.argument("name", type=USER_NAME)
@click.option("--expires-in", "expires_in", type=days(36500), metavar="DAYS",
              help="Days until the token expires (default: never).")
@click.option("--scope", "scopes", multiple=True, type=click.Choice(ALL_SCOPES),
              help="Grant only this scope (repeatable; default: all).")
def tokens_create(name, expires_in, scopes):
    """Issue a token for user NAME and print it (it is shown only this once)."""
    user = _find_user(name)
    with db.database.atomic():
        _, secret = issue_token(user, scopes or ALL_SCOPES, expires_in,
                                prefix=current_app.config["TOKEN_PREFIX"])
    click.echo(secret)


@tokens_cli.command("list")
@click.argument("name", type=USER_NAME, required=False)
def tokens_list(name):
    """List tokens (of user NAME, or of everybody): id, user, hint, state."""
    # Expired by the database's clock, as requests are judged (see auth.py).
    query = (Token.select(Token, User, (Token.expires_at <= clock.now()).alias("expired"))
             .join(User).order_by(Token.id))
    if name:
        query = query.where(Token.user == _find_user(name))
    for token in query:
        if token.revoked_at:
            state = f"revoked {token.revoked_at:%Y-%m-%d}"
        elif token.expired:
            state = f"expired {token.expires_at:%Y-%m-%d}"
        elif token.expires_at:
            state = f"expires {token.expires_at:%Y-%m-%d}"
        else:
            state = "active"
        click.echo(f"{token.id}\t{token.user.name}\t{token.hint}...\t{token.scopes}\t{state}")


@tokens_cli.command("revoke")
@click.argument("token_id", type=ROW_ID)
def tokens_revoke(token_id):
    """Revoke the token with id TOKEN_ID (see `tokens list`)."""
    if not revoke_token(token_id):
        raise click.ClickException(f"no active token with id {token_id}")
    click.echo(f"revoked token {token_id}")
