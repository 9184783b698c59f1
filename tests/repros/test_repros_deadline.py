"""Repros a08, a12 and a13 (``../shared/repros/agent/``): an agent call's time limit holds even for a
statement SQLite cannot interrupt (a08: the worker process is killed), and bounds the guard's own
statements too. For a12 and a13 the deadline is made to fall in the guard's Python work (between the
model's statement and the corrected query) by a plan step that outlasts it, so the tests do not depend
on timing: the corrected query must not run, and the call must end as a timeout rather than serve rows.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

import guarded_sqlite
from guarded_sqlite._core.deadlines import call_deadline, interrupt_after, time_left
from guarded_sqlite._engines import GuardStatement
from guarded_sqlite._guard import aggregate_check
from guarded_sqlite._guard import decide as core
from guarded_sqlite.agent import GuardedDatabase, QueryRefused
from guarded_sqlite.cli.demo import build_shop
from tests.agent_cases import AGGREGATE

LIMIT = 0.5


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    path = tmp_path / "shop.db"
    build_shop(path)
    return path


def outlasting_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The aggregate rule's plan step, made to return only after the call's limit has passed."""
    from guarded_sqlite._analysis.plan_cache import known_safe, plan
    from guarded_sqlite._analysis.trees import Collecting
    from guarded_sqlite._rules import confirmations
    from guarded_sqlite._rules.fanout import confirm

    def slow_plan(*args: Any, **kwargs: Any) -> Any:
        time.sleep(LIMIT + 0.2)
        return plan(*args, **kwargs)

    rule = [slow_plan, confirm, confirmations, known_safe, Collecting]
    monkeypatch.setattr(aggregate_check, "_AGGREGATE_RULE", rule)


def test_a13_sqlite_corrected_query_does_not_run_after_the_deadline(
    shop: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outlasting_plan(monkeypatch)
    calls: list[float] = []

    def stamp(value: Any) -> Any:
        calls.append(time.monotonic())
        return value

    con = guarded_sqlite.connect(shop, guard="text_to_sql", check_same_thread=False)
    con.create_function("stamp", 1, stamp, deterministic=True)
    db = GuardedDatabase(con, timeout=LIMIT)
    sql = AGGREGATE.replace("SUM(c.points)", "SUM(stamp(c.points))")
    started = time.monotonic()
    try:
        with pytest.raises(QueryRefused) as refused:
            db.query(sql)
    finally:
        db.close()
    assert refused.value.kind == "timeout"
    assert calls, "the model's statement ran"
    assert max(calls) < started + LIMIT, "no SQL was evaluated for the call after its deadline"


def test_a12_duckdb_corrected_query_does_not_run_after_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    duckdb = pytest.importorskip("duckdb")
    path = tmp_path / "shop.duckdb"
    raw = duckdb.connect(str(path))
    raw.execute("CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT, points INTEGER)")
    raw.execute("CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id))")
    raw.execute("INSERT INTO customers VALUES (1, 'a', 10), (2, 'b', 20)")
    raw.execute("INSERT INTO orders VALUES (1, 1), (2, 1), (3, 2)")
    raw.close()
    from guarded_sqlite._engines import DUCKDB

    ran: list[tuple[str, float | None]] = []
    real = type(DUCKDB).read_only_fetch

    def recording(self: Any, raw: Any, statement: GuardStatement) -> Any:
        ran.append((statement.sql, statement.time_limit))
        return real(self, raw, statement)

    monkeypatch.setattr(type(DUCKDB), "read_only_fetch", recording)
    # The first statement of a process on DuckDB loads its sqlglot dialect and reads the catalog: on a
    # loaded machine that alone can take the whole LIMIT, which is not what this test is about.
    with GuardedDatabase.open(path, timeout=60, isolated=False) as warm:
        assert warm.query(AGGREGATE).report.trigger is not None
    ran.clear()
    # 3 s, not LIMIT: a shared CI machine can spend half a second on this call; what is checked is that
    # the guard's statements get the call's limit rather than rerun_timeout's 5 s.
    with GuardedDatabase.open(path, timeout=3.0, isolated=False) as roomy:
        assert roomy.query(AGGREGATE).report.trigger is not None  # the corrected query runs in time
    assert ran and all(limit is not None and 0 < limit <= 3.0 for _, limit in ran)
    ran.clear()
    with GuardedDatabase.open(path, timeout=LIMIT, isolated=False) as db:
        outlasting_plan(monkeypatch)
        with pytest.raises(QueryRefused) as refused:
            db.query(AGGREGATE)
        assert refused.value.kind == "timeout"
        assert ran == []  # the corrected query never reached the duplicate cursor
        assert db.query("SELECT 1 AS one").rows == ((1,),)  # the next call is not hit by a pending interrupt


def test_a_guard_statement_gets_what_the_call_has_left(shop: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    limits: list[float | None] = []
    engine = core.SQLITE

    def recording(self: Any, raw: Any, statement: GuardStatement) -> Any:
        limits.append(statement.time_limit)
        return type(engine).read_only_fetch(self, raw, statement)

    monkeypatch.setattr(type(engine), "read_only_fetch", recording, raising=True)
    with GuardedDatabase.open(shop, timeout=3.0, isolated=False) as db:
        db.query(AGGREGATE)
    assert limits and all(limit is not None and 0 < limit <= 3.0 for limit in limits)  # rerun_timeout is 5 s


def test_time_left_is_cut_by_the_call_and_unchanged_outside() -> None:
    assert time_left(5.0) == 5.0
    assert time_left(None) is None
    with call_deadline(100.0):
        left = time_left(5.0)
        assert left == 5.0
        assert time_left(None) is not None and 99 < time_left(None) <= 100  # type: ignore[operator]
        with call_deadline(1000.0):  # an inner block keeps the earlier end
            assert time_left(None) <= 100  # type: ignore[operator]
    with call_deadline(0.0):
        assert time_left(5.0) <= 0  # type: ignore[operator]
    with pytest.raises(ValueError):
        with call_deadline(float("nan")):
            pass


def test_a_repeating_deadline_fires_until_cancelled() -> None:
    count = [0]
    third = threading.Event()

    def interrupt() -> None:
        count[0] += 1
        if count[0] >= 3:
            third.set()

    deadline = interrupt_after(0.0, interrupt, every=0.005)
    assert third.wait(30)
    deadline.cancel()
    seen = count[0]
    time.sleep(0.05)
    assert count[0] == seen and deadline.fired
    with pytest.raises(ValueError):
        interrupt_after(1.0, interrupt, every=0.0)


# A statement SQLite cannot interrupt: one instr() call over two long strings (its cost is haystack x
# needle, several seconds here), within the per-value length cap.
UNINTERRUPTIBLE = "SELECT instr(printf('%.*c', 999000, 'a'), printf('%.*c', 250000, 'a') || 'b') AS position"


def test_a08_a_statement_inside_one_function_call_is_stopped_by_the_worker(shop: Path) -> None:
    """a08: one instr() call outlasts timeout=1; the worker is killed and restarted, and another call
    waiting meanwhile is still answered within its own limit."""
    from guarded_sqlite.agent.isolation import IsolatedDatabase

    with GuardedDatabase.open(shop, timeout=LIMIT) as db:
        assert isinstance(db, IsolatedDatabase)
        answers: dict[str, Any] = {}
        started = threading.Event()

        def other_call() -> None:
            started.wait()
            try:
                answers["other"] = db.query("SELECT count(*) FROM orders").rows
            except QueryRefused as busy:  # it waited for the worker its whole limit (a21)
                answers["other"] = busy.kind

        thread = threading.Thread(target=other_call)
        thread.start()
        started.set()
        with pytest.raises(QueryRefused) as refused:
            db.query(UNINTERRUPTIBLE)
        thread.join(60)
        assert refused.value.kind == "timeout"
        assert db.restarts == 1  # the worker was killed: its own interrupt could not stop instr()
        # The other call was answered: before the slow one, or refused as busy at its own limit.
        assert answers["other"] in (((30,),), "busy")
        assert db.query("SELECT count(*) FROM customers").rows == ((6,),)


def test_the_worker_serves_what_the_process_would(shop: Path) -> None:
    with GuardedDatabase.open(shop) as isolated, GuardedDatabase.open(shop, isolated=False) as local:
        for sql in (AGGREGATE, "SELECT name FROM customers ORDER BY id"):
            there, here = isolated.query(sql), local.query(sql)
            assert (there.columns, there.rows, there.observation()) == (here.columns, here.rows, here.observation())
            assert (there.report.action, there.report.final_sql) == (here.report.action, here.report.final_sql)
        assert isolated.schema() == local.schema()
        for sql in ("DELETE FROM orders", "", "SELECT nope FROM customers", "SELECT 1; SELECT 2"):
            with pytest.raises(QueryRefused) as far:
                isolated.query(sql)
            with pytest.raises(QueryRefused) as near:
                local.query(sql)
            assert (far.value.kind, str(far.value), far.value.feedback) == (
                near.value.kind,
                str(near.value),
                near.value.feedback,
            )
        assert (isolated.dialect, isolated.max_rows, isolated.timeout) == (local.dialect, local.max_rows, local.timeout)


def test_a_worker_that_cannot_open_the_file_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no such file|cannot be opened"):
        GuardedDatabase.open(tmp_path / "missing.db")
