"""Threshold sweeps for the patch rules (the paper's Tables 5 and 6) and their cross-validation.

For each ``tau_inject`` of the P1 grid (P2 off) and each ``tau_remove`` of the P2 grid (P1 off), the
predictions a rule could change are replayed through the guard with that policy, and fix/break/net
counted where the rule rewrote the query. Predictions that cannot change are never replayed: P1 needs
``dup_ratio >= tau`` (so only results with duplicates are candidates, and only at thresholds they
reach), and P2 needs an outermost DISTINCT (so only SQL that mentions it). The grids' base policy is
the ``"paper"`` preset unless ``guard=`` says otherwise; under ``"text_to_sql"`` a third grid sweeps
``tau_amplified`` (P1 on join amplification below ``tau_inject``).

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

from .._extras import install_hint
from ..policy import DEFAULT_POLICY, GuardSpec
from . import metrics
from .loaders import InputError, PathLike, check_output_file
from .options import SweepGrid, resolve_engine, resolve_sweep_policy
from .records import SweepOutcome
from .replay import AMPLIFIED_RULE
from .runner import run
from .sweep_report import CrossValidation, Fold, SweepReport, SweepRow

DEFAULT_P1_TAUS: tuple[float, ...] = tuple(round(0.05 * step, 2) for step in range(20))
"""0.00, 0.05, ..., 0.95 (the deployed 0.80 included); 0.00 means "any duplicate row"."""

DEFAULT_P2_TAUS: tuple[float, ...] = tuple(round(0.05 * step, 2) for step in range(1, 11))
"""0.05, 0.10, ..., 0.50."""

DEFAULT_AMPLIFIED_TAUS: tuple[float, ...] = tuple(round(0.05 * step, 2) for step in range(1, 17))
"""0.05, 0.10, ..., 0.80 (``"text_to_sql"`` only). At ``tau_inject`` (0.80) the rule below it is off, so
the grid's strictest point is the ``"patch"`` preset's P1."""

PLOT_HINT = f"plotting needs matplotlib: {install_hint('plot')}"


class PlotUnavailable(ImportError):
    """matplotlib is not installed, so ``--plot`` cannot draw."""


def check_grid(taus: Iterable[float], rule: str) -> tuple[float, ...]:
    """The grid sorted and de-duplicated; every tau must be in [0, 1) (``tau_amplified``'s in (0, 1))."""
    grid = tuple(sorted({round(float(tau), 6) for tau in taus}))
    if not grid:
        raise InputError(f"the {rule} threshold grid is empty")
    positive = rule == AMPLIFIED_RULE
    for tau in grid:
        if not (0.0 < tau < 1.0 if positive else 0.0 <= tau < 1.0):
            raise InputError(f"{rule} thresholds must be in {'(0, 1)' if positive else '[0, 1)'}, not {tau!r}")
    return grid


def sweep_table(outcomes: Iterable[SweepOutcome], taus: Sequence[float]) -> tuple[SweepRow, ...]:
    """Fired/fix/break/net per threshold, from one rule's fired outcomes."""
    by_tau: dict[float, list[tuple[bool, bool, bool, bool]]] = defaultdict(list)
    for o in outcomes:
        by_tau[o.tau].append((o.baseline_set, o.baseline_multiset, o.set_ex, o.multiset_ex))
    return tuple(metrics.sweep_row(tau, by_tau.get(tau, ())) for tau in taus)


def _stricter_first(taus: Sequence[float], rule: str) -> list[float]:
    # P1 fires less as tau_inject (or tau_amplified) rises; P2 fires less as tau_remove falls.
    return sorted(taus, reverse=(rule != "P2"))


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
    guard: GuardSpec = "paper",
    amplified_taus: Iterable[float] | None = None,
    *,
    mysql_url: str | None = None,
    mysql_db_prefix: str = "spider_",
    mysql_collation: str | None = None,
) -> SweepReport:
    """Sweep P1's ``tau_inject`` and P2's ``tau_remove``, cross-validate both, optionally plot.

    ``guard``: the base policy of the grids, ``"paper"`` (default: the paper's literal rules, whose
    tables 5 and 6 the grids reproduce), ``"patch"``, ``"text_to_sql"`` or a ``GuardPolicy`` in mode
    ``"patch"``; each threshold's policy is the base with that threshold and the other rule off. Under
    ``"text_to_sql"`` the sweep adds the grid of ``tau_amplified`` (``amplified_taus``, default
    0.05..0.80; P1 on join amplification below ``tau_inject``, P2 off) and its leave-one-database-out CV.

    Takes the same inputs as ``evaluate`` (engine options included); the returned report also holds
    the ordinary evaluation at the base policy's operating point, from the same run. ``plot`` writes a
    PNG of net gain against the threshold (needs matplotlib: ``pip install 'guarded-sqlite[plot]'``;
    checked before any query runs).
    """
    base = resolve_sweep_policy(guard)
    with_amplified = base.provenance == "text_to_sql"
    if amplified_taus is not None and not with_amplified:
        raise InputError("a tau_amplified grid (--amplified-taus) needs guard 'text_to_sql'")
    grid = SweepGrid(
        check_grid(p1_taus, "P1"),
        check_grid(p2_taus, "P2"),
        check_grid(DEFAULT_AMPLIFIED_TAUS if amplified_taus is None else amplified_taus, AMPLIFIED_RULE)
        if with_amplified
        else (),
    )
    spec = resolve_engine(engine, pg_dsn, cache_dir, pg_schema_prefix, mysql_url, mysql_db_prefix, mysql_collation)
    if plot is not None:
        require_matplotlib()
        check_output_file(plot, "plot=")  # before the run, which a bad path would waste
    evaluation, results = run(db_root, gold, pred, base, timeout, workers, exclude_db, progress, grid, engine=spec)
    outcomes = [o for result in results for o in result.outcomes]
    by_rule: dict[str, list[SweepOutcome]] = defaultdict(list)
    for o in outcomes:
        by_rule[o.rule].append(o)

    def candidates(rule: str) -> int:
        return sum(result.candidates.get(rule, 0) for result in results)

    report = SweepReport(
        evaluation=evaluation,
        p1=sweep_table(by_rule["P1"], grid.p1),
        p2=sweep_table(by_rule["P2"], grid.p2),
        p1_cv=loo_cv(by_rule["P1"], grid.p1, "P1"),
        p2_cv=loo_cv(by_rule["P2"], grid.p2, "P2"),
        p1_candidates=candidates("P1"),
        p2_candidates=candidates("P2"),
        replays=sum(result.replays for result in results),
        outcomes=tuple(sorted(outcomes, key=lambda o: (o.rule, o.tau, o.index))),
        plot=None if plot is None else str(plot),
        guard=base.preset,
        amplified=sweep_table(by_rule[AMPLIFIED_RULE], grid.amplified) if with_amplified else (),
        amplified_cv=loo_cv(by_rule[AMPLIFIED_RULE], grid.amplified, AMPLIFIED_RULE) if with_amplified else None,
        amplified_candidates=candidates(AMPLIFIED_RULE),
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

    grids = [
        (report.p1, "P1 DISTINCT injection: tau_inject", DEFAULT_POLICY.tau_inject),
        (report.p2, "P2 DISTINCT removal: tau_remove", DEFAULT_POLICY.tau_remove),
    ]
    if report.amplified:
        grids.append((report.amplified, "P1 on amplification: tau_amplified", DEFAULT_POLICY.tau_amplified))
    figure = Figure(figsize=(5 * len(grids), 4), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    panels = figure.subplots(1, len(grids))
    for axes, (rows, name, default) in zip(panels, grids):
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
