"""Threshold sweeps for the patch rules (the paper's Tables 5 and 6) and their cross-validation.

For each ``tau_inject`` of the P1 grid (P2 off) and each ``tau_remove`` of the P2 grid (P1 off), the
predictions a rule could change are replayed through the guard with that policy, and fix/break/net
counted where the rule rewrote the query. Predictions that cannot change are never replayed: P1 needs
``dup_ratio >= tau`` (so only results with duplicates are candidates, and only at thresholds they
reach), and P2 needs an outermost DISTINCT (so only SQL that mentions it).

Leave-one-database-out cross-validation then asks whether a threshold chosen on the other databases
holds up on the held-out one: for each database where the rule fires, pick the threshold with the
best net gain on all *other* databases (ties go to the more conservative threshold), apply it to the
held-out database, and sum the held-out nets.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..policy import DEFAULT_POLICY
from . import metrics
from .loaders import InputError, PathLike
from .options import SweepGrid, resolve_engine
from .records import SweepOutcome
from .runner import run
from .sweep_report import CrossValidation, Fold, SweepReport, SweepRow

DEFAULT_P1_TAUS: tuple[float, ...] = tuple(round(0.05 * step, 2) for step in range(20))
"""0.00, 0.05, ..., 0.95 (the deployed 0.80 included); 0.00 means "any duplicate row"."""

DEFAULT_P2_TAUS: tuple[float, ...] = tuple(round(0.05 * step, 2) for step in range(1, 11))
"""0.05, 0.10, ..., 0.50."""

PLOT_HINT = "plotting needs matplotlib: pip install 'guarded-sqlite[plot]'"


class PlotUnavailable(ImportError):
    """matplotlib is not installed, so ``--plot`` cannot draw."""


def check_grid(taus: Iterable[float], rule: str) -> tuple[float, ...]:
    """The grid sorted and de-duplicated; every tau must be in [0, 1)."""
    grid = tuple(sorted({round(float(tau), 6) for tau in taus}))
    if not grid:
        raise InputError(f"the {rule} threshold grid is empty")
    for tau in grid:
        if not 0.0 <= tau < 1.0:
            raise InputError(f"{rule} thresholds must be in [0, 1), not {tau!r}")
    return grid


def sweep_table(outcomes: Iterable[SweepOutcome], taus: Sequence[float]) -> tuple[SweepRow, ...]:
    """Fired/fix/break/net per threshold, from one rule's fired outcomes."""
    by_tau: dict[float, list[tuple[bool, bool, bool, bool]]] = defaultdict(list)
    for o in outcomes:
        by_tau[o.tau].append((o.baseline_set, o.baseline_multiset, o.set_ex, o.multiset_ex))
    return tuple(metrics.sweep_row(tau, by_tau.get(tau, ())) for tau in taus)


def _stricter_first(taus: Sequence[float], rule: str) -> list[float]:
    # P1 fires less as tau_inject rises; P2 fires less as tau_remove falls.
    return sorted(taus, reverse=(rule == "P1"))


def loo_cv(outcomes: Iterable[SweepOutcome], taus: Sequence[float], rule: str) -> CrossValidation:
    """Leave-one-database-out CV of one rule's threshold over the databases where it ever fires."""
    fixes: dict[tuple[str, float], int] = defaultdict(int)
    breaks: dict[tuple[str, float], int] = defaultdict(int)
    databases: set[str] = set()
    for o in outcomes:
        databases.add(o.db_id)
        fixes[o.db_id, o.tau] += int(o.multiset_ex and not o.baseline_multiset)
        breaks[o.db_id, o.tau] += int(o.baseline_multiset and not o.multiset_ex)

    def net(db_id: str, tau: float) -> int:
        return fixes[db_id, tau] - breaks[db_id, tau]

    total = {tau: sum(net(db_id, tau) for db_id in databases) for tau in taus}
    ordered = _stricter_first(taus, rule)
    folds = []
    for db_id in sorted(databases):
        train = {tau: total[tau] - net(db_id, tau) for tau in taus}
        # max() keeps the first of equal values: scanning strictest first breaks ties conservatively.
        chosen = max(ordered, key=lambda tau: train[tau])
        folds.append(
            Fold(db_id, chosen, train[chosen], fixes[db_id, chosen], breaks[db_id, chosen], net(db_id, chosen))
        )
    nets = [fold.net for fold in folds]
    return CrossValidation(
        folds=tuple(folds),
        held_out_net=sum(nets),
        nonnegative_folds=sum(1 for value in nets if value >= 0),
        worst_fold_net=min(nets) if nets else None,
        no_threshold_net=total[ordered[-1]] if ordered else 0,
    )


def sweep(
    db_root: PathLike,
    gold: Any,
    pred: Any,
    timeout: float | None = 5.0,
    workers: int | None = None,
    exclude_db: Iterable[str] = (),
    p1_taus: Iterable[float] = DEFAULT_P1_TAUS,
    p2_taus: Iterable[float] = DEFAULT_P2_TAUS,
    plot: PathLike | None = None,
    progress: bool | None = None,
    engine: str = "sqlite",
    pg_dsn: str | None = None,
    cache_dir: PathLike | None = None,
    pg_schema_prefix: str = "spider_",
) -> SweepReport:
    """Sweep P1's ``tau_inject`` and P2's ``tau_remove``, cross-validate both, optionally plot.

    Takes the same inputs as ``evaluate`` (engine options included); the returned report also holds
    the ordinary evaluation at the default operating point, from the same run. ``plot`` writes a PNG of
    net gain against the threshold (needs matplotlib: ``pip install 'guarded-sqlite[plot]'``; checked
    before any query runs).
    """
    grid = SweepGrid(check_grid(p1_taus, "P1"), check_grid(p2_taus, "P2"))
    spec = resolve_engine(engine, pg_dsn, cache_dir, pg_schema_prefix)
    if plot is not None:
        require_matplotlib()
    evaluation, results = run(db_root, gold, pred, "patch", timeout, workers, exclude_db, progress, grid, engine=spec)
    outcomes = [o for result in results for o in result.outcomes]
    p1 = [o for o in outcomes if o.rule == "P1"]
    p2 = [o for o in outcomes if o.rule == "P2"]
    report = SweepReport(
        evaluation=evaluation,
        p1=sweep_table(p1, grid.p1),
        p2=sweep_table(p2, grid.p2),
        p1_cv=loo_cv(p1, grid.p1, "P1"),
        p2_cv=loo_cv(p2, grid.p2, "P2"),
        p1_candidates=sum(result.p1_candidates for result in results),
        p2_candidates=sum(result.p2_candidates for result in results),
        replays=sum(result.replays for result in results),
        outcomes=tuple(sorted(outcomes, key=lambda o: (o.rule, o.tau, o.index))),
        plot=None if plot is None else str(plot),
    )
    if plot is not None:
        plot_sweep(report, plot, title=Path(str(pred)).name if isinstance(pred, (str, Path)) else None)
    return report


def require_matplotlib() -> None:
    """Raise ``PlotUnavailable`` with the install hint when matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as error:
        raise PlotUnavailable(PLOT_HINT) from error


def plot_sweep(report: SweepReport, path: PathLike, title: str | None = None) -> None:
    """Write a PNG with net gain (and fix, break) against the threshold, one panel per rule.

    Uses matplotlib's object API with the Agg canvas, so it never touches pyplot's global state or
    the caller's backend.
    """
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 4), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    panels = figure.subplots(1, 2)
    for axes, rows, name, default in (
        (panels[0], report.p1, "P1 DISTINCT injection: tau_inject", DEFAULT_POLICY.tau_inject),
        (panels[1], report.p2, "P2 DISTINCT removal: tau_remove", DEFAULT_POLICY.tau_remove),
    ):
        taus = [row.tau for row in rows]
        axes.plot(taus, [row.net for row in rows], marker="o", linewidth=2, label="net (fix - break)")
        axes.plot(taus, [row.fix for row in rows], marker=".", linestyle="--", label="fix")
        axes.plot(taus, [row.break_ for row in rows], marker=".", linestyle=":", label="break")
        axes.axhline(0, color="grey", linewidth=0.8)
        axes.axvline(default, color="tab:red", linewidth=1, linestyle="-.", label=f"default {default:g}")
        axes.set_xlabel(name)
        axes.set_ylabel("queries (Multiset-EX)")
        axes.legend(fontsize="small")
        axes.grid(alpha=0.3)
    n = report.evaluation.n
    figure.suptitle(f"Net Multiset-EX gain against threshold{f' ({title})' if title else ''}, N={n}")
    figure.savefig(str(path), format="png")
