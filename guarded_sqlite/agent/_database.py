"""``GuardedDatabase``: a guarded connection with an agent tool's limits, run in this process. The
refusals, the lockdown it applies (``lockdown``), the limits while fetching, the PostgreSQL transaction
per call and the schema text (``schema_description``) are decided here; ``isolation`` runs the same
object in a worker process, which ``GuardedDatabase.open`` uses by default."""

from __future__ import annotations

import json
import re
import sqlite3
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from .._core.deadlines import Deadline
from ..report import GuardReport
from ._calls import (
    AGENT_GUARD,
    DEFAULT_MAX_CHARS,
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT,
    QueryRefused,
    QueryResult,
    guard_byte_cap,
    is_postgres_dsn,
    redact_dsn,
)
from .presenting import json_safe
from .schema_info import SchemaInfo

__all__ = ["GuardedDatabase"]

_DUCKDB_SUFFIXES = (".duckdb", ".ddb")


class GuardedDatabase:
    """A guarded connection with an agent tool's limits. Queries are serialised by a lock, so the MCP
    server's worker threads and an agent framework's threads can share one.

    ``connection`` is a guarded connection (``guarded_sqlite.connect``'s, or ``wrap()``'s over SQLite,
    DuckDB or psycopg 3). With ``allow_writes=False`` (the default) any statement that is not a query is
    refused, and on SQLite ``PRAGMA query_only`` is switched on as well.

    A PostgreSQL connection must have no transaction open: each call opens its own (``READ ONLY``
    and rolled back unless ``allow_writes``; with writes, committed when the statement succeeds), so
    autocommit on or off makes no difference to the tool. What the model can reach beyond that is what
    the connection's role may do: connect as a role with SELECT privileges only (see docs/agents.md)."""

    _isolated: ClassVar[Callable[..., GuardedDatabase] | None] = None
    """What ``open`` makes by default: ``isolation.IsolatedDatabase``, a subclass in the module that runs
    this class in a worker process, which registers it on import (so this module never imports it)."""

    def __init__(
        self,
        connection: Any,
        *,
        allow_writes: bool = False,
        max_rows: int = DEFAULT_MAX_ROWS,
        max_chars: int = DEFAULT_MAX_CHARS,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        from .._analysis.schema import raw_sqlite
        from .._engines import engine_for
        from .lockdown import DUCKDB_MEMORY_LIMIT, duckdb_lockdown_problem, lock_down_sqlite, value_length_limit

        if getattr(connection, "guard_policy", None) is None:
            raise TypeError("GuardedDatabase needs a guarded connection: guarded_sqlite.connect() or wrap()")
        if max_rows < 0 or max_chars < 0 or not timeout > 0:
            raise ValueError("max_rows and max_chars must be at least 0, timeout positive")
        raw: Any = raw_sqlite(connection) if isinstance(connection, sqlite3.Connection) else connection.__wrapped__
        self.dialect: str = engine_for(raw).dialect
        if self.dialect not in ("sqlite", "duckdb", "postgres"):
            raise TypeError(f"GuardedDatabase supports SQLite, DuckDB and PostgreSQL connections, not {self.dialect}")
        self.connection = connection
        self.allow_writes = allow_writes
        self.max_rows = max_rows
        self.max_chars = max_chars
        self.timeout = timeout
        self._raw = raw
        self._lock = threading.Lock()
        if self.dialect == "sqlite":
            self.value_limit = lock_down_sqlite(
                raw, allow_writes=allow_writes, value_bytes=value_length_limit(max_chars)
            )
        elif self.dialect == "postgres":
            from .lockdown import postgres_session_problem

            problem = postgres_session_problem(raw)
            if problem is not None:
                raise ValueError(problem)
            self.value_limit = "PostgreSQL's own limit (1 GB a value)"
        else:
            problem = duckdb_lockdown_problem(raw, allow_writes=allow_writes)
            if problem is not None:
                raise ValueError(problem)
            self.value_limit = f"DuckDB's memory_limit ({DUCKDB_MEMORY_LIMIT} when opened by GuardedDatabase.open)"

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        guard: Any = AGENT_GUARD,
        read_only: bool = False,
        allow_writes: bool = False,
        isolated: bool = True,
        **limits: Any,
    ) -> GuardedDatabase:
        """Open a SQLite file (or a DuckDB file: ``.duckdb``/``.ddb``, or a PostgreSQL database given as a
        ``postgresql://`` or ``postgres://`` URI) through the guard. The file must exist; it is never
        created. ``read_only=True`` opens it read-only at the file level, so nothing on this connection
        can write (it cannot be combined with ``allow_writes``). ``guard`` takes what ``connect`` takes;
        ``limits`` are ``max_rows``, ``max_chars`` and ``timeout``.

        ``isolated=True`` (the default) opens it in a worker process that is killed and restarted when a
        call outlasts ``timeout`` (``guarded_sqlite.agent.isolation``): a statement SQLite cannot interrupt (one
        long function call) is stopped too. ``isolated=False`` opens it in this process.

        PostgreSQL (needs psycopg 3): the connection is opened in autocommit mode and guarded like the
        files; every call then runs in a transaction of its own, ``READ ONLY`` and rolled back unless
        ``allow_writes``, with ``SET LOCAL statement_timeout`` and a cancel request at the deadline.
        ``isolated=True`` runs the connection in a worker process here too: the server's timeout and the
        cancel stop the statement, but not the client receiving a value of hundreds of megabytes (a
        ``repeat('x', 100000000)``), which only the worker's memory cap and its kill bound
        (``call_memory_bound``). ``read_only`` (like the default) also sets the session's
        ``default_transaction_read_only``.

        Raises ``ValueError`` for a path that is not a usable database (or a server that refuses the
        connection), with the reason."""
        from .._api import connect, wrap
        from .presenting import database_problem

        if read_only and allow_writes:
            raise ValueError("read_only and allow_writes exclude each other")
        if isolated:
            target = str(path) if is_postgres_dsn(path) else Path(path)
            isolated_class = GuardedDatabase._isolated
            if isolated_class is None:  # set when the package imports isolation, which a submodule import runs
                raise RuntimeError("guarded_sqlite.agent.isolation has not registered the worker-process database")
            return isolated_class(target, guard=guard, read_only=read_only, allow_writes=allow_writes, **limits)
        if is_postgres_dsn(path):
            return cls._open_postgres(str(path), guard=guard, allow_writes=allow_writes, **limits)
        path = Path(path)
        duck = path.suffix.lower() in _DUCKDB_SUFFIXES
        problem = (None if path.is_file() else f"{path}: no such file") if duck else database_problem(path)
        if problem is not None:
            raise ValueError(problem)
        connection: Any = None
        try:
            if duck:
                import duckdb

                from .lockdown import DUCKDB_AGENT_CONFIG

                # Read-only unless writes are allowed: DuckDB has no query_only, and a SELECT can write
                # (nextval() advances a stored sequence).
                raw_duck = duckdb.connect(
                    str(path), read_only=read_only or not allow_writes, config=DUCKDB_AGENT_CONFIG
                )
                connection = wrap(raw_duck, guard=_agent_policy(guard, limits))
            else:
                # mode=rw never creates a missing file; as_uri() percent-encodes '?', '#' and '%' in the
                # path. Tool calls may arrive on any worker thread; the lock in __init__ serialises them.
                # Autocommit (isolation_level=None): with allow_writes a write is committed when its
                # statement ends, instead of sitting in sqlite3's implicit transaction, unseen by others
                # and lost at exit.
                uri = path.resolve().as_uri() + ("?mode=ro" if read_only else "?mode=rw")
                connection = connect(
                    uri, uri=True, guard=_agent_policy(guard, limits), check_same_thread=False, isolation_level=None
                )
            return cls(connection, allow_writes=allow_writes, **limits)
        except Exception as failure:
            if connection is not None:
                connection.close()
            # Not a DuckDB file, another process's lock, a newer format, an unreadable SQLite file: the
            # database's own errors are the path's problem; anything else is a bug and keeps its traceback.
            if not _is_database_error(failure):
                raise
            raise ValueError(f"{path}: cannot be opened ({' '.join(str(failure).split())})") from None

    @classmethod
    def _open_postgres(cls, dsn: str, *, guard: Any, allow_writes: bool, **limits: Any) -> GuardedDatabase:
        """``open`` for a PostgreSQL URI."""
        import psycopg

        from .._api import wrap

        try:
            # Autocommit: each call's transaction is the tool's own (raw.transaction() begins and ends
            # it); nothing is left open between calls, holding locks or a snapshot.
            raw = psycopg.connect(dsn, autocommit=True)
        except psycopg.Error as failure:
            raise ValueError(f"{redact_dsn(dsn)}: cannot connect ({' '.join(str(failure).split())})") from None
        try:
            if not allow_writes:
                # A second line behind each call's READ ONLY: any transaction this session starts is
                # read-only unless it says otherwise (a model's change to it is rolled back with its call).
                raw.execute("SET default_transaction_read_only = on")
            connection = wrap(raw, guard=_agent_policy(guard, limits), dialect="postgres")
            return cls(connection, allow_writes=allow_writes, **limits)
        except BaseException:
            raw.close()
            raise

    def close(self) -> None:
        """Close the connection."""

        self.connection.close()

    def __enter__(self) -> GuardedDatabase:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def query(self, sql: str, parameters: Sequence[Any] = ()) -> QueryResult:
        """Run one statement through the guard and return what it served; see ``QueryRefused`` for
        every refusal. The limits apply to the rows the guard serves (after any repair)."""
        from .._analysis.rewrite import MAX_PARSED_CHARS, is_read_only_query
        from .._core.deadlines import call_deadline, interrupt_after
        from .lockdown import single_statement_problem

        if not isinstance(sql, str) or not sql.strip():
            raise QueryRefused("empty", "No SQL was given: pass one SELECT (or WITH ... SELECT) statement.")
        try:  # JSON's "\ud800" decodes to a lone surrogate, which no engine's driver can encode
            sql.encode("utf-8")
        except UnicodeEncodeError as bad:
            raise QueryRefused(
                "sql_error",
                f"Refused: the statement is not valid Unicode text (a lone surrogate, {sql[bad.start]!r}, at "
                f"character {bad.start}); send it as plain UTF-8.",
            ) from None
        if not self.allow_writes and len(sql) > MAX_PARSED_CHARS:
            # Past this length the write check would not read it (its time is not bounded): a SELECT is
            # refused too, and told why, not as a write.
            raise QueryRefused(
                "too_large",
                f"Refused: the statement is {len(sql):,} characters long; with writes off this tool reads "
                f"statements of up to {MAX_PARSED_CHARS:,} characters. Shorten it (fewer literals in IN "
                "lists, no long comments).",
            )
        if not self.allow_writes and not is_read_only_query(sql, self.dialect):
            first = _first_word(sql)
            if first in _QUERY_WORDS or first in _NOT_QUERY_WORDS:
                raise QueryRefused(
                    "write",
                    "Refused: only queries (SELECT, or WITH ... SELECT) may run here; this statement is not a "
                    "query and could change the database. Writes are off for this tool.",
                )
            # Neither a query nor a statement we know: most likely a typo in the first keyword.
            raise QueryRefused(
                "not_a_query",
                f"Refused: only queries (SELECT, or WITH ... SELECT) may run here, and this statement starts "
                f"with {first or sql.split(maxsplit=1)[0]!r}; check its first word.",
            )
        with self._lock:
            problem = single_statement_problem(sql, self.dialect, self._raw, allow_writes=self.allow_writes)
            if problem is not None:
                kind = "write" if "statements;" not in problem else "multiple_statements"
                raise QueryRefused(
                    kind,
                    f"Refused: only one query (SELECT, or WITH ... SELECT) may run per call, and {problem}."
                    + (" Writes are off for this tool." if kind == "write" else ""),
                )
            if self.dialect == "postgres":
                description, rows, over, report, count = self._run_postgres(sql, tuple(parameters))
            else:
                # Re-sent until the call ends: SQLite drops an interrupt that falls between two statements
                # (the guard's Python work), and call_deadline bounds the guard's own statements.
                deadline = interrupt_after(self.timeout, self._raw.interrupt, every=_REINTERRUPT_EVERY)
                try:
                    with deadline, call_deadline(self.timeout):
                        cur = self.connection.execute(sql, tuple(parameters))
                        description = cur.description
                        rows, over = self._fetch_within_limits(cur, deadline)
                except Exception as failure:
                    self._refuse_failure(failure, deadline.fired)
                    raise  # not reached: _refuse_failure raises
                # Rows may come from guard statements cut short: none are served late. A write that ended
                # has happened, so its answer says so rather than "stopped".
                if deadline.fired and description is not None:
                    if over and self.dialect == "sqlite":
                        cur.close()
                    self._refuse_failure(TimeoutError("time limit passed"), True)
                report = cur.guard_report
                if over and self.dialect == "sqlite":  # a DuckDB connection is its own cursor: never closed here
                    cur.close()  # lets go of the rest of the result now, not at the next statement
                # sqlite3 gives -1 for DDL and queries: only a write's count is a count of changed rows.
                count = getattr(cur, "rowcount", -1) if description is None else -1
        assert report is not None  # every guarded execute sets one
        columns = tuple(entry[0] for entry in description) if description is not None else ()
        feedback = report.feedback()
        if over == "rows":
            raise QueryRefused(
                "too_large",
                f"Refused: the query returned more than this tool's limit of {self.max_rows} rows. "
                "Add a LIMIT or a WHERE condition, or aggregate (COUNT, GROUP BY) to get a smaller answer.",
                feedback,
            )
        if over == "chars":
            raise QueryRefused(
                "too_large",
                f"Refused: the rows take more than this tool's limit of {self.max_chars} characters as JSON. "
                "Select fewer or narrower columns, or add a LIMIT.",
                feedback,
            )
        changed = count if isinstance(count, int) and count >= 0 else None
        result = QueryResult(sql, columns, tuple(tuple(row) for row in rows), report, changed)
        text = len(result.observation())
        if text > self.max_chars:
            raise QueryRefused(
                "too_large",
                f"Refused: the result takes {text} characters as a text table (its columns and their names), "
                f"more than this tool's limit of {self.max_chars}. Select fewer columns, give them shorter "
                "names, or add a LIMIT.",
                feedback,
            )
        return result

    def _run_postgres(
        self, sql: str, parameters: tuple[Any, ...]
    ) -> tuple[Any, list[Any], str, GuardReport | None, int]:
        """Run one statement on PostgreSQL in a transaction of its own: ``(description, rows, over,
        report, rowcount)`` as ``query`` uses them, or ``QueryRefused``.

        The transaction is ``READ ONLY`` and always rolled back unless writes are allowed (then
        committed when the statement succeeded), with ``statement_timeout`` set ``LOCAL`` to the limit,
        so nothing the model sets outlives its call. A query is declared as a server-side cursor the
        guard probes (``probed_server_cursor``): rows are fetched 16 at a time and the rest of a result
        over the limits stays on the server, and ``DECLARE`` takes exactly one query, so PostgreSQL's
        own parser refuses a second statement as well. A cancel request at the deadline (repeated until
        the call ends) stops what the server's timeout does not cover: fetches, and the guard's own
        statements after a model's ``set_config('statement_timeout', ...)``."""
        import psycopg

        from .._analysis.rewrite import is_read_only_query
        from .._core.deadlines import call_deadline, interrupt_after
        from .._io.proxy_psycopg import probed_server_cursor
        from .lockdown import start_postgres_call

        raw = self._raw
        description: Any = None
        rows: list[Any] = []
        over, count = "", -1
        report: GuardReport | None = None
        server_cursor: Any = None
        canceller = _Canceller(raw)
        deadline = interrupt_after(self.timeout, canceller, every=_RECANCEL_EVERY)
        try:
            with raw.transaction(force_rollback=not self.allow_writes):
                try:
                    with deadline, call_deadline(self.timeout):
                        start_postgres_call(raw, allow_writes=self.allow_writes, time_limit=self.timeout)
                        if is_read_only_query(sql, "postgres"):
                            cur = server_cursor = probed_server_cursor(self.connection, _CURSOR_NAME)
                            options: dict[str, Any] = {}
                        else:  # a write (writes are allowed): DECLARE takes queries only
                            cur = self.connection.cursor()
                            # Prepared: the extended protocol, which runs one statement, never several.
                            options = {"prepare": True}
                        if parameters:
                            cur.execute(sql, parameters, **options)
                        else:  # without parameters psycopg reads no placeholders: '%' stays a character
                            cur.execute(sql, **options)
                        description = cur.description
                        if description is not None:
                            rows, over = self._fetch_within_limits(cur, deadline)
                        else:
                            count = cur.rowcount
                        report = cur.guard_report
                finally:
                    deadline.cancel()
                    canceller.wait()  # no cancel request may arrive after the call
                # Rows may come from guard statements cut short: none are served late. A write that
                # ended has happened: it is committed and answered as done.
                if deadline.fired and description is not None:
                    raise TimeoutError("time limit passed")
        except Exception as failure:
            self._end_transaction()
            timed_out = deadline.fired or isinstance(failure, psycopg.errors.QueryCanceled)
            self._refuse_failure(failure, timed_out)
            raise  # not reached: _refuse_failure raises
        finally:
            if server_cursor is not None:
                server_cursor.close()  # the transaction has ended: nothing is sent
        return description, rows, over, report, count

    def _end_transaction(self) -> None:
        """Roll back whatever a failed call left open (a cancel request that arrived during the
        transaction's own ROLLBACK fails it), so that the next call starts from no transaction."""
        from psycopg.pq import TransactionStatus

        raw = self._raw
        for _ in range(3):
            if raw.closed or raw.info.transaction_status == TransactionStatus.IDLE:
                return
            try:
                raw.rollback()
            except Exception:  # a late cancel again: try once more
                continue

    def _fetch_within_limits(self, cur: Any, deadline: Deadline) -> tuple[list[Any], str]:
        """The rows of ``cur``, fetched a few at a time and stopped as soon as they pass ``max_rows``
        (``"rows"``) or their JSON passes ``max_chars`` (``"chars"``); ``""`` when within both. The
        count is the length of ``json.dumps(rows)``, computed row by row. Raises TimeoutError once
        ``deadline`` fired: rows the guard buffered are served without a statement to interrupt."""
        rows: list[Any] = []
        size = 2  # the brackets of the JSON list
        while True:
            if deadline.fired:
                raise TimeoutError("time limit passed while fetching")
            batch = cur.fetchmany(_FETCH_BATCH)
            if not batch:
                return rows, ""
            for row in batch:
                if len(rows) >= self.max_rows:
                    return rows, "rows"
                size += len(json.dumps(json_safe(row), ensure_ascii=False)) + (2 if rows else 0)
                if size > self.max_chars:
                    return rows, "chars"
                rows.append(row)

    def _refuse_failure(self, failure: Exception, timed_out: bool) -> None:
        """Turn a failed statement into ``QueryRefused``; errors that are not the database's own pass."""
        from ..errors import describe_error

        report = getattr(self.connection, "guard_report", None)
        # An error may quote the model's value whole (DuckDB's error('x' * 10**7), a failed CAST): clipped
        # before anything reads it, so the reply stays small and the DECLARE pattern's time bounded.
        feedback = _clipped(report.feedback()) if isinstance(report, GuardReport) else ""
        message = _clipped(describe_error(failure))
        if self.dialect == "postgres":  # the model wrote the query, not the DECLARE around it
            feedback, message = _DECLARED.sub("", feedback), _DECLARED.sub("", message)
        if timed_out:
            raise QueryRefused(
                "timeout",
                f"Refused: the query ran longer than {self.timeout:g} seconds and was stopped. A join without "
                "a condition, or over many rows, can run that long; add join conditions or a LIMIT.",
            ) from None
        if not _is_database_error(failure):
            raise failure
        if "string or blob too big" in message:
            raise QueryRefused(
                "too_large",
                f"Refused: a value in the result is longer than this tool serves (values are capped at "
                f"{self.value_limit}). Select a part of it (substr) or its length instead.",
            ) from None
        if "out of memory" in message.lower():  # DuckDB's memory_limit, the worker's RLIMIT_DATA, libpq
            raise QueryRefused(
                "too_large",
                f"Refused: the statement needed more memory than this tool allows a call ({message}). Select "
                "fewer or smaller values (substr, length, aggregates), or add a LIMIT.",
            ) from None
        if _is_postgres_denial(failure):
            raise QueryRefused(
                "write" if not self.allow_writes else "sql_error",
                f"Refused: the database denied this statement ({message}): this tool runs each call in a "
                "read-only transaction (while writes are off) as a role that may only read.",
            ) from None
        if "not authorized" in message or "prohibited" in message:
            raise QueryRefused(
                "write" if not self.allow_writes else "sql_error",
                f"Refused: the database denied this statement ({message}): ATTACH, VACUUM, writes (while "
                "writes are off), settings and functions that reach outside the database are not available "
                "to this tool.",
            ) from None
        # The feedback already opens with "The query failed: <error>."; say it once.
        raise QueryRefused("sql_error", feedback or f"The query failed: {message}.") from None

    def schema(self) -> SchemaInfo:
        """Every table and view with columns, keys, foreign keys and row counts, read fresh."""
        from .schema_description import describe

        with self._lock:
            if self.dialect != "postgres":
                return describe(self._raw, self.dialect)
            return self._describe_postgres()

    def _describe_postgres(self) -> SchemaInfo:
        """``describe`` in a read-only transaction that is rolled back, under the call's time limit (the
        row counts are what can take long: each gets what is left of it, then None)."""
        from .._core.deadlines import call_deadline, interrupt_after
        from .lockdown import start_postgres_call
        from .schema_description import describe

        raw = self._raw
        canceller = _Canceller(raw)
        try:
            with raw.transaction(force_rollback=True):
                deadline = interrupt_after(self.timeout, canceller, every=_RECANCEL_EVERY)
                try:
                    with deadline, call_deadline(self.timeout):
                        start_postgres_call(raw, allow_writes=False, time_limit=self.timeout)
                        return describe(raw, "postgres")
                finally:
                    deadline.cancel()
                    canceller.wait()
        except Exception:
            self._end_transaction()
            raise


_FETCH_BATCH = 16
"""Rows fetched at a time while the limits are counted."""

_REINTERRUPT_EVERY = 0.02
"""Seconds between the interrupts re-sent once a call's time limit has passed, until the call ends."""

_RECANCEL_EVERY = 0.1
"""PostgreSQL: seconds between cancel requests once a call's time limit has passed. A request that
reaches the server between two statements is dropped, like SQLite's interrupt; each one costs a
connection to the server, hence the longer interval."""

_CANCEL_TIMEOUT = 5.0
"""Seconds a cancel request may take to reach the server before it is given up."""

_CURSOR_NAME = "guarded_sqlite_agent"
"""The server-side cursor a PostgreSQL call's query is declared as (one per call, closed with its
transaction)."""

_DECLARED = re.compile(r'(?:\.\.\.)?[A-Za-z]*\s*"' + _CURSOR_NAME + r'" CURSOR FOR ')
"""The ``DECLARE`` in PostgreSQL's excerpt of a failed query (``LINE 1: DECLARE "..." CURSOR FOR SELECT
nme``, or ``...ECLARE`` when cut): removed from what the model reads."""


class _Canceller:
    """Sends psycopg's cancel request for ``raw`` on a thread of its own, one at a time. The watchdog
    thread serves every deadline in the process and must not wait on a round trip to a server; ``wait``
    lets the call finish only once no request is on its way, so none can cancel a later statement."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self._thread: threading.Thread | None = None

    def __call__(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return  # the previous request is still on its way
        self._thread = threading.Thread(target=self._send, name="guarded-sqlite-pg-cancel", daemon=True)
        self._thread.start()

    def _send(self) -> None:
        try:
            self._raw.cancel_safe(timeout=_CANCEL_TIMEOUT)
        except Exception:  # a closed connection, an unreachable server: the statement timeout remains
            pass

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join(_CANCEL_TIMEOUT)


_QUERY_WORDS = frozenset({"SELECT", "WITH", "VALUES", "FROM", "TABLE"})
"""First words of statements that read as queries (DuckDB's ``FROM t`` among them): refused only for a
write inside (``WITH ... DELETE``)."""

_NOT_QUERY_WORDS = frozenset(
    "INSERT UPDATE DELETE REPLACE UPSERT MERGE CREATE DROP ALTER TRUNCATE ATTACH DETACH PRAGMA VACUUM "
    "REINDEX ANALYZE ANALYSE BEGIN COMMIT ROLLBACK END SAVEPOINT RELEASE COPY INSTALL LOAD SET RESET CALL "
    "EXPORT IMPORT CHECKPOINT GRANT REVOKE USE EXPLAIN DESCRIBE SHOW SUMMARIZE COMMENT".split()
)
"""First words of the statements SQLite and DuckDB know that are not plain queries."""


def _first_word(sql: str) -> str:
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


def _agent_policy(guard: Any, limits: dict[str, Any]) -> Any:
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


_WORD = re.compile(r"[A-Za-z_]+")


def _is_database_error(failure: Exception) -> bool:
    if isinstance(failure, sqlite3.Error):
        return True
    # The other drivers' errors can only come from a driver already imported: none is imported here.
    for name in ("duckdb", "psycopg"):
        driver = sys.modules.get(name)
        if driver is not None and isinstance(failure, driver.Error):
            return True
    return False


def _is_postgres_denial(failure: Exception) -> bool:
    """A write in a read-only transaction (SQLSTATE 25006) or a privilege the role lacks (42501)."""
    psycopg = sys.modules.get("psycopg")
    if psycopg is None or not isinstance(failure, psycopg.Error):
        return False
    return isinstance(failure, (psycopg.errors.ReadOnlySqlTransaction, psycopg.errors.InsufficientPrivilege))


ERROR_CHARS = 2_000
"""Most characters of a database error (and of the guard's feedback on it) a refusal quotes."""


def _clipped(text: str) -> str:
    if len(text) <= ERROR_CHARS:
        return text
    return f"{text[:ERROR_CHARS]}... ({len(text) - ERROR_CHARS:,} more characters not shown)"
