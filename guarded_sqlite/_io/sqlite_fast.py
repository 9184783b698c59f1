"""The SQLite fast path: guarded connections that *are* ``sqlite3.Connection`` objects.

``connect()`` and ``install()`` open the database with ``factory=GuardedSQLiteConnection`` (or, when
the caller passes a ``factory=`` subclass of their own, a class combining theirs with it, cached per
factory). Its cursors are ``GuardedSQLiteCursor`` objects (likewise combined with a caller's
``cursor(factory=...)`` class). Being real subclasses, they pass every type check sqlite3 makes in C
(``sqlite3.Cursor(con)``, ``raw.backup(target=con)``, re-initialisation with ``con.__init__(...)``)
and need no proxy: attribute reads are plain slot and C-member reads.

The classes only do the I/O: sqlite3's own C methods run the statement and fetch its result once
(up to ``row_cap + 1`` rows); ``_guard.decide`` probes, decides, repairs and serves, exactly as for ``wrap()``'s
proxies. sqlite3's ``Connection.execute`` makes its cursor in C without calling an overridden
``cursor()``, so ``execute``/``executemany``/``executescript`` are overridden too. A ``row_factory``
other than None or ``sqlite3.Row`` is set aside while sqlite3 fetches and applied to the rows served
(``factories``), so the guard judges the database's rows.

A cursor made on a connection that is not guarded (``GuardedSQLiteCursor(plain_connection)``) passes
everything through; ``sqlite3.Cursor(con)`` on a guarded connection gives a plain, unguarded cursor,
as the C type check demands.
"""

from __future__ import annotations

import functools
import itertools
import operator
import sqlite3
import sys
import weakref
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import AbstractContextManager
from time import perf_counter_ns as _perf_counter_ns
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, overload

from .._core.probe import PartialCount
from .._engines import NO_PARAMETERS, SQLITE
from .._guard.connection_state import SMALL_RESULT, note_change, note_function
from .._guard.decide import (
    DRIVER,
    GUARD_OFF,
    LIST_ITERATOR,
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
from .factories import native, reshape, shaped, with_plain_rows
from .sqlite_unseen import UnseenChanges

if TYPE_CHECKING:
    from typing_extensions import Self

    from ..report import GuardReport, ReportState

    _CursorT = TypeVar("_CursorT", bound=sqlite3.Cursor)
    _GuardedT = TypeVar("_GuardedT", bound="CursorMethods")

_NO = NO_PARAMETERS
# sqlite3's own C methods, called on the subclass instances (their Python overrides would recurse).
_connection_init = sqlite3.Connection.__init__
_connection_cursor = sqlite3.Connection.cursor
_connection_backup = sqlite3.Connection.backup
_execute = sqlite3.Cursor.execute
_executemany = sqlite3.Cursor.executemany
_executescript = sqlite3.Cursor.executescript
_fetchone = sqlite3.Cursor.fetchone
_fetchmany = sqlite3.Cursor.fetchmany
_fetchall = sqlite3.Cursor.fetchall
_close = sqlite3.Cursor.close
_next = sqlite3.Cursor.__next__
_description = sqlite3.Cursor.description.__get__
_ROW_FACTORY = vars(sqlite3.Cursor)["row_factory"]  # sqlite3's C member (the guarded classes shadow it)
_set_row_factory = _ROW_FACTORY.__set__
_Row = sqlite3.Row
_DEFAULT_FACTORY: Any = object()


class _Tail:
    """The rows past ``row_cap``, from sqlite3's own ``__next__`` (the cursor's is the guard's).

    Holds the cursor weakly: the cursor holds its serving iterator, and ``del cur`` must free a
    cursor that still streams (which resets its statement and releases its table locks) at once, as
    it does in sqlite3, not at the next garbage collection."""

    __slots__ = ("cursor", "held")

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self.cursor = weakref.ref(cursor)
        self.held: sqlite3.Cursor | None = None

    def hold(self) -> None:
        """Keep the cursor alive: its serving iterator was handed to the caller."""
        self.held = self.cursor()

    def __iter__(self) -> _Tail:
        return self

    def __next__(self) -> Any:
        cursor = self.cursor()
        if cursor is None:
            raise StopIteration
        return _next(cursor)


def _tail(cursor: sqlite3.Cursor) -> tuple[Any, Iterator[Any]]:
    return weakref.proxy(cursor), _Tail(cursor)


class CursorMethods(sqlite3.Cursor, GuardedCursor):
    """The guarded cursor's behaviour, without instance layout of its own, so it combines with any
    ``sqlite3.Cursor`` subclass. Per-statement state lives in the instance ``__dict__``; the class
    attributes below are its defaults (creating a cursor sets nothing)."""

    __slots__ = ()

    _self_rows: Any = NOTHING
    _self_buffer: Iterator[Any] | Streaming | None = None
    _self_state: ReportState | None = None
    _self_report: GuardReport | None = None
    _self_rescued_description: tuple[Any, Any] | None = None
    # sqlite3's row_factory member under a second name: execute() reads it at C speed, past the property.
    _self_row_factory = _ROW_FACTORY

    @property
    def guard_report(self) -> GuardReport | None:
        """What the guard saw and did for the last statement; None before the first execute."""
        return report_of(self)

    def _get_row_factory(self) -> Any:
        return _ROW_FACTORY.__get__(self)

    def _change_row_factory(self, factory: Any) -> None:
        old = _ROW_FACTORY.__get__(self)
        _set_row_factory(self, factory)
        reshape(self, weakref.proxy(self), old, factory)

    def _drop_row_factory(self) -> None:
        # sqlite3 leaves NULL behind, which reads as None but crashes the next fetch: None it is.
        self._change_row_factory(None)

    # A property over sqlite3's member, so that a factory set between fetches applies to the rows
    # served after it, as in sqlite3 (which calls it at each fetch); nothing is checked per fetch.
    row_factory = property(_get_row_factory, _change_row_factory, _drop_row_factory, _ROW_FACTORY.__doc__)

    @property
    def description(self) -> Any:
        rescued = self._self_rescued_description
        if rescued is not None and rescued[0] is self._self_state:
            return rescued[1]
        return _description(self)

    def execute(
        self,
        sql: str,
        parameters: Any = _NO,
        /,
        *,
        candidates: Sequence[str] | None = None,
        question: str | None = None,
        hint: str | None = None,
    ) -> Self:
        """``sqlite3.Cursor.execute``; with ``candidates`` (alternative SQLs for the same question) a
        flagged statement may be rescued by the policy's rescuer."""
        try:
            guard = self.connection._self_guard  # type: ignore[attr-defined]
        except AttributeError:  # not a guarded connection (or no connection yet): sqlite3's own
            if parameters is _NO:
                _execute(self, sql)
            else:
                _execute(self, sql, parameters)
            self._self_rows = DRIVER
            return self
        return _statement(
            self, guard, sql, parameters, None if candidates is None else RescueInputs(candidates, question, hint)
        )

    def executemany(self, sql: str, parameters: Any, /) -> Self:
        guard = _guard_or_none(self)
        if guard is None:
            _executemany(self, sql, parameters)
            self._self_rows = DRIVER
        else:
            run_unprobed(self, guard, sql, True, lambda: _executemany(self, sql, parameters))
        return self

    def executescript(self, sql_script: str, /) -> Self:
        guard = _guard_or_none(self)
        if guard is None:
            _executescript(self, sql_script)
            self._self_rows = DRIVER
        else:
            run_unprobed(self, guard, sql_script, False, lambda: _executescript(self, sql_script))
        return self

    def fetchone(self) -> Any:
        rows = self._self_rows
        kind = type(rows)
        if kind is list:
            _fetchone(self)  # raises as sqlite3 would: closed cursor or connection, wrong thread
            if len(rows) == 1:  # a point query: its one row, and nothing left to serve
                self._self_rows = NOTHING
                return rows[0]
            rows = self._self_rows = iter(rows)
        elif kind is LIST_ITERATOR:
            _fetchone(self)
        elif rows is DRIVER:
            return _fetchone(self)  # not buffered: sqlite3's own fetch (and its own errors)
        else:
            rows = serving(self, self, _fetchone)
        row = next(rows, None)
        if not rows.__length_hint__():  # that was the last buffered row: let go of the buffer
            buffer_served(self)
        return row

    def fetchmany(self, size: Any = _NO) -> list[Any]:
        size = self.arraysize if size is _NO else operator.index(size)
        rows = serving(self, self, _fetchone)
        if rows is self:
            return _fetchmany(self, size)
        # sqlite3 returns every remaining row for a size of zero or less.
        fetched = list(itertools.islice(rows, size)) if size > 0 else list(rows)
        if not rows.__length_hint__():
            buffer_served(self)
        return fetched

    def fetchall(self) -> list[Any]:
        rows = self._self_rows
        if type(rows) is list:
            _fetchone(self)  # raises as sqlite3 would: closed cursor or connection, wrong thread
            # Untouched buffer: hand over the list itself instead of copying it, and keep nothing.
            self._self_rows = NOTHING
            if len(rows) >= SMALL_RESULT:  # smaller results are counted exactly: no pending count
                current = self._self_state
                if current is not None and type(current.unique_rows) is PartialCount:
                    current.unique_rows.release()
            return rows
        rows = serving(self, self, _fetchone)
        if rows is self:
            return _fetchall(self)
        fetched = list(rows)
        buffer_served(self)
        return fetched

    def close(self) -> None:
        _close(self)
        if self._self_rows is not DRIVER:
            buffer_served(self)  # a distinct count still pending keeps only its lower bound
        self._self_rows = DRIVER
        self._self_buffer = None

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        # The serving iterator itself rather than the cursor, so a for-loop runs at C speed; it shares
        # its position with fetchone()/fetchmany(), and execute() redirects it to the new rows.
        return serving(self, self, _fetchone, True)  # type: ignore[no-any-return]

    def __next__(self) -> Any:
        rows = serving(self, self, _fetchone)
        if rows is self:
            return _next(self)
        row = next(rows)
        if not rows.__length_hint__():
            buffer_served(self)
        return row


class _GuardedKind(type):
    """``isinstance`` against the two public classes below holds for every guarded SQLite object:
    ``connect()``'s (a caller's ``factory=`` class combined with them included) and ``wrap()``'s
    proxies over ``sqlite3`` objects, whose type hints name these classes."""

    _kind: tuple[type, type]

    def __instancecheck__(cls, obj: object) -> bool:
        marker, driver = cls._kind
        return isinstance(obj, marker) and isinstance(obj, driver)


class GuardedSQLiteCursor(CursorMethods, metaclass=_GuardedKind):
    """The cursor of ``connect()``'s connections: a ``sqlite3.Cursor`` that fetches each result once,
    probes it, and serves it from a buffer."""

    _kind: ClassVar[tuple[type, type]] = (GuardedCursor, sqlite3.Cursor)


def _guard_or_none(cursor: sqlite3.Cursor) -> ConnectionState | None:
    try:
        guard: ConnectionState = cursor.connection._self_guard  # type: ignore[attr-defined]
    except AttributeError:
        return None
    return guard.in_scope() if guard.scopes else guard


def _statement(
    cursor: _GuardedT, guard: ConnectionState, sql: str, parameters: Any, rescue_inputs: RescueInputs | None
) -> _GuardedT:
    """``execute`` on a guarded cursor: the statement's I/O on sqlite3's C methods, inline for the common
    case, then ``decide.after_fetch``; ``_run`` has the rarer cases."""
    if guard.scopes:
        guard = guard.in_scope()
    serial = guard.serial
    factory = cursor._self_row_factory
    if serial is not None:
        serial.acquire()
    guard.started = _perf_counter_ns()  # the statement's own time: what a confirmation's budget scales
    try:
        if guard.mode == "off" or guard.query_only_due or not (factory is None or factory is _Row):
            rows, state = _run(cursor, guard, sql, parameters, rescue_inputs, factory)
        else:  # one statement's I/O, inline (_run has the rarer cases)
            try:
                if parameters is _NO:
                    _execute(cursor, sql)
                else:
                    _execute(cursor, sql, parameters)
                rows = _fetchmany(cursor, guard.first_fetch)
                if len(rows) == guard.first_fetch < guard.fetch_size:
                    rows = fetch_rest(_fetchmany, cursor, guard, rows)
            except Exception as error:
                rescued = after_error(cursor, cursor, guard, sql, parameters, error, rescue_inputs)
                if rescued is None:
                    raise
                rows, state = rescued
            else:
                kept, screen = guard.one_row, guard.aggregate_screen
                if (
                    kept is not None
                    and len(rows) == 1
                    and kept[1] == sql
                    and rescue_inputs is None
                    and (screen is None or screen.get(sql) is False)
                ):
                    # decide.after_fetch's quick lane inline for a repeated point query (a frame less: 0.1
                    # of 1.4 us): its row need only be hashable, as set() needs it; its kept state serves.
                    try:
                        hash(rows[0])
                        state = kept
                    except Exception:  # a text_factory's unhashable value: the general path judges it
                        rows, state = after_fetch(cursor, cursor, guard, sql, parameters, rows, None, _tail)
                elif rows or _description(cursor) is not None:
                    rows, state = after_fetch(cursor, cursor, guard, sql, parameters, rows, rescue_inputs, _tail)
                else:
                    guard.epoch += 1  # ATTACH, DDL, a PRAGMA: no kept confirmation holds
                    rows, state = DRIVER, unprobed(guard.preset, sql, NOT_ROW_RETURNING)
    except BaseException:
        if cursor._self_buffer is not None:
            redirect_outstanding(cursor, DRIVER)
        # As after a failed sqlite3 execute: nothing of the previous statement is served any more.
        cursor._self_rows = DRIVER
        raise
    finally:
        if serial is not None:
            serial.release()
    cursor._self_state = guard.last = state
    cursor._self_rows = rows if cursor._self_buffer is None else redirect_outstanding(cursor, rows)
    if guard.sink is not None:
        deliver(guard.sink, state, cursor)
    return cursor


def _run(
    cursor: CursorMethods,
    guard: ConnectionState,
    sql: str,
    parameters: Any,
    rescue_inputs: RescueInputs | None,
    factory: Any,
) -> tuple[Any, ReportState]:
    """One statement's I/O on sqlite3's C methods, then ``decide.after_fetch``: the serving rows and the
    report state. On an execution error the state is stored on ``cursor`` before the error propagates
    unchanged (unless a rescue replaced the failed statement with a candidate). ``factory``: the
    cursor's row factory; one other than None or sqlite3.Row is applied to the rows served."""
    mode = guard.mode
    if guard.query_only_due:  # whatever the mode: the guard's own setting, not the caller's
        settle_query_only(guard)
    if mode == "off":
        off = unprobed(guard.preset, sql, GUARD_OFF)
        cursor._self_state = off  # also stands if execute raises: the guard reports nothing either way
        if parameters is _NO:
            _execute(cursor, sql)
        else:
            _execute(cursor, sql, parameters)
        return DRIVER, off
    if native(factory):
        return _probed(cursor, guard, sql, parameters, rescue_inputs)
    # sqlite3 fetches plain tuples, which the probe and the patches judge; the guard's re-executions
    # read the cursor's factory (None here), so P2's rerun and rescue candidates compare tuples too.
    rows, state = with_plain_rows(
        functools.partial(_set_row_factory, cursor),
        factory,
        lambda: _probed(cursor, guard, sql, parameters, rescue_inputs),
    )
    return shaped(rows, cursor, weakref.proxy(cursor), factory), state


def _probed(
    cursor: CursorMethods, guard: ConnectionState, sql: str, parameters: Any, rescue_inputs: RescueInputs | None
) -> tuple[Any, ReportState]:
    """``_run``'s statement in patch or observe mode: execute, fetch once, probe."""
    preset = guard.preset
    try:
        if parameters is _NO:
            _execute(cursor, sql)
        else:
            _execute(cursor, sql, parameters)
        if _description(cursor) is None:
            guard.epoch += 1  # ATTACH, DDL, a PRAGMA: no kept confirmation holds
            return DRIVER, unprobed(preset, sql, NOT_ROW_RETURNING)
        rows = _fetchmany(cursor, guard.first_fetch)
        if len(rows) == guard.first_fetch < guard.fetch_size:
            rows = fetch_rest(_fetchmany, cursor, guard, rows)
    except Exception as error:
        rescued = after_error(cursor, cursor, guard, sql, parameters, error, rescue_inputs)
        if rescued is None:
            raise
        return rescued
    return after_fetch(cursor, cursor, guard, sql, parameters, rows, rescue_inputs, _tail)


# --------------------------------------------------------------------------------------------------
# Connections
# --------------------------------------------------------------------------------------------------

_CURSOR_CLASSES: weakref.WeakKeyDictionary[type, type] = weakref.WeakKeyDictionary()
_CONNECTION_CLASSES: weakref.WeakKeyDictionary[type, type] = weakref.WeakKeyDictionary()


def _combined(cache: weakref.WeakKeyDictionary[type, type], factory: type, guarded: type) -> type:
    """``factory`` with the guard's methods under it (theirs first: their ``super()`` calls reach the
    guard, then sqlite3), made once per factory. Named and placed like the caller's class."""
    if issubclass(factory, ConnectionMethods) or issubclass(factory, CursorMethods):
        return factory
    combined = cache.get(factory)
    if combined is None:
        namespace = {"__module__": factory.__module__, "__qualname__": factory.__qualname__, "__doc__": factory.__doc__}
        combined = cache[factory] = type(factory.__name__, (factory, guarded), namespace)
    return combined


def cursor_class(factory: type) -> type:
    """The guarded cursor class for a caller's ``sqlite3.Cursor`` subclass."""
    return _combined(_CURSOR_CLASSES, factory, CursorMethods)


def connection_class(factory: type) -> type:
    """The guarded connection class for a caller's ``sqlite3.Connection`` subclass. One that overrides
    ``cursor()`` gets its own cursors from the ``execute`` shortcuts too (as from a ``wrap()`` proxy)."""
    if factory is sqlite3.Connection:
        return GuardedSQLiteConnection
    overrides_cursor = factory.cursor is not sqlite3.Connection.cursor  # type: ignore[attr-defined]
    return _combined(_CONNECTION_CLASSES, factory, _CursorHookMethods if overrides_cursor else ConnectionMethods)


class ConnectionMethods(UnseenChanges, GuardedConnection):
    """The guarded connection's behaviour, without instance layout of its own (see ``CursorMethods``);
    ``UnseenChanges`` has the methods that change what no statement shows."""

    __slots__ = ()
    _self_guard: ConnectionState

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        try:
            guard: ConnectionState | None = self._self_guard
        except AttributeError:
            guard = None
        # Re-initialising clears the instance's slots and __dict__ (sqlite3 runs tp_clear first).
        try:
            _connection_init(self, *args, **kwargs)
        finally:
            if guard is not None:
                self._self_guard = guard
        # check_same_thread is the fifth parameter, after the database.
        single_thread = bool(kwargs.get("check_same_thread", args[4] if len(args) > 4 else True))
        if guard is None:  # opened directly, not by connect(): the default policy until connect() sets one
            self._self_guard = ConnectionState(_default_policy(), SQLITE, self, self, single_thread)
        else:  # re-initialised: a new database handle, the same policy
            guard.set_threading(single_thread)
            forget_schema(guard)
            note_change(guard)
            guard.query_only_due = 0
            guard.listed_functions, guard.registered_functions = None, frozenset()  # none on the new handle
            guard.extensions_loadable = False

    @property
    def guard_policy(self) -> GuardPolicy:
        """The policy this connection applies."""
        return self._self_guard.policy

    @property
    def guard_report(self) -> GuardReport | None:
        """The report of the last statement run through this connection, by any of its cursors (and
        so by any library that made its own); None before the first."""
        return last_report(self._self_guard)

    # sqlite3's registrations, each name remembered: the guard never runs a second time what calls it.
    def create_function(self, name: str, *args: Any, **kwargs: Any) -> None:
        sqlite3.Connection.create_function(self, name, *args, **kwargs)
        note_function(self._self_guard, name)

    def create_aggregate(self, name: str, *args: Any, **kwargs: Any) -> None:
        sqlite3.Connection.create_aggregate(self, name, *args, **kwargs)
        note_function(self._self_guard, name)

    if sys.version_info >= (3, 11):

        def create_window_function(self, name: str, *args: Any, **kwargs: Any) -> None:
            sqlite3.Connection.create_window_function(self, name, *args, **kwargs)
            note_function(self._self_guard, name)

    if hasattr(sqlite3.Connection, "enable_load_extension"):  # absent where Python was built without it

        def enable_load_extension(self, enabled: bool, /) -> None:
            sqlite3.Connection.enable_load_extension(self, enabled)
            if enabled:  # an extension's native functions may write without going through this object
                self._self_guard.extensions_loadable = True

    def guard_scope(self, guard: GuardSpec) -> AbstractContextManager[None]:
        """A block in which this thread's statements through the connection follow ``guard`` (a
        preset name or a ``GuardPolicy``, as ``connect`` takes); other threads keep the connection's
        policy, and the block restores it on exit."""
        return policy_scope(self._self_guard, resolve_policy(guard))

    @overload
    def cursor(self, factory: None = None) -> GuardedSQLiteCursor: ...

    @overload
    def cursor(self, factory: Callable[[sqlite3.Connection], _CursorT]) -> _CursorT: ...

    def cursor(self, factory: Any = _DEFAULT_FACTORY) -> Any:
        if factory is _DEFAULT_FACTORY or factory is sqlite3.Cursor:
            return _connection_cursor(self, GuardedSQLiteCursor)
        if isinstance(factory, type) and issubclass(factory, sqlite3.Cursor):
            return _connection_cursor(self, cursor_class(factory))
        cursor = _connection_cursor(self, factory)  # sqlite3 checks what a callable factory returns
        if isinstance(cursor, CursorMethods):
            return cursor
        # A callable (not a class) made a cursor the guard cannot extend: guard it through a proxy.
        from .proxy import CursorProxy

        proxy = CursorProxy(cursor)
        proxy._self_guard = self._self_guard
        proxy._self_connection = self
        return proxy

    def execute(
        self,
        sql: str,
        parameters: Any = _NO,
        /,
        *,
        candidates: Sequence[str] | None = None,
        question: str | None = None,
        hint: str | None = None,
    ) -> GuardedSQLiteCursor:
        return _statement(
            _connection_cursor(self, GuardedSQLiteCursor),
            self._self_guard,
            sql,
            parameters,
            None if candidates is None else RescueInputs(candidates, question, hint),
        )

    def executemany(self, sql: str, parameters: Any, /) -> GuardedSQLiteCursor:
        cursor: GuardedSQLiteCursor = _connection_cursor(self, GuardedSQLiteCursor)
        return cursor.executemany(sql, parameters)

    def executescript(self, sql_script: str, /) -> GuardedSQLiteCursor:
        cursor: GuardedSQLiteCursor = _connection_cursor(self, GuardedSQLiteCursor)
        return cursor.executescript(sql_script)

    def backup(self, target: Any, **kwargs: Any) -> None:
        # The target's pages are replaced under its version numbers: its kept confirmations go.
        guarded = getattr(target, "_self_guard", None)
        if isinstance(guarded, ConnectionState):
            note_change(guarded)
        # sqlite3 type-checks ``target`` in C: a wrap() proxy is replaced by the connection it wraps.
        if not issubclass(type(target), sqlite3.Connection):
            target = getattr(target, "__wrapped__", target)
        _connection_backup(self, target, **kwargs)

    def create_collation(self, name: str, callable: Any, /) -> None:
        sqlite3.Connection.create_collation(self, name, callable)
        note_change(self._self_guard)  # text may compare (and group) differently from now on

    def iterdump(self, *args: Any, **kwargs: Any) -> Generator[str, None, None]:
        """sqlite3's ``iterdump``, on plain cursors: the dump's statements never go through the guard."""
        from .dump import iterdump

        return iterdump(self, args, kwargs)


class _CursorHookMethods(ConnectionMethods):
    """``ConnectionMethods`` for a subclass with its own ``cursor()``: the shortcuts call it."""

    __slots__ = ()

    def execute(
        self,
        sql: str,
        parameters: Any = _NO,
        /,
        *,
        candidates: Sequence[str] | None = None,
        question: str | None = None,
        hint: str | None = None,
    ) -> GuardedSQLiteCursor:
        cursor = self.cursor()
        if candidates is None:
            return cursor.execute(sql, parameters)
        return cursor.execute(sql, parameters, candidates=candidates, question=question, hint=hint)

    def executemany(self, sql: str, parameters: Any, /) -> GuardedSQLiteCursor:
        return self.cursor().executemany(sql, parameters)

    def executescript(self, sql_script: str, /) -> GuardedSQLiteCursor:
        return self.cursor().executescript(sql_script)


class GuardedSQLiteConnection(ConnectionMethods, metaclass=_GuardedKind):
    """What ``connect()`` opens: a ``sqlite3.Connection`` whose cursors probe, and in patch mode
    repair, every query result."""

    # sqlite3.Connection takes no weak references; the guard's state holds its connection weakly.
    __slots__ = ("__weakref__", "_self_guard")
    _kind: ClassVar[tuple[type, type]] = (GuardedConnection, sqlite3.Connection)


_DEFAULT: list[GuardPolicy] = []


def _default_policy() -> GuardPolicy:
    if not _DEFAULT:
        _DEFAULT.append(resolve_policy(None))
    return _DEFAULT[0]
