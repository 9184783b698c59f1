"""Guarded SQL tools for LlamaIndex agents (``pip install 'guarded-sqlite[llama-index]'``).

Two ``llama_index.core.tools.FunctionTool`` objects over one ``agent.GuardedDatabase``, for any
LlamaIndex agent (``ReActAgent``, ``FunctionAgent``, ``AgentWorkflow``):

- ``sql_query`` (argument ``sql``): runs the statement through the guard. The tool output's text is
  ``QueryResult.observation()``: the rows as a table and, when the guard found something (rows a join
  repeats, an aggregate that counts rows several times), its feedback under ``Guard feedback:``,
  which is what lets the model revise its query. ``ToolOutput.raw_output`` is the ``QueryResult``
  (columns, rows, report) for the application. A refusal (``agent.QueryRefused``: a write, bad SQL,
  too many rows, a timeout) is returned as the output's text (its ``raw_output`` is that text too), so
  the agent loop goes on and the model can fix its SQL; the tool never raises it.
- ``sql_schema`` (no arguments): ``SchemaInfo.text()``: tables, columns, keys, foreign keys with the
  joins that repeat rows, row counts.

``guarded_sql_tools(db)`` returns both; ``open_guarded_sql_tools(path, ...)`` opens the database
first and returns it with them. LlamaIndex runs a synchronous tool on a worker thread when an agent calls it, so a
``GuardedDatabase`` built over your own SQLite connection needs it opened with
``check_same_thread=False`` (``GuardedDatabase.open`` does that).

This module imports ``llama_index.core`` when it is imported; ``import guarded_sqlite`` does not import it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._calls import QueryRefused, QueryResult, framework_missing

try:
    from llama_index.core.tools import FunctionTool
except ImportError as missing:  # pragma: no cover - exercised by a test that hides llama_index
    raise framework_missing(__name__, "llama-index-core", "llama-index") from missing

from ._database import GuardedDatabase
from ._tool_text import (
    QUERY_TOOL_NAME,
    SCHEMA_TOOL_DESCRIPTION,
    SCHEMA_TOOL_NAME,
    NoInput,
    OpenOptions,
    SQLQueryInput,
    open_with_tools,
    query_description,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["SQLQueryInput", "guarded_sql_tools", "open_guarded_sql_tools", "query_tool", "schema_tool"]


def _observation(output: Any) -> str | None:
    """FunctionTool's callback: a ``QueryResult`` becomes its observation text (the raw output stays the
    ``QueryResult``); a refusal's text is already what the model should read (None keeps it)."""
    return output.observation() if isinstance(output, QueryResult) else None


def query_tool(db: GuardedDatabase) -> FunctionTool:
    """The ``sql_query`` tool over ``db``."""

    def sql_query(sql: str) -> QueryResult | str:
        try:
            return db.query(sql)
        except QueryRefused as refused:
            return str(refused)

    return FunctionTool.from_defaults(
        fn=sql_query,
        name=QUERY_TOOL_NAME,
        description=query_description(db),
        fn_schema=SQLQueryInput,
        callback=_observation,
    )


def schema_tool(db: GuardedDatabase) -> FunctionTool:
    """The ``sql_schema`` tool over ``db``."""

    def sql_schema() -> str:
        return db.schema().text()

    return FunctionTool.from_defaults(
        fn=sql_schema, name=SCHEMA_TOOL_NAME, description=SCHEMA_TOOL_DESCRIPTION, fn_schema=NoInput
    )


def guarded_sql_tools(db: GuardedDatabase) -> list[FunctionTool]:
    """The query and schema tools over ``db``: pass them to an agent (``ReActAgent(tools=..., llm=...)``;
    under mypy, as ``tools=[*tools]``: the agents declare ``list[BaseTool | Callable]``, and a list's
    item type is invariant)."""
    return [query_tool(db), schema_tool(db)]


def open_guarded_sql_tools(
    path: str | Path, **options: Unpack[OpenOptions]
) -> tuple[GuardedDatabase, list[FunctionTool]]:
    """``GuardedDatabase.open(path, **options)`` and ``guarded_sql_tools`` over it; ``options`` are
    ``open``'s: ``guard`` (default ``"text_to_sql"``), ``read_only``, ``allow_writes``,
    ``allow_privileged`` (unsafe: see ``agent.privileges``), ``max_rows``, ``max_chars`` and ``timeout``.
    ``path`` is a SQLite or DuckDB file, or a ``postgresql://`` URI (each call then runs in a read-only
    transaction of its own, unless ``allow_writes``). The database is returned
    too, to be closed when the agent is done (``with db:`` works)."""
    return open_with_tools(guarded_sql_tools, path, **options)
