"""Task planning and the process pool: pairs cut into per-database chunks, run by worker processes.

Every worker keeps one session per database it has seen (see ``sessions``), so a database is opened
at most once per worker. Results come back as compact records, never rows.
"""

from __future__ import annotations

import math
import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from ..policy import GuardPolicy
from .loaders import Pair
from .options import SQLITE_ENGINE, EngineSpec, SweepGrid
from .pairs import run_task
from .sessions import close_sessions
from .tasks import Task, TaskResult


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


def pool_size(workers: int, tasks: Sequence[Task]) -> int:
    """The worker processes ``execute_tasks`` uses: 1 (in-process) for one worker or one task."""
    return 1 if workers <= 1 or len(tasks) <= 1 else min(workers, len(tasks))


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
