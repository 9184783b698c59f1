"""The MCP server's audit log (``guarded_sqlite.agent.audit``, ``guarded-sqlite mcp --audit-log``): one JSON line
per call with the SQL's literals replaced, the outcome, rows and the guard's verdict; statements cut
before they are normalised; and a write's answer with the rows it changed."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guarded_sqlite.agent.audit import MAX_LOGGED_SQL, AuditLog, audit_record, logged_sql
from tests.agent_cases import AGGREGATE, FAN_OUT

pytest.importorskip("mcp")

import anyio  # after the skip: anyio comes with the mcp extra
from mcp import Client, StdioServerParameters

from guarded_sqlite.agent import GuardedDatabase
from guarded_sqlite.agent.mcp_server import build_server


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


SECRET = "tok_9f8e7d6c"


@pytest.mark.anyio
async def test_each_call_is_one_line_with_literals_replaced(shop: Path, tmp_path: Path) -> None:
    log_path = tmp_path / "audit.jsonl"
    with GuardedDatabase.open(shop, guard="text_to_sql") as db, AuditLog(log_path) as audit:
        async with Client(build_server(db, audit=audit)) as client:
            await client.call_tool("schema", {})
            await client.call_tool("query", {"sql": f"SELECT name FROM customers WHERE name <> '{SECRET}' AND id > 2"})
            await client.call_tool("query", {"sql": FAN_OUT})
            await client.call_tool("query", {"sql": AGGREGATE})
            await client.call_tool("query", {"sql": f"DELETE FROM orders WHERE note = '{SECRET}'"})
            await client.call_tool("query", {"sql": "SELECT nope FROM customers"})
    records = lines(log_path)
    assert SECRET not in log_path.read_text(encoding="utf-8")
    assert [(r["tool"], r["outcome"], r["refusal"]) for r in records] == [
        ("schema", "served", None),
        ("query", "served", None),
        ("query", "served", None),
        ("query", "served", None),
        ("query", "refused", "write"),
        ("query", "refused", "sql_error"),
    ]
    schema, plain, fan_out, aggregate, write, error = records
    assert error["sql"] == "SELECT nope FROM customers"
    assert schema["sql"] is None
    assert plain["sql"] == "SELECT name FROM customers WHERE name <> ? AND id > ?"
    assert plain["rows"] == 4 and plain["trigger"] is None and plain["action"] == "none"
    assert fan_out["trigger"] == "cartesian_explosion" and fan_out["rows"] is not None
    assert aggregate["trigger"] == "aggregate_fanout"
    assert write["sql"] == "DELETE FROM orders WHERE note = ?" and write["rows"] is None
    assert all(datetime.fromisoformat(r["time"]).tzinfo is not None and r["seconds"] >= 0 for r in records)


@pytest.mark.anyio
async def test_a_writes_answer_and_record_say_how_many_rows_changed(shop: Path, tmp_path: Path) -> None:
    log_path = tmp_path / "audit.jsonl"
    with GuardedDatabase.open(shop, allow_writes=True) as db, AuditLog(log_path) as audit:
        async with Client(build_server(db, audit=audit)) as client:
            deleted = await client.call_tool("query", {"sql": "DELETE FROM orders WHERE customer_id = 1"})
    text = deleted.content[0].text  # type: ignore[union-attr]
    assert text.startswith("The statement ran and changed ") and text.endswith(" rows.")
    changed = int(text.split()[-2])
    assert changed > 1 and deleted.structured_content is not None
    assert deleted.structured_content["rows_changed"] == changed
    assert lines(log_path)[0]["rows_changed"] == changed


def test_the_command_writes_the_log(shop: Path, tmp_path: Path) -> None:
    log_path = tmp_path / "audit.jsonl"

    async def session() -> None:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "guarded_sqlite", "mcp", str(shop), "--audit-log", str(log_path)]
        )
        with anyio.fail_after(30):
            async with Client(params) as client:
                await client.call_tool("query", {"sql": "SELECT 41 + 1 AS answer"})

    anyio.run(session)
    (record,) = lines(log_path)
    assert record["sql"] == "SELECT ? + ? AS answer" and record["rows"] == 1


def test_an_audit_log_that_cannot_be_opened_is_exit_status_2(shop: Path, tmp_path: Path) -> None:
    from guarded_sqlite.cli.commands import main

    assert main(["mcp", str(shop), "--audit-log", str(tmp_path / "no" / "such" / "dir" / "a.jsonl")]) == 2


def test_a_long_statement_is_cut_before_it_is_normalised() -> None:
    sql = "SELECT " + " + ".join(["1"] * 50_000)
    kept = logged_sql(sql, "sqlite")
    assert kept.startswith("SELECT ? + ?") and kept.endswith(f"({len(sql)} characters, cut to {MAX_LOGGED_SQL})")
    assert len(kept) < MAX_LOGGED_SQL + 100


def test_a_record_of_a_refusal_has_no_rows() -> None:
    record = audit_record(
        "query", "SELECT 1", "sqlite", ended=datetime.now(timezone.utc), seconds=0.5, refusal="timeout"
    )
    assert (record.outcome, record.refusal, record.rows, record.trigger, record.action) == (
        "refused",
        "timeout",
        None,
        None,
        None,
    )
    failed = audit_record("schema", None, "sqlite", ended=datetime.now(timezone.utc), seconds=0.1, failed=True)
    assert failed.outcome == "failed" and failed.sql is None


@settings(max_examples=60, deadline=None)
@given(secret=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_@.", max_size=30), cut=st.integers(1, 90))
def test_no_string_literal_reaches_the_log_wherever_the_cut_falls(secret: str, cut: int) -> None:
    sql = f"SELECT id FROM users WHERE token = 'ZZ{secret}' OR mail = 'ZZ{secret}'"
    assert "ZZ" not in logged_sql(sql, "sqlite", limit=cut)


# --- issue 36: literals as the engine reads them, a log that cannot be written -----------------------


@pytest.mark.anyio
async def test_a16_sqlite_double_quoted_strings_are_not_logged(shop: Path, tmp_path: Path) -> None:
    """a16: SQLite serves `WHERE name = "Ana Lima"` (a string: no column has that name); the log hides
    every double-quoted token, a quoted column name too, since only the schema tells them apart."""
    log_path = tmp_path / "audit.jsonl"
    with GuardedDatabase.open(shop) as db, AuditLog(log_path) as audit:
        async with Client(build_server(db, audit=audit)) as client:
            served = await client.call_tool("query", {"sql": 'SELECT "id" FROM customers WHERE name = "Ana Lima"'})
    assert not served.is_error and served.structured_content["rows"] == [[1]]
    (record,) = lines(log_path)
    assert record["sql"] == "SELECT ? FROM customers WHERE name = ?"
    assert "Ana" not in log_path.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("sql", "dialect", "secret"),
    [
        ('SELECT * FROM t WHERE k = "sk_live_9f8e"', "sqlite", "sk_live_9f8e"),
        ("SELECT * FROM t WHERE k = 0xC0FFEE15", "duckdb", "C0FFEE15"),
        ("SELECT * FROM t WHERE k = 0b1011011", "duckdb", "1011011"),
        ("SELECT * FROM t WHERE k = 12_345_678", "postgres", "345"),
        ("SELECT * FROM t WHERE k = X'DEADBEEF'", "sqlite", "DEADBEEF"),
    ],
)
def test_a16_literals_are_hidden_as_the_engine_reads_them(sql: str, dialect: str, secret: str) -> None:
    """a16: what each engine reads as a literal, sqlglot's tokens aside: SQLite's "..." strings, DuckDB's
    0x and 0b numbers, PostgreSQL's digits with underscores."""
    assert secret not in logged_sql(sql, dialect)


@pytest.mark.anyio
@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full to stand in for a full disk")
@pytest.mark.parametrize("best_effort", [False, True])
async def test_a17_a_call_the_log_cannot_record_is_not_served(shop: Path, best_effort: bool) -> None:
    """a17: every write to /dev/full fails as on a full disk: by default no answer is served without
    its record (the model reads why); with best effort the answer is served. Closing never raises."""
    audit = AuditLog("/dev/full")
    with GuardedDatabase.open(shop) as db:
        async with Client(build_server(db, audit=audit, audit_best_effort=best_effort)) as client:
            query = await client.call_tool("query", {"sql": "SELECT name FROM customers WHERE id = 1"})
            schema = await client.call_tool("schema", {})
            refused = await client.call_tool("query", {"sql": "DELETE FROM orders"})
    audit.close()
    assert refused.is_error and "only queries" in refused.content[0].text  # nothing served: the refusal stands
    for result in (query, schema):
        if best_effort:
            assert not result.is_error
        else:
            assert result.is_error and result.structured_content is None
            assert "audit log could not record this call" in result.content[0].text
    if best_effort:
        assert query.structured_content["rows"] == [["Ana Lima"]]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full to stand in for a full disk")
def test_a17_the_command_refuses_unrecorded_calls_and_exits_0(shop: Path) -> None:
    """a17: `guarded-sqlite mcp --audit-log /dev/full` starts, refuses each call it cannot record, and
    exits 0 at disconnect (closing the log used to raise)."""
    import subprocess

    request = (
        '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
        '"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}\n'
        '{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
        '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"query",'
        '"arguments":{"sql":"SELECT id FROM customers"}}}\n'
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "guarded_sqlite", "mcp", str(shop), "--read-only", "--audit-log", "/dev/full"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write(request.encode())
    server.stdin.flush()
    answers = [json.loads(server.stdout.readline()) for _ in range(2)]  # initialize's, then the call's
    _, stderr = server.communicate(timeout=60)  # closes stdin: the client disconnects
    code = server.returncode
    call = answers[1]
    assert call["id"] == 2 and call["result"]["isError"], call
    assert "audit log could not record" in call["result"]["content"][0]["text"]
    assert code == 0, stderr.decode()[-2000:]
