"""The result of ``sweep`` as frozen dataclasses: fix/break per threshold for each rule, and the
leave-one-database-out cross-validation of each threshold (``thresholds`` computes them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .records import JsonMixin, SweepOutcome
from .report import EvalReport, FixBreak


@dataclass(frozen=True)
class SweepRow(FixBreak):
    """One threshold of a patch rule's sweep (a row of the paper's Table 5 or 6)."""

    tau: float
    """The threshold."""


@dataclass(frozen=True)
class Fold(JsonMixin):
    """One fold of leave-one-database-out cross-validation."""

    db_id: str
    """The held-out database."""

    tau: float
    """The threshold that maximised net gain on the other databases."""

    train_net: int
    """That maximum: net gain on the other databases."""

    fix: int
    """Fixes on the held-out database at ``tau``."""

    break_: int
    """Breaks on the held-out database at ``tau``."""

    net: int
    """Held-out net gain at ``tau``."""


@dataclass(frozen=True)
class CrossValidation(JsonMixin):
    """Leave-one-database-out cross-validation of a rule's threshold."""

    folds: tuple[Fold, ...]
    """One fold per database where the rule fires at some threshold of the grid."""

    held_out_net: int
    """Sum of the held-out nets: the CV estimate of the rule's gain."""

    nonnegative_folds: int
    """Folds whose held-out net is >= 0."""

    worst_fold_net: int | None
    """Smallest held-out net; None without folds."""

    no_threshold_net: int
    """Net gain at the grid's loosest threshold on every database (the rule without its threshold)."""


@dataclass(frozen=True)
class SweepReport(JsonMixin):
    """The result of ``sweep``: fix/break per threshold for P1 and P2 (and, under ``"text_to_sql"``, for
    P1 on join amplification per ``tau_amplified``), and their cross-validation."""

    evaluation: EvalReport
    """The ordinary evaluation at the base preset's operating point, from the same run."""

    p1: tuple[SweepRow, ...]
    """P1 (DISTINCT injection, P2 off) for each ``tau_inject`` of the grid."""

    p2: tuple[SweepRow, ...]
    """P2 (DISTINCT removal, P1 off) for each ``tau_remove`` of the grid."""

    p1_cv: CrossValidation
    """Leave-one-database-out CV of ``tau_inject``."""

    p2_cv: CrossValidation
    """Leave-one-database-out CV of ``tau_remove``."""

    p1_candidates: int
    """Predictions replayed for P1: results with at least the smallest grid threshold of duplicates."""

    p2_candidates: int
    """Predictions replayed for P2: duplicate-free results of SQL that mentions DISTINCT, large enough
    for P2 to commit at some threshold of the grid."""

    replays: int
    """Guarded re-executions the sweep ran."""

    outcomes: tuple[SweepOutcome, ...]
    """Every (threshold, prediction) where a rule rewrote the query, with verdicts before and after:
    the rows behind the sweep tables, for diffing and further analysis."""

    plot: str | None
    """The PNG written, if one was asked for."""

    guard: str = "paper"
    """The base preset of the grids (``evaluation.guard``): ``"paper"`` (the paper's rules, the default),
    ``"patch"`` or ``"text_to_sql"``."""

    amplified: tuple[SweepRow, ...] = ()
    """``"text_to_sql"`` only: P1 (P2 off) for each ``tau_amplified`` of the grid, with ``tau_inject`` at
    the base policy's value; each row counts every P1 rewrite at that setting, those at or above
    ``tau_inject`` included. Empty under the other presets."""

    amplified_cv: CrossValidation | None = None
    """Leave-one-database-out CV of ``tau_amplified``; None unless ``"text_to_sql"``."""

    amplified_candidates: int = 0
    """Predictions replayed for the ``tau_amplified`` grid: results with duplicates at its smallest threshold."""


@dataclass(frozen=True)
class SweepComparison(JsonMixin):
    """``sweep`` from each of several base presets, on the same inputs (``sweep --guard paper,text_to_sql``)."""

    reports: Mapping[str, SweepReport]
    """The sweep from each preset, in the order asked for."""
