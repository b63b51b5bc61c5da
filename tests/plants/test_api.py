"""The three plant operations as the contract states them: shapes,
validation, conflicts, limits and keyset paging, per-user access."""
import re

import pytest

from helpers import (
    assert_error,
    bearer,
    headers_but_request_id,
    listed,
    next_url,
    post_plant,
    seed,
    walk_pages,
)
from plantstore import create_app
from plantstore.db.models import Plant, User

INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1


def user_id(name):
    """The database id of the user called ``name``."""
    return User.get(User.name == name).id


def names(ids):
    """The names ``seed`` gives plants ``ids``, in the order given."""
    return [f"plant {i}" for i in ids]


def listed_names(client, token, query=""):
    """The names GET /plants answers ``token``'s holder (status checked)."""
    return [plant["name"] for plant in listed(client, token, query)]


# --- create ---------------------------------------------------------------

def test_create_answers_200_with_name_and_tag_and_never_the_id(client, alice):
    response = post_plant(client, alice, {"id": 7, "name": "fern", "tag": "green"})
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    assert response.get_json() == {"name": "fern", "tag": "green"}
    assert b'"id"' not in response.data


def test_a_plant_without_tag_is_shown_without_the_tag_key(client, alice):
    response = post_plant(client, alice, {"id": 7, "name": "fern"})
    assert response.status_code == 200
    assert response.get_json() == {"name": "fern"}
    assert b"tag" not in response.data
    listing = client.get("/plants", headers=bearer(alice))
    assert listing.get_json() == [{"name": "fern"}]
    assert b"tag" not in listing.data


def test_unknown_fields_are_ignored_and_never_stored(client, alice, bob):
    bob_id = user_id("bob")
    response = post_plant(client, alice, {
        "id": 7, "name": "fern", "owner": bob_id, "user_id": bob_id,
        "admin": True, "extra": {"nested": [1, 2]}, "created_at": "1970-01-01"})
    assert response.status_code == 200
    assert response.get_json() == {"name": "fern"}
    plant = Plant.get_by_id(7)
    assert (plant.owner_id, plant.name, plant.tag) == (user_id("alice"), "fern", None)
    assert plant.created_at.year > 1970
    assert listed_names(client, bob) == []
    assert listed_names(client, alice) == ["fern"]


def test_names_and_tags_of_255_characters_are_accepted(client, alice):
    name, tag = "é" * 255, "🌿" * 255
    response = post_plant(client, alice, {"id": 7, "name": name, "tag": tag})
    assert response.status_code == 200
    assert client.get("/plants", headers=bearer(alice)).get_json() == [
        {"name": name, "tag": tag}]


INVALID_BODIES = [
    pytest.param({"id": None, "name": "fern"}, "id", id="null id"),
    pytest.param({"id": 7, "name": None}, "name", id="null name"),
    pytest.param({"id": 7, "name": "fern", "tag": None}, "tag", id="null tag"),
    pytest.param({"id": "7", "name": "fern"}, "id", id="string id"),
    pytest.param({"id": 7.5, "name": "fern"}, "id", id="fractional id"),
    pytest.param({"id": True, "name": "fern"}, "id", id="bool id"),
    pytest.param({"id": [7], "name": "fern"}, "id", id="list id"),
    pytest.param({"id": 7, "name": ["fern"]}, "name", id="list name"),
    pytest.param({"id": 7, "name": 12}, "name", id="number name"),
    pytest.param({"id": 7, "name": {"a": "b"}}, "name", id="object name"),
    pytest.param({"id": 7, "name": "fern", "tag": 3}, "tag", id="number tag"),
    pytest.param({"id": INT64_MAX + 1, "name": "fern"}, "id", id="id above int64"),
    pytest.param({"id": INT64_MIN - 1, "name": "fern"}, "id", id="id below int64"),
    pytest.param({"name": "fern"}, "id", id="missing id"),
    pytest.param({"id": 7}, "name", id="missing name"),
    pytest.param({}, "id", id="empty object"),
    pytest.param({"id": 7, "name": ""}, "name", id="empty name"),
    pytest.param({"id": 7, "name": "x" * 256}, "name", id="name of 256"),
    pytest.param({"id": 7, "name": "fern", "tag": "x" * 256}, "tag", id="tag of 256"),
    pytest.param({"id": 7, "name": "fe\x00rn"}, "name", id="NUL in name"),
    pytest.param({"id": 7, "name": "fern", "tag": "\x00"}, "tag", id="NUL in tag"),
]


@pytest.mark.parametrize("body, field", INVALID_BODIES)
def test_invalid_create_body_is_400_naming_the_field(client, alice, body, field):
    error = assert_error(post_plant(client, alice, body), 400)
    assert field in error["details"], error
    assert listed_names(client, alice) == []


MALFORMED_BODIES = [
    pytest.param(b'{"id": 7, "name": "fern"', id="truncated JSON"),
    pytest.param(b"{id: 7}", id="not JSON"),
    pytest.param(b'{"id": 7, "name": "fe\xffrn"}', id="invalid UTF-8"),
    pytest.param(b'{"id": 7, "name": "\\ud800"}', id="unpaired surrogate"),
    pytest.param(b'[{"id": 7, "name": "fern"}]', id="array body"),
    pytest.param(b'"fern"', id="string body"),
    pytest.param(b"7", id="number body"),
    pytest.param(b"null", id="null body"),
    pytest.param(b"", id="empty body"),
]


@pytest.mark.parametrize("raw", MALFORMED_BODIES)
def test_malformed_or_non_object_body_is_400_with_details(client, alice, raw):
    response = client.post("/plants", data=raw, content_type="application/json",
                           headers=bearer(alice))
    assert "details" in assert_error(response, 400)
    assert listed_names(client, alice) == []


def test_creating_a_taken_id_is_409_and_keeps_the_first_plant(client, alice):
    assert post_plant(client, alice, {"id": 7, "name": "fern"}).status_code == 200
    error = assert_error(post_plant(client, alice, {"id": 7, "name": "moss"}), 409)
    assert "7" in error["message"]
    assert listed_names(client, alice) == ["fern"]


def test_an_id_taken_by_another_user_is_409_too(client, alice, bob):
    assert post_plant(client, bob, {"id": 7, "name": "fern"}).status_code == 200
    assert_error(post_plant(client, alice, {"id": 7, "name": "moss"}), 409)
    assert listed_names(client, alice) == []
    assert listed_names(client, bob) == ["fern"]


def test_zero_negative_and_extreme_int64_ids_work(client, alice):
    ids = [INT64_MAX, 0, INT64_MIN, -1, 1]
    for plant_id in ids:
        response = post_plant(client, alice, {"id": plant_id, "name": f"plant {plant_id}"})
        assert response.status_code == 200, response.data
    assert listed_names(client, alice) == names(sorted(ids))
    for plant_id in ids:
        assert client.delete(f"/plants/{plant_id}", headers=bearer(alice)).status_code == 204
    assert listed_names(client, alice) == []


# --- list -----------------------------------------------------------------

def test_list_is_ordered_by_id_ascending_whatever_the_creation_order(client, alice):
    ids = [5, -3, 12, 0, 7, -40]
    for plant_id in ids:
        assert post_plant(client, alice, {"id": plant_id, "name": f"plant {plant_id}"}
                      ).status_code == 200
    assert listed_names(client, alice) == names(sorted(ids))


def test_limit_defaults_to_100(client, alice):
    seed("alice", range(101))
    response = client.get("/plants", headers=bearer(alice))
    assert [p["name"] for p in response.get_json()] == names(range(100))
    assert next_url(response) is not None


def test_limit_accepts_the_maximum_of_1000(client, alice):
    seed("alice", range(1001))
    response = client.get("/plants?limit=1000", headers=bearer(alice))
    assert response.status_code == 200
    assert len(response.get_json()) == 1000
    assert next_url(response) is not None


def test_limit_above_1000_is_400_naming_the_bound(client, alice):
    error = assert_error(client.get("/plants?limit=1001", headers=bearer(alice)), 400)
    assert "limit" in error["details"]
    assert "1000" in error["message"]


@pytest.mark.parametrize("limit", ["0", "-5"])
def test_limit_below_1_is_400_naming_the_bound(client, alice, limit):
    error = assert_error(client.get(f"/plants?limit={limit}", headers=bearer(alice)), 400)
    assert "limit" in error["details"]
    assert re.search(r"\b1\b", error["message"]), error["message"]


@pytest.mark.parametrize("limit", ["abc", "1.5", "", "1e3", "0x10"])
def test_non_integer_limit_is_400(client, alice, limit):
    error = assert_error(client.get(f"/plants?limit={limit}", headers=bearer(alice)), 400)
    assert "limit" in error["details"]


@pytest.mark.parametrize("after", ["abc", str(INT64_MAX + 1), "1.5"])
def test_malformed_cursor_is_400(client, alice, after):
    error = assert_error(client.get(f"/plants?after={after}", headers=bearer(alice)), 400)
    assert "after" in error["details"]


class TestConfiguredListBounds:
    """LIST_LIMIT_DEFAULT and LIST_LIMIT_MAX change the list's bounds."""

    @pytest.fixture
    def app_config(self):
        """Small bounds, so a handful of plants crosses them."""
        return {"LIST_LIMIT_DEFAULT": 2, "LIST_LIMIT_MAX": 3}

    def test_default_page_size_is_list_limit_default(self, client, alice):
        seed("alice", range(5))
        response = client.get("/plants", headers=bearer(alice))
        assert [p["name"] for p in response.get_json()] == names(range(2))

    def test_limit_up_to_list_limit_max_is_accepted(self, client, alice):
        seed("alice", range(5))
        assert listed_names(client, alice, "?limit=3") == names(range(3))

    def test_limit_above_list_limit_max_is_400_naming_it(self, client, alice):
        error = assert_error(client.get("/plants?limit=4", headers=bearer(alice)), 400)
        assert "3" in error["message"] and "limit" in error["details"]


def test_list_bounds_come_from_plantstore_environment_variables(monkeypatch, database_url):
    monkeypatch.setenv("PLANTSTORE_LIST_LIMIT_DEFAULT", "20")
    monkeypatch.setenv("PLANTSTORE_LIST_LIMIT_MAX", "50")
    app = create_app({"DATABASE_URL": database_url})
    assert (app.config["LIST_LIMIT_DEFAULT"], app.config["LIST_LIMIT_MAX"]) == (20, 50)


def test_next_link_is_present_exactly_when_more_plants_remain(client, alice):
    seed("alice", range(6))
    first = client.get("/plants?limit=3", headers=bearer(alice))
    assert first.headers["Link"].endswith('; rel="next"')
    last = client.get(next_url(first), headers=bearer(alice))
    assert [p["name"] for p in last.get_json()] == names(range(3, 6))
    assert "Link" not in last.headers
    assert "Link" in client.get("/plants?limit=5", headers=bearer(alice)).headers
    assert "Link" not in client.get("/plants?limit=6", headers=bearer(alice)).headers
    assert "Link" not in client.get("/plants?limit=7", headers=bearer(alice)).headers


def test_following_next_links_walks_every_plant_exactly_once(client, alice):
    ids = [INT64_MIN, -10, -1, 0, 1, 2, 99, INT64_MAX]
    seed("alice", ids)
    pages = walk_pages(client, "/plants?limit=3", bearer(alice))
    assert [len(page) for page in pages] == [3, 3, 2]
    assert [p["name"] for page in pages for p in page] == names(ids)


def test_paging_neither_repeats_nor_skips_when_plants_change_between_pages(client, alice):
    seed("alice", range(10))
    first = client.get("/plants?limit=4", headers=bearer(alice))
    assert [p["name"] for p in first.get_json()] == names(range(4))
    client.delete("/plants/2", headers=bearer(alice))
    client.delete("/plants/5", headers=bearer(alice))
    seed("alice", [-1, 20])
    rest = [p["name"] for page in walk_pages(client, next_url(first), bearer(alice))
            for p in page]
    assert rest == names([4, 6, 7, 8, 9, 20])


def test_paging_sees_only_the_callers_plants_and_admin_pages_through_all(
        client, alice, bob, admin):
    seed("alice", [1, 3, 5, 7, 9])
    seed("bob", [2, 4, 6, 8])
    alice_pages = walk_pages(client, "/plants?limit=2", bearer(alice))
    assert [p["name"] for page in alice_pages for p in page] == names([1, 3, 5, 7, 9])
    admin_pages = walk_pages(client, "/plants?limit=4", bearer(admin))
    assert [p["name"] for page in admin_pages for p in page] == names(range(1, 10))


def test_body_stays_a_plain_array_when_a_next_link_is_sent(client, alice):
    seed("alice", range(3), tag="green")
    response = client.get("/plants?limit=2", headers=bearer(alice))
    assert "Link" in response.headers
    assert response.get_json() == [{"name": "plant 0", "tag": "green"},
                                   {"name": "plant 1", "tag": "green"}]


# --- access ---------------------------------------------------------------

def test_users_list_only_their_own_plants(client, alice, bob):
    seed("alice", [1, 3])
    seed("bob", [2])
    assert listed_names(client, alice) == names([1, 3])
    assert listed_names(client, bob) == names([2])


def test_admin_lists_every_users_plants(client, alice, bob, admin):
    seed("alice", [1, 3])
    seed("bob", [2])
    assert listed_names(client, admin) == names([1, 2, 3])


def test_delete_answers_204_with_an_empty_body_and_removes_the_plant(client, alice):
    seed("alice", [1, 2])
    response = client.delete("/plants/1", headers=bearer(alice))
    assert response.status_code == 204
    assert response.data == b""
    assert listed_names(client, alice) == names([2])
    assert_error(client.delete("/plants/1", headers=bearer(alice)), 404)


def test_delete_of_an_unknown_id_is_404(client, alice):
    error = assert_error(client.delete("/plants/42", headers=bearer(alice)), 404)
    assert "details" not in error


def test_delete_of_another_users_plant_is_404_exactly_like_an_unknown_id(client, alice, bob):
    seed("bob", [5])
    hidden = client.delete("/plants/5", headers=bearer(alice))
    assert_error(hidden, 404)
    assert listed_names(client, bob) == names([5])
    assert client.delete("/plants/5", headers=bearer(bob)).status_code == 204
    unknown = client.delete("/plants/5", headers=bearer(alice))
    assert (hidden.status_code, hidden.data) == (unknown.status_code, unknown.data)
    assert headers_but_request_id(hidden) == headers_but_request_id(unknown)


def test_admin_can_delete_any_users_plant(client, alice, admin):
    seed("alice", [5])
    assert client.delete("/plants/5", headers=bearer(admin)).status_code == 204
    assert listed_names(client, alice) == []


@pytest.mark.parametrize("raw_id", [
    "abc", "1.5", "0x10", "1e999", str(INT64_MAX + 1), str(INT64_MIN - 1)])
def test_delete_with_a_bad_path_id_is_400(client, alice, raw_id):
    error = assert_error(client.delete(f"/plants/{raw_id}", headers=bearer(alice)), 400)
    assert "id" in error["details"]


NOT_ASCII_INTEGERS = ["1_0", "+7", " 7", "7 ", "\u0667", "\uff11\uff10", "0x10",
                      "7.0", "1e1", "", "--7", "7-"]


@pytest.mark.parametrize("parameter", ["limit", "after"])
@pytest.mark.parametrize("written", NOT_ASCII_INTEGERS)
def test_query_integers_written_other_than_ascii_digits_are_400_naming_them(
        client, alice, parameter, written):
    response = client.get("/plants", query_string={parameter: written},
                          headers=bearer(alice))
    body = assert_error(response, 400)
    assert list(body["details"]) == [parameter]
    assert body["message"].startswith(f"Invalid {parameter}: ")


@pytest.mark.parametrize("written", ["1_0", "+7", " 7", "\u0667", "\uff11\uff10", "0x10",
                                     "7.5", "1e-1", "1.", ".5"])
def test_path_ids_written_other_than_json_integers_in_ascii_are_400(client, alice, written):
    response = client.delete(f"/plants/{written}", headers=bearer(alice))
    body = assert_error(response, 400)
    assert list(body["details"]) == ["id"]


def test_integers_of_thousands_of_digits_are_400_naming_the_bound(client, alice):
    huge = "9" * 5000
    body = assert_error(client.get(f"/plants?limit={huge}", headers=bearer(alice)), 400)
    assert "less than or equal to" in body["message"]
    body = assert_error(client.get(f"/plants?after=-{huge}", headers=bearer(alice)), 400)
    assert "greater than or equal to -9223372036854775808" in body["message"]
    assert_error(client.delete(f"/plants/{huge}", headers=bearer(alice)), 400)


def test_ascii_integers_still_page_and_delete(client, alice):
    for plant_id in (-3, 5, 9):
        client.post("/plants", json={"id": plant_id, "name": "fern"}, headers=bearer(alice))
    response = client.get("/plants?limit=01&after=-4", headers=bearer(alice))
    assert response.status_code == 200
    assert response.headers["Link"] == '</plants?limit=1&after=-3>; rel="next"'
    assert client.delete("/plants/-3", headers=bearer(alice)).status_code == 204
    # The create body may write an id as 5.0 or 9e0; the path takes it back so.
    assert client.delete("/plants/5.0", headers=bearer(alice)).status_code == 204
    assert client.delete("/plants/0.9e1", headers=bearer(alice)).status_code == 204
