"""Code the type hints must reject (tests/package/test_typing.py expects mypy --strict to report exactly the
lines marked ``# error``): if the API were typed ``Any``, mypy would accept all of it."""

from __future__ import annotations

import sqlite3

import guarded_sqlite

guarded_sqlite.connect(":memory:", guard="loud")  # error: not a preset
guarded_sqlite.connect(":memory:", timeout="soon")  # error: timeout is a number
con = guarded_sqlite.connect(":memory:")
trigger = con.execute("SELECT 1").guard_report.trigger  # error: the report may be None
typo = con.execute("SELECT 1").guard_reprot  # error: no such attribute
con.guard_scope(0.5)  # error: not a preset or a policy
con.cursor().execute("SELECT 1", candidates=[1, 2])  # error: candidates are SQL strings
plain: sqlite3.Cursor = con.cursor()
plain_report = plain.guard_report  # error: a plain sqlite3.Cursor has no report
raw = guarded_sqlite.unwrap(guarded_sqlite.wrap(sqlite3.connect(":memory:")))
raw_report = raw.guard_report  # error: unwrap() gives the driver's connection back
