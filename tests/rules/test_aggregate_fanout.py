"""The aggregate fan-out rule (``guarded_sqlite._analysis.aggregates``, ``guarded_sqlite._rules.fanout``):
property tests on generated star/snowflake schemas, fixture tests of ``plan_aggregates``, and the rule on
DuckDB and PostgreSQL.

The property tests generate a root table ``root`` (``r``, INTEGER PRIMARY KEY), one to three child tables
``kid1..kid3`` (``c1..c3``) each holding a non-unique ``fk`` to the root or to an earlier child, and maybe a
lookup table ``look`` (``l``) that tables reach N:1 through their ``lk`` column. Keys are declared in
several ways (the rowid alias, a nullable ``TEXT PRIMARY KEY``, a nullable ``UNIQUE`` column, a WITHOUT
ROWID table); values are small integers, floats and NULLs drawn from small pools, so non-key columns
repeat. Queries join a connected subset (inner, sometimes LEFT, sometimes comma joins), take one or two
value aggregates, and maybe a COUNT/MIN/MAX/SUM(DISTINCT) alongside, a GROUP BY, a WHERE filter or pin and
a HAVING on COUNT(*).

The oracle is an independent SQL formulation, not the library's rewrite: for ``FUNC(arg)`` it is
``SELECT g, FUNC(a) FROM (SELECT DISTINCT <group> AS g, <rowid of each table arg reads>, arg AS a FROM
<same FROM/WHERE>) GROUP BY g``, i.e. the aggregate over the distinct rows of the argument's tables that
take part in the join within each group.
"""

from __future__ import annotations

import math
import sqlite3
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import sqlglot
from hypothesis import HealthCheck, event, example, given, note, settings
from hypothesis import strategies as st

import guarded_sqlite
from guarded_sqlite._analysis.aggregates import plan_aggregates
from guarded_sqlite._analysis.schema import read_sqlite_schema

# --------------------------------------------------------------------------------------------------
# Generated schemas and data
# --------------------------------------------------------------------------------------------------

ALIASES = {"root": "r", "kid1": "c1", "kid2": "c2", "kid3": "c3", "look": "l"}
KEY_KINDS = ["int_pk", "int_pk", "text_pk", "unique", "without_rowid"]
GROUP_VALUES = st.sampled_from(["a", "b", "A", "", None, "1"])
NUMBERS = st.one_of(
    st.none(),
    st.integers(-3, 9),
    st.sampled_from([0.5, 1.25, -2.0, 2.5, 0.1, 0.2, 0.3, 1.0]),
)
FLOATS = st.one_of(st.none(), st.sampled_from([0.5, 1.25, -2.0, 0.1, 0.2, 0.3, 3.0, 1e-3]))


@dataclass(frozen=True)
class Tbl:
    name: str
    key: str  # one of KEY_KINDS ("int_pk" for the root)
    parent: str | None  # the table ``fk`` refers to
    rows: tuple[tuple[Any, ...], ...]  # (id, fk, g, x, y, lk)
    declare_fk: bool = False
    typed_fk: bool = False  # fk INTEGER: a join the check may pre-group (guarded_sqlite._analysis.pregroup)

    @property
    def alias(self) -> str:
        return ALIASES[self.name]

    def ddl(self) -> str:
        key = {
            "int_pk": "id INTEGER PRIMARY KEY",
            "text_pk": "id TEXT PRIMARY KEY",
            "unique": "id INTEGER UNIQUE",
            "without_rowid": "id INTEGER NOT NULL PRIMARY KEY",
        }[self.key]
        fk = "fk INTEGER" if self.typed_fk else "fk"
        if self.declare_fk and self.parent:
            fk += f" REFERENCES {self.parent}(id)"
        tail = " WITHOUT ROWID" if self.key == "without_rowid" else ""
        return f"CREATE TABLE {self.name} ({key}, {fk}, g TEXT, x, y REAL, lk INTEGER){tail}"

    def identity(self) -> str:
        """What tells this table's rows apart, for the oracle: the rowid (the PK without one)."""
        return f"{self.alias}.id" if self.key == "without_rowid" else f"{self.alias}.rowid"

    def ids(self) -> list[Any]:
        return [row[0] for row in self.rows if row[0] is not None]


@dataclass(frozen=True)
class Db:
    tables: tuple[Tbl, ...]

    def get(self, name: str) -> Tbl:
        return next(t for t in self.tables if t.name == name)

    def has(self, name: str) -> bool:
        return any(t.name == name for t in self.tables)

    def kids(self) -> list[Tbl]:
        return [t for t in self.tables if t.name.startswith("kid")]

    def load(self, con: sqlite3.Connection) -> None:
        for t in self.tables:
            con.execute(t.ddl())
            con.executemany(f"INSERT INTO {t.name} VALUES (?, ?, ?, ?, ?, ?)", t.rows)
        con.commit()


def _key_value(kind: str, n: int, draw: Any) -> Any:
    if kind == "text_pk":
        return None if draw(st.integers(0, 5)) == 0 else f"k{n}"
    if kind == "unique":
        return None if draw(st.integers(0, 5)) == 0 else n
    return n


@st.composite
def databases(draw: Any) -> Db:
    with_lookup = draw(st.booleans())
    look_ids = [1, 2, 3] if with_lookup else []
    lk = st.one_of(st.none(), st.sampled_from([*look_ids, 9])) if with_lookup else st.none()
    tables: list[Tbl] = []
    root_ids = draw(st.lists(st.integers(1, 6), min_size=1, max_size=4, unique=True))
    root_rows = tuple((i, None, draw(GROUP_VALUES), draw(NUMBERS), draw(FLOATS), draw(lk)) for i in root_ids)
    tables.append(Tbl("root", "int_pk", None, root_rows))
    counter = 100
    for number in range(1, draw(st.integers(1, 3)) + 1):
        parent = draw(st.sampled_from([t for t in tables if t.name != "look"]))
        kind = draw(st.sampled_from(KEY_KINDS))
        rows: list[tuple[Any, ...]] = []
        for parent_id in parent.ids():
            for _ in range(draw(st.integers(0, 4))):
                counter += 1
                rows.append(
                    (
                        _key_value(kind, counter, draw),
                        parent_id,
                        draw(GROUP_VALUES),
                        draw(NUMBERS),
                        draw(FLOATS),
                        draw(lk),
                    )
                )
        if draw(st.integers(0, 4)) == 0:  # an orphan: its fk is NULL or matches nothing
            counter += 1
            rows.append((_key_value(kind, counter, draw), draw(st.sampled_from([None, 999])), "a", 1, 0.5, None))
        tables.append(Tbl(f"kid{number}", kind, parent.name, tuple(rows), draw(st.booleans()), draw(st.booleans())))
    if with_lookup:
        look_rows = tuple((i, None, draw(GROUP_VALUES), draw(NUMBERS), draw(FLOATS), None) for i in look_ids)
        tables.append(Tbl("look", draw(st.sampled_from(["int_pk", "without_rowid"])), None, look_rows))
    return Db(tuple(tables))


# --------------------------------------------------------------------------------------------------
# Generated queries
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Agg:
    """One aggregate of the select list: ``template.format(argument)``."""

    template: str  # e.g. "SUM({})", "GROUP_CONCAT({}, '|')"
    argument: str
    reads: tuple[str, ...]  # table names the argument reads
    value: bool  # a value aggregate without DISTINCT (the rule's business)

    @property
    def sql(self) -> str:
        return self.template.format(self.argument)

    @property
    def function(self) -> str:
        return self.template.split("(")[0].upper()

    @property
    def separator(self) -> str | None:
        if self.function != "GROUP_CONCAT":
            return None
        return "|" if "'|'" in self.template else ","


@dataclass
class AggQuery:
    from_sql: str  # FROM ... JOIN ... (without WHERE)
    where: list[str]  # conjuncts
    where_params: list[Any]
    group: str | None  # the group expression (select item 0 when set)
    group_by: str | None  # how GROUP BY spells it ("r.id", "1", "gk")
    extra_columns: list[str]  # non-aggregate select items after the group (fixed by the groups)
    aggs: list[Agg]
    having_min: int | None = None  # HAVING COUNT(*) >= ?
    order: str = ""
    tables: dict[str, Tbl] = field(default_factory=dict)  # joined, by name

    @property
    def where_sql(self) -> str:
        return f" WHERE {' AND '.join(self.where)}" if self.where else ""

    @property
    def params(self) -> tuple[Any, ...]:
        return (*self.where_params, *([] if self.having_min is None else [self.having_min]))

    @property
    def first_agg(self) -> int:
        return (0 if self.group is None else 1) + len(self.extra_columns)

    @property
    def sql(self) -> str:
        items = ([] if self.group is None else [f"{self.group} AS gk"]) + self.extra_columns
        items += [agg.sql for agg in self.aggs]
        text = f"SELECT {', '.join(items)} {self.from_sql}{self.where_sql}"
        if self.group_by is not None:
            text += f" GROUP BY {self.group_by}"
        if self.having_min is not None:
            text += " HAVING COUNT(*) >= ?"
        return text + self.order


def _edges(db: Db, names: set[str]) -> list[tuple[str, str, str]]:
    """(child, parent, ON condition) of each join edge between the tables ``names``."""
    edges = []
    for t in db.tables:
        if t.name in names and t.parent in names:
            parent = db.get(t.parent)
            edges.append((t.name, parent.name, f"{t.alias}.fk = {parent.alias}.id"))
    if "look" in names:
        for t in db.tables:
            if t.name in names and t.name != "look" and any(row[5] is not None for row in t.rows):
                edges.append((t.name, "look", f"{t.alias}.lk = l.id"))
                break  # the lookup hangs off one table (else it would close a cycle)
    return edges


def _from_clause(draw: Any, db: Db, names: set[str], allow_left: bool) -> tuple[str, list[str], set[str]]:
    """FROM ... over the tables ``names`` (connected through ``_edges``): the text, conjuncts the WHERE
    must add (comma joins), and the tables joined with LEFT JOIN."""
    edges = _edges(db, names)
    if "look" in names and not any("look" in e[:2] for e in edges):
        names = names - {"look"}
    order = [draw(st.sampled_from(sorted(names)))]
    where: list[str] = []
    left: set[str] = set()
    parts = [f"FROM {order[0]} AS {db.get(order[0]).alias}"]
    while len(order) < len(names):
        options = [
            (other, condition)
            for child, parent, condition in edges
            for joined, other in ((child, parent), (parent, child))
            if joined in order and other not in order
        ]
        other, condition = draw(st.sampled_from(options))
        alias = db.get(other).alias
        style = draw(st.sampled_from(["join", "join", "join", "left", "comma"] if allow_left else ["join", "comma"]))
        if style == "left":
            parts.append(f"LEFT JOIN {other} AS {alias} ON {condition}")
            left.add(other)
        elif style == "comma":
            parts.append(f", {other} AS {alias}")
            where.append(condition)
        else:
            parts.append(f"JOIN {other} AS {alias} ON {condition}")
        order.append(other)
    return " ".join(parts), where, left


def _connected_subset(draw: Any, db: Db) -> set[str]:
    names = {"root"}
    for t in db.kids():
        if t.parent in names and draw(st.booleans()):
            names.add(t.name)
    if db.has("look") and draw(st.booleans()):
        names.add("look")
    if len(names) == 1:
        names.add(db.kids()[0].name)
    return names


def _value_agg(draw: Any, db: Db, names: set[str]) -> Agg:
    table = db.get(draw(st.sampled_from(sorted(names))))
    a = table.alias
    function = draw(st.sampled_from(["SUM", "AVG", "TOTAL", "GROUP_CONCAT", "sum", "total"]))
    if function.upper() == "GROUP_CONCAT":
        column = draw(st.sampled_from(["g", "x"]))
        template = draw(st.sampled_from(["GROUP_CONCAT({})", "GROUP_CONCAT({}, '|')", "group_concat({})"]))
        return Agg(template, f"{a}.{column}", (table.name,), True)
    form = draw(st.sampled_from(["x", "x", "y", "x * 2", "x + y", "lookup"]))
    if form == "lookup":
        # A second table the argument reads: the one this table reaches N:1, when it is joined.
        edges = [(c, p) for c, p, _ in _edges(db, names) if c == table.name]
        if edges:
            parent = db.get(draw(st.sampled_from(edges))[1])
            return Agg(f"{function}({{}})", f"{a}.x + {parent.alias}.y", (table.name, parent.name), True)
        form = "x"
    return Agg(
        f"{function}({{}})", " ".join(f"{a}.{w}" if w.isalpha() else w for w in form.split()), (table.name,), True
    )


def _other_agg(draw: Any, db: Db, names: set[str]) -> Agg:
    table = db.get(draw(st.sampled_from(sorted(names))))
    a = table.alias
    template = draw(
        st.sampled_from(
            ["COUNT(*)", "COUNT({})", "MIN({})", "MAX({})", "SUM(DISTINCT {})", "AVG(DISTINCT {})", "min({})"]
        )
    )
    return Agg(template, f"{a}.x", (table.name,), False)


def _group(draw: Any, q: AggQuery, db: Db) -> None:
    kind = draw(st.sampled_from(["none", "key", "key", "column"]))
    if kind == "none":
        return
    q.group = "r.id" if kind == "key" else "r.g"
    q.group_by = draw(st.sampled_from([q.group, q.group, "1", "gk"]))
    if kind == "key" and draw(st.booleans()):
        q.extra_columns.append("r.g")
    if draw(st.integers(0, 3)) == 0:
        q.order = draw(st.sampled_from([" ORDER BY 1", " ORDER BY gk DESC", f" ORDER BY {q.first_agg + 1}"]))


def _filter(draw: Any, q: AggQuery, db: Db) -> None:
    kind = draw(st.sampled_from(["none", "none", "gt", "notnull", "g", "pin"]))
    table = q.tables[draw(st.sampled_from(sorted(q.tables)))]
    a = table.alias
    if kind == "gt":
        q.where.append(f"{a}.x > ?")
        q.where_params.append(draw(st.integers(-1, 3)))
    elif kind == "notnull":
        q.where.append(f"{a}.y IS NOT NULL")
    elif kind == "g":
        q.where.append(f"{a}.g <> 'b'")
    elif kind == "pin":
        ids = table.ids()
        q.where.append(f"{a}.id = ?")
        q.where_params.append(draw(st.sampled_from(ids)) if ids else 1)


@st.composite
def risky_cases(draw: Any) -> tuple[Db, AggQuery]:
    db = draw(databases())
    names = _connected_subset(draw, db)
    from_sql, where, _ = _from_clause(draw, db, names, allow_left=True)
    tables = {n: db.get(n) for n in names if f" {n} AS " in f" {from_sql} "}
    q = AggQuery(from_sql, where, [], None, None, [], [], tables=tables)
    _group(draw, q, db)
    _filter(draw, q, db)
    q.aggs = [_value_agg(draw, db, set(tables)) for _ in range(draw(st.integers(1, 2)))]
    if draw(st.booleans()):
        q.aggs.insert(draw(st.integers(0, len(q.aggs))), _other_agg(draw, db, set(tables)))
    if q.group is not None and draw(st.integers(0, 4)) == 0:
        q.having_min = draw(st.integers(1, 3))
    return db, q


# --------------------------------------------------------------------------------------------------
# The oracle and comparisons
# --------------------------------------------------------------------------------------------------


def oracle(raw: sqlite3.Connection, q: AggQuery, agg: Agg) -> dict[Any, Any]:
    """Group value (0 without GROUP BY) -> ``agg`` over the distinct rows of its argument's tables that
    take part in the join within the group."""
    identities = ", ".join(q.tables[name].identity() for name in agg.reads)
    group = q.group or "0"
    inner = f"SELECT DISTINCT {group} AS __g, {identities}, {agg.argument} AS __a {q.from_sql}{q.where_sql}"
    value = agg.template.format("__a")
    if q.group is None:
        sql = f"SELECT 0, {value} FROM ({inner})"
    else:
        sql = f"SELECT __g, {value} FROM ({inner}) GROUP BY __g"
    return dict(raw.execute(sql, q.where_params).fetchall())


def groups_kept(raw: sqlite3.Connection, q: AggQuery) -> dict[Any, int] | None:
    """Group value -> COUNT(*) of join rows, for the HAVING (None: every group is kept)."""
    if q.group is None or q.having_min is None:
        return None
    sql = f"SELECT {q.group}, COUNT(*) {q.from_sql}{q.where_sql} GROUP BY {q.group}"
    return {g: n for g, n in raw.execute(sql, q.where_params).fetchall() if n >= q.having_min}


def same(agg: Agg, written: Any, expected: Any) -> bool:
    if written is None or expected is None:
        return written is None and expected is None
    if agg.separator is not None:
        return Counter(str(written).split(agg.separator)) == Counter(str(expected).split(agg.separator))
    if isinstance(written, float) or isinstance(expected, float):
        # abs_tol: sums that cancel to (nearly) zero differ by rounding noise only, in either order.
        return math.isclose(written, expected, rel_tol=1e-9, abs_tol=1e-12)
    return bool(written == expected)


def value_aggs_of(q: AggQuery, finding: guarded_sqlite.AggregateFinding) -> list[tuple[int, Agg]]:
    """The positions and generated aggregates a finding may be about (value aggregates of its function
    and argument: GROUP_CONCATs with different separators share them)."""
    found = [
        (i, agg)
        for i, agg in enumerate(q.aggs)
        if agg.value and (agg.function, agg.argument) == (finding.function, finding.argument)
    ]
    assert found, finding
    return found


def group_of(q: AggQuery, row: tuple[Any, ...]) -> Any:
    return 0 if q.group is None else row[0]


def mismatches(raw: sqlite3.Connection, q: AggQuery, rows: list[tuple[Any, ...]]) -> list[tuple[Agg, Any, Any]]:
    """Each (aggregate, served value, oracle value) of ``rows`` where a value aggregate is not the oracle's."""
    found = []
    for i, agg in enumerate(q.aggs):
        if not agg.value:
            continue
        expected = oracle(raw, q, agg)
        for row in rows:
            value = row[q.first_agg + i]
            if not same(agg, value, expected.get(group_of(q, row))):
                found.append((agg, value, expected.get(group_of(q, row))))
    return found


def _at_risk(raw: sqlite3.Connection, q: AggQuery) -> bool:
    return bool(plan_aggregates(sqlglot.parse_one(q.sql, read="sqlite"), read_sqlite_schema(raw)).risks)


# --------------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------------


@dataclass
class Served:
    rows: list[tuple[Any, ...]]
    report: guarded_sqlite.GuardReport
    statements: int


def serve(raw: sqlite3.Connection, guard: str, q: AggQuery) -> Served:
    con = guarded_sqlite.wrap(raw, guard=guard)
    traced: list[str] = []
    raw.set_trace_callback(traced.append)
    try:
        cursor = con.execute(q.sql, q.params)
        rows = cursor.fetchall()
    finally:
        raw.set_trace_callback(None)
    report = cursor.guard_report
    assert report is not None
    return Served(rows, report, len(traced))


def open_raw(db: Db) -> sqlite3.Connection:
    raw = sqlite3.connect(":memory:")
    db.load(raw)
    return raw


def describe(db: Db, q: AggQuery) -> None:
    for t in db.tables:
        note(f"{t.ddl()}  rows={t.rows}")
    note(f"sql={q.sql!r} params={q.params!r}")


# --------------------------------------------------------------------------------------------------
# a, b, d, e: generated risky shapes under every preset
# --------------------------------------------------------------------------------------------------


def check_risky(db: Db, q: AggQuery) -> None:
    describe(db, q)
    raw = open_raw(db)
    try:
        expected_rows = raw.execute(q.sql, q.params).fetchall()
        wrong = mismatches(raw, q, expected_rows)
        note(f"raw rows={expected_rows} wrong={wrong}")

        # d: the default preset serves exactly sqlite3's rows, in sqlite3's order.
        patch = serve(raw, "patch", q)
        assert patch.rows == expected_rows
        flagged = patch.report.trigger == "aggregate_fanout"
        event("flagged" if flagged else ("static risk, not realised" if _at_risk(raw, q) else "no risk"))
        note(f"patch: trigger={patch.report.trigger} decisions={patch.report.decisions}")
        # b: flagged exactly when a written value is not the oracle's (no false confirmation, and a
        # static risk the data does not realise is not flagged). Every generated shape can be corrected.
        assert flagged == bool(wrong), (flagged, wrong, patch.report.decisions)
        assert patch.report.action == "none" and patch.report.final_sql == q.sql
        if flagged:
            assert patch.report.aggregates
            for finding in patch.report.aggregates:
                candidates = value_aggs_of(q, finding)
                if finding.written is None and finding.corrected is None:
                    continue
                assert any(
                    same(agg, row[q.first_agg + i], finding.written)
                    and same(agg, oracle(raw, q, agg).get(group_of(q, row)), finding.corrected)
                    for i, agg in candidates
                    for row in expected_rows
                ), finding
        else:
            assert patch.report.aggregates == ()

        # a: text_to_sql serves the oracle's values whenever it corrects.
        t2s = serve(raw, "text_to_sql", q)
        note(f"text_to_sql: action={t2s.report.action} final={t2s.report.final_sql}")
        assert (t2s.report.trigger == "aggregate_fanout") == flagged
        if t2s.report.action == "aggregate_defanned":
            assert t2s.report.final_sql != q.sql and t2s.report.aggregates
            assert all(f.corrected_sql == t2s.report.final_sql for f in t2s.report.aggregates)
            assert mismatches(raw, q, t2s.rows) == []
            kept = groups_kept(raw, q)
            raw_by_group = {group_of(q, row): row for row in expected_rows}
            if kept is not None:
                assert sorted(map(repr, (group_of(q, row) for row in t2s.rows))) == sorted(map(repr, kept))
            else:
                assert len(t2s.rows) == len(expected_rows)
            for row in t2s.rows:
                written = raw_by_group[group_of(q, row)]
                # The group and the columns it fixes, and the aggregates not at risk, are as written.
                assert row[: q.first_agg] == written[: q.first_agg]
                for i, agg in enumerate(q.aggs):
                    if not agg.value:
                        assert row[q.first_agg + i] == written[q.first_agg + i]
            for finding in t2s.report.aggregates:
                if finding.corrected is not None:
                    assert any(
                        same(agg, row[q.first_agg + i], finding.corrected)
                        for i, agg in value_aggs_of(q, finding)
                        for row in t2s.rows
                    ), finding
        else:
            assert not flagged
            assert t2s.rows == expected_rows

        # e: observe and paper never look, and run nothing but the statement.
        for guard in ("observe", "paper"):
            other = serve(raw, guard, q)
            assert other.rows == expected_rows
            assert other.report.trigger != "aggregate_fanout" and other.report.aggregates == ()
            assert other.statements == 1, guard
    finally:
        raw.close()


def _kid1_root_case(kid1_rows: tuple[tuple[Any, ...], ...], aggs: list[Agg]) -> tuple[Db, AggQuery]:
    root = Tbl("root", "int_pk", None, tuple((i, None, "a", None, None, None) for i in (2, 3, 4)))
    kid1 = Tbl("kid1", "int_pk", "root", kid1_rows)
    q = AggQuery("FROM kid1 AS c1 JOIN root AS r ON c1.fk = r.id", [], [], None, None, [], aggs)
    q.tables = {"root": root, "kid1": kid1}
    return Db((root, kid1)), q


# The corrected query fed GROUP_CONCAT(c1.g), not at risk, its rows in another order: that alone
# confirmed a fan-out of SUM(r.x), whose values are all NULL (fixed: AggregatePlan.steady).
ORDER_CASE = _kid1_root_case(
    ((101, 2, "a", None, None, None), (102, 4, "a", None, None, None), (103, 3, "b", None, None, None)),
    [Agg("GROUP_CONCAT({})", "c1.g", ("kid1",), True), Agg("SUM({})", "r.x", ("root",), True)],
)


@settings(max_examples=250, deadline=None)
@given(case=risky_cases())
@example(case=ORDER_CASE)
def test_generated_aggregates_over_joins(case: tuple[Db, AggQuery]) -> None:
    """a, b, d, e on generated schemas and queries: see ``check_risky``."""
    check_risky(*case)


def _check_rows(raw: sqlite3.Connection, q: AggQuery, *, window: bool) -> tuple[str, list[Any]] | None:
    """The check query of ``q`` on ``raw`` and its rows: SQLite's grouped form, or (``window``) the
    row-numbering form every engine gets."""
    from unittest import mock

    from guarded_sqlite._analysis import aggregates

    if window:
        with mock.patch.object(aggregates, "grouped_form", lambda *args: None):
            found = plan_of(raw, q.sql)
    else:
        found = plan_of(raw, q.sql)
    if found.check_sql is None:
        return None
    return found.check_sql, raw.execute(found.check_sql, q.params).fetchall()


def _close(left: Any, right: Any) -> bool:
    if isinstance(left, float) or isinstance(right, float):
        if left is None or right is None:
            return left is right
        return math.isclose(float(left), float(right), rel_tol=1e-9, abs_tol=1e-9)
    return bool(left == right)


@settings(max_examples=200, deadline=None)
@given(case=risky_cases())
@example(case=ORDER_CASE)
def test_grouped_check_computes_what_the_row_numbering_computes(case: tuple[Db, AggQuery]) -> None:
    """SQLite's grouped check query (one row per group and row identity, ``aggregate_sql.grouped_form``)
    gives the numbering form's rows: the corrected values and counts exactly, the written value and
    the magnitudes (computed as value x copies) up to rounding; GROUP_CONCATs compare by parts."""
    db, q = case
    describe(db, q)
    raw = open_raw(db)
    try:
        numbered = _check_rows(raw, q, window=True)
        grouped = _check_rows(raw, q, window=False)
        assert (numbered is None) == (grouped is None)
        if numbered is None or grouped is None:
            return
        event("grouped form" if grouped[0] != numbered[0] else "numbering kept")
        note(f"grouped: {grouped[0]}")

        def comparable(row: Any) -> tuple[Any, ...]:
            return tuple(
                tuple(sorted(value.split("|" if "|" in value else ","))) if isinstance(value, str) else value
                for value in row
            )

        left = sorted(map(comparable, numbered[1]), key=repr)
        right = sorted(map(comparable, grouped[1]), key=repr)
        assert len(left) == len(right)
        for a, b in zip(left, right, strict=True):
            assert all(_close(x, y) for x, y in zip(a, b, strict=True)), (a, b)
        # The pre-grouped form (one table repeating the rows, counted per join key before the join):
        # the same rows again, the corrected query's too.
        found = plan_of(raw, q.sql)
        event("pre-grouped form" if found.pregrouped else "not pre-grouped")
        if found.pregrouped is None:
            return
        _, corrected_sql, check_sql = found.pregrouped
        note(f"pre-grouped: {check_sql}")
        for pregrouped_sql, expected in ((check_sql, numbered[1]), (corrected_sql, None)):
            if expected is None:
                assert found.corrected_sql is not None
                expected = raw.execute(found.corrected_sql, q.params).fetchall()
            rows = sorted(map(comparable, raw.execute(pregrouped_sql, q.params).fetchall()), key=repr)
            wanted = sorted(map(comparable, expected), key=repr)
            assert len(rows) == len(wanted)
            for a, b in zip(wanted, rows, strict=True):
                assert all(_close(x, y) for x, y in zip(a, b, strict=True)), (a, b)
    finally:
        raw.close()


# --------------------------------------------------------------------------------------------------
# c: safe shapes are never flagged
# --------------------------------------------------------------------------------------------------


def _chain(db: Db, table: Tbl) -> set[str]:
    """``table`` and every table its ``fk`` reaches: each row of ``table`` picks one row of each."""
    names = {table.name}
    while table.parent is not None:
        table = db.get(table.parent)
        names.add(table.name)
    return names


@st.composite
def safe_cases(draw: Any) -> tuple[Db, AggQuery, str]:
    db = draw(databases())
    kind = draw(st.sampled_from(["counts", "grain", "pinned", "semi", "derived"]))
    if kind in ("counts", "pinned"):
        names = _connected_subset(draw, db)
    else:
        names = _chain(db, draw(st.sampled_from(db.kids())))
    from_sql, where, _ = _from_clause(draw, db, names, allow_left=kind == "counts")
    tables = {n: db.get(n) for n in names if f" {n} AS " in f" {from_sql} "}
    q = AggQuery(from_sql, where, [], None, None, [], [], tables=tables)
    _group(draw, q, db)
    if kind == "counts":
        # MIN/MAX, counts and DISTINCT aggregates over any join.
        q.aggs = [_other_agg(draw, db, set(tables)) for _ in range(draw(st.integers(1, 2)))]
        if draw(st.booleans()):
            a = db.get(draw(st.sampled_from(sorted(tables)))).alias
            q.aggs.append(Agg("GROUP_CONCAT(DISTINCT {})", f"{a}.g", (), False))
    elif kind == "pinned":
        # Every table no other joined table refers to pinned by its key: one row of each, which picks
        # one row of every table they refer to.
        referred = {parent for _, parent, _ in _edges(db, set(tables))}
        for name in sorted(set(tables) - referred) or ["root"]:
            ids = tables[name].ids()
            q.where.append(f"{tables[name].alias}.id = ?")
            q.where_params.append(draw(st.sampled_from(ids)) if ids else 1)
        q.aggs = [_value_agg(draw, db, set(tables)) for _ in range(draw(st.integers(1, 2)))]
    else:
        # The deepest table of a chain (``names``): every other one is determined by it.
        deepest = max((db.get(n) for n in names if n.startswith("kid")), key=lambda t: len(_chain(db, t)))
        d = deepest.alias
        function = draw(st.sampled_from(["SUM({})", "AVG({})", "TOTAL({})", "GROUP_CONCAT({})"]))
        argument = draw(st.sampled_from([f"{d}.x", f"{d}.x * r.x", f"{d}.y + r.y"]))
        if function.startswith("GROUP_CONCAT"):
            argument = f"{d}.g"
        q.aggs = [
            Agg(function, argument, tuple(sorted({deepest.name, "root"} if "r." in argument else {deepest.name})), True)
        ]
        if kind == "semi":
            # A child of some joined table, not joined: a semi-join repeats nothing.
            others = [t for t in db.kids() if t.name not in names and t.parent in names]
            other = draw(st.sampled_from(others)) if others else deepest
            parent = db.get(other.parent) if other.parent is not None else db.get("root")
            pa = tables[parent.name].alias if parent.name in tables else "r"
            if draw(st.booleans()):
                q.where.append(f"EXISTS (SELECT 1 FROM {other.name} AS s WHERE s.fk = {pa}.id)")
            else:
                q.where.append(f"{pa}.id IN (SELECT fk FROM {other.name})")
        elif kind == "derived":
            # Root joined to a child pre-aggregated by its fk: one derived row per root row.
            child = draw(st.sampled_from([t for t in db.kids() if t.parent == "root"]))
            q.from_sql = (
                "FROM root AS r JOIN (SELECT fk, SUM(x) AS s, COUNT(*) AS n, GROUP_CONCAT(g) AS gs "
                f"FROM {child.name} GROUP BY fk) AS d ON d.fk = r.id"
            )
            q.where = []
            q.tables = {"root": db.get("root")}
            q.aggs = [
                Agg(template, argument, (), False)
                for template, argument in draw(
                    st.lists(
                        st.sampled_from([("SUM({})", "r.x"), ("SUM({})", "d.s"), ("AVG({})", "r.y"),
                                         ("TOTAL({})", "d.n"), ("GROUP_CONCAT({})", "r.g")]),
                        min_size=1, max_size=2,
                    )
                )
            ]  # fmt: skip
    if draw(st.booleans()):
        q.aggs.append(_other_agg(draw, db, set(q.tables)))
    return db, q, kind


@settings(max_examples=150, deadline=None)
@given(case=safe_cases())
def test_safe_shapes_are_never_flagged(case: tuple[Db, AggQuery, str]) -> None:
    """c: MIN/MAX, counts, DISTINCT aggregates, arguments at the join's grain, pinned keys, semi-joins and
    pre-aggregated derived tables are never at risk (statically), never flagged, and served as sqlite3's;
    and (a check of the generator) their written values are the oracle's."""
    db, q, kind = case
    event(kind)
    describe(db, q)
    raw = open_raw(db)
    try:
        expected_rows = raw.execute(q.sql, q.params).fetchall()
        if kind != "derived":
            assert mismatches(raw, q, expected_rows) == []
        plan = plan_aggregates(sqlglot.parse_one(q.sql, read="sqlite"), read_sqlite_schema(raw))
        note(f"plan={plan}")
        assert plan.risks == ()
        for guard in ("patch", "text_to_sql"):
            served = serve(raw, guard, q)
            assert served.rows == expected_rows
            assert served.report.trigger != "aggregate_fanout" and served.report.action == "none"
            assert served.report.aggregates == ()
    finally:
        raw.close()


# --------------------------------------------------------------------------------------------------
# plan_aggregates on fixed statements (pure)
# --------------------------------------------------------------------------------------------------

SHOP = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id), total REAL);
CREATE TABLE items (id INTEGER PRIMARY KEY, order_id INTEGER REFERENCES orders(id), product_id INTEGER, qty INTEGER);
CREATE TABLE products (id INTEGER PRIMARY KEY, cost REAL);
CREATE TABLE payments (id INTEGER PRIMARY KEY, order_id INTEGER, amount REAL);
INSERT INTO customers VALUES (1, 'ann', 'oslo'), (2, 'bob', 'rome'), (3, 'cy', 'oslo');
INSERT INTO orders VALUES (10, 1, 100.0), (11, 1, 50.0), (12, 2, 7.0);
INSERT INTO items VALUES (1, 10, 1, 1), (2, 10, 2, 2), (3, 10, 1, 3), (4, 11, 2, 1), (5, 12, 1, 1);
INSERT INTO products VALUES (1, 2.5), (2, 4.0);
INSERT INTO payments VALUES (1, 10, 60.0), (2, 10, 40.0), (3, 12, 7.0);
"""
FANOUT = (
    "SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id "
    "JOIN items i ON i.order_id = o.id GROUP BY c.id"
)


@pytest.fixture
def shop() -> Iterator[sqlite3.Connection]:
    con = sqlite3.connect(":memory:")
    con.executescript(SHOP)
    yield con
    con.close()


def plan_of(con: sqlite3.Connection, sql: str, dialect: str = "sqlite") -> Any:
    return plan_aggregates(sqlglot.parse_one(sql, read=dialect), read_sqlite_schema(con), dialect)


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        pytest.param(FANOUT, [("SUM", "o.total", ("o (orders)",), ("i (items)",), 1)], id="orders-per-item"),
        pytest.param(
            "SELECT c.city, AVG(c.id * 1.0), TOTAL(o.total), GROUP_CONCAT(c.name, '/') FROM customers c "
            "JOIN orders o ON o.customer_id = c.id GROUP BY c.city",
            [
                ("AVG", "c.id * 1.0", ("c (customers)",), ("o (orders)",), 1),
                ("GROUP_CONCAT", "c.name", ("c (customers)",), ("o (orders)",), 3),
            ],
            id="customer-per-order-by-city",
        ),
        pytest.param(
            "SELECT o.id, SUM(i.qty) + SUM(p.amount) FROM orders o JOIN items i ON i.order_id = o.id "
            "JOIN payments p ON p.order_id = o.id GROUP BY o.id",
            [
                ("SUM", "i.qty", ("i (items)",), ("p (payments)",), None),
                ("SUM", "p.amount", ("p (payments)",), ("i (items)",), None),
            ],
            id="two-children-inside-an-expression",
        ),
        pytest.param(
            "SELECT SUM(o.total * pr.cost) FROM orders o JOIN items i ON i.order_id = o.id "
            "JOIN products pr ON pr.id = i.product_id",
            [("SUM", "o.total * pr.cost", ("o (orders)", "pr (products)"), ("i (items)",), 0)],
            id="two-tables-in-the-argument",
        ),
        pytest.param(
            "SELECT c.name, string_agg(o.total, ';') FROM customers c, orders o, items i "
            "WHERE o.customer_id = c.id AND i.order_id = o.id GROUP BY c.id, c.name",
            [("GROUP_CONCAT", "o.total", ("o (orders)",), ("i (items)",), 1)],
            id="comma-joins-string-agg",
        ),
    ],
)
def test_plan_names_the_aggregates_at_risk(shop: sqlite3.Connection, sql: str, expected: list[Any]) -> None:
    plan = plan_of(shop, sql)
    got = [(r.function, r.argument, r.repeated, r.repeating, r.column) for r in plan.risks]
    assert got == expected, plan
    if all(r.column is not None or r.function != "GROUP_CONCAT" for r in plan.risks):
        assert plan.corrected_sql is not None and plan.note == ""
        shop.execute(plan.corrected_sql).fetchall()  # it runs


def test_plan_corrected_sql_computes_each_order_once(shop: sqlite3.Connection) -> None:
    plan = plan_of(shop, FANOUT + " ORDER BY c.name")
    assert shop.execute(FANOUT + " ORDER BY c.name").fetchall() == [("ann", 350.0), ("bob", 7.0)]
    assert shop.execute(plan.corrected_sql).fetchall() == [("ann", 150.0), ("bob", 7.0)]


@pytest.mark.parametrize(
    ("sql", "note"),
    [
        pytest.param("SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id", "no value aggregate",
                     id="no-aggregate"),
        pytest.param("SELECT SUM(total) FROM orders", "one table: nothing repeats its rows", id="one-table"),
        pytest.param(
            "SELECT c.id, MIN(o.total), MAX(o.total), COUNT(*), COUNT(o.total), SUM(DISTINCT o.total) "
            "FROM customers c JOIN orders o ON o.customer_id = c.id JOIN items i ON i.order_id = o.id GROUP BY c.id",
            "every value aggregate reads rows the join does not repeat",
            id="safe-aggregates",
        ),
        pytest.param(
            "SELECT c.id, SUM(i.qty * pr.cost) FROM customers c JOIN orders o ON o.customer_id = c.id "
            "JOIN items i ON i.order_id = o.id JOIN products pr ON pr.id = i.product_id GROUP BY c.id",
            "every value aggregate reads rows the join does not repeat",
            id="at-the-grain",
        ),
        pytest.param(
            "SELECT SUM(o.total) FROM orders o JOIN items i ON i.order_id = o.id WHERE i.id = ?",
            "every value aggregate reads rows the join does not repeat",
            id="pinned-key",
        ),
        pytest.param(
            "SELECT c.id, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id "
            "WHERE EXISTS (SELECT 1 FROM items i WHERE i.order_id = o.id) GROUP BY c.id",
            "every value aggregate reads rows the join does not repeat",
            id="semi-join",
        ),
        pytest.param(
            "SELECT c.id, SUM(c.id), SUM(t.s) FROM customers c JOIN (SELECT customer_id, SUM(total) AS s "
            "FROM orders GROUP BY customer_id) t ON t.customer_id = c.id GROUP BY c.id",
            "every value aggregate reads rows the join does not repeat",
            id="pre-aggregated",
        ),
    ],
)  # fmt: skip
def test_plan_no_op_says_why(shop: sqlite3.Connection, sql: str, note: str) -> None:
    plan = plan_of(shop, sql)
    assert (plan.risks, plan.corrected_sql, plan.note) == ((), None, note)


@pytest.mark.parametrize(
    "sql",
    [
        pytest.param(FANOUT.replace("GROUP BY c.id", "GROUP BY 1"), id="ordinal"),
        pytest.param(
            "SELECT c.name AS who, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id "
            "JOIN items i ON i.order_id = o.id GROUP BY who",
            id="alias",
        ),
    ],
)  # fmt: skip
def test_plan_group_by_ordinal_and_alias(shop: sqlite3.Connection, sql: str) -> None:
    plan = plan_of(shop, sql)
    assert [(r.function, r.argument, r.column) for r in plan.risks] == [("SUM", "o.total", 1)]
    assert sorted(shop.execute(plan.corrected_sql).fetchall()) == [("ann", 150.0), ("bob", 7.0)]


def test_plan_group_by_a_bad_ordinal_is_refused(shop: sqlite3.Connection) -> None:
    plan = plan_of(shop, FANOUT.replace("GROUP BY c.id", "GROUP BY 7"))
    assert (plan.risks, plan.corrected_sql, plan.note) == ((), None, "GROUP BY 7: no such select item")


@pytest.mark.parametrize(
    ("sql", "note"),
    [
        pytest.param(
            "SELECT *, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id "
            "JOIN items i ON i.order_id = o.id GROUP BY c.id",
            "SELECT *: not corrected",
            id="select-star",
        ),
        pytest.param(
            "SELECT c.name, SUM(o.total), (SELECT COUNT(*) FROM payments) FROM customers c "
            "JOIN orders o ON o.customer_id = c.id JOIN items i ON i.order_id = o.id GROUP BY c.id",
            "a subquery outside FROM and WHERE: not corrected",
            id="subquery-in-select-list",
        ),
        pytest.param(
            "SELECT SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id "
            "JOIN items i ON i.order_id = o.id GROUP BY c.id, ?",
            "a parameter in GROUP BY: not corrected",
            id="parameter-in-group-by",
        ),
        pytest.param(
            "SELECT c.name, length(GROUP_CONCAT(o.total)) FROM customers c JOIN orders o ON o.customer_id = c.id "
            "JOIN items i ON i.order_id = o.id GROUP BY c.id",
            "GROUP_CONCAT at risk inside an expression: not corrected",
            id="group-concat-in-expression",
        ),
    ],
)
def test_plan_refusals_keep_the_risk_and_say_why(shop: sqlite3.Connection, sql: str, note: str) -> None:
    plan = plan_of(shop, sql)
    assert plan.risks and plan.corrected_sql is None and plan.note == note


BARE = "SELECT o.id, SUM(c.id) FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.city"


@pytest.mark.parametrize("dialect", ["duckdb", "postgres"])
def test_plan_a_column_the_groups_do_not_fix_is_refused_where_the_engine_groups_it(
    shop: sqlite3.Connection, dialect: str
) -> None:
    plan = plan_of(shop, BARE, dialect)
    assert plan.risks and plan.corrected_sql is None
    assert plan.note == "column o.id is neither grouped nor fixed by the groups: not corrected"


def test_plan_sqlite_keeps_a_bare_column_bare(shop: sqlite3.Connection) -> None:
    """SQLite takes a bare column from some row of the group, as the written statement does: the
    corrected query leaves it out of its GROUP BY, so the groups stay the statement's."""
    plan = plan_of(shop, BARE)
    assert plan.corrected_sql is not None
    rows = shop.execute(plan.corrected_sql).fetchall()
    written = shop.execute(BARE).fetchall()
    assert written == [(10, 2), (12, 2)]  # oslo: ann (id 1) once per order
    (oslo, rome) = rows
    assert oslo[0] in (10, 11) and oslo[1] == 1 and rome == (12, 2)


@pytest.mark.parametrize(
    ("sql", "note"),
    [
        pytest.param(
            "SELECT c.name, SUM(o.total) * 1.0 / COUNT(o.id) FROM customers c JOIN orders o ON o.customer_id = c.id "
            "JOIN items i ON i.order_id = o.id GROUP BY c.id",
            "SUM(o.total) * 1.0 / COUNT(o.id) mixes SUM(o.total), at risk, with COUNT(o.id), which the correction "
            "leaves as written: not corrected",
            id="c02-sum-over-count",
        ),
        pytest.param(
            "SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id "
            "JOIN items i ON i.order_id = o.id GROUP BY c.id HAVING SUM(o.total) > COUNT(*)",
            "SUM(o.total) > COUNT(*) mixes SUM(o.total), at risk, with COUNT(*), which the correction leaves as "
            "written: not corrected",
            id="having-comparison",
        ),
        pytest.param(
            "SELECT c.name, SUM(o.total) AS total FROM customers c JOIN orders o ON o.customer_id = c.id "
            "JOIN items i ON i.order_id = o.id GROUP BY c.id ORDER BY total + 0",
            "total names both a select item and a column: not corrected",
            id="alias-and-column-in-an-expression",
        ),
        pytest.param(
            "SELECT c.name, SUM(COALESCE(o.total, 1)) FROM customers c LEFT JOIN orders o ON o.customer_id = c.id "
            "LEFT JOIN items i ON i.order_id = o.id GROUP BY c.id",
            "SUM(COALESCE(o.total, 1)) reads o (orders), LEFT JOINed, through more than arithmetic: not corrected",
            id="left-joined-argument-not-null-on-unmatched-rows",
        ),
        pytest.param(
            "SELECT c.name, SUM(o.total * ?) FROM customers c JOIN orders o ON o.customer_id = c.id "
            "JOIN items i ON i.order_id = o.id GROUP BY c.id",
            "SUM(o.total * ?): a parameter in an argument at risk: not corrected",
            id="parameter-in-the-argument",
        ),
        pytest.param(
            "SELECT DISTINCT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id "
            "JOIN items i ON i.order_id = o.id GROUP BY c.id",
            "SELECT DISTINCT with an aggregate at risk: not corrected",
            id="distinct",
        ),
        pytest.param(
            "SELECT c.city, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id "
            "JOIN items i ON i.order_id = o.id GROUP BY ROLLUP (c.city)",
            "GROUP BY ROLLUP, CUBE or GROUPING SETS: not analysed",
            id="rollup",
        ),
    ],
)
def test_plan_refuses_what_it_cannot_correct_exactly(shop: sqlite3.Connection, sql: str, note: str) -> None:
    plan = plan_of(shop, sql, "duckdb" if "ROLLUP" in sql else "sqlite")
    assert plan.corrected_sql is None and plan.note == note, plan


def test_plan_whole_expressions_with_aggregates_the_join_does_not_inflate_are_corrected(
    shop: sqlite3.Connection,
) -> None:
    """MIN/MAX, DISTINCT aggregates and value aggregates not at risk have the same value corrected or
    not: an expression mixing them with one at risk is corrected whole. No-op fixture: the ratio's
    COUNT(DISTINCT o.id) counts each order once already."""
    sql = (
        "SELECT c.name, SUM(o.total) / COUNT(DISTINCT o.id) + MAX(o.total) - SUM(i.qty) FROM customers c "
        "JOIN orders o ON o.customer_id = c.id JOIN items i ON i.order_id = o.id GROUP BY c.id ORDER BY c.name"
    )
    plan = plan_of(shop, sql)
    assert plan.note == "" and plan.corrected_sql is not None
    # ann: orders 100 + 50 once each over 2 orders = 75, max 100, qty 1+2+3+1 = 7; bob: 7 + 7 - 1
    assert shop.execute(plan.corrected_sql).fetchall() == [("ann", 168.0), ("bob", 13.0)]


def test_plan_corrected_sql_keeps_parameters_in_order(shop: sqlite3.Connection) -> None:
    sql = (
        "SELECT c.name, SUM(o.total) + ? FROM customers c JOIN orders o ON o.customer_id = c.id "
        "JOIN items i ON i.order_id = o.id WHERE o.total > ? AND i.qty < ? GROUP BY c.id "
        "HAVING COUNT(*) >= ? ORDER BY c.name"
    )
    params = (1000, 5.0, 3, 1)
    plan = plan_of(shop, sql)
    assert plan.corrected_sql is not None and plan.corrected_sql.count("?") == 4
    assert shop.execute(sql, params).fetchall() == [("ann", 1250.0), ("bob", 1007.0)]
    # Each order once: ann's orders 10 (items 1 and 2 have qty < 3) and 11; bob's 12.
    assert shop.execute(plan.corrected_sql, params).fetchall() == [("ann", 1150.0), ("bob", 1007.0)]


def test_plan_never_raises_and_refuses_what_is_not_one_select(shop: sqlite3.Connection) -> None:
    union = f"{FANOUT} UNION ALL {FANOUT}"
    assert plan_of(shop, union).note == "not a single SELECT"
    assert plan_of(shop, "SELECT SUM(1)").note == "no FROM clause"


# --------------------------------------------------------------------------------------------------
# Regressions
# --------------------------------------------------------------------------------------------------


def test_an_order_sensitive_aggregate_not_at_risk_does_not_confirm_a_fan_out() -> None:
    """The corrected query feeds a GROUP_CONCAT (or json_group_array) that is not at risk its rows in
    another order; that alone once confirmed the fan-out of SUM(r.x), whose values were all NULL."""
    raw = sqlite3.connect(":memory:")
    raw.executescript(
        "CREATE TABLE root (id INTEGER PRIMARY KEY, g TEXT, x);"
        "CREATE TABLE kid1 (id INTEGER PRIMARY KEY, fk, g TEXT, x);"
        "INSERT INTO root VALUES (2, 'a', NULL), (3, 'a', NULL), (4, 'a', NULL);"
        "INSERT INTO kid1 VALUES (101, 2, 'a', 1), (102, 4, 'a', 2), (103, 3, 'b', 3);"
    )
    for item in ("GROUP_CONCAT(c1.g)", "json_group_array(c1.x)", "length(group_concat(c1.g)) || group_concat(c1.x)"):
        sql = f"SELECT {item}, SUM(r.x) FROM kid1 AS c1 JOIN root AS r ON c1.fk = r.id"
        for guard in ("patch", "text_to_sql"):
            cursor = guarded_sqlite.wrap(raw, guard=guard).execute(sql)
            assert cursor.fetchall() == raw.execute(sql).fetchall()
            assert (cursor.guard_report.trigger, cursor.guard_report.action) == (None, "none"), (guard, item)
    raw.close()


# --------------------------------------------------------------------------------------------------
# DuckDB and PostgreSQL
# --------------------------------------------------------------------------------------------------

ENGINE_SCHEMA = [
    "CREATE TABLE customers (id INTEGER{pk}, name TEXT)",
    "CREATE TABLE orders (id INTEGER{pk}, customer_id INTEGER, total DOUBLE PRECISION)",
    "CREATE TABLE items (id INTEGER{pk}, order_id INTEGER, qty INTEGER)",
    "INSERT INTO customers VALUES (1, 'a'), (2, 'b')",
    "INSERT INTO orders VALUES (1, 1, 100), (2, 1, 50), (3, 2, 7)",
    "INSERT INTO items VALUES (1, 1, 1), (2, 1, 2), (3, 1, 3), (4, 2, 1), (5, 3, 1)",
]
ENGINE_SQL = FANOUT.replace("c.name, SUM", "c.id, c.name, SUM") + ", c.name ORDER BY c.id"


def check_engine(raw: Any, dialect: str, row_id: str | None) -> None:
    """The default flags the customers/orders/items fan-out and leaves its rows; text_to_sql serves the
    corrected ones (numbering each order by its key, or by the engine's ``row_id`` without keys)."""
    written = [(1, "a", 350.0), (2, "b", 7.0)]
    patch = guarded_sqlite.wrap(raw, guard="patch", dialect=dialect)
    cursor = patch.cursor() if dialect in ("postgres", "mysql") else patch
    cursor.execute(ENGINE_SQL)
    assert [tuple(row) for row in cursor.fetchall()] == written
    report = cursor.guard_report
    assert (report.trigger, report.action, report.final_sql) == ("aggregate_fanout", "none", ENGINE_SQL)
    (finding,) = report.aggregates
    assert (finding.function, finding.argument, finding.written, finding.corrected) == ("SUM", "o.total", 350.0, 150.0)
    # Without keys nothing says an order has one customer: customers may repeat orders too.
    repeating = ("i (items)",) if row_id is None else ("c (customers)", "i (items)")
    assert (finding.repeated, finding.repeating) == (("o (orders)",), repeating)
    t2s = guarded_sqlite.wrap(raw, guard="text_to_sql", dialect=dialect)
    cursor = t2s.cursor() if dialect in ("postgres", "mysql") else t2s
    cursor.execute(ENGINE_SQL)
    assert [tuple(row) for row in cursor.fetchall()] == [(1, "a", 150.0), (2, "b", 7.0)]
    report = cursor.guard_report
    assert (report.trigger, report.action) == ("aggregate_fanout", "aggregate_defanned")
    assert report.final_sql == finding.corrected_sql != ENGINE_SQL
    if row_id is not None:
        assert f'"o"."{row_id}"' in report.final_sql, report.final_sql


@pytest.mark.parametrize("keys", [True, False], ids=["primary-keys", "row-ids"])
def test_duckdb_flags_and_corrects_the_fan_out(keys: bool) -> None:
    duckdb = pytest.importorskip("duckdb")
    raw = duckdb.connect()
    for statement in ENGINE_SCHEMA:
        raw.execute(statement.format(pk=" PRIMARY KEY" if keys else ""))
    check_engine(raw, "duckdb", None if keys else "rowid")
    raw.close()


@pytest.mark.parametrize("keys", [True, False], ids=["primary-keys", "row-ids"])
def test_postgres_flags_and_corrects_the_fan_out(pg_dsn: str, keys: bool) -> None:
    import uuid

    import psycopg

    schema = f"agg_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    try:
        with psycopg.connect(pg_dsn, autocommit=True, options=f"-c search_path={schema}") as raw:
            for statement in ENGINE_SCHEMA:
                raw.execute(statement.format(pk=" PRIMARY KEY" if keys else ""))
            check_engine(raw, "postgres", None if keys else "ctid")
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


NULLABLE_KEY_SCHEMA = [
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)",
    "CREATE TABLE orders (id INTEGER UNIQUE, customer_id INTEGER, total DOUBLE PRECISION)",
    "CREATE TABLE visits (id INTEGER PRIMARY KEY, customer_id INTEGER)",
    "INSERT INTO customers VALUES (1, 'a')",
    "INSERT INTO orders VALUES (NULL, 1, 100), (NULL, 1, 50), (3, 1, 7)",
    "INSERT INTO visits VALUES (1, 1), (2, 1)",
]
NULLABLE_KEY_SQL = (
    "SELECT c.id, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id "
    "JOIN visits v ON v.customer_id = c.id GROUP BY c.id"
)


def check_nullable_key(raw: Any, dialect: str, row_id: str) -> None:
    """Two orders whose nullable UNIQUE id is NULL are two orders: numbered by that id they shared one
    number and text_to_sql served 107 (one of them dropped) instead of 157."""
    con = guarded_sqlite.wrap(raw, guard="text_to_sql", dialect=dialect)
    cursor = con.cursor() if dialect == "postgres" else con
    cursor.execute(NULLABLE_KEY_SQL)
    assert [tuple(row) for row in cursor.fetchall()] == [(1, 157.0)]
    assert cursor.guard_report.action == "aggregate_defanned"
    assert f'"o"."{row_id}"' in cursor.guard_report.final_sql


def test_duckdb_a_nullable_unique_key_does_not_number_rows() -> None:
    duckdb = pytest.importorskip("duckdb")
    raw = duckdb.connect()
    for statement in NULLABLE_KEY_SCHEMA:
        raw.execute(statement)
    check_nullable_key(raw, "duckdb", "rowid")
    raw.close()


def test_postgres_a_nullable_unique_key_does_not_number_rows(pg_dsn: str) -> None:
    import uuid

    import psycopg

    schema = f"agg_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    try:
        with psycopg.connect(pg_dsn, autocommit=True, options=f"-c search_path={schema}") as raw:
            for statement in NULLABLE_KEY_SCHEMA:
                raw.execute(statement)
            check_nullable_key(raw, "postgres", "ctid")
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def _maria_database(params: dict[str, Any]) -> tuple[Any, str]:
    """A fresh database on the session's MariaDB: (an autocommit PyMySQL connection to it, its name)."""
    import uuid

    import pymysql

    name = f"agg_{uuid.uuid4().hex[:12]}"
    admin = pymysql.connect(**params, autocommit=True)
    try:
        admin.cursor().execute(f"CREATE DATABASE {name}")
    finally:
        admin.close()
    return pymysql.connect(**params, database=name, autocommit=True), name


def _drop_maria_database(params: dict[str, Any], name: str) -> None:
    import pymysql

    admin = pymysql.connect(**params, autocommit=True)
    try:
        admin.cursor().execute(f"DROP DATABASE {name}")
    finally:
        admin.close()


def test_mysql_flags_and_corrects_the_fan_out(mariadb_params: dict[str, Any]) -> None:
    raw, name = _maria_database(mariadb_params)
    try:
        for statement in ENGINE_SCHEMA:
            raw.cursor().execute(statement.format(pk=" PRIMARY KEY"))
        check_engine(raw, "mysql", None)
    finally:
        raw.close()
        _drop_maria_database(mariadb_params, name)


def test_mysql_without_keys_nothing_is_corrected_and_the_guard_says_why(mariadb_params: dict[str, Any]) -> None:
    """InnoDB's row id cannot be read: without a NOT NULL key an order has no identity to number it by,
    so nothing is corrected (a nullable UNIQUE key numbered two NULL-keyed orders as one, c05)."""
    raw, name = _maria_database(mariadb_params)
    try:
        for statement in NULLABLE_KEY_SCHEMA:
            raw.cursor().execute(statement)
        cursor = guarded_sqlite.wrap(raw, guard="text_to_sql").cursor()
        cursor.execute(NULLABLE_KEY_SQL)
        assert [tuple(row) for row in cursor.fetchall()] == [(1, 314.0)]  # as written: each order twice
        report = cursor.guard_report
        assert report.action == "none" and report.final_sql == NULLABLE_KEY_SQL
        assert "no row identity for o (orders)" in report.decisions[0].reason
    finally:
        raw.close()
        _drop_maria_database(mariadb_params, name)


# --------------------------------------------------------------------------------------------------
# The oracle on DuckDB, PostgreSQL and MariaDB (issue 24): generated shapes, every engine's row identity
# --------------------------------------------------------------------------------------------------

ENGINE_KEYS = ["pk", "unique", "none"]


@dataclass(frozen=True)
class EngineCase:
    """Tables ``root`` (r) and ``kid1..kid2`` (c1, c2), each with an undeclared unique ``uid`` the oracle
    tells rows apart by (the guard never sees it as a key), and one query."""

    keys: tuple[str, ...]  # per table: "pk", "unique" (nullable) or "none" (the engine's row id)
    rows: tuple[tuple[tuple[Any, ...], ...], ...]  # per table: (uid, id, fk, g, x)
    parents: tuple[int, ...]  # per kid: the table index its fk refers to
    from_sql: str
    group: str | None
    aggs: tuple[tuple[str, str, tuple[int, ...]], ...]  # (function, argument, tables it reads)
    having: int | None
    where: str
    ranked: bool = False  # ORDER BY the first aggregate's alias DESC LIMIT 2 (c01)
    mixed: bool = False  # the first aggregate divided by a COUNT of its table's column (c02)

    @property
    def sql(self) -> str:
        items = [f"{self.group} AS gk"] if self.group else []
        for i, (f, a, _) in enumerate(self.aggs):
            value = f"{f}({a})"
            if i == 0 and self.mixed:
                value += f" / NULLIF(COUNT({a}), 0)"
            items.append(f"{value} AS a{i}")
        text = f"SELECT {', '.join(items)} {self.from_sql}{self.where}"
        if self.group:
            text += f" GROUP BY {self.group}"
            if self.having is not None:
                text += f" HAVING COUNT(*) >= {self.having}"
            if self.ranked:
                text += " ORDER BY a0 DESC, gk LIMIT 2"
        return text

    def ddl(self) -> list[str]:
        out = []
        for index, kind in enumerate(self.keys):
            key = {"pk": " PRIMARY KEY", "unique": " UNIQUE", "none": ""}[kind]
            out.append(
                f"CREATE TABLE {TABLES[index]} (uid INTEGER, id INTEGER{key}, fk INTEGER, g TEXT, x DOUBLE PRECISION)"
            )
        return out

    def inserts(self) -> list[str]:
        def literal(value: Any) -> str:
            return "NULL" if value is None else (f"'{value}'" if isinstance(value, str) else repr(value))

        return [
            f"INSERT INTO {TABLES[index]} VALUES " + ", ".join("(" + ", ".join(map(literal, row)) + ")" for row in rows)
            for index, rows in enumerate(self.rows)
            if rows
        ]

    def oracle(self, run: Any, index: int) -> dict[Any, Any]:
        """Group -> the aggregate over the distinct rows of its argument's tables in the group; for the
        mixed ratio, the written ratio (a count of join rows is never corrected: left as written)."""
        function, argument, reads = self.aggs[index]
        uids = ", ".join(f"{ENGINE_ALIASES[k]}.uid AS u{k}" for k in reads)
        group = self.group or "0"
        if index == 0 and self.mixed:
            text = f"SELECT {group}, {function}({argument}) / NULLIF(COUNT({argument}), 0) {self.from_sql}{self.where}"
            return dict(run(text + (f" GROUP BY {self.group}" if self.group else "")))
        inner = f"SELECT DISTINCT {group} AS g, {uids}, {argument} AS a {self.from_sql}{self.where}"
        return dict(run(f"SELECT s.g, {function}(s.a) FROM ({inner}) s GROUP BY s.g"))


TABLES = ("root", "kid1", "kid2")
ENGINE_ALIASES = ("r", "c1", "c2")


@st.composite
def engine_cases(draw: Any) -> EngineCase:
    kids = draw(st.integers(1, 2))
    keys = tuple(["pk", *(draw(st.sampled_from(ENGINE_KEYS)) for _ in range(kids))])
    uid = iter(range(1, 1000))
    root_ids = draw(st.lists(st.integers(1, 5), min_size=1, max_size=4, unique=True))
    x = st.one_of(st.none(), st.sampled_from([0.0, 0.1, 0.2, -0.3, 1.5, 2.0, 7.0]))
    g = st.sampled_from(["a", "b", "a "])
    tables: list[tuple[tuple[Any, ...], ...]] = [tuple((next(uid), i, None, draw(g), draw(x)) for i in root_ids)]
    parents: list[int] = []
    for number in range(1, kids + 1):
        parent = draw(st.integers(0, number - 1))
        parents.append(parent)
        parent_ids = [row[1] for row in tables[parent] if row[1] is not None]
        rows = []
        for parent_id in parent_ids:
            for _ in range(draw(st.integers(0, 4))):
                n = next(uid)
                ident = None if keys[number] != "pk" and draw(st.integers(0, 4)) == 0 else 100 * number + n
                if keys[number] == "none" and draw(st.booleans()):
                    ident = 7  # keyless tables repeat ids
                rows.append((n, ident, parent_id, draw(g), draw(x)))
        tables.append(tuple(rows))
    parts = ["FROM root AS r"]
    for number in range(1, kids + 1):
        alias, parent = ENGINE_ALIASES[number], ENGINE_ALIASES[parents[number - 1]]
        join = draw(st.sampled_from(["JOIN", "JOIN", "LEFT JOIN"]))
        # A pin in the ON (of a LEFT JOIN: it holds on matched rows only, c03).
        pin = draw(st.sampled_from(["", "", f" AND {alias}.g = 'a'"]))
        parts.append(f"{join} {TABLES[number]} AS {alias} ON {alias}.fk = {parent}.id{pin}")
    group = draw(st.sampled_from([None, "r.id", "r.g", "r.id"]))
    aggs = []
    for _ in range(draw(st.integers(1, 2))):
        # Mostly a table something is joined below (its rows can repeat).
        k = draw(st.sampled_from([*range(kids), *range(kids), kids]))
        function = draw(st.sampled_from(["SUM", "AVG"]))
        argument = draw(st.sampled_from([f"{ENGINE_ALIASES[k]}.x", f"{ENGINE_ALIASES[k]}.x * 2"]))
        aggs.append((function, argument, (k,)))
    where = draw(st.sampled_from(["", "", " WHERE r.x IS NOT NULL", " WHERE r.g <> 'b'"]))
    having = draw(st.sampled_from([None, None, 1, 2])) if group else None
    ranked = group is not None and draw(st.integers(0, 3)) == 0
    mixed = aggs[0][0] == "SUM" and draw(st.integers(0, 4)) == 0
    return EngineCase(
        keys, tuple(tables), tuple(parents), " ".join(parts), group, tuple(aggs), having, where, ranked, mixed
    )


def close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)


def check_engine_case(case: EngineCase, connect: Any, dialect: str, group_key: Any = lambda value: value) -> None:
    """Every served corrected value is the oracle's; nothing is flagged whose aggregates are right;
    the default serves the engine's rows. ``group_key``: a group's value as the engine compares it
    (MariaDB's default collation: 'a' and 'a ' are one group, shown as either)."""
    note(f"ddl={case.ddl()} inserts={case.inserts()}\nsql={case.sql}")
    raw, run, fetch = connect(case)
    written = run(case.sql)
    oracles = [{group_key(g): value for g, value in case.oracle(run, i).items()} for i in range(len(case.aggs))]
    first = 1 if case.group else 0

    def group_of(row: Any) -> Any:
        return group_key(row[0]) if case.group else 0

    def wrong(rows: list[Any]) -> bool:
        return any(
            not close(row[first + i], oracles[i].get(group_of(row))) for row in rows for i in range(len(case.aggs))
        )

    for guard in ("patch", "text_to_sql"):
        rows, report = fetch(guarded_sqlite.wrap(raw, guard=guard, dialect=dialect), case.sql)
        note(f"{guard}: {report.trigger} {report.action} {report.decisions} {report.final_sql}")
        flagged = report.trigger == "aggregate_fanout"
        event(f"{guard}: {report.action if flagged else 'wrong, not flagged' if wrong(written) else 'right'}")
        if flagged:
            assert wrong(written), "flagged, but every written value is the oracle's"
        if guard == "patch" or report.action != "aggregate_defanned":
            if dialect != "mysql":  # MariaDB shows a merged group by any of its values, run to run
                assert sorted(map(repr, rows)) == sorted(map(repr, written))
            else:
                assert len(rows) == len(written)
            if wrong(written) and guard == "text_to_sql":
                # Not corrected: the plan refused (and says why) or could not see a risk.
                assert all(not d.applied for d in report.decisions)
        else:
            assert not wrong(rows), rows
            groups = sorted(map(repr, (group_of(r) for r in rows)))
            if case.ranked:
                assert len(rows) == len(written)  # the top two by the corrected value
            else:
                assert groups == sorted(map(repr, (group_of(r) for r in written)))


@settings(max_examples=60, deadline=None)
@given(case=engine_cases())
def test_sqlite_generated_corrections_are_the_oracles(case: EngineCase) -> None:
    def connect(case: EngineCase) -> Any:
        raw = sqlite3.connect(":memory:")
        for statement in [*case.ddl(), *case.inserts()]:
            raw.execute(statement)

        def fetch(con: Any, sql: str) -> Any:
            cursor = con.execute(sql)
            return cursor.fetchall(), cursor.guard_report

        return raw, lambda sql: raw.execute(sql).fetchall(), fetch

    check_engine_case(case, connect, "sqlite")


@settings(max_examples=60, deadline=None)
@given(case=engine_cases())
def test_duckdb_generated_corrections_are_the_oracles(case: EngineCase) -> None:
    duckdb = pytest.importorskip("duckdb")

    def connect(case: EngineCase) -> Any:
        raw = duckdb.connect()
        for statement in [*case.ddl(), *case.inserts()]:
            raw.execute(statement.replace("DOUBLE PRECISION", "DOUBLE"))
        return (
            raw,
            lambda sql: raw.execute(sql).fetchall(),
            lambda con, sql: (con.execute(sql).fetchall(), con.guard_report),
        )

    check_engine_case(case, connect, "duckdb")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=engine_cases())
def test_postgres_generated_corrections_are_the_oracles(pg_dsn: str, case: EngineCase) -> None:
    import uuid

    import psycopg

    schema = f"agg_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    raw = psycopg.connect(pg_dsn, autocommit=True, options=f"-c search_path={schema}")
    try:

        def connect(case: EngineCase) -> Any:
            for statement in [*case.ddl(), *case.inserts()]:
                raw.execute(statement)

            def fetch(con: Any, sql: str) -> Any:
                cursor = con.cursor()
                cursor.execute(sql)
                return [tuple(r) for r in cursor.fetchall()], cursor.guard_report

            return raw, lambda sql: raw.execute(sql).fetchall(), fetch

        check_engine_case(case, connect, "postgres")
    finally:
        raw.close()
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.mark.parametrize(
    ("sql", "grouped"),
    [
        pytest.param(FANOUT, True, id="sum-at-risk"),
        pytest.param(
            "SELECT c.name, COUNT(*), SUM(o.total), TOTAL(i.qty) FROM customers c JOIN orders o "
            "ON o.customer_id = c.id JOIN items i ON i.order_id = o.id GROUP BY c.id HAVING COUNT(*) > 1",
            True,
            id="counts-and-sums-beside-it",
        ),
        pytest.param(
            "SELECT c.name, MAX(o.total), SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id "
            "JOIN items i ON i.order_id = o.id GROUP BY c.id",
            False,
            id="a-max-keeps-the-window",
        ),
        pytest.param(
            "SELECT c.name, COUNT(DISTINCT i.qty), SUM(o.total) FROM customers c JOIN orders o "
            "ON o.customer_id = c.id JOIN items i ON i.order_id = o.id GROUP BY c.id",
            False,
            id="a-distinct-count-keeps-the-window",
        ),
        pytest.param(
            "SELECT c.name, fx(c.name), SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id "
            "JOIN items i ON i.order_id = o.id GROUP BY c.id",
            False,
            id="an-unknown-function-outside-the-aggregate-keeps-the-window",
        ),
    ],
)
def test_sqlite_check_query_form(shop: sqlite3.Connection, sql: str, grouped: bool) -> None:
    found = plan_of(shop, sql)
    assert found.check_sql is not None and found.corrected_sql is not None, found.note
    for text in (found.check_sql, found.corrected_sql):
        assert ("ROW_NUMBER" not in text.upper()) == grouped, text
    # Other engines always number the rows.
    assert "ROW_NUMBER" in plan_of(shop, sql, "duckdb").check_sql.upper()


class _PlainSum:
    """An application aggregate (``create_aggregate``): a plain sum, inflated by the join as SUM is."""

    def __init__(self) -> None:
        self.total = 0

    def step(self, value: int | None) -> None:
        self.total += value or 0

    def finalize(self) -> int:
        return self.total


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        (
            "SELECT c.name, SUM(c.points) - mysum(c.points) FROM customers c JOIN orders o ON o.customer_id = c.id "
            "GROUP BY c.id ORDER BY c.id",
            "may be an application aggregate: not corrected",
        ),
        (
            "SELECT c.name, SUM(c.points), SUM(c.points) FILTER (WHERE o.status = 'paid') FROM customers c "
            "JOIN orders o ON o.customer_id = c.id GROUP BY c.id ORDER BY c.id",
            "FILTER(WHERE o.status = 'paid') is left as written: not corrected",
        ),
    ],
)
def test_an_aggregate_left_as_written_beside_one_at_risk_keeps_the_row_as_written(sql: str, why: str) -> None:
    """A fuzzer's finds: ``SUM(x) - mysum(x)`` was served with SUM corrected and the application's
    aggregate inflated (0 served as -200), and a FILTERed SUM beside a corrected one (paid points over
    all points). Neither is corrected now; the rows are sqlite3's, the reason in the decision."""
    script = (
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, points INTEGER);"
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, status TEXT);"
        "INSERT INTO customers VALUES (1, 'ann', 200), (2, 'bob', 100);"
        "INSERT INTO orders VALUES (10, 1, 'paid'), (11, 2, 'paid'), (12, 2, 'open'), (13, 2, 'paid');"
    )
    raw = sqlite3.connect(":memory:")
    raw.executescript(script)
    raw.create_aggregate("mysum", 1, _PlainSum)
    con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    con.executescript(script)
    con.create_aggregate("mysum", 1, _PlainSum)
    cur = con.execute(sql)
    assert cur.fetchall() == raw.execute(sql).fetchall()
    assert cur.guard_report is not None
    assert any(why in d.reason and not d.applied for d in cur.guard_report.decisions), cur.guard_report.decisions


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=engine_cases())
def test_mysql_generated_corrections_are_the_oracles(mariadb_params: dict[str, Any], case: EngineCase) -> None:
    """On MariaDB: keys are the only row identity (a keyless or nullable-keyed table's aggregate is not
    corrected, and says why), and groups compare under the default collation."""
    raw, name = _maria_database(mariadb_params)
    try:

        def run(sql: str) -> list[Any]:
            cursor = raw.cursor()
            cursor.execute(sql)
            return list(cursor.fetchall())

        def connect(case: EngineCase) -> Any:
            for statement in [*case.ddl(), *case.inserts()]:
                raw.cursor().execute(statement)

            def fetch(con: Any, sql: str) -> Any:
                cursor = con.cursor()
                cursor.execute(sql)
                return [tuple(r) for r in cursor.fetchall()], cursor.guard_report

            return raw, run, fetch

        check_engine_case(
            case, connect, "mysql", lambda value: value.rstrip(" ").lower() if isinstance(value, str) else value
        )
    finally:
        raw.close()
        _drop_maria_database(mariadb_params, name)


def test_a_finding_shows_a_servers_exact_sum_as_written_and_text_quoted() -> None:
    """PostgreSQL and MySQL sum integers into ``Decimal``: the finding's line reads ``30 -> 10``, as the
    database prints them, not ``Decimal('30') -> Decimal('10')``; text stays quoted."""
    from decimal import Decimal

    from guarded_sqlite.findings import AggregateFinding

    def line(written: object, corrected: object) -> str:
        return AggregateFinding("SUM", "o.total", ("o",), ("i",), written, corrected, 3.0, "SELECT 1").describe()

    assert line(Decimal("30"), Decimal("10")).endswith(": 30 -> 10 (factor 3)")
    assert line(30.5, 10.25).endswith(": 30.5 -> 10.25 (factor 3)")
    assert line("a,a", "a").endswith(": 'a,a' -> 'a' (factor 3)")


@pytest.mark.parametrize(
    ("tail", "risks", "items"),
    [
        pytest.param(" HAVING SUM(o.total) > 60", 1, (1,), id="twin-in-having"),
        pytest.param(" ORDER BY SUM(o.total) DESC LIMIT 1", 1, (1,), id="twin-in-order-by"),
        pytest.param(" HAVING SUM(o.total * 2) > 60", 2, (1, None), id="no-op: another argument"),
        pytest.param(" HAVING AVG(o.total) > 60", 2, (1, None), id="no-op: another function"),
    ],
)
def test_an_aggregate_written_twice_is_one_risk_counted_once_and_corrected_in_both_places(
    shop: sqlite3.Connection, tail: str, risks: int, items: tuple[int | None, ...]
) -> None:
    found = plan_of(shop, FANOUT + tail)
    assert len(found.risks) == risks and found.items == items
    assert found.check_sql is not None and found.corrected_sql is not None
    # Five counting columns per risk, after the statement's own two.
    assert len(shop.execute(found.check_sql).fetchall()[0]) == 2 + 5 * risks
    # Both places corrected: the truth, from the orders alone.
    truth = "SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id"
    truth += " WHERE EXISTS (SELECT 1 FROM items i WHERE i.order_id = o.id) GROUP BY c.id" + tail
    assert shop.execute(found.corrected_sql).fetchall() == shop.execute(truth).fetchall()
