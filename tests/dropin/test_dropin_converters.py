"""Drop-in parity, converters (``detect_types``): values convert as with sqlite3, and the documented
fetch-once difference: a failing converter raises at execute on a guarded cursor, at fetch on sqlite3.

Each test runs the same operations on a raw ``sqlite3`` connection and on a guarded one holding the
same data wherever it can, and compares what comes back (values, exception class and message):
``guard="observe"`` must match sqlite3 exactly, ``guard="patch"`` must match on queries the probe does
not flag. Fixtures (``mode``, ``raw_items``, ``guarded_items``, ``observe_items``) are in conftest.py,
the items table and helpers in helpers.py.
"""

from __future__ import annotations

import sqlite3
import sqlite3.dbapi2
from collections.abc import Iterator
from typing import Any

import pytest

import guarded_sqlite
from tests.helpers import (
    MODES,
)


@pytest.fixture
def converters() -> Iterator[None]:
    """Register test converters in sqlite3's global registry and remove them afterwards."""

    def picky(value: bytes) -> int:
        if value == b"2":
            raise ValueError("converter refused row 2")
        return int(value) * 10

    sqlite3.register_converter("GS_PICKY", picky)
    sqlite3.register_converter("GS_TENFOLD", lambda value: int(value) * 10)
    yield
    for name in ("GS_PICKY", "GS_TENFOLD"):
        sqlite3.converters.pop(name, None)


def picky_table(con: Any) -> None:
    con.execute("CREATE TABLE p (v GS_PICKY, w GS_TENFOLD)")
    con.executemany("INSERT INTO p VALUES (?, ?)", [(1, 1), (2, 2), (3, 3)])


@pytest.mark.parametrize(
    ("detect_types", "sql"),
    [
        (sqlite3.PARSE_DECLTYPES, "SELECT w FROM p ORDER BY w"),
        (sqlite3.PARSE_COLNAMES, 'SELECT v AS "v [GS_TENFOLD]" FROM p ORDER BY v'),
    ],
    ids=["decltypes", "colnames"],
)
def test_converters_apply_like_sqlite3(converters: None, mode: str, detect_types: int, sql: str) -> None:
    """register_converter + detect_types convert values the same way through the guard."""
    raw = sqlite3.connect(":memory:", detect_types=detect_types)
    con = guarded_sqlite.connect(":memory:", detect_types=detect_types, guard=mode)
    picky_table(raw)
    picky_table(con)
    cur = con.execute(sql)
    assert cur.description == raw.execute(sql).description
    assert cur.fetchall() == raw.execute(sql).fetchall() == [(10,), (20,), (30,)]


def test_fetch_once_difference_sqlite3_raises_converter_error_at_fetch(converters: None) -> None:
    """sqlite3 side of the documented difference: execute() succeeds and the first row arrives; the
    converter's error for row 2 surfaces at the fetch that reaches it."""
    raw = sqlite3.connect(":memory:", detect_types=sqlite3.PARSE_DECLTYPES)
    picky_table(raw)
    cur = raw.execute("SELECT v FROM p ORDER BY v")
    assert cur.fetchone() == (10,)
    with pytest.raises(ValueError, match="converter refused row 2"):
        cur.fetchone()


@pytest.mark.parametrize("guard", MODES)
def test_fetch_once_difference_guarded_raises_converter_error_at_execute(converters: None, guard: str) -> None:
    """guarded_sqlite side of the documented difference: rows are fetched during execute(), so the
    same converter error surfaces there (same exception), and the report records it."""
    con = guarded_sqlite.connect(":memory:", detect_types=sqlite3.PARSE_DECLTYPES, guard=guard)
    picky_table(con)
    cur = con.cursor()
    with pytest.raises(ValueError, match="converter refused row 2"):
        cur.execute("SELECT v FROM p ORDER BY v")
    assert cur.guard_report is not None and cur.guard_report.trigger == "exec_error"
    assert cur.guard_report.error == "ValueError: converter refused row 2"
