"""``/webhooks/portal-links`` is a path of its own: another method on it is a
405 naming POST, never taken for ``/webhooks/{id}``."""
import pytest

from helpers import bearer


@pytest.mark.parametrize("method", ["get", "put", "patch", "delete"])
def test_another_method_on_the_links_path_is_a_405(client, alice, method):
    response = getattr(client, method)("/webhooks/portal-links", json={"read_only": True},
                                       headers=bearer(alice))
    assert response.status_code == 405, response.get_json()
    assert set(response.headers["Allow"].split(", ")) == {"POST", "OPTIONS"}
    assert response.get_json()["error"] == 405


def test_other_ids_still_reach_the_subscription_routes(client, alice):
    assert client.patch("/webhooks/portal-linksx", json={},
                        headers=bearer(alice)).status_code == 400
    assert client.get("/webhooks/99", headers=bearer(alice)).status_code == 404


@pytest.mark.parametrize("read_only", [1, 0, "true", "yes", None, [True]])
def test_read_only_is_true_or_false_and_nothing_else(client, alice, read_only):
    response = client.post("/webhooks/portal-links", json={"read_only": read_only},
                           headers=bearer(alice))
    assert response.status_code == 400, response.get_json()
    assert list(response.get_json()["details"]) == ["read_only"]
