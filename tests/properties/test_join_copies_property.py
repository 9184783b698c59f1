"""Property (hypothesis): under ``"patch"`` the guard serves either sqlite3's rows unchanged, or exactly
sqlite3's rows minus the join copies, and never merges two distinct rows of the projected tables; the
same on MariaDB (its session server, ``tests/mariadb_server.py``).

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
def shops(draw: Any, copies: bool = False) -> dict[str, Any]:
    """A parent table ``p`` with one of ``KEYS``, children ``c`` and others ``d`` referring to it, and a
    statement's shape. ``copies``: every parent has two or three children at least (the join repeats
    it and ``d`` refers to one at least), every statement reads a table, ``p`` has a key (a nullable text
    one, no row identity on MariaDB, in one shop of five), and names that differ only in case (which a
    collation's DISTINCT merges: the guard then keeps the rows) come in one shop of four, so that P1 has
    copies to remove in most examples."""
    key = draw(st.sampled_from(sorted(KEYS) if not copies else ["integer", "unique"] * 2 + ["text"]))
    count = draw(st.integers(1, 6))
    keys: list[Any] = list(range(1, count + 1))
    if key == "text":
        keys = [str(k) for k in keys] + ([None] if draw(st.booleans()) else [])
    if key == "none" and draw(st.booleans()):
        keys = keys + keys[:1]  # a keyless table may repeat a "key"
    values = VALUES if not copies or draw(st.integers(0, 3)) == 0 else st.sampled_from(["Ana", "Ben", None])
    parents = [(k, draw(values)) for k in keys]
    refs = st.sampled_from([*keys, 99])
    children = draw(st.lists(st.tuples(refs, st.sampled_from(["x", "y"])), max_size=12))
    if copies:
        children += [(k, "x") for k in keys for _ in range(draw(st.integers(2, 3)))]
        children = draw(st.permutations(children))
    others = draw(st.lists(refs, max_size=6)) + (keys[:1] if copies else [])
    shapes = ["parent", "both", "left", "constant", "pinned"]
    shape = draw(st.sampled_from(shapes if not copies else ["parent", "both", "left", "pinned"]))
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


# --- the same property on MariaDB ---------------------------------------------------------------------

MARIADB_KEYS = {
    "integer": ("k INTEGER PRIMARY KEY", "INTEGER"),
    "text": ("k VARCHAR(10) UNIQUE", "VARCHAR(10)"),  # may hold NULL: not a row identity
    "unique": ("k INTEGER UNIQUE NOT NULL", "INTEGER"),
    "none": ("k INTEGER", "INTEGER"),  # keyless, and InnoDB's row id cannot be read: nothing to check by
}
MARIADB_STATEMENTS = {
    # (statement, the undeclared unique ``uid`` of each projected table, which the oracle appends)
    "parent": ("SELECT p.v FROM p JOIN c ON c.p_ref = p.k", "p.uid"),
    "both": ("SELECT p.v, c.w FROM p JOIN c ON c.p_ref = p.k JOIN d ON d.p_ref = p.k", "p.uid, c.uid"),
    "left": ("SELECT c.w FROM p LEFT JOIN c ON c.p_ref = p.k LEFT JOIN d ON d.p_ref = p.k", "c.uid"),
    "constant": ("SELECT 'x' FROM p JOIN c ON c.p_ref = p.k", ""),
    "pinned": ("SELECT p.v FROM p JOIN c ON c.p_ref = p.k WHERE c.w = 'x'", "p.uid"),
}


def build_mariadb(raw: Any, shop: dict[str, Any]) -> None:
    key, ref = MARIADB_KEYS[shop["key"]]
    cur = raw.cursor()
    cur.execute(f"CREATE TABLE p (uid INTEGER, {key}, v VARCHAR(10))")
    cur.execute(f"CREATE TABLE c (id INTEGER AUTO_INCREMENT PRIMARY KEY, uid INTEGER, p_ref {ref}, w VARCHAR(5))")
    cur.execute(f"CREATE TABLE d (uid INTEGER, p_ref {ref})")
    uid = iter(range(1, 10_000))
    cur.executemany("INSERT INTO p VALUES (%s, %s, %s)", [(next(uid), k, v) for k, v in shop["parents"]])
    cur.executemany("INSERT INTO c (uid, p_ref, w) VALUES (%s, %s, %s)", [(next(uid), *c) for c in shop["children"]])
    cur.executemany("INSERT INTO d VALUES (%s, %s)", [(next(uid), r) for r in shop["others"]])


ACTING_FLOOR = 0.6
"""The share of the MariaDB property's examples in which the guard must act, counted over the examples
where it can: ``p`` keyed by an integer (a row identity) and the projection reading ``p`` alone (parent,
pinned). Its data has join copies to remove in each (``shops(copies=True)``), so a guard that never acts
fails, where it passed with the guard acting in 5-32% of examples (issue 46 item 5). Over all examples
the share was a draw of hypothesis's (a nullable text key, or a keyless ``d`` read by the projection,
leaves no row identity: nothing to act on), and it fell below the floor in one run of three (23 of 40
"none"); over these it measured 42 of 43, the one left a collation refusal ('Ana' and 'ana')."""


def test_mariadb_patch_serves_the_rows_or_the_rows_without_join_copies(mariadb_params: dict[str, Any]) -> None:
    """The property on MariaDB, where the names 'Ana' and 'ana' are one value to SQL's DISTINCT (the
    default collation) and two to the oracle, and where a keyless table has no row identity; the guard
    acts in at least ``ACTING_FLOOR`` of the examples where it can."""
    import uuid

    import pymysql

    actions: list[tuple[str, str]] = []  # (key and shape, action)

    @settings(max_examples=40, deadline=None)
    @given(shops(copies=True))
    def check(shop: dict[str, Any]) -> None:
        sql, uids = MARIADB_STATEMENTS[shop["shape"]]
        if shop["key"] == "text":
            shop = {**shop, "parents": [(None if k is None else f"k{k}", v) for k, v in shop["parents"]]}
            shop["children"] = [(None if r is None else f"k{r}", w) for r, w in shop["children"]]
            shop["others"] = [None if r is None else f"k{r}" for r in shop["others"]]
        name = f"jc_{uuid.uuid4().hex[:12]}"
        admin = pymysql.connect(**mariadb_params, autocommit=True)
        admin.cursor().execute(f"CREATE DATABASE {name}")
        raw = pymysql.connect(**mariadb_params, database=name, autocommit=True)
        try:
            build_mariadb(raw, shop)
            cur = raw.cursor()
            cur.execute(sql)
            rows = list(cur.fetchall())
            if uids:
                width = len(cur.description)
                cur.execute(sql.replace(" FROM", f", {uids} FROM", 1))
                expected: Counter[tuple[Any, ...]] = Counter()
                seen: set[tuple[Any, ...]] = set()
                for row in cur.fetchall():
                    if all(part is None for part in row[width:]) or row not in seen:
                        expected[row[:width]] += 1
                    seen.add(row)
            else:
                expected = Counter(rows)
            guarded = guarded_sqlite.wrap(raw, guard=guarded_sqlite.GuardPolicy(tau_inject=0.05)).cursor()
            guarded.execute(sql)
            served = list(guarded.fetchall())
            report = guarded.guard_report
            note(f"{sql}: {report.action}, {report.provenance}, {[d.reason for d in report.decisions]}")
            event(f"action {report.action}")
            actions.append((f"{shop['key']} {shop['shape']}", report.action))
            if report.action == "none":
                assert Counter(served) == Counter(rows)
            else:
                assert report.action in ("join_copies_removed", "distinct_injected")
                assert Counter(served) == expected
            counted = Counter(served)
            assert all(counted[value] >= n for value, n in expected.items())
        finally:
            raw.close()
            admin.cursor().execute(f"DROP DATABASE {name}")
            admin.close()

    check()
    eligible = [action for kind, action in actions if kind in _CAN_ACT]
    acted = sum(action != "none" for action in eligible)
    assert acted >= ACTING_FLOOR * len(eligible), Counter(actions)


_CAN_ACT = frozenset(f"{key} {shape}" for key in ("integer", "unique") for shape in ("parent", "pinned"))
