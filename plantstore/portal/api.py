"""``POST /webhooks/portal-links``: a user's token mints a link into the portal."""
import marshmallow as ma
from flask import current_app, g
from flask_smorest import abort
from marshmallow import validate

from ..web.api import Blueprint
from ..web.auth import WEBHOOKS_WRITE
from ..web.fields import StrictBoolean, UtcDateTime
from . import links

blp = Blueprint("portal-links", __name__, description="Links into the portal")


class NewPortalLinkSchema(ma.Schema):
    """What the link may do and how long it lasts."""

    class Meta:
        unknown = ma.RAISE

    error_messages = {"unknown": "Unknown field: send read_only and ttl_seconds only, "
                                 'e.g. {"read_only": true, "ttl_seconds": 900}.',
                      "type": 'The body must be a JSON object, e.g. {"read_only": true}.'}

    read_only = StrictBoolean(load_default=False, metadata={
        "description": "A session that sees every page and changes nothing."})
    ttl_seconds = ma.fields.Integer(
        strict=True, load_default=links.DEFAULT_TTL_SECONDS,
        validate=validate.Range(links.MIN_TTL_SECONDS, links.MAX_TTL_SECONDS, error=(
            f"Must be a whole number of seconds from {links.MIN_TTL_SECONDS} to "
            f"{links.MAX_TTL_SECONDS}, e.g. 900.")),
        metadata={"description": "Seconds until the link expires unused.", "example": 900})


class PortalLinkSchema(ma.Schema):
    """A single-use link into the portal."""

    class Meta:
        ordered = True

    url = ma.fields.String(required=True, metadata={
        "description": "Open it once, in a browser; it is never shown again."})
    expires_at = UtcDateTime(required=True)


@blp.route("/webhooks/portal-links", methods=["POST"])
@blp.doc(operationId="createPortalLink")
@blp.login_required(WEBHOOKS_WRITE)
@blp.json_body(NewPortalLinkSchema, description="What the link may do, how long it lasts")
@blp.response(201, PortalLinkSchema, description="The link, to be opened once")
@blp.documents_errors(400, 404)
def create_portal_link(new):
    """Mints a single-use link into the portal for the caller.

    Opening it in a browser shows a page whose button starts a portal
    session on your webhook endpoints and deliveries (read-only if asked);
    fetching it spends nothing, so a mail scanner cannot. Revoking this
    token ends the sessions its links started. 404 when the portal is off
    on this server.
    """
    public_url = current_app.config["PORTAL_URL"]
    if not public_url:
        abort(404, message="The portal is off on this server: its operator has not set "
                           "PLANTSTORE_PORTAL_URL.")
    url, expires_at = links.mint(public_url, g.caller.user_id, new["read_only"],
                                 new["ttl_seconds"], g.caller.token_id)
    return {"url": url, "expires_at": expires_at}, 201
