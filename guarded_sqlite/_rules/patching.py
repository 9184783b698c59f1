"""Repairing one flagged (or DISTINCT) statement: rescue and patches, in the policy's order (one rule
per module: ``rescue_candidates``, ``distinct_injection`` (P1), ``distinct_removal`` (P2); what they
share in ``reruns``).

The proxy hands over the original rows and a ``Connection`` (how to run SQL read-only with the
caller's parameters, and what the engine knows about collations), plus a ``RescueContext`` when the
caller passed candidates. This module picks the rule (P1 for explosions, P2 for DISTINCT results under
the paper preset) and asks ``rewrite`` for the new text. With candidates the rescuer runs before the
patches (``rescue_first``, the paper's v2) or after them (``patch_first``, v1). Every check that fails
becomes a reason in the report; nothing here raises except ``TransactionLost`` and
KeyboardInterrupt/SystemExit, which must reach the caller.

P1 under the paper preset (``provenance="off"``) serves the fetched rows de-duplicated in order of first
occurrence: SQL's DISTINCT over the same rows can only give those rows, so nothing runs again. Under the
key-based presets it asks ``explain`` (the connection's cached ``guarded_sqlite._analysis.provenance`` verdict)
*after* the rewrite itself was accepted, so statements the rewrite refuses never cost a catalog read,
and fails closed: it acts only on established join amplification (``value_repeats``, ``unknown`` and a
verdict the rows contradict are left alone), and only where the data shows *join copies*, rows that
repeat a combination of the projected tables' rows. An ``identified`` projection needs no look (every
repeat is a copy); otherwise the join-copy check runs the statement once more, read-only, with the
projected tables' row identities appended, and ``guarded_sqlite._rules.copies`` counts the copies. Whatever
the check cannot establish (a statement calling an application's function, rows that differ from the
statement's, a check that cannot run) leaves the rows as they are with an ``unknown`` verdict; no
copies leaves them too. ``"patch"`` then removes exactly the copies (``"join_copies_removed"``, or
``"distinct_injected"`` where that is SELECT DISTINCT's result); ``"text_to_sql"`` serves the distinct
rows. P2 re-executes and commits only if the new rows pass its runtime checks; the key-based presets
never run it (``GuardPolicy``).

Decisions are logged by ``_guard.decide`` once the statement's state is final (``guarded_sqlite.sinks``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, NamedTuple

from .._core.probe import CARTESIAN_EXPLOSION, classify, count_unique
from ..policy import GuardPolicy, removal_applies
from ..report import Action, RuleDecision
from ..rescue import RescueReport
from .distinct_injection import CopyCheck, Why, below_tau_applies, inject
from .distinct_removal import remove
from .reruns import Explain, MayCollate, PlainRerun, ReachedFunctions, Rerun, UserFunctions
from .rescue_candidates import RescueContext, rescue

if TYPE_CHECKING:
    from .._analysis.provenance import Provenance

__all__ = ["PatchOutcome", "RescueContext", "repair"]


class PatchOutcome(NamedTuple):
    """What the cursor should serve after rescue and patch rules had their say."""

    final_sql: str
    rows: list[Any]
    action: Action
    decisions: tuple[RuleDecision, ...]
    elapsed_ns: int
    rescue: RescueReport | None = None
    description: Any = None
    """The served candidate's cursor description when a rescue replaced the statement, else None."""
    provenance: Provenance | None = None
    """The provenance verdict a rule asked for (the last one, after a rescue), else None."""


class _Judged(NamedTuple):
    """The statement the patch rules judge, with its result: the caller's, or the candidate a rescue chose."""

    sql: str
    rows: list[Any] | None
    unique_rows: int | None
    trigger: str | None


def repair(
    sql: str,
    rows: list[Any] | None,
    unique_rows: int | None,
    trigger: str | None,
    policy: GuardPolicy,
    rerun: Rerun,
    dialect: str = "sqlite",
    context: RescueContext | None = None,
    may_collate: MayCollate = lambda: True,
    explain: Explain | None = None,
    plain_rerun: PlainRerun | None = None,
    user_functions: UserFunctions = lambda: None,
    reached_functions: ReachedFunctions | None = None,
) -> PatchOutcome:
    """Run the rescue (if the statement is flagged and came with candidates) and the patch rules.

    ``rows`` is None only for ``exec_error``; then only a rescue can produce rows, and the outcome's
    ``rows`` stays empty with ``action == "none"`` when it does not. ``explain`` gives the provenance
    verdict when ``policy.provenance`` asks for one; without it the rules act as the paper's.
    ``plain_rerun``, ``user_functions`` and ``reached_functions`` serve the join-copy check (without
    them it cannot run, and a verdict that needs it leaves the rows as they are).
    """
    started = time.perf_counter_ns()
    decisions: list[RuleDecision] = []
    why = Why(explain if policy.provenance != "off" else None)
    copies = CopyCheck(plain_rerun, user_functions, reached_functions)
    rescue_report: RescueReport | None = None
    rescued: tuple[str, list[Any]] | None = None
    current = _Judged(sql, rows, unique_rows, trigger)
    wants_rescue = trigger is not None and context is not None

    if wants_rescue and policy.order == "rescue_first":
        rescue_report, rescued, refusal = rescue(sql, rows, unique_rows, trigger, policy, dialect, context)  # type: ignore[arg-type]
        decisions.extend(refusal)
        if rescued is not None:
            new_sql, new_rows = rescued
            new_unique = count_unique(new_rows)
            current = _Judged(new_sql, new_rows, new_unique, classify(len(new_rows), new_unique, policy.tau_inject))

    patched_sql, patched_rows, patch_action = patches(
        current, policy, rerun, may_collate, dialect, decisions, why, copies
    )

    if wants_rescue and policy.order == "patch_first":
        rescue_report, rescued, refusal = rescue(sql, rows, unique_rows, trigger, policy, dialect, context)  # type: ignore[arg-type]
        decisions.extend(refusal)
        if rescued is not None:  # v1: the rescue overwrites whatever the patches did
            patched_sql, patched_rows = rescued
            patch_action = "none"

    description = None
    if rescued is not None:
        action: Action = "candidate_selected" if patch_action == "none" else f"candidate_selected+{patch_action}"  # type: ignore[assignment]
        description = context.candidate_description(rescued[0]) if context is not None else None
    else:
        action = patch_action
    elapsed = time.perf_counter_ns() - started
    provenance = why.last
    return PatchOutcome(
        patched_sql,
        patched_rows if patched_rows is not None else [],
        action,
        tuple(decisions),
        elapsed,
        rescue_report,
        description,
        provenance,
    )


def patches(
    judged: _Judged,
    policy: GuardPolicy,
    rerun: Rerun,
    may_collate: MayCollate,
    dialect: str,
    decisions: list[RuleDecision],
    why: Why,
    copies: CopyCheck,
) -> tuple[str, list[Any] | None, Action]:
    """P1 on an explosion (or, text_to_sql, on duplicates at ``tau_amplified``), P2 on a healthy DISTINCT
    result; appends its decision."""
    sql, rows, unique_rows, trigger = judged
    if rows is None or unique_rows is None:
        return sql, rows, "none"
    if trigger == CARTESIAN_EXPLOSION or (trigger is None and below_tau_applies(len(rows), unique_rows, policy)):
        below_tau = trigger is None
        decision, new = inject(sql, rows, unique_rows, policy, rerun, may_collate, dialect, why, below_tau, copies)
    elif trigger is None and removal_applies(sql, len(rows), unique_rows, policy):
        decision, new = remove(sql, rows, policy, rerun, dialect)
    else:
        return sql, rows, "none"
    decisions.append(decision)
    if new is None:
        return sql, rows, "none"
    return new
