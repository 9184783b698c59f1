"""What one agent tool call may take and what it gives back: the default limits, the memory a call may
cost (``call_memory_bound``), ``QueryResult`` and ``QueryRefused``, and how a PostgreSQL target is told
from a file. Shared by the in-process database (``_database``), its worker process (``isolation``) and
the tools over them (``framework_missing``: the error a framework's tools raise when it is not installed)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .._extras import install_hint
from ..report import GuardReport
from .presenting import format_table, json_safe, report_dict

__all__ = [
    "AGENT_GUARD",
    "DEFAULT_MAX_CHARS",
    "DEFAULT_MAX_ROWS",
    "DEFAULT_TIMEOUT",
    "ENGINE_MEMORY",
    "QueryRefused",
    "QueryResult",
    "agent_policy",
    "busy_refusal",
    "call_memory_bound",
    "chdb_folder",
    "framework_missing",
    "guard_byte_cap",
    "is_chdb_dsn",
    "is_mysql_dsn",
    "is_postgres_dsn",
    "redact_dsn",
    "worker_memory_allowance",
]

DEFAULT_MAX_ROWS = 200
"""Rows a query may return before it is refused (the model is asked to add LIMIT or aggregate)."""

DEFAULT_MAX_CHARS = 200_000
"""Characters the rows may take as JSON before the result is refused: a few wide rows can be as big as
many narrow ones, and a model's context is the limit that matters."""

AGENT_GUARD = "text_to_sql"
"""The preset agent tools open databases with: the one meant for generated SQL. Under ``"patch"`` (the
applications' default) a join that repeats rows below ``tau_inject`` is neither flagged nor repaired, so
the model hears nothing: on Spider dev's released predictions, 6-10 of the 10-14 results per system that
``"text_to_sql"`` gives feedback on get none under ``"patch"`` (``benchmarks/closed_loop_results.md``)."""

DEFAULT_TIMEOUT = 10.0
"""Seconds a statement may run before it is interrupted (a cross join can run for hours)."""

ENGINE_MEMORY = {
    "sqlite": 64 * 2**20,
    "duckdb": 512 * 2**20,
    "postgres": 64 * 2**20,
    "mysql": 64 * 2**20,
    "clickhouse": 512 * 2**20,
}
"""Bytes the engine itself may take for one statement in the worker: for chDB the session's
``max_memory_usage`` (``_clickhouse_session.CLICKHOUSE_MEMORY``, 256 MiB) and as much again for the embedded server's
thread pools and caches; DuckDB's ``memory_limit``
(``lockdown.DUCKDB_MEMORY_LIMIT``, 512 MB); for SQLite (2 MB page cache, values capped at
``lockdown.value_length_limit``, sorts and temporary tables in memory, ``temp_store``) the worker's
``hard_heap_limit`` (``lockdown.cap_sqlite_heap``), and for psycopg (rows fetched 16 at a time) and
PyMySQL (a buffered result, which a larger one makes fail inside the worker's cap) a margin, of 64 MiB."""

_SLACK = 32 * 2**20
"""Bytes of margin for the interpreter's own allocations during a call (arenas, thread stacks)."""


def guard_byte_cap(max_chars: int = DEFAULT_MAX_CHARS, max_rows: int = DEFAULT_MAX_ROWS) -> int:
    """The estimated bytes the guard may buffer for an agent tool: a served value costs the estimate 16
    bytes plus its length, and at least two characters of JSON (``agent_policy``).

    >>> guard_byte_cap()
    3213888
    """
    return 16 * max_chars + 64 * (max_rows + 1) + 1024


def worker_memory_allowance(dialect: str, max_chars: int = DEFAULT_MAX_CHARS, max_rows: int = DEFAULT_MAX_ROWS) -> int:
    """Bytes of data the worker process (``guarded_sqlite.agent.isolation``) may allocate past what it holds once
    the database is open: its ``RLIMIT_DATA`` is set that far above. The engine's share
    (``ENGINE_MEMORY``), 16 times what the guard buffers (rows as Python objects, their JSON while
    counted, the pickled answer), and 32 MiB of margin. An allocation past it fails inside the worker and
    the call is refused as ``too_large``; the worker lives on.

    >>> worker_memory_allowance("sqlite") // 2**20, worker_memory_allowance("duckdb") // 2**20
    (145, 593)
    """
    return ENGINE_MEMORY[dialect] + 16 * guard_byte_cap(max_chars, max_rows) + _SLACK


def call_memory_bound(
    dialect: str, max_chars: int = DEFAULT_MAX_CHARS, max_rows: int = DEFAULT_MAX_ROWS, sql_chars: int = 0
) -> int:
    """Bytes one call of an agent tool opened by ``GuardedDatabase.open`` (the MCP server, the
    LangChain and LlamaIndex helpers) may add to the peak memory of its processes, the server and its
    worker together, whatever the statement does, refused or served (issue 25).

    The worker's share is ``worker_memory_allowance``, enforced by ``RLIMIT_DATA``. The server's is what
    it holds of the request and the answer: 32 bytes per character of the statement (the JSON-RPC
    line, the decoded text, the SDK's copies, the pickle to the worker) and 8 times what the guard
    buffers (the answer unpickled, its structured content and text, the JSON-RPC reply), since the
    answer's rows are within ``max_chars``.

    >>> call_memory_bound("sqlite") // 2**20, call_memory_bound("duckdb", sql_chars=2_000_000) // 2**20
    (169, 678)
    """
    return (
        worker_memory_allowance(dialect, max_chars, max_rows) + 8 * guard_byte_cap(max_chars, max_rows) + 32 * sql_chars
    )


_POSTGRES_SCHEMES = ("postgresql://", "postgres://")
"""How a PostgreSQL connection URI starts (libpq accepts both)."""


def is_postgres_dsn(target: object) -> bool:
    """Whether ``target`` (what ``GuardedDatabase.open`` and ``guarded-sqlite mcp`` take) is a PostgreSQL
    connection URI rather than a file path.

    >>> is_postgres_dsn("postgresql://reader@db.internal/shop"), is_postgres_dsn("shop.db")
    (True, False)
    """
    return isinstance(target, str) and target.lower().startswith(_POSTGRES_SCHEMES)


_MYSQL_SCHEMES = ("mysql://", "mariadb://")
"""How a MySQL or MariaDB connection URI starts (``GuardedDatabase.open`` reads it for PyMySQL)."""


def is_mysql_dsn(target: object) -> bool:
    """Whether ``target`` is a MySQL or MariaDB connection URI (``mysql://`` or ``mariadb://``).

    >>> is_mysql_dsn("mariadb://reader@db.internal:3306/shop"), is_mysql_dsn("shop.db")
    (True, False)
    """
    return isinstance(target, str) and target.lower().startswith(_MYSQL_SCHEMES)


_CHDB_SCHEME = "chdb://"


def is_chdb_dsn(target: object) -> bool:
    """Whether ``target`` names a chDB (ClickHouse embedded) folder: ``chdb:///absolute/path`` or
    ``chdb://relative/path``.

    >>> is_chdb_dsn("chdb:///srv/shop"), is_chdb_dsn("shop.db")
    (True, False)
    """
    return isinstance(target, str) and target.lower().startswith(_CHDB_SCHEME)


def chdb_folder(dsn: str) -> str:
    """The folder a ``chdb://`` target names.

    >>> chdb_folder("chdb:///srv/shop"), chdb_folder("chdb://data/shop")
    ('/srv/shop', 'data/shop')
    """
    return dsn[len(_CHDB_SCHEME) :]


def redact_dsn(dsn: str) -> str:
    """``dsn`` with any password replaced by ``***``, for messages that reach a log or a terminal.

    >>> redact_dsn("postgresql://reader:s3cret@db/shop?password=x&sslmode=require")
    'postgresql://reader:***@db/shop?password=***&sslmode=require'
    """
    dsn = re.sub(r"(://[^:/@?#]*):[^@/?#]*@", r"\1:***@", dsn)
    return re.sub(r"(?i)([?&]password=)[^&]*", r"\1***", dsn)


def framework_missing(tools_module: str, distribution: str, extra: str) -> ImportError:
    """What ``langchain_tools`` and ``llama_index_tools`` raise when their framework cannot be imported:
    which distribution ``tools_module`` (the importing module's ``__name__``) needs, and the extra that
    installs it. Here, not with the tools' texts, because this module imports no framework or pydantic.

    >>> print(framework_missing("x_tools", "langchain-core", "langchain"))
    x_tools needs langchain-core: pip install 'langchain-core>=1.0,<2' (the [langchain] extra)
    """
    return ImportError(f"{tools_module} needs {distribution}: {install_hint(extra)}")


class QueryRefused(Exception):
    """A statement the tool does not run, or whose result it does not return. ``str(error)`` is a
    message written for the model: what happened and what to do instead.

    ``kind`` is one of ``"write"`` (writes are off), ``"not_a_query"`` (an unknown first word, most
    likely a typo, while writes are off), ``"too_large"`` (over ``max_rows`` or
    ``max_chars``, a value over the per-value cap, or, with writes off, a statement longer than the
    write check reads: ``rewrite.MAX_PARSED_CHARS``), ``"timeout"``, ``"sql_error"`` (the database
    rejected the statement), ``"multiple_statements"`` (more than one statement in one call),
    ``"empty"`` (no SQL given), ``"denied"`` (a function the tool does not run: PostgreSQL's advisory
    locks, signals to server sessions, SQL given as text), ``"busy"`` (the database was busy with other
    calls for this call's whole time limit; nothing ran), ``"unavailable"`` (the database could not be
    opened or reached; retried on a later call, after a back-off) and ``"connection_lost"`` (the
    connection ended during the call; a new one is opened for the next). ``feedback`` is the guard's
    feedback on the statement, when it ran."""

    def __init__(self, kind: str, message: str, feedback: str = "") -> None:
        super().__init__(message if not feedback else f"{message}\n{feedback}")
        self.kind = kind
        self.feedback = feedback


def busy_refusal(timeout: float) -> QueryRefused:
    """The refusal of a call that could not have the database within its time limit."""
    return QueryRefused(
        "busy",
        f"Refused: the database was busy with other calls for this call's whole time limit ({timeout:g} seconds "
        "at most); nothing was run. Send fewer calls at once, or try again.",
    )


@dataclass(frozen=True)
class QueryResult:
    """What one query returned through the guard."""

    sql: str
    """The statement as the model wrote it."""

    columns: tuple[str, ...]
    """Column names of the result, in order (empty for a statement that returns no rows)."""

    rows: tuple[tuple[Any, ...], ...]
    """The rows the guarded cursor served (after any repair the guard's preset makes)."""

    report: GuardReport
    """The guard's report on the statement (``cursor.guard_report``)."""

    rows_changed: int | None = None
    """Rows a write (INSERT, UPDATE, DELETE) changed, as SQLite's ``rowcount`` gives it; None for a
    query, DDL, or when the database does not say (DuckDB answers a write with a ``Count`` row)."""

    @property
    def feedback(self) -> str:
        """``report.feedback()``: empty when nothing was found or done."""
        return self.report.feedback()

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``columns``, ``rows`` (BLOBs as ``{"hex": ...}``), ``row_count``, ``feedback`` and
        ``report`` (every field of the report)."""
        document = {
            "columns": list(self.columns),
            "rows": json_safe(self.rows),
            "row_count": len(self.rows),
            "feedback": self.feedback,
            "report": report_dict(self.report),
        }
        if self.rows_changed is not None:
            document["rows_changed"] = self.rows_changed
        return document

    def observation(self) -> str:
        """The result as text for a model: a table of the rows, their count, and the guard's feedback
        under ``Guard feedback:`` when there is any."""
        if not self.columns and self.rows_changed is not None:
            plural = "row" if self.rows_changed == 1 else "rows"
            text = f"The statement ran and changed {self.rows_changed} {plural}."
        elif not self.columns:
            text = "The statement ran and returns no rows."
        else:
            plural = "row" if len(self.rows) == 1 else "rows"
            text = "\n".join([*format_table(self.columns, self.rows), f"({len(self.rows)} {plural})"])
        feedback = self.feedback
        return f"{text}\n\nGuard feedback:\n{feedback}" if feedback else text


def agent_policy(guard: Any, limits: dict[str, Any]) -> Any:
    """The guard's policy for an agent tool: it buffers no more bytes than ``max_chars`` of rows can take
    (so a result the tool refuses is never held whole), and a result somewhat over ``max_rows`` is still
    probed, so that its refusal carries the guard's feedback (rows a join repeats)."""
    import dataclasses

    from ..policy import resolve_policy

    policy = resolve_policy(guard)
    max_rows = int(limits.get("max_rows", DEFAULT_MAX_ROWS))
    max_chars = int(limits.get("max_chars", DEFAULT_MAX_CHARS))
    byte_cap = guard_byte_cap(max_chars, max_rows)
    if policy.byte_cap is not None:
        byte_cap = min(byte_cap, policy.byte_cap)
    row_cap = max(1, min(policy.row_cap, max(10 * max_rows, 10_000)))
    return dataclasses.replace(policy, row_cap=row_cap, byte_cap=byte_cap)
