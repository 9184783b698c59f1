"""P2, removing a DISTINCT that hides nothing (``remove``): the paper's rule, run only under the
``"paper"`` preset; the rewrite commits only if its rows pass the runtime checks."""

from __future__ import annotations

from typing import Any

from .._analysis.rewrite import remove_distinct
from .._core.probe import count_unique, dup_ratio
from ..policy import GuardPolicy, removal_row_limit
from ..report import RuleDecision
from .reruns import SET_CHANGED, Rerun, RuleResult, run_again, same_set

__all__ = ["remove"]


def remove(sql: str, rows: list[Any], policy: GuardPolicy, rerun: Rerun, dialect: str) -> RuleResult:
    """P2, the paper's rule: it runs only under the ``"paper"`` preset (``GuardPolicy``)."""
    if not policy.remove_distinct:
        return RuleDecision("P2", False, "disabled by policy (remove_distinct=False)"), None
    rewrite = remove_distinct(sql, dialect)
    if rewrite.sql is None:
        return RuleDecision("P2", False, rewrite.reason), None
    can_commit_up_to = removal_row_limit(len(rows), policy.tau_remove)
    new_rows, failure = run_again(rerun, rewrite.sql, min(policy.row_cap, can_commit_up_to))
    if new_rows is None:
        if not failure and can_commit_up_to <= policy.row_cap:
            failure = (
                f"without DISTINCT more than {can_commit_up_to} rows, so dup_ratio > tau_remove {policy.tau_remove} "
                "(stopped fetching there)"
            )
        elif not failure:
            failure = "re-execution exceeded row_cap"
        return RuleDecision("P2", False, failure), None
    if len(new_rows) <= len(rows):
        return RuleDecision("P2", False, "removing DISTINCT does not add rows"), None
    ratio = dup_ratio(len(new_rows), count_unique(new_rows))
    if ratio > policy.tau_remove:
        return RuleDecision(
            "P2", False, f"without DISTINCT dup_ratio {ratio:.3f} > tau_remove {policy.tau_remove}"
        ), None
    if not same_set(new_rows, rows):
        return RuleDecision("P2", False, SET_CHANGED), None
    reason = (
        f"without DISTINCT dup_ratio {ratio:.3f} <= tau_remove {policy.tau_remove}; {len(rows)} -> {len(new_rows)} rows"
    )
    return RuleDecision("P2", True, reason), (rewrite.sql, new_rows, "distinct_removed")
