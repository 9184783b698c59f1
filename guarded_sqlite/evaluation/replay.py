"""Sweep replay: a prediction re-run through the guard at each threshold of the grid that could change it.

Each grid's policies are the sweep's base policy (the ``"paper"`` preset by default) with one threshold
changed and the other rule off. Only the thresholds where a rule can act are replayed: P1 needs
``dup_ratio`` at or above the policy's acting threshold (``tau_inject``, or ``tau_amplified`` below it
under ``"text_to_sql"``); P2 needs what ``guarded_sqlite.policy.removal_applies`` asks (no duplicate in
the result, SQL that says DISTINCT, a result large enough that one extra row keeps ``dup_ratio <=
tau_remove``). Each replay that the rule really rewrote becomes a ``SweepOutcome`` with the verdicts
before and after.
"""

from __future__ import annotations

import dataclasses

from ..policy import GuardPolicy, removal_applies
from . import metrics
from .loaders import Pair
from .options import SweepGrid
from .records import PairRecord, SweepOutcome
from .sessions import Session
from .tasks import Task, TaskResult

TAU_FLOOR = 1e-9
"""``GuardPolicy`` needs ``tau_inject > 0``; a grid's 0.00 runs as this, which flags every result
with at least one duplicate row. Results without duplicates cannot change under DISTINCT anyway."""

AMPLIFIED_RULE = "P1_amplified"
"""The rule name of the ``tau_amplified`` grid's outcomes (P1 under ``"text_to_sql"``, P2 off)."""

RULE_ACTIONS = {
    "P1": ("distinct_injected", "join_copies_removed"),
    "P2": ("distinct_removed",),
    AMPLIFIED_RULE: ("distinct_injected", "join_copies_removed"),
}
"""The action each sweep rule's rewrite reports."""

SweepPolicies = dict[str, dict[float, GuardPolicy]]
"""Per rule (``"P1"``, ``"P2"`` and, for ``"text_to_sql"``, ``AMPLIFIED_RULE``): the policy of each threshold."""


def sweep_policies(grid: SweepGrid, base: GuardPolicy) -> SweepPolicies:
    """One policy per threshold, from ``base``: P1's and the amplification rule's with P2 off, P2's with P1 off."""
    policies: SweepPolicies = {
        "P1": {
            tau: dataclasses.replace(base, tau_inject=max(tau, TAU_FLOOR), inject_distinct=True, remove_distinct=False)
            for tau in grid.p1
        },
        "P2": {
            tau: dataclasses.replace(base, tau_remove=tau, inject_distinct=False, remove_distinct=True)
            for tau in grid.p2
        },
    }
    if grid.amplified:
        policies[AMPLIFIED_RULE] = {
            tau: dataclasses.replace(base, tau_amplified=tau, inject_distinct=True, remove_distinct=False)
            for tau in grid.amplified
        }
    return policies


def _injection_can_act(rows: int, duplicates: int, policy: GuardPolicy) -> bool:
    # P1 can only act where rows - unique >= threshold * rows; the slack keeps float rounding from
    # skipping a boundary case (the guard itself decides).
    return duplicates > 0 and duplicates >= policy.p1_threshold * rows - 1e-9 * rows


def replay_for_sweep(
    session: Session,
    task: Task,
    pair: Pair,
    engine_sql: str,
    record: PairRecord,
    gold: metrics.GoldRows,
    policies: SweepPolicies,
    result: TaskResult,
) -> None:
    """Replay one prediction at each threshold that could change it, through the guard."""
    rows, unique = record.rows, record.unique_rows
    if not rows or unique is None:
        return  # failed, empty or not probed: no rule can apply
    duplicates = rows - unique
    for rule, table in policies.items():
        if rule == "P2":
            taus = [tau for tau, policy in table.items() if removal_applies(pair.pred_sql, rows, unique, policy)]
        else:
            taus = [tau for tau, policy in table.items() if _injection_can_act(rows, duplicates, policy)]
        result.candidates[rule] = result.candidates.get(rule, 0) + bool(taus)
        for tau in taus:
            replay = session.run(session.guarded(table[tau]), engine_sql, task.timeout)
            result.replays += 1
            if replay.rows is None or replay.report is None or replay.report.action not in RULE_ACTIONS[rule]:
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
