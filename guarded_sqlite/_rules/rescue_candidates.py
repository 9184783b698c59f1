"""The candidate-aware rescue as a rule (``rescue``): the caller's candidates run read-only, the
policy's rescuer (``guarded_sqlite.rescue``) picks one, and its rows replace the statement's."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

from .._analysis.rewrite import is_read_only_query
from .._core.probe import count_unique
from .._engines import RerunRefused
from ..errors import TransactionLost, describe_error
from ..policy import GuardPolicy
from ..report import RuleDecision
from ..rescue import PREVIEW_ROWS, CandidatePreview, RescueReport, RescueRequest, rescuer_name, run_rescuer

__all__ = ["RescueContext", "rescue"]


class RescueContext(Protocol):
    """What the connection provides for a rescue: the caller's candidates and a way to run them."""

    candidates: Sequence[str]
    question: str | None
    hint: str | None

    def run_candidate(self, sql: str) -> list[Any] | None:
        """Rows of ``sql`` run read-only under the candidate time limit; None past the row cap."""

    def candidate_description(self, sql: str) -> Any:
        """The cursor description of the candidate last run as ``sql``."""

    def schema_summary(self) -> str:
        """The database's tables and columns, for the prompt."""

    def budget_refusal(self) -> str | None:
        """Why the connection's rescue budget forbids another rescue, or None."""

    def record_rescue(self, cost_usd: float | None) -> None:
        """Count one rescue (and its known cost) against the budget."""


def rescue(
    sql: str,
    rows: list[Any] | None,
    unique_rows: int | None,
    trigger: str,
    policy: GuardPolicy,
    dialect: str,
    context: RescueContext,
) -> tuple[RescueReport | None, tuple[str, list[Any]] | None, list[RuleDecision]]:
    """Run the rescuer on the selection; (report, chosen sql and rows or None, refusal decisions)."""
    rescuer = policy.rescue
    if rescuer is None:
        return None, None, [RuleDecision("rescue", False, "candidates were given but the policy has no rescuer")]
    if not context.candidates:
        return None, None, [RuleDecision("rescue", False, "the candidate list is empty")]
    if not is_read_only_query(sql, dialect):
        return None, None, [RuleDecision("rescue", False, "the selected statement is not a read-only query")]
    refusal = context.budget_refusal()
    if refusal is not None:
        return None, None, [RuleDecision("rescue", False, refusal)]
    started = time.perf_counter()
    try:
        schema = context.schema_summary()
    except RerunRefused as refused:  # the engine cannot run anything read-only now: no candidates either
        return None, None, [RuleDecision("rescue", False, f"candidates cannot run: {refused}")]
    except Exception as error:  # the prompt can do without the schema
        schema = f"(schema unavailable: {type(error).__name__})"

    previews: list[CandidatePreview] = []
    # Candidates' rows are kept only while all of them together stay within row_cap; a chosen
    # candidate whose rows were let go runs once more.
    results: list[list[Any] | None] = []
    kept_rows = 0
    locked: str | None = None
    for index, candidate_sql in enumerate(context.candidates):
        if locked is not None:  # each candidate would wait out the busy timeout again
            previews.append(CandidatePreview(index, candidate_sql, None, None, (), f"not run: {locked}", 0.0))
            results.append(None)
            continue
        preview, candidate_rows = _preview(index, candidate_sql, context, dialect)
        previews.append(preview)
        if candidate_rows is not None and kept_rows + len(candidate_rows) > policy.row_cap:
            candidate_rows = None
        kept_rows += len(candidate_rows) if candidate_rows is not None else 0
        results.append(candidate_rows)
        if preview.error is not None and "database is locked" in preview.error:
            locked = "the database is locked"
    selected = CandidatePreview(
        -1,
        sql,
        None if rows is None else len(rows),
        unique_rows,
        tuple(rows[:PREVIEW_ROWS]) if rows else (),
        None if rows is not None else "the selected SQL failed to execute",
        0.0,
    )
    request = RescueRequest(
        selected, trigger, tuple(previews), context.question, context.hint, schema, policy.tau_inject
    )
    candidates_ms = (time.perf_counter() - started) * 1000
    choice, judge_ms = run_rescuer(rescuer, request)
    context.record_rescue(choice.cost_usd)

    chosen: tuple[str, list[Any]] | None = None
    fallback = choice.reason
    if choice.index is not None:
        candidate_rows = results[choice.index]
        if candidate_rows is None and previews[choice.index].error is None:
            _, candidate_rows = _preview(choice.index, context.candidates[choice.index], context, dialect)
        if candidate_rows is None:
            why = previews[choice.index].error or "it failed when run again"
            fallback = f"candidate {choice.index} cannot serve rows: {why}"
        else:
            chosen = (context.candidates[choice.index], candidate_rows)
            fallback = None
    report = RescueReport(
        rescuer=rescuer_name(rescuer),
        trigger=trigger,
        chosen_index=choice.index if chosen is not None else None,
        chosen_sql=chosen[0] if chosen is not None else None,
        fallback_reason=fallback if chosen is None else None,
        answer=choice.answer,
        latency_ms=candidates_ms + judge_ms,
        candidates_ms=candidates_ms,
        judge_ms=judge_ms,
        prompt_tokens=choice.prompt_tokens,
        completion_tokens=choice.completion_tokens,
        cost_usd=choice.cost_usd,
        candidates=tuple(previews),
    )
    return report, chosen, []


def _preview(index: int, sql: str, context: RescueContext, dialect: str) -> tuple[CandidatePreview, list[Any] | None]:
    """Run one candidate read-only; its preview, and its rows when it may serve the cursor."""
    started = time.perf_counter()
    if not is_read_only_query(sql, dialect):
        return CandidatePreview(index, sql, None, None, (), "not a read-only query: never executed", 0.0), None
    try:
        rows = context.run_candidate(sql)
    except TransactionLost:
        raise
    except Exception as error:  # failures and timeouts are part of the preview, not the caller's problem
        elapsed = (time.perf_counter() - started) * 1000
        return CandidatePreview(index, sql, None, None, (), describe_error(error), elapsed), None
    elapsed = (time.perf_counter() - started) * 1000
    if rows is None:
        return CandidatePreview(index, sql, None, None, (), "result exceeds row_cap", elapsed), None
    return CandidatePreview(index, sql, len(rows), count_unique(rows), tuple(rows[:PREVIEW_ROWS]), None, elapsed), rows
