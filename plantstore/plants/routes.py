"""The three plant operations: create, list (keyset-paged), delete."""
import marshmallow as ma
from flask import current_app, g
from flask_smorest import abort
from peewee import IntegrityError

from .. import webhooks
from ..db.models import Plant
from ..web import idempotency
from ..web.api import Blueprint, json_response, no_content
from ..web.auth import READ, WRITE, token_to_check
from ..web.errors import RETRY_AFTER_SECONDS, error_response
from ..web.paging import link_header_doc, next_page_link
from . import queries
from .schemas import (
    INT64_MAX,
    INT64_MIN,
    IntegerText,
    NewPlantSchema,
    PlantQueryArgsSchema,
    PlantSchema,
    plant_json,
)

PLANT_ID = IntegerText(INT64_MIN, INT64_MAX, json_spellings=True)
"""The id in ``/plants/{id}``: also spelled as the create body may spell it
(the document's link sends a created id back as it was written)."""

blp = Blueprint("plants", __name__, description="Plants in the store")

LINK_HEADER_DOC = link_header_doc("more plants")


@blp.route("/plants", methods=["GET"])
@blp.doc(operationId="listPlants")
@blp.login_required(READ)
@blp.arguments(PlantQueryArgsSchema, location="query", as_kwargs=True)
@blp.response(200, PlantSchema(many=True), headers=LINK_HEADER_DOC,
              description="Plant response")
def list_plants(limit=None, after=None):
    """Returns all plants from the system that the user has access to.

    Ordered by id. When more plants remain, a Link header points at the next
    page.
    """
    limit_max = current_app.config["LIST_LIMIT_MAX"]
    limit_default = min(current_app.config["LIST_LIMIT_DEFAULT"], limit_max)
    if limit is None:
        limit = limit_default
    elif limit > limit_max:
        abort(400, messages={"query": {"limit": [
            f"Must be less than or equal to {limit_max}, e.g. {limit_default}."]}})
    rows = queries.page(g.caller, after, limit + 1)
    headers = {}
    if len(rows) > limit:
        rows = rows[:limit]
        headers["Link"] = next_page_link("/plants", limit=limit, after=rows[-1]["id"])
    return json_response([plant_json(row["name"], row["tag"]) for row in rows],
                          headers=headers)


@blp.route("/plants", methods=["POST"])
@blp.doc(operationId="createPlant")
@blp.login_required(WRITE, checked_by_write=webhooks.create_checks_caller)
@blp.json_body(NewPlantSchema, description="Plant to add to the store")
@blp.idempotent(claimed_by_write=webhooks.create_checks_caller)
@blp.response(200, PlantSchema, description="plant response")
@blp.documents_errors(409)
def create_plant(new_plant):
    """Creates a new plant in the store.

    The id is chosen by the client and must be unused (409 otherwise). Every
    active webhook subscription is told, at least once.
    """
    token = token_to_check()  # when the create's statement checks it (PostgreSQL)
    plant = Plant(owner=None if token else g.caller.user_id, **new_plant)
    answer = json_response(plant_json(plant.name, plant.tag))
    try:
        webhooks.store_and_announce(plant, current_app, token, idempotency.answering(answer))
    except IntegrityError:
        abort(409, message=f"A plant with id {new_plant['id']} already exists.")
    except webhooks.SubscriptionsChanging:
        return error_response(503, "Webhook subscriptions changed during the create and "
                               "nothing was stored; try again.",
                               headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
    return answer


def _plant_id(raw):
    """The int64 a path segment names, or a 400."""
    try:
        return PLANT_ID.deserialize(raw)
    except ma.ValidationError as error:
        abort(400, messages={"path": {"id": error.messages}})


@blp.route("/plants/<plant_id:id>", methods=["DELETE"])
@blp.doc(operationId="deletePlant")
@blp.login_required(WRITE)
@blp.response(204, description="Plant deleted")
@blp.documents_errors(400, 404)
def delete_plant(id):
    """Deletes a single plant based on the ID supplied."""
    plant_id = _plant_id(id)
    query = Plant.delete().where(Plant.id == plant_id)
    if not g.caller.is_admin:
        query = query.where(Plant.owner == g.caller.user_id)
    deleted = query.execute()
    if not deleted:
        abort(404, message=f"No plant with id {plant_id}.")
    return no_content()
