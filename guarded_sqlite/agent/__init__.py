"""The guard for agents: run a model's SQL with limits, hand back rows plus feedback, describe the schema.

Text-to-SQL agents read a tool's answer and write their next query from it. This package is the one
place that decides what such a tool does, so the MCP server (``guarded_sqlite.agent.mcp_server``) and
the LangChain and LlamaIndex tools (``guarded_sqlite.agent.langchain_tools``,
``guarded_sqlite.agent.llama_index_tools``) refuse, limit and report alike:

- ``GuardedDatabase.query`` runs one statement through a guarded connection and returns a
  ``QueryResult``: the rows served, the ``GuardReport`` and its ``feedback()`` text, which tells the
  model when its rows repeat or an aggregate counts rows several times, and what to change.
- It raises ``QueryRefused`` (a clear message for the model, never a crash) for a write while writes
  are off, a result over the row or size limit, a statement that runs past the time limit, and SQL the
  database rejects. Writes are refused by reading the statement (``rewrite.is_read_only_query``) and
  by the engine (``lockdown``: SQLite's ``query_only`` and authorizer, DuckDB read-only and locked
  configuration, PostgreSQL read-only transactions); rows and characters are counted while fetching.
- ``GuardedDatabase.schema`` lists tables with their columns, keys, foreign keys with their cardinality
  (which join repeats which rows), and row counts: what a model needs to join without fanning out.

SQLite files and DuckDB files (and connections) are supported, and PostgreSQL through psycopg 3: a
``postgresql://`` DSN for ``GuardedDatabase.open``, or a guarded ``psycopg.Connection``. There each call
is a transaction of its own (``READ ONLY`` and rolled back unless writes are allowed) with
``statement_timeout`` set ``LOCAL`` to the call's limit, a cancel request at the deadline as the
backstop, and queries read through a server-side cursor, so rows past the limits never leave the server.
MySQL and MariaDB through PyMySQL likewise (a ``mysql://`` or ``mariadb://`` URI, or a guarded
``pymysql`` connection): ``START TRANSACTION READ ONLY`` and the server's statement time limit per call,
``KILL QUERY`` at the deadline, and the session reset after each call (``_mysql_session``).

Its modules: ``_calls`` (limits, ``QueryResult``, ``QueryRefused``), ``_database`` (``GuardedDatabase`` in
this process), ``isolation`` (the same in a worker process, ``GuardedDatabase.open``'s default) and
``_worker`` (that process), ``lockdown`` (what each engine enforces), ``privileges`` (the grants of the
account a PostgreSQL or MySQL/MariaDB URI connects as, read and refused at open), ``schema_description``
(the schema text), ``audit`` (the MCP server's JSON-lines log), and the three surfaces. Importing the package loads
none of the frameworks (``mcp``, langchain-core, llama-index-core) nor sqlglot.
"""

from __future__ import annotations

# The limits and helpers stay importable from here, as before the package (explicit re-exports).
from ._calls import AGENT_GUARD as AGENT_GUARD
from ._calls import DEFAULT_MAX_CHARS as DEFAULT_MAX_CHARS
from ._calls import DEFAULT_MAX_ROWS as DEFAULT_MAX_ROWS
from ._calls import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT
from ._calls import ENGINE_MEMORY as ENGINE_MEMORY
from ._calls import QueryRefused, QueryResult, call_memory_bound, worker_memory_allowance
from ._calls import guard_byte_cap as guard_byte_cap
from ._calls import is_chdb_dsn as is_chdb_dsn
from ._calls import is_mysql_dsn as is_mysql_dsn
from ._calls import is_postgres_dsn as is_postgres_dsn
from ._calls import redact_dsn as redact_dsn
from ._database import GuardedDatabase
from .isolation import IsolatedDatabase, WorkerError
from .schema_info import ForeignKeyInfo, SchemaInfo, TableInfo

__all__ = [
    "ForeignKeyInfo",
    "GuardedDatabase",
    "IsolatedDatabase",
    "QueryRefused",
    "QueryResult",
    "SchemaInfo",
    "TableInfo",
    "WorkerError",
    "call_memory_bound",
    "worker_memory_allowance",
]
