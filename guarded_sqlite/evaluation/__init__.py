"""Evaluation toolkit: score text-to-SQL predictions with Set-EX and Multiset-EX, before and after the guard.

``evaluate`` replays every prediction through ``guarded_sqlite.wrap`` and reports both metrics for the
raw and the guarded results, the probe's flags, each patch rule's fixes and breaks (overall and per
duplicate-provenance verdict), detector precision and MBS recall; ``compare`` does so under several
guard presets; ``sweep`` adds the threshold sweeps and their cross-validation. The CLI's
``guarded-sqlite eval`` and ``guarded-sqlite sweep`` print the same reports.

Both run on the SQLite files themselves or, with ``engine="duckdb"``/``"postgres"``/``"mysql"``, on
copies of them in DuckDB, PostgreSQL or MySQL/MariaDB, with every query transpiled from SQLite by
sqlglot; gold results that differ from SQLite's are listed with their likely cause.

Modules: ``loaders`` (input formats and checks), ``options`` (engine, workers, timeout, policy and
rescue options, checked), ``metrics`` (pure scoring functions), ``runner`` (from inputs to report),
``plan`` (tasks and the process pool), ``tasks`` (what a worker gets and returns), ``pairs`` (one
task's pairs, gold and guarded prediction), ``sessions`` (database connections and time limits),
``replay`` (sweep replays), ``compare`` (presets side by side), ``copy`` (SQLite databases copied into
DuckDB, PostgreSQL and MySQL/MariaDB, with ``copy_source``, ``copy_duckdb``, ``copy_postgres`` and
``copy_mysql``), ``gold_differences`` (why a gold result differs from SQLite's),
``transpile`` (SQLite SQL for the other engines), ``thresholds`` (sweeps, cross-validation, plot),
``records`` (per-pair records), ``report`` and ``sweep_report`` (the frozen result dataclasses),
``render`` and ``progress`` (terminal output); ``api`` holds ``evaluate`` itself.

This module imports nothing heavy: ``import guarded_sqlite`` stays cheap, and the machinery loads
on the first call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._core.lazy import lazy_exports
from .api import evaluate

if TYPE_CHECKING:
    from .compare import PresetComparison, compare
    from .loaders import GoldItem, InputError, Pair, Prediction, load_gold, load_predictions
    from .options import RescueOptions
    from .records import DatabaseCopy, PairRecord
    from .report import EvalReport, RescueStats
    from .sweep_report import SweepComparison, SweepReport
    from .thresholds import PlotUnavailable, sweep

__all__ = [
    "DatabaseCopy",
    "EvalReport",
    "GoldItem",
    "InputError",
    "Pair",
    "PairRecord",
    "PlotUnavailable",
    "Prediction",
    "PresetComparison",
    "RescueOptions",
    "RescueStats",
    "SweepComparison",
    "SweepReport",
    "compare",
    "evaluate",
    "load_gold",
    "load_predictions",
    "sweep",
]


_LAZY = {
    "sweep": "thresholds",
    "compare": "compare",
    "PresetComparison": "compare",
    "PlotUnavailable": "thresholds",
    "EvalReport": "report",
    "SweepComparison": "sweep_report",
    "SweepReport": "sweep_report",
    "PairRecord": "records",
    "DatabaseCopy": "records",
    "RescueStats": "report",
    "RescueOptions": "options",
    "InputError": "loaders",
    "GoldItem": "loaders",
    "Prediction": "loaders",
    "Pair": "loaders",
    "load_gold": "loaders",
    "load_predictions": "loaders",
}


__getattr__ = lazy_exports(__name__, _LAZY, globals())
