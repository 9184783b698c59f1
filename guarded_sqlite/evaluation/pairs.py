"""One task's pairs, executed in a worker: gold once, each prediction through the library's own guard.

Per pair:

1. the gold query runs on the raw connection (once per distinct gold SQL in a task);
2. the prediction runs through ``guarded_sqlite.wrap(raw, guard=policy)``: its rows are what the
   guard served, and its ``guard_report`` gives trigger, action, dup_ratio and timings; the pair's
   candidates, question and hint go along to ``execute`` when there are candidates;
3. when the guard changed nothing, those rows *are* the baseline; only rewritten predictions are
   re-run raw to get the baseline rows;
4. for a sweep, ``replay`` re-runs the prediction at the thresholds that could change it.

On the other engines every gold, predicted and candidate query is transpiled from SQLite first, and
each gold query also runs on the SQLite file: a result that differs is recorded with its likely cause
(``gold_differences``), and the pair is still scored against the engine's result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._analysis.transpile import Prepared, Preparer, query_shape
from ..report import GuardReport
from . import gold_differences, metrics
from .loaders import Pair
from .options import SQLITE_ENGINE
from .records import GoldDifference, GoldFailure, PairRecord
from .replay import replay_for_sweep, sweep_policies
from .sessions import Run, open_session
from .tasks import Task, TaskResult


def run_task(task: Task) -> TaskResult:
    """Evaluate one chunk of pairs (runs in a worker process, or inline for ``workers=1``)."""
    return _TaskRun(task).run()


class _TaskRun:
    """One task's execution: its session, guarded connection, transpiler and accumulating result."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self.session = open_session(task.engine, task.db_path, task.target, task.timeout)
        self.guarded = self.session.guarded(task.policy)
        self.prepare = Preparer(task.engine.name, task.names)
        self.sweep_policies = sweep_policies(task.grid, task.policy) if task.grid is not None else None
        # Off SQLite, the SQLite file itself, to tell which gold results the engine changes.
        self.sqlite = None if task.engine.name == "sqlite" else open_session(SQLITE_ENGINE, task.db_path, None, None)
        self.result = TaskResult()

    def run(self) -> TaskResult:
        result = self.result
        gold_cache: dict[str, metrics.GoldRows | Run] = {}
        differences: dict[str, tuple[str, str, int | None, bool] | None] = {}
        try:
            for pair in self.task.pairs:
                gold = gold_cache.get(pair.gold_sql)
                if gold is None:
                    # A failed gold is cached too, so its other pairs are excluded without running it again.
                    gold = gold_cache[pair.gold_sql] = self.run_gold(pair.gold_sql)
                if isinstance(gold, Run):
                    reason = gold.error or "failed"
                    result.gold_failures.append(
                        GoldFailure(pair.index, pair.db_id, gold.status, reason, pair.gold_sql, gold.transpile_failed)
                    )
                    continue
                if self.sqlite is not None:
                    if pair.gold_sql not in differences:
                        differences[pair.gold_sql] = self.compare_with_sqlite(pair.gold_sql, gold)
                    found = differences[pair.gold_sql]
                    if found is not None:
                        category, detail, sqlite_rows, same_set = found
                        result.gold_differences.append(
                            GoldDifference(
                                pair.index,
                                pair.db_id,
                                category,
                                detail,
                                sqlite_rows,
                                len(gold.rows),
                                same_set,
                                pair.gold_sql,
                            )
                        )
                self.run_prediction(pair, gold)
        finally:
            result.transpile_s += self.prepare.seconds
        return result

    def run_gold(self, sql: str) -> metrics.GoldRows | Run:
        """The gold result, or the failed ``Run`` that excludes its pairs."""
        prepared = self.prepare(sql)
        if prepared.sql is None:
            executed = _failure(prepared)
        else:
            executed = self.session.run(self.session.raw, prepared.sql, self.task.timeout)
            self.result.queries += 1
            self.result.gold_s += executed.seconds
        return metrics.GoldRows(executed.rows) if executed.rows is not None else executed

    def compare_with_sqlite(self, sql: str, gold: metrics.GoldRows) -> tuple[str, str, int | None, bool] | None:
        """``(category, detail, SQLite's row count, same set)`` when the engine's gold result differs
        from SQLite's as a multiset; None when they agree."""
        assert self.sqlite is not None
        sqlite, timeout = self.sqlite, self.task.timeout
        on_sqlite = sqlite.run(sqlite.raw, sql, timeout)
        rows = on_sqlite.rows
        if rows is not None and not gold_differences.differs(rows, gold.rows):
            return None
        shape = unlimited = None
        if rows is not None:
            shape = query_shape(sql, self.task.names)
            if shape is not None and shape.unlimited_sql is not None:
                unlimited = sqlite.run(sqlite.raw, shape.unlimited_sql, timeout).rows
        category = gold_differences.classify(rows, gold.rows, shape, unlimited)
        detail = gold_differences.describe(rows, gold.rows, on_sqlite.error)
        return category, detail, None if rows is None else len(rows), rows is not None and set(rows) == gold.as_set

    def run_prediction(self, pair: Pair, gold: metrics.GoldRows) -> None:
        """Run one prediction guarded (and raw when the guard rewrote it), record it, replay it for a sweep."""
        session, task, result = self.session, self.task, self.result
        pred = self.prepare(pair.pred_sql)
        engine_sql = pred.sql
        # Candidates go through the same transpile path; one that fails is dropped (and counted).
        candidate_sqls: list[str] = []
        candidate_origin: list[int] = []
        for position, candidate in enumerate(pair.candidates):
            prepared = self.prepare(candidate) if candidate.strip() else Prepared(candidate)
            if prepared.sql is None:
                result.candidates_dropped += 1
                continue
            candidate_sqls.append(prepared.sql)
            candidate_origin.append(position)
        rescue_kwargs = (
            {"candidates": candidate_sqls, "question": pair.question, "hint": pair.hint} if candidate_sqls else None
        )
        if engine_sql is None:
            served = _failure(pred)
        else:
            served = session.run(self.guarded, engine_sql, task.timeout, rescue_kwargs)
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
            engine_sql=None if task.engine.name == "sqlite" else engine_sql,
            transpile_failed=served.transpile_failed,
            candidates=len(candidate_sqls),
            provenance=report.provenance if report is not None else None,
            provenance_evidence=report.provenance_evidence if report is not None else None,
            **_rescue_fields(report, candidate_origin),
        )
        result.records.append(record)
        if self.sweep_policies is not None and served.rows is not None and engine_sql is not None:
            replay_for_sweep(session, task, pair, engine_sql, record, gold, self.sweep_policies, result)


def _failure(prepared: Prepared) -> Run:
    """The ``Run`` of a query that could not be prepared for the engine (it never ran)."""
    return Run(None, "error", prepared.error, 0.0, None, prepared.transpile_failed)


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
