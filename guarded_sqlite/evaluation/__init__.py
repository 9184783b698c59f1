"""Evaluation toolkit: score text-to-SQL predictions with Set-EX and Multiset-EX, before and after the guard.

``evaluate`` replays every prediction through ``guarded_sqlite.wrap`` and reports both metrics for the
raw and the guarded results, the probe's flags, each patch rule's fixes and breaks, detector
precision and MBS recall; ``sweep`` adds the threshold sweeps and their cross-validation. The CLI's
``guarded-sqlite eval`` and ``guarded-sqlite sweep`` print the same reports.

Modules: ``loaders`` (input formats and checks), ``metrics`` (pure scoring functions), ``runner``
(execution in worker processes), ``thresholds`` (sweeps, cross-validation, plot), ``report`` (the
frozen result dataclasses), ``render`` and ``progress`` (terminal output).

This module imports nothing heavy: ``import guarded_sqlite`` stays cheap, and the machinery loads
on the first call.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from ..policy import GuardSpec
    from .loaders import GoldItem, InputError, Pair, PathLike, Prediction, load_gold, load_predictions
    from .report import EvalReport, PairRecord, SweepReport
    from .thresholds import PlotUnavailable, sweep

__all__ = [
    "evaluate",
    "sweep",
    "EvalReport",
    "SweepReport",
    "PairRecord",
    "InputError",
    "PlotUnavailable",
    "GoldItem",
    "Prediction",
    "Pair",
    "load_gold",
    "load_predictions",
]


def evaluate(
    db_root: "PathLike",
    gold: Any,
    pred: Any,
    guard: "GuardSpec" = "patch",
    timeout: Optional[float] = 5.0,
    workers: Optional[int] = None,
    exclude_db: Iterable[str] = (),
    progress: Optional[bool] = None,
) -> "EvalReport":
    """Score predictions against gold SQL, raw and through the guard, on ``<db_root>/<db_id>/<db_id>.sqlite``.

    ``gold``: a gold file (BIRD or Spider ``dev.json``, or ``SQL<TAB>db_id`` lines) or a sequence of
    ``GoldItem``/``(sql, db_id)``. ``pred``: a prediction file (one SQL per line, BIRD's JSON, or a
    JSON list/object by index) or a sequence of SQL strings. Counts must match and named db_ids must
    agree, else ``InputError``. ``guard``: ``"patch"``, ``"observe"`` or a ``GuardPolicy``.
    ``timeout``: seconds per query, enforced inside SQLite (None: no limit). ``workers``: processes
    (default: the CPU count; 1 runs in this process). ``exclude_db``: db_ids to leave out.
    ``progress``: draw a bar on stderr (default: when stderr is a terminal).

    Databases are opened read-only. Gold queries that fail or time out are excluded from N and
    listed in ``gold_failures``; failing predictions score 0 and are counted.
    """
    from .runner import run

    report, _ = run(db_root, gold, pred, guard, timeout, workers, exclude_db, progress)
    return report


_LAZY = {
    "sweep": "thresholds",
    "PlotUnavailable": "thresholds",
    "EvalReport": "report",
    "SweepReport": "report",
    "PairRecord": "report",
    "InputError": "loaders",
    "GoldItem": "loaders",
    "Prediction": "loaders",
    "Pair": "loaders",
    "load_gold": "loaders",
    "load_predictions": "loaders",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
