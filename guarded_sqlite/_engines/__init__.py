"""What differs between database drivers: one small ``Engine`` per supported driver, one
module each (``sqlite``, ``postgres``, ``duckdb``, ``mysql``, ``clickhouse``; ``base`` for what they share).

The probe and the rules are engine-independent; re-executing a patch or a candidate is not. Each
engine knows how to run one query *read-only* on the caller's connection without disturbing it, how
to stop it after a time limit, which sqlglot dialect its SQL is written in, and whether a result is a
real row set or a status (DuckDB answers ``CREATE`` and ``INSERT`` with a one-column status result).

- SQLite (``sqlite3``): ``PRAGMA query_only`` (and ``busy_timeout = 0``) on the same connection, so
  uncommitted changes are seen; both restored on every path; ``interrupt()`` from the watchdog thread
  (``_core.deadlines``) past the time limit.
- PostgreSQL (psycopg 3): ``conn.transaction(force_rollback=True)`` — a savepoint inside an open
  transaction, ``BEGIN``/``ROLLBACK`` otherwise — with ``SET LOCAL transaction_read_only = on`` and a
  local ``statement_timeout``; the caller's transaction state is left exactly as it was. Refused when
  the caller's transaction has already failed (nothing can run in it) or a statement is in flight.
- DuckDB: no savepoints, and any error inside an explicit transaction aborts it, so re-execution runs
  only when no explicit transaction is open, on a duplicate cursor in ``BEGIN TRANSACTION READ ONLY``,
  with ``interrupt()`` from the watchdog thread past the time limit.
- MySQL/MariaDB (PyMySQL): ``START TRANSACTION READ ONLY`` outside a transaction; inside the caller's,
  which cannot be made read-only, a statement proven unable to write as it is and any other between a
  savepoint and its rollback; MariaDB's ``SET STATEMENT max_statement_time`` (see ``mysql``).
- ClickHouse (chDB's ``dbapi``): no transactions; one statement as the server parses it, on a cursor
  of the caller's session, under query-level ``SETTINGS readonly = 1, max_execution_time`` (see
  ``clickhouse``).

Drivers are imported only to recognise their connections, never by ``import guarded_sqlite``.
"""

from __future__ import annotations

import sqlite3
import sys
from typing import Any

from .base import NO_PARAMETERS, Engine, GuardStatement, RerunRefused, WritableNotRestored, execute_with
from .clickhouse import CLICKHOUSE
from .duckdb import DUCKDB
from .mysql import MYSQL
from .postgres import POSTGRES, pg_statement_timeout
from .sqlite import SQLITE

__all__ = [
    "CLICKHOUSE",
    "DUCKDB",
    "ENGINE_ALIASES",
    "ENGINE_NAMES",
    "MYSQL",
    "NO_PARAMETERS",
    "POSTGRES",
    "SQLITE",
    "Engine",
    "GuardStatement",
    "RerunRefused",
    "WritableNotRestored",
    "engine_for",
    "execute_with",
    "isinstance_loaded",
    "pg_statement_timeout",
]

ENGINE_NAMES: tuple[str, ...] = ("sqlite", "duckdb", "postgres", "mysql", "clickhouse")
"""The engines the evaluation (``evaluate``, ``sweep``, ``eval --engine``) runs on: their sqlglot dialect names."""
ENGINE_ALIASES: dict[str, str] = {"postgresql": "postgres", "mariadb": "mysql", "chdb": "clickhouse"}
"""Other names the evaluation takes for an engine of ``ENGINE_NAMES``."""
_BY_DIALECT = {
    "sqlite": SQLITE,
    "postgres": POSTGRES,
    "postgresql": POSTGRES,
    "duckdb": DUCKDB,
    "mysql": MYSQL,
    "mariadb": MYSQL,
    "clickhouse": CLICKHOUSE,
    "chdb": CLICKHOUSE,
}


def engine_for(connection: Any, dialect: str | None = None) -> Engine:
    """The engine for an open connection; ``dialect``, when given, must agree with the driver."""
    detected = _detect(connection)
    if detected is None:
        supported = (
            "sqlite3.Connection, duckdb.DuckDBPyConnection, psycopg.Connection, pymysql.connections.Connection, "
            "chdb.dbapi.connections.Connection"
        )
        raise TypeError(
            f"cannot guard a {type(connection).__module__}.{type(connection).__name__}; supported: {supported}"
        )
    if dialect is not None:
        wanted = _BY_DIALECT.get(dialect.lower())
        if wanted is None:
            known = "'sqlite', 'duckdb', 'postgres', 'mysql', 'clickhouse'"
            raise ValueError(f"unknown dialect {dialect!r}; use one of {known}")
        if wanted is not detected:
            raise ValueError(f"dialect {dialect!r} does not match a {detected.name} connection")
    return detected


_DRIVER_CONNECTIONS = (
    ("duckdb", "DuckDBPyConnection", DUCKDB),
    ("psycopg", "Connection", POSTGRES),
    ("pymysql", "connections.Connection", MYSQL),
    ("chdb.dbapi.connections", "Connection", CLICKHOUSE),
)
"""Each driver's connection class (module, dotted name) and its engine."""


def _detect(connection: Any) -> Engine | None:
    if isinstance(connection, sqlite3.Connection):
        return SQLITE
    for module, name, engine in _DRIVER_CONNECTIONS:
        if isinstance_loaded(connection, module, name):
            return engine
    return None


def isinstance_loaded(value: object, module: str, name: str) -> bool:
    """``isinstance(value, <module>.<name>)`` (``name`` may be dotted) without importing ``module``: False
    while it is not imported, since no object of a driver exists before its module is imported.

    >>> isinstance_loaded(ValueError("x"), "builtins", "Exception")
    True
    >>> isinstance_loaded(object(), "a_driver_never_imported", "Connection")
    False
    """
    found: Any = sys.modules.get(module)
    for part in name.split("."):
        if found is None:
            return False
        found = getattr(found, part, None)
    return found is not None and isinstance(value, found)
