"""guarded_sqlite: a drop-in ``sqlite3.connect`` that probes every query result for duplicate
explosions, empty results and errors, and repairs explosions with DISTINCT patches.

``import guarded_sqlite as sqlite3`` works for ordinary code: the DB-API module attributes, exception
classes, ``Row``, adapters, converters and constants of :mod:`sqlite3` are re-exported here, and
``connect`` returns a guarded connection.
"""

# No ``from __future__ import annotations`` and no plain ``typing`` names here: each would be an attribute
# of the package (``guarded_sqlite.Any`` was one), beside sqlite3's names and ``__all__``.
import sqlite3 as _sqlite3
from sqlite3 import (
    PARSE_COLNAMES,
    PARSE_DECLTYPES,
    Binary,
    Connection,
    Cursor,
    DatabaseError,
    DataError,
    Date,
    DateFromTicks,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    PrepareProtocol,
    ProgrammingError,
    Row,
    Time,
    TimeFromTicks,
    TimestampFromTicks,
    Warning,
    adapt,
    adapters,
    apilevel,
    complete_statement,
    converters,
    enable_callback_tracebacks,
    paramstyle,
    register_adapter,
    register_converter,
    sqlite_version,
    sqlite_version_info,
    threadsafety,
)
from typing import TYPE_CHECKING as _TYPE_CHECKING

from ._api import connect, install, uninstall, unwrap, wrap
from ._core.lazy import lazy_exports as _lazy_exports
from ._guard.decide import GuardedConnection, GuardedCursor
from ._io.sqlite_fast import GuardedSQLiteConnection, GuardedSQLiteCursor
from ._version import __version__
from .errors import TransactionLost
from .policy import GuardPolicy
from .report import GuardReport, RuleDecision

if _TYPE_CHECKING:
    from .evaluation import evaluate
    from .findings import AggregateFinding
    from .rescue import DupRatioSelector, LLMRescue, RescueChoice, RescueReport, RescueRequest

# Loaded on first use, so that ``import guarded_sqlite`` stays close to ``import sqlite3``.
_LAZY = {
    "AggregateFinding": "findings",
    "evaluate": "evaluation",
    "DupRatioSelector": "rescue",
    "LLMRescue": "rescue",
    "RescueChoice": "rescue",
    "RescueReport": "rescue",
    "RescueRequest": "rescue",
}


__getattr__ = _lazy_exports(__name__, _LAZY, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "DupRatioSelector",
    "GuardPolicy",
    "GuardReport",
    "GuardedConnection",
    "GuardedCursor",
    "GuardedSQLiteConnection",
    "GuardedSQLiteCursor",
    "LLMRescue",
    "RescueChoice",
    "RescueReport",
    "RescueRequest",
    "RuleDecision",
    "TransactionLost",
    "connect",
    "evaluate",
    "install",
    "uninstall",
    "unwrap",
    "wrap",
]

# Whatever else this Python's sqlite3 offers (SQLITE_* constants, Blob, ...), without triggering the
# deprecation warnings that module-level __getattr__ hooks raise for retired names.
globals().update(
    {name: value for name, value in vars(_sqlite3.dbapi2).items() if not name.startswith("_") and name not in globals()}
)
