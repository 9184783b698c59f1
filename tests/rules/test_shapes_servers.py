"""One aggregate plan per statement shape on PostgreSQL and MariaDB (issue 44 item 2): a statement new only
in its literals is served its shape's plan, made once, and gets exactly what a connection planning it as
written serves (a hypothesis property per engine on the throwaway servers, ``tests/pg_server.py`` and
``tests/mariadb_server.py``); parameters bind as before; a unique partial index is never shared over
(PostgreSQL); DDL through the connection, and another search path, make the shape's plan again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import guarded_sqlite
from guarded_sqlite._analysis import plan_cache
from guarded_sqlite._analysis.catalog import AGGREGATES
from guarded_sqlite._rules import confirmations
from guarded_sqlite.report import AGGREGATE_CHECKED, AGGREGATE_NOT_AT_RISK
from tests.engines.test_engines import MariaDatabase, PgSchema, maria_database, pg_schema  # noqa: F401 (fixtures)
from tests.rules.test_shapes import (
    _LITERALS,
    _PREDICATES,
    _served_unordered,
    _shaped_and_planned,
    planned_once_per_shape,
)

SERVERS = ["postgres", "mysql"]

_SCHEMA = [
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name VARCHAR(20), region VARCHAR(5))",
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, total DECIMAL(10, 2), status VARCHAR(5))",
    "CREATE TABLE items (id INTEGER PRIMARY KEY, order_id INTEGER, qty INTEGER)",
]

AT_RISK = (
    "SELECT c.id, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id JOIN items i ON i.order_id = o.id"
)
_TEMPLATES = st.sampled_from(
    [
        AT_RISK + " WHERE {p} GROUP BY c.id",
        AT_RISK + " WHERE {p} GROUP BY c.id HAVING SUM(o.total) > {d}",
        AT_RISK + " WHERE {p} GROUP BY c.id ORDER BY SUM(o.total) DESC, c.id LIMIT {n}",
        "SELECT c.id, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id WHERE {p} GROUP BY c.id",
        "SELECT c.region, AVG(o.total), SUM(i.qty) FROM customers c JOIN orders o ON o.customer_id = c.id "
        "JOIN items i ON i.order_id = o.id WHERE {p} GROUP BY c.region ORDER BY 2, 1",
        "SELECT MAX(s) FROM (" + AT_RISK.replace("SUM(o.total)", "SUM(o.total) AS s") + " WHERE {p}"
        " GROUP BY c.id) AS t",
    ]
)


class Cursors:
    """A connection whose ``execute`` returns the cursor it ran on (PyMySQL's connections have none)."""

    def __init__(self, con: Any) -> None:
        self.con = con

    def execute(self, sql: str, parameters: Any = None) -> Any:
        cur = self.con.cursor()
        cur.execute(sql) if parameters is None else cur.execute(sql, parameters)
        return cur


class Server:
    """The fan-out tables of ``test_shapes`` in a schema (PostgreSQL) or database (MariaDB) of the test's
    own; ``connect(guard)`` opens a new connection to them, guarded unless ``guard`` is None."""

    def __init__(self, engine: str, place: Any) -> None:
        self.engine, self.place = engine, place
        raw = self.connect(None)
        for statement in _SCHEMA:
            raw.execute(statement)
        raw.con.cursor().executemany(
            "INSERT INTO customers VALUES (%s, %s, %s)", [(c, f"c{c % 7}", "nsew"[c % 4]) for c in range(1, 13)]
        )
        raw.con.cursor().executemany(
            "INSERT INTO orders VALUES (%s, %s, %s, %s)",
            [(o, o % 12 + 1, (o % 9) * 1.25 - 2, "ab"[o % 2]) for o in range(1, 41)],
        )
        raw.con.cursor().executemany(
            "INSERT INTO items VALUES (%s, %s, %s)", [(i, i % 43 + 1, i % 5) for i in range(1, 101)]
        )

    def connect(self, guard: str | None = "patch") -> Cursors:
        raw = self.place.connect(autocommit=True)
        return Cursors(raw if guard is None else guarded_sqlite.wrap(raw, guard=guard, dialect=self.engine))


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """The fan-out tables on each server in turn."""
    place = request.getfixturevalue("pg_schema" if request.param == "postgres" else "maria_database")
    yield Server(request.param, place)


def view_of(con: Cursors) -> Any:
    """The guarded connection's catalog view (its verdicts and shapes)."""
    return con.con._self_guard.catalog


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    template=_TEMPLATES,
    predicate=_PREDICATES,
    first=_LITERALS,
    second=_LITERALS,
    guard=st.sampled_from(["patch", "text_to_sql"]),
)
def test_a_shape_plan_serves_what_planning_serves_on_servers(
    server: Server, template: str, predicate: str, first: dict[str, str], second: dict[str, str], guard: str
) -> None:
    """``test_shapes``' property on PostgreSQL and MariaDB: a statement served from its shape's plan, made
    for other literals, gets the rows, columns, trigger and decisions of a connection planning it as
    written (the tables are the test's, unchanged between examples; each example opens new connections)."""
    template = template.replace("{p}", predicate)
    warm, fresh = server.connect(guard), server.connect(guard)
    try:
        sql, shaped, planned = _shaped_and_planned(warm, fresh, template, first, second, _served_unordered)
        assert shaped == planned
        assert view_of(warm).shapes.free  # the shape path was taken
        # The plan served is the plan made for the statement as written, texts and all.
        assert plan_cache.plan(warm.con._self_guard, sql) == view_of(fresh).explain(sql, AGGREGATES)
        if guard == "patch":
            raw = server.connect(None)
            assert shaped[0] == sorted(raw.execute(sql).fetchall(), key=repr)
            raw.con.close()
    finally:
        warm.con.close()
        fresh.con.close()


@pytest.fixture
def planned_texts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts the aggregate plans are made on, in order, shapes' and statements' alike."""
    made: list[str] = []

    def counting(analyser: Any) -> Any:
        def answer(tree: Any, *args: Any, **kwargs: Any) -> Any:
            made.append(tree.sql())
            return analyser(tree, *args, **kwargs)

        return answer

    monkeypatch.setattr(plan_cache, "aggregate_plan", counting(plan_cache.aggregate_plan))
    monkeypatch.setattr(plan_cache, "AGGREGATES", AGGREGATES._replace(answer=counting(AGGREGATES.answer)))
    monkeypatch.setattr(confirmations, "BUDGET_FLOOR", 60.0)
    monkeypatch.setattr(confirmations, "MODEL_BUDGET_FLOOR", 60.0)
    return made


def test_a_statement_new_in_its_literals_is_not_planned_again(server: Server, planned_texts: list[str]) -> None:
    planned_once_per_shape(server.connect("text_to_sql"), planned_texts, AT_RISK)


@pytest.mark.parametrize(
    ("engine", "template", "parameters"),
    [
        ("postgres", AT_RISK + " WHERE c.id > %s AND o.total < {d} GROUP BY c.id HAVING SUM(o.total) > %s", (2, 1.5)),
        (
            "postgres",
            AT_RISK + " WHERE c.id > %(low)s AND c.name <> {s} AND c.name LIKE 'c%%' GROUP BY c.id "
            "HAVING SUM(o.total) > %(high)s",
            {"low": 2, "high": 1.5},
        ),
        # PyMySQL binds on the client: the statement the guard reads holds the values as literals.
        ("mysql", AT_RISK + " WHERE c.id > %s AND o.total < {d} GROUP BY c.id HAVING SUM(o.total) > %s", (2, 1.5)),
        (
            "mysql",
            AT_RISK + " WHERE c.id > %(low)s AND c.name <> {s} GROUP BY c.id HAVING SUM(o.total) > %(high)s",
            {"low": 2, "high": "1.5"},
        ),
    ],
)
def test_parameters_beside_free_literals(
    request: pytest.FixtureRequest, engine: str, template: str, parameters: Any, planned_texts: list[str]
) -> None:
    """psycopg's ``%s`` and ``%(name)s`` are no slots and bind as in a statement planned as written;
    PyMySQL's values, written into the statement, are its literals (a new value: a new statement, one
    shape)."""
    server = Server(engine, request.getfixturevalue("pg_schema" if engine == "postgres" else "maria_database"))
    warm, fresh = server.connect("text_to_sql"), server.connect("text_to_sql")
    warm.execute(template.format(d="9.5", s="'zz'"), parameters).fetchall()
    sql = template.format(d="2.25", s="'c1'")
    cur = warm.execute(sql, parameters)
    shaped = (sorted(cur.fetchall()), cur.guard_report.trigger, [d.reason for d in cur.guard_report.decisions])
    assert len(planned_texts) == 1 and ("918273646" in planned_texts[0] or "'__gs_l" in planned_texts[0])  # markers
    by_shape = plan_cache._by_shape
    plan_cache._by_shape = lambda *args: None  # type: ignore[assignment]
    try:
        cur = fresh.execute(sql, parameters)
        planned = (sorted(cur.fetchall()), cur.guard_report.trigger, [d.reason for d in cur.guard_report.decisions])
    finally:
        plan_cache._by_shape = by_shape  # type: ignore[assignment]
    assert shaped == planned
    assert shaped[1] == "aggregate_fanout", shaped
    # A different value for a parameter: on PostgreSQL the same text (its plan kept), on MariaDB a new
    # statement of the same shape; planned again on neither.
    again = dict(parameters, low=3) if isinstance(parameters, dict) else (3, parameters[1])
    warm.execute(sql, again).fetchall()
    assert len(planned_texts) == 2


@pytest.mark.parametrize(
    ("engine", "literal"),
    [
        ("mysql", "'it\\'s'"),  # PyMySQL escapes a quote so
        ("mysql", "'a\\\\b'"),
        ("mysql", '"c1"'),  # a string in MySQL (without ANSI_QUOTES): read as a quoted name, never a slot
        ("mysql", "_utf8mb4'c1'"),
        ("postgres", "E'c\\x31'"),
        ("postgres", "U&'c1'"),
        ("postgres", "$$c1$$"),
        ("postgres", "$q$c1$q$"),
    ],
)
def test_strings_read_otherwise_give_no_slot(request: pytest.FixtureRequest, engine: str, literal: str) -> None:
    """Backslash escapes, MySQL's double-quoted strings and charset introducers, PostgreSQL's E'..', U&'..'
    and dollar quotes: never a slot (the statement is planned as written, with its literal as a fixed part
    of the text), and the result is what the server gives."""
    server = Server(engine, request.getfixturevalue("pg_schema" if engine == "postgres" else "maria_database"))
    con, raw = server.connect("text_to_sql"), server.connect(None)
    sql = AT_RISK + f" WHERE c.id > 1 AND c.name <> {literal} GROUP BY c.id ORDER BY c.id"
    cur = con.execute(sql)
    assert cur.guard_report.trigger == "aggregate_fanout"
    corrected = raw.execute(sql.replace("JOIN items i ON i.order_id = o.id", "")).fetchall()
    assert list(cur.fetchall()) == list(corrected)
    assert all(literal in key for key in view_of(con).shapes.free), view_of(con).shapes.free  # fixed, as written


def test_a_partial_unique_index_is_never_shared_on_postgres(pg_schema: PgSchema) -> None:  # noqa: F811
    """``test_shapes``' partial index case on PostgreSQL, whose catalog reports it (``_PG_PARTIAL``): with
    'a' the join cannot fan out, with 'b' it can; each is planned as written. An index of another table
    leaves the shape shared."""
    server = Server("postgres", pg_schema)
    admin = server.connect(None)
    admin.execute("DELETE FROM orders WHERE status = 'a' AND id > 12")
    admin.execute("CREATE TABLE others (id INTEGER, k INTEGER)")
    admin.execute("CREATE UNIQUE INDEX one_other ON others (k) WHERE id > 0")
    con = server.connect("text_to_sql")
    shared = "SELECT c.id, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id WHERE c.id > {}"
    con.execute(shared.format(1) + " GROUP BY c.id").fetchall()
    con.execute(shared.format(2) + " GROUP BY c.id").fetchall()
    assert [key[0] for key in view_of(con).verdicts if "aggregates" in key[0]] == [plan_cache.SHAPED]
    admin.execute("CREATE UNIQUE INDEX one_open ON orders (customer_id) WHERE status = 'a'")
    con = server.connect("text_to_sql")
    sql = (
        "SELECT c.name, SUM(c.id) FROM customers c JOIN orders o ON o.customer_id = c.id "
        "WHERE o.status = '{}' GROUP BY c.id"
    )
    triggers = [con.execute(sql.format(status)).guard_report.trigger for status in ("a", "b", "a")]
    assert triggers == [None, "aggregate_fanout", None]
    written = [key[1] for key in view_of(con).verdicts if key[0] == AGGREGATES.kind]
    assert written == [sql.format("a"), sql.format("b")]


def test_ddl_and_another_search_path_make_the_shape_plan_again(server: Server) -> None:
    """The shape's plan is kept with the snapshot's verdicts: DDL through the connection drops them, and
    (PostgreSQL) another search path, set where the guard does not see it, clears them: its tables of the
    same names have other keys."""
    admin = server.connect(None)
    admin.execute("DELETE FROM orders WHERE id > 12")  # one order per customer: checked, never corrected
    con = server.connect("text_to_sql")
    sql = "SELECT c.id, SUM(c.id) FROM customers c JOIN orders o ON o.customer_id = c.id WHERE c.id > {} GROUP BY c.id"
    assert reason(con.execute(sql.format(1))) == AGGREGATE_CHECKED
    con.execute("CREATE UNIQUE INDEX one_order ON orders (customer_id)")
    assert reason(con.execute(sql.format(2))).startswith(AGGREGATE_NOT_AT_RISK)
    assert reason(con.execute(sql.format(3))).startswith(AGGREGATE_NOT_AT_RISK)
    assert [key[0] for key in view_of(con).verdicts] == [plan_cache.SHAPED]  # made again once, after the DDL
    if server.engine != "postgres":
        return
    other = f"{server.place.name}_other"
    admin.execute(f"CREATE SCHEMA {other}")
    try:
        for table in ("customers", "orders"):
            admin.execute(f"CREATE TABLE {other}.{table} AS SELECT * FROM {table}")
        admin.execute(f"ALTER TABLE {other}.customers ADD PRIMARY KEY (id)")
        view = view_of(con)
        con.con.__wrapped__.execute(f"SET search_path = {other}")  # the raw connection: unseen by the guard
        assert reason(con.execute(sql.format(4))) == AGGREGATE_CHECKED
        assert view_of(con) is view  # the same snapshot view, its verdicts cleared on the new search path
    finally:
        admin.execute(f"DROP SCHEMA {other} CASCADE")


def reason(cur: Any) -> str:
    """The aggregate decision's reason on the cursor's report."""
    (decision,) = [d for d in cur.guard_report.decisions if d.rule == "aggregate"]
    return str(decision.reason)
