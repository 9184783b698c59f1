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
