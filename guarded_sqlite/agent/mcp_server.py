"""An MCP server that lets an LLM agent query a SQLite or DuckDB file, or a PostgreSQL database, through
the guard.

Any MCP client (Claude Desktop, an IDE, an agent framework) can start ``guarded-sqlite mcp DB`` (or
``guarded-sqlite mcp postgresql://reader@host/db``) and give its model two tools:

- ``schema``: the tables with their columns, keys, foreign keys and what a join along each repeats,
  and row counts, so the model can write joins that do not fan out;
- ``query``: runs one statement through the guard and returns the rows with the guard's feedback,
  which tells the model when its rows repeat or an aggregate counts rows several times, and what to
  change. The model reads it and revises its query: the guard's findings reach the one who can fix
  the SQL.

Everything a tool does is ``agent.GuardedDatabase``'s (limits, refusals, feedback, the schema); this
module only maps it onto the MCP Python SDK (the optional extra ``guarded-sqlite[mcp]``): structured
content with a text rendering, and every refusal or failure as a tool error result (``isError``) the
model can read and act on, never a protocol error. The SDK is imported when a server is built, so
``guarded_sqlite`` and the CLI import without it.
"""

# No ``from __future__ import annotations`` here: the SDK reads the tool functions' annotations to
# build their schemas, and it resolves string annotations in this module's globals, where the SDK's
# types (imported inside build_server, since the SDK is optional) are not.

import functools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

try:
    # Before Python 3.12 pydantic (which the SDK builds output schemas with) takes nested TypedDicts only
    # from typing_extensions, which the mcp extra brings along.
    from typing_extensions import TypedDict
except ImportError:  # without the extra no server is built and these shapes are only documentation
    from typing import TypedDict

from .._extras import install_hint
from ._calls import QueryRefused
from ._database import GuardedDatabase

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from mcp.types import CallToolResult

    from .audit import AuditLog

__all__ = ["INSTALL_HINT", "INSTRUCTIONS", "build_server"]

logger = logging.getLogger(__name__)

SERVER_NAME = "guarded-sqlite"

INSTALL_HINT = f"the MCP server needs the mcp package: {install_hint('mcp')}"

INSTRUCTIONS = (
    "This server answers questions from a SQL database through guarded_sqlite, a guard that checks "
    "every query result for rows repeated by a join and for aggregates (SUM, AVG, ...) that count rows "
    "several times. Call the schema tool first: it lists the tables, their keys, and which joins repeat "
    "which rows. Then call the query tool with one SELECT statement. When its result has a "
    "'Guard feedback:' section, read it: it says what went wrong and gives a next step; revise the "
    "query accordingly before you answer. A result without 'Guard feedback:' needs no revision."
)

_FEEDBACK_NOTE = (
    "The guard checks every result: when a join repeats rows, or an aggregate (SUM, AVG, ...) counts "
    "rows several times, the result carries 'Guard feedback:' (in the text, and as `feedback` in the "
    "structured result) saying what it found, what it did, and a next step: revise the query and run it "
    "again before answering."
)

SCHEMA_DESCRIPTION = (
    "Describe the database: every table and view with its columns and types, its keys (the columns "
    "that identify one row), its foreign keys with their cardinality (many-to-one: joining the "
    "referencing table repeats each referenced row once per match), and row counts. Call it before "
    "writing queries, and join along keys so that rows do not repeat. The query tool's guard reports "
    "repeated rows and aggregates that count rows several times, with a next step."
)


class _QueryRows(TypedDict):
    columns: list[str]
    rows: list[list[Any]]
    row_count: int
    feedback: str
    report: dict[str, Any]


class QueryOutput(_QueryRows, total=False):
    """The rows of one statement, with the guard's feedback (empty when it found nothing) and its full
    report (QueryResult.as_dict()); ``rows_changed`` only for a write that changed rows."""

    rows_changed: int


class ForeignKeyOutput(TypedDict):
    """A foreign key; cardinality is many-to-one, one-to-one or unknown."""

    columns: list[str]
    table: str
    ref_columns: list[str]
    cardinality: str


class TableOutput(TypedDict):
    """A table or view: columns as [name, type] pairs, keys as lists of column names."""

    name: str
    schema: str
    kind: str
    columns: list[list[str]]
    keys: list[list[str]]
    foreign_keys: list[ForeignKeyOutput]
    row_count: int | None


class SchemaOutput(TypedDict):
    """Every table and view of the database (SchemaInfo.as_dict()); tables in default_schema are named
    without it in SQL."""

    dialect: str
    tables: list[TableOutput]
    default_schema: str


def query_description(db: GuardedDatabase) -> str:
    """The query tool's description, with this server's limits and whether writes run."""
    if db.allow_writes:
        access = (
            "Writes are enabled: INSERT, UPDATE, DELETE and DDL run and are committed, so only write when "
            "the user asked for it."
        )
    else:
        access = "Read-only: only SELECT (or WITH ... SELECT) runs; writes are refused."
    timing = "no time limit" if db.timeout == float("inf") else f"{db.timeout:g} seconds per statement"
    return (
        f"Run one SQL statement ({db.dialect} dialect) on the database and return its rows, as a text "
        "table and as structured columns/rows. "
        f"{_FEEDBACK_NOTE} "
        f"Limits: at most {db.max_rows} rows and {db.max_chars} characters of rows (add LIMIT or aggregate "
        f"for more), {timing}. {access} "
        "A refused or failed statement comes back as a tool error whose text says why and what to do."
    )


def _text_result(text: str, *, error: bool = False, structured: dict[str, Any] | None = None) -> "CallToolResult":
    from mcp.types import CallToolResult, TextContent

    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured, is_error=error)


def _unexpected(tool: str, failure: Exception) -> "CallToolResult":
    """A tool error for a failure that is not a refusal: the model learns it was the tool's fault, the
    server's log (stderr) gets the traceback. Call from inside the ``except`` block."""
    logger.exception("guarded-sqlite MCP tool %r failed unexpectedly", tool)
    reason = " ".join(str(failure).split()) or "no message"
    return _text_result(
        f"The {tool} tool failed unexpectedly ({type(failure).__name__}: {reason}). This is a fault in the "
        "tool, not a verdict on the SQL: try a simpler statement, or tell the user.",
        error=True,
    )


def build_server(
    db: GuardedDatabase,
    *,
    name: str = SERVER_NAME,
    audit: "AuditLog | None" = None,
    audit_best_effort: bool = False,
) -> "MCPServer[Any]":
    """An MCP server (the SDK's ``MCPServer``) with the tools ``query`` and ``schema`` over ``db``.

    Run it with ``.run("stdio")`` (what ``guarded-sqlite mcp`` does), or connect to it in-process with
    ``mcp.Client(server)``. The server does not own ``db``: close it when the server is done. With
    ``audit``, every call is appended to that log (``guarded_sqlite.agent.audit``) before its answer is
    sent, and a call whose line cannot be written (a full disk) is not served: the model gets a tool
    error saying so, the server's stderr the reason. ``audit_best_effort=True`` serves it anyway (the
    failure still goes to stderr). The server does not own the log either."""
    import anyio.to_thread
    from mcp.server.mcpserver import MCPServer
    from mcp.types import CallToolResult, ToolAnnotations
    from pydantic import Field

    from .._version import __version__

    # WARNING: the SDK logs every tool call at INFO to stderr, which an MCP client shows as noise.
    server: MCPServer[Any] = MCPServer(name, instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")

    sql_help = f"One SQL statement in {db.dialect}'s dialect, e.g. SELECT ... FROM ... WHERE ..."

    @server.tool(
        name="query",
        title="Run SQL through the guard",
        description=query_description(db),
        # destructive_hint only means something for a tool that writes.
        annotations=ToolAnnotations(
            read_only_hint=not db.allow_writes, destructive_hint=db.allow_writes or None, open_world_hint=False
        ),
    )
    async def query(sql: Annotated[str, Field(description=sql_help)]) -> Annotated[CallToolResult, QueryOutput]:
        # The limit counts from the request's arrival, here on the event loop: the SDK's thread pool (40
        # threads) may make a call wait for a thread, and that wait is part of the call's time.
        arrived = time.monotonic()
        return await anyio.to_thread.run_sync(functools.partial(run_query, sql, arrived))

    def answer(tool: str, sql: str | None, started: float, call: Callable[[], Any]) -> Any:
        """``call()``'s value, or the tool result that answers instead: a refusal (the model's to act on:
        its message says why and what to do instead), a failure, or a call the audit log did not record."""
        try:
            value = call()
        except QueryRefused as refusal:
            _audit(audit, tool, sql, db.dialect, started, refusal=refusal.kind)
            return _text_result(str(refusal), error=True)
        except Exception as failure:
            _audit(audit, tool, sql, db.dialect, started, failed=True)
            return _unexpected(tool, failure)
        recorded = _audit(audit, tool, sql, db.dialect, started, **({"result": value} if sql is not None else {}))
        return value if recorded or audit_best_effort else _unrecorded(tool)

    def run_query(sql: str, started: float) -> CallToolResult:
        left = db.timeout - (time.monotonic() - started)
        result = answer("query", sql, started, lambda: db.query(sql, time_limit=left))
        if isinstance(result, CallToolResult):
            return result
        return _text_result(result.observation(), structured=result.as_dict())

    @server.tool(
        name="schema",
        title="Describe the tables",
        description=SCHEMA_DESCRIPTION,
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    def schema() -> Annotated[CallToolResult, SchemaOutput]:
        info = answer("schema", None, time.monotonic(), db.schema)
        if isinstance(info, CallToolResult):
            return info
        return _text_result(info.text(), structured=info.as_dict())

    return server


def _audit(audit: "AuditLog | None", tool: str, sql: str | None, dialect: str, started: float, **outcome: Any) -> bool:
    """Append one call to ``audit``: whether it was recorded (or there is no log). A log that cannot be
    written is reported on stderr with the reason; the caller decides what the model gets."""
    if audit is None:
        return True
    from .audit import audit_record

    try:
        audit.write(audit_record(tool, sql, dialect, ended=audit.now(), seconds=time.monotonic() - started, **outcome))
    except Exception:
        logger.exception("guarded-sqlite MCP server could not write its audit log %s", audit.path)
        return False
    return True


def _unrecorded(tool: str) -> "CallToolResult":
    return _text_result(
        f"Refused: the {tool} tool's answer is not served because the server's audit log could not record this "
        "call (the reason is on the server's stderr). This is not about the SQL: tell the user that the "
        "server's audit log needs attention.",
        error=True,
    )
