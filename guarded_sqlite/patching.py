"""Deciding and verifying patches for one executed statement.

The proxy hands over the original rows and a ``rerun`` callable that executes SQL read-only with the
caller's parameters; this module picks the rule (P1 for explosions, P2 for DISTINCT results), asks
``rewrite`` for the new text, reruns it, and commits only if the new rows pass the rule's runtime
checks. Every check that fails becomes the reason recorded in the report; nothing here raises.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, NamedTuple, Optional, Sequence

from .policy import GuardPolicy
from .probe import CARTESIAN_EXPLOSION, count_unique, dup_ratio, row_set
from .report import Action, RuleDecision
from .rewrite import inject_distinct, remove_distinct

logger = logging.getLogger("guarded_sqlite")

Rerun = Callable[[str], Optional[list[Any]]]
"""Executes SQL read-only with the caller's parameters; returns its rows, or None past the row cap."""


class PatchOutcome(NamedTuple):
    """What the cursor should serve after the patch rules had their say."""

    final_sql: str
    rows: list[Any]
    action: Action
    decisions: tuple[RuleDecision, ...]
    elapsed_ns: int


def apply_patches(
    sql: str,
    rows: list[Any],
    unique_rows: int,
    trigger: Optional[str],
    policy: GuardPolicy,
    rerun: Rerun,
    dialect: str = "sqlite",
) -> PatchOutcome:
    """Run the rule that fits the probe's verdict: P1 on an explosion, P2 on a healthy result."""
    started = time.perf_counter_ns()
    if trigger == CARTESIAN_EXPLOSION:
        decision, new = _inject(sql, rows, unique_rows, policy, rerun, dialect)
    elif trigger is None:
        decision, new = _remove(sql, rows, policy, rerun, dialect)
    else:
        raise ValueError(f"no patch rule applies to trigger {trigger!r}")
    elapsed = time.perf_counter_ns() - started
    if new is None:
        return PatchOutcome(sql, rows, "none", (decision,), elapsed)
    new_sql, new_rows = new
    action: Action = "distinct_injected" if decision.rule == "P1" else "distinct_removed"
    logger.info("guarded_sqlite %s (%s): %s -> %s", action, decision.reason, sql, new_sql)
    return PatchOutcome(new_sql, new_rows, action, (decision,), elapsed)


_Result = tuple[RuleDecision, Optional[tuple[str, list[Any]]]]


def _inject(sql: str, rows: list[Any], unique_rows: int, policy: GuardPolicy, rerun: Rerun, dialect: str) -> _Result:
    if not policy.inject_distinct:
        return RuleDecision("P1", False, "disabled by policy (inject_distinct=False)"), None
    rewrite = inject_distinct(sql, dialect)
    if rewrite.sql is None:
        return RuleDecision("P1", False, rewrite.reason), None
    new_rows, failure = _run(rerun, rewrite.sql)
    if new_rows is None:
        return RuleDecision("P1", False, failure), None
    if len(new_rows) != unique_rows or count_unique(new_rows) != len(new_rows) or not _same_set(new_rows, rows):
        return RuleDecision("P1", False, _SET_CHANGED), None
    ratio = dup_ratio(len(rows), unique_rows)
    reason = f"dup_ratio {ratio:.3f} >= tau_inject {policy.tau_inject}; {len(rows)} -> {len(new_rows)} rows"
    return RuleDecision("P1", True, reason), (rewrite.sql, new_rows)


def _remove(sql: str, rows: list[Any], policy: GuardPolicy, rerun: Rerun, dialect: str) -> _Result:
    if not policy.remove_distinct:
        return RuleDecision("P2", False, "disabled by policy (remove_distinct=False)"), None
    rewrite = remove_distinct(sql, dialect)
    if rewrite.sql is None:
        return RuleDecision("P2", False, rewrite.reason), None
    new_rows, failure = _run(rerun, rewrite.sql)
    if new_rows is None:
        return RuleDecision("P2", False, failure), None
    if len(new_rows) <= len(rows):
        return RuleDecision("P2", False, "removing DISTINCT does not add rows"), None
    ratio = dup_ratio(len(new_rows), count_unique(new_rows))
    if ratio > policy.tau_remove:
        return RuleDecision("P2", False, f"without DISTINCT dup_ratio {ratio:.3f} > tau_remove {policy.tau_remove}"), None
    if not _same_set(new_rows, rows):
        return RuleDecision("P2", False, _SET_CHANGED), None
    reason = f"without DISTINCT dup_ratio {ratio:.3f} <= tau_remove {policy.tau_remove}; {len(rows)} -> {len(new_rows)} rows"
    return RuleDecision("P2", True, reason), (rewrite.sql, new_rows)


_SET_CHANGED = "the rewritten query returns a different set of rows (a collation or non-deterministic function?)"


def _run(rerun: Rerun, sql: str) -> tuple[Optional[list[Any]], str]:
    try:
        rows = rerun(sql)
    except Exception as error:  # the original result stands whatever the rerun does
        return None, f"re-execution failed: {type(error).__name__}: {error}"
    if rows is None:
        return None, "re-execution exceeded row_cap"
    return rows, ""


def _same_set(left: Sequence[Any], right: Sequence[Any]) -> bool:
    return row_set(left) == row_set(right)
