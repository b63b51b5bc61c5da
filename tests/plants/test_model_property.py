"""Property test of create/list/delete: any sequence of operations by several
users and an admin leaves the API answering exactly what a dict would.

A hypothesis ``RuleBasedStateMachine`` drives the Flask test client with
random ids (fresh, colliding, another user's, negative, int64 extremes and
beyond) and checks every status code against the model; after every step
each user's list, walked page by page through the ``Link`` headers, must
equal the model's. Derandomized with bounded examples, so CI replays the
same sequences in a few seconds.
"""
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from helpers import bearer, walk_pages
from plantstore import db
from plantstore.db.models import Plant

INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
USERS = ("alice", "bob", "carol")
ADMIN = "root"
EVERYONE = USERS + (ADMIN,)

EXTREME_IDS = st.sampled_from([INT64_MIN, INT64_MIN + 1, -1, 0, 1, INT64_MAX - 1, INT64_MAX])
ANY_INT64 = st.integers(INT64_MIN, INT64_MAX)
SMALL_IDS = st.integers(-3, 12)  # small enough to collide often
BEYOND_INT64 = st.one_of(st.integers(max_value=INT64_MIN - 1),
                         st.integers(min_value=INT64_MAX + 1))
# Text every backend stores as it is (the API refuses NUL and lone surrogates).
TEXT = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")
NAMES = st.text(TEXT, min_size=1, max_size=12)
TAGS = st.none() | st.text(TEXT, max_size=8)

MACHINE_SETTINGS = settings(
    max_examples=25, stateful_step_count=20, derandomize=True, database=None,
    deadline=None, suppress_health_check=[HealthCheck.too_slow])


class PlantStoreModel(RuleBasedStateMachine):
    """The API against ``self.plants``: id → (owner, name, tag)."""

    client = None   # set by the test: the app's test client
    tokens = None   # user name → bearer token

    def __init__(self):
        super().__init__()
        self.plants = {}

    @initialize(page_size=st.sampled_from([1, 2, 3, 1000]))
    def start_empty(self, page_size):
        """Every run starts on an empty store; lists are read in pages of page_size."""
        with db.database.atomic():
            Plant.delete().execute()
        self.page_size = page_size

    def _id(self, data):
        """A plant id: often one that is taken (by anyone), else a fresh one."""
        strategies = [EXTREME_IDS, ANY_INT64, SMALL_IDS]
        if self.plants:
            strategies.append(st.sampled_from(sorted(self.plants)))
        return data.draw(st.one_of(*strategies), label="id")

    @rule(user=st.sampled_from(EVERYONE), name=NAMES, tag=TAGS, data=st.data())
    def create(self, user, name, tag, data):
        plant_id = self._id(data)
        body = {"id": plant_id, "name": name}
        if tag is not None:
            body["tag"] = tag
        response = self.client.post("/plants", json=body, headers=bearer(self.tokens[user]))
        if plant_id in self.plants:
            assert response.status_code == 409, response.data
            return
        assert response.status_code == 200, response.data
        assert response.get_json() == {key: body[key] for key in ("name", "tag") if key in body}
        self.plants[plant_id] = (user, name, tag)

    @rule(user=st.sampled_from(EVERYONE), plant_id=BEYOND_INT64)
    def create_beyond_int64(self, user, plant_id):
        response = self.client.post("/plants", json={"id": plant_id, "name": "x"},
                                    headers=bearer(self.tokens[user]))
        assert response.status_code == 400, response.data

    @rule(user=st.sampled_from(EVERYONE), data=st.data())
    def delete(self, user, data):
        plant_id = self._id(data)
        response = self.client.delete(f"/plants/{plant_id}", headers=bearer(self.tokens[user]))
        owner = self.plants.get(plant_id, (None,))[0]
        if owner is not None and (user == owner or user == ADMIN):
            assert response.status_code == 204, response.data
            assert response.data == b""
            del self.plants[plant_id]
        else:
            assert response.status_code == 404, response.data

    def _walk(self, user):
        """Every plant ``user`` is shown, following rel="next" page by page."""
        pages = walk_pages(self.client, f"/plants?limit={self.page_size}",
                           bearer(self.tokens[user]), most_pages=len(self.plants) + 2)
        assert all(len(page) <= self.page_size for page in pages)
        return [plant for page in pages for plant in page]

    @invariant()
    def every_list_equals_the_model(self):
        for user in EVERYONE:
            expected = [
                {"name": name} if tag is None else {"name": name, "tag": tag}
                for plant_id, (owner, name, tag) in sorted(self.plants.items())
                if user in (owner, ADMIN)]
            assert self._walk(user) == expected, user


def test_any_sequence_of_operations_matches_the_in_memory_model(client, make_token):
    PlantStoreModel.client = client
    PlantStoreModel.tokens = {name: make_token(name, admin=name == ADMIN)
                              for name in EVERYONE}
    run_state_machine_as_test(PlantStoreModel, settings=MACHINE_SETTINGS)
