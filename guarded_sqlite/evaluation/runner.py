"""Executing the pairs: gold once, each prediction through the library's own guard, in worker processes.

Work is grouped by database and cut into chunks; every worker process keeps one read-only connection
per database it has seen, so a database is opened at most once per worker. Per pair:

1. the gold query runs on the raw connection (once per distinct gold SQL in a chunk);
2. the prediction runs through ``guarded_sqlite.wrap(raw, guard=policy)``: its rows are what the
   guard served, and its ``guard_report`` gives trigger, action, dup_ratio and timings;
3. when the guard changed nothing, those rows *are* the baseline; only patched predictions are re-run
   raw to get the baseline rows.

Timeouts are enforced inside SQLite: a progress handler returns non-zero once the deadline passes,
which interrupts the statement (``OperationalError: interrupted``). No thread is ever abandoned.

For ``sweep`` the same pass also replays the predictions that some threshold of the grid could
change, once per threshold, through the guard with that threshold's policy.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import sqlite3
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional, Union

from ..api import wrap
from ..policy import GuardPolicy, GuardSpec
from ..probe import mentions_distinct, removal_can_commit
from ..proxy import GuardedConnection, GuardedCursor
from ..report import GuardReport
from . import metrics
from .loaders import Pair, PathLike, exclude_databases, load_pairs, locate_databases, open_read_only
from .progress import ProgressBar
from .report import EvalReport, GoldFailure, PairRecord, SweepOutcome, Timings

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
class Task:
    """A chunk of pairs on one database, executed by one worker."""

    db_path: str
    """The database file."""

    pairs: tuple[Pair, ...]
    """The pairs, with identical gold SQL kept in the same chunk so it runs once."""

    policy: GuardPolicy
    """The guard policy of the evaluation."""

    timeout: Optional[float]
    """Per-query timeout in seconds; None for none."""

    grid: Optional[SweepGrid]
    """Sweep thresholds, or None for a plain evaluation."""


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

    def arm(self, timeout: Optional[float]) -> None:
        self.at = math.inf if timeout is None else time.perf_counter() + timeout
        self.fired = False

    def disarm(self) -> None:
        self.at = math.inf


class _Run(NamedTuple):
    rows: Optional[list[Any]]
    status: str
    error: Optional[str]
    seconds: float
    report: Optional[GuardReport]


class _Session:
    """One read-only database in a worker: the raw connection, its deadline, guarded views."""

    def __init__(self, path: str) -> None:
        self.raw = open_read_only(path)
        self.deadline = _Deadline()
        self.raw.set_progress_handler(self.deadline, _PROGRESS_INSTRUCTIONS)
        self._guarded: dict[GuardPolicy, GuardedConnection] = {}

    def guarded(self, policy: GuardPolicy) -> GuardedConnection:
        con = self._guarded.get(policy)
        if con is None:
            con = self._guarded[policy] = wrap(self.raw, guard=policy)
            # Registered through the guarded connection too, so that anything the guard runs under a
            # time limit of its own puts our deadline back afterwards.
            con.set_progress_handler(self.deadline, _PROGRESS_INSTRUCTIONS)
        return con

    def run(self, con: Union[sqlite3.Connection, GuardedConnection], sql: str, timeout: Optional[float]) -> _Run:
        """Execute and fetch ``sql`` on ``con`` (raw or guarded) within the timeout."""
        if not sql.strip():
            # sqlite3 "runs" a blank statement and returns no rows, which would pass against an
            # empty gold result; no SQL is never a correct answer.
            return _Run(None, "error", "empty prediction", 0.0, None)
        cursor = con.cursor()
        started = time.perf_counter()
        self.deadline.arm(timeout)
        try:
            cursor.execute(sql)
            rows: Optional[list[Any]] = cursor.fetchall()
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

    def close(self) -> None:
        self.raw.close()


# One session per database file in this process. Worker processes keep theirs until they exit;
# an in-process run closes them when it ends.
_SESSIONS: dict[str, _Session] = {}


def _session(path: str) -> _Session:
    session = _SESSIONS.get(path)
    if session is None:
        session = _SESSIONS[path] = _Session(path)
    return session


def close_sessions() -> None:
    """Close every database this process opened for evaluation."""
    while _SESSIONS:
        _, session = _SESSIONS.popitem()
        session.close()


def _sweep_policies(grid: SweepGrid) -> tuple[dict[float, GuardPolicy], dict[float, GuardPolicy]]:
    p1 = {tau: GuardPolicy(tau_inject=max(tau, TAU_FLOOR), remove_distinct=False) for tau in grid.p1}
    p2 = {tau: GuardPolicy(tau_remove=tau, inject_distinct=False) for tau in grid.p2}
    return p1, p2


def run_task(task: Task) -> TaskResult:
    """Evaluate one chunk of pairs (runs in a worker process, or inline for ``workers=1``)."""
    session = _session(task.db_path)
    guarded = session.guarded(task.policy)
    result = TaskResult()
    gold_cache: dict[str, Union[metrics.GoldRows, _Run]] = {}
    sweep_policies = _sweep_policies(task.grid) if task.grid is not None else None
    for pair in task.pairs:
        gold = gold_cache.get(pair.gold_sql)
        if gold is None:
            executed = session.run(session.raw, pair.gold_sql, task.timeout)
            result.queries += 1
            result.gold_s += executed.seconds
            # A failed gold is cached too, so its other pairs are excluded without running it again.
            gold = gold_cache[pair.gold_sql] = metrics.GoldRows(executed.rows) if executed.rows is not None else executed
        if isinstance(gold, _Run):
            reason = gold.error or "failed"
            result.gold_failures.append(GoldFailure(pair.index, pair.db_id, gold.status, reason, pair.gold_sql))
            continue

        served = session.run(guarded, pair.pred_sql, task.timeout)
        result.queries += 1
        result.pred_s += served.seconds
        report = served.report
        baseline_rows = served.rows
        guarded_verdicts = (False, False)
        baseline_verdicts = (False, False)
        if served.rows is not None:
            guarded_verdicts = baseline_verdicts = gold.verdicts(served.rows)
            if report is not None and report.action != "none":
                # The guard served rewritten rows; the baseline is what raw SQLite returns.
                raw = session.run(session.raw, pair.pred_sql, task.timeout)
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
        )
        result.records.append(record)
        if sweep_policies is not None and task.grid is not None and served.rows is not None:
            _replay_for_sweep(session, task, pair, record, gold, sweep_policies, result)
    return result


def _row_count(report: Optional[GuardReport], rows: Optional[list[Any]]) -> Optional[int]:
    """Rows of the original result: the guard's count when it probed, else the baseline's length."""
    if report is not None and report.rows is not None:
        return report.rows
    return None if rows is None else len(rows)


def _replay_for_sweep(
    session: _Session,
    task: Task,
    pair: Pair,
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
            replay = session.run(session.guarded(table[tau]), pair.pred_sql, task.timeout)
            result.replays += 1
            if replay.rows is None or replay.report is None or replay.report.action != action:
                continue
            new_set, new_multiset = gold.verdicts(replay.rows)
            result.outcomes.append(
                SweepOutcome(rule, tau, pair.index, pair.db_id, record.baseline_set, record.baseline_multiset, new_set, new_multiset)
            )


def plan_tasks(
    pairs: Sequence[Pair],
    paths: dict[str, Any],
    policy: GuardPolicy,
    timeout: Optional[float],
    grid: Optional[SweepGrid],
    workers: int,
) -> list[Task]:
    """Cut the pairs into per-database chunks, largest first (so the pool finishes evenly).

    Chunks are small enough for a few per worker and a smooth progress bar, and pairs sharing a gold
    SQL stay together so each gold query runs once.
    """
    chunk = max(8, min(64, math.ceil(len(pairs) / max(1, workers * 4))))
    by_db: dict[str, dict[str, list[Pair]]] = {}
    for pair in pairs:
        by_db.setdefault(pair.db_id, {}).setdefault(pair.gold_sql, []).append(pair)
    tasks = []
    for db_id, groups in by_db.items():
        current: list[Pair] = []
        for same_gold in groups.values():
            if current and len(current) + len(same_gold) > chunk:
                tasks.append(Task(str(paths[db_id]), tuple(current), policy, timeout, grid))
                current = []
            current.extend(same_gold)
        if current:
            tasks.append(Task(str(paths[db_id]), tuple(current), policy, timeout, grid))
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


def resolve_workers(workers: Optional[int]) -> int:
    """``workers`` or, when None, the number of CPUs."""
    if workers is None:
        return os.cpu_count() or 1
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int, not {workers!r}")
    return workers


def resolve_timeout(timeout: Optional[float]) -> Optional[float]:
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
    timeout: Optional[float] = 5.0,
    workers: Optional[int] = None,
    exclude_db: Iterable[str] = (),
    progress: Optional[bool] = None,
    grid: Optional[SweepGrid] = None,
) -> tuple[EvalReport, list[TaskResult]]:
    """Load, check, execute and summarise: the shared engine of ``evaluate`` and ``sweep``."""
    started = time.perf_counter()
    policy = resolve_eval_policy(guard)
    timeout = resolve_timeout(timeout)
    workers = resolve_workers(workers)
    pairs = load_pairs(gold, pred)
    excluded = tuple(sorted(set(exclude_db)))
    pairs, excluded_pairs = exclude_databases(pairs, excluded)
    paths = locate_databases(db_root, (pair.db_id for pair in pairs))
    tasks = plan_tasks(pairs, paths, policy, timeout, grid, workers)
    used_workers = 1 if workers <= 1 or len(tasks) <= 1 else min(workers, len(tasks))
    bar = ProgressBar(len(pairs), label="sweep" if grid is not None else "eval", stream=sys.stderr, enabled=progress)
    try:
        results = execute_tasks(tasks, used_workers, bar.advance)
    finally:
        bar.close()
    inputs = {"db_root": str(db_root), "gold": _describe_input(gold), "pred": _describe_input(pred)}
    report = summarise(results, policy, timeout, excluded, excluded_pairs, used_workers, time.perf_counter() - started, inputs)
    return report, results


def _describe_input(value: Any) -> Optional[str]:
    return str(value) if isinstance(value, (str, os.PathLike)) else None


def summarise(
    results: Sequence[TaskResult],
    policy: GuardPolicy,
    timeout: Optional[float],
    excluded_db_ids: tuple[str, ...],
    excluded_pairs: int,
    workers: int,
    wall_s: float,
    inputs: Optional[dict[str, Optional[str]]] = None,
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
    )
