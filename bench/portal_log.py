"""``make bench BENCH_ONLY=portal``: the portal's delivery log and a
delivery's page on a big database (portal_seed.py: 1,000,000 deliveries over
10,000 endpoints of 1,000 users), on SQLite and PostgreSQL.

Server time, measured in the process that serves: the log's functions
(``delivery_log.page``, ``delivery_log.delivery_with_attempts``) as the
portal calls them, and the whole portal page through Flask's test client
(session check, query, template), for SAMPLED_USERS users, each case
BENCH_PORTAL_ROUNDS times (default 10) per user. The table (median and the
slowest run, in ms) is printed and written into docs/performance.md between
SECTION_BEGIN and SECTION_END; the rest of the page is kept.
"""
import datetime
import logging
import os
import platform
import sqlite3
import statistics
import time
from urllib.parse import urlencode, urlsplit

import portal_seed

SECTION_BEGIN = "<!-- portal: written by make bench BENCH_ONLY=portal -->"
SECTION_END = "<!-- end of portal -->"
BUDGET_MS = 50
SAMPLED_USERS = (1, 250, 500, 750, 1000)
PAGE_SIZE = 25  # the portal's (portal/views_deliveries.py)
DAY = datetime.timedelta(days=1)
START = portal_seed.START


def _subscriptions(user):
    """The ids of ``user``'s seeded subscriptions."""
    return list(range(user, portal_seed.ENDPOINTS + 1, portal_seed.USERS))


def cases(user):
    """{case: query arguments of the portal's log} for one seeded user; the
    next-page cases take ``before`` from the first page's last delivery."""
    middle = _subscriptions(user)[5]
    return {
        "no filter": {},
        "an endpoint": {"endpoint_id": middle},
        "status failed": {"status": "failed"},
        "status pending": {"status": "pending"},
        "a day": {"from": f"{START + 10 * DAY:%Y-%m-%d}", "to": f"{START + 11 * DAY:%Y-%m-%d}"},
        "the oldest day": {"from": f"{START:%Y-%m-%d}", "to": f"{START + DAY:%Y-%m-%d}"},
        "all combined": {"endpoint_id": middle, "status": "delivered",
                         "from": f"{START + 5 * DAY:%Y-%m-%d}",
                         "to": f"{START + 20 * DAY:%Y-%m-%d}"},
        "next page": {"before": None},
        "next page, failed": {"status": "failed", "before": None},
    }


def _filters(arguments):
    """``delivery_log.Filters`` of the portal's query arguments."""
    from plantstore.webhooks.subscriptions import delivery_log

    def when(key):
        text = arguments.get(key)
        return datetime.datetime.strptime(text, "%Y-%m-%d") if text else None
    return delivery_log.Filters(subscription_id=arguments.get("endpoint_id"),
                                status=arguments.get("status"), created_from=when("from"),
                                created_to=when("to"), before=arguments.get("before"))


def _timed(rounds, work, *args):
    """The milliseconds each of ``rounds`` calls of ``work(*args)`` took, and
    its last result."""
    took, result = [], None
    for _ in range(rounds):
        started = time.perf_counter()
        result = work(*args)
        took.append((time.perf_counter() - started) * 1000)
    return took, result


class _Statements(logging.Handler):
    """The (sql, params) of every statement peewee runs while it is attached."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.seen = []

    def emit(self, record):
        if isinstance(record.msg, tuple):
            self.seen.append(record.msg)


def _postgres_ms(database, work, *args):
    """PostgreSQL's own time (planning and execution, by EXPLAIN ANALYZE) for
    the statements one ``work(*args)`` runs: the database's share of it,
    unmoved by what else the machine's cores do for Python."""
    logger, handler = logging.getLogger("peewee"), _Statements()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        work(*args)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    total = 0.0
    for sql, params in handler.seen:
        [[[plan]]] = database.execute_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + sql,
                                          params).fetchall()
        total += plan["Planning Time"] + plan["Execution Time"]
    return total


def measure(database_url, rounds):
    """{case: {"function": [ms, ...], "page": [ms, ...], "statements": [ms, ...]}}
    on a seeded database ("statements" on PostgreSQL alone)."""
    from plantstore import create_app
    from plantstore.db import database
    from plantstore.portal import links
    from plantstore.web.auth import Caller
    from plantstore.webhooks.subscriptions import delivery_log

    app = create_app({"DATABASE_URL": database_url, "PORTAL_URL": "http://portal.test",
                      "PORTAL_SECRET_KEY": "bench-" + "k" * 40})
    times = {}

    def record(case, kind, took):
        times.setdefault(case, {"function": [], "page": [], "statements": []})[kind] += took

    def statements(case, work, *args):
        if database.param == "%s":
            record(case, "statements", [_postgres_ms(database, work, *args)
                                        for _ in range(rounds)])

    for user in SAMPLED_USERS:
        caller = Caller(user, False, frozenset({"webhooks:read"}))
        client = app.test_client()
        with app.app_context():
            with database.atomic():
                url, _ = links.mint("http://portal.test", user)
            first_page, _ = delivery_log.page(caller, delivery_log.Filters(), PAGE_SIZE)
            first_failed, _ = delivery_log.page(
                caller, delivery_log.Filters(status="failed"), PAGE_SIZE)
            database.close()
        assert client.get(urlsplit(url).path).status_code == 303, "the link did not open"
        befores = {"next page": first_page[-1].id, "next page, failed": first_failed[-1].id}
        for case, arguments in cases(user).items():
            if "before" in arguments:
                arguments = {**arguments, "before": befores[case]}
            filters = _filters(arguments)
            with app.app_context():
                took, _ = _timed(rounds, delivery_log.page, caller, filters, PAGE_SIZE)
                statements(case, delivery_log.page, caller, filters, PAGE_SIZE)
                database.close()
            record(case, "function", took)
            took, answer = _timed(rounds, client.get,
                                  "/portal/deliveries?" + urlencode(arguments))
            assert answer.status_code == 200, (case, answer.status_code)
            record(case, "page", took)
        shown = first_failed[0].id
        with app.app_context():
            took, found = _timed(rounds, delivery_log.delivery_with_attempts, caller, shown)
            assert found is not None and len(found.attempt_rows) == 3
            statements("a delivery's page", delivery_log.delivery_with_attempts, caller, shown)
            database.close()
        record("a delivery's page", "function", took)
        took, answer = _timed(rounds, client.get, f"/portal/deliveries/{shown}")
        assert answer.status_code == 200, answer.status_code
        record("a delivery's page", "page", took)
    return times


def run(backends, rounds):
    """Seed and measure each backend; {backend name: measure()'s result}."""
    results = {}
    for backend in backends:
        url = backend.url("portal_log")
        print(f"seeding {portal_seed.DELIVERIES:,} deliveries on {backend.name} ...",
              flush=True)
        started = time.monotonic()
        portal_seed.seed(url)
        print(f"  seeded in {time.monotonic() - started:.0f} s; measuring", flush=True)
        results[backend.name] = {"description": backend.description,
                                 "times": measure(url, rounds)}
        backend.drop_all()
    return results


def _cell(took):
    return f"{statistics.median(took):.1f} / {max(took):.1f}"


def _machine():
    return (f"{os.cpu_count()} cores, Linux {platform.release()}, Python "
            f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}; load average "
            f"{os.getloadavg()[0]:.1f} when written (other work shares the cores)")


KINDS = (("function", "function"), ("page", "page"), ("statements", "in PostgreSQL"))


def render(results, rounds, command, measured_at):
    """The docs/performance.md section of ``run()``'s results."""
    names = list(results)
    columns = [(name, kind, f"{name} {label}") for name in names for kind, label in KINDS
               if any(t[kind] for t in results[name]["times"].values())]
    lines = [SECTION_BEGIN, "## The portal's delivery log on a big database", "",
             f"Measured by `{command}` on {measured_at}. "
             f"{portal_seed.DELIVERIES:,} deliveries over {portal_seed.ENDPOINTS:,} "
             f"endpoints of {portal_seed.USERS:,} users (bench/portal_seed.py), "
             f"{len(SAMPLED_USERS)} users x {rounds} runs per case. Server time in ms, "
             "median / slowest: of the log's function as the portal calls it, of the "
             "whole portal page (test client: session check, queries, template; no "
             "network), and, on PostgreSQL, the server's own planning and execution "
             "time of the function's statements (EXPLAIN ANALYZE). The budget is "
             f"{BUDGET_MS} ms. How it is measured: "
             "[benchmarking.md](benchmarking.md#the-portals-delivery-log).",
             "", f"Machine: {_machine()}.", ""]
    for name in names:
        lines.append(f"- {name}: {results[name]['description']}")
    lines += ["", "| case | " + " | ".join(title for _, _, title in columns) + " |",
              "|---|" + "---:|" * len(columns)]
    for case in results[names[0]]["times"]:
        lines.append(f"| {case} | " + " | ".join(
            _cell(results[name]["times"][case][kind]) for name, kind, _ in columns) + " |")
    every = [t[kind] for r in results.values() for t in r["times"].values()
             for kind, _ in KINDS if t[kind]]
    medians = max(statistics.median(took) for took in every)
    slowest = max(max(took) for took in every)
    verdict = "within" if medians <= BUDGET_MS else "OVER"
    lines += ["", f"Largest median: {medians:.1f} ms, {verdict} the {BUDGET_MS} ms budget; "
              f"slowest single run: {slowest:.1f} ms (a run waits for a core whenever the "
              "machine's other work holds both: the time in PostgreSQL shows what the "
              "reads themselves cost).", SECTION_END]
    return "\n".join(lines) + "\n"


def section_of(page):
    """The portal section of a docs/performance.md text, or ""."""
    begin, end = page.find(SECTION_BEGIN), page.find(SECTION_END)
    return page[begin:end + len(SECTION_END)] + "\n" if 0 <= begin < end else ""


def with_section(page, section):
    """``page`` with its portal section replaced by ``section`` (added at the end)."""
    old = section_of(page)
    if old:
        return page.replace(old, section)
    return page + ("\n" if section and page else "") + section


def rounds_wanted():
    """BENCH_PORTAL_ROUNDS, runs per case and user (default 10)."""
    return int(os.environ.get("BENCH_PORTAL_ROUNDS") or 10)
