"""The pre-grouped aggregate check (``guarded_sqlite._analysis.pregroup``): where it applies, that it
computes the grouped check's rows, that the guard runs it only where the statement scans the
pre-grouped table whole, and the generated oracle on shapes it applies to."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
import sqlglot
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

import guarded_sqlite
from guarded_sqlite._analysis.aggregates import plan_aggregates
from guarded_sqlite._analysis.schema import read_sqlite_schema
from tests.rules.test_aggregate_fanout import (
    FLOATS,
    GROUP_VALUES,
    NUMBERS,
    SHOP,
    AggQuery,
    Db,
    Tbl,
    _close,
    _filter,
    _group,
    _value_agg,
    check_risky,
    open_raw,
)

FANOUT = (
    "SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id "
    "JOIN items i ON i.order_id = o.id GROUP BY c.id"
)


@pytest.fixture
def shop() -> Any:
    con = sqlite3.connect(":memory:")
    con.executescript(SHOP)
    yield con
    con.close()


def _plan(con: sqlite3.Connection, sql: str) -> Any:
    return plan_aggregates(sqlglot.parse_one(sql, read="sqlite"), read_sqlite_schema(con))


def test_the_one_table_repeating_the_argument_is_counted_before_the_join(shop: sqlite3.Connection) -> None:
    found = _plan(shop, FANOUT)
    assert found.pregrouped is not None
    leaf, corrected, check = found.pregrouped
    assert leaf == "i"
    assert 'JOIN (SELECT "order_id" AS "order_id", COUNT(*) AS "__gs_n" FROM items GROUP BY "order_id") AS "i"' in check
    assert "MIN(" not in check and "MIN(" not in corrected  # the argument as it is: one row per order
    for mine, theirs in ((check, found.check_sql), (corrected, found.corrected_sql)):
        assert sorted(shop.execute(mine).fetchall()) == sorted(shop.execute(theirs).fetchall())


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        pytest.param(FANOUT.replace("JOIN items i", "LEFT JOIN items i"), "a LEFT JOIN", id="left-join"),
        pytest.param(FANOUT.replace("SUM(o.total)", "SUM(o.total), MAX(i.qty)"), "read elsewhere", id="leaf-read"),
        pytest.param(FANOUT + " HAVING COUNT(i.id) > 0", "read elsewhere", id="leaf-in-having"),
        pytest.param(FANOUT.replace("GROUP BY", "WHERE i.qty > 1 GROUP BY"), "read elsewhere", id="leaf-in-where"),
        pytest.param(FANOUT.replace("i.order_id = o.id", "i.order_id = o.id AND i.qty > 0"), "not =", id="on-filter"),
        pytest.param(FANOUT.replace("i.order_id = o.id", "i.order_id = o.total"), "REAL", id="real-column"),
        pytest.param(
            FANOUT.replace("GROUP BY", "JOIN payments p ON p.order_id = o.id GROUP BY"), "two tables repeat", id="two"
        ),
        pytest.param(
            FANOUT.replace("GROUP BY", "WHERE o.id IN (SELECT order_id FROM payments) GROUP BY"),
            "a subquery",
            id="subquery",
        ),
        pytest.param(FANOUT.replace("SUM(o.total)", "SUM(o.total), COUNT(o.id)"), "a COUNT part", id="count-part"),
        pytest.param(
            "SELECT c.name, SUM(c.id) FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.name",
            "",
            id="applies-one-level",
        ),
    ],
)
def test_where_the_pre_grouped_form_does_not_apply(shop: sqlite3.Connection, sql: str, why: str) -> None:
    """Each no-op keeps the grouped check only (``pregrouped`` None); the last case applies."""
    found = _plan(shop, sql)
    assert found.risks, found.note
    if not why:
        assert found.pregrouped is not None
    else:
        assert found.pregrouped is None, why


@pytest.mark.parametrize(
    ("join", "applies"),
    [
        pytest.param("NATURAL JOIN tags", False, id="natural-reads-leaf"),
        pytest.param("JOIN tags USING (order_id, qty)", False, id="using-reads-leaf"),
        pytest.param("NATURAL JOIN regions", True, id="natural-elsewhere"),
        pytest.param("JOIN regions USING (city)", True, id="using-elsewhere"),
    ],
)
def test_a_later_join_comparing_the_leaf_by_name_keeps_the_grouped_check(
    shop: sqlite3.Connection, join: str, applies: bool
) -> None:
    """c20: a NATURAL or USING join compares columns by name, with no Column node; where one of them
    is the leaf's, the pre-grouped leaf (its ON's columns only) would lose the comparison. Where the
    names are other tables' only, the leaf is still pre-grouped, and both checks give the same rows.
    tags is a lookup by order (order_id its key), which NATURAL also matches on qty, an items column."""
    shop.executescript(
        "CREATE TABLE tags (order_id INTEGER PRIMARY KEY, qty INTEGER);"
        "CREATE TABLE regions (city TEXT PRIMARY KEY, zone TEXT);"
        "INSERT INTO tags VALUES (10, 1), (11, 1), (12, 1);"
        "INSERT INTO regions VALUES ('oslo', 'north'), ('rome', 'south');"
    )
    found = _plan(shop, FANOUT.replace("GROUP BY", f"{join} GROUP BY"))
    assert found.risks, found.note
    assert (found.pregrouped is not None) is applies
    if found.pregrouped is not None:
        _, corrected, check = found.pregrouped
        for mine, theirs in ((check, found.check_sql), (corrected, found.corrected_sql)):
            assert sorted(shop.execute(mine).fetchall()) == sorted(shop.execute(theirs).fetchall())


def test_a_collate_in_the_declaration_or_a_text_key_keeps_the_grouped_check() -> None:
    for orders in (
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, total REAL, note TEXT COLLATE NOCASE)",
        "CREATE TABLE orders (id TEXT PRIMARY KEY, customer_id INTEGER, total REAL)",
    ):
        con = sqlite3.connect(":memory:")
        con.executescript(
            "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);"
            f"{orders};"
            "CREATE TABLE items (id INTEGER PRIMARY KEY, order_id INTEGER, qty INTEGER);"
        )
        found = _plan(con, FANOUT)
        assert found.risks and found.pregrouped is None, orders


def _checks_run(con: Any, sql: str, parameters: tuple[Any, ...] = ()) -> list[str]:
    seen: list[str] = []
    con.set_trace_callback(seen.append)
    try:
        report = con.execute(sql, parameters).guard_report
    finally:
        con.set_trace_callback(None)
    assert report.trigger == "aggregate_fanout", report
    return [text for text in seen if "__gs_x0" in text]


def test_the_guard_pre_groups_only_where_the_statement_scans_the_table_whole() -> None:
    con = guarded_sqlite.connect(":memory:")
    con.executescript(SHOP)
    (check,) = _checks_run(con, FANOUT)
    assert "__gs_n" in check  # the statement scans items: grouping it reads what the statement reads
    # With an index the statement looks items up per order; grouping all of them would read more.
    con.execute("CREATE INDEX items_order ON items (order_id)")
    selective = FANOUT.replace("GROUP BY", "WHERE c.id = ? GROUP BY")
    (check,) = _checks_run(con, selective, (1,))
    assert "__gs_n" not in check and "MIN(" in check
    con.close()


def test_a_subquerys_check_of_every_group_is_pre_grouped_where_the_statement_scans_the_table_whole() -> None:
    """Issue 44: a derived table's check of every group (fused with the statement corrected) is the
    pre-grouped one where the statement's query plan scans the repeating table whole, the grouped one
    where it looks its rows up by index; the served rows are the truth either way."""
    con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    con.executescript(SHOP)
    derived = f"SELECT MAX(s) FROM ({FANOUT.replace('SUM(o.total)', 'SUM(o.total) AS s')})"
    (check,) = _checks_run(con, derived)
    assert "__gs_n" in check and 'WITH "__gs_f0"' in check
    assert con.execute(derived).fetchall() == [(150.0,)]
    con.execute("CREATE INDEX items_order ON items (order_id)")
    selective = derived.replace("GROUP BY", "WHERE c.id = ? GROUP BY")
    (check,) = _checks_run(con, selective, (1,))
    assert "__gs_n" not in check and "MIN(" in check
    assert con.execute(selective, (1,)).fetchall() == [(150.0,)]
    con.close()


def test_the_statements_query_plan_is_read_once_for_all_its_selects(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two derived tables at risk, each asking whether the statement scans its repeating table whole:
    one ``EXPLAIN QUERY PLAN`` answers both (SQLite traces no EXPLAIN: the plan cache's calls are counted),
    and both checks of every group are the pre-grouped ones."""
    from guarded_sqlite._analysis import plan_cache

    explained: list[str] = []

    def execute_with(cursor: Any, sql: str, parameters: Any) -> Any:
        explained.append(sql)
        return plan_cache_execute(cursor, sql, parameters)

    plan_cache_execute = plan_cache.execute_with
    monkeypatch.setattr(plan_cache, "execute_with", execute_with)
    con = guarded_sqlite.connect(":memory:")
    con.executescript(SHOP)
    one = FANOUT.replace("SELECT c.name, SUM(o.total)", "SELECT SUM(o.total) AS s").replace(" GROUP BY c.id", "")
    sql = f"SELECT a.s - b.s FROM ({one} WHERE c.id = 1) a, ({one} WHERE c.id = 2) b"
    (check,) = _checks_run(con, sql)
    assert explained == [f"EXPLAIN QUERY PLAN {sql}"]
    assert check.count('"__gs_n"') >= 2 and 'WITH "__gs_f0"' in check and '"__gs_f1"' in check
    con.close()


@pytest.mark.parametrize(
    ("details", "alias", "whole"),
    [
        (["SCAN i", "SEARCH o USING INTEGER PRIMARY KEY (rowid=?)"], "i", True),
        (["SCAN i USING COVERING INDEX items_order"], "i", True),
        (["SCAN o", "SEARCH i USING AUTOMATIC COVERING INDEX (order_id=?)"], "i", True),
        (["SCAN o", "SEARCH i USING INDEX items_order (order_id=?)"], "i", False),
        (["SCAN items_archive"], "items", False),
        (["SCAN CONSTANT ROW"], "i", False),
    ],
)
def test_scans_whole_reads_the_query_plan(details: list[str], alias: str, whole: bool) -> None:
    from guarded_sqlite._analysis.pregroup import scans_whole

    assert scans_whole([(n, 0, 0, detail) for n, detail in enumerate(details)], alias) is whole


# --------------------------------------------------------------------------------------------------
# Generated: customers, orders, items joined by INTEGER columns, with odd join values
# --------------------------------------------------------------------------------------------------

ODD_KEYS = st.sampled_from([None, 999, "abc", "2", 2.5, 1.0, -0.0, b"\x01"])


@st.composite
def pregroup_cases(draw: Any) -> tuple[Db, AggQuery]:
    root_ids = draw(st.lists(st.integers(1, 5), min_size=1, max_size=4, unique=True))
    root = Tbl("root", "int_pk", None, tuple((i, None, draw(GROUP_VALUES), draw(NUMBERS), draw(FLOATS), None)
                                            for i in root_ids))  # fmt: skip
    tables = [root]
    counter = 100
    for number, parent in ((1, root), (2, None)):
        parent = parent or tables[-1]
        rows: list[tuple[Any, ...]] = []
        for parent_id in [*parent.ids(), *draw(st.lists(ODD_KEYS, max_size=2))]:
            for _ in range(draw(st.integers(0, 3))):
                counter += 1
                rows.append((counter, parent_id, draw(GROUP_VALUES), draw(NUMBERS), draw(FLOATS), None))
        tables.append(Tbl(f"kid{number}", "int_pk", parent.name, tuple(rows), draw(st.booleans()), True))
    db = Db(tuple(tables))
    from_sql = "FROM root AS r JOIN kid1 AS c1 ON c1.fk = r.id JOIN kid2 AS c2 ON c2.fk = c1.id"
    q = AggQuery(from_sql, [], [], None, None, [], [], tables={t.name: t for t in tables})
    _group(draw, q, db)
    if draw(st.integers(0, 3)) == 0:
        _filter(draw, q, db)
    q.aggs = [_value_agg(draw, db, {"root", "kid1"}) for _ in range(draw(st.integers(1, 2)))]
    return db, q


@settings(max_examples=200, deadline=None)
@given(case=pregroup_cases())
def test_generated_pre_grouped_checks_compute_the_grouped_checks_rows(case: tuple[Db, AggQuery]) -> None:
    """Odd join values (NULL, no match, text, a real, -0.0, a blob in an INTEGER column) count as the
    join counts them; and the guard, which runs the pre-grouped check here, passes the oracle."""
    db, q = case
    raw = open_raw(db)
    try:
        found = plan_aggregates(sqlglot.parse_one(q.sql, read="sqlite"), read_sqlite_schema(raw))
        event("pre-grouped" if found.pregrouped else "not pre-grouped")
        if found.pregrouped is not None:
            _, corrected_sql, check_sql = found.pregrouped
            note(f"pre-grouped: {check_sql}")
            for mine, theirs in ((check_sql, found.check_sql), (corrected_sql, found.corrected_sql)):
                rows = sorted(raw.execute(mine, q.params).fetchall(), key=repr)
                wanted = sorted(raw.execute(theirs, q.params).fetchall(), key=repr)
                assert len(rows) == len(wanted)
                for a, b in zip(wanted, rows, strict=True):
                    assert all(_close(x, y) for x, y in zip(a, b, strict=True)), (a, b)
    finally:
        raw.close()
    check_risky(db, q)
