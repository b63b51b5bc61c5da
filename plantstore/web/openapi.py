"""The served OpenAPI 3.1 document's extras and the docs page.

flask-smorest documents the routes; this adds what it cannot know: the
bearer scheme, the integer type of the plant id path segment, the list
bounds taken from configuration, the "New Plant" webhook (apispec has no
notion of OpenAPI 3.1 ``webhooks``), and Swagger UI served from the
installed flask-swagger-ui package, with no CDN and no validator badge:
the page asks no host but the service for anything.
"""
import apispec
from flask_swagger_ui import get_swaggerui_blueprint
from werkzeug.routing import BaseConverter

from .ratelimit import RateLimitPlugin

API_TITLE = "OpenAPI Plant Store"
API_VERSION = "1.0.0"
OPENAPI_VERSION = "3.1.0"
DOCS_PATH = "/docs"


class PlantIdConverter(BaseConverter):
    """Any single path segment; the view turns it into an int64 or a 400.

    Documented as an int64. Matching loosely lets the view authenticate
    first, so a bad id from an anonymous caller still gets a 401.
    """
    regex = "[^/]+"


class RowIdConverter(BaseConverter):
    """A stored row's id (a webhook subscription's): any single path segment,
    which the view turns into an integer from 1 to 2**31-1 or a 400,
    after authenticating, as for plant ids.

    But ``portal-links``, the name of ``/webhooks/portal-links``: another
    method on that path is a 405, not ``PATCH /webhooks/{id}``'s 400."""
    regex = "(?!portal-links$)[^/]+"


class DeliveryIdConverter(BaseConverter):
    """A webhook delivery's id: any single path segment, which the view turns
    into an integer from 1 to 2**63-1 or a 400, after authenticating."""
    regex = "[^/]+"


def _header(name, description, example, required=True):
    """A header parameter of the New Plant webhook's request."""
    return {"in": "header", "name": name, "required": required,
            "description": description, "schema": {"type": "string"},
            "example": example}


WEBHOOK_HEADERS = [
    _header("webhook-id", "The event's id, the same on every retry: drop duplicates "
                          "by it.", "msg_5b0c0f3c1f6e4a1b9d2f3e4a5b6c7d8e"),
    _header("webhook-timestamp", "This attempt's time, in Unix seconds.", "1795312345"),
    _header("webhook-signature",
            "`v1,` and the base64 HMAC-SHA256 of `{webhook-id}.{webhook-timestamp}.{body}`, "
            "keyed with the base64-decoded part of the secret after `whsec_`; several "
            "signatures, separated by spaces, while rotated-out secrets overlap.",
            "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4="),
    _header("Authorization", "`Bearer` and the subscription's bearer token, when it "
                             "was registered with one.", "Bearer receiver-token",
            required=False),
]


def spec_config():
    """The app config keys flask-smorest reads to build and serve the document."""
    return {
        "API_TITLE": API_TITLE,
        "API_VERSION": API_VERSION,
        "OPENAPI_VERSION": OPENAPI_VERSION,
        "OPENAPI_URL_PREFIX": "/",
        "OPENAPI_JSON_PATH": "openapi.json",
        "API_SPEC_OPTIONS": {
            "info": {
                "description": "A plant store: add, list and delete plants, and "
                               "hear about new ones through the New Plant webhook.",
                "license": {"name": "MIT", "identifier": "MIT"},
            },
            "security": [{"bearerAuth": []}],
            "webhooks": {
                "/plant/webhook": {"post": {
                    "operationId": "newPlant",
                    "summary": "New Plant",
                    "description": "Information about a new plant added to the "
                                   "store, signed per Standard Webhooks "
                                   "(the webhook-id, webhook-timestamp and "
                                   "webhook-signature headers below).",
                    "security": [{"bearerAuth": []}],
                    "parameters": WEBHOOK_HEADERS,
                    "requestBody": {
                        "description": "Plant added to the store",
                        "content": {"application/json": {"schema": {
                            "$ref": "#/components/schemas/NewPlant"}}},
                    },
                    "responses": {"200": {
                        "description": "Return a 200 status to indicate that the "
                                       "data was received successfully"}},
                }},
            },
        },
    }


class PlantstorePlugin(apispec.BasePlugin):
    """What the document learns from the app rather than from the routes.

    - the configured default and maximum of ``GET /plants``' ``limit``;
    - a link from a create to the delete of what it created (OpenAPI
      ``links``): the create answer carries no id (the contract says so), so
      the link takes it from the request body, and clients and stateful
      testers learn that the id they sent is the one to delete;
    - links from a new webhook subscription, and from the list of them, to
      every operation on one.
    """

    def __init__(self, config):
        super().__init__()
        self.config = config

    def operation_helper(self, path=None, operations=None, **kwargs):
        if path == "/webhooks" and operations:
            _link_to_subscription(operations.get("post", {}), 201, "$response.body#/id")
            _link_to_subscription(operations.get("get", {}), 200, "$response.body#/0/id")
        if path != "/plants" or not operations:
            return
        for parameter in operations.get("get", {}).get("parameters", []):
            if parameter.get("name") == "limit":
                parameter["schema"]["maximum"] = self.config["LIST_LIMIT_MAX"]
                parameter["schema"]["default"] = self.config["LIST_LIMIT_DEFAULT"]
        responses = operations.get("post", {}).get("responses", {})
        # Status codes are still integers here; apispec makes them strings later.
        created = responses.get(200, responses.get("200"))
        if created is not None:
            created["links"] = {"DeletePlant": {
                "operationRef": "#/paths/~1plants~1%7Bid%7D/delete",
                "parameters": {"id": "$request.body#/id"},
                "description": "The id sent in the create request deletes the new plant.",
            }}


SUBSCRIPTION_OPERATIONS = {
    "GetWebhook": "~1webhooks~1%7Bid%7D/get",
    "DeleteWebhook": "~1webhooks~1%7Bid%7D/delete",
    "EnableWebhook": "~1webhooks~1%7Bid%7D~1enable/post",
    "DisableWebhook": "~1webhooks~1%7Bid%7D~1disable/post",
    "RotateWebhookSecret": "~1webhooks~1%7Bid%7D~1rotate-secret/post",
    "ListWebhookDeliveries": "~1webhooks~1%7Bid%7D~1deliveries/get",
    "TestWebhook": "~1webhooks~1%7Bid%7D~1test/post",
    "RecoverWebhookDeliveries": "~1webhooks~1%7Bid%7D~1recover/post",
}


def _link_to_subscription(operation, status, id_expression):
    """Links from an answer naming subscriptions to every operation on one
    (OpenAPI ``links``), so clients and stateful testers follow the id."""
    responses = operation.get("responses", {})
    answer = responses.get(status, responses.get(str(status)))
    if answer is not None:
        answer["links"] = {name: {"operationRef": f"#/paths/{ref}",
                                  "parameters": {"id": id_expression}}
                           for name, ref in SUBSCRIPTION_OPERATIONS.items()}


def spec_kwargs(app):
    """The ``spec_kwargs`` of the app's ``Api``: the plugin above, and the
    rate limits' answers and headers."""
    return {"extra_plugins": [PlantstorePlugin(app.config), RateLimitPlugin()]}


def register_converters(app, api):
    """The path converters routes use, and how the document describes them."""
    app.url_map.converters["plant_id"] = PlantIdConverter
    api.register_converter(PlantIdConverter,
                           lambda converter: {"type": "integer", "format": "int64"})
    app.url_map.converters["row_id"] = RowIdConverter
    api.register_converter(RowIdConverter, lambda converter: {
        "type": "integer", "format": "int32", "minimum": 1, "maximum": 2 ** 31 - 1})
    app.url_map.converters["delivery_id"] = DeliveryIdConverter
    api.register_converter(DeliveryIdConverter, lambda converter: {
        "type": "integer", "format": "int64", "minimum": 1, "maximum": 2 ** 63 - 1})


def complete_spec(app, api, new_plant_schema):
    """Add what flask-smorest leaves out; call after the blueprints are
    registered. ``new_plant_schema``: the "New Plant" webhook's payload."""
    api.spec.components.security_scheme(
        "bearerAuth", {"type": "http", "scheme": "bearer",
                       "description": "A plantstore token (pst_...)."})
    if "NewPlant" not in api.spec.components.schemas:
        api.spec.components.schema("NewPlant", schema=new_plant_schema)
    # smorest's page-number pagination is not used: plants page by keyset.
    api.spec.components.schemas.pop("PaginationMetadata", None)
    app.register_blueprint(get_swaggerui_blueprint(
        DOCS_PATH, "/openapi.json",
        config={"app_name": API_TITLE, "persistAuthorization": True,
                # No validator badge: it would send the document's URL to
                # validator.swagger.io from every visitor's browser.
                "validatorUrl": None,
                # Relative, so the page never echoes the request's Host header.
                "oauth2RedirectUrl": f"{DOCS_PATH}/oauth2-redirect.html"}))
