"""The delivery log's statements read deliveries through an index keyed by
the subscription, never by a scan of the whole table: with any filter, on
the next pages, and a delivery's page (``EXPLAIN`` on PostgreSQL, ``EXPLAIN
QUERY PLAN`` on SQLite). Not timed: docs/performance.md has the figures
(``make bench BENCH_ONLY=portal``).

The database is filled by the benchmark's seeder (bench/portal_seed.py) at
a tenth of its size, 100 deliveries an endpoint as there, then ANALYZEd.
"""
import datetime
import importlib.util
import logging
import re

import pytest

from helpers import REPO
from plantstore import db
from plantstore.web.auth import Caller
from plantstore.webhooks.subscriptions import delivery_log

USERS, ENDPOINTS, DELIVERIES = 100, 1_000, 100_000
USER = 7
START = datetime.datetime(2025, 1, 1)


def _seeder():
    spec = importlib.util.spec_from_file_location("portal_seed", REPO / "bench" / "portal_seed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def big_log(app):
    with app.app_context(), db.database.connection_context():
        _seeder().fill(db.database, USERS, ENDPOINTS, DELIVERIES)
    return app


class StatementLog(logging.Handler):
    """The (sql, params) of every statement peewee runs meanwhile."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.statements = []

    def emit(self, record):
        if isinstance(record.msg, tuple):
            self.statements.append(record.msg)


def statements_of(work, table="delivery"):
    """The statements that read ``table`` (None: any) while ``work()`` runs."""
    logger = logging.getLogger("peewee")
    handler, level = StatementLog(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        work()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return [(sql, params) for sql, params in handler.statements
            if table is None or f'FROM "{table}"' in sql]


def plan(sql, params):
    """The plan's lines of one statement."""
    if db.database.param == "%s":
        return [row[0] for row in db.database.execute_sql("EXPLAIN " + sql, params)]
    return [row[-1] for row in db.database.execute_sql("EXPLAIN QUERY PLAN " + sql, params)]


def reads_of(sql, lines, table):
    """The plan's lines that read ``table`` (under any alias ``sql`` gives it)."""
    if db.database.param == "%s":
        return [line.strip() for line in lines if f" on {table} " in line + " "]
    aliases = "|".join(re.findall(rf'FROM "{table}" AS "(t[0-9]+)"', sql))
    return [line for line in lines if re.match(rf"(SCAN|SEARCH) ({aliases})\b", line)]


def assert_through_an_index(sql, params, keyed_by, table="delivery"):
    """Every read of ``table`` in the plan of ``sql`` is an index search whose
    condition names ``keyed_by`` (the subscription: no other user's rows)."""
    lines = plan(sql, params)
    reads = reads_of(sql, lines, table)
    assert reads, lines
    text = "\n".join(lines)
    for read in reads:
        if db.database.param == "%s":
            # An index scan, or a bitmap heap scan (its bitmap an index's).
            assert "Seq Scan" not in read, text
            assert "Index" in read or "Bitmap Heap Scan" in read, text
            assert f"{keyed_by} =" in text or f"{keyed_by} = ANY" in text, text
        else:
            assert read.startswith("SEARCH"), text
            assert "INDEX" in read or "PRIMARY KEY" in read, text
            key = "rowid" if keyed_by == "id" else keyed_by
            assert f"({key}=" in read.replace(" ", ""), text


def user_cases():
    endpoint = USER + 5 * USERS
    return {
        "no filter": delivery_log.Filters(),
        "an endpoint": delivery_log.Filters(subscription_id=endpoint),
        "status failed": delivery_log.Filters(status="failed"),
        "status pending": delivery_log.Filters(status="pending"),
        "a day": delivery_log.Filters(created_from=START + datetime.timedelta(days=1),
                                      created_to=START + datetime.timedelta(days=2)),
        "combined": delivery_log.Filters(subscription_id=endpoint, status="delivered",
                                         created_from=START,
                                         created_to=START + datetime.timedelta(days=2)),
        "next page": delivery_log.Filters(before=DELIVERIES // 2),
        "next page, failed": delivery_log.Filters(status="failed", before=DELIVERIES // 2),
    }


@pytest.mark.parametrize("case", list(user_cases()))
def test_each_filter_reads_the_users_subscriptions_through_an_index(big_log, case):
    caller = Caller(USER, False, frozenset({"webhooks:read"}))
    with big_log.app_context():
        found = []
        statements = statements_of(lambda: found.extend(
            delivery_log.page(caller, user_cases()[case], 25)[0]))
        assert found, "the case shows no delivery: it proves nothing"
        assert {d.subscription.owner_id for d in found} == {USER}
        assert statements
        for sql, params in statements:
            assert_through_an_index(sql, params, "subscription_id")


def test_a_deliverys_page_reads_it_by_id_and_its_attempts_by_delivery(big_log):
    caller = Caller(USER, False, frozenset({"webhooks:read"}))
    shown = USER + 20 * ENDPOINTS  # the user's: subscription USER, the 21st round
    with big_log.app_context():
        found = []
        statements = statements_of(lambda: found.append(
            delivery_log.delivery_with_attempts(caller, shown)), table=None)
        assert found[0] is not None and found[0].id == shown
        [(sql, params)] = [s for s in statements if 'FROM "delivery"' in s[0]]
        assert_through_an_index(sql, params, "id")
        [(sql, params)] = [s for s in statements if 'FROM "attempt"' in s[0]]
        assert_through_an_index(sql, params, "delivery_id", table="attempt")
