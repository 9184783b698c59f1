"""``guarded_sqlite.agent.mcp_server``: the MCP tools ``query`` and ``schema``, seen through the SDK's own client.

The server runs in-process (``mcp.Client(server)``; one test also through the JSON-RPC framing of the
in-memory transport) on the demo's SQLite shop and on a small DuckDB file, and once as the real
``guarded-sqlite mcp DB`` command over stdio. Refusals must come back as tool errors the model can read,
never as protocol errors or crashes; the agent-loop test shows the point of it all: a model that reads
the guard's feedback revises its query to the right answer, and without the feedback it stops at the
wrong one.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import anyio
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

from guarded_sqlite.agent import GuardedDatabase
from guarded_sqlite.agent.mcp_server import INSTALL_HINT, build_server
from guarded_sqlite.cli.commands import main
from tests.agent_cases import AGGREGATE, FAN_OUT, OpenDb
from tests.pace import within

DUPLICATES_SQL = FAN_OUT
FANOUT_SQL = AGGREGATE
ENDLESS_SQL = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # trio is not a dependency


@pytest.fixture
def duck(tmp_path: Path) -> Path:
    """A DuckDB file with declared keys: customer 1 has three orders, 2 has two, 3 has one."""
    duckdb = pytest.importorskip("duckdb")
    path = tmp_path / "shop.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name VARCHAR NOT NULL, points INTEGER NOT NULL)")
    con.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id))")
    con.execute("INSERT INTO customers VALUES (1, 'Ana', 10), (2, 'Ben', 20), (3, 'Chen', 30)")
    con.execute("INSERT INTO orders VALUES (1, 1), (2, 1), (3, 1), (4, 2), (5, 2), (6, 3)")
    con.close()
    return path


@pytest.fixture
def open_db(shop: Path) -> Iterator[OpenDb]:
    """``GuardedDatabase.open`` (on the shop unless a path is given), closed after the test."""
    opened: list[GuardedDatabase] = []

    def open_(path: Path | None = None, **options: Any) -> GuardedDatabase:
        db = GuardedDatabase.open(path or shop, **options)
        opened.append(db)
        return db

    yield open_
    for db in opened:
        db.close()


@asynccontextmanager
async def connected(db: GuardedDatabase, mode: str = "auto") -> AsyncIterator[Client]:
    async with Client(build_server(db), mode=mode) as client:
        yield client


async def call(db: GuardedDatabase, tool: str, **arguments: Any) -> CallToolResult:
    async with connected(db) as client:
        return await client.call_tool(tool, arguments)


def text_of(result: CallToolResult) -> str:
    """The result's one text block."""
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def plain_rows(path: Path, sql: str) -> list[list[Any]]:
    with sqlite3.connect(path) as con:
        return [list(row) for row in con.execute(sql).fetchall()]


# --- listing ---------------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])  # legacy: initialize handshake, JSON-RPC over memory streams
async def test_list_tools_describes_the_guard_limits_and_writes(open_db: OpenDb, mode: str) -> None:
    async with connected(open_db(max_rows=50, timeout=3), mode) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        instructions = client.instructions
    assert set(listed) == {"query", "schema"}
    query, schema = listed["query"], listed["schema"]
    assert query.description is not None and schema.description is not None
    for needle in ("repeats rows", "counts rows several times", "Guard feedback:", "next step", "at most 50 rows"):
        assert needle in query.description, needle
    assert "3 seconds per statement" in query.description
    assert "Read-only" in query.description and "writes are refused" in query.description
    assert "many-to-one" in schema.description and "row counts" in schema.description
    assert query.input_schema["required"] == ["sql"]
    assert set(schema.input_schema.get("properties", {})) == set()
    assert query.output_schema is not None and set(query.output_schema["properties"]) == {
        "columns",
        "rows",
        "row_count",
        "feedback",
        "report",
        "rows_changed",
    }
    assert "rows_changed" not in query.output_schema["required"]  # only a write's answer has it
    assert schema.output_schema is not None and set(schema.output_schema["properties"]) == {
        "dialect",
        "tables",
        "default_schema",
    }
    assert query.annotations is not None and query.annotations.read_only_hint is True
    assert instructions is not None
    assert "Call the schema tool first" in instructions and "'Guard feedback:'" in instructions


@pytest.mark.anyio
async def test_with_writes_allowed_the_description_says_so(open_db: OpenDb) -> None:
    async with connected(open_db(allow_writes=True)) as client:
        query = next(tool for tool in (await client.list_tools()).tools if tool.name == "query")
    assert query.description is not None and "Writes are enabled" in query.description
    assert query.annotations is not None
    assert query.annotations.read_only_hint is False and query.annotations.destructive_hint is True


# --- schema ----------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_schema_gives_keys_foreign_keys_cardinality_and_row_counts(open_db: OpenDb) -> None:
    db = open_db()
    result = await call(db, "schema")
    assert not result.is_error
    assert result.structured_content == db.schema().as_dict()
    tables = {table["name"]: table for table in result.structured_content["tables"]}
    assert result.structured_content["dialect"] == "sqlite"
    assert {name: table["row_count"] for name, table in tables.items()} == {
        "customers": 6,
        "orders": 30,
        "order_items": 150,
        "products": 5,
    }
    assert tables["customers"]["keys"] == [["id"]]
    assert tables["customers"]["columns"][:2] == [["id", "INTEGER"], ["name", "TEXT"]]
    assert tables["orders"]["foreign_keys"] == [
        {"columns": ["customer_id"], "table": "customers", "ref_columns": ["id"], "cardinality": "many-to-one"}
    ]
    text = text_of(result)
    assert text == db.schema().text()
    assert "Table orders, 30 rows" in text
    assert "foreign key: (customer_id) -> customers(id), many-to-one" in text
    assert "joining orders repeats each customers row once per matching orders row" in text
    assert "keys: none declared (rows may repeat)" in text  # order_items


@pytest.mark.anyio
async def test_schema_on_duckdb(open_db: OpenDb, duck: Path) -> None:
    result = await call(open_db(duck), "schema")
    assert not result.is_error and result.structured_content is not None
    assert result.structured_content["dialect"] == "duckdb"
    tables = {table["name"]: table for table in result.structured_content["tables"]}
    assert tables["customers"]["row_count"] == 3 and tables["orders"]["row_count"] == 6
    assert tables["customers"]["keys"] == [["id"]]
    assert tables["orders"]["foreign_keys"][0]["cardinality"] == "many-to-one"
    assert "foreign key: (customer_id) -> customers(id), many-to-one" in text_of(result)


# --- queries ---------------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id, name, points FROM customers ORDER BY id",
        "WITH rich AS (SELECT * FROM customers WHERE points > 90) SELECT name, city FROM rich ORDER BY name",
    ],
    ids=["select", "with"],
)
async def test_a_healthy_query_returns_sqlite3s_rows_without_feedback(open_db: OpenDb, shop: Path, sql: str) -> None:
    db = open_db()
    result = await call(db, "query", sql=sql)
    assert not result.is_error
    expected = plain_rows(shop, sql)
    content = result.structured_content
    assert content is not None
    assert content["rows"] == expected and content["row_count"] == len(expected)
    with sqlite3.connect(shop) as con:
        assert content["columns"] == [entry[0] for entry in con.execute(sql).description]
    assert content["feedback"] == "" and content["report"]["flagged"] is False
    text = text_of(result)
    assert text == db.query(sql).observation()
    assert f"({len(expected)} rows)" in text and "Guard feedback:" not in text


@pytest.mark.anyio
async def test_repeated_rows_come_back_with_the_feedback_in_both_contents(open_db: OpenDb) -> None:
    result = await call(open_db(guard="observe"), "query", sql=DUPLICATES_SQL)
    assert not result.is_error and result.structured_content is not None
    feedback = result.structured_content["feedback"]
    assert feedback.startswith("The query returned 30 rows but only 6 distinct ones (80% are repeats).")
    assert "Next step: add DISTINCT" in feedback
    assert result.structured_content["row_count"] == 30  # observe serves the rows as returned
    assert result.structured_content["report"]["trigger"] == "cartesian_explosion"
    assert text_of(result).endswith("(30 rows)\n\nGuard feedback:\n" + feedback)


@pytest.mark.anyio
async def test_an_aggregate_fan_out_comes_back_with_the_feedback(open_db: OpenDb) -> None:
    result = await call(open_db(guard="patch"), "query", sql=FANOUT_SQL)
    assert not result.is_error and result.structured_content is not None
    feedback = result.structured_content["feedback"]
    assert feedback.startswith("An aggregate counts rows several times: SUM(c.points) counts c (customers)")
    assert "Next step: aggregate before joining o (orders)" in feedback
    assert result.structured_content["report"]["trigger"] == "aggregate_fanout"
    assert "\n\nGuard feedback:\n" + feedback in text_of(result)


@pytest.mark.anyio
async def test_duckdb_query_and_aggregate_fan_out(open_db: OpenDb, duck: Path) -> None:
    db = open_db(duck, guard="patch")
    healthy = await call(db, "query", sql="SELECT name FROM customers ORDER BY id")
    assert not healthy.is_error and healthy.structured_content is not None
    assert healthy.structured_content["rows"] == [["Ana"], ["Ben"], ["Chen"]]
    fanned = await call(db, "query", sql=FANOUT_SQL + " ORDER BY c.name")
    assert not fanned.is_error and fanned.structured_content is not None
    assert fanned.structured_content["rows"] == [["Ana", 30], ["Ben", 40], ["Chen", 30]]  # as computed
    assert "An aggregate counts rows several times" in fanned.structured_content["feedback"]
    assert "Guard feedback:" in text_of(fanned)
    refused = await call(db, "query", sql="DELETE FROM orders")
    assert refused.is_error and text_of(refused).startswith("Refused: only queries")


# --- refusals: tool errors, never protocol errors ----------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO customers VALUES (7, 'Gil', 'Porto', 10)",
        "DELETE FROM orders",
        "CREATE TABLE notes (id INTEGER PRIMARY KEY)",
        "WITH x AS (SELECT 1) DELETE FROM orders",
    ],
)
@pytest.mark.parametrize("read_only", [False, True], ids=["default", "read-only"])
async def test_writes_are_refused_and_change_nothing(open_db: OpenDb, shop: Path, sql: str, read_only: bool) -> None:
    before = shop.read_bytes()
    result = await call(open_db(read_only=read_only), "query", sql=sql)
    assert result.is_error and result.structured_content is None
    assert text_of(result).startswith("Refused: only queries (SELECT, or WITH ... SELECT) may run here")
    assert "Writes are off" in text_of(result)
    assert shop.read_bytes() == before


@pytest.mark.anyio
async def test_with_writes_allowed_a_write_is_committed(open_db: OpenDb, shop: Path) -> None:
    db = open_db(allow_writes=True)
    async with connected(db) as client:
        inserted = await client.call_tool("query", {"sql": "INSERT INTO customers VALUES (7, 'Gil', 'Porto', 10)"})
        created = await client.call_tool("query", {"sql": "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)"})
        schema = await client.call_tool("schema", {})
    assert not inserted.is_error and not created.is_error
    assert text_of(inserted) == "The statement ran and changed 1 row."
    assert text_of(created) == "The statement ran and returns no rows."
    assert inserted.structured_content is not None and inserted.structured_content["columns"] == []
    # Another connection sees the row: the write is committed, not left in an open transaction.
    assert plain_rows(shop, "SELECT name FROM customers WHERE id = 7") == [["Gil"]]
    assert "Table notes, 0 rows" in text_of(schema)


@pytest.mark.anyio
async def test_results_over_the_limits_are_refused(open_db: OpenDb) -> None:
    rows = await call(open_db(max_rows=5), "query", sql="SELECT * FROM orders")
    assert rows.is_error
    assert text_of(rows).startswith("Refused: the query returned more than this tool's limit of 5 rows.")
    assert "LIMIT" in text_of(rows)
    chars = await call(open_db(max_chars=100), "query", sql="SELECT name FROM products")
    assert chars.is_error and "more than this tool's limit of 100" in text_of(chars)
    small = await call(open_db(max_rows=5), "query", sql="SELECT * FROM orders LIMIT 5")
    assert not small.is_error


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT nme FROM customers", "The query failed: OperationalError: no such column: nme."),
        ("SELECT * FROM clients", "The query failed: OperationalError: no such table: clients."),
        ("SELECT 1; SELECT 2", "You can only execute one statement at a time"),
    ],
)
async def test_bad_sql_is_a_tool_error_with_the_database_message(open_db: OpenDb, sql: str, message: str) -> None:
    result = await call(open_db(), "query", sql=sql)
    assert result.is_error and message in text_of(result)
    assert "Next step: fix the SQL" in text_of(result)


@pytest.mark.anyio
async def test_a_statement_past_the_timeout_is_stopped_and_the_tool_keeps_working(open_db: OpenDb) -> None:
    db = open_db(timeout=0.5)
    async with connected(db) as client:
        started = time.monotonic()
        endless = await client.call_tool("query", {"sql": ENDLESS_SQL})
        elapsed = time.monotonic() - started
        after = await client.call_tool("query", {"sql": "SELECT count(*) FROM customers"})
    assert endless.is_error and text_of(endless).startswith("Refused: the query ran longer than 0.5 seconds")
    assert within(elapsed, 0.5, 4.5), elapsed
    assert not after.is_error and after.structured_content is not None
    assert after.structured_content["rows"] == [[6]]


@pytest.mark.anyio
@pytest.mark.parametrize("sql", ["", "   \n"])
async def test_empty_sql_is_a_tool_error(open_db: OpenDb, sql: str) -> None:
    result = await call(open_db(), "query", sql=sql)
    assert result.is_error and text_of(result).startswith("No SQL was given")


@pytest.mark.anyio
async def test_a_missing_argument_is_a_tool_error_not_a_protocol_error(open_db: OpenDb) -> None:
    async with connected(open_db()) as client:
        result = await client.call_tool("query", {})
    assert result.is_error and "sql" in text_of(result)


@pytest.mark.anyio
async def test_an_unexpected_failure_is_a_clear_tool_error(
    open_db: OpenDb, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    db = open_db()

    def broken(*args: object, **options: object) -> Any:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(db, "query", broken)
    monkeypatch.setattr(db, "schema", broken)
    async with connected(db) as client:
        query = await client.call_tool("query", {"sql": "SELECT 1"})
        schema = await client.call_tool("schema", {})
    for tool, result in (("query", query), ("schema", schema)):
        assert result.is_error
        assert text_of(result).startswith(f"The {tool} tool failed unexpectedly (RuntimeError: disk on fire).")
    assert "failed unexpectedly" in caplog.text  # the traceback goes to the server's log


# --- the agent loop --------------------------------------------------------------------------------

# Each case: the query a model first writes, the revision that "reading" the feedback leads to, the
# phrase of the feedback that triggers it, the right answer written independently, and a guard that
# gives the feedback and one that does not.
LOOP_CASES = {
    "repeated rows": (
        DUPLICATES_SQL,
        "SELECT c.name FROM customers c WHERE c.id IN (SELECT customer_id FROM orders)",
        "are repeats",
        "SELECT name FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)",
        "observe",
        "off",
    ),
    "aggregate fan-out": (
        FANOUT_SQL,
        "SELECT c.name, SUM(c.points) FROM customers c "
        "JOIN (SELECT customer_id FROM orders GROUP BY customer_id) o ON o.customer_id = c.id GROUP BY c.name",
        "An aggregate counts rows several times",
        "SELECT name, points FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)",
        "patch",
        "observe",
    ),
}


def fake_llm(first_sql: str, revision: str, trigger: str, observation: str | None) -> str | None:
    """A deterministic stand-in for the model: it writes ``first_sql``, and revises it only when the
    tool's text shows the guard's feedback; otherwise it answers with the rows it has (None)."""
    if observation is None:
        return first_sql
    if "Guard feedback:" in observation and trigger in observation:
        return revision
    return None


async def agent_loop(db: GuardedDatabase, llm: Callable[[str | None], str | None]) -> tuple[list[Any], list[str]]:
    """Run ``llm`` against the MCP query tool until it stops; the last rows it got, and the SQL it sent."""
    sent: list[str] = []
    rows: list[Any] = []
    observation: str | None = None
    async with connected(db) as client:
        for _ in range(4):
            sql = llm(observation)
            if sql is None:
                break
            sent.append(sql)
            result = await client.call_tool("query", {"sql": sql})
            assert not result.is_error and result.structured_content is not None
            rows = result.structured_content["rows"]
            observation = text_of(result)
    return rows, sent


@pytest.mark.anyio
@pytest.mark.parametrize("case", LOOP_CASES)
async def test_agent_loop_revises_on_the_feedback_and_gets_the_right_rows(
    open_db: OpenDb, shop: Path, case: str
) -> None:
    first_sql, revision, trigger, right_sql, guard_with, guard_without = LOOP_CASES[case]
    right = sorted(plain_rows(shop, right_sql))
    wrong = sorted(plain_rows(shop, first_sql))
    assert wrong != right  # the first query is wrong as a multiset

    def llm(observation: str | None) -> str | None:
        return fake_llm(first_sql, revision, trigger, observation)

    rows, sent = await agent_loop(open_db(guard=guard_with), llm)
    assert sent == [first_sql, revision]
    assert sorted(rows) == right

    # The same model without the feedback: it stops at its first, wrong answer.
    rows, sent = await agent_loop(open_db(guard=guard_without), llm)
    assert sent == [first_sql]
    assert sorted(rows) == wrong != right


# --- the command line ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_command_serves_over_stdio(shop: Path) -> None:
    """The README's one command, as an MCP client starts it: a subprocess speaking JSON-RPC on stdio."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "guarded_sqlite", "mcp", str(shop), "--guard", "observe"]
    )
    with anyio.fail_after(30):
        async with Client(params) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            result = await client.call_tool("query", {"sql": DUPLICATES_SQL})
    assert tools == {"query", "schema"}
    assert not result.is_error and result.structured_content is not None
    assert result.structured_content["row_count"] == 30
    assert "Guard feedback:\nThe query returned 30 rows but only 6 distinct ones" in text_of(result)


def assert_one_line_error(capsys: pytest.CaptureFixture[str], *needles: str) -> None:
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("guarded-sqlite mcp: error: ")
    for needle in needles:
        assert needle in lines[0]


def test_an_unusable_database_path_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mcp", str(tmp_path / "missing.db")]) == 2
    assert_one_line_error(capsys, "missing.db: no such file")
    (tmp_path / "notes.db").write_text("not a database")
    assert main(["mcp", str(tmp_path / "notes.db")]) == 2
    assert_one_line_error(capsys, "not a SQLite database")
    assert main(["mcp", str(tmp_path)]) == 2
    assert_one_line_error(capsys, "is a directory")
    pytest.importorskip("duckdb")
    (tmp_path / "notes.duckdb").write_text("not a database")
    assert main(["mcp", str(tmp_path / "notes.duckdb")]) == 2
    assert_one_line_error(capsys, "notes.duckdb: cannot be opened")


def test_read_only_and_allow_writes_exclude_each_other(shop: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["mcp", str(shop), "--read-only", "--allow-writes"])
    assert exited.value.code == 2
    assert "argument --allow-writes: not allowed with argument --read-only" in capsys.readouterr().err
    with pytest.raises(ValueError, match="exclude each other"):
        GuardedDatabase.open(shop, read_only=True, allow_writes=True)


# Without the mcp package: the core and the CLI import, --help works, and `mcp` names the extra.
WITHOUT_MCP = r"""
import importlib.abc, sys
class NoMcp(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("mcp", "mcp_types"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, NoMcp())
import guarded_sqlite, guarded_sqlite.cli.commands, guarded_sqlite.agent.mcp_server
from guarded_sqlite.cli.commands import main
try:
    main(["--help"])
except SystemExit as done:
    assert done.code == 0, done.code
sys.exit(main(["mcp", sys.argv[1]]))
"""


def test_without_the_mcp_package_the_command_names_the_extra(shop: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", WITHOUT_MCP, str(shop)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert "{demo,query,mcp,eval,sweep}" in done.stdout  # --help
    assert done.stderr.startswith(f"guarded-sqlite mcp: error: {INSTALL_HINT}")
    assert len(done.stderr.splitlines()) == 1


def test_importing_the_package_does_not_import_mcp() -> None:
    check = (
        "import sys, guarded_sqlite, guarded_sqlite.cli.commands, guarded_sqlite.agent.mcp_server\n"
        "import guarded_sqlite.agent\n"
        "loaded = sorted(m for m in sys.modules if m.partition('.')[0] in ('mcp', 'mcp_types'))\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-W", "error", "-c", check], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_command_defaults_to_the_agent_preset_and_writes_off(shop: Path) -> None:
    from guarded_sqlite.cli.commands import _parser

    args = _parser().parse_args(["mcp", str(shop)])
    assert (args.guard, args.read_only, args.allow_writes) == ("text_to_sql", False, False)
