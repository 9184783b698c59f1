"""``GuardedDatabase``: a guarded connection with an agent tool's limits, run in this process. The
refusals, the lockdown it applies (``lockdown``), the limits while fetching, the PostgreSQL transaction
per call and the schema text (``schema_description``) are decided here; ``isolation`` runs the same
object in a worker process, which ``GuardedDatabase.open`` uses by default."""

from __future__ import annotations

import functools
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from .._core.deadlines import Deadline
from ..report import GuardReport
from ._calls import (
    AGENT_GUARD,
    DEFAULT_MAX_CHARS,
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT,
    QueryRefused,
    QueryResult,
    agent_policy,
    busy_refusal,
    is_chdb_dsn,
    is_mysql_dsn,
    is_postgres_dsn,
)
from ._postgres_session import RECANCEL_EVERY, Canceller, Reconnector, connection_lost
from ._refusals import (
    CURSOR_NAME,
    DUCKDB_READ_WORDS,
    ERROR_CHARS,
    NOT_QUERY_WORDS,
    QUERY_WORDS,
    clipped,
    failure_refusal,
    first_word,
    is_database_error,
    lost_again,
)
from .presenting import json_safe
from .schema_info import SchemaInfo

__all__ = ["ERROR_CHARS", "GuardedDatabase"]

_DUCKDB_SUFFIXES = (".duckdb", ".ddb")


class GuardedDatabase:
    """A guarded connection with an agent tool's limits. Queries are serialised by a lock, so the MCP
    server's worker threads and an agent framework's threads can share one.

    ``connection`` is a guarded connection (``guarded_sqlite.connect``'s, or ``wrap()``'s over SQLite,
    DuckDB, psycopg 3 or PyMySQL). With ``allow_writes=False`` (the default) any statement that is not a query is
    refused, and on SQLite ``PRAGMA query_only`` is switched on as well.

    A PostgreSQL connection must have no transaction open: each call opens its own (``READ ONLY``
    and rolled back unless ``allow_writes``; with writes, committed when the statement succeeds), so
    autocommit on or off makes no difference to the tool. Beyond that the model reaches what the role
    may do, not read here: hand in a SELECT-only role's (``privileges.account_problem`` checks one).
    A PyMySQL connection must be in autocommit mode with no transaction open and no multi-statements;
    each call gets ``START TRANSACTION READ ONLY`` and the server's time limit (``_mysql_session``).
    A chDB connection's session gets the tool's limits as settings and then ``readonly = 1`` (unless
    ``allow_writes``), which nothing can undo: hand the tool a connection of its own."""

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
        if self.dialect not in ("sqlite", "duckdb", "postgres", "mysql", "clickhouse"):
            raise TypeError(
                "GuardedDatabase supports SQLite, DuckDB, PostgreSQL, MySQL/MariaDB and ClickHouse (chDB) "
                f"connections, not {self.dialect}"
            )
        self.connection = connection
        self.allow_writes = allow_writes
        self.max_rows = max_rows
        self.max_chars = max_chars
        self.timeout = timeout
        self._raw = raw
        self._lock = threading.Lock()
        self._reconnector: Reconnector | None = None
        """Set when this object opened the PostgreSQL connection itself (from a URI): it may open it again."""
        self._unreset = False  # the session could not be reset after the last call: not run on as it is
        self._mysql: Any = None  # MySQL/MariaDB: the ``_mysql_session.MySQLSession`` that runs the calls
        if self.dialect == "mysql":
            from ._mysql_session import MySQLSession
            from .lockdown import mysql_session_problem

            problem = mysql_session_problem(raw)
            if problem is not None:
                raise ValueError(problem)
            self._mysql = MySQLSession(
                connection, allow_writes=allow_writes, fetch=self._fetch_within_limits, refuse=self._refuse_failure
            )
            self.value_limit = "the server's max_allowed_packet"
        elif self.dialect == "sqlite":
            self.value_limit = lock_down_sqlite(
                raw, allow_writes=allow_writes, value_bytes=value_length_limit(max_chars)
            )
        elif self.dialect == "clickhouse":
            from ._clickhouse_session import lock_down_clickhouse

            self.value_limit = lock_down_clickhouse(connection, allow_writes=allow_writes, timeout=timeout)
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
        allow_privileged: bool = False,
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
        ``isolated=True`` runs it in a worker process too: the server's timeout and the cancel do not stop
        the client receiving a huge value, which the worker's memory cap and its kill bound. ``read_only``
        (like the default) also sets ``default_transaction_read_only``. MySQL/MariaDB (``mysql://`` or
        ``mariadb://user@host:port/db``, needs PyMySQL) is opened and run the same way (``_mysql_session``).
        On both, an account that may do more than read (files, other sessions, administration, writes
        while ``allow_writes`` is off) is refused, naming its grants, unless ``allow_privileged=True``
        (unsafe; ``agent.privileges``).

        Raises ``ValueError`` for a path that is not a usable database (or a server that refuses the
        connection, or an account refused for its grants), with the reason."""
        from .._api import connect, wrap
        from .presenting import database_problem

        if read_only and allow_writes:
            raise ValueError("read_only and allow_writes exclude each other")
        if isolated:
            target = str(path) if is_postgres_dsn(path) or is_mysql_dsn(path) or is_chdb_dsn(path) else Path(path)
            isolated_class = GuardedDatabase._isolated
            if isolated_class is None:  # set when the package imports isolation, which a submodule import runs
                raise RuntimeError("guarded_sqlite.agent.isolation has not registered the worker-process database")
            options = {"read_only": read_only, "allow_writes": allow_writes, "allow_privileged": allow_privileged}
            return isolated_class(target, guard=guard, **options, **limits)
        if is_postgres_dsn(path) or is_mysql_dsn(path):
            return cls._open_server(str(path), guard, allow_writes, allow_privileged, **limits)
        if is_chdb_dsn(path):
            from ._clickhouse_session import open_chdb

            return cls(open_chdb(str(path), agent_policy(guard, limits)), allow_writes=allow_writes, **limits)
        path = Path(path)
        duck = path.suffix.lower() in _DUCKDB_SUFFIXES
        problem = (None if path.is_file() else f"{path}: no such file") if duck else database_problem(path)
        if problem is not None:
            raise ValueError(problem)
        connection: Any = None
        try:
            if duck:
                from .lockdown import connect_duckdb

                # Read-only unless writes are allowed: DuckDB has no query_only, and a SELECT can write
                # (nextval() advances a stored sequence).
                raw_duck = connect_duckdb(str(path), read_only=read_only or not allow_writes)
                connection = wrap(raw_duck, guard=agent_policy(guard, limits))
            else:
                # mode=rw never creates a missing file; as_uri() percent-encodes '?', '#' and '%' in the
                # path. Tool calls may arrive on any worker thread; the lock in __init__ serialises them.
                # Autocommit (isolation_level=None): with allow_writes a write is committed when its
                # statement ends, instead of sitting in sqlite3's implicit transaction, unseen by others
                # and lost at exit.
                uri = path.resolve().as_uri() + ("?mode=ro" if read_only else "?mode=rw")
                connection = connect(
                    uri, uri=True, guard=agent_policy(guard, limits), check_same_thread=False, isolation_level=None
                )
            return cls(connection, allow_writes=allow_writes, **limits)
        except Exception as failure:
            if connection is not None:
                connection.close()
            # Not a DuckDB file, another process's lock, a newer format, an unreadable SQLite file: the
            # database's own errors are the path's problem; anything else is a bug and keeps its traceback.
            if not is_database_error(failure):
                raise
            raise ValueError(f"{path}: cannot be opened ({' '.join(str(failure).split())})") from None

    @classmethod
    def _open_server(
        cls, dsn: str, guard: Any, allow_writes: bool, allow_privileged: bool, **limits: Any
    ) -> GuardedDatabase:
        """``open`` for a PostgreSQL or MySQL/MariaDB URI: the connection is this object's, so it is
        reset after every call and opened again when it was lost (``_postgres_session``,
        ``_mysql_session``), each time after its account's grants are read (``privileges``)."""
        from .privileges import server_opener

        opener = server_opener(dsn, allow_privileged=allow_privileged)
        policy = agent_policy(guard, limits)
        timeout = float(limits.get("timeout", DEFAULT_TIMEOUT))
        connection = opener(dsn, policy, allow_writes=allow_writes, connect_timeout=min(timeout, 30.0))
        try:
            db = cls(connection, allow_writes=allow_writes, **limits)
        except BaseException:
            connection.close()
            raise
        reconnector = Reconnector(dsn, policy, allow_writes=allow_writes, opener=opener)
        if db._mysql is not None:
            db._mysql.reconnector = reconnector
        else:
            db._reconnector = reconnector
        return db

    def close(self) -> None:
        """Close the connection."""
        (self.connection if self._mysql is None else self._mysql).close()

    def __enter__(self) -> GuardedDatabase:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def query(self, sql: str, parameters: Sequence[Any] = (), *, time_limit: float | None = None) -> QueryResult:
        """Run one statement through the guard and return what it served; see ``QueryRefused`` for
        every refusal. The limits apply to the rows the guard serves (after any repair).

        ``time_limit`` (at most ``timeout``, its default) is how long this call may take from now,
        waiting for the database included: a call that cannot have it in time is refused as ``busy``.
        The MCP server passes what is left of ``timeout`` since the request arrived."""
        from .._analysis.rewrite import MAX_PARSED_CHARS, is_read_only_query
        from .._core.deadlines import call_deadline, interrupt_after
        from .lockdown import denied_call_problem, reseed_duckdb, single_statement_problem

        arrived = time.monotonic()
        limit = self.timeout if time_limit is None else min(self.timeout, time_limit)
        if limit <= 0:  # it waited its whole limit before it got here (the MCP SDK's thread pool)
            raise busy_refusal(self.timeout)

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
        # A DuckDB statement that starts as a read is judged by DuckDB's own parser under the lock
        # (single_statement_problem: one SELECT by its type, on a file opened read-only), so its reads that
        # sqlglot's tokens do not know are answered: DESCRIBE, SHOW, SUMMARIZE, FROM t LIMIT 1.
        duck_read = self.dialect == "duckdb" and first_word(sql) in DUCKDB_READ_WORDS
        if self.dialect == "clickhouse":  # named first: sqlglot cannot read some of what it refuses (system.x)
            denied = denied_call_problem(sql, self.dialect)
            if denied is not None:
                raise QueryRefused("denied", denied)
        if not self.allow_writes and not duck_read and not is_read_only_query(sql, self.dialect):
            first = first_word(sql)
            if first in QUERY_WORDS or first in NOT_QUERY_WORDS:
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
        denied = denied_call_problem(sql, self.dialect)
        if denied is not None:
            raise QueryRefused("denied", denied)
        with self._held(limit - (time.monotonic() - arrived)):
            limit -= time.monotonic() - arrived
            problem = single_statement_problem(sql, self.dialect, self._raw, allow_writes=self.allow_writes)
            if problem is not None:
                kind = "write" if "statements;" not in problem else "multiple_statements"
                raise QueryRefused(
                    kind,
                    f"Refused: only one query (SELECT, or WITH ... SELECT) may run per call, and {problem}."
                    + (" Writes are off for this tool." if kind == "write" else ""),
                )
            if self.dialect == "mysql":
                description, rows, over, report, count = self._mysql.call(sql, tuple(parameters), limit)
                self.connection, self._raw = self._mysql.connection, self._mysql.raw
            elif self.dialect == "postgres":
                run = functools.partial(self._run_postgres, sql, tuple(parameters), limit)
                description, rows, over, report, count = self._on_postgres(run, limit)
            elif self.dialect == "clickhouse":
                from ._clickhouse_session import run_call

                description, rows, over, report, count = run_call(self, sql, tuple(parameters), limit)
            else:
                try:
                    # Re-sent until the call ends: SQLite drops an interrupt that falls between two statements
                    # (the guard's Python work), and call_deadline bounds the guard's own statements.
                    deadline = interrupt_after(limit, self._raw.interrupt, every=_REINTERRUPT_EVERY)
                    try:
                        with deadline, call_deadline(limit):
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
                finally:
                    if self.dialect == "duckdb":  # setseed() is the connection's: no call's carries to the next
                        reseed_duckdb(self._raw)
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
                f"Refused: the rows and their column names take more than this tool's limit of {self.max_chars} "
                "characters as JSON. Select fewer or narrower columns, give them shorter names, or add a LIMIT.",
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
        self, sql: str, parameters: tuple[Any, ...], limit: float
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
        from ._postgres_plan import postgres_plan_problem
        from .lockdown import start_postgres_call

        raw = self._raw
        description: Any = None
        rows: list[Any] = []
        over, count = "", -1
        report: GuardReport | None = None
        server_cursor: Any = None
        canceller = Canceller(raw)
        deadline = interrupt_after(limit, canceller, every=RECANCEL_EVERY)
        sent = False
        try:
            with raw.transaction(force_rollback=not self.allow_writes):
                try:
                    with deadline, call_deadline(limit):
                        start_postgres_call(raw, allow_writes=self.allow_writes, time_limit=limit)
                        sent = True
                        # The server's reading of the statement, before it runs: its plan names no
                        # refused function (a view's or an inlined function's included).
                        denied = postgres_plan_problem(raw, sql, parameters, allow_writes=self.allow_writes)
                        if denied is not None:
                            raise QueryRefused("denied", denied)
                        if is_read_only_query(sql, "postgres"):
                            cur = server_cursor = probed_server_cursor(self.connection, CURSOR_NAME)
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
            if connection_lost(raw):
                if not sent:  # nothing of the model's ran: the call may run again on a new connection
                    raise _LostBeforeCall(" ".join(str(failure).split())[:300]) from None
                raise QueryRefused(
                    "connection_lost",
                    f"Refused: the connection to the database ended during this call ({clipped(str(failure))}); "
                    "a new one is opened for the next call. Functions that end or signal server sessions "
                    "are not available to this tool.",
                ) from None
            timed_out = deadline.fired or isinstance(failure, psycopg.errors.QueryCanceled)
            self._refuse_failure(failure, timed_out)
            raise  # not reached: _refuse_failure raises
        finally:
            # Also where the transaction could not even begin (a connection the server ended): a
            # deadline left scheduled would interrupt whatever the process runs next.
            deadline.cancel()
            canceller.wait()
            if server_cursor is not None:
                server_cursor.close()  # the transaction has ended: nothing is sent
        return description, rows, over, report, count

    @contextmanager
    def _held(self, wait: float) -> Iterator[None]:
        """This object's lock, waited for at most ``wait`` seconds: a call that cannot have the
        database within its own time limit is refused as ``busy`` instead of queueing past it."""
        if not self._lock.acquire(timeout=-1 if wait == float("inf") else max(0.0, wait)):
            raise busy_refusal(self.timeout)
        try:
            yield
        finally:
            self._lock.release()

    def _on_postgres(self, run: Callable[[], _T], limit: float) -> _T:
        """``run()`` (one call's transaction) on a usable connection, then the session reset. A lost
        connection is replaced first when this object opened it; one found lost before the model's
        statement was sent (ended by the server between calls) is replaced and the call run again,
        once."""
        from .lockdown import reset_postgres_session

        for attempt in (1, 2):
            why = self._postgres_unusable()
            if why:
                if self._reconnector is None:
                    raise QueryRefused(
                        "unavailable",
                        f"Refused: the database connection cannot be used ({why}), and this tool cannot open "
                        "another: it was handed an open connection. Tell the user.",
                    )
                old, self._unreset = self.connection, False
                self.connection = self._reconnector.reopen(why, limit)
                self._raw = self.connection.__wrapped__
                with suppress(Exception):  # a connection the server ended has nothing left to close
                    old.close()
            try:
                return run()
            except _LostBeforeCall as lost:
                if attempt == 2:
                    raise lost_again(lost) from None
            finally:
                if not connection_lost(self._raw):
                    try:
                        reset_postgres_session(
                            self._raw, owned=self._reconnector is not None, allow_writes=self.allow_writes
                        )
                    except Exception:  # a session that kept its state must not serve another call
                        self._unreset = True
        raise AssertionError("not reached")

    def _postgres_unusable(self) -> str:
        """Why the connection cannot serve a call (lost, or not reset after the last one), or ""."""
        if connection_lost(self._raw):
            return "the server ended it, or it restarted"
        if self._unreset:
            return "its session could not be reset after the last call"
        return ""

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
        count is the length of ``json.dumps(rows)``, computed row by row, plus that of the column names
        (DuckDB's ``query()`` builds them at run time: a short statement can name a column with millions
        of characters), which are counted before any row is fetched. Raises TimeoutError once
        ``deadline`` fired: rows the guard buffered are served without a statement to interrupt."""
        rows: list[Any] = []
        names = [str(entry[0]) for entry in cur.description or ()]
        size = 2 + len(json.dumps(names, ensure_ascii=False))  # the brackets of the JSON list, the names
        if size > self.max_chars:
            return rows, "chars"
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
        report = getattr(self.connection, "guard_report", None)
        raise failure_refusal(
            failure,
            timed_out=timed_out,
            dialect=self.dialect,
            allow_writes=self.allow_writes,
            timeout=self.timeout,
            value_limit=self.value_limit,
            feedback=report.feedback() if isinstance(report, GuardReport) else "",
        ) from None

    def schema(self) -> SchemaInfo:
        """Every table and view with columns, keys, foreign keys and row counts, read fresh."""
        from .schema_description import describe

        with self._lock:
            if self.dialect == "mysql":
                info: SchemaInfo = self._mysql.describe(self.timeout)
                self.connection, self._raw = self._mysql.connection, self._mysql.raw
                return info
            if self.dialect != "postgres":
                return describe(self._raw, self.dialect)
            return self._on_postgres(self._describe_postgres, self.timeout)

    def _describe_postgres(self) -> SchemaInfo:
        """``describe`` in a read-only transaction that is rolled back, under the call's time limit (the
        row counts are what can take long: each gets what is left of it, then None)."""
        from .._core.deadlines import call_deadline, interrupt_after
        from .lockdown import start_postgres_call
        from .schema_description import describe

        raw = self._raw
        canceller = Canceller(raw)
        started = False
        try:
            with raw.transaction(force_rollback=True):
                deadline = interrupt_after(self.timeout, canceller, every=RECANCEL_EVERY)
                try:
                    with deadline, call_deadline(self.timeout):
                        start_postgres_call(raw, allow_writes=False, time_limit=self.timeout)
                        started = True
                        return describe(raw, "postgres")
                finally:
                    deadline.cancel()
                    canceller.wait()
        except Exception as failure:
            self._end_transaction()
            if connection_lost(raw) and not started:
                raise _LostBeforeCall(" ".join(str(failure).split())[:300]) from None
            raise


_T = TypeVar("_T")


class _LostBeforeCall(Exception):
    """The connection was found lost before the model's statement was sent: the call may run again."""


_FETCH_BATCH = 16
"""Rows fetched at a time while the limits are counted."""

_REINTERRUPT_EVERY = 0.02
"""Seconds between the interrupts re-sent once a call's time limit has passed, until the call ends."""
