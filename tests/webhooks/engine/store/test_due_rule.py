"""The due rule ("this delivery is due and a claim may take it") is written
once per backend, in the stores: SQLite's as two parts of ``sqlite.sql``
(``due``, ``subscription_due``), PostgreSQL's as two inlinable SQL
functions (migration 0018) that every function and statement of the store
calls. Inlined, the claim still reads each subscription's due deliveries
through ``delivery_due_per_subscription``: its plans are read with
``auto_explain`` (the statements inside the PL/pgSQL functions) on
PostgreSQL and ``EXPLAIN QUERY PLAN`` on SQLite, over a seeded backlog. The
release before's functions (``plantstore_due_candidates_v2``,
``plantstore_claim_v3``, ``plantstore_throttle_take_for_claim_v1``) still
run on this schema during a rolling upgrade."""
import datetime
import json
import os
import re

import pytest

from helpers import POSTGRES_URL
from plantstore import db
from plantstore.db import clock, named_sql
from plantstore.db.migrations.frozen_functions import function_text
from plantstore.db.models import Subscription
from plantstore.webhooks.engine import store
from plantstore.webhooks.engine.store import postgres, sqlite

postgres_only = pytest.mark.skipif(not POSTGRES_URL, reason="PostgreSQL's functions")
sqlite_only = pytest.mark.skipif(bool(POSTGRES_URL), reason="SQLite's statements")

SUBSCRIPTIONS, DUE, DONE = 100, 10_000, 20_000
RULE = (r"next_attempt_at <=", r"breaker_opened_at IS NULL OR (\w+\.|_)?breaker_probe_at <=")
"""What writing the rule out takes (the delivery's, the subscription's): each
is found once per backend. (A lease run out, ``locked_until <=``, is also
what a re-send checks.)"""
CALLED_BY_THE_STORE = ("plantstore_due_candidates_v3", "plantstore_claim_v4",
                       "plantstore_throttle_take_for_claim_v2")
RULES = ("plantstore_delivery_due_v1", "plantstore_subscription_due_v1")
RELEASE_BEFORE = ("plantstore_due_candidates_v2", "plantstore_claim_v3",
                  "plantstore_throttle_take_for_claim_v1")


def _text(path):
    with open(path, encoding="utf-8") as file:
        return file.read()


def _sql(text):
    """``text`` without its comment lines."""
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))


def test_sqlite_writes_the_rule_once_in_parts_its_claims_statements_include():
    text = _sql(_text(sqlite.QUERIES.path))
    for words in RULE:
        assert len(re.findall(words, text)) == 1, words
    statements = named_sql.parse(_text(sqlite.QUERIES.path))
    due = {name for name, body in statements.items() if "d.next_attempt_at <= :due_by" in body}
    assert due == {"due_of_subscription", "oldest_due", "lease_share",
                   "throttle_due_subscriptions"}
    subscription_due = {name for name, body in statements.items()
                        if "s.breaker_probe_at <= :now" in body}
    assert subscription_due == {"active_subscriptions", "oldest_due",
                                "throttle_due_subscriptions"}


def test_postgresql_writes_the_rule_once_in_two_functions_the_store_calls():
    store_text = _sql(_text(postgres.QUERIES.path))
    called = set(re.findall(r"\b(plantstore_\w+)\s*\(", store_text))
    assert set(CALLED_BY_THE_STORE) | set(RULES) <= called
    assert not called & set(RELEASE_BEFORE), called & set(RELEASE_BEFORE)
    written = [_sql(function_text(name)) for name in CALLED_BY_THE_STORE] + [store_text]
    for words in RULE:
        assert not [text for text in written if re.search(words, text)], words
    for name, words in zip(RULES, RULE):
        assert re.search(words, function_text(name)), name
    for name in CALLED_BY_THE_STORE:
        assert "plantstore_delivery_due_v1(d.status, d.next_attempt_at, d.locked_until, " \
               "_due_by)" in " ".join(function_text(name).split()), name


def test_the_rules_are_sql_functions_the_planner_can_inline():
    """An SQL function is inlined only if it is one ``SELECT`` of an
    expression, neither STRICT nor SECURITY DEFINER nor with a ``SET``, and
    no more volatile than it says (``now()`` is STABLE)."""
    for name in RULES:
        text = " ".join(_sql(function_text(name)).split())
        assert re.search(r"RETURNS bool LANGUAGE sql STABLE AS \$\$ SELECT ", text), text
        for word in ("STRICT", "SECURITY", " SET ", "FROM", "plpgsql", "VOLATILE"):
            assert word not in text.upper().replace("LANGUAGE SQL", ""), (name, word)


SEED = """
WITH RECURSIVE n (i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {last})
INSERT INTO delivery (subscription_id, message_id, event_type, payload, status, attempts,
                      lease, next_attempt_at, created_at)
SELECT {first_id} + i - i / {subscriptions} * {subscriptions}, 'msg_' || i, 'plant.created', '{{}}',
       CASE WHEN i < {due} THEN 'pending' ELSE 'delivered' END, 0, 0, {param}, {param}
FROM n
"""


@pytest.fixture
def backlog(app):
    """SUBSCRIPTIONS subscriptions, DUE deliveries due a minute ago spread over
    them, DONE delivered ones, ANALYZEd; the subscriptions' ids."""
    with db.database.connection_context():
        with db.database.atomic():
            made = [Subscription.create(url="http://127.0.0.1:9/hook",
                                        secret="whsec_" + "A" * 44).id
                    for _ in range(SUBSCRIPTIONS)]
            assert made == list(range(made[0], made[0] + SUBSCRIPTIONS))
            due = clock.local_now() - datetime.timedelta(minutes=1)
            db.database.execute_sql(SEED.format(
                last=DUE + DONE - 1, first_id=made[0], subscriptions=SUBSCRIPTIONS, due=DUE,
                param=db.database.param), (due, due))
        db.database.execute_sql("ANALYZE")
    return made


class Plans:
    """The plans of the statements run inside PostgreSQL's functions, as
    ``auto_explain`` reports them (JSON, in notices on this connection)."""

    def __init__(self, plan_cache_mode="auto"):
        self.connection = db.database.connection()
        for setting in (f"SET plan_cache_mode = {plan_cache_mode}",
                        "LOAD 'auto_explain'",
                        "SET auto_explain.log_min_duration = 0",
                        "SET auto_explain.log_nested_statements = on",
                        "SET auto_explain.log_format = json",
                        "SET auto_explain.log_level = notice",
                        "SET client_min_messages = notice"):
            db.database.execute_sql(setting)

    def of(self, sql, params=()):
        """The rows of ``sql`` (in a transaction rolled back: the claim's
        leases are undone), and the plans of the statements it ran inside
        its function: [{"Query Text": ..., "Plan": ...}]."""
        del self.connection.notices[:]
        with db.database.atomic():
            rows = db.database.execute_sql(sql, params).fetchall()
            db.database.rollback()
        plans = [json.loads(notice.split("plan:", 1)[1]) for notice in self.connection.notices
                 if "plan:" in notice]
        called = sql.split("(", 1)[0]
        return rows, [plan for plan in plans if not plan["Query Text"].startswith(called)]


def nodes(plan):
    """Every node of a plan, depth first."""
    yield plan
    for child in plan.get("Plans", ()):
        yield from nodes(child)


def assert_reads_due_rows_through_the_index(plans, index="delivery_due_per_subscription"):
    """Every read of delivery is an index scan (none sequential): the due
    rows' through ``index`` (None: any), keyed by the subscription; the
    lease's by id."""
    reads = [node for plan in plans for node in nodes(plan["Plan"])
             if node.get("Relation Name") == "delivery"]
    shown = json.dumps(plans, indent=1)
    assert reads, shown
    for read in reads:
        assert read["Node Type"] in ("Index Scan", "ModifyTable"), shown
    due = [read for read in reads if read["Node Type"] == "Index Scan"
           and "subscription_id = " in read["Index Cond"]]
    assert due, shown
    assert index is None or all(read["Index Name"] == index for read in due), shown


ESTIMATES = ("Startup Cost", "Total Cost", "Plan Rows", "Plan Width")


def shape(plans):
    """Plans as compared across versions: every node with its conditions,
    without the planner's estimates (a claim rolled back leaves its row
    versions behind: the table grows, and so do the estimates) or the
    literal ids passed."""
    def node(plan):
        return {key: [node(child) for child in value] if key == "Plans"
                else re.sub(r"'\{[\d,]*\}'", "'{}'", str(value))
                for key, value in plan.items() if key not in ESTIMATES}
    return [node(plan["Plan"]) for plan in plans]


@postgres_only
@pytest.mark.parametrize("plan_cache_mode", ["force_custom_plan", "force_generic_plan"])
def test_postgresqls_candidates_and_claim_read_through_the_index_after_inlining(
        app, backlog, plan_cache_mode):
    """With the parameters' values (a function's first calls) and without
    (the generic plan PL/pgSQL may keep for the session after five)."""
    first = backlog[:SUBSCRIPTIONS // 2]
    with app.app_context(), db.database.connection_context():
        plans = Plans(plan_cache_mode)
        rows, candidates = plans.of("SELECT * FROM plantstore_due_candidates_v3(5, NULL)")
        assert len(rows) == SUBSCRIPTIONS * 5
        assert_reads_due_rows_through_the_index(candidates)
        rows, claim = plans.of("SELECT * FROM plantstore_claim_v4(%s, %s, NULL, 30, 60)",
                               (first, [5] * len(first)))
        assert len(rows) == len(first) * 5
        assert_reads_due_rows_through_the_index(claim)
        Subscription.update(rate_limit=10).where(Subscription.id.in_(first)).execute()
        rows, throttle = plans.of(
            "SELECT * FROM plantstore_throttle_take_for_claim_v2(%s, %s, 5, 10, NULL)",
            ([], []))
        assert sorted(row[0] for row in rows) == sorted(first)
        # its EXISTS: (subscription_id, status) of 0017 serves as well (as for _v1)
        assert_reads_due_rows_through_the_index(throttle, index=None)


@postgres_only
def test_postgresqls_rule_inlined_plans_as_the_release_befores_written_out(app, backlog):
    """The new functions' plans are the old ones', node for node, index
    and conditions included."""
    half = SUBSCRIPTIONS // 2
    with app.app_context(), db.database.connection_context():
        plans = Plans()
        for new, old, params in [
                ("plantstore_due_candidates_v3(5, NULL)",
                 "plantstore_due_candidates_v2(5, NULL)", ((), ())),
                ("plantstore_claim_v4(%s, %s, NULL, 30, 60)",
                 "plantstore_claim_v3(%s, %s, NULL, 30, 60)",
                 ((backlog[:half], [5] * half), (backlog[half:], [5] * half))),
                ("plantstore_throttle_take_for_claim_v2(%s, %s, 5, 10, NULL)",
                 "plantstore_throttle_take_for_claim_v1(%s, %s, 5, 10, NULL)",
                 (([], []), ([], [])))]:
            _, new_plans = plans.of(f"SELECT * FROM {new}", params[0])
            _, old_plans = plans.of(f"SELECT * FROM {old}", params[1])
            assert new_plans and shape(new_plans) == shape(old_plans), new


@postgres_only
def test_the_oldest_due_age_reads_through_an_index_with_the_rule_inlined(app, backlog):
    with app.app_context(), db.database.connection_context():
        lines = [row[0] for row in db.database.execute_sql(
            "EXPLAIN " + postgres.QUERIES["oldest_due_age"])]
        age = store.current().oldest_due_age()
    text = "\n".join(lines)
    reads = [line for line in lines if " on delivery d " in line]
    assert reads and all("Index Scan using delivery_due" in line for line in reads), text
    assert "plantstore_" not in text, text  # inlined: no function call left
    assert 55 <= age <= 600, age


@postgres_only
def test_the_release_befores_claim_still_works_on_this_schema(app, backlog):
    """A node of the release before, during a rolling upgrade, chooses and
    leases with v2/v3 beside this release's v3/v4; they agree on what is
    due and never lease a row twice."""
    with app.app_context(), db.database.connection_context():
        def run(sql, params=()):
            return db.database.execute_sql(sql, params).fetchall()
        assert run("SELECT * FROM plantstore_due_candidates_v2(3, NULL)") \
            == run("SELECT * FROM plantstore_due_candidates_v3(3, NULL)")
        ids, shares = backlog[:10], [4] * 10
        old = run("SELECT delivery_id FROM plantstore_claim_v3(%s, %s, NULL, 30, 60)",
                  (ids, shares))
        new = run("SELECT delivery_id FROM plantstore_claim_v4(%s, %s, NULL, 30, 60)",
                  (ids, shares))
        assert len(old) == len(new) == 40
        assert not {row[0] for row in old} & {row[0] for row in new}
        candidates = run("SELECT subscription_id FROM plantstore_due_candidates_v2(100, NULL)")
        assert len(candidates) == DUE - 80
        Subscription.update(rate_limit=10).where(Subscription.id.in_(ids)).execute()
        assert sorted(run("SELECT subscription_id FROM "
                          "plantstore_throttle_take_for_claim_v1(%s, %s, 5, 10, NULL)",
                          ([], []))) == [(i,) for i in ids]


@sqlite_only
def test_sqlites_claim_reads_a_subscriptions_due_rows_through_the_index(app, backlog):
    now = clock.now()
    params = {"subscription_id": backlog[0], "due_by": now, "now": now, "most": 5,
              "taken": 5, "until": now}
    with app.app_context(), db.database.connection_context():
        for name in ("due_of_subscription", "lease_share"):
            lines = [row[-1] for row in db.database.execute_sql(
                "EXPLAIN QUERY PLAN " + sqlite.QUERIES[name], params)]
            reads = [line for line in lines if re.match(r"(SCAN|SEARCH) d\b", line)]
            assert reads and all(line.startswith("SEARCH d USING INDEX "
                                                 "delivery_due_per_subscription")
                                 for line in reads), (name, lines)
        rows = sqlite.QUERIES.rows("due_of_subscription", params)
    assert len(rows) == 5


def test_the_store_and_the_migration_name_the_same_functions():
    """0018 creates the rules before the functions that call them, and its
    docstring says the release before's stay until a later release."""
    from plantstore.db import MIGRATIONS_DIR
    text = _text(os.path.join(MIGRATIONS_DIR, "0018_due_rule.py"))
    order = [text.index(f'"{name}"') for name in RULES + CALLED_BY_THE_STORE]
    assert order == sorted(order)
    assert "a later release drops" in " ".join(text.split())
    for name in RELEASE_BEFORE:
        assert name in text
