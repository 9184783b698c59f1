"""``wrap()``'s proxies: a guarded connection and its cursors over a driver object the library did not
open (a caller's ``sqlite3.Connection``; ``proxy_psycopg`` and ``proxy_duckdb`` for the other drivers).

These classes do the I/O and nothing else: execute, fetch the result once, and hand the rows to
``_guard.decide`` (probe, patch rules, rescue, report state). Everything they do not override goes straight to
the wrapped object through ``wrapt``'s C proxy, so ``isinstance(con, sqlite3.Connection)`` holds.
This module imports ``wrapt``; ``guarded_sqlite`` loads it only when ``wrap()`` first needs a proxy.

Fetch once: a statement that returns rows is fetched in full (up to ``row_cap + 1`` rows) during
``execute``; every fetch method then serves from that buffer. Past the cap the rest streams from the
driver on demand. On SQLite a ``row_factory`` other than None or ``sqlite3.Row`` is set aside while the
raw cursor fetches and applied to the rows served (``factories``), with the proxy as the cursor.

Speed notes. Reading a proxy-owned attribute through wrapt costs several times a plain slot read,
so per-connection facts live in one slotted ``ConnectionState`` that each cursor reaches with a single
proxy read, and the hot path is a module function working on locals.
"""

from __future__ import annotations

import functools
import itertools
import operator
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import wrapt

from .._core.probe import PartialCount
from .._engines import NO_PARAMETERS, SQLITE, Engine, execute_with
from .._guard.connection_state import SMALL_RESULT, note_blob, note_change, note_function
from .._guard.decide import (
    DRIVER,
    GUARD_OFF,
    NOT_ROW_RETURNING,
    NOTHING,
    ConnectionState,
    GuardedConnection,
    GuardedCursor,
    RescueInputs,
    Streaming,
    after_error,
    after_fetch,
    buffer_served,
    changes_schema,
    fetch_rest,
    forget_schema,
    last_report,
    policy_scope,
    redirect_outstanding,
    report_of,
    run_unprobed,
    serving,
    settle_query_only,
    unprobed,
)
from ..policy import GuardPolicy, GuardSpec, resolve_policy
from ..sinks import deliver
from .factories import reshape, shaped, with_plain_rows

if TYPE_CHECKING:
    from ..report import GuardReport, ReportState

_NO_PARAMETERS = NO_PARAMETERS
_fetchone = operator.methodcaller("fetchone")
_connection_cursor = sqlite3.Connection.cursor
_perf_counter_ns = time.perf_counter_ns
_Row = sqlite3.Row


def _driver_fetchmany(raw: Any, size: int) -> list[Any]:
    rows = raw.fetchmany(size)
    return rows if type(rows) is list else list(rows)  # PyMySQL's Cursor gives a tuple


if TYPE_CHECKING:
    _Proxy = wrapt.ObjectProxy[Any]
else:
    _Proxy = wrapt.ObjectProxy


def _itself(raw: Any) -> tuple[Any, Any]:
    # A DuckDB connection is its own cursor but not an iterator: its rows come from fetchone().
    return raw, raw if hasattr(raw, "__next__") else iter(raw.fetchone, None)


class ConnectionProxy(_Proxy, GuardedConnection):
    """A guarded ``sqlite3.Connection`` (or ``psycopg.Connection``) proxy: its cursors probe, and in
    patch mode repair, every query result. ``executescript``, ``backup``, ``iterdump`` and
    ``set_progress_handler`` are the driver's and delegate to it like everything else."""

    _self_guard: ConnectionState

    def __init__(self, raw: Any, policy: GuardPolicy, engine: Engine = SQLITE, single_thread: bool = False) -> None:
        """``single_thread``: the caller knows the driver refuses use from other threads (a sqlite3
        connection opened with ``check_same_thread=True``), so statements need no lock."""
        super().__init__(raw)
        self._self_guard = ConnectionState(policy, engine, self, raw, single_thread)

    @property
    def guard_policy(self) -> GuardPolicy:
        """The policy this connection applies."""
        return self._self_guard.policy

    @property
    def guard_report(self) -> GuardReport | None:
        """The report of the last statement run through this connection, by any of its cursors."""
        return last_report(self._self_guard)

    def guard_scope(self, guard: GuardSpec) -> AbstractContextManager[None]:
        """A block in which this thread's statements through the connection follow ``guard``; see
        ``guarded_sqlite.connect``'s connections."""
        return policy_scope(self._self_guard, resolve_policy(guard))

    # sqlite3's registrations; the guard remembers each name, so that it never runs a statement that
    # calls the function a second time (the join-copy check).
    def create_function(self, name: str, *args: Any, **kwargs: Any) -> Any:
        result = self.__wrapped__.create_function(name, *args, **kwargs)
        note_function(self._self_guard, name)
        return result

    def create_aggregate(self, name: str, *args: Any, **kwargs: Any) -> Any:
        result = self.__wrapped__.create_aggregate(name, *args, **kwargs)
        note_function(self._self_guard, name)
        return result

    def create_window_function(self, name: str, *args: Any, **kwargs: Any) -> Any:
        result = self.__wrapped__.create_window_function(name, *args, **kwargs)
        note_function(self._self_guard, name)
        return result

    def cursor(self, *args: Any, **kwargs: Any) -> CursorProxy:
        raw_connection = self.__wrapped__
        if isinstance(raw_connection, GuardedConnection):
            # connect()'s own connection, re-wrapped with another policy: its plain cursors, so that
            # only this proxy's policy applies.
            raw = sqlite3.Connection.cursor(raw_connection, *args, **kwargs)  # type: ignore[call-overload]
        else:
            raw = raw_connection.cursor(*args, **kwargs)
        cursor = self._cursor_proxy(raw)(raw)
        cursor._self_guard = self._self_guard
        cursor._self_connection = self
        return cursor

    def _cursor_proxy(self, raw_cursor: Any) -> type[CursorProxy]:
        """The proxy class for one of the driver's cursors (``proxy_psycopg`` has its own)."""
        return CursorProxy

    def execute(
        self,
        sql: str,
        parameters: Any = _NO_PARAMETERS,
        /,
        *,
        candidates: Sequence[str] | None = None,
        question: str | None = None,
        hint: str | None = None,
    ) -> CursorProxy:
        # cursor() and CursorProxy.execute inlined: every read of a proxy attribute goes through wrapt's
        # lookup (several times a plain attribute's), so each fact is read once and handed on. SQLite
        # only: the other drivers' connection proxies have their own execute (PsycopgConnectionProxy's
        # takes psycopg's keywords).
        raw_connection = self.__wrapped__
        if isinstance(raw_connection, GuardedConnection):  # connect()'s own connection: see cursor()
            raw = _connection_cursor(raw_connection)  # type: ignore[call-overload]
        else:
            raw = raw_connection.cursor()
        cursor = CursorProxy(raw)
        cursor._self_guard = guard = self._self_guard
        cursor._self_connection = self
        rescue_inputs = None if candidates is None else RescueInputs(candidates, question, hint)
        return _statement(cursor, raw, guard, sql, parameters, rescue_inputs, True)

    def executemany(self, sql: str, parameters: Any, /, **kwargs: Any) -> CursorProxy:
        return self.cursor().executemany(sql, parameters, **kwargs)

    def executescript(self, script: str, /) -> CursorProxy:
        return self.cursor().executescript(script)

    def create_collation(self, name: str, *args: Any, **kwargs: Any) -> Any:
        result = self.__wrapped__.create_collation(name, *args, **kwargs)
        note_change(self._self_guard)  # text may compare (and group) differently from now on
        return result

    def deserialize(self, *args: Any, **kwargs: Any) -> Any:
        result = self.__wrapped__.deserialize(*args, **kwargs)
        note_change(self._self_guard)  # a schema's content replaced: no version number moves
        return result

    def backup(self, target: Any, **kwargs: Any) -> None:
        guarded = getattr(target, "_self_guard", None)
        if guarded is not None and hasattr(guarded, "epoch"):
            note_change(guarded)  # the target's pages are replaced under its version numbers
        # sqlite3 type-checks ``target`` in C and refuses a proxy.
        self.__wrapped__.backup(target.__wrapped__ if isinstance(target, ConnectionProxy) else target, **kwargs)

    def iterdump(self, *args: Any, **kwargs: Any) -> Any:
        # The wrapped connection's own: sqlite3's dump takes its cursors from it, never from the guard
        # (a connect()ed connection under the proxy dumps on plain cursors itself, see guarded_sqlite._io.dump).
        return self.__wrapped__.iterdump(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__wrapped__(*args, **kwargs)

    def __enter__(self) -> ConnectionProxy:
        self.__wrapped__.__enter__()
        return self

    def __getattr__(self, name: str) -> Any:
        found = _subclass_aware_getattr(self, name)
        if name in _UNSEEN_CHANGES and callable(found):
            return _noting_change(self._self_guard, name, found)
        return found

    def __exit__(self, *exc_info: Any) -> Any:
        return self.__wrapped__.__exit__(*exc_info)


_UNSEEN_CHANGES = frozenset({"blobopen", "load_extension", "set_authorizer"})
"""sqlite3's methods that change what a statement reads with no statement or version number showing it
(``guarded_sqlite._io.sqlite_unseen``); looked up, not defined, so a psycopg connection has none."""


def _noting_change(guard: ConnectionState, name: str, method: Any) -> Any:
    @functools.wraps(method)
    def noting(*args: Any, **kwargs: Any) -> Any:
        result = method(*args, **kwargs)
        if name == "blobopen":
            note_blob(guard, result, bool(kwargs.get("readonly")))
        else:
            note_change(guard)
        return result

    return noting


class CursorProxy(_Proxy, GuardedCursor):
    """A guarded ``sqlite3.Cursor`` proxy: fetches each result once, probes it, serves it from a buffer.

    ``ConnectionProxy.cursor()`` sets ``_self_guard``; the other proxy-owned attributes start from
    the class defaults below, which keeps creating a cursor cheap.
    """

    _self_guard: ConnectionState
    # The connection proxy that made this cursor, held as sqlite3's cursor holds its connection (the
    # guard's state holds it only weakly).
    _self_connection: Any = None
    # Serves fetches: the buffer list (until first touched), an iterator over it, the buffer then the
    # raw tail (past row_cap), or DRIVER: the raw cursor serves.
    _self_rows: list[Any] | Iterator[Any] = NOTHING
    # The iterator over ``_self_rows``'s list once it was handed out, so that re-executing the cursor
    # can redirect it to the new rows, as re-executing a sqlite3 cursor does (serving.serving).
    _self_buffer: Iterator[Any] | Streaming | None = None
    _self_state: ReportState | None = None
    _self_report: GuardReport | None = None
    _self_driver_options: dict[str, Any] | None = None  # psycopg's prepare/binary for the raw execute
    # The description of the rows served, when it is not the raw cursor's: (DuckDB) the one recorded
    # when the caller's statement ran.
    _self_description: Any = None
    # A rescued statement's description, paired with the report state it belongs to: it applies only
    # while that state is the cursor's, so execute() never has to clear it.
    _self_rescued_description: tuple[Any, Any] | None = None

    @property
    def connection(self) -> ConnectionProxy:
        proxy: ConnectionProxy = self._self_connection
        return proxy

    @property
    def guard_report(self) -> GuardReport | None:
        """What the guard saw and did for the last statement; None before the first execute."""
        return report_of(self)

    # Read often (pandas and DB-API code read description per query); a property is much cheaper
    # than the proxy's fallback lookup for attributes it does not define.
    @property
    def description(self) -> Any:
        rescued = self._self_rescued_description
        if rescued is not None and rescued[0] is self._self_state:
            return rescued[1]
        return self.__wrapped__.description

    @property
    def row_factory(self) -> Any:
        return self.__wrapped__.row_factory

    @row_factory.setter
    def row_factory(self, factory: Any) -> None:
        # A factory set between fetches applies to the rows served after it, as in sqlite3. psycopg's
        # factory is psycopg's (applied when the result was fetched); DuckDB has none.
        raw = self.__wrapped__
        if self._self_guard.engine is not SQLITE:
            raw.row_factory = factory
            return
        old = raw.row_factory
        raw.row_factory = factory
        reshape(self, raw, old, factory)

    @row_factory.deleter
    def row_factory(self) -> None:
        if self._self_guard.engine is not SQLITE:
            del self.__wrapped__.row_factory
            return
        self.row_factory = None  # sqlite3 leaves NULL behind, which reads as None but crashes the next fetch

    @property
    def rowcount(self) -> int:
        count: int = self.__wrapped__.rowcount
        return count

    @property
    def lastrowid(self) -> int | None:
        rowid: int | None = self.__wrapped__.lastrowid
        return rowid

    def execute(
        self,
        sql: str,
        parameters: Any = _NO_PARAMETERS,
        /,
        *,
        candidates: Sequence[str] | None = None,
        question: str | None = None,
        hint: str | None = None,
    ) -> CursorProxy:
        """``sqlite3.Cursor.execute``; with ``candidates`` (alternative SQLs for the same question) a
        flagged statement may be rescued by the policy's rescuer."""
        rescue_inputs = None if candidates is None else RescueInputs(candidates, question, hint)
        return _statement(self, self.__wrapped__, self._self_guard, sql, parameters, rescue_inputs)

    def executemany(self, sql: str, parameters: Any, /, **kwargs: Any) -> CursorProxy:
        return self._run_unprobed(self.__wrapped__.executemany, sql, parameters, **kwargs)

    def executescript(self, script: str, /) -> CursorProxy:
        return self._run_unprobed(self.__wrapped__.executescript, script)

    def fetchone(self) -> Any:
        raw = self.__wrapped__
        rows = self._self_rows
        if type(rows) is list and len(rows) == 1:  # a point query's untouched buffer (as sqlite_fast's fetchone)
            raw.fetchone()  # raises as sqlite3 would: closed cursor or connection, wrong thread
            self._self_rows = NOTHING  # its one row, and nothing left to serve or to release
            return rows[0]
        rows = serving(self, raw, _fetchone)
        if rows is raw:
            return rows.fetchone()  # not buffered: the driver's own fetch (and its own errors)
        row = next(rows, None)
        if not rows.__length_hint__():  # that was the last buffered row: let go of the buffer
            buffer_served(self)
        return row

    def fetchmany(self, size: Any = _NO_PARAMETERS) -> list[Any]:
        raw: Any = self.__wrapped__
        size = getattr(raw, "arraysize", 1) if size is _NO_PARAMETERS else operator.index(size)
        rows = serving(self, raw, _fetchone)
        if rows is raw:  # not buffered: the driver's own fetch
            fetched: list[Any] = raw.fetchmany(size)
            return fetched
        # sqlite3 returns every remaining row for a size of zero or less.
        served = list(itertools.islice(rows, size)) if size > 0 else list(rows)
        if not rows.__length_hint__():
            buffer_served(self)
        return served

    def fetchall(self) -> list[Any]:
        rows = self._self_rows
        raw = self.__wrapped__
        if type(rows) is list:
            raw.fetchone()  # raises as sqlite3 would: closed cursor or connection, wrong thread
            # Untouched buffer: hand over the list itself instead of copying it, and keep nothing.
            self._self_rows = NOTHING
            if len(rows) >= SMALL_RESULT:  # smaller results are counted exactly: no pending count
                state = self._self_state
                if state is not None and type(state.unique_rows) is PartialCount:
                    state.unique_rows.release()
            return rows
        rows = serving(self, raw, _fetchone)
        if rows is raw:
            fetched: list[Any] = raw.fetchall()
            return fetched
        served = list(rows)
        buffer_served(self)
        return served

    def close(self) -> None:
        self.__wrapped__.close()
        if self._self_rows is not DRIVER:
            buffer_served(self)  # a distinct count still pending keeps only its lower bound
        self._self_rows = DRIVER
        self._self_buffer = None

    def __iter__(self) -> Iterator[Any]:
        # The serving iterator itself rather than the cursor, so a for-loop runs at C speed; it shares
        # its position with fetchone()/fetchmany(), and execute() redirects it to the new rows.
        return serving(self, self.__wrapped__, _fetchone, True)  # type: ignore[no-any-return]

    def __next__(self) -> Any:
        raw = self.__wrapped__
        rows = serving(self, raw, _fetchone)
        if rows is raw:
            return next(raw)
        row = next(rows)
        if not rows.__length_hint__():
            buffer_served(self)
        return row

    def __getattr__(self, name: str) -> Any:
        return _subclass_aware_getattr(self, name)

    def _run_unprobed(self, method: Any, *args: Any, **kwargs: Any) -> CursorProxy:
        run_unprobed(
            self, self._self_guard.in_scope(), args[0], method.__name__ == "executemany",
            functools.partial(method, *args, **kwargs),
        )  # fmt: skip
        return self


def _statement(
    cursor: CursorProxy,
    raw: Any,
    guard: ConnectionState,
    sql: str,
    parameters: Any,
    rescue_inputs: RescueInputs | None,
    fresh: bool = False,
) -> CursorProxy:
    """``execute`` on a guarded cursor proxy, its guard and driver cursor already read: the statement
    (``_execute_and_probe``) under the connection's lock, then the cursor's and the connection's state.
    ``fresh``: the cursor was just made, so no iterator over an earlier result is outstanding."""
    if guard.scopes:
        guard = guard.in_scope()
    try:
        lock = guard.serial
        if lock is not None:
            with lock:
                rows, state = _execute_and_probe(cursor, raw, sql, parameters, guard, rescue_inputs)
        else:
            rows, state = _execute_and_probe(cursor, raw, sql, parameters, guard, rescue_inputs)
    except BaseException:
        if cursor._self_buffer is not None:
            redirect_outstanding(cursor, DRIVER)
        # As after a failed sqlite3 execute: nothing of the previous statement is served any more.
        cursor._self_rows = DRIVER
        raise
    cursor._self_state = state
    cursor._self_rows = rows if fresh or cursor._self_buffer is None else redirect_outstanding(cursor, rows)
    guard.last = state  # connection_state.settle, inline
    sink = guard.sink
    if sink is not None:
        deliver(sink, state, cursor)
    return cursor


def _execute_and_probe(
    cursor: CursorProxy,
    raw: Any,
    sql: str,
    parameters: Any,
    guard: ConnectionState,
    rescue_inputs: RescueInputs | None = None,
    plain: bool = False,
) -> tuple[Any, ReportState]:
    """The driver I/O of one statement: execute, fetch once, then ``decide.after_fetch``; returns the
    serving rows and the report state. ``plain``: the row factory is already set aside (SQLite).

    On an execution error the state is stored on ``cursor`` before the error propagates unchanged
    (unless a rescue replaced the failed statement with a candidate).
    """
    mode = guard.mode
    guard.started = _perf_counter_ns()  # the statement's own time: what a confirmation's budget scales
    if guard.query_only_due:  # whatever the mode: the guard's own setting, not the caller's
        settle_query_only(guard)
    if mode == "off":
        off = unprobed(guard.preset, sql, GUARD_OFF)
        cursor._self_state = off  # also stands if execute raises: the guard reports nothing either way
        execute_with(raw, sql, parameters)
        return DRIVER, off
    if guard.engine is SQLITE and not plain:
        factory = raw.row_factory
        if factory is not None and factory is not _Row:
            # As in sqlite_fast._run: plain tuples are fetched and judged, the factory shapes the rows
            # served (with the proxy as the cursor, whose description describes them).
            rows, state = with_plain_rows(
                functools.partial(setattr, raw, "row_factory"),
                factory,
                lambda: _execute_and_probe(cursor, raw, sql, parameters, guard, rescue_inputs, True),
            )
            return shaped(rows, cursor, raw, factory), state
    try:
        options = cursor._self_driver_options if guard.driver_options else None
        if options is not None:
            raw.execute(sql, None if parameters is _NO_PARAMETERS else parameters, **options)
        elif parameters is _NO_PARAMETERS:
            raw.execute(sql)
        else:
            raw.execute(sql, parameters)
        if guard.status_results:  # DuckDB: the raw connection is the cursor; guard re-runs reuse it
            cursor._self_description = raw.description
            if guard.engine.is_status_result(raw, sql):
                if guard.catalog is not None and changes_schema(sql):
                    forget_schema(guard)
                return DRIVER, unprobed(guard.preset, sql, NOT_ROW_RETURNING)
        elif raw.description is None:
            guard.epoch += 1  # ATTACH, DDL, a PRAGMA: no kept confirmation holds
            if guard.catalog is not None and guard.engine is not SQLITE and changes_schema(sql):
                forget_schema(guard)
            return DRIVER, unprobed(guard.preset, sql, NOT_ROW_RETURNING)
        rows = raw.fetchmany(guard.first_fetch)
        if type(rows) is not list:  # PyMySQL's Cursor gives a tuple
            rows = list(rows)
        if len(rows) == guard.first_fetch < guard.fetch_size:
            rows = fetch_rest(_driver_fetchmany, raw, guard, rows)
    except Exception as error:
        if guard.status_results:
            cursor._self_description = raw.description
        rescued = after_error(cursor, raw, guard, sql, parameters, error, rescue_inputs)
        if rescued is None:
            raise
        return rescued
    return after_fetch(cursor, raw, guard, sql, parameters, rows, rescue_inputs, _itself)


def _subclass_aware_getattr(proxy: Any, name: str) -> Any:
    """Attribute lookup for what the proxy does not define itself.

    Methods that a caller's subclass (``factory=``, ``cursor_factory=``) adds to the driver's class are
    bound to the proxy, so that their own ``self.execute(...)``/``self.fetchone()`` go through the
    guard (on the raw object they would find an already-drained cursor). Methods using zero-argument
    ``super()`` need the real object, so they stay bound to it; so does everything the driver defines.
    """
    raw = proxy.__wrapped__
    attribute = _added_by_subclass(type(raw), name)  # type: ignore[arg-type]  # classes are hashable
    if attribute is None:
        return getattr(raw, name)
    return attribute.__get__(proxy, type(raw))


# ``guarded_sqlite``'s own connection classes count as the driver's: a proxy over one of them (a
# connect()ed connection re-wrapped with another policy) must not bind their guarded methods to itself.
_DRIVER_MODULES = frozenset(
    {"sqlite3", "psycopg", "duckdb", "_duckdb", "pymysql", "chdb", "builtins", "guarded_sqlite"}
)


@functools.lru_cache(maxsize=256)
def _added_by_subclass(cls: type, name: str) -> Any:
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] in _DRIVER_MODULES:
            return None
        attribute = vars(klass).get(name)
        if attribute is None:
            continue
        function = getattr(attribute, "__func__", attribute)
        code = getattr(function, "__code__", None)
        if code is None or "__class__" in code.co_freevars or not hasattr(attribute, "__get__"):
            return None
        return attribute
    return None


__all__ = [
    "ConnectionProxy",
    "CursorProxy",
    "GuardedConnection",
    "GuardedCursor",
]
