"""The served ``/openapi.json`` (a valid OpenAPI 3.1.0 document that keeps
clients of the upstream Plant Store document working) and the ``/docs/``
Swagger UI, served with its own assets."""
import json
import re
from urllib.parse import urljoin

import pytest
from openapi_spec_validator import OpenAPIV31SpecValidator, validate

from helpers import REPO

REFERENCE = (REPO.parent
             / "shared" / "reference" / "plant-store.openapi.json")
HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}

# Every status each operation really answers (see the API, error and auth tests).
STATUSES = {
    ("/plants", "post"): {"200", "400", "401", "403", "409", "413", "415"},
    ("/plants", "get"): {"200", "400", "401", "403"},
    ("/plants/{id}", "delete"): {"204", "400", "401", "403", "404"},
}


@pytest.fixture
def document(client):
    """The document the app serves."""
    response = client.get("/openapi.json")
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    return response.get_json()


def resolve(document, node):
    """``node`` with its local ``$ref`` followed (repeatedly)."""
    while isinstance(node, dict) and "$ref" in node:
        target = document
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        node = target
    return node


def operations(document):
    """The (path, method) pairs a document describes."""
    return {(path, method) for path, item in document["paths"].items()
            for method in item if method in HTTP_METHODS}


def parameters(document, path, method):
    """An operation's parameters, path-level ones included, by (in, name)."""
    item = document["paths"][path]
    found = {}
    for parameter in item.get("parameters", []) + item[method].get("parameters", []):
        parameter = resolve(document, parameter)
        found[(parameter["in"], parameter["name"])] = parameter
    return found


def object_shape(document, schema):
    """The required names and the property types of an object schema (allOf merged)."""
    schema = resolve(document, schema)
    required = set(schema.get("required", []))
    types = {name: (prop.get("type"), prop.get("format"))
             for name, prop in schema.get("properties", {}).items()}
    for part in schema.get("allOf", []):
        part_required, part_types = object_shape(document, part)
        required |= part_required
        types.update(part_types)
    return required, types


def success_codes(document, path, method):
    """The 2xx statuses an operation documents."""
    return {code for code in document["paths"][path][method]["responses"]
            if code.startswith("2")}


def test_document_is_valid_openapi_3_1(document):
    validate(document, cls=OpenAPIV31SpecValidator)


def test_document_names_the_api_and_its_versions(document):
    assert document["openapi"] == "3.1.0"
    assert document["info"]["title"] == "OpenAPI Plant Store"
    assert document["info"]["version"] == "1.0.0"


def test_document_describes_exactly_the_three_plant_operations(document):
    # The webhook routes are pinned in test_routes.py.
    assert {op for op in operations(document) if op[0].startswith("/plants")} == set(STATUSES)


@pytest.mark.parametrize("path, method", sorted(STATUSES))
def test_every_status_the_operation_answers_is_documented(document, path, method):
    responses = document["paths"][path][method]["responses"]
    assert STATUSES[(path, method)] <= set(responses)
    for status in STATUSES[(path, method)] - {"200", "204"}:
        content = resolve(document, responses[status])["content"]["application/json"]
        assert resolve(document, content["schema"]) == document["components"]["schemas"]["Error"]


def test_bearer_auth_is_declared_and_applies_to_every_operation(document):
    scheme = document["components"]["securitySchemes"]["bearerAuth"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    for path, method in operations(document):
        security = document["paths"][path][method].get("security", document["security"])
        assert [list(requirement) for requirement in security] == [["bearerAuth"]], (
            path, method)


def test_plant_new_plant_and_error_schemas_have_the_contract_fields(document):
    schemas = document["components"]["schemas"]
    assert object_shape(document, schemas["Plant"]) == (
        {"name"}, {"name": ("string", None), "tag": ("string", None)})
    assert object_shape(document, schemas["NewPlant"]) == (
        {"id", "name"},
        {"id": ("integer", "int64"), "name": ("string", None), "tag": ("string", None)})
    required, types = object_shape(document, schemas["Error"])
    assert required == {"error", "message"}
    assert types["error"][0] == "integer" and types["message"][0] == "string"


def test_new_plant_webhook_is_documented_with_a_new_plant_body(document):
    post = document["webhooks"]["/plant/webhook"]["post"]
    schema = post["requestBody"]["content"]["application/json"]["schema"]
    assert schema == {"$ref": "#/components/schemas/NewPlant"}
    assert "200" in post["responses"]


OPERATION_IDS = {
    ("/plants", "post"): "createPlant",
    ("/plants", "get"): "listPlants",
    ("/plants/{id}", "delete"): "deletePlant",
    ("/webhooks", "post"): "createWebhook",
    ("/webhooks", "get"): "listWebhooks",
    ("/webhooks/{id}", "get"): "getWebhook",
    ("/webhooks/{id}", "delete"): "deleteWebhook",
    ("/webhooks/{id}/enable", "post"): "enableWebhook",
    ("/webhooks/{id}/rotate-secret", "post"): "rotateWebhookSecret",
    ("/webhooks/{id}/test", "post"): "sendTestWebhookEvent",
    ("/webhooks/{id}/deliveries", "get"): "listWebhookDeliveries",
    ("/webhooks/{id}/recover", "post"): "recoverWebhookDeliveries",
}


def test_every_operation_has_a_unique_camel_case_operation_id(document):
    named = {(path, method): document["paths"][path][method].get("operationId")
             for path, method in operations(document)}
    assert all(re.fullmatch(r"[a-z]+(?:[A-Z][a-z]+)*", name or "")
               for name in named.values()), named
    assert len(set(named.values())) == len(named)
    assert {key: named.get(key) for key in OPERATION_IDS} == OPERATION_IDS


def test_new_plant_webhook_documents_its_headers_as_header_parameters(document):
    post = document["webhooks"]["/plant/webhook"]["post"]
    headers = {parameter["name"]: parameter for parameter in post["parameters"]
               if parameter["in"] == "header"}
    assert set(headers) == {"webhook-id", "webhook-timestamp", "webhook-signature",
                            "Authorization"}
    for name in ("webhook-id", "webhook-timestamp", "webhook-signature"):
        assert headers[name]["required"] is True, name
        assert headers[name]["schema"] == {"type": "string"}, name
    assert headers["Authorization"]["required"] is False
    assert "whsec_" in headers["webhook-signature"]["description"]


def test_list_bounds_are_documented_from_the_defaults(document):
    limit = parameters(document, "/plants", "get")[("query", "limit")]["schema"]
    assert (limit["minimum"], limit["default"], limit["maximum"]) == (1, 100, 1000)


class TestConfiguredBoundsInTheDocument:
    """The document follows LIST_LIMIT_DEFAULT and LIST_LIMIT_MAX."""

    @pytest.fixture
    def app_config(self):
        """Bounds other than the defaults."""
        return {"LIST_LIMIT_DEFAULT": 20, "LIST_LIMIT_MAX": 50}

    def test_limit_parameter_shows_the_configured_bounds(self, document):
        limit = parameters(document, "/plants", "get")[("query", "limit")]["schema"]
        assert (limit["default"], limit["maximum"]) == (20, 50)


@pytest.mark.skipif(not REFERENCE.exists(),
                    reason=f"the upstream reference document is absent ({REFERENCE})")
def test_document_stays_compatible_with_the_upstream_reference(document):
    reference = json.loads(REFERENCE.read_text())
    # Every upstream operation, and beside them only plantstore's own /webhooks.
    assert {op for op in operations(document) if not op[0].startswith("/webhooks")} == (
        operations(reference))
    for path, method in operations(reference):
        ours = parameters(document, path, method)
        theirs = parameters(reference, path, method)
        assert set(theirs) <= set(ours), (path, method)
        for key, parameter in theirs.items():
            assert ours[key].get("required", False) == parameter.get("required", False)
            assert (ours[key]["schema"]["type"], ours[key]["schema"].get("format")) == (
                parameter["schema"]["type"], parameter["schema"].get("format"))
        assert not any(p.get("required") for key, p in ours.items() if key not in theirs)
        assert success_codes(document, path, method) == success_codes(reference, path, method)
    for name in ("Plant", "NewPlant", "Error"):
        their_required, their_types = object_shape(
            reference, reference["components"]["schemas"][name])
        our_required, our_types = object_shape(
            document, document["components"]["schemas"][name])
        assert our_required == their_required, name
        assert {key: our_types.get(key) for key in their_types} == their_types, name
    assert set(document["webhooks"]) == set(reference["webhooks"])
    for name, item in reference["webhooks"].items():
        assert set(document["webhooks"][name]) == set(item)
    assert document["components"]["securitySchemes"]["bearerAuth"].items() >= \
        reference["components"]["securitySchemes"]["bearerAuth"].items()


def test_docs_page_is_swagger_ui_with_assets_served_by_the_app(client):
    page = client.get("/docs/")
    assert page.status_code == 200 and page.mimetype == "text/html"
    html = page.data.decode()
    assert "SwaggerUIBundle" in html and '"url": "/openapi.json"' in html
    # Swagger UI's validator badge would load validator.swagger.io (the
    # browser test records every request the page makes).
    assert '"validatorUrl": null' in html
    assert not re.search(r"(https?:)?//[A-Za-z0-9.-]", html), "the page names a host"
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert {asset.rsplit(".", 1)[-1] for asset in assets} >= {"js", "css"}
    for asset in assets:
        response = client.get(urljoin(page.request.url, asset))
        assert response.status_code == 200, asset
        assert response.data, asset
