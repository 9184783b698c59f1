"""The MySQL/MariaDB connection behind an agent tool (PyMySQL), for ``GuardedDatabase``: opened from a
``mysql://`` or ``mariadb://`` URI, each call run in a transaction of its own under the server's time
limit, the session reset after it, a lost connection replaced (with ``_postgres_session.Reconnector``'s
back-off), and ``KILL QUERY`` from a second connection at the deadline, then ``KILL CONNECTION`` for a
statement the server cannot interrupt, whose end the next calls wait for (refused ``busy``).

What the server is told for each call is ``lockdown``'s (``start_mysql_call``, ``reset_mysql_session``);
the limits while fetching and the refusals are ``_database``'s, passed in as ``fetch`` and ``refuse``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

from ._calls import QueryRefused, redact_dsn
from ._postgres_session import CANCEL_TIMEOUT, RECANCEL_EVERY, Reconnector
from ._refusals import lost_again
from .schema_info import SchemaInfo

__all__ = ["MySQLSession", "QueryKiller", "mysql_arguments", "open_mysql"]

_URI_OPTIONS = frozenset({"unix_socket", "charset", "ssl_ca", "ssl_cert", "ssl_key"})
"""Query parameters a URI may carry, passed to ``pymysql.connect`` as they are."""

_TIMEOUT_CODES = frozenset({1969, 3024, 1317})
"""MariaDB's ``max_statement_time`` exceeded, MySQL's ``max_execution_time`` exceeded, and a query
interrupted (``KILL QUERY``, sent at the deadline)."""

_T = TypeVar("_T")


def mysql_arguments(uri: str) -> dict[str, Any]:
    """``pymysql.connect``'s arguments for ``mysql://user[:password]@host[:port]/database[?options]``
    (or ``mariadb://``). Without a password in the URI, ``MYSQL_PWD`` from the environment is used,
    as MySQL's own clients do. Raises ``ValueError`` for a URI that names no user or database.

    >>> arguments = mysql_arguments("mariadb://reader:p%40ss@db.internal:3307/shop?charset=utf8mb4")
    >>> sorted(arguments.items())[:4]
    [('charset', 'utf8mb4'), ('database', 'shop'), ('host', 'db.internal'), ('password', 'p@ss')]
    >>> arguments["port"], arguments["user"]
    (3307, 'reader')
    """
    parts = urlsplit(uri)
    database = unquote(parts.path.lstrip("/"))
    if not parts.username or not database or "/" in database:
        raise ValueError(f"{redact_dsn(uri)}: name a user and one database, as in mysql://user@host:3306/shop")
    arguments: dict[str, Any] = {
        "host": parts.hostname or "localhost",
        "port": parts.port or 3306,
        "user": unquote(parts.username),
        "database": database,
    }
    password = unquote(parts.password) if parts.password is not None else os.environ.get("MYSQL_PWD")
    if password is not None:
        arguments["password"] = password
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name not in _URI_OPTIONS:
            raise ValueError(f"{redact_dsn(uri)}: unknown option {name!r} (known: {', '.join(sorted(_URI_OPTIONS))})")
        arguments[name] = value
    for name in ("ssl_ca", "ssl_cert", "ssl_key"):
        if name in arguments:
            arguments.setdefault("ssl", {})[name.removeprefix("ssl_")] = arguments.pop(name)
    return arguments


def open_mysql(uri: str, policy: Any, *, allow_writes: bool, connect_timeout: float) -> Any:
    """A guarded PyMySQL connection to ``uri`` as an agent tool uses it: autocommit (each call's
    transaction is the tool's own), without the multi-statement capability and with ``LOAD DATA
    LOCAL`` off (PyMySQL's defaults, stated here), and without writes every transaction ``READ ONLY``
    by default. Raises ``ValueError`` (without the password) when the server refuses or cannot be
    reached within ``connect_timeout`` seconds."""
    import pymysql

    from .._api import wrap
    from .lockdown import prepare_mysql_session

    arguments = mysql_arguments(uri)
    try:
        raw = pymysql.connect(
            **arguments,
            autocommit=True,
            client_flag=0,
            local_infile=False,
            connect_timeout=max(1.0, min(connect_timeout, 30.0)),
        )
    except pymysql.MySQLError as failure:
        raise ValueError(f"{redact_dsn(uri)}: cannot connect ({' '.join(str(failure).split())})") from None
    try:
        prepare_mysql_session(raw, allow_writes=allow_writes)
        return wrap(raw, guard=policy)
    except BaseException:
        raw.close()
        raise


def _code(failure: BaseException) -> int | None:
    """The MySQL error number of a PyMySQL error, or None."""
    args = getattr(failure, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def _leaves_stream_unknown(failure: BaseException) -> bool:
    """Whether ``failure`` may have left PyMySQL's socket between two packets of a reply (a client-side
    error, 2000-2999, or memory running out while a result was read): nothing more may be read from it."""
    import pymysql

    if isinstance(failure, MemoryError) or isinstance(failure, pymysql.err.InterfaceError):
        return True
    code = _code(failure)
    return isinstance(failure, pymysql.MySQLError) and (code is None or 2000 <= code < 3000)


ESCALATE_AFTER = 0.1
"""Seconds a statement may take to end after ``KILL QUERY`` before ``KILL CONNECTION`` is sent, on the
same kill connection: well within the worker's grace (``isolation.KILL_GRACE``), so the worker answers
before its parent would kill it, and still knows the statement it stopped."""


class QueryKiller:
    """Sends ``KILL QUERY`` for ``raw``'s session from a connection of its own (the same account may
    end its own statements without any privilege), on a thread of its own, one at a time; ``wait``
    returns once no request is on its way. With ``escalate`` (a connection the tool opened, which it can
    open again), a statement that has not ended (``ended``) ``ESCALATE_AFTER`` seconds after the request
    gets ``KILL CONNECTION`` (``escalated``): MariaDB checks either only between rows, so a statement
    inside one long function call (``LOCATE`` over megabytes) runs on regardless, but the server then
    closes the connection and the call can answer at its deadline."""

    def __init__(self, raw: Any, *, escalate: bool) -> None:
        self._raw = raw
        self._escalate = escalate
        self.thread_id = int(raw.thread_id())
        self._thread: threading.Thread | None = None
        self._ended = threading.Event()
        self.sent = False
        self.escalated = False
        self.still_running = False
        """After ``KILL CONNECTION``: the server still listed the statement's thread."""

    def __call__(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self.sent = True
        self._thread = threading.Thread(target=self._send, name="guarded-sqlite-mysql-kill", daemon=True)
        self._thread.start()

    def ended(self) -> None:
        """The call's statement has returned: no ``KILL CONNECTION`` follows."""
        self._ended.set()

    def _send(self) -> None:
        import pymysql

        raw = self._raw
        # PyMySQL 1.2 tries TLS on every connection and sets ``ssl`` even when the server declined it;
        # only ``_ssl_required`` says TLS was asked for. Handing over its context would require TLS, and a
        # server without it refused every kill request (the server's own time limit stopped the call).
        required = getattr(raw, "_ssl_required", raw.ssl)
        try:
            killer = pymysql.connect(
                host=raw.host,
                port=raw.port,
                user=raw.user,
                password=raw.password,
                unix_socket=raw.unix_socket,
                ssl=raw.ctx if required else None,
                connect_timeout=CANCEL_TIMEOUT,
                read_timeout=CANCEL_TIMEOUT,
            )
        except Exception:  # an unreachable server: its own time limit remains
            return
        try:
            with killer.cursor() as cursor:
                cursor.execute(f"KILL QUERY {self.thread_id}")
                if self._escalate and not self._ended.wait(ESCALATE_AFTER):
                    self.escalated = True
                    cursor.execute(f"KILL CONNECTION {self.thread_id}")
                    # The server ends a killed thread only once its statement returns: look, so that the
                    # answer says whether the statement was stopped or still runs.
                    self._ended.wait(ESCALATE_AFTER)
                    listed = "SELECT COUNT(*) FROM information_schema.processlist WHERE id = %s"
                    cursor.execute(listed, (self.thread_id,))
                    row = cursor.fetchone()
                    self.still_running = bool(row and row[0])
        except Exception:  # the statement had ended; nothing to stop
            pass
        finally:
            killer.close()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join(CANCEL_TIMEOUT * 2)


class _LostBeforeCall(Exception):
    """The connection was found lost before the model's statement was sent: the call may run again."""


class MySQLSession:
    """The connection of one ``GuardedDatabase`` on MySQL/MariaDB, and its calls. ``fetch(cursor,
    deadline)`` reads rows within the tool's limits; ``refuse(failure, timed_out)`` raises the refusal
    for a failed statement. ``reconnector`` is set when the tool opened the connection from a URI: the
    connection is then its own, reset after every call and replaced when lost."""

    def __init__(
        self,
        connection: Any,
        *,
        allow_writes: bool,
        fetch: Callable[[Any, Any], tuple[list[Any], str]],
        refuse: Callable[[Exception, bool], None],
    ) -> None:
        from .._engines.mysql import is_mariadb

        self.connection = connection
        self.allow_writes = allow_writes
        self.reconnector: Reconnector | None = None
        self._fetch = fetch
        self._refuse = refuse
        self._unreset = False
        self._broken = False
        self._stopped: int | None = None
        """The server thread of a call stopped with ``KILL CONNECTION``, until the server says it ended."""
        raw = connection.__wrapped__
        name = "max_statement_time" if is_mariadb(raw) else "max_execution_time"
        disk = ", @@SESSION.tmp_disk_table_size" if is_mariadb(raw) else ""
        with raw.cursor() as cursor:
            cursor.execute(f"SELECT @@SESSION.{name}, @@SESSION.sql_mode{disk}")
            row = cursor.fetchone()
        value, mode, *size = row if not isinstance(row, dict) else tuple(row.values())
        self._time_setting = f"SET SESSION {name} = {value}, sql_mode = {raw.escape(str(mode))}" + "".join(
            f", tmp_disk_table_size = {int(bytes_)}" for bytes_ in size
        )
        """What puts back a handed-in connection's own time limit, ``sql_mode`` and (MariaDB) temporary
        table size after each call."""

    @property
    def raw(self) -> Any:
        return self.connection.__wrapped__

    def close(self) -> None:
        self.connection.close()

    def call(self, sql: str, parameters: tuple[Any, ...], limit: float) -> tuple[Any, list[Any], str, Any, int]:
        """Run one statement: ``(description, rows, over, report, rowcount)`` as ``GuardedDatabase.query``
        uses them, or ``QueryRefused``."""
        return self._on_server(lambda: self._run(sql, parameters, limit), limit)

    def describe(self, limit: float) -> SchemaInfo:
        """``schema_description.describe`` in a read-only transaction under the time limit."""
        return self._on_server(lambda: self._describe(limit), limit)

    def _on_server(self, run: Callable[[], _T], limit: float) -> _T:
        """``run()`` on a usable connection, then the session reset. A connection found lost before the
        model's statement was sent is replaced and the call run again, once."""
        for attempt in (1, 2):
            self._make_usable(limit)
            self._refuse_while_stopped_runs()
            try:
                return run()
            except _LostBeforeCall as lost:
                if attempt == 2:
                    raise lost_again(lost) from None
            finally:
                self._after_call()
        raise AssertionError("not reached")

    def _refuse_while_stopped_runs(self) -> None:
        """``QueryRefused("busy")`` while the statement of a call stopped at its deadline still runs on the
        server (the account sees its own threads in the process list without any privilege): the tool
        counts it against its own work, so stopped statements never pile up past one, each with a
        connection of the account's and a core of the server's."""
        if self._stopped is None:
            return
        try:
            with self.raw.cursor() as cursor:
                cursor.execute("SELECT COUNT(*) FROM information_schema.processlist WHERE id = %s", (self._stopped,))
                row = cursor.fetchone()
        except Exception:  # the connection failed here: the next call finds it lost and replaces it
            self._broken = True
            raise QueryRefused(
                "unavailable", "Refused: the database connection failed before this call; nothing was run. Try again."
            ) from None
        if row and row[0]:
            raise QueryRefused(
                "busy",
                "Refused: a statement this tool stopped at its time limit is still running on the server (one long "
                "function call over very long values cannot be interrupted there); nothing new runs until the "
                "server has ended it. Try again later, with smaller values.",
            )
        self._stopped = None

    def _make_usable(self, limit: float) -> None:
        why = ""
        if not self.raw.open:
            why = "the server ended it, or it restarted"
        elif self._broken:
            why = "a call ended while a reply was being read"
        elif self._unreset:
            why = "its session could not be reset after the last call"
        if not why:
            return
        if self.reconnector is None:
            raise QueryRefused(
                "unavailable",
                f"Refused: the database connection cannot be used ({why}), and this tool cannot open "
                "another: it was handed an open connection. Tell the user.",
            )
        old = self.connection
        self.connection = self.reconnector.reopen(why, limit)
        self._unreset = self._broken = False
        try:
            old.close()
        except Exception:  # a connection the server ended has nothing left to close
            pass

    def _after_call(self) -> None:
        """Reset the session; a connection whose reply stream is unknown is closed instead."""
        from .lockdown import reset_mysql_session

        raw = self.raw
        if not raw.open:
            return
        if self._broken:
            try:
                raw.close()
            except Exception:
                pass
            return
        try:
            reset_mysql_session(
                raw, owned=self.reconnector is not None, allow_writes=self.allow_writes, time_setting=self._time_setting
            )
        except Exception:  # a session that kept its state must not serve another call
            self._unreset = True

    def _run(self, sql: str, parameters: tuple[Any, ...], limit: float) -> tuple[Any, list[Any], str, Any, int]:
        import pymysql

        from .._core.deadlines import call_deadline, interrupt_after
        from .lockdown import start_mysql_call

        raw = self.raw
        description: Any = None
        rows: list[Any] = []
        over, count = "", -1
        report: Any = None
        sent = False
        try:
            killer = QueryKiller(raw, escalate=self.reconnector is not None)
        except Exception as failure:  # thread_id() of a connection that is already closed
            raise _LostBeforeCall(" ".join(str(failure).split())[:300]) from None
        started = time.monotonic()
        late = False
        deadline = interrupt_after(limit, killer, every=RECANCEL_EVERY)
        try:
            try:
                with deadline, call_deadline(limit):
                    start_mysql_call(raw, allow_writes=self.allow_writes, time_limit=limit)
                    sent = True
                    # Tuples whatever the connection's cursor class: the tool serves rows, not dicts.
                    cur = self.connection.cursor(pymysql.cursors.Cursor)
                    if parameters:
                        cur.execute(sql, parameters)
                    else:  # without arguments PyMySQL formats nothing: '%' stays a character
                        cur.execute(sql)
                    description = cur.description
                    if description is not None:
                        rows, over = self._fetch(cur, deadline)
                    else:
                        count = cur.rowcount
                    report = cur.guard_report
            finally:
                killer.ended()
                deadline.cancel()
                killer.wait()  # no KILL may arrive after the call
            if self.allow_writes:
                raw.commit()
            else:
                raw.rollback()
            # The server's own time limit may end a statement first and answer as if it had finished
            # (MariaDB's BENCHMARK returns 0 at max_statement_time, no error, no warning).
            late = time.monotonic() - started >= limit
            if (deadline.fired or late) and description is not None:
                raise TimeoutError("time limit passed")
        except Exception as failure:
            self._end_after_failure(raw, failure)
            if killer.escalated:
                # KILL CONNECTION ended the session; the server may still be running the statement.
                self._stopped = killer.thread_id
                self._broken = self._broken or raw.open
                if killer.still_running:
                    raise QueryRefused(
                        "timeout",
                        f"Refused: the query ran longer than {limit:.3g} seconds; its connection was ended, but the "
                        "server could not stop the statement (one long function call over very long values) and "
                        "still runs it. This tool runs nothing new until the server has ended it. Use smaller values "
                        "or a LIMIT.",
                    ) from None
                raise QueryRefused(
                    "timeout",
                    f"Refused: the query ran longer than {limit:.3g} seconds and was stopped: its connection was "
                    "ended. Use smaller values or a LIMIT.",
                ) from None
            if not raw.open:
                why = " ".join(str(failure).split())[:300]
                if not sent:  # nothing of the model's ran: the call may run again on a new connection
                    raise _LostBeforeCall(why) from None
                raise QueryRefused(
                    "connection_lost",
                    f"Refused: the connection to the database ended during this call ({why}); a new one is "
                    "opened for the next call.",
                ) from None
            self._refuse(failure, deadline.fired or late or _code(failure) in _TIMEOUT_CODES)
            raise  # not reached: refuse raises
        return description, rows, over, report, count

    def _end_after_failure(self, raw: Any, failure: BaseException) -> None:
        """Roll back what a failed call left open, unless the reply stream is in an unknown state: then
        the connection is marked to be closed after the call (and replaced, when the tool opened it)."""
        if _leaves_stream_unknown(failure):
            self._broken = True
            return
        if raw.open:
            try:
                raw.rollback()
            except Exception as again:
                if _leaves_stream_unknown(again):
                    self._broken = True

    def _describe(self, limit: float) -> SchemaInfo:
        from .._core.deadlines import call_deadline, interrupt_after
        from .lockdown import start_mysql_call
        from .schema_description import describe

        raw = self.raw
        started = False
        try:
            killer = QueryKiller(raw, escalate=False)
            deadline = interrupt_after(limit, killer, every=RECANCEL_EVERY)
            try:
                with deadline, call_deadline(limit):
                    start_mysql_call(raw, allow_writes=False, time_limit=limit)
                    started = True
                    info = describe(raw, "mysql")
            finally:
                deadline.cancel()
                killer.wait()
            raw.rollback()
            return info
        except Exception as failure:
            self._end_after_failure(raw, failure)
            if not raw.open and not started:
                raise _LostBeforeCall(" ".join(str(failure).split())[:300]) from None
            raise
