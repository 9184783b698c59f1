"""The repros p09, p10, p14 and p15 (``/work/shared/repros/provenance``), one test each, with the
tests that pin down the details of each fix next to it.

Each test replicates its repro's scenario in the suite, so the defect cannot come back unnoticed.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import guarded_sqlite
from guarded_sqlite import GuardPolicy, GuardReport
from guarded_sqlite._analysis.rewrite import quiet_sqlglot
from guarded_sqlite._core.deadlines import _WATCHDOG, interrupt_after, wait_seconds
from guarded_sqlite._engines import pg_statement_timeout
from guarded_sqlite.cli.commands import main
from guarded_sqlite.evaluation import loaders, thresholds
from guarded_sqlite.evaluation.loaders import InputError, output_file_problem
from guarded_sqlite.evaluation.options import RescueOptions, resolve_rescue_policy, resolve_timeout
from tests.helpers import EXPLODING_SQL, fill_fanout
from tests.pace import within


def make_eval_inputs(root: Path) -> tuple[Path, Path, Path]:
    """``(db_root, gold, pred)`` for a one-pair evaluation on a database ``shop``."""
    db_root = root / "db"
    (db_root / "shop").mkdir(parents=True)
    con = sqlite3.connect(db_root / "shop" / "shop.sqlite")
    con.executescript("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO t VALUES (1, 'a');")
    con.close()
    gold = root / "gold.tsv"
    gold.write_text("SELECT name FROM t\tshop\n", encoding="utf-8")
    pred = root / "pred.txt"
    pred.write_text("SELECT name FROM t\n", encoding="utf-8")
    return db_root, gold, pred


# --------------------------------------------------------------------------------------------------
# p09: an infinite rerun_timeout must not stop the process-wide watchdog thread

ENDLESS = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
"""Never ends on its own: only an interrupt stops it."""


def _watchdog_not_dead() -> bool:
    """The watchdog thread is running, or not started yet (nothing was scheduled); not one that ended."""
    thread = _WATCHDOG._thread
    return thread is None or thread.is_alive()


def _seconds_until_interrupted(limit: float, backstop: float = 30.0) -> float:
    """How long ENDLESS ran under ``interrupt_after(limit)``; a timer interrupts it at ``backstop``
    seconds, so a watchdog that no longer fires makes the test fail instead of hang."""
    raw = sqlite3.connect(":memory:")
    backstop_timer = threading.Timer(backstop, raw.interrupt)
    backstop_timer.start()
    started = time.perf_counter()
    try:
        with pytest.raises(sqlite3.OperationalError, match="interrupted"), interrupt_after(limit, raw.interrupt):
            raw.execute(ENDLESS).fetchall()
        return time.perf_counter() - started
    finally:
        backstop_timer.cancel()
        raw.close()


@pytest.fixture
def watchdog_heap_untouched() -> Iterator[None]:
    """Fails a test that leaves deadlines it did not cancel on the watchdog's heap."""
    yield
    with _WATCHDOG.condition:
        assert not any(deadline._pending for _, _, deadline in _WATCHDOG._heap)


def test_p09_infinite_rerun_timeout_keeps_other_deadlines_firing() -> None:
    """p09: a guard re-execution under GuardPolicy(rerun_timeout=inf) leaves the watchdog thread alive,
    and a 0.3 s deadline on another connection still interrupts its endless statement."""
    con = guarded_sqlite.connect(":memory:", guard=GuardPolicy.paper(rerun_timeout=float("inf")))
    con.executescript("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT);")
    con.executemany("INSERT INTO t(name) VALUES (?)", [(f"n{i}",) for i in range(20)])
    cursor = con.execute("SELECT DISTINCT id, name FROM t")
    assert len(cursor.fetchall()) == 20
    report = cursor.guard_report
    assert report is not None  # P2 re-executed the query without DISTINCT (and kept it: no rows added)
    assert [(d.rule, d.reason) for d in report.decisions] == [("P2", "removing DISTINCT does not add rows")]
    time.sleep(0.05)  # give a dying watchdog the time to die
    thread = _WATCHDOG._thread
    assert thread is not None and thread.is_alive()
    assert within(_seconds_until_interrupted(0.3), 0.3, 1.7)
    con.close()


def test_p09_an_infinite_deadline_is_not_scheduled(watchdog_heap_untouched: None) -> None:
    """p09: interrupt_after(inf) registers nothing on the watchdog and never fires."""
    called: list[bool] = []
    with _WATCHDOG.condition:
        before = len(_WATCHDOG._heap)
    with interrupt_after(math.inf, lambda: called.append(True)) as deadline:
        with _WATCHDOG.condition:
            assert len(_WATCHDOG._heap) == before
    assert not deadline.fired and not called


def test_p09_a_far_deadline_does_not_stop_the_watchdog() -> None:
    """p09: a finite deadline too far away for one wait (1e300 s) leaves the watchdog working: a
    0.3 s deadline scheduled after it fires."""
    with interrupt_after(1e300, lambda: None):
        time.sleep(0.05)
        assert _watchdog_not_dead()
        assert within(_seconds_until_interrupted(0.3), 0.3, 1.7)
    assert wait_seconds(1e300) <= 3600.0 and wait_seconds(0.25) == 0.25


def test_p09_a_nan_deadline_is_refused() -> None:
    """p09: interrupt_after(nan) raises ValueError instead of reaching the watchdog's heap."""
    with pytest.raises(ValueError, match="nan"):
        interrupt_after(math.nan, lambda: None)


@pytest.mark.parametrize("value", [math.nan, -1.0, 0.0, -math.inf, True, "5"])
def test_p09_rerun_timeout_refuses_nan_negative_and_non_numbers(value: object) -> None:
    """p09: GuardPolicy refuses a rerun_timeout that is not a positive number of seconds, and says
    that float('inf') is how to ask for no limit."""
    with pytest.raises(ValueError, match=r"rerun_timeout must be a positive number of seconds \(float\('inf'\)"):
        GuardPolicy(rerun_timeout=value)  # type: ignore[arg-type]


def test_p09_postgres_gets_no_statement_timeout_for_an_infinite_limit() -> None:
    """p09: the PostgreSQL engine sets no local statement_timeout for an infinite (or longer than
    PostgreSQL accepts) time limit, instead of failing to convert it to milliseconds."""
    assert pg_statement_timeout(None) is None
    assert pg_statement_timeout(math.inf) is None
    assert pg_statement_timeout(1e10) is None  # past PostgreSQL's 2**31 - 1 ms
    assert pg_statement_timeout(0.5) == "500ms"
    assert pg_statement_timeout(0.0001) == "1ms"


def test_p09_evaluation_timeouts_inf_means_none_and_nan_is_refused() -> None:
    """p09: the evaluation's timeout=inf (``--timeout inf``) means no timeout, NaN is refused, and an
    infinite or NaN LLM timeout is an input error rather than a rescue that always fails."""
    assert resolve_timeout(math.inf) is None
    assert resolve_timeout(2) == 2.0
    with pytest.raises(ValueError, match="positive number of seconds"):
        resolve_timeout(math.nan)
    for llm_timeout in (math.inf, math.nan):
        with pytest.raises(InputError, match="finite"):
            options = RescueOptions(rescue="llm", llm_model="m", llm_timeout=llm_timeout)
            resolve_rescue_policy(GuardPolicy(), candidates=[], options=options)


def test_p09_cli_timeout_inf_runs_without_a_timeout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """p09: ``eval --timeout inf`` scores the predictions with no per-query timeout (the report says
    none) and leaves the watchdog working."""
    db_root, gold, pred = make_eval_inputs(tmp_path)
    out = tmp_path / "report.json"
    argv = ["eval", "--db-root", str(db_root), "--gold", str(gold), "--pred", str(pred), "--workers", "1"]
    assert main([*argv, "--timeout", "inf", "--json", str(out)]) == 0
    assert "timeout none" in capsys.readouterr().out
    assert json.loads(out.read_text(encoding="utf-8"))["timeout_s"] is None
    assert _watchdog_not_dead() and within(_seconds_until_interrupted(0.3), 0.3, 1.7)


# --------------------------------------------------------------------------------------------------
# p10: quiet_sqlglot must never leave the application's sqlglot logger disabled


class _ListHandler(logging.Handler):
    """Keeps the messages it is handed."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def sqlglot_messages() -> Iterator[list[str]]:
    """The messages the 'sqlglot' logger passes to its handlers during the test."""
    logger = logging.getLogger("sqlglot")
    handler = _ListHandler()
    logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)


def test_p10_two_threads_parsing_leave_the_sqlglot_logger_enabled(sqlglot_messages: list[str]) -> None:
    """p10: two threads, each with its own guarded connection, patching new SQL texts (each one
    parsed) with frequent thread switches, leave the sqlglot logger enabled and emitting."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # more thread switches: makes a race show quickly
    failures: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            con = guarded_sqlite.connect(":memory:")
            fill_fanout(con)
            for i in range(300):
                cursor = con.execute(f"{EXPLODING_SQL} WHERE {k} + {i} >= 0")
                cursor.fetchall()
                assert cursor.guard_report is not None and cursor.guard_report.action == "distinct_injected"
            con.close()
        except BaseException as error:  # reported by the main thread
            failures.append(error)

    try:
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert not failures
    logger = logging.getLogger("sqlglot")
    assert not logger.disabled
    logger.warning("the application's own sqlglot warning")
    assert sqlglot_messages == ["the application's own sqlglot warning"]


def test_p10_interleaved_exits_leave_the_logger_enabled(sqlglot_messages: list[str]) -> None:
    """p10: the interleaving that used to lose the flag, forced: thread A enters, thread B enters, A
    exits, B exits. Afterwards the sqlglot logger is enabled and emits."""
    a_entered, b_entered, a_exited = threading.Event(), threading.Event(), threading.Event()

    def a() -> None:
        with quiet_sqlglot():
            a_entered.set()
            b_entered.wait(5)
        a_exited.set()

    def b() -> None:
        a_entered.wait(5)
        with quiet_sqlglot():
            b_entered.set()
            a_exited.wait(5)

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    logger = logging.getLogger("sqlglot")
    assert not logger.disabled
    logger.warning("after both threads")
    assert sqlglot_messages == ["after both threads"]


def test_p10_only_the_parsing_thread_is_silenced(sqlglot_messages: list[str]) -> None:
    """p10: while one thread is inside quiet_sqlglot, its own sqlglot records are dropped but another
    thread's sqlglot warning is still emitted; nesting in one thread is silent until the outer exit."""
    inside, logged = threading.Event(), threading.Event()
    logger = logging.getLogger("sqlglot")

    def parser_thread() -> None:
        with quiet_sqlglot():
            with quiet_sqlglot():
                logger.warning("from inside, nested")
            logger.warning("from inside")
            inside.set()
            logged.wait(5)
        logger.warning("from the parsing thread, afterwards")

    thread = threading.Thread(target=parser_thread)
    thread.start()
    assert inside.wait(5)
    logger.warning("from another thread meanwhile")
    logged.set()
    thread.join()
    assert sqlglot_messages == ["from another thread meanwhile", "from the parsing thread, afterwards"]


# --------------------------------------------------------------------------------------------------
# p14: the CLI reports unusable paths on one line with exit status 2, before the run


def test_p14_cli_bad_paths_give_an_error_line_not_a_traceback(tmp_path: Path) -> None:
    """p14: ``eval --gold DIR``, ``eval --json /missing/dir/out.json`` and ``demo --db
    /missing/dir/shop.db``, run as the installed command, each print one
    ``guarded-sqlite <cmd>: error: ...`` line and exit 2, without a traceback."""
    db_root, gold, pred = make_eval_inputs(tmp_path)
    inputs = ["--db-root", str(db_root), "--pred", str(pred), "--workers", "1"]
    missing = tmp_path / "missing" / "dir"
    cases = [
        (["eval", *inputs, "--gold", str(db_root)], f"guarded-sqlite eval: error: {db_root}: is a directory"),
        (
            ["eval", *inputs, "--gold", str(gold), "--json", str(missing / "out.json")],
            f"guarded-sqlite eval: error: --json {missing / 'out.json'}: folder {missing} does not exist",
        ),
        (
            ["demo", "--db", str(missing / "shop.db")],
            f"guarded-sqlite demo: error: --db {missing / 'shop.db'}: folder {missing} does not exist",
        ),
    ]
    script = Path(sys.executable).with_name("guarded-sqlite")  # the installed command, as the repro runs it
    command = [str(script)] if script.exists() else [sys.executable, "-m", "guarded_sqlite"]
    for argv, expected in cases:
        done = subprocess.run([*command, *argv], capture_output=True, text=True, timeout=120)
        assert "Traceback" not in done.stderr
        assert done.returncode == 2, done.stderr
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(expected), done.stderr


def _run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``(exit status, stderr)`` of ``guarded-sqlite argv`` run in this process."""
    code = main(argv)
    return code, capsys.readouterr().err


@pytest.fixture
def no_run(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records (and refuses) any evaluation or sweep run, to show a check came before it."""
    runs: list[str] = []

    def refuse(*args: object, **kwargs: object) -> None:
        runs.append("run")
        raise AssertionError("the run started despite an unusable output path")

    monkeypatch.setattr("guarded_sqlite.evaluation.evaluate", refuse)
    monkeypatch.setattr(thresholds, "run", refuse)
    return runs


@pytest.mark.parametrize(("command", "option"), [("eval", "--json"), ("sweep", "--json"), ("sweep", "--plot")])
def test_p14_output_paths_are_checked_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_run: list[str], command: str, option: str
) -> None:
    """p14: ``--json`` (eval, sweep) and ``--plot`` (sweep) into a missing folder, onto a directory, or
    under a file used as a folder, stop with one error line and exit 2 before anything runs."""
    db_root, gold, pred = make_eval_inputs(tmp_path)
    argv = [command, "--db-root", str(db_root), "--gold", str(gold), "--pred", str(pred), "--workers", "1"]
    bad = {
        tmp_path / "nowhere" / "out": f"folder {tmp_path / 'nowhere'} does not exist",
        tmp_path: "is a directory",
        gold / "out": f"{gold} is not a directory",
    }
    for path, reason in bad.items():
        code, err = _run_main([*argv, option, str(path)], capsys)
        assert code == 2
        assert err == f"guarded-sqlite {command}: error: {option} {path}: {reason}\n"
    assert no_run == []


def test_p14_unreadable_inputs_are_input_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """p14: a directory given as --pred or --candidates is an error line with exit 2, as --gold is."""
    db_root, gold, pred = make_eval_inputs(tmp_path)
    argv = ["eval", "--db-root", str(db_root), "--gold", str(gold), "--workers", "1"]
    for extra in (["--pred", str(tmp_path)], ["--pred", str(pred), "--candidates", str(tmp_path)]):
        code, err = _run_main([*argv, *extra], capsys)
        assert (code, err) == (2, f"guarded-sqlite eval: error: {tmp_path}: is a directory, not a file\n")


def test_p14_demo_refuses_a_directory_and_a_special_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """p14: ``demo --db DIR`` and ``demo --db FIFO`` (a special file such as /dev/null or a FIFO, which
    the demo would delete to create its database) are refused with an error line and exit 2, and the
    FIFO is still there afterwards."""
    code, err = _run_main(["demo", "--db", str(tmp_path)], capsys)
    assert (code, err) == (2, f"guarded-sqlite demo: error: --db {tmp_path}: is a directory\n")
    if not hasattr(os, "mkfifo"):
        return  # no FIFOs on this platform
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code, err = _run_main(["demo", "--db", str(fifo)], capsys)
    assert (code, err) == (2, f"guarded-sqlite demo: error: --db {fifo}: not a regular file\n")
    assert fifo.exists() and not fifo.is_file()


def test_p14_a_json_report_that_cannot_be_written_after_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """p14: when the --json file cannot be written after all (the folder went away during the run),
    the report is printed, then one error line, exit 2."""
    monkeypatch.setattr(loaders, "check_output_file", lambda path, option: None)  # as if checked before
    db_root, gold, pred = make_eval_inputs(tmp_path)
    out = tmp_path / "gone" / "out.json"
    argv = ["eval", "--db-root", str(db_root), "--gold", str(gold), "--pred", str(pred), "--workers", "1"]
    code = main([*argv, "--json", str(out)])
    captured = capsys.readouterr()
    assert code == 2
    assert "Set-EX" in captured.out
    assert captured.err.startswith(f"guarded-sqlite eval: error: --json {out}: cannot be written (")
    assert len(captured.err.splitlines()) == 1


def test_p14_output_file_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """p14: output_file_problem accepts a new or existing file in a writable folder and names what is
    wrong otherwise (folder missing or a file, the path a directory, no write permission)."""
    existing = tmp_path / "report.json"
    existing.write_text("{}", encoding="utf-8")
    assert output_file_problem(tmp_path / "new.json") is None
    assert output_file_problem(existing) is None
    assert output_file_problem(tmp_path) == f"{tmp_path}: is a directory"
    assert (
        output_file_problem(tmp_path / "a" / "b.json")
        == f"{tmp_path / 'a' / 'b.json'}: folder {tmp_path / 'a'} does not exist"
    )
    assert output_file_problem(existing / "x") == f"{existing / 'x'}: {existing} is not a directory"
    # Permissions as a non-root user sees them (root may write anywhere).
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    assert output_file_problem(existing) == f"{existing}: not writable"
    assert output_file_problem(tmp_path / "new.json") == f"{tmp_path / 'new.json'}: folder {tmp_path} is not writable"


# --------------------------------------------------------------------------------------------------
# p15: a patch's INFO record shows the SQL without its literals; the full SQL is at DEBUG

SECRET = "tok_live_9f8e7d6c5b4a"
P15_SETUP = f"""
CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, api_token TEXT);
CREATE TABLE u (id INTEGER PRIMARY KEY, t_id INTEGER);
INSERT INTO t VALUES (1, 'a', '{SECRET}'), (2, 'b', 'x');
INSERT INTO u(t_id) VALUES (1), (1), (1), (1), (1);
"""
P15_SQL = f"SELECT t.name FROM t JOIN u ON u.t_id = t.id WHERE t.api_token = '{SECRET}'"


def _patch_records(caplog: pytest.LogCaptureFixture, level: int) -> tuple[list[logging.LogRecord], GuardReport]:
    """The guarded_sqlite records of one P1 patch of P15_SQL, captured at ``level``, and its report."""
    con = guarded_sqlite.connect(":memory:")
    con.executescript(P15_SETUP)
    with caplog.at_level(level, logger="guarded_sqlite"):
        cursor = con.execute(P15_SQL)
        assert cursor.fetchall() == [("a",)]
    report = cursor.guard_report
    assert report is not None and report.action == "distinct_injected" and report.provenance is not None
    con.close()
    return [record for record in caplog.records if record.name == "guarded_sqlite"], report


def test_p15_info_record_has_no_sql_literals(caplog: pytest.LogCaptureFixture) -> None:
    """p15: with the application logging at INFO, a patch's record shows the SQL before and after
    with the literal replaced by ``?`` (the secret in the WHERE clause is not logged), keeps the
    provenance verdict and evidence, and carries the same fields as ``extra``."""
    (record,), report = _patch_records(caplog, logging.INFO)
    assert record.levelno == logging.INFO
    message = record.getMessage()
    assert SECRET not in message
    before = "SELECT t.name FROM t JOIN u ON u.t_id = t.id WHERE t.api_token = ?"
    after = "SELECT DISTINCT t.name FROM t JOIN u ON u.t_id = t.id WHERE t.api_token = ?"
    assert message == (
        f"guarded_sqlite distinct_injected: {before} -> {after} "
        f"(provenance {report.provenance}: {report.provenance_evidence})"
    )
    fields = record.__dict__["guarded_sqlite"]
    assert {
        "action": "distinct_injected",
        "sql_normalised": before,
        "final_sql_normalised": after,
        "provenance": report.provenance,
        "provenance_evidence": report.provenance_evidence,
    }.items() <= fields.items()
    assert SECRET not in json.dumps(fields)  # JSON-ready, and the literal is in none of the fields


def test_p15_full_sql_is_at_debug_only(caplog: pytest.LogCaptureFixture) -> None:
    """p15: the full SQL, before and after, is in a separate DEBUG record."""
    (info, debug), _ = _patch_records(caplog, logging.DEBUG)
    assert info.levelno == logging.INFO and SECRET not in info.getMessage()
    assert debug.levelno == logging.DEBUG
    assert debug.getMessage() == (
        f"guarded_sqlite distinct_injected, full SQL: {P15_SQL} -> {P15_SQL.replace('SELECT', 'SELECT DISTINCT', 1)}"
    )
