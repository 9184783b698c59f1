"""A user's script, type-checked with ``mypy --strict`` by tests/package/test_typing.py (and run by it): what
the guarded API's type hints promise, checked with ``assert_type``."""

from __future__ import annotations

import sqlite3
import sys
from contextlib import AbstractContextManager
from typing import Any

import guarded_sqlite
from guarded_sqlite import GuardedSQLiteConnection, GuardedSQLiteCursor, GuardPolicy, GuardReport

if sys.version_info >= (3, 11):
    from typing import assert_type
else:
    from typing_extensions import assert_type


class AuditedConnection(sqlite3.Connection):
    audited = True


class TaggedCursor(sqlite3.Cursor):
    tag = "tagged"


def main() -> None:
    findings: list[GuardReport] = []
    con = guarded_sqlite.connect(":memory:", guard=GuardPolicy(on_report=findings.append))
    assert_type(con, GuardedSQLiteConnection)
    assert isinstance(con, sqlite3.Connection)  # the type says so, and so does the object
    con.executescript("CREATE TABLE t (id INTEGER PRIMARY KEY, x INTEGER); INSERT INTO t (x) VALUES (1), (1);")

    cursor = con.cursor()
    assert_type(cursor, GuardedSQLiteCursor)
    assert_type(cursor.execute("SELECT x FROM t WHERE id = ?", (1,)), GuardedSQLiteCursor)
    assert_type(con.execute("SELECT x FROM t"), GuardedSQLiteCursor)
    rows: list[Any] = con.execute("SELECT x FROM t").fetchall()
    assert rows == [(1,), (1,)]

    report = cursor.guard_report
    assert_type(report, GuardReport | None)
    assert report is not None and report.trigger is None  # narrowing works: report is a GuardReport here
    ratio: float | None = report.dup_ratio
    assert ratio == 0.0
    assert_type(con.guard_report, GuardReport | None)
    assert_type(con.guard_policy, GuardPolicy)

    scope = con.guard_scope("observe")
    assert_type(scope, AbstractContextManager[None])
    with scope:
        assert con.execute("SELECT 1").guard_report is not None

    tagged = con.cursor(TaggedCursor)
    assert_type(tagged, TaggedCursor)
    assert tagged.tag == "tagged"

    audited = guarded_sqlite.connect(":memory:", factory=AuditedConnection)
    assert_type(audited, AuditedConnection)
    assert audited.audited

    proxy = guarded_sqlite.wrap(sqlite3.connect(":memory:"), guard="text_to_sql")
    assert_type(proxy, GuardedSQLiteConnection)
    assert isinstance(proxy, GuardedSQLiteConnection)  # a wrapt proxy, and isinstance agrees with its type
    assert_type(proxy.execute("SELECT 1").guard_report, GuardReport | None)
    assert_type(guarded_sqlite.unwrap(proxy), sqlite3.Connection)

    class NotAConnection:
        pass

    other = NotAConnection()
    assert_type(guarded_sqlite.unwrap(other), NotAConnection)
    # The sink saw every statement above (executescript included), none of them flagged.
    assert len(findings) == 4 and not any(finding.flagged for finding in findings)


if __name__ == "__main__":
    main()
    print("ok")
