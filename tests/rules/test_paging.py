"""A paging query's aggregate confirmation bounded to the groups it served (``guarded_sqlite._analysis.paging``,
repro c13): user functions run for those groups only, the served values stay exact, and a paging query
whose group keys are not in the select list is refused with a decision that says why."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
import sqlglot

import guarded_sqlite
from guarded_sqlite._analysis.aggregates import AggregatePlan
from guarded_sqlite._analysis.paging import bounded_check, plan_bound

SETUP = """
    CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT, points INTEGER);
    CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INTEGER, total INTEGER);
    CREATE INDEX orders_customer ON orders(customer_id);
"""


def shop(con: Any, customers: int = 200, per: int = 3) -> None:
    con.executescript(SETUP)
    con.executemany(
        "INSERT INTO customers VALUES (?, ?, ?)", [(i, f"c'{i % 7}", i % 10) for i in range(1, customers + 1)]
    )
    con.executemany(
        "INSERT INTO orders(customer_id, total) VALUES (?, ?)",
        [(i % customers + 1, i % 97) for i in range(customers * per)],
    )
    con.commit()


PAGE = (
    "SELECT c.id, c.name, SUM(fx(c.points)) FROM customers c JOIN orders o ON o.customer_id = c.id "
    "GROUP BY c.id ORDER BY c.id LIMIT 10"
)


def counted(guard: str | None, sql: str) -> tuple[list[Any], int, Any]:
    """The rows served, how many times fx ran, and the report (None: plain sqlite3)."""
    calls = [0]

    def fx(value: Any) -> Any:
        calls[0] += 1
        return value

    con: Any = sqlite3.connect(":memory:") if guard is None else guarded_sqlite.connect(":memory:", guard=guard)
    shop(con)
    con.create_function("fx", 1, fx, deterministic=True)
    calls[0] = 0
    cur = con.execute(sql)
    rows = cur.fetchall()
    return rows, calls[0], getattr(cur, "guard_report", None)


def test_c13_paging_confirmation_runs_the_user_function_for_the_served_groups_only() -> None:
    raw_rows, raw_calls, _ = counted(None, PAGE)
    rows, calls, report = counted("patch", PAGE)
    assert rows == raw_rows and raw_calls == 30
    assert report.trigger == "aggregate_fanout"
    assert calls == 2 * raw_calls  # the statement's own, then the check's: once per join row served


@pytest.mark.parametrize(
    "sql",
    [
        PAGE,
        PAGE.replace("LIMIT 10", "LIMIT 5 OFFSET 7"),
        PAGE.replace("GROUP BY c.id", "GROUP BY 1").replace("ORDER BY c.id", "ORDER BY c.id DESC"),
        PAGE.replace("GROUP BY c.id ORDER BY c.id", "GROUP BY c.name, c.id ORDER BY c.name, c.id"),
        PAGE.replace("c.id, c.name,", "c.name AS who,").replace(
            "GROUP BY c.id ORDER BY c.id", "GROUP BY who ORDER BY who"
        ),
    ],
)
def test_served_values_are_the_whole_checks(sql: str) -> None:
    truth_sql = sql.replace("SUM(fx(c.points))", "SUM(fx(c.points)) / 3")  # each customer has 3 orders
    truth, _, _ = counted(None, truth_sql)
    rows, _, report = counted("text_to_sql", sql)
    assert report.action == "aggregate_defanned", report.decisions
    assert rows == truth
    assert "IN (" in report.final_sql or " OR " in report.final_sql or report.final_sql.count("=") >= 1


def test_group_keys_not_in_the_select_list_refuse() -> None:
    sql = PAGE.replace("SELECT c.id, c.name,", "SELECT c.name,")
    rows, calls, report = counted("text_to_sql", sql)
    assert report.trigger is None and report.action == "none"
    (decision,) = report.decisions
    assert not decision.applied and "is not a select item" in decision.reason
    assert calls == 30  # nothing but the statement ran fx
    assert rows == counted(None, sql)[0]


def test_ordered_by_an_aggregate_keeps_the_whole_check() -> None:
    sql = PAGE.replace("ORDER BY c.id", "ORDER BY 3 DESC, c.id")
    truth, _, _ = counted(None, sql.replace("SUM(fx(c.points))", "SUM(fx(c.points)) / 3"))
    rows, _, report = counted("text_to_sql", sql)
    assert rows == truth and report.action == "aggregate_defanned"


def plan_for(sql: str) -> AggregatePlan:
    con = guarded_sqlite.connect(":memory:")
    con.executescript(SETUP)
    from guarded_sqlite._analysis.plan_cache import plan

    return plan(con._self_guard, sql)


def test_no_op_without_paging_or_groups() -> None:
    assert plan_for(PAGE.replace(" LIMIT 10", "")).bounded_sql is None
    whole = plan_for("SELECT SUM(c.points) FROM customers c JOIN orders o ON o.customer_id = c.id LIMIT 1")
    assert whole.risks and whole.bounded_sql is None and not whole.paging
    assert bounded_check(whole, [(1,)], "sqlite") == whole.check_sql


def test_bounded_check_literals() -> None:
    found = plan_for(PAGE)
    assert found.bounded_sql is not None and found.group_items == (0,)
    sql = bounded_check(found, [(1, "a", 3), (2, "b", 4)], "sqlite")
    assert sql is not None and "c.id IN (1, 2)" in sql and "LIMIT" not in sql
    assert sql.count("FX(") == 1  # computed once per derived-table row
    with_null = bounded_check(found, [(None, "a", 3), (2, "b", 4)], "sqlite")
    assert with_null is not None and "(c.id IS NULL) OR (c.id = 2)" in with_null
    two = plan_for(PAGE.replace("GROUP BY c.id", "GROUP BY c.id, c.name"))
    assert "c.name = 'it''s'" in (bounded_check(two, [(1, "it's", 3)], "sqlite") or "")
    with pytest.raises(ValueError, match="float"):
        bounded_check(found, [(1.5, "a", 3)], "sqlite")
    assert bounded_check(found, [(k, "a", 1) for k in range(2000)], "sqlite") == found.check_sql


def test_plan_bound_leaves_a_refused_plan() -> None:
    tree = sqlglot.parse_one(PAGE, read="sqlite")
    refused = AggregatePlan(note="refused")
    assert plan_bound(refused, tree, "sqlite") is refused


# --------------------------------------------------------------------------------------------------
# The confirmation's budget
# --------------------------------------------------------------------------------------------------


def test_budget_is_relative_with_a_floor_and_the_smaller_under_a_deadline() -> None:
    from guarded_sqlite._rules.confirmations import BUDGET_FLOOR, BUDGET_RATIO, budget

    assert budget(None, 5.0, None) == 5.0
    assert budget(0.0001, 5.0, None) == BUDGET_FLOOR
    assert budget(0.01, 5.0, None) == pytest.approx(BUDGET_RATIO * 0.01)
    assert budget(10.0, 5.0, None) == 5.0
    assert budget(0.01, 5.0, 0.02) == pytest.approx(0.02)
    assert budget(0.01, 5.0, 0.5) == pytest.approx(BUDGET_RATIO * 0.01)


def test_a_models_statement_gets_a_budget_fit_for_a_pipeline_that_waits_seconds() -> None:
    """Issue 42 item 4: under ``"text_to_sql"`` a check may take 25x the statement, at least 100 ms, where
    the default keeps 10x and 5 ms; both capped by ``rerun_timeout`` and a deadline."""
    from guarded_sqlite._rules.confirmations import MODEL_BUDGET_FLOOR, MODEL_BUDGET_RATIO, budget, over_budget

    assert (MODEL_BUDGET_FLOOR, MODEL_BUDGET_RATIO) == (0.1, 25.0)
    assert budget(0.0001, 5.0, None, model=True) == 0.1 > budget(0.0001, 5.0, None)
    assert budget(0.01, 5.0, None, model=True) == pytest.approx(0.25)
    assert budget(1.0, 5.0, None, model=True) == 5.0
    assert budget(0.01, 5.0, 0.05, model=True) == pytest.approx(0.05)
    assert "25x the statement's 10.00 ms, at least 100 ms" in over_budget(0.25, 0.01, None, model=True)


def test_over_budget_the_rule_did_not_look(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from guarded_sqlite._rules import confirmations

    # A 1 ms budget against a check whose 30 calls of fx take 1 ms each: stopped well inside it.
    monkeypatch.setattr(confirmations, "MODEL_BUDGET_FLOOR", 0.001)  # text_to_sql's budget
    monkeypatch.setattr(confirmations, "MODEL_BUDGET_RATIO", 1e-9)
    calls = [0]

    def fx(value: Any) -> Any:
        calls[0] += 1
        time.sleep(0.001)
        return value

    con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    shop(con)
    con.create_function("fx", 1, fx, deterministic=True)
    cur = con.execute(PAGE)
    rows = cur.fetchall()
    report = cur.guard_report
    assert report.trigger is None and report.action == "none"
    (decision,) = report.decisions
    assert not decision.applied and "over budget" in decision.reason and "did not look" in decision.reason
    assert calls[0] < 60  # the check stopped before it was done
    raw = sqlite3.connect(":memory:")
    shop(raw)
    raw.create_function("fx", 1, lambda value: value, deterministic=True)
    assert rows == raw.execute(PAGE).fetchall()  # as written


def test_an_agent_deadline_already_spent_runs_nothing() -> None:
    from guarded_sqlite._core.deadlines import call_deadline

    calls = [0]

    def fx(value: Any) -> Any:
        calls[0] += 1
        return value

    con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    shop(con)
    con.create_function("fx", 1, fx, deterministic=True)
    with call_deadline(0.0):
        cur = con.execute(PAGE)
        cur.fetchall()
    assert calls[0] == 30  # the statement's own calls only
    (decision,) = cur.guard_report.decisions
    assert decision.reason == "not checked: the call's time limit has passed"


def test_the_decision_is_in_feedback_and_the_log_record(caplog: pytest.LogCaptureFixture) -> None:
    sql = PAGE.replace("SELECT c.id, c.name,", "SELECT c.name,")
    with caplog.at_level("DEBUG", logger="guarded_sqlite"):
        _, _, report = counted("patch", sql)
    assert "is not a select item" in report.feedback()
    records = [r for r in caplog.records if "aggregate not checked" in r.getMessage()]
    assert records and records[0].levelname == "DEBUG"
    assert "is not a select item" in records[0].guarded_sqlite["decisions"][0]["reason"]


def test_reuse_is_in_feedback(tmp_path: Any) -> None:
    con = guarded_sqlite.connect(tmp_path / "shop.db")
    shop(con)
    sql = PAGE.replace("fx(c.points)", "c.points")
    reports = [con.execute(sql).guard_report for _ in range(3)]
    assert "reused its check" in reports[-1].feedback()
    assert "reused its check" not in reports[0].feedback()


def _statements(con: Any, sql: str) -> list[str]:
    """The statements SQLite ran for one execution of ``sql`` through ``con``, the guard's own included
    (and those run inside a function call, which SQLite's trace marks with a leading ``-- ``)."""
    from guarded_sqlite._analysis.schema import raw_sqlite

    ran: list[str] = []
    raw = raw_sqlite(con)
    raw.set_trace_callback(lambda text: ran.append(text.removeprefix("-- ")))
    try:
        con.execute(sql).fetchall()
    finally:
        raw.set_trace_callback(None)
    return ran


BUILT_INS_ONLY = "SELECT c.id, SUM(c.points) FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.id"


def test_a_check_calling_only_built_ins_leaves_query_only_alone() -> None:
    # Switching query_only expires every prepared statement of the connection (SQLite does so on any
    # flag PRAGMA): a check that cannot write skips it.
    con = guarded_sqlite.connect(":memory:")
    shop(con, customers=20)
    ran = _statements(con, BUILT_INS_ONLY)
    assert any("__gs_" in sql for sql in ran), ran  # the check ran
    assert not any(sql.startswith("PRAGMA query_only") for sql in ran), ran
    assert con.execute(BUILT_INS_ONLY).guard_report.trigger == "aggregate_fanout"


def test_a_check_calling_an_application_function_runs_under_query_only() -> None:
    con = guarded_sqlite.connect(":memory:")
    shop(con, customers=20)
    con.execute("CREATE TABLE audit(n INTEGER)")
    con.commit()
    inside: list[int] = []
    failures: list[str] = []

    def fx(value: Any) -> Any:
        # An application function that writes through the connection it was registered on.
        inside.append(con.execute("PRAGMA query_only").fetchone()[0])
        try:
            con.execute("INSERT INTO audit VALUES (1)")
        except sqlite3.OperationalError as error:
            failures.append(str(error))
        return value

    con.create_function("fx", 1, fx)
    sql = PAGE.replace(" LIMIT 10", "")
    ran = _statements(con, sql)
    assert "PRAGMA query_only = ON" in ran, ran
    # The caller's execution wrote; the guard's check could not.
    assert 0 in inside and 1 in inside
    assert failures and all("readonly" in f or "read-only" in f for f in failures), failures
    con.rollback()
    assert con.execute("PRAGMA query_only").fetchone()[0] == 0


# A check calling functions the application registered through the guarded connection runs fenced: no
# query_only switch (which expires every prepared statement) unless such a function runs SQL through
# the connection, which switches it on first; the check then switches it back off.


def test_a_fenced_check_switches_nothing_when_its_functions_run_no_sql(generous_budget: None) -> None:
    con = guarded_sqlite.connect(":memory:")
    shop(con, customers=20)
    calls: list[Any] = []
    con.create_function("fx", 1, lambda value: calls.append(value) or value, deterministic=True)
    ran = _statements(con, PAGE)
    assert any("__gs_" in sql for sql in ran), ran  # the check ran, calling fx
    assert len(calls) == 2 * 10 * 3  # the statement's 30 calls, and the check's for the same groups
    assert not any(sql.startswith("PRAGMA query_only") for sql in ran), ran
    assert con.execute(PAGE).guard_report.trigger == "aggregate_fanout"


def test_a_function_reading_through_the_connection_in_a_fenced_check(generous_budget: None) -> None:
    con = guarded_sqlite.connect(":memory:")
    shop(con, customers=20)
    con.execute("CREATE TABLE rates(points INTEGER PRIMARY KEY, rate INTEGER)")
    con.executemany("INSERT INTO rates VALUES (?, ?)", [(p, 10 * p + 1) for p in range(10)])
    con.commit()
    seen: list[int] = []

    def fx(points: int) -> int:
        seen.append(sqlite3.Cursor(con).execute("PRAGMA query_only").fetchone()[0])
        return int(con.execute("SELECT rate FROM rates WHERE points = ?", (points,)).fetchone()[0])

    con.create_function("fx", 1, fx)
    ran = _statements(con, PAGE)
    assert "PRAGMA query_only = ON" in ran and "PRAGMA query_only = 0" in ran, ran
    assert 0 in seen and 1 in seen  # off for the caller's statement, on once the check's fx ran SQL
    report = con.execute(PAGE).guard_report
    assert report.trigger == "aggregate_fanout", report  # the lookups were answered under query_only
    assert con.execute("PRAGMA query_only").fetchone()[0] == 0
    con.execute("INSERT INTO rates VALUES (100, 1)")  # the caller's writes work again
    assert con.execute("SELECT count(*) FROM rates").fetchone()[0] == 11


def test_a_fenced_check_keeps_the_callers_own_query_only() -> None:
    con = guarded_sqlite.connect(":memory:")
    shop(con, customers=20)
    con.create_function("fx", 1, lambda value: con.execute("SELECT ?", (value,)).fetchone()[0])
    con.execute("PRAGMA query_only = ON")
    ran = _statements(con, PAGE)
    assert any("__gs_" in sql for sql in ran), ran
    assert "PRAGMA query_only = 0" not in ran, ran
    assert con.execute("PRAGMA query_only").fetchone()[0] == 1


@pytest.mark.skipif(not hasattr(sqlite3.Connection, "blobopen"), reason="blobopen is new in Python 3.11")
def test_a_blob_written_from_a_fenced_check_is_refused() -> None:
    con = guarded_sqlite.connect(":memory:")
    shop(con, customers=20)
    con.execute("CREATE TABLE blobs(id INTEGER PRIMARY KEY, data BLOB)")
    con.execute("INSERT INTO blobs VALUES (1, zeroblob(4))")
    con.commit()
    failures: list[str] = []
    calls = [0]

    def fx(value: Any) -> Any:
        calls[0] += 1
        try:
            with con.blobopen("blobs", "data", 1) as blob:
                blob.write(calls[0].to_bytes(4, "big"))
        except sqlite3.Error as error:
            failures.append(str(error))
        return value

    con.create_function("fx", 1, fx)
    con.execute(PAGE).fetchall()
    statement_calls = 10 * 3
    assert calls[0] > statement_calls  # the check called fx too
    assert len(failures) == calls[0] - statement_calls, failures  # each of the check's writes refused
    con.commit()
    # The last write that landed is the statement's own last call.
    assert con.execute("SELECT data FROM blobs").fetchone()[0] == statement_calls.to_bytes(4, "big")


def test_checks_are_not_fenced_where_functions_may_bypass_the_guarded_object() -> None:
    pure = lambda value: value  # noqa: E731
    wrapped = guarded_sqlite.wrap(sqlite3.connect(":memory:"))
    shop(wrapped, customers=20)
    wrapped.create_function("fx", 1, pure)  # a wrap() proxy: the function may hold the raw connection
    assert "PRAGMA query_only = ON" in _statements(wrapped, PAGE)
    con = guarded_sqlite.connect(":memory:")
    shop(con, customers=20)
    con.create_function("fx", 1, pure)
    if hasattr(con, "enable_load_extension"):
        con.enable_load_extension(True)  # native code may have registered or replaced functions
    else:  # a Python built without extension loading: what enable_load_extension(True) records
        con._self_guard.extensions_loadable = True
    assert "PRAGMA query_only = ON" in _statements(con, PAGE)
    fresh = guarded_sqlite.connect(":memory:")
    shop(fresh, customers=20)
    sqlite3.Connection.create_function(fresh, "fx", 1, pure)  # registered past the guarded methods
    assert "PRAGMA query_only = ON" in _statements(fresh, PAGE)


class _CountNonNull:
    def __init__(self) -> None:
        self.n = 0

    def step(self, value: Any) -> None:
        self.n += value is not None

    def finalize(self) -> int:
        return self.n


def test_an_application_aggregate_beside_the_risk_is_not_computed_per_row() -> None:
    """R6: ``mycount(o.id)`` outside any aggregate may be the application's aggregate: the bounded
    check leaves it in the outer query (only calls inside a known aggregate's argument or in GROUP BY
    move into the derived table), so the fan-out is found and the truth served with mycount's value."""
    setup = (
        "CREATE TABLE c(id INTEGER PRIMARY KEY, v INTEGER); CREATE TABLE o(id INTEGER PRIMARY KEY, cid INTEGER);"
        "INSERT INTO c VALUES (1, 5), (2, 7), (3, 4); INSERT INTO o VALUES (1, 1), (2, 1), (3, 1), (4, 2), (5, 3);"
    )
    sql = "SELECT c.id, SUM(c.v), mycount(o.id) FROM c JOIN o ON o.cid = c.id GROUP BY c.id ORDER BY c.id LIMIT 2"
    for preset, served in (("patch", [(1, 15, 3), (2, 7, 1)]), ("text_to_sql", [(1, 5, 3), (2, 7, 1)])):
        con = guarded_sqlite.connect(":memory:", guard=preset)  # type: ignore[call-overload]
        con.executescript(setup)
        con.create_aggregate("mycount", 1, _CountNonNull)
        cur = con.execute(sql)
        assert cur.fetchall() == served
        assert cur.guard_report.trigger == "aggregate_fanout"


def test_the_check_runs_with_the_collector_paused_and_restores_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A garbage collection during the check must not spend its budget: the collector is paused while
    the check runs (seen by the check's own function) and is on again after, as the caller had it."""
    import gc

    seen: list[bool] = []
    con = guarded_sqlite.connect(":memory:")
    shop(con, customers=20)
    con.create_function("fx", 1, lambda value: seen.append(gc.isenabled()) or value, deterministic=True)
    assert gc.isenabled()
    con.execute(PAGE).fetchall()
    assert gc.isenabled()
    plain = sqlite3.connect(":memory:")
    shop(plain, customers=20)
    own: list[bool] = []
    plain.create_function("fx", 1, lambda value: own.append(True) or value, deterministic=True)
    plain.execute(PAGE).fetchall()
    statement_calls = len(own)  # the statement's own calls come first, with the collector on
    assert seen[:statement_calls] == [True] * statement_calls
    assert seen[statement_calls:] and not any(seen[statement_calls:])
    gc.disable()
    try:
        con.execute(PAGE.replace("LIMIT 10", "LIMIT 11")).fetchall()
        assert not gc.isenabled()  # the caller's choice is kept
    finally:
        gc.enable()
