"""``GuardedDatabase`` and the MCP server on a real PostgreSQL server (issue 25 item 4).

The server is the session's throwaway one (``tests/pg_server.py``; CI sets
GUARDED_SQLITE_REQUIRE_POSTGRES=1, so there a missing server fails). Each test gets the demo shop in a
schema of its own, reached through a ``postgresql://`` URI whose ``search_path`` names it: what
``GuardedDatabase.open`` and ``guarded-sqlite mcp`` are given. The role is the one docs/agents.md asks
for (USAGE on the schema, SELECT on its tables), which the tool's check of its grants lets through. The
tests of what the tool refuses a role that could do it (writes, ``COPY``, ``nextval``, a function that
deletes) connect as the server's superuser with ``allow_privileged=True`` (``open_super``), so that
those refusals are the tool's (the statement check, the read-only transaction, the per-call timeout),
not a missing privilege.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

psycopg = pytest.importorskip("psycopg")

from psycopg.conninfo import conninfo_to_dict  # noqa: E402

from guarded_sqlite import wrap  # noqa: E402
from guarded_sqlite.agent import GuardedDatabase, QueryRefused  # noqa: E402
from guarded_sqlite.cli.demo import CUSTOMERS, PRODUCTS, build_shop  # noqa: E402
from tests.agent_cases import (  # noqa: E402
    AGGREGATE,
    FAN_OUT,
    FAN_OUT_EXISTS,
    FEEDBACK_MARKS,
    OpenDb,
    loop_cases,
    opened_databases,
)
from tests.pace import within  # noqa: E402

PG_SHOP = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL, points INTEGER NOT NULL);
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL, price REAL NOT NULL);
CREATE TABLE orders (
    id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id), ordered_on TEXT NOT NULL
);
CREATE TABLE order_items (
    order_id INTEGER NOT NULL REFERENCES orders(id),
    product_id INTEGER NOT NULL REFERENCES products(id),
    quantity INTEGER NOT NULL
);
CREATE SEQUENCE tickets;
"""

CHECKSUM = (
    "SELECT md5(string_agg(x, '|' ORDER BY x)) FROM ("
    "SELECT 'c' || t::text AS x FROM customers t UNION ALL SELECT 'p' || t::text FROM products t "
    "UNION ALL SELECT 'o' || t::text FROM orders t UNION ALL SELECT 'i' || t::text FROM order_items t) all_rows"
)
"""A checksum of every row of the shop: equal before and after means nothing was written."""


class PgShop:
    """The demo shop in a fresh schema; ``uri`` reaches it (its search_path names the schema) as the role
    docs/agents.md asks for, named after the schema (USAGE on it, SELECT on its tables, nothing else);
    ``super_uri`` as the server's superuser, which the tool refuses unless ``allow_privileged``."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn, self.schema = dsn, schema
        parts = conninfo_to_dict(dsn)
        options = quote(f"-c search_path={schema}")
        where = f"@{parts['host']}:{parts['port']}/{parts['dbname']}?options={options}"
        self.uri = f"postgresql://{schema}{where}"
        self.super_uri = f"postgresql://{parts['user']}{where}"

    def admin(self) -> Any:
        """A plain autocommit connection on the schema, for setting up and checking."""
        return psycopg.connect(self.dsn, autocommit=True, options=f"-c search_path={self.schema}")

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        with self.admin() as con:
            return list(con.execute(sql).fetchall())

    def checksum(self) -> Any:
        return self.rows(CHECKSUM)[0][0]


@pytest.fixture
def pg_shop(pg_dsn: str) -> Iterator[PgShop]:
    schema = f"shop_{uuid.uuid4().hex[:12]}"
    shop = PgShop(pg_dsn, schema)
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    with shop.admin() as con, con.cursor() as cur:
        cur.execute(PG_SHOP)
        cur.executemany("INSERT INTO customers VALUES (%s, %s, %s, %s)", CUSTOMERS)
        cur.executemany("INSERT INTO products VALUES (%s, %s, %s, %s)", PRODUCTS)
        # The same orders and lines as guarded_sqlite.cli.demo.build_shop.
        orders = [(i, 1 + i % len(CUSTOMERS), f"2026-{1 + i % 12:02d}-15") for i in range(1, 31)]
        cur.executemany("INSERT INTO orders VALUES (%s, %s, %s)", orders)
        lines = [(o, p, 1) for o in range(1, 31) for p in range(1, len(PRODUCTS) + 1)]
        cur.executemany("INSERT INTO order_items VALUES (%s, %s, %s)", lines)
        cur.execute(f"CREATE ROLE {schema} LOGIN NOINHERIT CONNECTION LIMIT 4")
        cur.execute(f"GRANT USAGE ON SCHEMA {schema} TO {schema}")
        cur.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {schema}")
    try:
        yield shop
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (schema,))
            admin.execute(f"DROP OWNED BY {schema}")
            admin.execute(f"DROP ROLE {schema}")


@pytest.fixture
def open_pg(pg_shop: PgShop) -> Iterator[OpenDb]:
    """``GuardedDatabase.open(uri, ...)`` on the shop, closed after the test; in process, so that tests
    can look at the connection."""
    yield from opened_databases(pg_shop.uri, isolated=False)


@pytest.fixture
def open_super(pg_shop: PgShop) -> Iterator[OpenDb]:
    """``open_pg`` as the server's superuser, which the tool serves only with ``allow_privileged``."""
    yield from opened_databases(pg_shop.super_uri, isolated=False, allow_privileged=True)


@pytest.fixture
def sqlite_shop(tmp_path: Path) -> Path:
    path = tmp_path / "shop.db"
    build_shop(path)
    return path


def refusal(db: GuardedDatabase, sql: str, time_limit: float | None = None) -> QueryRefused:
    with pytest.raises(QueryRefused) as refused:
        db.query(sql, time_limit=time_limit)
    return refused.value


# --- schema ----------------------------------------------------------------------------------------


def test_schema_text_has_keys_foreign_keys_cardinality_and_row_counts(open_pg: OpenDb, pg_shop: PgShop) -> None:
    info = open_pg().schema()
    assert info.dialect == "postgres" and info.default_schema == pg_shop.schema
    tables = {table.name: table for table in info.tables}
    assert {name: table.row_count for name, table in tables.items()} == {
        "customers": 6,
        "orders": 30,
        "order_items": 150,
        "products": 5,
    }
    assert tables["customers"].keys == (("id",),)
    assert tables["customers"].columns == (("id", "integer"), ("name", "text"), ("city", "text"), ("points", "integer"))
    assert tables["order_items"].keys == ()
    fks = {(fk.columns, fk.table, fk.ref_columns, fk.cardinality) for fk in tables["order_items"].foreign_keys}
    assert fks == {
        (("order_id",), "orders", ("id",), "many-to-one"),
        (("product_id",), "products", ("id",), "many-to-one"),
    }
    text = info.text()
    assert text.startswith("Dialect: postgres\n")
    assert "Table orders, 30 rows" in text  # unqualified: the schema is the default one
    assert "foreign key: (customer_id) -> customers(id), many-to-one" in text
    assert "joining orders repeats each customers row once per matching orders row" in text
    assert "keys: none declared (rows may repeat)" in text  # order_items
    assert f"{pg_shop.schema}." not in text


def test_schema_is_the_same_as_on_sqlite_apart_from_types(open_pg: OpenDb, sqlite_shop: Path) -> None:
    pg = open_pg().schema()
    with GuardedDatabase.open(sqlite_shop, isolated=False) as lite:
        sqlite = lite.schema()

    def shape(info: Any) -> list[Any]:
        return [
            (t.name, t.kind, [c for c, _ in t.columns], t.keys, set(t.foreign_keys), t.row_count)
            for t in sorted(info.tables, key=lambda t: t.name)
        ]

    assert shape(pg) == shape(sqlite)


# --- queries and feedback ----------------------------------------------------------------------------


@pytest.mark.parametrize(("guard", "sql"), [("observe", FAN_OUT), ("patch", AGGREGATE), ("text_to_sql", AGGREGATE)])
def test_feedback_is_the_same_as_on_sqlite(open_pg: OpenDb, sqlite_shop: Path, guard: str, sql: str) -> None:
    pg = open_pg(guard=guard).query(sql)
    with GuardedDatabase.open(sqlite_shop, guard=guard, isolated=False) as lite:
        sqlite = lite.query(sql)
    assert pg.feedback and pg.feedback == sqlite.feedback
    assert pg.report.trigger == sqlite.report.trigger and pg.report.action == sqlite.report.action
    assert sorted(pg.rows) == sorted(sqlite.rows)
    assert "Guard feedback:\n" + pg.feedback in pg.observation()


def test_a_healthy_query_has_no_feedback_and_percent_signs_are_text(open_pg: OpenDb) -> None:
    result = open_pg().query("SELECT name FROM customers WHERE name LIKE 'A%' OR city LIKE '%gos' ORDER BY id")
    assert result.rows == (("Ana Lima",), ("Ben Okafor",), ("Femi Adeyemi",))
    assert result.columns == ("name",) and result.feedback == ""


def test_parameters_from_the_caller_are_bound(open_pg: OpenDb) -> None:
    assert open_pg().query("SELECT name FROM customers WHERE id = %s", [3]).rows == (("Chen Wei",),)


def test_a_failed_query_names_the_model_s_sql_not_the_cursor_around_it(open_pg: OpenDb) -> None:
    refused = refusal(open_pg(), "SELECT nme FROM customers")
    assert refused.kind == "sql_error"
    assert 'column "nme" does not exist' in str(refused) and "LINE 1: SELECT nme FROM cu" in str(refused)
    assert "DECLARE" not in str(refused) and "guarded_sqlite_agent" not in str(refused)


# --- writes are refused ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "kind"),
    [
        ("INSERT INTO customers VALUES (7, 'Gil', 'Porto', 10)", "write"),
        ("DELETE FROM orders", "write"),
        ("SELECT 1; DELETE FROM orders", "write"),
        ("SELECT 1; COMMIT", "multiple_statements"),
        ("SELECT '\\'; COMMIT; SELECT 1 --'", "multiple_statements"),  # backslash is no escape in PostgreSQL
        ("WITH gone AS (DELETE FROM orders RETURNING id) SELECT count(*) FROM gone", "write"),
        ("UPDATE customers SET points = 0", "write"),
        ("TRUNCATE order_items", "write"),
        ("SET default_transaction_read_only = off", "write"),
        ("SELECT nextval('tickets')", "write"),  # reads as a query: the read-only transaction refuses it
        ("SELECT set_config('transaction_read_only', 'off', false)", "sql_error"),
    ],
)
@pytest.mark.parametrize("opened", ["uri", "connection"])
def test_writes_are_refused_and_change_nothing(
    open_super: OpenDb, pg_shop: PgShop, sql: str, kind: str, opened: str
) -> None:
    """On a URI, and on a caller's autocommit connection, where the session's
    default_transaction_read_only is off: there the call's own READ ONLY transaction is what refuses."""
    before = pg_shop.checksum()
    if opened == "uri":
        db = open_super()
    else:
        raw = pg_shop.admin()
        assert raw.execute("SHOW default_transaction_read_only").fetchone() == ("off",)
        db = GuardedDatabase(wrap(raw, dialect="postgres"))
    try:
        assert refusal(db, sql).kind == kind
        assert db.query("SELECT count(*) FROM orders").rows == ((30,),)  # the tool keeps answering
    finally:
        if opened == "connection":
            db.close()
    assert pg_shop.checksum() == before
    assert pg_shop.rows("SELECT last_value, is_called FROM tickets") == [(1, False)]


def test_a_function_that_writes_is_stopped_by_the_read_only_transaction(open_super: OpenDb, pg_shop: PgShop) -> None:
    with pg_shop.admin() as con:
        con.execute("CREATE FUNCTION wipe() RETURNS int LANGUAGE sql AS 'DELETE FROM order_items RETURNING 1'")
    before = pg_shop.checksum()
    refused = refusal(open_super(), "SELECT wipe()")  # a SELECT by every reading of its text
    assert refused.kind == "write" and "read-only transaction" in str(refused)
    assert pg_shop.checksum() == before


@pytest.mark.parametrize(
    "sql",
    [
        "COPY customers TO PROGRAM 'touch {marker}'",
        "COPY (SELECT 1) TO '{marker}'",
        "COPY customers FROM PROGRAM 'echo 9,x,y,1'",
        "COPY customers FROM '/etc/hostname'",
    ],
)
def test_copy_to_or_from_a_program_or_file_is_refused(
    open_super: OpenDb, pg_shop: PgShop, tmp_path: Path, sql: str
) -> None:
    marker = Path("/tmp") / f"guarded-pg-{uuid.uuid4().hex}"  # a path the server's user may write
    before = pg_shop.checksum()
    assert refusal(open_super(), sql.format(marker=marker)).kind == "write"
    assert not marker.exists()
    assert pg_shop.checksum() == before


def test_set_config_cannot_lift_the_next_call_s_timeout_or_read_only(open_super: OpenDb, pg_shop: PgShop) -> None:
    # A generous timeout for the benign calls (a busy machine's guard can take over a second for one), and
    # a 1 s time_limit for the slow ones.
    db = open_super(timeout=30)
    lifted = db.query(
        "SELECT set_config('statement_timeout', '0', false), set_config('default_transaction_read_only', 'off', false)"
    )
    assert lifted.rows == (("0", "off"),)  # it ran, inside the call's transaction, which is rolled back
    settings = db.query(
        "SELECT current_setting('statement_timeout'), current_setting('transaction_read_only'), "
        "current_setting('default_transaction_read_only')"
    )
    # The call's own limit, what is left of 30 s since it arrived.
    timeout, *read_only = settings.rows[0]
    left = 30.0 if timeout == "30s" else int(timeout.removesuffix("ms")) / 1000
    assert read_only == ["on", "on"] and left <= 30 and within(30 - left, 0, 0.1), timeout
    started = time.monotonic()
    slow = refusal(db, "SELECT pg_sleep(5)", time_limit=1)
    assert slow.kind == "timeout" and within(time.monotonic() - started, 1, 1)
    # Lifting it in the statement itself does not reach the running statement either.
    started = time.monotonic()
    sql = "SELECT set_config('statement_timeout', '0', false), pg_sleep(5)"
    assert refusal(db, sql, time_limit=1).kind == "timeout"
    assert within(time.monotonic() - started, 1, 1)
    assert refusal(db, "SELECT nextval('tickets')").kind == "write"
    assert db.query("SELECT count(*) FROM customers").rows == ((6,),)


def test_with_writes_allowed_the_lifted_timeout_is_still_set_again(open_super: OpenDb) -> None:
    db = open_super(allow_writes=True, timeout=30)  # the slow call's own time_limit is 1 s
    db.query("SELECT set_config('statement_timeout', '0', false)")  # committed: the session keeps it
    started = time.monotonic()
    assert refusal(db, "SELECT pg_sleep(5)", time_limit=1).kind == "timeout"
    assert within(time.monotonic() - started, 1, 1)


def test_the_cancel_alone_stops_a_call_at_the_deadline(open_pg: OpenDb, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no server-side timeout set (as after a model lifted it for the guard's own statements), the
    cancel request at the deadline ends the call."""
    monkeypatch.setattr("guarded_sqlite._engines.postgres.pg_statement_timeout", lambda limit: None)
    db = open_pg(timeout=30)  # the slow call's own time_limit is 1 s
    assert db.query("SELECT current_setting('statement_timeout')").rows == (("0",),)
    started = time.monotonic()
    assert refusal(db, "SELECT pg_sleep(5)", time_limit=1).kind == "timeout"
    assert within(time.monotonic() - started, 1, 1)
    assert db.query("SELECT 1").rows == ((1,),)


# --- limits ---------------------------------------------------------------------------------------------


def test_max_rows_stops_the_fetch(open_pg: OpenDb, pg_shop: PgShop) -> None:
    db = open_pg(max_rows=5, timeout=30)
    started = time.monotonic()
    refused = refusal(db, "SELECT generate_series(1, 10000000) AS n")
    elapsed = time.monotonic() - started
    assert refused.kind == "too_large" and "limit of 5 rows" in str(refused)
    # Fetching ten million rows to the client takes seconds; the server-side cursor stops at the limit.
    assert within(elapsed, 0, 1.5), elapsed
    assert db.query("SELECT n FROM generate_series(1, 5) AS n").rows == tuple((n,) for n in range(1, 6))
    with pg_shop.admin() as con:  # nothing is left running or open on the server
        active = con.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%generate_series(1, 10000000)%' "
            "AND state <> 'idle' AND pid <> pg_backend_pid()"
        ).fetchone()
    assert active == (0,)


def test_max_chars_is_counted_on_what_the_model_reads(open_pg: OpenDb) -> None:
    refused = refusal(open_pg(max_chars=100), "SELECT name FROM products")
    assert refused.kind == "too_large" and "limit of 100 characters" in str(refused)


def test_a_timeout_leaves_the_tool_and_the_server_answering(open_pg: OpenDb, pg_shop: PgShop) -> None:
    db = open_pg(timeout=30)  # the slow call's own time_limit is 0.5 s
    started = time.monotonic()
    sql = "SELECT count(*) FROM orders a, orders b, orders c, orders d, orders e, orders f"
    refused = refusal(db, sql, time_limit=0.5)
    assert refused.kind == "timeout" and within(time.monotonic() - started, 0.5, 1.0)
    assert db.query("SELECT count(*) FROM customers").rows == ((6,),)
    assert db._raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert pg_shop.rows("SELECT 1") == [(1,)]


# --- writes allowed ----------------------------------------------------------------------------------


def test_with_writes_allowed_one_write_is_committed_and_two_are_refused(open_super: OpenDb, pg_shop: PgShop) -> None:
    db = open_super(allow_writes=True)
    result = db.query("INSERT INTO customers VALUES (7, 'Gil', 'Porto', 10)")
    assert result.rows_changed == 1 and result.observation() == "The statement ran and changed 1 row."
    assert pg_shop.rows("SELECT name FROM customers WHERE id = 7") == [("Gil",)]  # committed
    refused = refusal(db, "INSERT INTO customers VALUES (8, 'Hana', 'Oslo', 1); DELETE FROM orders")
    assert refused.kind == "multiple_statements"
    assert pg_shop.rows("SELECT count(*) FROM orders") == [(30,)]
    assert refusal(db, "INSERT INTO customers VALUES (7, 'Again', 'Porto', 1)").kind == "sql_error"
    assert db.query("SELECT count(*) FROM customers").rows == ((7,),)  # the failed call was rolled back


# --- opening ---------------------------------------------------------------------------------------------


def test_a_server_that_refuses_is_a_value_error_without_the_password() -> None:
    with pytest.raises(ValueError, match="cannot connect") as failed:
        GuardedDatabase.open("postgresql://reader:s3cret@127.0.0.1:1/shop?connect_timeout=2")
    assert "s3cret" not in str(failed.value) and "reader:***@" in str(failed.value)


def test_a_caller_s_connection_works_and_one_inside_a_transaction_is_refused(pg_shop: PgShop) -> None:
    raw = psycopg.connect(pg_shop.dsn, options=f"-c search_path={pg_shop.schema}")  # autocommit off
    try:
        db = GuardedDatabase(wrap(raw, dialect="postgres"), timeout=2)
        assert db.query("SELECT count(*) FROM orders").rows == ((30,),)
        assert refusal(db, "SELECT nextval('tickets')").kind == "write"
        assert raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        # The limit was the call's own (SET LOCAL): the caller's session keeps its setting.
        assert raw.execute("SHOW statement_timeout").fetchone() == ("0",)
        raw.rollback()
        writer = GuardedDatabase(wrap(raw, dialect="postgres"), allow_writes=True, timeout=2)
        assert writer.query("UPDATE customers SET points = points + 1 WHERE id = 1").rows_changed == 1
        assert raw.execute("SHOW statement_timeout").fetchone() == ("0",)
        raw.rollback()
        assert pg_shop.rows("SELECT points FROM customers WHERE id = 1") == [(121,)]  # committed
        raw.execute("SELECT 1")  # psycopg opens a transaction
        with pytest.raises(ValueError, match="has a transaction open"):
            GuardedDatabase(wrap(raw, dialect="postgres"))
    finally:
        raw.close()


# --- the MCP server over a URI ---------------------------------------------------------------------------


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_the_mcp_server_lists_describes_and_queries(open_pg: OpenDb) -> None:
    pytest.importorskip("mcp")
    from mcp import Client

    from guarded_sqlite.agent.mcp_server import build_server

    db = open_pg(guard="observe")
    async with Client(build_server(db)) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        schema = await client.call_tool("schema", {})
        fanned = await client.call_tool("query", {"sql": FAN_OUT})
        refused = await client.call_tool("query", {"sql": "DELETE FROM orders"})
    assert set(tools) == {"query", "schema"}
    assert "postgres dialect" in (tools["query"].description or "")
    assert not schema.is_error and schema.structured_content == db.schema().as_dict()
    assert "foreign key: (customer_id) -> customers(id), many-to-one" in schema.content[0].text  # type: ignore[union-attr]
    assert not fanned.is_error and fanned.structured_content is not None
    assert fanned.structured_content["row_count"] == 30
    assert fanned.structured_content["feedback"].startswith("The query returned 30 rows but only 6 distinct ones")
    assert refused.is_error and refused.content[0].text.startswith("Refused: only queries")  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_the_command_serves_a_postgres_uri_over_stdio(pg_shop: PgShop) -> None:
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "guarded_sqlite", "mcp", pg_shop.uri, "--read-only", "--guard", "observe"]
    )
    before = pg_shop.checksum()
    with anyio.fail_after(30):
        async with Client(params) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            schema = await client.call_tool("schema", {})
            result = await client.call_tool("query", {"sql": FAN_OUT})
            write = await client.call_tool("query", {"sql": "SELECT nextval('tickets')"})
    assert tools == {"query", "schema"}
    assert not schema.is_error and "Table order_items, 150 rows" in schema.content[0].text  # type: ignore[union-attr]
    assert not result.is_error and result.structured_content is not None
    assert result.structured_content["row_count"] == 30
    assert write.is_error and "read-only transaction" in write.content[0].text  # type: ignore[union-attr]
    assert pg_shop.checksum() == before


def test_an_unreachable_server_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    from guarded_sqlite.cli.commands import main

    assert main(["mcp", "postgresql://reader:s3cret@127.0.0.1:1/shop?connect_timeout=2"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("guarded-sqlite mcp: error: postgresql://reader:***@")
    assert "s3cret" not in captured.err


# --- the agent loop, as on SQLite ---------------------------------------------------------------------


@pytest.mark.parametrize(("guard", "first", "revised", "right", "mark"), loop_cases(FAN_OUT_EXISTS))
def test_agent_loop_revises_on_the_feedback_and_gets_the_right_rows(
    open_pg: OpenDb, pg_shop: PgShop, guard: str, first: str, revised: str, right: str, mark: str
) -> None:
    """The scripted model of tests/agent_cases.py: it revises only when the tool's text shows the
    guard's feedback, and ends with the rows the independently written query gives."""
    db = open_pg(guard=guard)
    sent: list[str] = []
    sql: str | None = first
    rows: tuple[tuple[Any, ...], ...] = ()
    while sql is not None:
        sent.append(sql)
        result = db.query(sql)
        rows = result.rows
        shown = result.observation()
        sql = revised if sql == first and FEEDBACK_MARKS[0] in shown and mark in shown else None
    assert sent == [first, revised]
    assert sorted(rows) == sorted(pg_shop.rows(right)) != sorted(pg_shop.rows(first))


@pytest.mark.parametrize(("guard", "first", "revised", "right", "mark"), loop_cases(FAN_OUT_EXISTS))
def test_langchain_agent_loop_on_a_postgres_uri(
    pg_shop: PgShop, guard: str, first: str, revised: str, right: str, mark: str
) -> None:
    """tests/agent/test_langchain_tools.py's scripted agent, on ``open_guarded_sql_tools(uri)``."""
    pytest.importorskip("langchain_core")
    from langchain_core.messages import ToolMessage

    from guarded_sqlite.agent.langchain_tools import open_guarded_sql_tools
    from tests.agent.test_langchain_tools import reviser, sql_of_calls
    from tests.agent.test_langchain_tools import run_agent as run_langchain

    db, _tools = open_guarded_sql_tools(pg_shop.uri, guard=guard)
    with db:
        _model, messages = run_langchain(db, reviser(first, revised))
    assert sql_of_calls(messages) == [first, revised]
    tool_messages = [m for m in messages if isinstance(m, ToolMessage)]
    assert mark in str(tool_messages[0].content) and "Guard feedback:" not in str(tool_messages[-1].content)
    assert sorted(tuple(row) for row in tool_messages[-1].artifact["rows"]) == sorted(pg_shop.rows(right))


@pytest.mark.parametrize(("guard", "first", "revised", "right", "mark"), loop_cases(FAN_OUT_EXISTS))
def test_llama_index_agent_loop_on_a_postgres_uri(
    pg_shop: PgShop, guard: str, first: str, revised: str, right: str, mark: str
) -> None:
    """tests/agent/test_llama_index_tools.py's scripted ReAct agent, on ``open_guarded_sql_tools(uri)``."""
    pytest.importorskip("llama_index.core")
    from guarded_sqlite.agent.llama_index_tools import open_guarded_sql_tools
    from tests.agent.test_llama_index_tools import reviser
    from tests.agent.test_llama_index_tools import run_agent as run_llama

    db, tools = open_guarded_sql_tools(pg_shop.uri, guard=guard)
    with db:
        _llm, results, _response = run_llama(tools, reviser(first, revised))
    assert [r.tool_kwargs["sql"] for r in results] == [first, revised]
    assert mark in results[0].tool_output.content and "Guard feedback:" not in results[-1].tool_output.content
    assert sorted(results[-1].tool_output.raw_output.rows) == sorted(pg_shop.rows(right))
