"""Operators' commands for the portal: ``plantstore portal link`` mints a
link for a user, ``plantstore portal sessions end`` ends a user's sessions."""
import re

import click
from flask import current_app
from flask.cli import AppGroup

from ..db.models import User
from ..portal import links, sessions
from .params import USER_NAME

DURATION = re.compile(r"([0-9]{1,6})([smh]?)")
UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600}


class Duration(click.ParamType):
    """A link's lifetime: seconds, or a number with s, m or h (``15m``)."""
    name = "duration"

    def convert(self, value, param, ctx):
        match = DURATION.fullmatch(str(value).strip())
        seconds = int(match[1]) * UNIT_SECONDS[match[2]] if match else None
        if seconds is None or not links.MIN_TTL_SECONDS <= seconds <= links.MAX_TTL_SECONDS:
            self.fail(f"expected a duration from {links.MIN_TTL_SECONDS}s to 24h, e.g. "
                      f"15m, not {value!r}", param, ctx)
        return seconds


def _user(name):
    user = User.get_or_none(User.name == name)
    if user is None:
        raise click.ClickException(f"no user named {name!r}")
    return user


@click.group("portal", cls=AppGroup)
def portal_cli():
    """Links into the webhook portal, and its sessions."""


@portal_cli.command("link")
@click.argument("name", type=USER_NAME)
@click.option("--read-only", is_flag=True, help="The session sees every page and "
                                                "changes nothing.")
@click.option("--ttl", type=Duration(), default="15m", show_default=True,
              help="How long the link lasts unused (60s to 24h).")
def portal_link(name, read_only, ttl):
    """Print a single-use link into the portal for user NAME."""
    public_url = current_app.config["PORTAL_URL"]
    if not public_url:
        raise click.ClickException("the portal is off: set PLANTSTORE_PORTAL_URL to its "
                                   "public base URL (docs/portal.md)")
    url, expires_at = links.mint(public_url, _user(name).id, read_only, ttl)
    click.echo(url)
    click.echo(f"expires {expires_at:%Y-%m-%d %H:%M:%S} UTC; it opens the portal once",
               err=True)


@portal_cli.group("sessions", cls=AppGroup)
def portal_sessions():
    """The users' portal sessions."""


@portal_sessions.command("end")
@click.argument("name", type=USER_NAME)
def portal_sessions_end(name):
    """End every portal session of user NAME at once."""
    ended = sessions.end_for_user(_user(name).id)
    click.echo(f"ended {ended} portal session{'s' if ended != 1 else ''} of {name}")
