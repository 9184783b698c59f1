"""The evaluation from inputs to report: the shared engine of ``evaluate`` and ``sweep``.

``run`` checks the options (``options``), loads and checks the inputs (``loaders``), makes or checks
the DuckDB, PostgreSQL or MySQL/MariaDB copies in this process before any worker starts (``copy``), cuts the pairs
into tasks and runs them in worker processes (``plan``; each task's pairs in ``pairs``, on the
sessions of ``sessions``, sweep replays in ``replay``), and ``summarise`` assembles the
``EvalReport`` from the workers' records.

On the other engines the queries run on the copies, and every gold and predicted query is
transpiled from SQLite first (``transpile``). Each worker opens its own connections: one read-only
DuckDB connection per database file, one PostgreSQL connection whose ``search_path`` is switched to
the database's schema for each task, with ``default_transaction_read_only`` on, or one MySQL/MariaDB
connection switched between the copies' databases, with ``SESSION TRANSACTION READ ONLY``. Each gold
query also runs on the SQLite file, and a result that differs is listed with its likely cause
(``EvalReport.gold_differences``).
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

from ..policy import GuardPolicy, GuardSpec
from . import metrics
from .loaders import PathLike, exclude_databases, load_pairs, locate_databases
from .options import (
    NO_RESCUE_OPTIONS,
    SQLITE_ENGINE,
    EngineSpec,
    RescueOptions,
    SweepGrid,
    resolve_eval_policy,
    resolve_rescue_policy,
    resolve_timeout,
    resolve_workers,
)
from .plan import execute_tasks, plan_tasks, pool_size
from .progress import ProgressBar
from .report import DatabaseCopy, EvalReport, Timings
from .tasks import TaskResult


def run(
    db_root: PathLike,
    gold: Any,
    pred: Any,
    guard: GuardSpec,
    timeout: float | None,
    workers: int | None,
    exclude_db: Iterable[str],
    progress: bool | None,
    grid: SweepGrid | None = None,
    engine: EngineSpec = SQLITE_ENGINE,
    candidates: Any = None,
    rescue: RescueOptions = NO_RESCUE_OPTIONS,
) -> tuple[EvalReport, list[TaskResult]]:
    """Load, check, copy if needed, execute and summarise: the shared engine of ``evaluate`` and ``sweep``.

    The inputs up to ``progress`` have no defaults here: ``evaluate`` and ``sweep`` pass them all, and
    their defaults are the public functions' own (``sweep``'s guard differs from ``evaluate``'s).

    ``candidates`` (a JSON file, or a list/mapping of index -> list of SQL) turns on candidate rescue,
    with ``rescue`` choosing rescuer and order.
    """
    started = time.perf_counter()
    policy = resolve_eval_policy(guard)
    policy = resolve_rescue_policy(policy, candidates, rescue)
    timeout = resolve_timeout(timeout)
    workers = resolve_workers(workers)
    if engine.name == "clickhouse":
        workers = 1  # chDB serves one folder per process and locks it: the copies are read in this one
    pairs = load_pairs(gold, pred, candidates)
    excluded = tuple(sorted(set(exclude_db)))
    pairs, excluded_pairs = exclude_databases(pairs, excluded)
    paths = locate_databases(db_root, (pair.db_id for pair in pairs))
    copies: dict[str, DatabaseCopy] = {}
    targets: dict[str, tuple[str, frozenset[str]]] | None = None
    copy_started = time.perf_counter()
    if engine.name != "sqlite":
        from .copy import prepare_copies, schema_names

        copies = prepare_copies(
            engine.name, paths, engine.pg_dsn, engine.cache_dir, engine.pg_schema_prefix, spec=engine
        )
        targets = {db_id: (copies[db_id].target, schema_names(path)) for db_id, path in paths.items()}
    copy_s = time.perf_counter() - copy_started if engine.name != "sqlite" else 0.0
    tasks = plan_tasks(pairs, paths, policy, timeout, grid, workers, engine, targets)
    used_workers = pool_size(workers, tasks)
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
    differences = sorted((d for result in results for d in result.gold_differences), key=lambda d: d.index)
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
    doubts = metrics.pairing_warnings(records)
    for doubt in doubts:
        warnings.warn(doubt, UserWarning, stacklevel=2)
    return EvalReport(
        n=len(records),
        inputs=inputs or {},
        guard=policy.preset,
        tau_inject=policy.tau_inject,
        tau_remove=policy.tau_remove,
        timeout_s=timeout,
        baseline=metrics.scores(records, "baseline"),
        guarded=metrics.scores(records, "guarded"),
        flagged=metrics.flag_counts(records),
        rules={rule: metrics.rule_stats(records, rule) for rule in metrics.RULES},
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
        tau_amplified=policy.tau_amplified if policy.preset == "text_to_sql" else None,
        provenance=metrics.verdict_stats(records, policy),
        warnings=doubts,
        gold_differences=tuple(differences),
    )
