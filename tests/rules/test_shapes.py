"""One aggregate plan per statement shape (issue 44 item 2, ``guarded_sqlite._analysis.shapes``): the key,
which literals a shared plan may take as opaque, and that a statement served from its shape's plan is
served exactly what planning it as written serves (fixtures, and a hypothesis property on SQLite)."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import guarded_sqlite
from guarded_sqlite._analysis import plan_cache, planning
from guarded_sqlite._analysis.shapes import free_slots, marked, read_shape
from guarded_sqlite._rules import confirmations
from guarded_sqlite._rules.confirmations import REUSED
from guarded_sqlite.report import AGGREGATE_NOT_AT_RISK

JOIN = "SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id"
AT_RISK = JOIN + " JOIN items i ON i.order_id = o.id"


def key(sql: str) -> str | None:
    shape = read_shape(sql)
    return None if shape is None else shape.key


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (f"{AT_RISK} WHERE c.id > 5 GROUP BY c.id", f"{AT_RISK} WHERE c.id > 123 GROUP BY c.id"),
        (f"{AT_RISK} WHERE c.name = 'a' GROUP BY c.id", f"{AT_RISK} WHERE c.name = 'it''s' GROUP BY c.id"),
        (f"{AT_RISK} WHERE o.total < 1.5 GROUP BY c.id", f"{AT_RISK} WHERE o.total < 0.25 GROUP BY c.id"),
        (f"{AT_RISK} WHERE c.id IN (1, 2) LIMIT 3", f"{AT_RISK} WHERE c.id IN (7, 9) LIMIT 4"),
    ],
)
def test_same_shape_other_literals_same_key(one: str, other: str) -> None:
    assert key(one) is not None and key(one) == key(other)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        # identifiers
        (f"{AT_RISK} WHERE c.id > 5 GROUP BY c.id", f"{AT_RISK} WHERE o.id > 5 GROUP BY c.id"),
        (f"{AT_RISK} WHERE c.id > 5 GROUP BY c.id", f'{AT_RISK} WHERE "c".id > 5 GROUP BY c.id'),
        # operators
        (f"{AT_RISK} WHERE c.id > 5 GROUP BY c.id", f"{AT_RISK} WHERE c.id >= 5 GROUP BY c.id"),
        (f"{AT_RISK} WHERE c.id > 5 GROUP BY c.id", f"{AT_RISK} WHERE c.id > -5 GROUP BY c.id"),
        # literal kinds: integer, decimal, string
        (f"{AT_RISK} WHERE c.id > 5 GROUP BY c.id", f"{AT_RISK} WHERE c.id > 5.0 GROUP BY c.id"),
        (f"{AT_RISK} WHERE c.id > 5 GROUP BY c.id", f"{AT_RISK} WHERE c.id > '5' GROUP BY c.id"),
        # how many values
        (f"{AT_RISK} WHERE c.id IN (1, 2) GROUP BY c.id", f"{AT_RISK} WHERE c.id IN (1, 2, 3) GROUP BY c.id"),
        # a comment is part of the text
        (f"{AT_RISK} WHERE c.id > 5 GROUP BY c.id", f"{AT_RISK} WHERE c.id > 5 /* 6 */ GROUP BY c.id"),
    ],
)
def test_other_shapes_other_keys(one: str, other: str) -> None:
    assert key(one) != key(other)


@pytest.mark.parametrize(
    "sql",
    [
        f"{AT_RISK} GROUP BY c.id",  # no literal
        f"{AT_RISK} WHERE c.id > ? GROUP BY c.id",  # parameters are already shapes
        f"{AT_RISK} WHERE c.id > ?1 AND c.name = :n AND o.id = $3 GROUP BY c.id",
        f"{AT_RISK} WHERE c.id > 1e3 AND o.total > .5 AND c.name = x'00' AND o.id > 0x10 GROUP BY c.id",
        f"{AT_RISK} WHERE c.name = E'a' GROUP BY c.id",  # a prefixed string
        f"{AT_RISK} WHERE c.id > 007 GROUP BY c.id",  # a form sqlglot might write otherwise
        f"{AT_RISK} WHERE c.id > 1234567890123456 GROUP BY c.id",  # more digits than a marker
        f"{AT_RISK} WHERE c.name = 'a\\b' GROUP BY c.id",  # a backslash
        f"{AT_RISK} WHERE date(o.day) < date('now') GROUP BY c.id",  # the clock: never shared
        f"{AT_RISK} WHERE c.name = 'a GROUP BY c.id",  # unterminated string
        f"{AT_RISK} WHERE c.id > 5 /* unterminated GROUP BY c.id",  # unterminated comment
        f'{AT_RISK} WHERE "c.id > 5 GROUP BY c.id',  # unterminated quoted name
        f"{AT_RISK} WHERE c.id > 91827364500000 GROUP BY c.id",  # the markers' own text
        f"{AT_RISK} WHERE c.name = '__gs_l0' GROUP BY c.id",
        "SELECT SUM(t1.v) FROM t1 JOIN t2 ON t2.k = t1.k GROUP BY t1.k",  # a number inside a name
    ],
)
def test_no_shape(sql: str) -> None:
    assert read_shape(sql) is None, read_shape(sql)


@pytest.mark.parametrize(
    ("dialect", "where", "slots"),
    [
        # parameters are never slots, whatever their style
        ("postgres", "c.id > %s AND c.name = %(name)s AND o.id > 5", ["5"]),
        ("mysql", "c.id > %s AND c.name = %(name)s AND o.id > 5", ["5"]),
        ("postgres", "c.name LIKE 'c%%' AND c.id > 5", ["'c%%'", "5"]),
        # strings this scan would read otherwise than the engine: no shape
        ("mysql", "c.name = 'it\\'s' AND c.id > 5", None),  # PyMySQL's escaped quote
        ("mysql", "c.name = 'a\\\\' AND c.id > 5", None),
        ("postgres", "c.name = E'it\\'s' AND c.id > 5", None),
        ("postgres", "c.name = 'a\\' AND c.id > 5", None),  # standard_conforming_strings off would escape
        ("postgres", "c.name = $$it's$$ AND c.id > 5", None),
        ("postgres", "c.name = $q$x$q$ AND c.id > 5", None),
        ("postgres", "c.id > 5 /* a /* nested */ ' */ AND c.name = 'x'", None),
        ("mysql", "c.id > 5 # it's\nAND c.name = 'x'", None),  # MySQL's comment to the end of the line
        ("mysql", "c.id > 5--3\nAND c.name = 'x'", None),  # 5 - -3 in MySQL, not a comment
        ("mysql", "c.id > 5 /*!50000 AND c.id < 9 */", None),
        ("mysql", "c.id > 5 /*+ NO_RANGE_OPTIMIZATION(c) */", None),
        # prefixed strings, and MySQL's double-quoted strings, are kept as written (never slots)
        ("postgres", "c.name = U&'x' AND c.id > 5", ["5"]),
        ("postgres", "c.name = E'x' AND c.id > 5", ["5"]),
        ("mysql", "c.name = \"x\" AND c.name <> _utf8mb4'y' AND c.name <> N'z' AND c.id > 5", ["5"]),
        ("mysql", "c.name = 'x' -- a comment\nAND c.id > 5", ["'x'", "5"]),
        # a comment inside a comment ends where MySQL's does (they do not nest there)
        ("mysql", "c.id > 5 /* a /* b */ AND c.name = 'x'", ["5", "'x'"]),
    ],
)
def test_shapes_on_servers_read_as_the_engine_reads(dialect: str, where: str, slots: list[str] | None) -> None:
    shape = read_shape(f"{AT_RISK} WHERE {where} GROUP BY c.id", dialect)
    assert (None if shape is None else list(shape.slots)) == slots


def test_a_free_literal_the_text_planned_does_not_bear_out_is_not_shared() -> None:
    """Were the scan to misread the text (a free literal that is, in the text the plan is made on, no
    comparison's operand), the shape's plan is not shared: the statement is planned as written."""
    from guarded_sqlite._analysis.catalog import schema_view

    con = guarded_sqlite.connect(":memory:")
    _fill(con)
    sql = AT_RISK + " WHERE c.id > 2 GROUP BY c.id ORDER BY 1"
    shape = read_shape(sql)
    assert shape is not None and shape.slots == ("2", "1")
    view = schema_view(con._self_guard)
    view.shapes.put(shape.key, frozenset({0, 1}))  # ORDER BY's position too, as if it had been read as free
    version = plan_cache._safe_stamp(view, con._self_guard)
    assert plan_cache._by_shape(view, sql, shape, version, planning.aggregate_plan) is None
    assert con.execute(sql).guard_report.trigger == "aggregate_fanout"
    assert ("aggregates", sql) in view.verdicts  # planned as written


def free(sql: str) -> list[str]:
    """The literals (as written) ``free_slots`` takes as opaque."""
    shape = read_shape(sql)
    assert shape is not None
    tree = sqlglot.parse_one(marked(shape), read="sqlite")
    return [shape.slots[i] for i in sorted(free_slots(tree, shape))]


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        (f"{AT_RISK} WHERE c.id > 5 AND (o.total < 2.5 OR c.name = 'x') GROUP BY c.id", ["5", "2.5", "'x'"]),
        (f"{AT_RISK} WHERE NOT c.id = 5 GROUP BY c.id HAVING SUM(o.total) > 12", ["5", "12"]),
        (f"{AT_RISK} WHERE c.id IN (1, 2) AND o.total BETWEEN 1 AND 3 GROUP BY c.id", ["1", "2", "1", "3"]),
        (f"{AT_RISK} WHERE c.name LIKE 'a%' AND o.id <> -3 GROUP BY c.id", ["'a%'", "3"]),
        (f"{AT_RISK} WHERE 5 < c.id GROUP BY c.id", ["5"]),
        # fixed: a join condition, positions, LIMIT/OFFSET, select items, aggregate arguments, calls, CASE
        (f"{JOIN} AND o.total > 3 JOIN items i ON i.order_id = o.id GROUP BY c.id", []),
        (f"{AT_RISK} GROUP BY 1 ORDER BY 2 DESC LIMIT 3 OFFSET 1", []),
        ("SELECT c.name, SUM(o.total * 2) + 1, 'x' FROM customers c JOIN orders o ON o.customer_id = c.id", []),
        (f"{AT_RISK} WHERE substr(c.name, 1, 2) = 'ab' GROUP BY c.id", ["'ab'"]),
        (f"{AT_RISK} WHERE CASE WHEN c.id > 3 THEN 1 ELSE 0 END = 1 GROUP BY c.id", ["1"]),  # against an expression
        (f"{AT_RISK} WHERE 1 = 1 AND c.name = 'a' 'b' GROUP BY c.id", []),  # literal = literal; folded
        (f"{AT_RISK} WHERE c.name LIKE 'a!%' ESCAPE '!' GROUP BY c.id", []),
        (f"{AT_RISK} WHERE c.id = (SELECT 5) GROUP BY c.id", []),
    ],
)
def test_free_slots(sql: str, expected: list[str]) -> None:
    assert free(sql) == expected


def _fill(con: Any) -> None:
    con.executescript(
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, region TEXT);"
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, total REAL, status TEXT);"
        "CREATE TABLE items (id INTEGER PRIMARY KEY, order_id INTEGER, qty INTEGER);"
    )
    con.executemany("INSERT INTO customers VALUES (?, ?, ?)", [(c, f"c{c % 7}", "nsew"[c % 4]) for c in range(1, 13)])
    con.executemany(
        "INSERT INTO orders VALUES (?, ?, ?, ?)",
        [(o, o % 12 + 1, (o % 9) * 1.25 - 2, "ab"[o % 2]) for o in range(1, 41)],
    )
    con.executemany("INSERT INTO items VALUES (?, ?, ?)", [(i, i % 43 + 1, i % 5) for i in range(1, 101)])
    con.commit()


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The texts the aggregate plans are made on, in order."""
    made: list[str] = []
    real = planning.aggregate_plan

    def counting(tree: Any, *args: Any, **kwargs: Any) -> Any:
        made.append(tree.sql(dialect="sqlite"))
        return real(tree, *args, **kwargs)

    monkeypatch.setattr(plan_cache, "aggregate_plan", counting)
    yield made


def planned_once_per_shape(con: Any, planned: list[str], head: str = AT_RISK) -> None:
    """Three statements of one shape at risk (``head`` and a WHERE), new in their WHERE literals, are
    planned once (on the marked text); two that differ in LIMIT are two more plans. ``planned``: the
    texts planned so far."""
    sql = head + " WHERE c.id > {} AND o.status = '{}' GROUP BY c.id"
    for bound, status in ((2, "a"), (5, "b"), (7, "a")):
        report = con.execute(sql.format(bound, status)).guard_report
        assert report is not None and report.trigger == "aggregate_fanout"
    assert len(planned) == 1 and "91827364500000" in planned[0] and "'__gs_l1'" in planned[0]
    # a LIMIT is fixed: another value is another plan
    con.execute(sql.format(3, "a") + " LIMIT 2").fetchall()
    con.execute(sql.format(4, "b") + " LIMIT 3").fetchall()
    assert len(planned) == 3


def test_a_statement_new_in_its_literals_is_not_planned_again(counted: list[str]) -> None:
    con = guarded_sqlite.connect(":memory:")
    _fill(con)
    planned_once_per_shape(con, counted)


def test_a_partial_unique_index_is_never_shared(counted: list[str]) -> None:
    """``WHERE o.status = 'a'`` implies the predicate of a unique index on ``orders (customer_id) WHERE
    status = 'a'``: with 'a' the join cannot fan out, with 'b' it can. Each is planned as written."""
    con = guarded_sqlite.connect(":memory:")
    _fill(con)
    con.execute("DELETE FROM orders WHERE status = 'a' AND id > 12")
    con.execute("CREATE UNIQUE INDEX one_open ON orders (customer_id) WHERE status = 'a'")
    sql = (
        "SELECT c.name, SUM(c.id) FROM customers c JOIN orders o ON o.customer_id = c.id "
        "WHERE o.status = '{}' GROUP BY c.id"
    )
    decisions = []
    for status in ("a", "b", "a"):
        report = con.execute(sql.format(status)).guard_report
        assert report is not None
        decisions.append((report.trigger, [d.reason for d in report.decisions]))
    assert decisions[0][0] is None and decisions[1][0] == "aggregate_fanout", decisions
    assert decisions[2][0] is None
    written = [text for text in counted if "'__gs_l" not in text]  # as sqlglot writes them
    assert len(written) == 2 and "'a'" in written[0] and "'b'" in written[1], counted


def _served(con: Any, sql: str) -> tuple[Any, ...]:
    cur = con.execute(sql)
    rows = cur.fetchall()
    report = cur.guard_report
    decisions = tuple((d.rule, d.applied, _reason(d.reason)) for d in report.decisions) if report else ()
    return (rows, [c[0] for c in cur.description or ()], report and report.trigger, decisions)


def _reason(reason: str) -> str:
    """A decision's reason, but for what says where the answer came from: a confirmation kept by the
    first execution (the same text drawn twice) is said to be reused, and a kept plan that puts nothing
    at risk says so rather than why (``plan_cache._SAFE``), as for any statement repeated."""
    return "not at risk" if reason.startswith(AGGREGATE_NOT_AT_RISK) else reason.replace(f"; {REUSED}", "")


_PREDICATES = st.sampled_from(
    [
        "c.id > {i}",
        "c.id <= {i}",
        "o.total < {d}",
        "o.total >= {i}",
        "c.name = {s}",
        "c.region <> {s}",
        "o.status = {s} AND c.id < {i}",
        "c.id IN ({i}, {i})",
        "o.total BETWEEN {d} AND {i}",
        "c.name LIKE {s}",
        "(c.id = {i} OR o.status = {s})",
        # comments around literals: the scan must read them as the engine does
        "c.id > {i} /* 'it''s' {i} */",
        "c.id > {i} -- {s}\n AND o.total < {d}",
    ]
)
# Quoted names too (not on MySQL, whose double quotes make strings).
_PREDICATES_QUOTED = st.one_of(_PREDICATES, st.just('"c".id > {i} AND "o".total < {d} AND c.name <> \'x--y\''))
_TAILS = st.sampled_from(
    [
        " GROUP BY c.id",
        " GROUP BY c.id HAVING SUM(o.total) > {d}",
        " GROUP BY c.id ORDER BY SUM(o.total) DESC, c.id LIMIT {n}",
        " GROUP BY c.region ORDER BY 2, 1",
        " GROUP BY 1 HAVING COUNT(*) > {n}",
    ]
)
_HEADS = st.sampled_from(
    [
        AT_RISK,
        JOIN,
        "SELECT c.region, AVG(o.total), SUM(i.qty) FROM customers c JOIN orders o ON o.customer_id = c.id "
        "JOIN items i ON i.order_id = o.id",
        "SELECT MAX(s) FROM (" + AT_RISK.replace("SUM(o.total)", "SUM(o.total) AS s") + " WHERE c.id > {i}"
        " GROUP BY c.id)",
    ]
)
_LITERALS = st.fixed_dictionaries(
    {
        "i": st.integers(-3, 14).map(str),
        "d": st.sampled_from(["0.5", "1.25", "2.0", "3.75", "10.5"]),
        "s": st.sampled_from(["'c1'", "'n'", "'a'", "'b'", "'c%'", "''", "'it''s'"]),
        "n": st.integers(0, 4).map(str),
    }
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    head=_HEADS,
    predicate=_PREDICATES_QUOTED,
    tail=_TAILS,
    first=_LITERALS,
    second=_LITERALS,
    guard=st.sampled_from(["patch", "text_to_sql"]),
)
def test_a_shape_plan_serves_what_planning_serves(
    head: str, predicate: str, tail: str, first: dict[str, str], second: dict[str, str], guard: str
) -> None:
    """A statement served from the plan its shape made for other literals gets exactly the rows, columns,
    trigger and decisions that a connection planning it as written (no shapes) gives."""
    template = head + ("" if head.startswith("SELECT MAX") else f" WHERE {predicate}{tail}")
    warm = guarded_sqlite.connect(":memory:", guard=guard)
    fresh = guarded_sqlite.connect(":memory:", guard=guard)
    raw = sqlite3.connect(":memory:")
    for con in (warm, fresh, raw):
        _fill(con)
    sql, shaped, planned = _shaped_and_planned(warm, fresh, template, first, second, _served)
    assert shaped == planned
    if guard == "patch":
        assert shaped[0] == raw.execute(sql).fetchall()


_DUCKDB_AT_RISK = AT_RISK.replace("c.name", "c.id", 1)
_DUCKDB_TEMPLATES = st.sampled_from(
    [
        _DUCKDB_AT_RISK + " WHERE {p} GROUP BY c.id",
        _DUCKDB_AT_RISK + " WHERE {p} GROUP BY c.id HAVING SUM(o.total) > {d}",
        _DUCKDB_AT_RISK + " WHERE {p} GROUP BY c.id ORDER BY SUM(o.total) DESC, c.id LIMIT {n}",
        JOIN.replace("c.name", "c.id", 1) + " WHERE {p} GROUP BY c.id",
        "SELECT c.region, AVG(o.total), SUM(i.qty) FROM customers c JOIN orders o ON o.customer_id = c.id "
        "JOIN items i ON i.order_id = o.id WHERE {p} GROUP BY c.region ORDER BY 2, 1",
        "SELECT MAX(s) FROM (" + _DUCKDB_AT_RISK.replace("SUM(o.total)", "SUM(o.total) AS s") + " WHERE {p}"
        " GROUP BY c.id)",
    ]
)


def _duckdb(guard: str | None) -> Any:
    duckdb = pytest.importorskip("duckdb")
    raw = duckdb.connect()
    con = raw if guard is None else guarded_sqlite.wrap(raw, guard=guard)
    con.execute(
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, region TEXT);"
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, total DOUBLE, status TEXT);"
        "CREATE TABLE items (id INTEGER PRIMARY KEY, order_id INTEGER, qty INTEGER);"
    )
    con.executemany("INSERT INTO customers VALUES (?, ?, ?)", [(c, f"c{c % 7}", "nsew"[c % 4]) for c in range(1, 13)])
    con.executemany(
        "INSERT INTO orders VALUES (?, ?, ?, ?)",
        [(o, o % 12 + 1, (o % 9) * 1.25 - 2, "ab"[o % 2]) for o in range(1, 41)],
    )
    con.executemany("INSERT INTO items VALUES (?, ?, ?)", [(i, i % 43 + 1, i % 5) for i in range(1, 101)])
    return con


def _served_unordered(con: Any, sql: str) -> tuple[Any, ...]:
    """``_served`` for DuckDB, whose groups come in any order without ORDER BY: the rows sorted, and the
    values a reason quotes (those of the first group found) left out."""
    rows, names, trigger, decisions = _served(con, sql)
    return (
        sorted(rows, key=repr),
        names,
        trigger,
        tuple((rule, applied, re.sub(r"-?\d[\d.e+-]*", "#", reason)) for rule, applied, reason in decisions),
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    template=_DUCKDB_TEMPLATES,
    predicate=_PREDICATES_QUOTED,
    first=_LITERALS,
    second=_LITERALS,
    guard=st.sampled_from(["patch", "text_to_sql"]),
)
def test_a_shape_plan_serves_what_planning_serves_on_duckdb(
    template: str, predicate: str, first: dict[str, str], second: dict[str, str], guard: str
) -> None:
    """The property above on DuckDB, whose shape plans are kept with its catalog snapshot's verdicts."""
    template = template.replace("{p}", predicate)
    warm, fresh = _duckdb(guard), _duckdb(guard)
    sql, shaped, planned = _shaped_and_planned(warm, fresh, template, first, second, _served_unordered)
    assert shaped == planned
    assert warm._self_guard.catalog.shapes.free  # the shape path was taken
    if guard == "patch":
        assert shaped[0] == sorted(_duckdb(None).execute(sql).fetchall(), key=repr)


@pytest.mark.parametrize(
    ("template", "parameters"),
    [
        (AT_RISK + " WHERE c.id > ? AND o.total < {d} GROUP BY c.id HAVING SUM(o.total) > ?", (2, 1.5)),
        (AT_RISK + " WHERE c.id > ?1 AND o.total < {d} GROUP BY c.id ORDER BY SUM(o.total) DESC LIMIT ?2", (2, 3)),
        (AT_RISK + " WHERE c.id > :low AND c.name <> {s} GROUP BY c.id HAVING SUM(o.total) > :high", None),
        (
            "SELECT MAX(s) FROM (" + AT_RISK.replace("SUM(o.total)", "SUM(o.total) AS s") + " WHERE c.id > ?"
            " AND o.total > {d} GROUP BY c.id HAVING SUM(o.total) > ?) WHERE s < ?",
            (1, 0.5, 100),
        ),
    ],
)
def test_parameters_beside_free_literals(template: str, parameters: Any) -> None:
    """Positional, numbered and named parameters bind as in a statement planned as written: the plan
    holds them where the statement does, and the free literals are written back around them."""
    bound = parameters if parameters is not None else {"low": 2, "high": 1.5}
    warm, fresh = guarded_sqlite.connect(":memory:"), guarded_sqlite.connect(":memory:")
    for con in (warm, fresh):
        _fill(con)
    budget = confirmations.budget
    confirmations.budget = lambda *args: 60.0  # type: ignore[assignment]
    try:
        warm.execute(template.format(d="9.5", s="'zz'"), bound).fetchall()
        sql = template.format(d="2.25", s="'c1'")
        cur = warm.execute(sql, bound)
        shaped = (cur.fetchall(), cur.guard_report.trigger, [_reason(d.reason) for d in cur.guard_report.decisions])
        by_shape = plan_cache._by_shape
        plan_cache._by_shape = lambda *args: None  # type: ignore[assignment]
        try:
            cur = fresh.execute(sql, bound)
            planned = (
                cur.fetchall(),
                cur.guard_report.trigger,
                [_reason(d.reason) for d in cur.guard_report.decisions],
            )
        finally:
            plan_cache._by_shape = by_shape  # type: ignore[assignment]
    finally:
        confirmations.budget = budget  # type: ignore[assignment]
    assert shaped == planned
    assert shaped[1] == "aggregate_fanout" or shaped[2], shaped
    assert warm._self_guard.catalog.shapes.free


def test_shapes_kept_are_bounded() -> None:
    from guarded_sqlite._analysis.shapes import SHAPES, ShapeCache

    cache = ShapeCache()
    for n in range(SHAPES + 10):
        cache.put(f"k{n}", frozenset({n}))
    assert len(cache.free) == SHAPES and cache.get("k0") is None
    assert cache.get("k10") == frozenset({10})
    cache.put("new", frozenset())
    assert "k11" not in cache.free and "k10" in cache.free  # least recently used dropped first


def test_a_shape_plan_leaves_no_cyclic_garbage() -> None:
    """Serving a shape's plan (the token scan, the substitution) and reading a statement's words leave
    nothing for the cyclic collector (as the rest of the guard, ``tests/reliability``)."""
    import gc

    con = guarded_sqlite.connect(":memory:")
    _fill(con)
    at_risk = AT_RISK + " WHERE c.id > {} AND c.name <> '{}' GROUP BY c.id"
    keyed = JOIN + " WHERE c.id > {} GROUP BY c.id"
    for n in range(2):
        con.execute(at_risk.format(n, f"x{n}")).fetchall()
        con.execute(keyed.format(n)).fetchall()
    gc.collect()
    gc.disable()
    try:
        for n in range(3, 8):
            assert con.execute(at_risk.format(n, f"x{n}")).guard_report.trigger == "aggregate_fanout"
            con.execute(keyed.format(n)).fetchall()
        found = gc.collect()
    finally:
        gc.enable()
    assert found == 0


def _shaped_and_planned(
    warm: Any,
    fresh: Any,
    template: str,
    first: dict[str, Any],
    second: dict[str, Any],
    served: Callable[[Any, str], Any],
) -> tuple[str, Any, Any]:
    """The statement of ``template`` with ``second``'s literals, what ``warm`` serves for it from the plan
    its shape got with ``first``'s, and what ``fresh`` serves planning it as written (no shapes)."""
    # The check's budget is a time (a loaded machine can stop one connection's check and not the
    # other's): generous here, where what is compared is what each plan serves.
    budget = confirmations.budget
    confirmations.budget = lambda *args: 60.0  # type: ignore[assignment]
    try:
        warm.execute(template.format(**first)).fetchall()  # the shape's plan, made on other literals
        sql = template.format(**second)
        shaped = served(warm, sql)
        by_shape = plan_cache._by_shape
        plan_cache._by_shape = lambda *args: None  # type: ignore[assignment]
        try:
            planned = served(fresh, sql)
        finally:
            plan_cache._by_shape = by_shape  # type: ignore[assignment]
    finally:
        confirmations.budget = budget  # type: ignore[assignment]
    return sql, shaped, planned


def test_a_shape_is_read_once_per_text_and_a_long_text_is_not_held() -> None:
    from guarded_sqlite._analysis import shapes

    sql = "SELECT SUM(o.v) FROM o JOIN c ON c.id = o.c WHERE c.id > 41 AND c.r = 'kept'"
    first = shapes.read_shape(sql)
    assert first is not None and shapes.read_shape(sql) is first  # the kept reading, not a new one
    long_sql = sql + " AND c.note <> '" + "x" * shapes._KEPT_LENGTH + "'"
    before = shapes._read_kept.cache_info().currsize
    long_shape = shapes.read_shape(long_sql)
    assert long_shape is not None and long_shape.slots[:2] == ("41", "'kept'")
    assert shapes._read_kept.cache_info().currsize == before  # read, not kept


def test_shareable_asks_the_tables_the_statement_reads() -> None:
    """A unique partial index of a table the statement does not read leaves its shape shared (PostgreSQL's
    snapshot holds the whole database); one of a table it reads, or of any table where it reads a view
    (read through by the analysis), does not."""
    from guarded_sqlite._analysis.schema import PartialKey, SchemaFacts, TableFacts
    from guarded_sqlite._analysis.shapes import shareable

    partial = (PartialKey(frozenset({"k"}), "id > 0"),)
    facts = SchemaFacts(
        (
            TableFacts("a", "public"),
            TableFacts("b", "public"),
            TableFacts("p", "public", partial_keys=partial),
            TableFacts("v", "public", is_view=True),
        ),
        ("public",),
    )

    def tree(sql: str) -> Any:
        return sqlglot.parse_one(sql, read="postgres")

    assert shareable(tree("SELECT SUM(a.x) FROM a JOIN b ON b.id = a.id WHERE a.id > 1"), facts)
    assert not shareable(tree("SELECT SUM(a.x) FROM a JOIN p ON p.k = a.id WHERE p.id > 1"), facts)
    assert not shareable(tree("SELECT SUM(a.x) FROM a JOIN b ON b.id = a.id WHERE a.id IN (SELECT k FROM p)"), facts)
    assert not shareable(tree("SELECT SUM(a.x) FROM a JOIN public.p ON p.k = a.id"), facts)
    assert not shareable(tree("SELECT SUM(a.x) FROM a JOIN v ON v.k = a.id WHERE a.id > 1"), facts)
    # a CTE's name is a table's where the CTE is not in scope
    in_scope = "WITH p AS (SELECT 1 AS k) SELECT SUM(a.x) FROM a JOIN p ON p.k = a.id"
    assert not shareable(tree(f"SELECT * FROM ({in_scope}) AS s, (SELECT SUM(k) FROM p) AS t"), facts)


@pytest.mark.parametrize(
    ("sql", "dialect", "same_as_itself"),
    [
        (f"{AT_RISK} WHERE c.id > 5 AND c.name = 'it''s' GROUP BY c.id", "sqlite", False),
        (f"{AT_RISK} WHERE c.id > 5 GROUP BY c.id", "postgres", False),
        # no-op cases: the text itself
        (f"{AT_RISK} GROUP BY c.id", "sqlite", True),  # no slot
        (f"{AT_RISK} WHERE c.id > 5 GROUP BY c.id", "clickhouse", True),  # strings escape with a backslash
        (f"{AT_RISK} WHERE c.id > 5 AND c.name <> '{'x' * 4096}' GROUP BY c.id", "sqlite", True),  # not kept
    ],
)
def test_shaped_text(sql: str, dialect: str, same_as_itself: bool) -> None:
    from guarded_sqlite._analysis.shapes import shaped_text

    assert (shaped_text(sql, dialect) == sql) is same_as_itself
    if not same_as_itself:  # another statement of the shape reads as the same text
        other = sql.replace("> 5", "> 123").replace("'it''s'", "'b'")
        assert other != sql and shaped_text(other, dialect) == shaped_text(sql, dialect)


_READ_ONLY_PIECES = st.sampled_from(
    [
        "SELECT", "WITH", "INSERT", "UPDATE", "DELETE", "REPLACE", "INTO", "SET", "VALUES", "RETURNING",
        "x", "t", "(", ")", ",", "=", ">", ";", "5", "12.5", "'a'", "'it''s'", "'DELETE'", "'--'", "-- c\n",
        "/* DROP */", '"name"', "[q]", "`b`", "0x1f", "1e5", "?", ":n", "'", '"', "/*", "$$", "\\", "#",
        "E'x'", "x'0a'", "--",
    ]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(_READ_ONLY_PIECES, min_size=1, max_size=14), st.sampled_from(["sqlite", "postgres", "mysql", "duckdb"]))
def test_a_shape_reads_as_read_only_as_its_own_text(pieces: list[str], dialect: str) -> None:
    """The guard asks whether a statement reads only once per shape (``fanout.confirm``): the shaped
    text's answer is the statement's own, writes and unreadable texts included."""
    from guarded_sqlite._analysis.rewrite import is_read_only_query
    from guarded_sqlite._analysis.shapes import shaped_text

    sql = " ".join(pieces)
    assert is_read_only_query(shaped_text(sql, dialect), dialect) is is_read_only_query(sql, dialect)


def test_a_text_takes_its_literals_once_while_its_shapes_plan_stands() -> None:
    from guarded_sqlite._analysis.shapes import SERVED, ShapeCache

    cache = ShapeCache()
    plan, other_plan = object(), object()
    made: list[str] = []

    def write_back(sql: str) -> Any:
        made.append(sql)
        return ("served", sql, len(made))

    first = cache.serve("a", plan, lambda: write_back("a"))
    assert cache.serve("a", plan, lambda: write_back("a")) is first and made == ["a"]
    # another plan kept for the shape (its catalog changed): written back again
    again = cache.serve("a", other_plan, lambda: write_back("a"))
    assert again is not first and made == ["a", "a"]

    def fails() -> Any:
        raise KeyError("a marker of no free slot")

    with pytest.raises(KeyError):
        cache.serve("b", plan, fails)
    assert "b" not in cache.served  # nothing kept for it
    for n in range(SERVED + 5):
        cache.serve(f"t{n}", plan, lambda n=n: write_back(f"t{n}"))  # type: ignore[misc]
    assert len(cache.served) == SERVED and "a" not in cache.served and f"t{SERVED + 4}" in cache.served


def test_a_repeated_statement_is_served_its_shapes_plan_as_kept() -> None:
    """The same text again is served the plan written back the first time (no substitution); a table
    changed under the shape makes its plan, and the text's, anew."""
    from guarded_sqlite._analysis import shapes

    con = guarded_sqlite.connect(":memory:")
    _fill(con)
    sql = AT_RISK + " WHERE c.id > 1 GROUP BY c.id HAVING SUM(o.total) > 2"
    calls: list[int] = []
    substituted = shapes.substituted

    def counting(*args: Any) -> Any:
        calls.append(1)
        return substituted(*args)

    plan_cache.substituted = counting  # type: ignore[assignment]
    try:
        con.execute(AT_RISK + " WHERE c.id > 0 GROUP BY c.id HAVING SUM(o.total) > 2").fetchall()  # the shape
        reports = []
        for _ in range(3):
            con._self_guard.confirmations.clear()  # each a first execution: the check runs
            reports.append(con.execute(sql).guard_report)
        assert len(calls) == 2, calls  # the shape's first text, then this one once
        con.execute("CREATE INDEX by_status ON orders (status)")  # the catalog rows the plan rests on
        con._self_guard.confirmations.clear()
        reports.append(con.execute(sql).guard_report)
        assert len(calls) == 3, calls
    finally:
        plan_cache.substituted = substituted  # type: ignore[assignment]
    assert all(r is not None and r.trigger == "aggregate_fanout" for r in reports)
    assert len({(r.decisions, r.aggregates) for r in reports}) == 1
