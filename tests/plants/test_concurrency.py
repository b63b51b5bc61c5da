"""Concurrent clients against a real gunicorn with 4 workers, on whichever
backend the suite runs (an SQLite file, or PostgreSQL).

Many writers at once must all succeed and all be listed afterwards, and
clients racing to create the same id must see exactly one 200 and 409s,
never a 500 or a "database is locked".
"""
import collections
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from helpers import bearer, walk_pages

THREADS = 8
CREATES_PER_THREAD = 150
RACED_IDS = 12
TIMEOUT = 30  # seconds, for every request


def every_plant(session, url, headers):
    """Every plant of every page, following rel="next" links."""
    pages = walk_pages(session, url, headers, most_pages=10_000, timeout=TIMEOUT)
    return [plant for page in pages for plant in page]


@pytest.mark.slow
def test_eight_threads_of_150_creates_all_succeed_and_are_all_listed(
        gunicorn_server, alice):
    server = gunicorn_server(workers=4)
    headers = bearer(alice)
    start = threading.Barrier(THREADS)

    def creates(thread):
        statuses = collections.Counter()
        with requests.Session() as session:
            start.wait(timeout=TIMEOUT)
            for n in range(CREATES_PER_THREAD):
                plant_id = thread * CREATES_PER_THREAD + n
                response = session.post(server.url + "/plants", headers=headers,
                                        json={"id": plant_id, "name": f"plant {plant_id}"},
                                        timeout=TIMEOUT)
                statuses[response.status_code] += 1
        return statuses

    with ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(creates, range(THREADS)))

    total = sum(results, collections.Counter())
    assert total == {200: THREADS * CREATES_PER_THREAD}, total
    with requests.Session() as session:
        plants = every_plant(session, server.url + "/plants?limit=500", headers)
    expected = [{"name": f"plant {i}"} for i in range(THREADS * CREATES_PER_THREAD)]
    assert plants == expected
    assert "database is locked" not in server.output()


@pytest.mark.slow
def test_racing_creates_of_one_id_give_exactly_one_200_and_the_rest_409(
        gunicorn_server, alice, bob):
    server = gunicorn_server(workers=4)
    tokens = [alice, bob] * (THREADS // 2)  # two owners race, too
    start = threading.Barrier(THREADS)

    def race(thread):
        statuses = []
        with requests.Session() as session:
            for plant_id in range(RACED_IDS):
                start.wait(timeout=TIMEOUT)  # all threads fire each id together
                response = session.post(
                    server.url + "/plants", headers=bearer(tokens[thread]),
                    json={"id": plant_id, "name": f"from thread {thread}"},
                    timeout=TIMEOUT)
                statuses.append(response.status_code)
        return statuses

    with ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(race, range(THREADS)))

    for plant_id in range(RACED_IDS):
        statuses = sorted(result[plant_id] for result in results)
        assert statuses == [200] + [409] * (THREADS - 1), (plant_id, statuses)
    with requests.Session() as session:
        owned = (every_plant(session, server.url + "/plants", bearer(alice))
                 + every_plant(session, server.url + "/plants", bearer(bob)))
    assert len(owned) == RACED_IDS
    assert "database is locked" not in server.output()
