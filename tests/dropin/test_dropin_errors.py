"""Drop-in parity, execution errors: execute/executemany/executescript errors and wrong argument counts
raise sqlite3's exception class and message, and off mode passes rows through with a report per
statement.

Each test runs the same operations on a raw ``sqlite3`` connection and on a guarded one holding the
same data wherever it can, and compares what comes back (values, exception class and message):
``guard="observe"`` must match sqlite3 exactly, ``guard="patch"`` must match on queries the probe does
not flag. Fixtures (``mode``, ``raw_items``, ``guarded_items``, ``observe_items``) are in conftest.py,
the items table and helpers in helpers.py.
"""

from __future__ import annotations

import sqlite3
import sqlite3.dbapi2
from collections.abc import Callable
from typing import Any

import pytest

from guarded_sqlite import GuardedConnection
from tests.helpers import (
    NO_PARAMS,
    guarded_connect,
    outcome,
    run,
)

ERROR_CASES = [
    pytest.param("SELECT * FROM nope", NO_PARAMS, id="no-such-table"),
    pytest.param("SELECT nope FROM items", NO_PARAMS, id="no-such-column"),
    pytest.param("SELEC 1", NO_PARAMS, id="syntax-error"),
    pytest.param("SELECT ?, ?", (1,), id="too-few-bindings"),
    pytest.param("SELECT ?", (1, 2), id="too-many-bindings"),
    pytest.param("SELECT ?", NO_PARAMS, id="missing-parameters"),
    pytest.param("SELECT :a", {"b": 1}, id="missing-named-binding"),
    pytest.param("SELECT ?", {"a": 1}, id="dict-for-qmark"),
    pytest.param("SELECT 1; SELECT 2", NO_PARAMS, id="two-statements"),
    pytest.param(123, NO_PARAMS, id="sql-not-str"),
    pytest.param(b"SELECT 1", NO_PARAMS, id="sql-bytes"),
    pytest.param("SELECT ?", 5, id="parameters-not-a-sequence"),
    pytest.param("SELECT 1", None, id="parameters-none"),
    pytest.param("SELECT ?", (object(),), id="unsupported-parameter-type"),
    pytest.param("INSERT INTO items (id, name) VALUES (1, 'dup')", NO_PARAMS, id="integrity-unique"),
    pytest.param("INSERT INTO items (id, name) VALUES (500, NULL)", NO_PARAMS, id="integrity-not-null"),
    pytest.param("SELECT 1 FROM items WHERE id = 1 AND", NO_PARAMS, id="incomplete"),
]


@pytest.mark.parametrize(("sql", "params"), ERROR_CASES)
def test_execution_errors_match_sqlite3(
    raw_items: sqlite3.Connection, guarded_items: GuardedConnection, sql: Any, params: Any
) -> None:
    """A failing execute raises sqlite3's exception class and message (on the cursor and on the
    connection shortcut), and ``guard_report`` records ``exec_error`` with that error."""
    expected = outcome(lambda: run(raw_items.cursor(), sql, params))
    assert expected[0] == "raised"
    assert outcome(lambda: run(guarded_items, sql, params)) == expected
    cur = guarded_items.cursor()
    cur.execute("SELECT 1")
    assert outcome(lambda: run(cur, sql, params)) == expected
    report = cur.guard_report
    assert report is not None
    assert report.trigger == "exec_error" and report.flagged
    assert report.error == f"{expected[1].__name__}: {expected[2]}"
    assert report.sql == sql and report.probed is False and report.action == "none"
    assert cur.fetchall() == []  # like sqlite3: the failed statement leaves nothing to fetch


@pytest.mark.parametrize(
    ("method", "args"),
    [
        pytest.param("executemany", ("INSERT INTO nope VALUES (?)", [(1,)]), id="executemany-no-table"),
        pytest.param("executemany", ("SELECT ?", [(1,)]), id="executemany-select"),
        pytest.param(
            "executemany", ("INSERT INTO items (id, name) VALUES (?, ?)", [(1, "dup")]), id="executemany-integrity"
        ),
        pytest.param("executemany", ("INSERT INTO items (name) VALUES (?)", 5), id="executemany-not-iterable"),
        pytest.param("executescript", ("SELECT 1; SELEC 1;",), id="executescript-syntax"),
        pytest.param("executescript", (42,), id="executescript-not-str"),
    ],
)
def test_executemany_and_executescript_errors_match_sqlite3(
    raw_items: sqlite3.Connection, guarded_items: GuardedConnection, method: str, args: tuple[Any, ...]
) -> None:
    """executemany/executescript raise sqlite3's error and the report says exec_error."""
    expected = outcome(lambda: getattr(raw_items.cursor(), method)(*args))
    assert expected[0] == "raised"
    assert outcome(lambda: getattr(guarded_items, method)(*args)) == expected
    cur = guarded_items.cursor()
    assert outcome(lambda: getattr(cur, method)(*args)) == expected
    assert cur.guard_report is not None and cur.guard_report.trigger == "exec_error"
    assert cur.guard_report.error == f"{expected[1].__name__}: {expected[2]}"


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda c: c.execute(), id="execute-no-args"),
        pytest.param(lambda c: c.execute("SELECT 1", (), 3), id="execute-too-many-args"),
        pytest.param(lambda c: c.executemany("SELECT 1"), id="executemany-missing-params"),
        pytest.param(lambda c: c.cursor().execute(), id="cursor-execute-no-args"),
        pytest.param(lambda c: c.cursor().fetchone(1), id="fetchone-with-arg"),
        pytest.param(lambda c: c.cursor().fetchall(1), id="fetchall-with-arg"),
    ],
)
def test_wrong_number_of_arguments_matches_sqlite3(
    raw_items: sqlite3.Connection, observe_items: GuardedConnection, call: Callable[[Any], Any]
) -> None:
    """Calling a method with the wrong number of arguments raises sqlite3's TypeError.

    The message is Python's own for the proxy's method signature (it names the method and says what
    was missing or extra) rather than sqlite3's C wording; the exception class is the contract."""
    expected = outcome(lambda: call(raw_items))
    assert expected[:2] == ("raised", TypeError)
    got = outcome(lambda: call(observe_items))
    assert got[:2] == ("raised", TypeError)
    method = str(expected[2]).split("(")[0].split()[0].split(".")[-1]
    assert method in str(got[2]) and ("argument" in str(got[2]))


def test_off_mode_passes_rows_through_and_reports_each_statement(raw_items: sqlite3.Connection) -> None:
    """guard="off" serves sqlite3's rows unprobed; its report (and that after an error) describes the
    statement just executed."""
    con = guarded_connect("off")
    cur = con.cursor()
    cur.execute("SELECT * FROM items ORDER BY id")
    assert cur.fetchall() == raw_items.execute("SELECT * FROM items ORDER BY id").fetchall()
    assert cur.guard_report is not None and cur.guard_report.probed is False and cur.guard_report.mode == "off"
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        cur.execute("SELECT * FROM nope")
    assert cur.guard_report is not None
    assert cur.guard_report.sql == "SELECT * FROM nope"
