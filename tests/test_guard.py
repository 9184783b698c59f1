"""The guard's decisions on a live connection: probe verdicts, P1/P2, exemptions, safety, reports."""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

import guarded_sqlite
from guarded_sqlite import GuardPolicy

from .conftest import EXPLODING_SQL, fill_fanout


def test_report_is_none_before_the_first_execute(guarded: guarded_sqlite.GuardedConnection) -> None:
    assert guarded.cursor().guard_report is None


def test_explosion_is_flagged_and_patched_with_distinct(guarded, raw) -> None:
    cur = guarded.execute(EXPLODING_SQL)
    rows = cur.fetchall()
    raw_rows = raw.execute(EXPLODING_SQL).fetchall()
    report = cur.guard_report
    assert Counter(rows) == Counter(set(raw_rows))
    assert report.trigger == "cartesian_explosion" and report.flagged
    assert report.action == "distinct_injected" and report.patched
    assert report.final_sql == EXPLODING_SQL.replace("SELECT", "SELECT DISTINCT", 1)
    assert (report.rows, report.unique_rows, report.final_rows) == (24, 4, 4)
    assert report.dup_ratio == pytest.approx(20 / 24)
    assert [(d.rule, d.applied) for d in report.decisions] == [("P1", True)]
    assert report.detect_us is not None and report.detect_us >= 0
    assert report.patch_ms is not None and report.patch_ms > 0


def test_a_patch_emits_a_log_record(guarded, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="guarded_sqlite"):
        guarded.execute(EXPLODING_SQL).fetchall()
    records = [r for r in caplog.records if r.name == "guarded_sqlite"]
    assert len(records) == 1 and "distinct_injected" in records[0].getMessage()


def test_observe_mode_reports_but_changes_nothing(raw) -> None:
    con = guarded_sqlite.connect(":memory:", guard="observe")
    fill_fanout(con)
    cur = con.execute(EXPLODING_SQL)
    assert cur.fetchall() == raw.execute(EXPLODING_SQL).fetchall()
    assert cur.guard_report.trigger == "cartesian_explosion"
    assert cur.guard_report.action == "none" and cur.guard_report.decisions == ()


def test_off_mode_neither_probes_nor_patches(raw) -> None:
    con = guarded_sqlite.connect(":memory:", guard="off")
    fill_fanout(con)
    cur = con.execute(EXPLODING_SQL)
    assert cur.fetchall() == raw.execute(EXPLODING_SQL).fetchall()
    report = cur.guard_report
    assert not report.probed and report.trigger is None and report.note == "guard is off"


def test_healthy_query_is_untouched(guarded, raw) -> None:
    sql = "SELECT id, name FROM customers ORDER BY id"
    cur = guarded.execute(sql)
    assert cur.fetchall() == raw.execute(sql).fetchall()
    report = cur.guard_report
    assert report.trigger is None and not report.flagged and report.action == "none"
    assert report.decisions == () and report.patch_ms is None and report.dup_ratio == 0.0


def test_empty_result_is_flagged_but_not_patched(guarded) -> None:
    cur = guarded.execute("SELECT name FROM customers WHERE id < 0")
    assert cur.fetchall() == []
    report = cur.guard_report
    assert report.trigger == "empty_result" and report.action == "none"
    assert report.rows == 0 and report.dup_ratio is None and report.decisions == ()


@pytest.mark.parametrize(
    "sql, message",
    [
        ("SELECT * FROM missing", "no such table: missing"),
        ("SELEC 1", 'near "SELEC": syntax error'),
    ],
)
def test_execution_error_is_reraised_unchanged_with_the_report_set(guarded, raw, sql: str, message: str) -> None:
    with pytest.raises(sqlite3.OperationalError) as raw_error:
        raw.execute(sql)
    cur = guarded.cursor()
    with pytest.raises(sqlite3.OperationalError) as guarded_error:
        cur.execute(sql)
    assert str(guarded_error.value) == str(raw_error.value) == message
    assert cur.guard_report.trigger == "exec_error"
    assert cur.guard_report.error == f"OperationalError: {message}"


@pytest.mark.parametrize(
    "sql, reason",
    [
        (EXPLODING_SQL + " LIMIT 20", "LIMIT"),
        ("SELECT count(*) FROM orders GROUP BY id", "GROUP BY"),
        (
            "SELECT name FROM customers UNION ALL SELECT name FROM customers UNION ALL SELECT name FROM customers"
            " UNION ALL SELECT name FROM customers UNION ALL SELECT name FROM customers",
            "UNION ALL",
        ),
        ("SELECT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = ?1", "could not parse"),
    ],
)
def test_flagged_but_exempt_queries_keep_their_rows_and_say_why(guarded, raw, sql: str, reason: str) -> None:
    parameters = (1,) if "?1" in sql else ()
    cur = guarded.execute(sql, parameters)
    assert cur.fetchall() == raw.execute(sql, parameters).fetchall()
    report = cur.guard_report
    assert report.trigger == "cartesian_explosion" and report.action == "none"
    (decision,) = report.decisions
    assert decision.rule == "P1" and not decision.applied and reason in decision.reason


def test_p1_can_be_disabled_while_the_probe_still_flags(raw) -> None:
    con = guarded_sqlite.connect(":memory:", guard=GuardPolicy(inject_distinct=False))
    fill_fanout(con)
    cur = con.execute(EXPLODING_SQL)
    assert cur.fetchall() == raw.execute(EXPLODING_SQL).fetchall()
    assert cur.guard_report.flagged and "disabled" in cur.guard_report.decisions[0].reason


def test_tau_inject_sets_the_explosion_threshold() -> None:
    # 10 rows, 4 distinct: dup_ratio 0.6 is healthy at the default 0.8 and flagged at 0.5.
    for tau, flagged in [(0.8, False), (0.6, True), (0.5, True)]:
        con = guarded_sqlite.connect(":memory:", guard=GuardPolicy(tau_inject=tau))
        con.execute("CREATE TABLE t (x)")
        con.executemany("INSERT INTO t VALUES (?)", [(v,) for v in [1, 1, 1, 1, 2, 2, 2, 3, 3, 4]])
        report = con.execute("SELECT a.x FROM t AS a JOIN t AS b ON a.rowid = b.rowid").guard_report
        assert report.dup_ratio == pytest.approx(0.6)
        assert report.flagged is flagged and (report.action == "distinct_injected") is flagged


def test_parameters_and_comments_survive_the_patch(guarded) -> None:
    sql = "SELECT c.name /* who */ FROM customers AS c JOIN orders AS o ON o.customer_id = c.id WHERE o.amount >= :low"
    cur = guarded.execute(sql, {"low": 0})
    assert sorted(cur.fetchall()) == [("name0",), ("name1",), ("name2",), ("name3",)]
    assert cur.guard_report.final_sql == sql.replace("SELECT", "SELECT DISTINCT", 1)


def test_patch_rerun_uses_the_cursors_row_factory(guarded) -> None:
    cur = guarded.cursor()
    cur.row_factory = sqlite3.Row
    rows = cur.execute(EXPLODING_SQL).fetchall()
    assert cur.guard_report.action == "distinct_injected"
    assert all(isinstance(row, sqlite3.Row) for row in rows) and {row["name"] for row in rows} == {
        f"name{i}" for i in range(4)
    }


def test_patch_rerun_sees_uncommitted_changes(guarded) -> None:
    guarded.execute("INSERT INTO customers VALUES (99, 'late', 'x')")
    guarded.executemany("INSERT INTO orders VALUES (?, 99, 1)", [(1000 + i,) for i in range(6)])
    assert guarded.in_transaction
    rows = guarded.execute(EXPLODING_SQL).fetchall()
    assert ("late",) in rows and len(rows) == 5


def test_a_collation_that_merges_rows_blocks_the_patch() -> None:
    con = guarded_sqlite.connect(":memory:")
    con.execute("CREATE TABLE t (name TEXT COLLATE NOCASE)")
    con.executemany("INSERT INTO t VALUES (?)", [("a",), ("A",)])
    con.execute("CREATE TABLE n (k)")
    con.executemany("INSERT INTO n VALUES (?)", [(i,) for i in range(10)])
    cur = con.execute("SELECT t.name FROM t JOIN n ON 1")
    rows = cur.fetchall()
    # DISTINCT under NOCASE keeps one of 'a'/'A', which would change the set: the guard refuses.
    assert Counter(rows) == Counter({("a",): 10, ("A",): 10})
    (decision,) = cur.guard_report.decisions
    assert not decision.applied and "different set" in decision.reason


def _names_table(con: sqlite3.Connection, names: list[str]) -> None:
    con.execute("CREATE TABLE people (name TEXT)")
    con.executemany("INSERT INTO people VALUES (?)", [(n,) for n in names])


def test_p2_removes_a_distinct_that_hides_legitimate_duplicates() -> None:
    names = [f"person{i}" for i in range(10)] + ["person0"]  # 11 rows, 10 distinct: dup_ratio 1/11
    con = guarded_sqlite.connect(":memory:")
    _names_table(con, names)
    cur = con.execute("SELECT DISTINCT name FROM people")
    rows = cur.fetchall()
    assert Counter(rows) == Counter((n,) for n in names)
    report = cur.guard_report
    assert report.trigger is None and report.action == "distinct_removed"
    assert report.final_sql == "SELECT name FROM people" and (report.rows, report.final_rows) == (10, 11)


def test_p2_keeps_the_distinct_when_removal_adds_too_many_duplicates() -> None:
    names = [f"person{i}" for i in range(10)] + ["person0", "person1"]  # dup_ratio 2/12 > 0.10
    con = guarded_sqlite.connect(":memory:")
    _names_table(con, names)
    cur = con.execute("SELECT DISTINCT name FROM people")
    assert len(cur.fetchall()) == 10
    (decision,) = cur.guard_report.decisions
    assert decision.rule == "P2" and not decision.applied and "tau_remove" in decision.reason


def test_p2_is_not_considered_on_results_too_small_to_ever_qualify() -> None:
    con = guarded_sqlite.connect(":memory:")
    _names_table(con, ["a", "a", "b"])
    cur = con.execute("SELECT DISTINCT name FROM people")
    assert len(cur.fetchall()) == 2 and cur.guard_report.decisions == ()


def test_writes_returning_duplicate_rows_run_once_and_are_never_rewritten() -> None:
    con = guarded_sqlite.connect(":memory:")
    con.execute("CREATE TABLE t (x)")
    cur = con.execute(
        "INSERT INTO t SELECT 1 FROM (SELECT 1 UNION ALL SELECT 2) AS a, (SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5) AS b RETURNING x"
    )
    assert cur.fetchall() == [(1,)] * 10
    report = cur.guard_report
    assert report.trigger == "cartesian_explosion" and report.action == "none"
    assert "not a SELECT" in report.decisions[0].reason
    assert con.execute("SELECT count(*) FROM t").fetchone() == (10,)


def test_patch_rerun_is_read_only_even_for_a_writing_user_function() -> None:
    con = guarded_sqlite.connect(":memory:", isolation_level=None)
    fill_fanout(con)
    con.execute("CREATE TABLE audit (n)")

    def audited(value: str) -> str:
        con.execute("INSERT INTO audit VALUES (1)")
        return value

    con.create_function("audited", 1, audited)
    cur = con.execute("SELECT audited(c.name) FROM customers AS c JOIN orders AS o ON o.customer_id = c.id")
    assert len(cur.fetchall()) == 24  # the rerun's writes were refused, so the original rows stand
    (decision,) = cur.guard_report.decisions
    assert not decision.applied and "re-execution failed" in decision.reason
    assert con.execute("SELECT count(*) FROM audit").fetchone() == (24,)  # one execution's worth
    assert con.execute("PRAGMA query_only").fetchone() == (0,)


def test_query_only_set_by_the_caller_is_left_on(guarded) -> None:
    guarded.execute("PRAGMA query_only = ON")
    assert guarded.execute(EXPLODING_SQL).guard_report.action == "distinct_injected"
    assert guarded.execute("PRAGMA query_only").fetchone() == (1,)


def test_threads_writing_while_others_patch_never_see_the_read_only_window(tmp_path: Path) -> None:
    con = guarded_sqlite.connect(tmp_path / "db.sqlite", check_same_thread=False, isolation_level=None)
    fill_fanout(con)
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for i in range(200):
                con.execute("INSERT INTO orders VALUES (NULL, 0, ?)", (i,))
        except BaseException as error:
            errors.append(error)

    def reader() -> None:
        try:
            for _ in range(100):
                con.execute(EXPLODING_SQL).fetchall()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=f) for f in (writer, reader, writer, reader)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert con.execute("SELECT count(*) FROM orders").fetchone() == (24 + 400,)


def test_an_internal_error_while_patching_keeps_the_original_rows(
    guarded, raw, monkeypatch: pytest.MonkeyPatch
) -> None:
    import guarded_sqlite.patching as patching

    def broken(sql: str, dialect: str = "sqlite") -> None:
        raise RecursionError("deep")

    monkeypatch.setattr(patching, "inject_distinct", broken)
    cur = guarded.execute(EXPLODING_SQL)
    assert cur.fetchall() == raw.execute(EXPLODING_SQL).fetchall()
    (decision,) = cur.guard_report.decisions
    assert not decision.applied and "internal error" in decision.reason and "RecursionError" in decision.reason


def test_report_is_frozen_and_renders_for_jupyter(guarded) -> None:
    report = guarded.execute(EXPLODING_SQL).guard_report
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.action = "none"  # type: ignore[misc]
    page = report._repr_html_()
    assert "<table>" in page and "distinct_injected" in page and "P1 applied" in page
    assert report.summary().startswith("cartesian_explosion: rows=24 unique=4")


def test_report_built_from_state_has_exactly_the_dataclass_fields(guarded) -> None:
    report = guarded.execute(EXPLODING_SQL).guard_report
    assert list(vars(report)) == [f.name for f in dataclasses.fields(report)]
    assert report == dataclasses.replace(report)  # the regular constructor agrees with the fast path


def test_statements_without_rows_are_not_probed(guarded) -> None:
    report = guarded.execute("UPDATE orders SET amount = amount + 1").guard_report
    assert not report.probed and report.note == "statement returns no rows" and report.trigger is None


def test_policy_validation() -> None:
    for bad in [
        dict(mode="fix"),
        dict(tau_inject=0),
        dict(tau_inject=1.5),
        dict(tau_remove=1.0),
        dict(row_cap=0),
        dict(row_cap=True),
    ]:
        with pytest.raises(ValueError):
            GuardPolicy(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="guard mode"):
        guarded_sqlite.connect(":memory:", guard="fix")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        guarded_sqlite.connect(":memory:", guard=0.8)  # type: ignore[arg-type]


def test_unflagged_queries_never_import_sqlglot_or_litellm() -> None:
    script = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
import guarded_sqlite
from conftest import fill_fanout
con = guarded_sqlite.connect(":memory:")
fill_fanout(con)
for sql in ["SELECT * FROM customers", "SELECT DISTINCT city FROM customers", "SELECT * FROM orders WHERE id < 0",
            "SELECT count(*) FROM orders", "UPDATE orders SET amount = 1"]:
    con.execute(sql).fetchall()
assert "sqlglot" not in sys.modules, "sqlglot imported on the unflagged path"
assert "litellm" not in sys.modules
con.execute("SELECT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id").fetchall()
assert "sqlglot" in sys.modules
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
