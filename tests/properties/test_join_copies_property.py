"""Property (hypothesis): under ``"patch"`` the guard serves either sqlite3's rows unchanged, or exactly
sqlite3's rows minus the join copies, and never merges two distinct rows of the projected tables.

The oracle is written from the definition, not from the library: it runs the statement on plain
sqlite3 with the rowid of each projected table appended and keeps one row per distinct combination
of rowids, NULLs of NULL-extended tables included (a row whose rowids are all NULL is its own). Generated schemas
have integer keys, nullable TEXT primary keys (SQLite lets them hold NULL), UNIQUE NOT NULL keys and
keyless tables; values repeat across entities and include NULL.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from typing import Any

from hypothesis import event, example, given, note, settings
from hypothesis import strategies as st

import guarded_sqlite

KEYS = {
    "integer": "k INTEGER PRIMARY KEY",
    "text": "k TEXT PRIMARY KEY",  # may hold NULL: not a row identity (p06)
    "unique": "k INTEGER UNIQUE NOT NULL",
    "none": "k INTEGER",  # keyless: the rowid tells its rows apart
}
VALUES = st.sampled_from(["Ana", "Ben", None, "ana"])


@st.composite
def shops(draw: Any) -> dict[str, Any]:
    key = draw(st.sampled_from(sorted(KEYS)))
    count = draw(st.integers(1, 6))
    keys: list[Any] = list(range(1, count + 1))
    if key == "text":
        keys = [str(k) for k in keys] + ([None] if draw(st.booleans()) else [])
    if key == "none" and draw(st.booleans()):
        keys = keys + keys[:1]  # a keyless table may repeat a "key"
    parents = [(k, draw(VALUES)) for k in keys]
    refs = st.sampled_from([*keys, 99])
    children = draw(st.lists(st.tuples(refs, st.sampled_from(["x", "y"])), max_size=12))
    others = draw(st.lists(refs, max_size=6))
    shape = draw(st.sampled_from(["parent", "both", "left", "constant", "pinned"]))
    return {"key": key, "parents": parents, "children": children, "others": others, "shape": shape}


def build(con: sqlite3.Connection, shop: dict[str, Any]) -> None:
    con.execute(f"CREATE TABLE p ({KEYS[shop['key']]}, v TEXT)")
    con.execute("CREATE TABLE c (id INTEGER PRIMARY KEY, p_ref, w TEXT)")
    con.execute("CREATE TABLE d (p_ref)")
    con.executemany("INSERT INTO p VALUES (?, ?)", shop["parents"])
    con.executemany("INSERT INTO c(p_ref, w) VALUES (?, ?)", shop["children"])
    con.executemany("INSERT INTO d VALUES (?)", [(r,) for r in shop["others"]])


STATEMENTS = {
    # (statement, the projected tables' rowids the oracle appends)
    "parent": ("SELECT p.v FROM p JOIN c ON c.p_ref = p.k", "p.rowid"),
    "both": ("SELECT p.v, c.w FROM p JOIN c ON c.p_ref = p.k JOIN d ON d.p_ref = p.k", "p.rowid, c.rowid"),
    "left": ("SELECT c.w FROM p LEFT JOIN c ON c.p_ref = p.k LEFT JOIN d ON d.p_ref = p.k", "c.rowid"),
    "constant": ("SELECT 'x' FROM p JOIN c ON c.p_ref = p.k", ""),
    "pinned": ("SELECT p.v FROM p JOIN c ON c.p_ref = p.k WHERE c.w = 'x'", "p.rowid"),
}


def without_copies(raw: sqlite3.Connection, sql: str, rowids: str) -> Counter[tuple[Any, ...]]:
    """The oracle: sqlite3's rows of ``sql`` with one row per combination of the projected rowids."""
    if not rowids:
        return Counter(raw.execute(sql).fetchall())  # no table column: nothing but value repeats
    width = len(raw.execute(sql).description)
    checked = raw.execute(sql.replace(" FROM", f", {rowids} FROM", 1)).fetchall()
    kept: Counter[tuple[Any, ...]] = Counter()
    seen: set[tuple[Any, ...]] = set()
    for row in checked:
        identity = row[width:]
        if all(part is None for part in identity) or row not in seen:
            kept[row[:width]] += 1
        seen.add(row)
    return kept


@settings(max_examples=150, deadline=None)
@given(shops())
@example(  # two customers named alike, one of them with three orders: P1 must remove two copies only
    {
        "key": "integer",
        "parents": [(1, "Ana"), (2, "Ana")],
        "children": [(1, "x"), (1, "x"), (1, "x"), (2, "x")],
        "others": [],
        "shape": "parent",
    }
)
def test_patch_serves_the_rows_or_the_rows_without_join_copies(shop: dict[str, Any]) -> None:
    sql, rowids = STATEMENTS[shop["shape"]]
    raw = sqlite3.connect(":memory:")
    build(raw, shop)
    con = guarded_sqlite.connect(":memory:", guard=guarded_sqlite.GuardPolicy(tau_inject=0.05))
    build(con, shop)
    rows = raw.execute(sql).fetchall()
    cur = con.execute(sql)
    served = cur.fetchall()
    report = cur.guard_report
    expected = without_copies(raw, sql, rowids)
    note(f"{sql}: {report.action}, {report.provenance}, {[d.reason for d in report.decisions]}")
    event(f"action {report.action}")
    if report.action == "none":
        assert served == rows
    else:
        assert report.action in ("join_copies_removed", "distinct_injected")
        assert Counter(served) == expected
    # Two distinct projected rows are never merged: every value keeps one row per combination.
    counted = Counter(served)
    assert all(counted[value] >= n for value, n in expected.items())
    raw.close()
    con.close()


def test_the_example_fires() -> None:
    """The explicit example above is a case where P1 must act (a guard that never acts would pass the
    property): two customers named alike, one repeated by its orders."""
    con = guarded_sqlite.connect(":memory:", guard=guarded_sqlite.GuardPolicy(tau_inject=0.05))
    build(
        con,
        {"key": "integer", "parents": [(1, "Ana"), (2, "Ana")], "children": [(1, "x")] * 3 + [(2, "x")], "others": []},
    )
    cur = con.execute(STATEMENTS["parent"][0])
    assert cur.fetchall() == [("Ana",), ("Ana",)] and cur.guard_report.action == "join_copies_removed"
