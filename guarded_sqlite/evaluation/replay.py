"""Sweep replay: a prediction re-run through the guard at each threshold of the grid that could change it.

Only the thresholds where a rule can fire are replayed. P1 needs the probe to flag the result
(``dup_ratio >= tau_inject``); P2 needs an outermost DISTINCT, no duplicate in the result, and a result
large enough that one extra row keeps ``dup_ratio <= tau_remove``. Each replay that the rule really
rewrote becomes a ``SweepOutcome`` with the verdicts before and after.
"""

from __future__ import annotations

from ..policy import GuardPolicy
from ..probe import mentions_distinct, removal_can_commit
from . import metrics
from .loaders import Pair
from .options import SweepGrid
from .records import PairRecord, SweepOutcome
from .sessions import Session
from .tasks import Task, TaskResult

TAU_FLOOR = 1e-9
"""``GuardPolicy`` needs ``tau_inject > 0``; a grid's 0.00 runs as this, which flags every result
with at least one duplicate row. Results without duplicates cannot change under DISTINCT anyway."""

SweepPolicies = tuple[dict[float, GuardPolicy], dict[float, GuardPolicy]]
"""The policy of each P1 threshold and of each P2 threshold."""


def sweep_policies(grid: SweepGrid) -> SweepPolicies:
    """One policy per threshold: P1's with P2 off, P2's with P1 off."""
    p1 = {tau: GuardPolicy(tau_inject=max(tau, TAU_FLOOR), remove_distinct=False) for tau in grid.p1}
    p2 = {tau: GuardPolicy(tau_remove=tau, inject_distinct=False) for tau in grid.p2}
    return p1, p2


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
