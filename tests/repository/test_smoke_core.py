"""The core operations end to end through the app's test client, and once
through a real gunicorn."""
import pytest

from helpers import bearer


def test_create_list_delete_round_trip(client, alice):
    created = client.post("/plants", json={"id": 1, "name": "fern", "tag": "green"},
                          headers=bearer(alice))
    assert created.status_code == 200
    assert created.get_json() == {"name": "fern", "tag": "green"}
    listed = client.get("/plants", headers=bearer(alice))
    assert listed.get_json() == [{"name": "fern", "tag": "green"}]
    deleted = client.delete("/plants/1", headers=bearer(alice))
    assert deleted.status_code == 204
    assert deleted.data == b""
    assert client.get("/plants", headers=bearer(alice)).get_json() == []


@pytest.mark.slow
def test_gunicorn_serves_the_api_over_http(gunicorn_server, alice):
    import requests
    server = gunicorn_server()
    response = requests.post(server.url + "/plants", json={"id": 5, "name": "moss"},
                             headers=bearer(alice), timeout=10)
    assert response.status_code == 200, server.output()
    assert response.json() == {"name": "moss"}
    listed = requests.get(server.url + "/plants", headers=bearer(alice), timeout=10)
    assert listed.json() == [{"name": "moss"}]
