"""Guarded SQL tools for LangChain agents (``pip install 'guarded-sqlite[langchain]'``).

Two tools built on ``langchain-core`` alone, over one ``agent.GuardedDatabase``:

- ``sql_query`` (``GuardedSQLQueryTool``, input ``sql``): runs the statement through the guard. Its
  observation is ``QueryResult.observation()``: the rows as a table and, when the guard found
  something (rows a join repeats, an aggregate that counts rows several times), its feedback under
  ``Guard feedback:``, which is what lets the model revise its query. The message's artifact is
  ``QueryResult.as_dict()`` (columns, rows, report), for the application rather than the model.
  A refusal (``agent.QueryRefused``: a write, bad SQL, too many rows, a timeout) becomes a
  ``ToolException`` that the tool's ``handle_tool_error`` turns into the observation (a
  ``ToolMessage`` with ``status="error"``), so the agent loop goes on and the model can fix its SQL.
- ``sql_schema`` (``GuardedSQLSchemaTool``, no input): ``SchemaInfo.text()``: tables, columns, keys,
  foreign keys with the joins that repeat rows, row counts.

``guarded_sql_tools(db)`` returns both; ``open_guarded_sql_tools(path, ...)`` opens the database
first and returns it with them. Agents run tools on worker threads, so a ``GuardedDatabase`` built over your own SQLite
connection needs it opened with ``check_same_thread=False`` (``GuardedDatabase.open`` does that).

This module imports ``langchain_core`` when it is imported; ``import guarded_sqlite`` does not import it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ._calls import QueryRefused, framework_missing

try:
    from langchain_core.callbacks import CallbackManagerForToolRun
    from langchain_core.tools import ArgsSchema, BaseTool, ToolException
    from langchain_core.tools.base import ToolExceptionHandlerOutput
except ImportError as missing:  # pragma: no cover - exercised by a test that hides langchain_core
    raise framework_missing(__name__, "langchain-core", "langchain") from missing

from pydantic import ConfigDict, Field

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

__all__ = [
    "GuardedSQLQueryTool",
    "GuardedSQLSchemaTool",
    "SQLQueryInput",
    "guarded_sql_tools",
    "open_guarded_sql_tools",
]


class GuardedSQLQueryTool(BaseTool):
    """Run the model's SQL through the guard; the observation is the rows plus the guard's feedback."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    db: GuardedDatabase = Field(exclude=True)
    """The database the tool queries, with its guard and limits."""

    name: str = QUERY_TOOL_NAME
    description: str = ""
    args_schema: ArgsSchema | None = SQLQueryInput
    # A refusal is an answer the model can act on, not a failure of the agent run.
    handle_tool_error: bool | str | Callable[[ToolException], ToolExceptionHandlerOutput] | None = True
    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        # The description names the database's dialect and limits, which are known only here.
        if not self.description:
            self.description = query_description(self.db)

    def _run(self, sql: str, run_manager: CallbackManagerForToolRun | None = None) -> tuple[str, dict[str, Any]]:
        try:
            result = self.db.query(sql)
        except QueryRefused as refused:
            raise ToolException(str(refused)) from refused
        return result.observation(), result.as_dict()


class GuardedSQLSchemaTool(BaseTool):
    """Describe the database's tables, keys and foreign keys for the model."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    db: GuardedDatabase = Field(exclude=True)
    """The database the tool describes."""

    name: str = SCHEMA_TOOL_NAME
    description: str = SCHEMA_TOOL_DESCRIPTION
    args_schema: ArgsSchema | None = NoInput

    def _run(self, run_manager: CallbackManagerForToolRun | None = None) -> str:
        return self.db.schema().text()


def guarded_sql_tools(db: GuardedDatabase) -> list[BaseTool]:
    """The query and schema tools over ``db``: pass them to ``langchain.agents.create_agent``."""
    return [GuardedSQLQueryTool(db=db), GuardedSQLSchemaTool(db=db)]


def open_guarded_sql_tools(path: str | Path, **options: Unpack[OpenOptions]) -> tuple[GuardedDatabase, list[BaseTool]]:
    """``GuardedDatabase.open(path, **options)`` and ``guarded_sql_tools`` over it; ``options`` are
    ``open``'s: ``guard`` (default ``"text_to_sql"``), ``read_only``, ``allow_writes``,
    ``allow_privileged`` (unsafe: see ``agent.privileges``), ``max_rows``, ``max_chars`` and ``timeout``.
    ``path`` is a SQLite or DuckDB file, or a ``postgresql://`` URI (each call then runs in a read-only
    transaction of its own, unless ``allow_writes``). The database is returned
    too, to be closed when the agent is done (``with db:`` works)."""
    return open_with_tools(guarded_sql_tools, path, **options)
