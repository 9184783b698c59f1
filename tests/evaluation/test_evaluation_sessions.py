"""The evaluation's sessions and options: time limits through the shared watchdog, stale interrupts,
one policy resolution, the rescue options as one object, and the engine names from one place."""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

import guarded_sqlite.evaluation
from guarded_sqlite import GuardPolicy
from guarded_sqlite._analysis.transpile import ENGINE_DIALECTS
from guarded_sqlite._engines import ENGINE_NAMES
from guarded_sqlite.cli.commands import _parser, main
from guarded_sqlite.evaluation import RescueOptions, evaluate
from guarded_sqlite.evaluation.loaders import InputError
from guarded_sqlite.evaluation.options import (
    ENGINES,
    resolve_eval_policy,
    resolve_rescue_policy,
)
from guarded_sqlite.evaluation.sessions import DuckDBSession, Session, SQLiteSession
from tests.pace import within

SLOW = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 500000000) SELECT count(*) FROM c"
"""Counts to 5e8 inside the engine: many seconds unless interrupted."""


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Path:
    path = tmp_path / "t" / "t.sqlite"
    path.parent.mkdir()
    con = sqlite3.connect(path)
    con.executescript("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1), (1), (2);")
    con.close()
    return path


def _session(kind: str, sqlite_db: Path, tmp_path: Path) -> Session:
    if kind == "sqlite":
        return SQLiteSession(str(sqlite_db))
    duckdb = pytest.importorskip("duckdb")
    path = tmp_path / "t.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1), (1), (2);")
    con.close()
    return DuckDBSession(str(path))


@pytest.mark.parametrize("kind", ["sqlite", "duckdb"])
def test_the_watchdog_interrupts_a_running_statement_and_the_next_query_runs(
    kind: str, sqlite_db: Path, tmp_path: Path
) -> None:
    session = _session(kind, sqlite_db, tmp_path)
    try:
        for con in (session.raw, session.guarded(GuardPolicy())):
            started = time.perf_counter()
            slow = session.run(con, SLOW, 0.2)
            assert within(time.perf_counter() - started, 0.2, 2.8)  # not a count to 5e8
            assert (slow.rows, slow.status, slow.error) == (None, "timeout", "interrupted at the 0.2 s timeout")
            after = session.run(con, "SELECT count(*) FROM t", 0.2)
            assert (after.rows, after.status, after.error) == ([(3,)], "ok", None)
    finally:
        session.close()


@pytest.mark.parametrize("kind", ["sqlite", "duckdb"])
def test_an_interrupt_landing_between_statements_does_not_hit_the_next_query(
    kind: str, sqlite_db: Path, tmp_path: Path
) -> None:
    session = _session(kind, sqlite_db, tmp_path)
    try:
        assert session.run(session.raw, "SELECT x FROM t", 5.0).status == "ok"
        for con in (session.raw, session.guarded(GuardPolicy())):
            # What a deadline firing just after the statement finished (before cancel()) would do.
            session.raw.interrupt()
            run = session.run(con, "SELECT x FROM t ORDER BY x", 5.0)
            assert (run.status, run.error) == ("ok", None)
            assert run.rows is not None and [tuple(row) for row in run.rows] == [(1,), (1,), (2,)]
    finally:
        session.close()


@pytest.mark.parametrize("kind", ["sqlite", "duckdb"])
def test_a_large_healthy_result_is_recorded_with_its_exact_distinct_count(
    kind: str, sqlite_db: Path, tmp_path: Path
) -> None:
    """The probe counts a large healthy result only partly, and the cursor lets go of its rows once
    served (r40): the session reads the report while they are buffered, so the record's count (which
    the threshold sweep replays from) is exact."""
    session = _session(kind, sqlite_db, tmp_path)
    big = "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 5000) SELECT i % 2500 FROM s"
    try:
        run = session.run(session.guarded(GuardPolicy(mode="observe")), big, 5.0)
        assert run.rows is not None and len(run.rows) == 5000
        assert run.report is not None
        assert (run.report.rows, run.report.unique_rows, run.report.dup_ratio) == (5000, 2500, 0.5)
    finally:
        session.close()


def test_errors_are_one_line_with_the_exception_class(sqlite_db: Path) -> None:
    session = SQLiteSession(str(sqlite_db))
    try:
        failed = session.run(session.raw, "SELECT nope FROM t", 5.0)
        assert (failed.status, failed.error) == ("error", "OperationalError: no such column: nope")
        untimed = session.run(session.raw, "SELECT nope FROM t", None)
        assert untimed.error == failed.error
        assert session.run(session.raw, "   ", 5.0).error == "empty prediction"
    finally:
        session.close()


def test_no_timeout_means_no_deadline(sqlite_db: Path) -> None:
    session = SQLiteSession(str(sqlite_db))
    try:
        run = session.run(session.raw, "SELECT count(*) FROM t", None)
        assert (run.rows, run.status) == ([(3,)], "ok")
    finally:
        session.close()


def test_the_eval_policy_is_resolve_policy_without_off() -> None:
    assert resolve_eval_policy(None) == GuardPolicy()
    assert resolve_eval_policy("observe") == GuardPolicy(mode="observe")
    custom = GuardPolicy(tau_inject=0.5)
    assert resolve_eval_policy(custom) is custom
    with pytest.raises(ValueError, match="guard='off' does not probe anything"):
        resolve_eval_policy("off")
    with pytest.raises(ValueError, match="guard='off'"):
        resolve_eval_policy(GuardPolicy(mode="off"))
    with pytest.raises(ValueError, match="guard mode must be one of"):
        resolve_eval_policy("bogus")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        resolve_eval_policy(3)  # type: ignore[arg-type]


def test_rescue_options_resolve_to_the_policy() -> None:
    policy = GuardPolicy()
    assert resolve_rescue_policy(policy, None) is policy
    assert resolve_rescue_policy(policy, None, RescueOptions()) is policy
    with pytest.raises(InputError, match="only apply with --candidates"):
        resolve_rescue_policy(policy, None, RescueOptions(order="patch_first"))
    chosen = resolve_rescue_policy(policy, {}, RescueOptions(order="patch_first"))
    assert (type(chosen.rescue).__name__, chosen.order) == ("DupRatioSelector", "patch_first")
    with pytest.raises(InputError, match="need --rescue llm"):
        resolve_rescue_policy(policy, {}, RescueOptions(llm_model="m"))
    with pytest.raises(InputError, match="needs --llm-model"):
        resolve_rescue_policy(policy, {}, RescueOptions(rescue="llm"))
    llm = resolve_rescue_policy(policy, {}, RescueOptions(rescue="llm", llm_model="m", llm_api_key="k"))
    assert type(llm.rescue).__name__ == "LLMRescue"


def test_rescue_options_are_frozen_and_keep_the_key_out_of_repr() -> None:
    options = RescueOptions(rescue="llm", llm_model="m", llm_api_key="secret-key")
    assert "secret-key" not in repr(options)
    assert options.given and options.llm_given
    assert not RescueOptions().given
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.order = "patch_first"  # type: ignore[misc]


def _tiny_inputs(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    root = tmp_path / "dbs"
    path = root / "t" / "t.sqlite"
    path.parent.mkdir(parents=True)
    con = sqlite3.connect(path)
    con.executescript("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1), (1), (1), (1), (1), (1), (2);")
    con.close()
    gold = tmp_path / "gold.sql"
    gold.write_text("SELECT DISTINCT x FROM t\tt\n", encoding="utf-8")
    pred = tmp_path / "pred.txt"
    pred.write_text("SELECT x FROM t\n", encoding="utf-8")
    candidates = tmp_path / "candidates.json"
    candidates.write_text('{"0": ["SELECT x FROM t", "SELECT DISTINCT x FROM t"]}', encoding="utf-8")
    return root, gold, pred, candidates


def test_evaluate_takes_the_rescue_options_as_keywords_or_as_one_object(tmp_path: Path) -> None:
    root, gold, pred, candidates = _tiny_inputs(tmp_path)
    by_keywords = evaluate(root, gold, pred, workers=1, candidates=candidates, order="patch_first")
    by_object = evaluate(
        root, gold, pred, workers=1, candidates=candidates, rescue_options=RescueOptions(order="patch_first")
    )
    assert by_keywords.rescue is not None and by_object.rescue is not None
    assert by_keywords.rescue.order == by_object.rescue.order == "patch_first"
    assert [(p.action, p.rescue_chosen_index) for p in by_keywords.pairs] == [
        (p.action, p.rescue_chosen_index) for p in by_object.pairs
    ]
    with pytest.raises(TypeError, match="not both"):
        evaluate(
            root, gold, pred, workers=1, candidates=candidates, order="patch_first", rescue_options=RescueOptions()
        )


def test_the_cli_hands_evaluate_one_rescue_options_object(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, gold, pred, candidates = _tiny_inputs(tmp_path)
    seen: dict[str, Any] = {}
    real = guarded_sqlite.evaluation.evaluate

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(guarded_sqlite.evaluation, "evaluate", spy)
    argv = ["eval", "--db-root", str(root), "--gold", str(gold), "--pred", str(pred), "--workers", "1"]
    assert main([*argv, "--candidates", str(candidates), "--order", "patch_first", "--json", "-"]) == 0
    assert seen["rescue_options"] == RescueOptions(order="patch_first")
    assert not {"rescue", "order", "llm_model", "llm_api_base", "llm_api_key", "llm_timeout"} & set(seen)


def test_engine_names_come_from_one_place() -> None:
    assert ENGINES == ENGINE_NAMES
    assert set(ENGINE_DIALECTS) == set(ENGINE_NAMES) - {"sqlite"}
    inputs = ["--db-root", "d", "--gold", "g", "--pred", "p"]
    for command in ("eval", "sweep"):
        for name in ENGINE_NAMES:
            assert _parser().parse_args([command, *inputs, "--engine", name]).engine == name
        with pytest.raises(SystemExit):
            _parser().parse_args([command, *inputs, "--engine", "oracle"])


def test_transpile_errors_are_one_plain_line() -> None:
    pytest.importorskip("sqlglot")
    from guarded_sqlite._analysis.transpile import TranspileError, transpile

    with pytest.raises(TranspileError) as caught:
        transpile("SELECT a FROM t WHERE x = (1", "duckdb")
    message = str(caught.value)
    assert message.startswith("sqlglot cannot parse it as SQLite: ParseError: ")
    assert "\x1b" not in message and "\n" not in message
