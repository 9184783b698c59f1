"""How a failed statement is told to the model: the database's error, clipped, and turned into the
``QueryRefused`` whose kind and message say what to do instead (``failure_refusal``)."""

from __future__ import annotations

import re
import sqlite3
import sys

from .._engines import isinstance_loaded
from ._calls import QueryRefused

__all__ = [
    "CURSOR_NAME",
    "DUCKDB_READ_WORDS",
    "ERROR_CHARS",
    "EXPLAIN_PREFIX",
    "NOT_QUERY_WORDS",
    "QUERY_WORDS",
    "clipped",
    "failure_refusal",
    "first_word",
    "is_database_error",
    "lost_again",
]

CURSOR_NAME = "guarded_sqlite_agent"
"""The server-side cursor a PostgreSQL call's query is declared as (one per call, closed with its
transaction)."""

_DECLARED = re.compile(r'(?:\.\.\.)?[A-Za-z]*\s*"' + CURSOR_NAME + r'" CURSOR FOR ')
"""The ``DECLARE`` in PostgreSQL's excerpt of a failed query (``LINE 1: DECLARE "..." CURSOR FOR SELECT
nme``, or ``...ECLARE`` when cut): removed from what the model reads."""

EXPLAIN_PREFIX = "EXPLAIN (VERBOSE, FORMAT JSON) "
"""What ``lockdown.postgres_plan_problem`` puts before a model's statement to read the server's plan of it."""

_EXPLAINED = re.compile(r"(?:\.\.\.)?(?:EXPLAIN \(VERBOSE, )?[A-Z]*\s?JSON\) ")
"""The EXPLAIN in PostgreSQL's excerpt of a statement that failed while it was planned (``LINE 1:
EXPLAIN (VERBOSE, FORMAT JSON) SELECT nme``, or ``...MAT JSON) SELECT`` when cut): removed as well."""


def failure_refusal(
    failure: Exception,
    *,
    timed_out: bool,
    dialect: str,
    allow_writes: bool,
    timeout: float,
    value_limit: str,
    feedback: str,
) -> QueryRefused:
    """The refusal for a statement that failed with ``failure`` (``feedback``: the guard's on it);
    raises ``failure`` itself when it is not the database's own error (a bug keeps its traceback)."""
    from ..errors import describe_error

    # An error may quote the model's value whole (DuckDB's error('x' * 10**7), a failed CAST): clipped
    # before anything reads it, so the reply stays small and the DECLARE pattern's time bounded.
    feedback = clipped(feedback)
    message = clipped(describe_error(failure))
    if dialect == "postgres":  # the model wrote the query, not the DECLARE around it
        feedback, message = _DECLARED.sub("", feedback), _DECLARED.sub("", message)
        feedback, message = _EXPLAINED.sub("", feedback), _EXPLAINED.sub("", message)
    if timed_out:
        return QueryRefused(
            "timeout",
            f"Refused: the query ran longer than {timeout:g} seconds and was stopped. A join without "
            "a condition, or over many rows, can run that long; add join conditions or a LIMIT.",
        )
    if not is_database_error(failure):
        raise failure
    if "string or blob too big" in message:
        return QueryRefused(
            "too_large",
            f"Refused: a value in the result is longer than this tool serves (values are capped at "
            f"{value_limit}). Select a part of it (substr) or its length instead.",
        )
    if dialect == "clickhouse" and ("(TOO_MANY_ROWS_OR_BYTES)" in message or "(MEMORY_LIMIT_EXCEEDED)" in message):
        return QueryRefused(
            "too_large",
            f"Refused: the statement's result or memory passed this tool's limits ({message}). Add a LIMIT or "
            "a WHERE condition, aggregate, or select fewer or smaller values.",
        )
    if "out of memory" in message.lower():  # DuckDB's memory_limit, the worker's RLIMIT_DATA, libpq
        return QueryRefused(
            "too_large",
            f"Refused: the statement needed more memory than this tool allows a call ({message}). Select "
            "fewer or smaller values (substr, length, aggregates), or add a LIMIT.",
        )
    if dialect == "mysql" and "The table '(temporary)' is full" in message:  # tmp_disk_table_size
        return QueryRefused(
            "too_large",
            f"Refused: the statement needed more temporary disk space on the server than this tool allows a "
            f"call ({message}). Filter or aggregate before grouping, DISTINCT or UNION, or add a LIMIT.",
        )
    if _is_postgres_denial(failure) or _is_mysql_denial(failure):
        return QueryRefused(
            "write" if not allow_writes else "sql_error",
            f"Refused: the database denied this statement ({message}): this tool runs each call in a "
            "read-only transaction (while writes are off) as a role that may only read.",
        )
    if dialect == "clickhouse" and ("(READONLY)" in message or "(ACCESS_DENIED)" in message):
        return QueryRefused(
            "write" if not allow_writes else "sql_error",
            f"Refused: the database denied this statement ({message}): this tool's ClickHouse session is "
            "read-only (while writes are off), and its settings cannot be changed.",
        )
    if "not authorized" in message or "prohibited" in message:
        return QueryRefused(
            "write" if not allow_writes else "sql_error",
            f"Refused: the database denied this statement ({message}): ATTACH, VACUUM, writes (while "
            "writes are off), settings and functions that reach outside the database are not available "
            "to this tool.",
        )
    # The feedback already opens with "The query failed: <error>."; say it once.
    return QueryRefused("sql_error", feedback or f"The query failed: {message}.")


def lost_again(lost: BaseException) -> QueryRefused:
    """The refusal of a call whose connection was found lost before the model's statement was sent, and
    again on the connection that replaced it."""
    return QueryRefused(
        "unavailable",
        f"Refused: the database connection was lost ({lost}), and again on a new one; try "
        "again shortly, or tell the user the database is unavailable.",
    )


_DRIVER_ERRORS = (
    ("duckdb", "Error"),
    ("psycopg", "Error"),
    ("pymysql", "Error"),
    # chDB raises chdb._exceptions.ChdbError (a RuntimeError; chdb.ChdbError is another class), and its
    # dbapi's err.Error for misuse (a closed connection).
    ("chdb._exceptions", "ChdbError"),
    ("chdb.dbapi.err", "Error"),
)


def is_database_error(failure: Exception) -> bool:
    if isinstance(failure, sqlite3.Error):
        return True
    # The other drivers' errors can only come from a driver already imported: none is imported here.
    return any(isinstance_loaded(failure, module, name) for module, name in _DRIVER_ERRORS)


def _is_postgres_denial(failure: Exception) -> bool:
    """A write in a read-only transaction (SQLSTATE 25006) or a privilege the role lacks (42501)."""
    psycopg = sys.modules.get("psycopg")
    if psycopg is None or not isinstance(failure, psycopg.Error):
        return False
    return isinstance(failure, (psycopg.errors.ReadOnlySqlTransaction, psycopg.errors.InsufficientPrivilege))


_MYSQL_DENIALS = frozenset({1792, 1142, 1143, 1044, 1045, 1227, 1370, 1290})
"""MySQL/MariaDB: a write in a read-only transaction (1792), a privilege the account lacks (table,
column, database, global, routine), and the server's own restrictions (``--read-only``,
``secure_file_priv``: 1290)."""


def _is_mysql_denial(failure: Exception) -> bool:
    pymysql = sys.modules.get("pymysql")
    if pymysql is None or not isinstance(failure, pymysql.MySQLError):
        return False
    return bool(failure.args) and failure.args[0] in _MYSQL_DENIALS


ERROR_CHARS = 2_000
"""Most characters of a database error (and of the guard's feedback on it) a refusal quotes."""


def clipped(text: str) -> str:
    if len(text) <= ERROR_CHARS:
        return text
    return f"{text[:ERROR_CHARS]}... ({len(text) - ERROR_CHARS:,} more characters not shown)"


QUERY_WORDS = frozenset({"SELECT", "WITH", "VALUES", "FROM", "TABLE"})
"""First words of statements that read as queries (DuckDB's ``FROM t`` among them): refused only for a
write inside (``WITH ... DELETE``)."""

DUCKDB_READ_WORDS = QUERY_WORDS | {"DESCRIBE", "SHOW", "SUMMARIZE"}

NOT_QUERY_WORDS = frozenset(
    "INSERT UPDATE DELETE REPLACE UPSERT MERGE CREATE DROP ALTER TRUNCATE ATTACH DETACH PRAGMA VACUUM "
    "REINDEX ANALYZE ANALYSE BEGIN COMMIT ROLLBACK END SAVEPOINT RELEASE COPY INSTALL LOAD SET RESET CALL "
    "EXPORT IMPORT CHECKPOINT GRANT REVOKE USE EXPLAIN DESCRIBE SHOW SUMMARIZE COMMENT HANDLER DO KILL LOCK "
    "UNLOCK FLUSH RENAME START XA PREPARE EXECUTE DEALLOCATE OPTIMIZE REPAIR INSTALL UNINSTALL".split()
)
"""First words of the statements SQLite, DuckDB, PostgreSQL and MySQL/MariaDB know that are not plain
queries."""


def first_word(sql: str) -> str:
    """The statement's first keyword, upper-cased, after comments and opening parentheses. Linear in
    the text: each comment is skipped by moving an index, never by copying the rest."""
    position, end = 0, len(sql)
    while True:
        while position < end and (sql[position].isspace() or sql[position] == "("):
            position += 1
        if sql.startswith("--", position):
            newline = sql.find("\n", position)
            position = end if newline < 0 else newline + 1
        elif sql.startswith("/*", position):
            close = sql.find("*/", position + 2)
            position = end if close < 0 else close + 2
        else:
            break
    match = _WORD.match(sql, position)
    return match.group(0).upper() if match else ""


_WORD = re.compile(r"[A-Za-z_]+")
