"""Engine-side lockdown for a connection a model drives: what the engine itself refuses, per engine.

Reading a statement can be fooled; the engine cannot. Each supported engine gets one "agent session"
setup:

- SQLite (``lock_down_sqlite``): ``PRAGMA query_only``, an authorizer (``sqlite_decision``, a pure
  function) that denies ATTACH/DETACH (VACUUM INTO attaches its target, so it is denied too), every
  write action, PRAGMA assignments other than the guard's own, and functions that reach outside the
  database or corrupt the process (``fts3_tokenizer``, ``load_extension``, ...); and on Python 3.11+
  ``setlimit(SQLITE_LIMIT_LENGTH, ...)``, which caps any one string or blob a statement builds or reads.
  The guard's own catalog reads (``PRAGMA table_xinfo``, ``index_list``, ...) stay allowed.
- DuckDB (``DUCKDB_AGENT_CONFIG``, ``duckdb_lockdown_problem``): the file opened read-only unless writes
  are allowed, ``enable_external_access=false`` (no file, URL or extension access), extension
  autoinstall/autoload off, Python replacement scans off, ``memory_limit`` set, then
  ``lock_configuration=true`` so no later statement can change any of it. A connection the caller
  opened is checked, not changed: its settings belong to the caller's whole database instance.
- PostgreSQL (``postgres_session_problem``, ``start_postgres_call``): every call runs in a transaction
  of its own, ``READ ONLY`` unless writes are allowed and rolled back, with ``statement_timeout`` set
  ``LOCAL`` to the call's limit: a ``set_config(..., false)`` by the model is undone with the
  transaction and cannot lift the next call's limit. After the transaction the session itself is reset
  (``reset_postgres_session``: ``DISCARD ALL``, so session advisory locks, ``LISTEN``, prepared
  statements, held cursors, temporary tables and settings never outlive a call), and functions that
  reach past the call while it runs (advisory locks, signals to other backends, SQL given as text) are
  refused by name (``_analysis.statements.postgres_denied_call``). What the role may do (superuser,
  server file access) is read when the tool opens a URI and refused unless the operator opts in
  (``agent.privileges``); see docs/agents.md.
- MySQL/MariaDB through PyMySQL (``mysql_session_problem``, ``start_mysql_call``,
  ``reset_mysql_session``): the driver's multi-statement flag off (the server then refuses a second
  statement as a syntax error), every call in ``START TRANSACTION READ ONLY`` (error 1792 on a write)
  under the session's ``max_statement_time`` (MariaDB) or ``max_execution_time`` (MySQL), rolled back;
  then the session reset (``COM_RESET_CONNECTION``: user variables, named locks, temporary tables,
  ``HANDLER``s, prepared statements and session settings all end with the call). Executable comments,
  optimizer hints, named locks and ``LOAD_FILE`` are refused by reading the statement
  (``_analysis.statements.mysql_denied_call``).
- ClickHouse through chDB: ``agent._clickhouse_session.lock_down_clickhouse``.
- ``single_statement_problem``: more than one statement is refused (DuckDB's ``execute`` and psycopg's
  simple query protocol run them all); DuckDB's own parser also names each statement's type.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "DUCKDB_AGENT_CONFIG",
    "DUCKDB_SPILL_LIMIT",
    "MARIADB_TMP_DISK_TABLE_SIZE",
    "MYSQL_SQL_MODE",
    "POSTGRES_TEXT_SETTINGS",
    "SQLITE_DENIED_FUNCTIONS",
    "cap_sqlite_heap",
    "connect_duckdb",
    "denied_call_problem",
    "duckdb_lockdown_problem",
    "lock_down_sqlite",
    "mysql_session_problem",
    "postgres_denial",
    "postgres_session_problem",
    "prepare_mysql_session",
    "reseed_duckdb",
    "reset_mysql_session",
    "reset_postgres_session",
    "single_statement_problem",
    "sqlite_decision",
    "start_mysql_call",
    "start_postgres_call",
    "value_length_limit",
]

SQLITE_DENIED_FUNCTIONS = frozenset(
    {
        "fts3_tokenizer",  # reads and replaces a C pointer: leaks an address, then SIGSEGV on MATCH
        "load_extension",  # loads native code
        "readfile",  # the sqlite3 shell's file functions, when an application registers them
        "writefile",
        "edit",
        "fsdir",
        "zipfile",
        "sqlar_compress",
        "sqlar_uncompress",
    }
)
"""Functions the model's statements may not call on SQLite, by lower-case name."""

_WRITE_ACTIONS = frozenset(
    {
        sqlite3.SQLITE_CREATE_INDEX,
        sqlite3.SQLITE_CREATE_TABLE,
        sqlite3.SQLITE_CREATE_TEMP_INDEX,
        sqlite3.SQLITE_CREATE_TEMP_TABLE,
        sqlite3.SQLITE_CREATE_TEMP_TRIGGER,
        sqlite3.SQLITE_CREATE_TEMP_VIEW,
        sqlite3.SQLITE_CREATE_TRIGGER,
        sqlite3.SQLITE_CREATE_VIEW,
        sqlite3.SQLITE_DELETE,
        sqlite3.SQLITE_DROP_INDEX,
        sqlite3.SQLITE_DROP_TABLE,
        sqlite3.SQLITE_DROP_TEMP_INDEX,
        sqlite3.SQLITE_DROP_TEMP_TABLE,
        sqlite3.SQLITE_DROP_TEMP_TRIGGER,
        sqlite3.SQLITE_DROP_TEMP_VIEW,
        sqlite3.SQLITE_DROP_TRIGGER,
        sqlite3.SQLITE_DROP_VIEW,
        sqlite3.SQLITE_INSERT,
        sqlite3.SQLITE_UPDATE,
        sqlite3.SQLITE_ALTER_TABLE,
        sqlite3.SQLITE_REINDEX,
        sqlite3.SQLITE_ANALYZE,
        sqlite3.SQLITE_CREATE_VTABLE,
        sqlite3.SQLITE_DROP_VTABLE,
    }
)

_ALWAYS_DENIED = frozenset({sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH})
"""ATTACH creates or opens any file (``file:...?mode=rwc`` too), and VACUUM INTO attaches its target."""

_READ_PRAGMAS = frozenset(
    {
        "database_list",
        "table_info",
        "table_xinfo",
        "table_list",
        "index_list",
        "index_info",
        "index_xinfo",
        "foreign_key_list",
        "function_list",
        "collation_list",
        "schema_version",
        "page_size",  # FTS3/FTS4 read it when they connect to a table
        "query_only",
        "busy_timeout",
        "temp_store",
    }
)
"""PRAGMAs the guard reads (catalog, settings it saves and restores); read without an argument, or with
a table name for the table-shaped ones."""

_SETTABLE_PRAGMAS = frozenset({"busy_timeout"})
"""PRAGMAs the guard sets and restores around its own statements; harmless to the database."""


def sqlite_decision(action: int, arg1: str | None, arg2: str | None, *, allow_writes: bool) -> int:
    """The authorizer's answer (``SQLITE_OK`` or ``SQLITE_DENY``) for one action of a statement being
    prepared on a locked-down SQLite connection.

    >>> sqlite_decision(sqlite3.SQLITE_FUNCTION, None, "lower", allow_writes=False) == sqlite3.SQLITE_OK
    True
    >>> sqlite_decision(sqlite3.SQLITE_FUNCTION, None, "FTS3_TOKENIZER", allow_writes=True) == sqlite3.SQLITE_DENY
    True
    """
    if action in _ALWAYS_DENIED:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_READ and (arg1 or "").lower() == "pragma_database_list":
        # The file's absolute path: read as NULL. The guard's own catalog reads use the PRAGMA statement.
        return sqlite3.SQLITE_IGNORE if (arg2 or "").lower() == "file" else sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION:
        return sqlite3.SQLITE_DENY if (arg2 or "").lower() in SQLITE_DENIED_FUNCTIONS else sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA:
        name = (arg1 or "").lower()
        if name == "query_only":
            # Switching it on is always fine; off only when writes are allowed.
            on = arg2 is None or arg2.strip().lower() in ("1", "on", "true", "yes")
            return sqlite3.SQLITE_OK if on or allow_writes else sqlite3.SQLITE_DENY
        if name in _READ_PRAGMAS and (arg2 is None or name in _SETTABLE_PRAGMAS or "_list" in name or "info" in name):
            return sqlite3.SQLITE_OK
        return sqlite3.SQLITE_OK if allow_writes else sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_UPDATE and (arg1 or "").lower() == "sqlite_master":
        # SQLite's own statement when a virtual table (FTS4) connects; query_only still stops any
        # real write, and writable_schema (the only way to change it from SQL) is a denied PRAGMA.
        return sqlite3.SQLITE_OK
    if action in _WRITE_ACTIONS and not allow_writes:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


MIN_VALUE_BYTES = 1_000_000
"""The smallest per-value cap set on SQLite: the guard's catalog reads (a wide table's CREATE text)
must still fit."""


def value_length_limit(max_chars: int) -> int:
    """``SQLITE_LIMIT_LENGTH`` for a tool that serves at most ``max_chars`` characters: a value too long
    for it (text of up to 4 UTF-8 bytes a character) can never be served, so SQLite stops building it.

    >>> value_length_limit(200_000)
    1000000
    >>> value_length_limit(1_000_000)
    4000064
    >>> value_length_limit(10**10)  # setlimit takes a C int; SQLite caps it at its own maximum anyway
    2147483647
    """
    return min(max(MIN_VALUE_BYTES, 4 * max_chars + 64), 2**31 - 1)


def lock_down_sqlite(raw: sqlite3.Connection, *, allow_writes: bool, value_bytes: int | None) -> str:
    """Set up ``raw`` for a model's statements: ``query_only`` (unless writes are allowed), temporary
    tables and sort spills in memory rather than in ``TMPDIR`` (``temp_store``: a read-only call writes
    no file; the worker process caps SQLite's heap, ``cap_sqlite_heap``), the authorizer, and the
    per-value length cap. Replaces any authorizer the caller set (sqlite3 cannot read one back). Returns
    what ``value_bytes`` became, for the documentation of the limits."""
    if not allow_writes:
        raw.execute("PRAGMA query_only = ON")
    raw.execute("PRAGMA temp_store = MEMORY")

    def authorizer(action: int, arg1: str | None, arg2: str | None, _db: str | None, _trigger: str | None) -> int:
        return sqlite_decision(action, arg1, arg2, allow_writes=allow_writes)

    raw.set_authorizer(authorizer)
    if value_bytes is None:
        return "no per-value cap"
    setlimit: Callable[[int, int], int] | None = getattr(raw, "setlimit", None)
    if setlimit is None:  # Python 3.10: sqlite3 has no setlimit; values stay capped by SQLite's default 1e9
        return "SQLite's default (1,000,000,000 bytes): Python 3.10's sqlite3 cannot set it"
    setlimit(sqlite3.SQLITE_LIMIT_LENGTH, value_bytes)  # type: ignore[attr-defined]
    return f"{value_bytes} bytes"


def cap_sqlite_heap(heap_bytes: int) -> None:
    """Cap the memory SQLite may allocate in this whole process (``PRAGMA hard_heap_limit``), so that a
    sort spilled to memory (``temp_store``) fails with SQLite's "out of memory" past it instead of
    growing: for the worker process, which has no other SQLite connection to hold back."""
    probe = sqlite3.connect(":memory:")
    try:
        probe.execute(f"PRAGMA hard_heap_limit = {int(heap_bytes)}")
    finally:
        probe.close()


DUCKDB_MEMORY_LIMIT = "512MB"
"""DuckDB's ``memory_limit`` for the agent tools: one statement cannot take the machine's memory."""

DUCKDB_SPILL_LIMIT = "512MB"
"""DuckDB's ``max_temp_directory_size`` for the agent tools: what a sort or join past ``memory_limit``
may write to its temporary directory before the statement fails."""

DUCKDB_AGENT_CONFIG: dict[str, Any] = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "python_enable_replacements": False,
    "memory_limit": DUCKDB_MEMORY_LIMIT,
    "max_temp_directory_size": DUCKDB_SPILL_LIMIT,
    "lock_configuration": True,
}
"""``duckdb.connect(path, read_only=True, config=DUCKDB_AGENT_CONFIG)`` opens a file the way the agent
tools do: no file system, network or extension access, no Python variables as tables, bounded memory,
and no statement can change these settings."""

_SET_LAST = ("enable_external_access", "lock_configuration")
"""Settings applied after ``temp_directory``, which DuckDB refuses to change once external access is off."""


def connect_duckdb(path: str, *, read_only: bool) -> Any:
    """``duckdb.connect(path, read_only, config=DUCKDB_AGENT_CONFIG)`` with the spill in a directory of
    this process's own under ``TMPDIR`` (DuckDB removes it at close; the worker process's ``TMPDIR`` is
    a folder its parent removes when it ends the worker, however it ended), not ``<db>.tmp`` beside the
    file, where a killed process's spill stayed."""
    import secrets
    import tempfile

    import duckdb

    early = {name: value for name, value in DUCKDB_AGENT_CONFIG.items() if name not in _SET_LAST}
    spill = Path(tempfile.gettempdir()) / f"guarded-sqlite-duckdb-{os.getpid()}-{secrets.token_hex(4)}"
    raw = duckdb.connect(path, read_only=read_only, config=early)
    try:
        raw.execute("SET temp_directory = " + "'" + str(spill).replace("'", "''") + "'")
        for name in _SET_LAST:
            raw.execute(f"SET {name} = {str(DUCKDB_AGENT_CONFIG[name]).lower()}")
    except BaseException:
        raw.close()
        raise
    return raw


def reseed_duckdb(raw: Any) -> None:
    """``setseed`` from this process's random source, after a call: a seed the model chose (DuckDB
    keeps it on the connection) does not make a later call's ``random()`` predictable. A connection
    that fails here (interrupted at that moment) keeps its seed until a later call's reseed."""
    import random

    try:
        raw.execute("SELECT setseed(?)", [random.SystemRandom().uniform(-1.0, 1.0)]).fetchall()
    except Exception:
        pass


_DUCKDB_REQUIRED = {
    "enable_external_access": "false",
    "autoinstall_known_extensions": "false",
    "autoload_known_extensions": "false",
    "python_enable_replacements": "false",
    "lock_configuration": "true",
}


def duckdb_lockdown_problem(raw: Any, *, allow_writes: bool) -> str | None:
    """Why a DuckDB connection the caller opened cannot serve a model's statements, or None. Its
    settings are read, never changed: they belong to the caller's whole database instance."""
    names = ", ".join(f"'{name}'" for name in _DUCKDB_REQUIRED)
    rows = raw.execute(f"SELECT name, lower(CAST(value AS VARCHAR)) FROM duckdb_settings() WHERE name IN ({names})")
    settings = dict(rows.fetchall())
    wrong = [
        f"{name}={settings.get(name)}" for name, wanted in _DUCKDB_REQUIRED.items() if settings.get(name) != wanted
    ]
    if not allow_writes:
        read_only = raw.execute("SELECT readonly FROM duckdb_databases() WHERE database_name = current_database()")
        row = read_only.fetchone()
        if not row or not row[0]:
            wrong.insert(0, "the database is not opened read_only")
    if not wrong:
        return None
    return (
        "this DuckDB connection is not locked down for a model's statements ("
        + ", ".join(wrong)
        + "): open the file with GuardedDatabase.open(path), or with duckdb.connect(path, read_only=True, "
        "config=guarded_sqlite.agent.lockdown.DUCKDB_AGENT_CONFIG) and wrap() that"
    )


def single_statement_problem(sql: str, dialect: str, raw: Any, *, allow_writes: bool) -> str | None:
    """Why ``sql`` is not one statement the tool may run, as the engine's own parser reads it, or None.

    SQLite's ``execute`` itself refuses a second statement; DuckDB's runs every one, so its parser
    (``extract_statements``) splits the text and names each statement's type. psycopg sends a statement
    without parameters by the simple query protocol, which runs every statement in the text (a
    ``COMMIT`` among them would end the read-only transaction), so on PostgreSQL the text is split on
    sqlglot's tokens, which know PostgreSQL's strings, dollar quotes and comments; a text that does not
    tokenize is refused too. The agent also sends a query as a server-side cursor's ``DECLARE``, which
    PostgreSQL's own parser refuses with more than one statement in it."""
    if dialect in ("postgres", "mysql"):
        from .._analysis.statements import statements_problem

        return statements_problem(sql, dialect)
    if dialect == "clickhouse":
        # chDB runs every statement of the text: ClickHouse's own parser tells (it runs nothing).
        from .._engines import CLICKHOUSE, RerunRefused

        cur = raw.cursor()
        try:
            CLICKHOUSE.single_statement(cur, sql)
        except RerunRefused as why:
            return "it holds several statements; send one statement per call" if "more than one" in str(why) else None
        except Exception:
            return None  # a syntax error: the database's own message says it when the statement runs
        finally:
            cur.close()
        return None
    if dialect != "duckdb":
        return None
    duckdb = sys.modules["duckdb"]
    try:
        statements = raw.extract_statements(sql)
    except duckdb.Error:
        return None  # a syntax error: the database's own message says it when the statement runs
    if len(statements) > 1:
        return f"it holds {len(statements)} statements; send one statement per call"
    if not allow_writes and statements and statements[0].type != duckdb.StatementType.SELECT:
        return f"DuckDB reads it as a {statements[0].type.name} statement, not a query"
    return None


def postgres_session_problem(raw: Any) -> str | None:
    """Why a psycopg connection cannot serve a model's statements, or None: each call opens and ends
    its own transaction, so none may be open (or failed, or in flight) when the tool starts, and
    pipeline mode would defer the errors a call must see."""
    from psycopg.pq import TransactionStatus

    if raw.closed:
        return "the PostgreSQL connection is closed"
    if getattr(raw, "_pipeline", None) is not None:
        return "the PostgreSQL connection is in pipeline mode; leave it before handing it to the tool"
    status = raw.info.transaction_status
    if status != TransactionStatus.IDLE:
        return (
            f"the PostgreSQL connection has a transaction open ({status.name}): commit or roll it back first; "
            "the tool runs each call in a transaction of its own"
        )
    return None


def start_postgres_call(raw: Any, *, allow_writes: bool, time_limit: float | None) -> None:
    """The first statements of a call's transaction (``raw.transaction()`` just began it): ``READ
    ONLY`` unless writes are allowed, then ``statement_timeout`` for this transaction only, so that
    whatever the model sets for the session is undone at the call's end (a read-only call is rolled
    back) or overridden by the next call's own setting. ``time_limit`` None or infinite leaves the
    session's timeout."""
    from .._engines.postgres import pg_statement_timeout

    with raw.cursor() as cursor:
        if not allow_writes:
            # The first statement of the transaction: afterwards PostgreSQL refuses to switch it back
            # ("transaction read-write mode must be set before any query"), set_config included.
            cursor.execute("SET TRANSACTION READ ONLY")
        timeout = pg_statement_timeout(time_limit)
        pinned = ", ".join(f"set_config('{name}', '{value}', true)" for name, value in POSTGRES_TEXT_SETTINGS.items())
        if timeout is not None:
            cursor.execute(f"SELECT set_config('statement_timeout', %s, true), {pinned}", (timeout,))
        else:
            cursor.execute(f"SELECT {pinned}")


POSTGRES_TEXT_SETTINGS = {"standard_conforming_strings": "on", "backslash_quote": "off"}
"""The settings that change how PostgreSQL reads a string literal, as every call's transaction pins
them (``SET LOCAL``; a session the tool opened gets them after every reset too): ``'\\'`` is one
backslash, and ``\\'`` inside ``E'...'`` is refused rather than read as a quote. A database, role or
server default of ``standard_conforming_strings = off`` would otherwise make a backslash end a string
early or late (repro a28)."""


def reset_postgres_session(raw: Any, *, owned: bool, allow_writes: bool) -> None:
    """Undo what a call left in the session beyond its transaction, after the transaction has ended:
    the server's own reset rather than a reading of what the model wrote.

    A session the tool opened (``owned``, autocommit) gets ``DISCARD ALL``: session advisory locks,
    ``LISTEN``, prepared statements, ``WITH HOLD`` cursors, temporary tables, and every setting a
    committed ``set_config(..., false)`` made go back to the connection's start (psycopg forgets its
    own prepared statements on seeing it); then ``default_transaction_read_only`` on again unless writes
    are allowed. A connection the caller handed in keeps its settings and its other state (they are the
    caller's), and loses its session advisory locks only. Both get a ``setseed`` from this process's
    random source, so no call's ``random()`` follows a seed an earlier call chose."""
    import random

    seed = random.SystemRandom().uniform(-1.0, 1.0)
    if not owned:
        with raw.transaction(), raw.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock_all(), setseed(%s)", (seed,))
        return
    with raw.cursor() as cursor:
        # Its own statement, outside a transaction block; never prepared: psycopg would prepare it after a
        # few calls, and the statement deallocates itself while psycopg keeps its name.
        cursor.execute("DISCARD ALL", prepare=False)
        pinned = "".join(f", set_config('{name}', '{value}', false)" for name, value in POSTGRES_TEXT_SETTINGS.items())
        if allow_writes:
            cursor.execute(f"SELECT setseed(%s){pinned}", (seed,))
        else:
            cursor.execute(
                f"SELECT setseed(%s), set_config('default_transaction_read_only', 'on', false){pinned}", (seed,)
            )


def denied_call_problem(sql: str, dialect: str) -> str | None:
    """Why ``sql`` may not run as a model's statement although a read-only transaction would let it,
    or None.

    On PostgreSQL and MySQL/MariaDB a name the tools refuse (``statements.POSTGRES_DENIED_FUNCTIONS``:
    advisory locks, signals to backends, SQL given as text; ``statements.MYSQL_DENIED_FUNCTIONS``: named
    locks, files, replication waits) is looked for in the whole text, literals and comments included,
    so that no lexer's reading of it can hide one (``_analysis.lexing.named_anywhere``); PostgreSQL's
    plan is read for the rest (``postgres_plan_problem``). On MySQL/MariaDB every other question about
    the statement is sqlglot's, so a text whose literals and comments sqlglot would place elsewhere than
    the server does is refused (``_analysis.lexing.mysql_reading_problem``), and so are executable
    comments, hints, shared row locks, the system variables that hold paths
    (``statements.mysql_path_reading``) and search functions given values the statement builds, which
    the server cannot interrupt once they run (``_analysis.long_calls``). On DuckDB, the catalog
    functions that show absolute paths (``duckdb_settings()``, ``duckdb_databases()``, ...:
    ``statements.DUCKDB_PATH_FUNCTIONS``). SQLite's denials are its authorizer's
    (``pragma_database_list``'s file reads as NULL)."""
    from .._analysis.lexing import mysql_reading_problem
    from .._analysis.long_calls import long_call_refusal
    from .._analysis.statements import (
        DUCKDB_PATH_FUNCTIONS,
        denied_name,
        mysql_denied_call,
        mysql_path_reading,
        mysql_row_lock,
        postgres_denied_call,
    )

    if dialect == "mysql":
        name = mysql_denied_call(sql)
        if name is not None:
            return (
                f"Refused: this tool does not run {name}, and refuses a text that holds the name anywhere, in a "
                "string or comment too (executable comments and hints run SQL or settings no reading of the "
                "statement sees; named locks outlive the call; files are not the database's tables); write "
                "the query without it."
            )
        problem = mysql_reading_problem(sql)
        if problem is not None:
            return (
                f"Refused: {problem}. This tool serves only text it reads exactly as the server does: write "
                "plain ASCII spaces between words, '-- ' with a space, no nested comments, and characters such "
                "as U+00A0 inside strings as CHAR(160)."
            )
        path = mysql_path_reading(sql)
        if path is not None:
            return (
                f"Refused: this tool does not read {path} (server settings that show the machine's file paths); "
                "read the tables instead (the schema tool lists them)."
            )
        lock = mysql_row_lock(sql)
        if lock is not None:
            return (
                f"Refused: this tool does not run {lock} (a shared row lock holds other clients' writes off "
                "for the whole call); query without it."
            )
        return long_call_refusal(sql)
    if dialect == "clickhouse":
        from .._analysis.statements import clickhouse_denied_call

        what = clickhouse_denied_call(sql)
        if what is None:
            return None
        return (
            f"Refused: this tool does not run {what} (the tool's limits are the session's settings; files, "
            "URLs, other servers, dictionaries' sources and the system tables are not the database's tables); "
            "write the query without it (the schema tool lists the tables)."
        )
    if dialect == "duckdb":
        name = denied_name(sql, "duckdb", DUCKDB_PATH_FUNCTIONS)
        if name is None:
            return None
        return (
            f"Refused: this tool does not run {name} (it shows the database's and the machine's file paths); "
            "read the tables instead (the schema tool lists them)."
        )
    if dialect != "postgres":
        return None
    name = postgres_denied_call(sql)
    if name is None:
        return None
    return postgres_denial(name)


def postgres_denial(name: str) -> str:
    """The refusal's text for a statement that names (or whose plan names) the refused ``name``."""
    return (
        f"Refused: this tool does not run {name} (advisory locks, signals to server sessions, functions that "
        "run SQL given as text, and the settings that change how strings are read reach past one call), and "
        "refuses a text that names one anywhere, in a string or comment too; write the query without it."
    )


_MULTI_STATEMENTS = 1 << 16
"""PyMySQL's ``CLIENT.MULTI_STATEMENTS`` capability: with it the server runs every ``;``-separated
statement of one text."""

_COM_RESET_CONNECTION = 0x1F
"""The protocol's reset command (MySQL 5.7.3+, MariaDB 10.2.4+): the server ends the transaction and
returns the session to its state at login, keeping the connection and its current database."""


def mysql_session_problem(raw: Any) -> str | None:
    """Why a PyMySQL connection cannot serve a model's statements, or None: it must be open, in
    autocommit mode with no transaction open (each call opens and ends its own), and without the
    multi-statement capability (the server would run a second statement of the text)."""
    from .._engines.mysql import in_transaction

    if not raw.open:
        return "the MySQL/MariaDB connection is closed"
    if raw.client_flag & _MULTI_STATEMENTS:
        return (
            "the MySQL/MariaDB connection was opened with CLIENT.MULTI_STATEMENTS, so the server would run every "
            "statement of a text; open it without that client flag (PyMySQL's default)"
        )
    if not raw.get_autocommit() or in_transaction(raw):
        return (
            "the MySQL/MariaDB connection is not in autocommit mode with no transaction open: open it with "
            "autocommit=True; the tool runs each call in a transaction of its own"
        )
    return None


MYSQL_SQL_MODE = "STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION"
"""The ``sql_mode`` every call runs under (MySQL's and MariaDB's defaults without the flags they do not
share): none of the flags that change how the server reads a text (``ANSI_QUOTES``: ``"..."`` a name;
``NO_BACKSLASH_ESCAPES``: ``\\`` a plain character; ``PIPES_AS_CONCAT``, ``IGNORE_SPACE``, and
MariaDB's ``ORACLE``/``MSSQL`` parsers), so that the server reads strings, names and comments as the
statement check does (``_analysis.lexing.mysql_reading_problem``). A server whose global mode has them
(``--sql-mode=ANSI``) would otherwise turn a string the check skipped into a call (repro a24)."""


def prepare_mysql_session(raw: Any, *, allow_writes: bool) -> None:
    """A session the tool opened, at login and after every reset: the connection's character set
    again (a reset returns it to the server's default), ``MYSQL_SQL_MODE`` (likewise), autocommit on,
    and without writes every transaction ``READ ONLY`` by default as well as each call's own."""
    raw.set_character_set(raw.charset, raw.collation)
    with raw.cursor() as cursor:
        cursor.execute(f"SET SESSION sql_mode = '{MYSQL_SQL_MODE}'")
        if not allow_writes:
            cursor.execute("SET SESSION TRANSACTION READ ONLY")
    raw.autocommit(True)  # sent only when the server's status says it is off


MARIADB_TMP_DISK_TABLE_SIZE = 512 * 1024 * 1024
"""Bytes of rows one internal temporary table of a call may write to the server's disk on MariaDB
(``tmp_disk_table_size``, a session setting): a GROUP BY, DISTINCT, UNION or derived table past it
fails with "The table '(temporary)' is full" (refused as ``too_large``), as DuckDB's spill stops at
``DUCKDB_SPILL_LIMIT``. The table's index file beside it is not counted, nor a sort's merge files
(docs/agents.md, "Every bound")."""


def start_mysql_call(raw: Any, *, allow_writes: bool, time_limit: float | None) -> None:
    """The first statements of a call: the session's time limit (MariaDB's ``max_statement_time`` in
    seconds; MySQL's ``max_execution_time`` in milliseconds, which covers SELECT only; 0 for no limit)
    and ``MYSQL_SQL_MODE`` (again: a call with writes allowed may have changed it, and a handed-in
    connection has the caller's), on MariaDB ``MARIADB_TMP_DISK_TABLE_SIZE`` (MySQL has no session
    setting for it), then ``START TRANSACTION READ ONLY`` unless writes are allowed. The model cannot
    change any of these (``SET`` is not a query; executable comments and hints are refused), and the
    reset after the call undoes them."""
    from .._engines.mysql import is_mariadb

    unlimited = time_limit is None or time_limit == float("inf")
    with raw.cursor() as cursor:
        if is_mariadb(raw):
            seconds = 0.0 if unlimited else max(0.001, float(time_limit or 0))
            cursor.execute(
                f"SET SESSION max_statement_time = {seconds:.3f}, sql_mode = '{MYSQL_SQL_MODE}', "
                f"tmp_disk_table_size = {MARIADB_TMP_DISK_TABLE_SIZE}"
            )
        else:
            milliseconds = 0 if unlimited else max(1, int(float(time_limit or 0) * 1000))
            cursor.execute(f"SET SESSION max_execution_time = {milliseconds}, sql_mode = '{MYSQL_SQL_MODE}'")
        cursor.execute("START TRANSACTION" if allow_writes else "START TRANSACTION READ ONLY")


def reset_mysql_session(raw: Any, *, owned: bool, allow_writes: bool, time_setting: str | None) -> None:
    """Undo what a call left in the session, after its transaction ended: the server's own reset rather
    than a reading of what the model wrote.

    A session the tool opened (``owned``) gets ``COM_RESET_CONNECTION``, which ends any transaction,
    releases named locks (``GET_LOCK``) and table locks, drops temporary tables, closes ``HANDLER``s and
    prepared statements, clears user variables (``@x := ...``) and returns every session variable to
    its global value; then ``prepare_mysql_session``. PyMySQL has no call for the command, so it is
    sent with the driver's own command writer; a server that refuses it (older than MySQL 5.7.3 or
    MariaDB 10.2.4) makes this raise, and the tool then replaces the connection instead.

    A connection the caller handed in keeps its session (it is the caller's): its named locks are
    released, and its time limit and ``sql_mode`` put back (``time_setting``: the ``SET SESSION ...``
    that restores them)."""
    if owned:
        raw._execute_command(_COM_RESET_CONNECTION, b"")
        raw._read_ok_packet()
        prepare_mysql_session(raw, allow_writes=allow_writes)
        return
    with raw.cursor() as cursor:
        cursor.execute("SELECT RELEASE_ALL_LOCKS()")
        if time_setting is not None:
            cursor.execute(time_setting)
