"""Executing the pairs: gold once, each prediction through the library's own guard, in worker processes.

Work is grouped by database and cut into chunks; every worker process keeps one read-only connection
per database it has seen, so a database is opened at most once per worker. Per pair:

1. the gold query runs on the raw connection (once per distinct gold SQL in a chunk);
2. the prediction runs through ``guarded_sqlite.wrap(raw, guard=policy)``: its rows are what the
   guard served, and its ``guard_report`` gives trigger, action, dup_ratio and timings;
3. when the guard changed nothing, those rows *are* the baseline; only patched predictions are re-run
   raw to get the baseline rows.

Timeouts are enforced by the engine, never by abandoning a thread. SQLite: a progress handler
returns non-zero once the deadline passes, which interrupts the statement (``OperationalError:
interrupted``). DuckDB: a watchdog thread calls the connection's ``interrupt()``. PostgreSQL: the session's
``statement_timeout``, which the server enforces on every statement, the guard's own re-runs included.
One gap: on DuckDB the guard re-runs a patched query on a duplicate cursor of the connection
(``engines.DuckDBEngine.read_only_fetch``, without a time limit for patches), and ``interrupt()`` on the
connection does not reach it; such a re-run, of a query that just finished within the limit, is not
bounded by the timeout.

On DuckDB and PostgreSQL the queries run on copies of the SQLite databases (``copy``), made or
checked in this process before any worker starts, and every gold and predicted query is transpiled
from SQLite first (``transpile``). Each worker opens its own connections: one read-only DuckDB
connection per database file, or one PostgreSQL connection whose ``search_path`` is switched to the
database's schema for each chunk, with ``default_transaction_read_only`` on.

For ``sweep`` the same pass also replays the predictions that some threshold of the grid could
change, once per threshold, through the guard with that threshold's policy.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
import re
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..api import wrap
from ..policy import GuardPolicy, GuardSpec
from ..probe import mentions_distinct, removal_can_commit
from ..proxy import GuardedConnection, GuardedCursor
from ..report import GuardReport
from . import metrics
from .copy import DEFAULT_PG_SCHEMA_PREFIX
from .loaders import InputError, Pair, PathLike, exclude_databases, load_pairs, locate_databases, open_read_only
from .progress import ProgressBar
from .report import DatabaseCopy, EvalReport, GoldFailure, PairRecord, SweepOutcome, Timings

ENGINES = ("sqlite", "duckdb", "postgres")
"""Where ``evaluate`` can run the queries: the SQLite files, or their DuckDB or PostgreSQL copies."""

TAU_FLOOR = 1e-9
"""``GuardPolicy`` needs ``tau_inject > 0``; a grid's 0.00 runs as this, which flags every result
with at least one duplicate row. Results without duplicates cannot change under DISTINCT anyway."""

# The progress handler runs every this many SQLite VM instructions: often enough to stop within a
# millisecond or so of the deadline, rarely enough to cost nothing measurable.
_PROGRESS_INSTRUCTIONS = 1000


@dataclass(frozen=True)
class SweepGrid:
    """The thresholds a sweep replays predictions at."""

    p1: tuple[float, ...]
    """``tau_inject`` values for P1 (DISTINCT injection), each run with P2 off."""

    p2: tuple[float, ...]
    """``tau_remove`` values for P2 (DISTINCT removal), each run with P1 off."""


@dataclass(frozen=True)
class EngineSpec:
    """The engine an evaluation runs on and how to reach it."""

    name: str = "sqlite"
    """``"sqlite"``, ``"duckdb"`` or ``"postgres"``."""

    pg_dsn: str | None = None
    """PostgreSQL: the libpq connection string or URI of the server holding the copies."""

    cache_dir: str | None = None
    """DuckDB: the folder of the ``.duckdb`` copies (None: ``copy.default_cache_dir()``)."""

    pg_schema_prefix: str = DEFAULT_PG_SCHEMA_PREFIX
    """PostgreSQL: a database's copy lives in schema ``<prefix><db_id>``."""


SQLITE_ENGINE = EngineSpec()


def resolve_engine(
    engine: str = "sqlite",
    pg_dsn: str | None = None,
    cache_dir: PathLike | None = None,
    pg_schema_prefix: str = DEFAULT_PG_SCHEMA_PREFIX,
) -> EngineSpec:
    """Check the engine options (``InputError`` for unusable ones)."""
    name = engine.lower() if isinstance(engine, str) else engine
    if name == "postgresql":
        name = "postgres"
    if name not in ENGINES:
        raise InputError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if name == "postgres" and not pg_dsn:
        raise InputError("engine 'postgres' needs a PostgreSQL connection string (--pg-dsn / pg_dsn=)")
    if name != "postgres" and pg_dsn:
        raise InputError("--pg-dsn / pg_dsn= is only used with engine 'postgres'")
    if name != "duckdb" and cache_dir is not None:
        raise InputError("--cache-dir / cache_dir= is only used with engine 'duckdb'")
    return EngineSpec(name, pg_dsn or None, None if cache_dir is None else str(cache_dir), pg_schema_prefix)


@dataclass(frozen=True)
class Task:
    """A chunk of pairs on one database, executed by one worker."""

    db_path: str
    """The SQLite database file."""

    pairs: tuple[Pair, ...]
    """The pairs, with identical gold SQL kept in the same chunk so it runs once."""

    policy: GuardPolicy
    """The guard policy of the evaluation."""

    timeout: float | None
    """Per-query timeout in seconds; None for none."""

    grid: SweepGrid | None
    """Sweep thresholds, or None for a plain evaluation."""

    engine: EngineSpec = SQLITE_ENGINE
    """The engine the queries run on."""

    target: str | None = None
    """DuckDB: the copy's file; PostgreSQL: the copy's schema; None on SQLite."""

    names: frozenset[str] = frozenset()
    """The database's table and column names, for transpiling (SQLite's double-quoted strings)."""


@dataclass
class TaskResult:
    """What a worker sends back for one task: compact records, never rows."""

    records: list[PairRecord] = field(default_factory=list)
    gold_failures: list[GoldFailure] = field(default_factory=list)
    outcomes: list[SweepOutcome] = field(default_factory=list)
    p1_candidates: int = 0
    p2_candidates: int = 0
    replays: int = 0
    queries: int = 0
    gold_s: float = 0.0
    pred_s: float = 0.0
    rerun_s: float = 0.0
    transpile_s: float = 0.0
    candidates_dropped: int = 0


class _Deadline:
    """SQLite progress handler: returns 1 (abort) once the armed deadline has passed."""

    __slots__ = ("at", "fired")

    def __init__(self) -> None:
        self.at = math.inf
        self.fired = False

    def __call__(self) -> int:
        if time.perf_counter() > self.at:
            self.fired = True
            return 1
        return 0

    def arm(self, timeout: float | None) -> None:
        self.at = math.inf if timeout is None else time.perf_counter() + timeout
        self.fired = False

    def disarm(self) -> None:
        self.at = math.inf


class _Run(NamedTuple):
    rows: list[Any] | None
    status: str
    error: str | None
    seconds: float
    report: GuardReport | None
    transpile_failed: bool = False


_EMPTY_PREDICTION = _Run(None, "error", "empty prediction", 0.0, None)
# sqlite3 "runs" a blank statement and returns no rows, which would pass against an empty gold
# result; no SQL is never a correct answer.


class _Session:
    """One connection in a worker: the raw connection, guarded views of it, and timed execution."""

    raw: Any

    def __init__(self) -> None:
        self._guarded: dict[GuardPolicy, Any] = {}
        self._unhashable: list[tuple[GuardPolicy, Any]] = []  # policies whose rescuer is unhashable (LLMRescue)

    def enter(self, task: Task) -> None:
        """Prepare the connection for a task's database (PostgreSQL switches schema)."""

    def guarded(self, policy: GuardPolicy) -> Any:
        try:
            con = self._guarded.get(policy)
        except TypeError:
            for known, con in self._unhashable:
                if known == policy:
                    return con
            con = self._wrap(policy)
            self._unhashable.append((policy, con))
            return con
        if con is None:
            con = self._guarded[policy] = self._wrap(policy)
        return con

    def _wrap(self, policy: GuardPolicy) -> Any:
        return wrap(self.raw, guard=policy)

    def run(self, con: Any, sql: str, timeout: float | None, rescue: dict[str, Any] | None = None) -> _Run:
        """Execute and fetch ``sql`` on ``con`` (raw or guarded) within the timeout; ``rescue``: the
        ``candidates``/``question``/``hint`` keywords for a guarded ``execute``."""
        raise NotImplementedError

    def close(self) -> None:
        self.raw.close()


class _SQLiteSession(_Session):
    """One read-only SQLite database; a progress handler enforces the deadline."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.raw = open_read_only(path)
        self.deadline = _Deadline()
        self.raw.set_progress_handler(self.deadline, _PROGRESS_INSTRUCTIONS)

    def _wrap(self, policy: GuardPolicy) -> GuardedConnection:
        con = wrap(self.raw, guard=policy)
        # Registered through the guarded connection too, so that anything the guard runs under a
        # time limit of its own puts our deadline back afterwards.
        con.set_progress_handler(self.deadline, _PROGRESS_INSTRUCTIONS)
        return con

    def run(
        self,
        con: sqlite3.Connection | GuardedConnection,
        sql: str,
        timeout: float | None,
        rescue: dict[str, Any] | None = None,
    ) -> _Run:
        if not sql.strip():
            return _EMPTY_PREDICTION
        cursor = con.cursor()
        started = time.perf_counter()
        self.deadline.arm(timeout)
        try:
            cursor.execute(sql, **(rescue or {}))
            rows: list[Any] | None = cursor.fetchall()
            status, error = "ok", None
        except Exception as exc:  # any failure of predicted SQL scores 0; it must not stop the run
            rows = None
            if self.deadline.fired:
                status, error = "timeout", f"interrupted at the {timeout:g} s timeout"
            else:
                status, error = "error", f"{type(exc).__name__}: {exc}"
        finally:
            self.deadline.disarm()
        seconds = time.perf_counter() - started
        report = cursor.guard_report if isinstance(cursor, GuardedCursor) else None
        cursor.close()
        if self.raw.in_transaction:  # a predicted BEGIN must not leak into the next query
            self.raw.rollback()
        return _Run(rows, status, error, seconds, report)


_MENTIONS_TRANSACTION = re.compile(r"\b(begin|transaction)\b", re.IGNORECASE)


class _Watchdog:
    """A thread that calls ``interrupt()`` once an armed deadline passes.

    One long-lived thread per connection. Starting a ``threading.Timer`` per query would cost about
    as much as a small DuckDB query, and so would waking this thread on every ``arm``: instead it
    keeps sleeping until its planned wake-up, which is never later than the current deadline, and
    is notified only when a deadline is earlier than that (the first query, a shorter timeout).
    While nothing is armed it wakes once per timeout period. The lock makes ``disarm`` final: once it
    returns, that query can no longer be interrupted (an interrupt that lands between statements is
    ignored by DuckDB).
    """

    def __init__(self, interrupt: Callable[[], None]) -> None:
        self._interrupt = interrupt
        self._condition = threading.Condition()
        self._deadline: float | None = None
        self._period: float | None = None
        self._wake_at: float | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        self.fired = False

    def arm(self, timeout: float | None) -> None:
        with self._condition:
            self.fired = False
            if timeout is None:
                return
            deadline = time.monotonic() + timeout
            self._deadline, self._period = deadline, timeout
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="guarded-sqlite-eval-timeout", daemon=True)
                self._thread.start()
            elif self._wake_at is None or deadline < self._wake_at:
                self._condition.notify()

    def disarm(self) -> None:
        with self._condition:
            self._deadline = None

    def close(self) -> None:
        with self._condition:
            self._closed = True
            self._condition.notify()
        if self._thread is not None:
            self._thread.join()

    def _watch(self) -> None:
        with self._condition:
            while not self._closed:
                now = time.monotonic()
                deadline = self._deadline
                if deadline is not None and now >= deadline:
                    self._deadline = None
                    self.fired = True
                    self._interrupt()
                    continue
                if deadline is not None:
                    self._wake_at = deadline
                elif self._period is not None:
                    self._wake_at = now + self._period
                else:
                    self._wake_at = None
                self._condition.wait(None if self._wake_at is None else self._wake_at - now)


class _DuckDBSession(_Session):
    """One DuckDB copy, opened read-only; a watchdog thread calls ``interrupt()`` at the deadline.

    The connection runs one thread: the pool's processes are the parallelism, and a single thread
    keeps DuckDB's row order deterministic.
    """

    def __init__(self, path: str) -> None:
        import duckdb

        super().__init__()
        self.raw = duckdb.connect(path, read_only=True, config={"threads": 1})
        self.watchdog = _Watchdog(self.raw.interrupt)

    def run(self, con: Any, sql: str, timeout: float | None, rescue: dict[str, Any] | None = None) -> _Run:
        if not sql.strip():
            return _EMPTY_PREDICTION
        raw = self.raw
        started = time.perf_counter()
        self.watchdog.arm(timeout)
        try:
            con.execute(sql, **(rescue or {}))  # a guarded DuckDB connection is its own cursor, as DuckDB's is
            rows: list[Any] | None = con.fetchall()
            status, error = "ok", None
        except Exception as exc:
            rows = None
            if self.watchdog.fired:
                status, error = "timeout", f"interrupted at the {timeout:g} s timeout"
            else:
                status, error = "error", _one_line(exc)
        finally:
            self.watchdog.disarm()
        seconds = time.perf_counter() - started
        report = None if con is raw else con.guard_report
        if _MENTIONS_TRANSACTION.search(sql):
            from ..engines import DUCKDB

            if DUCKDB.in_explicit_transaction(raw):  # a predicted BEGIN must not leak
                raw.execute("ROLLBACK")
        return _Run(rows, status, error, seconds, report)

    def close(self) -> None:
        self.watchdog.close()
        self.raw.close()


class _PostgresSession(_Session):
    """One PostgreSQL connection per worker, moved between the copies' schemas.

    Autocommit, ``default_transaction_read_only = on`` and the evaluation's ``statement_timeout`` for
    the whole session: the server cancels any statement past it, the guard's re-runs included.
    """

    def __init__(self, dsn: str) -> None:
        import psycopg

        super().__init__()
        self.raw = psycopg.connect(dsn, autocommit=True)
        self.raw.execute("SET default_transaction_read_only = on")
        self._canceled = psycopg.errors.QueryCanceled
        self._schema: str | None = None
        self._timeout: Any = object()

    def enter(self, task: Task) -> None:
        if task.timeout != self._timeout:
            value = "0" if task.timeout is None else f"{max(1, round(task.timeout * 1000))}ms"
            self.raw.execute("SELECT set_config('statement_timeout', %s, false)", (value,))
            self._timeout = task.timeout
        if task.target != self._schema:
            assert task.target is not None
            self.raw.execute(
                "SELECT set_config('search_path', %s, false)", ('"' + task.target.replace('"', '""') + '"',)
            )
            self._schema = task.target

    def run(self, con: Any, sql: str, timeout: float | None, rescue: dict[str, Any] | None = None) -> _Run:
        if not sql.strip():
            return _EMPTY_PREDICTION
        from psycopg.pq import TransactionStatus

        cursor = con.cursor()
        started = time.perf_counter()
        try:
            cursor.execute(sql, **(rescue or {}))
            rows: list[Any] | None = cursor.fetchall()
            status, error = "ok", None
        except self._canceled as exc:
            rows = None
            if "statement timeout" in str(exc):
                status, error = "timeout", f"canceled at the {timeout:g} s statement_timeout"
            else:
                status, error = "error", _one_line(exc)
        except Exception as exc:
            rows, status, error = None, "error", _one_line(exc)
        seconds = time.perf_counter() - started
        report = cursor.guard_report if isinstance(cursor, GuardedCursor) else None
        cursor.close()
        if self.raw.info.transaction_status != TransactionStatus.IDLE:  # a predicted BEGIN must not leak
            self.raw.rollback()
        return _Run(rows, status, error, seconds, report)


def _one_line(error: BaseException) -> str:
    """``"ExceptionClass: message"`` on one line (DuckDB and PostgreSQL add context lines)."""
    return f"{type(error).__name__}: {' '.join(str(error).split())}"


# One session per database (SQLite, DuckDB) or per server (PostgreSQL) in this process. Worker
# processes keep theirs until they exit; an in-process run closes them when it ends.
_SESSIONS: dict[tuple[str, str], _Session] = {}


def _session(task: Task) -> _Session:
    engine = task.engine.name
    if engine == "sqlite":
        key = (engine, task.db_path)
    elif engine == "duckdb":
        key = (engine, str(task.target))
    else:
        key = (engine, str(task.engine.pg_dsn))
    session = _SESSIONS.get(key)
    if session is None:
        if engine == "sqlite":
            session = _SQLiteSession(task.db_path)
        elif engine == "duckdb":
            session = _DuckDBSession(str(task.target))
        else:
            session = _PostgresSession(str(task.engine.pg_dsn))
        _SESSIONS[key] = session
    session.enter(task)
    return session


def close_sessions() -> None:
    """Close every database connection this process opened for evaluation."""
    while _SESSIONS:
        _, session = _SESSIONS.popitem()
        session.close()


class _Prepared(NamedTuple):
    """A query ready for the engine, or why it is not."""

    sql: str | None
    failure: _Run | None


class _Transpiler:
    """Transpiles a task's queries for its engine (identity on SQLite), timing the work."""

    def __init__(self, task: Task, result: TaskResult) -> None:
        self.engine = task.engine.name
        self.names = task.names
        self.result = result

    def __call__(self, sql: str) -> _Prepared:
        if self.engine == "sqlite" or not sql.strip():
            return _Prepared(sql, None)
        from .transpile import NotOneStatement, TranspileError, transpile

        started = time.perf_counter()
        try:
            return _Prepared(transpile(sql, self.engine, self.names), None)
        except TranspileError as error:
            return _Prepared(None, _Run(None, "error", f"TranspileError: {error}", 0.0, None, True))
        except NotOneStatement as error:
            return _Prepared(None, _Run(None, "error", f"NotOneStatement: {error}", 0.0, None))
        finally:
            self.result.transpile_s += time.perf_counter() - started


def _sweep_policies(grid: SweepGrid) -> tuple[dict[float, GuardPolicy], dict[float, GuardPolicy]]:
    p1 = {tau: GuardPolicy(tau_inject=max(tau, TAU_FLOOR), remove_distinct=False) for tau in grid.p1}
    p2 = {tau: GuardPolicy(tau_remove=tau, inject_distinct=False) for tau in grid.p2}
    return p1, p2


def run_task(task: Task) -> TaskResult:
    """Evaluate one chunk of pairs (runs in a worker process, or inline for ``workers=1``)."""
    session = _session(task)
    guarded = session.guarded(task.policy)
    result = TaskResult()
    prepare = _Transpiler(task, result)
    on_sqlite = task.engine.name == "sqlite"
    gold_cache: dict[str, metrics.GoldRows | _Run] = {}
    sweep_policies = _sweep_policies(task.grid) if task.grid is not None else None
    for pair in task.pairs:
        gold = gold_cache.get(pair.gold_sql)
        if gold is None:
            gold_sql = prepare(pair.gold_sql)
            if gold_sql.sql is None:
                assert gold_sql.failure is not None
                executed = gold_sql.failure
            else:
                executed = session.run(session.raw, gold_sql.sql, task.timeout)
                result.queries += 1
                result.gold_s += executed.seconds
            # A failed gold is cached too, so its other pairs are excluded without running it again.
            gold = gold_cache[pair.gold_sql] = (
                metrics.GoldRows(executed.rows) if executed.rows is not None else executed
            )
        if isinstance(gold, _Run):
            reason = gold.error or "failed"
            result.gold_failures.append(
                GoldFailure(pair.index, pair.db_id, gold.status, reason, pair.gold_sql, gold.transpile_failed)
            )
            continue

        pred = prepare(pair.pred_sql)
        engine_sql = pred.sql
        # Candidates go through the same transpile path; one that fails is dropped (and counted).
        candidate_sqls: list[str] = []
        candidate_origin: list[int] = []
        for position, candidate in enumerate(pair.candidates):
            prepared = prepare(candidate) if candidate.strip() else _Prepared(candidate, None)
            if prepared.sql is None:
                result.candidates_dropped += 1
                continue
            candidate_sqls.append(prepared.sql)
            candidate_origin.append(position)
        rescue_kwargs = (
            {"candidates": candidate_sqls, "question": pair.question, "hint": pair.hint} if candidate_sqls else None
        )
        if engine_sql is None:
            assert pred.failure is not None
            served = pred.failure
        else:
            served = session.run(guarded, engine_sql, task.timeout, rescue_kwargs)
            result.queries += 1
            result.pred_s += served.seconds
        report = served.report
        baseline_rows = served.rows
        guarded_verdicts = (False, False)
        baseline_verdicts = (False, False)
        if served.rows is not None:
            guarded_verdicts = baseline_verdicts = gold.verdicts(served.rows)
            if report is not None and report.action != "none":
                # The guard served rewritten rows; the baseline is what the raw engine returns.
                assert engine_sql is not None
                raw = session.run(session.raw, engine_sql, task.timeout)
                result.queries += 1
                result.rerun_s += raw.seconds
                baseline_rows = raw.rows
                baseline_verdicts = gold.verdicts(raw.rows) if raw.rows is not None else (False, False)
        record = PairRecord(
            index=pair.index,
            db_id=pair.db_id,
            difficulty=pair.difficulty,
            pred_sql=pair.pred_sql,
            status=served.status,
            error=served.error,
            trigger=report.trigger if report is not None else None,
            action=report.action if report is not None else "none",
            final_sql=report.final_sql if report is not None else pair.pred_sql,
            rows=_row_count(report, baseline_rows),
            unique_rows=report.unique_rows if report is not None else None,
            dup_ratio=None if report is None or report.dup_ratio is None else round(report.dup_ratio, 6),
            gold_rows=len(gold.rows),
            baseline_set=baseline_verdicts[0],
            baseline_multiset=baseline_verdicts[1],
            guarded_set=guarded_verdicts[0],
            guarded_multiset=guarded_verdicts[1],
            exec_ms=round(served.seconds * 1000, 4),
            detect_us=None if report is None or report.detect_us is None else round(report.detect_us, 3),
            patch_ms=None if report is None or report.patch_ms is None else round(report.patch_ms, 4),
            engine_sql=None if on_sqlite else engine_sql,
            transpile_failed=served.transpile_failed,
            candidates=len(candidate_sqls),
            **_rescue_fields(report, candidate_origin),
        )
        result.records.append(record)
        if sweep_policies is not None and task.grid is not None and served.rows is not None and engine_sql is not None:
            _replay_for_sweep(session, task, pair, engine_sql, record, gold, sweep_policies, result)
    return result


def _rescue_fields(report: GuardReport | None, origin: Sequence[int]) -> dict[str, Any]:
    """The ``PairRecord`` rescue fields from the guard's report; indexes mapped back to the file's list."""
    rescue = None if report is None else report.rescue
    if rescue is None:
        return {}
    cost = rescue.cost_usd
    if cost is None and rescue.rescuer == "DupRatioSelector":
        cost = 0.0  # no model, nothing spent
    return {
        "rescue_ran": True,
        "rescue_chosen_index": None if rescue.chosen_index is None else origin[rescue.chosen_index],
        "rescue_fallback": (rescue.fallback_reason or "no reason given") if rescue.chosen_index is None else None,
        "rescue_latency_ms": round(rescue.latency_ms, 4),
        "rescue_prompt_tokens": rescue.prompt_tokens,
        "rescue_completion_tokens": rescue.completion_tokens,
        "rescue_cost_usd": cost,
    }


def _row_count(report: GuardReport | None, rows: list[Any] | None) -> int | None:
    """Rows of the original result: the guard's count when it probed, else the baseline's length."""
    if report is not None and report.rows is not None:
        return report.rows
    return None if rows is None else len(rows)


def _replay_for_sweep(
    session: _Session,
    task: Task,
    pair: Pair,
    engine_sql: str,
    record: PairRecord,
    gold: metrics.GoldRows,
    policies: tuple[dict[float, GuardPolicy], dict[float, GuardPolicy]],
    result: TaskResult,
) -> None:
    """Replay one prediction at each threshold that could change it, through the guard."""
    rows, unique = record.rows, record.unique_rows
    if not rows or unique is None:
        return  # failed, empty or not probed: neither rule can apply
    p1_policies, p2_policies = policies
    duplicates = rows - unique
    # P1 can only fire where the probe flags the result, i.e. rows - unique >= tau * rows; the
    # slack keeps float rounding from skipping a boundary case (the guard itself decides).
    p1_taus = [tau for tau in p1_policies if duplicates > 0 and duplicates >= tau * rows - 1e-9 * rows]
    # P2 needs an outermost DISTINCT (so the word in the SQL and no duplicate in the result) and a
    # result large enough that one extra row keeps dup_ratio <= tau_remove.
    p2_taus = []
    if duplicates == 0 and mentions_distinct(pair.pred_sql):
        p2_taus = [tau for tau in p2_policies if removal_can_commit(rows, tau)]
    result.p1_candidates += bool(p1_taus)
    result.p2_candidates += bool(p2_taus)
    for rule, taus, table, action in (
        ("P1", p1_taus, p1_policies, "distinct_injected"),
        ("P2", p2_taus, p2_policies, "distinct_removed"),
    ):
        for tau in taus:
            replay = session.run(session.guarded(table[tau]), engine_sql, task.timeout)
            result.replays += 1
            if replay.rows is None or replay.report is None or replay.report.action != action:
                continue
            new_set, new_multiset = gold.verdicts(replay.rows)
            result.outcomes.append(
                SweepOutcome(
                    rule,
                    tau,
                    pair.index,
                    pair.db_id,
                    record.baseline_set,
                    record.baseline_multiset,
                    new_set,
                    new_multiset,
                )
            )


def plan_tasks(
    pairs: Sequence[Pair],
    paths: dict[str, Any],
    policy: GuardPolicy,
    timeout: float | None,
    grid: SweepGrid | None,
    workers: int,
    engine: EngineSpec = SQLITE_ENGINE,
    targets: dict[str, tuple[str, frozenset[str]]] | None = None,
) -> list[Task]:
    """Cut the pairs into per-database chunks, largest first (so the pool finishes evenly).

    Chunks are small enough for a few per worker and a smooth progress bar, and pairs sharing a gold
    SQL stay together so each gold query runs once. ``targets``: for DuckDB and PostgreSQL, each
    database's copy (file or schema) and its table and column names.
    """

    def task(db_id: str, chunk_pairs: list[Pair]) -> Task:
        target, names = (targets or {}).get(db_id, (None, frozenset()))
        return Task(str(paths[db_id]), tuple(chunk_pairs), policy, timeout, grid, engine, target, names)

    chunk = max(8, min(64, math.ceil(len(pairs) / max(1, workers * 4))))
    by_db: dict[str, dict[str, list[Pair]]] = {}
    for pair in pairs:
        by_db.setdefault(pair.db_id, {}).setdefault(pair.gold_sql, []).append(pair)
    tasks = []
    for db_id, groups in by_db.items():
        current: list[Pair] = []
        for same_gold in groups.values():
            if current and len(current) + len(same_gold) > chunk:
                tasks.append(task(db_id, current))
                current = []
            current.extend(same_gold)
        if current:
            tasks.append(task(db_id, current))
    tasks.sort(key=lambda task: len(task.pairs), reverse=True)
    return tasks


def _start_method() -> str:
    # forkserver (Linux's default from Python 3.14) starts workers from a clean single-threaded
    # server: fork's speed without forking whatever threads the caller runs. Elsewhere, spawn.
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def execute_tasks(tasks: Sequence[Task], workers: int, on_done: Callable[[int], None]) -> list[TaskResult]:
    """Run the tasks in ``workers`` processes (inline for one), calling ``on_done(pairs)`` as they end."""
    results: list[TaskResult] = []
    if workers <= 1 or len(tasks) <= 1:
        try:
            for task in tasks:
                results.append(run_task(task))
                on_done(len(task.pairs))
        finally:
            close_sessions()
        return results
    context = multiprocessing.get_context(_start_method())
    pool = ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=context)
    try:
        pending: set[Future[TaskResult]] = set()
        sizes: dict[Future[TaskResult], int] = {}
        for task in tasks:
            future = pool.submit(run_task, task)
            pending.add(future)
            sizes[future] = len(task.pairs)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                results.append(future.result())
                on_done(sizes[future])
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return results


def resolve_eval_policy(guard: GuardSpec) -> GuardPolicy:
    """The policy of the guarded replay: ``"patch"`` (default), ``"observe"`` or a ``GuardPolicy``."""
    policy = GuardPolicy(mode=guard) if isinstance(guard, str) else guard
    if policy is None:
        policy = GuardPolicy()
    if not isinstance(policy, GuardPolicy):
        raise TypeError(f"guard must be 'patch', 'observe' or a GuardPolicy, not {type(guard).__name__}")
    if policy.mode == "off":
        raise ValueError("guard='off' does not probe anything: evaluate with 'patch' or 'observe'")
    return policy


RESCUERS = ("dup_ratio", "llm")
"""``rescue=`` names: ``DupRatioSelector()`` or ``LLMRescue(...)`` built from the ``llm_*`` options."""


def resolve_rescue_policy(
    policy: GuardPolicy,
    candidates: Any,
    rescue: Any = None,
    order: str | None = None,
    llm_model: str | None = None,
    llm_api_base: str | None = None,
    llm_api_key: str | None = None,
    llm_timeout: float | None = None,
) -> GuardPolicy:
    """The policy with the evaluation's rescuer and order (``InputError`` for unusable options).

    ``rescue``: ``"dup_ratio"`` (default), ``"llm"`` (``LLMRescue(llm_model, ...)``; the key defaults to
    ``$OPENAI_API_KEY``) or a rescuer object/callable. Without ``candidates`` the options do nothing,
    so giving them is refused as a likely mistake.
    """
    llm_given = any(value is not None for value in (llm_model, llm_api_base, llm_api_key, llm_timeout))
    if candidates is None:
        if rescue is not None or order is not None or llm_given:
            raise InputError(
                "--rescue/--order/--llm-* (rescue=/order=/llm_*=) only apply with --candidates (candidates=)"
            )
        return policy
    order = "rescue_first" if order is None else order
    if order not in ("rescue_first", "patch_first"):
        raise InputError(f"order must be 'rescue_first' or 'patch_first', not {order!r}")
    if rescue is None:
        rescue = "dup_ratio"
    if isinstance(rescue, str):
        if rescue not in RESCUERS:
            raise InputError(f"rescue must be one of {', '.join(RESCUERS)} or a rescuer, not {rescue!r}")
        if rescue == "dup_ratio":
            if llm_given:
                raise InputError("--llm-* (llm_*=) options need --rescue llm (rescue='llm')")
            from ..rescue import DupRatioSelector

            rescuer: Any = DupRatioSelector()
        else:
            if not llm_model:
                raise InputError("--rescue llm needs --llm-model (llm_model=), e.g. 'openai/gpt-4o-mini'")
            if llm_timeout is not None and not llm_timeout > 0:
                raise InputError(f"llm timeout must be positive, not {llm_timeout!r}")
            from ..rescue import LLMRescue

            key = llm_api_key if llm_api_key is not None else os.environ.get("OPENAI_API_KEY")
            rescuer = LLMRescue(
                model=llm_model,
                api_base=llm_api_base,
                api_key=key,
                timeout=10.0 if llm_timeout is None else float(llm_timeout),
            )
    else:
        if llm_given:
            raise InputError("llm_*= options only apply with rescue='llm'; configure your rescuer object instead")
        if not callable(rescue):
            raise InputError(f"rescue must be 'dup_ratio', 'llm' or a callable rescuer, not {type(rescue).__name__}")
        rescuer = rescue
    return dataclasses.replace(policy, rescue=rescuer, order=order)  # type: ignore[arg-type]  # checked above


def resolve_workers(workers: int | None) -> int:
    """``workers`` or, when None, the number of CPUs."""
    if workers is None:
        return os.cpu_count() or 1
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int, not {workers!r}")
    return workers


def resolve_timeout(timeout: float | None) -> float | None:
    """A positive number of seconds, or None for no timeout."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds or None, not {timeout!r}")
    return float(timeout)


def run(
    db_root: PathLike,
    gold: Any,
    pred: Any,
    guard: GuardSpec = "patch",
    timeout: float | None = 5.0,
    workers: int | None = None,
    exclude_db: Iterable[str] = (),
    progress: bool | None = None,
    grid: SweepGrid | None = None,
    engine: EngineSpec = SQLITE_ENGINE,
    candidates: Any = None,
    rescue_options: dict[str, Any] | None = None,
) -> tuple[EvalReport, list[TaskResult]]:
    """Load, check, copy if needed, execute and summarise: the shared engine of ``evaluate`` and ``sweep``.

    ``candidates`` (a JSON file, or a list/mapping of index -> list of SQL) turns on candidate rescue,
    with ``rescue_options`` (the keywords of ``resolve_rescue_policy``) choosing rescuer and order.
    """
    started = time.perf_counter()
    policy = resolve_eval_policy(guard)
    policy = resolve_rescue_policy(policy, candidates, **(rescue_options or {}))
    timeout = resolve_timeout(timeout)
    workers = resolve_workers(workers)
    pairs = load_pairs(gold, pred, candidates)
    excluded = tuple(sorted(set(exclude_db)))
    pairs, excluded_pairs = exclude_databases(pairs, excluded)
    paths = locate_databases(db_root, (pair.db_id for pair in pairs))
    copies: dict[str, DatabaseCopy] = {}
    targets: dict[str, tuple[str, frozenset[str]]] | None = None
    copy_started = time.perf_counter()
    if engine.name != "sqlite":
        from .copy import prepare_copies, schema_names

        copies = prepare_copies(engine.name, paths, engine.pg_dsn, engine.cache_dir, engine.pg_schema_prefix)
        targets = {db_id: (copies[db_id].target, schema_names(path)) for db_id, path in paths.items()}
    copy_s = time.perf_counter() - copy_started if engine.name != "sqlite" else 0.0
    tasks = plan_tasks(pairs, paths, policy, timeout, grid, workers, engine, targets)
    used_workers = 1 if workers <= 1 or len(tasks) <= 1 else min(workers, len(tasks))
    bar = ProgressBar(len(pairs), label="sweep" if grid is not None else "eval", stream=sys.stderr, enabled=progress)
    try:
        results = execute_tasks(tasks, used_workers, bar.advance)
    finally:
        bar.close()
    inputs = {"db_root": str(db_root), "gold": _describe_input(gold), "pred": _describe_input(pred)}
    if candidates is not None:
        inputs["candidates"] = _describe_input(candidates)
    report = summarise(
        results,
        policy,
        timeout,
        excluded,
        excluded_pairs,
        used_workers,
        time.perf_counter() - started,
        inputs,
        engine=engine.name,
        copies=tuple(copies[db_id] for db_id in sorted(copies)),
        copy_s=copy_s,
        with_rescue=candidates is not None,
    )
    return report, results


def _describe_input(value: Any) -> str | None:
    return str(value) if isinstance(value, (str, os.PathLike)) else None


def summarise(
    results: Sequence[TaskResult],
    policy: GuardPolicy,
    timeout: float | None,
    excluded_db_ids: tuple[str, ...],
    excluded_pairs: int,
    workers: int,
    wall_s: float,
    inputs: dict[str, str | None] | None = None,
    engine: str = "sqlite",
    copies: tuple[DatabaseCopy, ...] = (),
    copy_s: float = 0.0,
    with_rescue: bool = False,
) -> EvalReport:
    """Assemble the ``EvalReport`` from the workers' records."""
    records = sorted((r for result in results for r in result.records), key=lambda r: r.index)
    failures = sorted((f for result in results for f in result.gold_failures), key=lambda f: f.index)
    detect = [r.detect_us for r in records if r.detect_us is not None]
    patch = [r.patch_ms for r in records if r.patch_ms is not None]
    timings = Timings(
        wall_s=round(wall_s, 4),
        workers=workers,
        queries=sum(result.queries for result in results),
        gold_s=round(sum(result.gold_s for result in results), 4),
        pred_s=round(sum(result.pred_s for result in results), 4),
        rerun_s=round(sum(result.rerun_s for result in results), 4),
        detect_us_median=metrics.median(detect),
        detect_us_total=round(sum(detect), 3),
        patch_ms_median=metrics.median(patch),
        patch_ms_p90=metrics.quantile(patch, 0.9),
        patch_ms_total=round(sum(patch), 4),
        copy_s=round(copy_s, 4),
        transpile_s=round(sum(result.transpile_s for result in results), 4),
    )
    return EvalReport(
        n=len(records),
        inputs=inputs or {},
        guard=policy.mode,
        tau_inject=policy.tau_inject,
        tau_remove=policy.tau_remove,
        timeout_s=timeout,
        baseline=metrics.scores(records, "baseline"),
        guarded=metrics.scores(records, "guarded"),
        flagged=metrics.flag_counts(records),
        rules={rule: metrics.rule_stats(records, rule) for rule in ("P1", "P2")},
        detector=metrics.detector_stats(records),
        difficulty=metrics.difficulty_breakdown(records),
        timings=timings,
        gold_failures=tuple(failures),
        excluded_db_ids=excluded_db_ids,
        excluded_pairs=excluded_pairs,
        pairs=tuple(records),
        engine=engine,
        copies=copies,
        rescue=metrics.rescue_stats(records, policy, sum(result.candidates_dropped for result in results))
        if with_rescue
        else None,
    )
