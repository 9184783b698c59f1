"""Drop-in module: ``import guarded_sqlite as sqlite3`` re-exports sqlite3's names (the same objects),
its exception hierarchy, and runs ordinary sqlite3 code unchanged.

Each test runs the same operations on a raw ``sqlite3`` connection and on a guarded one holding the
same data wherever it can, and compares what comes back (values, exception class and message):
``guard="observe"`` must match sqlite3 exactly, ``guard="patch"`` must match on queries the probe does
not flag. Fixtures (``mode``, ``raw_items``, ``guarded_items``, ``observe_items``) are in conftest.py,
the items table and helpers in helpers.py.
"""

from __future__ import annotations

import sqlite3
import sqlite3.dbapi2
from typing import Any

import pytest

import guarded_sqlite

SAME_OBJECTS = [
    "apilevel",
    "paramstyle",
    "threadsafety",
    "sqlite_version",
    "sqlite_version_info",
    "PARSE_DECLTYPES",
    "PARSE_COLNAMES",
    "Row",
    "Connection",
    "Cursor",
    "PrepareProtocol",
    "Binary",
    "Date",
    "Time",
    "Timestamp",
    "DateFromTicks",
    "TimeFromTicks",
    "TimestampFromTicks",
    "register_adapter",
    "register_converter",
    "adapt",
    "adapters",
    "converters",
    "complete_statement",
    "enable_callback_tracebacks",
]
EXCEPTIONS = [
    "Warning",
    "Error",
    "InterfaceError",
    "DatabaseError",
    "DataError",
    "OperationalError",
    "IntegrityError",
    "InternalError",
    "ProgrammingError",
    "NotSupportedError",
]


@pytest.mark.parametrize("name", SAME_OBJECTS + EXCEPTIONS)
def test_module_reexports_sqlite3_names(name: str) -> None:
    """The DB-API module attributes, classes and helpers are sqlite3's very own objects."""
    assert getattr(guarded_sqlite, name) is getattr(sqlite3, name)


def test_module_reexports_the_rest_of_sqlite3() -> None:
    """SQLITE_* constants (and Blob, where it exists) are there with sqlite3's values; connect is ours."""
    constants = [name for name in dir(sqlite3) if name.startswith("SQLITE_")]
    assert "SQLITE_DENY" in constants and "SQLITE_OK" in constants
    for name in constants:
        assert getattr(guarded_sqlite, name) == getattr(sqlite3, name), name
    if hasattr(sqlite3, "Blob"):
        assert guarded_sqlite.Blob is sqlite3.Blob
    assert guarded_sqlite.connect is not sqlite3.connect
    assert guarded_sqlite.apilevel == "2.0" and guarded_sqlite.paramstyle == "qmark"


def test_exception_hierarchy_is_sqlite3s() -> None:
    """Errors raised through the guard are caught by ``except guarded_sqlite.X`` and ``except sqlite3.X``."""
    assert issubclass(guarded_sqlite.IntegrityError, guarded_sqlite.DatabaseError)
    assert issubclass(guarded_sqlite.DatabaseError, guarded_sqlite.Error)
    assert issubclass(guarded_sqlite.Error, Exception) and issubclass(guarded_sqlite.Warning, Exception)
    con = guarded_sqlite.connect(":memory:")
    with pytest.raises(guarded_sqlite.OperationalError):
        con.execute("SELECT * FROM nope")
    with pytest.raises(sqlite3.ProgrammingError):
        con.execute("SELECT ?")


def ordinary_program(db: Any) -> list[Any]:
    """Typical code written against the sqlite3 module, run with ``db`` = sqlite3 or guarded_sqlite."""
    import datetime
    import decimal

    out: list[Any] = [db.apilevel, db.paramstyle, db.threadsafety, db.sqlite_version_info >= (3, 0, 0)]
    db.register_adapter(decimal.Decimal, str)
    con = db.connect(":memory:", detect_types=db.PARSE_DECLTYPES | db.PARSE_COLNAMES)
    con.row_factory = db.Row
    con.execute("CREATE TABLE money (id INTEGER PRIMARY KEY, amount TEXT, day TEXT, raw BLOB)")
    with con:
        con.execute(
            "INSERT INTO money VALUES (?, ?, ?, ?)",
            (1, decimal.Decimal("1.50"), db.Date(2024, 1, 2).isoformat(), db.Binary(b"\x00\x01")),
        )
    try:
        con.execute("INSERT INTO money (id) VALUES (1)")
    except db.IntegrityError as error:
        out.append(("integrity", str(error)))
    try:
        con.execute("SELECT nope FROM money")
    except db.Error as error:
        out.append(("error", type(error).__name__, str(error)))
    row = con.execute("SELECT * FROM money").fetchone()
    out.append((tuple(row.keys()), tuple(row)))
    out.append(db.complete_statement("SELECT 1;"))
    out.append(isinstance(con, db.Connection) and isinstance(con.cursor(), db.Cursor))
    out.append(db.Date is datetime.date and db.Timestamp is datetime.datetime)
    con.close()
    return out


def test_import_guarded_sqlite_as_sqlite3_runs_ordinary_code() -> None:
    """An ordinary sqlite3 program gives the same output when it imports guarded_sqlite instead."""
    try:
        assert ordinary_program(guarded_sqlite) == ordinary_program(sqlite3)
    finally:
        import decimal

        sqlite3.adapters.pop((decimal.Decimal, sqlite3.PrepareProtocol), None)
