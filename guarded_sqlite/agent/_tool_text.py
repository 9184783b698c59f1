"""What the agent-framework tools (``langchain_tools``, ``llama_index_tools``) tell the model about
themselves: their names, descriptions and argument models, written once so both frameworks' tools read
alike. Only those two modules import it, once their framework (and so pydantic) is imported.

The descriptions name the dialect, the row limit and whether writes are refused, because a model
writes better SQL when it knows them before its first call rather than from a refusal.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from pydantic import BaseModel, Field

from ._database import GuardedDatabase

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "QUERY_TOOL_NAME",
    "SCHEMA_TOOL_DESCRIPTION",
    "SCHEMA_TOOL_NAME",
    "SQL_ARGUMENT_DESCRIPTION",
    "NoInput",
    "OpenOptions",
    "SQLQueryInput",
    "open_with_tools",
    "query_description",
]

QUERY_TOOL_NAME = "sql_query"
SCHEMA_TOOL_NAME = "sql_schema"
SQL_ARGUMENT_DESCRIPTION = "One SQL statement: a SELECT, or WITH ... SELECT."


class SQLQueryInput(BaseModel):
    """The query tool's arguments."""

    sql: str = Field(description=SQL_ARGUMENT_DESCRIPTION)


class NoInput(BaseModel):
    """The schema tool takes no arguments."""


def query_description(db: GuardedDatabase) -> str:
    """The query tool's description for ``db``'s dialect, limits and write setting."""
    writes = "" if db.allow_writes else " Writes are refused."
    return (
        f"Run one SQL query ({db.dialect} dialect) on the database and get its rows as a table.{writes} "
        f"Results over {db.max_rows} rows are refused: add a LIMIT, a WHERE condition or an aggregate. "
        "A guard checks every result: when rows repeat because a join fans out, or an aggregate counts rows "
        "several times, the answer ends with 'Guard feedback:', what was found and what to change. Revise "
        "the query and run it again before you answer."
    )


SCHEMA_TOOL_DESCRIPTION = (
    "List the database's tables: columns, keys, foreign keys with which joins repeat rows (many-to-one), "
    "and row counts. Read it before writing a query that joins tables."
)


class OpenOptions(TypedDict, total=False):
    """``GuardedDatabase.open``'s options, as the frameworks' ``open_guarded_sql_tools`` take them."""

    guard: Any
    read_only: bool
    allow_writes: bool
    allow_privileged: bool
    max_rows: int
    max_chars: int
    timeout: float


_Tools = TypeVar("_Tools")


def open_with_tools(
    make_tools: Callable[[GuardedDatabase], _Tools], path: str | Path, **options: Unpack[OpenOptions]
) -> tuple[GuardedDatabase, _Tools]:
    """``GuardedDatabase.open(path, **options)`` and ``make_tools`` over it; the database is closed again
    if making the tools fails."""
    db = GuardedDatabase.open(path, **options)
    try:
        return db, make_tools(db)
    except BaseException:
        db.close()
        raise
