"""The unit of work sent to a worker process, and what comes back: both small and picklable."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..policy import GuardPolicy
from .loaders import Pair
from .options import SQLITE_ENGINE, EngineSpec, SweepGrid
from .records import GoldDifference, GoldFailure, PairRecord, SweepOutcome


@dataclass(frozen=True)
class Task:
    """A chunk of pairs on one database, executed by one worker."""

    db_path: str
    """The SQLite database file."""

    pairs: tuple[Pair, ...]
    """The pairs, with identical gold SQL kept in the same chunk so it runs once."""

    policy: GuardPolicy
    """The guard policy of the evaluation."""

    timeout: float | None
    """Per-query timeout in seconds; None for none."""

    grid: SweepGrid | None
    """Sweep thresholds, or None for a plain evaluation."""

    engine: EngineSpec = SQLITE_ENGINE
    """The engine the queries run on."""

    target: str | None = None
    """DuckDB: the copy's file; PostgreSQL: the copy's schema; MySQL: the copy's database; None on SQLite."""

    names: frozenset[str] = frozenset()
    """The database's table and column names, for transpiling (SQLite's double-quoted strings)."""


@dataclass
class TaskResult:
    """What a worker sends back for one task: compact records, never rows."""

    records: list[PairRecord] = field(default_factory=list)
    gold_failures: list[GoldFailure] = field(default_factory=list)
    gold_differences: list[GoldDifference] = field(default_factory=list)
    outcomes: list[SweepOutcome] = field(default_factory=list)
    candidates: dict[str, int] = field(default_factory=dict)
    """Per sweep rule: predictions replayed for it (at one threshold or more)."""
    replays: int = 0
    queries: int = 0
    gold_s: float = 0.0
    pred_s: float = 0.0
    rerun_s: float = 0.0
    transpile_s: float = 0.0
    candidates_dropped: int = 0
