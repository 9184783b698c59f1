"""Ways in: ``connect`` like sqlite3, ``wrap``/``unwrap`` an existing connection, and ``install`` to
swap ``sqlite3.connect`` process-wide.

``connect`` (and so ``install``) opens ``sqlite_fast``'s ``sqlite3.Connection`` subclass; ``wrap``
guards a connection the library did not open with a ``wrapt`` proxy (``proxy``, imported on first use).
"""

from __future__ import annotations

import functools
import sqlite3
import sqlite3.dbapi2
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from ._engines import DUCKDB, SQLITE, engine_for
from ._guard.connection_state import ConnectionState
from ._guard.decide import GuardedConnection, GuardedCursor
from ._io.sqlite_fast import (
    ConnectionMethods,
    CursorMethods,
    GuardedSQLiteConnection,
    GuardedSQLiteCursor,
    connection_class,
)
from .policy import GuardPolicy, GuardSpec, resolve_policy

_sqlite3_connect: Callable[..., sqlite3.Connection] = sqlite3.connect
"""The real ``sqlite3.connect``, kept before ``install()`` can replace it."""

T = TypeVar("T")
_ConnectionT = TypeVar("_ConnectionT", bound=sqlite3.Connection)

if TYPE_CHECKING:
    from _typeshed import StrOrBytesPath

    _IsolationLevel = Literal["DEFERRED", "EXCLUSIVE", "IMMEDIATE"] | None


_FACTORY_POSITION = 4  # factory is sqlite3.connect's sixth parameter: the fifth after the database


def open_connection(
    connect: Any, database: Any, args: tuple[Any, ...], kwargs: dict[str, Any], policy: GuardPolicy
) -> Any:
    """``connect(database, *args, **kwargs)`` (sqlite3's) with the guarded class as ``factory``."""
    args_list = list(args)
    if len(args_list) > _FACTORY_POSITION:
        factory = args_list[_FACTORY_POSITION]
        place = "args"
    else:
        factory = kwargs.get("factory", sqlite3.Connection)
        place = "kwargs"
    proxied = not (isinstance(factory, type) and issubclass(factory, sqlite3.Connection))
    if not proxied:
        guarded = connection_class(factory)
        if place == "args":
            args_list[_FACTORY_POSITION] = guarded
        else:
            kwargs = {**kwargs, "factory": guarded}
    # check_same_thread is the fourth parameter after the database.
    single_thread = bool(kwargs.get("check_same_thread", args_list[3] if len(args_list) > 3 else True))
    con = connect(database, *args_list, **kwargs)
    if proxied or not isinstance(con, ConnectionMethods):
        # A callable factory (not a class) made the connection: guard it through a proxy.
        from ._io.proxy import ConnectionProxy

        return ConnectionProxy(con, policy, single_thread=single_thread)
    con._self_guard = ConnectionState(policy, SQLITE, con, con, single_thread)
    return con


if TYPE_CHECKING and sys.version_info >= (3, 12):

    @overload
    def connect(
        database: StrOrBytesPath,
        timeout: float = 5.0,
        detect_types: int = 0,
        isolation_level: _IsolationLevel = "DEFERRED",
        check_same_thread: bool = True,
        *,
        factory: type[_ConnectionT],
        cached_statements: int = 128,
        uri: bool = False,
        autocommit: bool = ...,
        guard: GuardSpec = None,
    ) -> _ConnectionT: ...

    @overload
    def connect(
        database: StrOrBytesPath,
        timeout: float = 5.0,
        detect_types: int = 0,
        isolation_level: _IsolationLevel = "DEFERRED",
        check_same_thread: bool = True,
        factory: None = None,
        cached_statements: int = 128,
        uri: bool = False,
        *,
        autocommit: bool = ...,
        guard: GuardSpec = None,
    ) -> GuardedSQLiteConnection: ...

elif TYPE_CHECKING:

    @overload
    def connect(
        database: StrOrBytesPath,
        timeout: float = 5.0,
        detect_types: int = 0,
        isolation_level: _IsolationLevel = "DEFERRED",
        check_same_thread: bool = True,
        *,
        factory: type[_ConnectionT],
        cached_statements: int = 128,
        uri: bool = False,
        guard: GuardSpec = None,
    ) -> _ConnectionT: ...

    @overload
    def connect(
        database: StrOrBytesPath,
        timeout: float = 5.0,
        detect_types: int = 0,
        isolation_level: _IsolationLevel = "DEFERRED",
        check_same_thread: bool = True,
        factory: None = None,
        cached_statements: int = 128,
        uri: bool = False,
        *,
        guard: GuardSpec = None,
    ) -> GuardedSQLiteConnection: ...


def connect(database: Any, *args: Any, guard: GuardSpec = None, **kwargs: Any) -> Any:
    """Open a SQLite database like ``sqlite3.connect`` and return it guarded.

    Takes every argument ``sqlite3.connect`` takes (``timeout``, ``detect_types``, ``isolation_level``,
    ``check_same_thread``, ``factory``, ``cached_statements``, ``uri``, ...), plus ``guard``: a preset,
    ``"patch"`` (default), ``"text_to_sql"``, ``"paper"``, ``"observe"`` or ``"off"`` (see
    ``guarded_sqlite.policy``), or a ``GuardPolicy``.

    The connection is a real ``sqlite3.Connection`` (a ``GuardedSQLiteConnection``; with ``factory=``,
    a subclass of the factory, typed as it) whose cursors are ``sqlite3.Cursor`` subclasses
    (``GuardedSQLiteCursor``).
    """
    return open_connection(_sqlite3_connect, database, args, kwargs, resolve_policy(guard))


@overload
def wrap(
    connection: sqlite3.Connection, guard: GuardSpec = None, dialect: Literal["sqlite"] | None = None
) -> GuardedSQLiteConnection: ...


@overload
def wrap(connection: T, guard: GuardSpec = None, dialect: str | None = None) -> T: ...


def wrap(connection: Any, guard: GuardSpec = None, dialect: str | None = None) -> Any:
    """Guard an open connection: a ``sqlite3.Connection``, a ``duckdb.DuckDBPyConnection``, a
    ``psycopg.Connection`` (PostgreSQL), a ``pymysql.connections.Connection`` (MySQL, MariaDB) or a
    ``chdb.dbapi`` connection (ClickHouse). ``dialect`` (``"sqlite"``, ``"duckdb"``, ``"postgres"``,
    ``"mysql"``, ``"clickhouse"``) defaults to the driver's and
    must agree with it. ``guard`` takes what ``connect`` takes.

    Wrapping a guarded connection returns it unchanged, unless ``guard`` asks for a different policy,
    which gives a new proxy over the same connection. A proxy over a ``sqlite3.Connection`` is typed as
    ``GuardedSQLiteConnection`` (and ``isinstance`` agrees: it has that class's attributes, its cursors
    are ``GuardedSQLiteCursor`` instances too); one over another driver's connection keeps that
    driver's type.
    """
    kind = type(connection)
    single_thread = False
    if issubclass(kind, ConnectionMethods):  # connect()'s own connection
        if dialect is not None:
            engine_for(connection, dialect)  # validates the dialect
        old = connection._self_guard
        if guard is None or resolve_policy(guard) == old.policy:
            return connection
        single_thread = old.lock is None
    elif issubclass(kind, GuardedConnection):  # a proxy
        old = connection._self_guard
        if dialect is not None:
            engine_for(connection.__wrapped__, dialect)  # validates the dialect
        if guard is None or resolve_policy(guard) == old.policy:
            return connection
        connection = connection.__wrapped__
        single_thread = old.lock is None
    engine = engine_for(connection, dialect)
    policy = resolve_policy(guard)
    if engine is DUCKDB:
        from ._io.proxy_duckdb import GuardedDuckDBConnection

        return GuardedDuckDBConnection(connection, policy)
    if engine.name == "postgres":
        from ._io.proxy_psycopg import PsycopgConnectionProxy

        return PsycopgConnectionProxy(connection, policy, engine, single_thread=single_thread)
    if engine.name == "mysql":
        from ._io.proxy_pymysql import PyMySQLConnectionProxy

        return PyMySQLConnectionProxy(connection, policy, engine, single_thread=single_thread)
    if engine.name == "clickhouse":
        from ._io.proxy_clickhouse import ChDBConnectionProxy

        return ChDBConnectionProxy(connection, policy, engine, single_thread=single_thread)
    from ._io.proxy import ConnectionProxy

    return ConnectionProxy(connection, policy, engine, single_thread=single_thread)


@overload
def unwrap(obj: GuardedSQLiteConnection) -> sqlite3.Connection: ...


@overload
def unwrap(obj: GuardedSQLiteCursor) -> sqlite3.Cursor: ...


@overload
def unwrap(obj: T) -> T: ...


def unwrap(obj: Any) -> Any:
    """The driver's object behind a ``wrap()`` proxy (connection or cursor); anything else as it is.

    ``connect()``'s connections and their cursors already are ``sqlite3`` objects: they come back
    unchanged (still guarded)."""
    kind = type(obj)
    if issubclass(kind, (GuardedConnection, GuardedCursor)) and not issubclass(
        kind, (ConnectionMethods, CursorMethods)
    ):
        return obj.__wrapped__
    return obj


def install(guard: GuardSpec = None) -> None:
    """Make ``sqlite3.connect`` return guarded connections, process-wide, until ``uninstall()``.

    ``guard`` takes what ``connect`` takes; the default ``"patch"`` preset is the one meant for
    applications and ORMs. Code that did ``from sqlite3 import connect`` before this call keeps the
    original function.
    Calling it again replaces the policy.
    """
    policy = resolve_policy(guard)

    @functools.wraps(_sqlite3_connect)
    def guarded_connect(database: Any, *args: Any, guard: GuardSpec = policy, **kwargs: Any) -> Any:
        return connect(database, *args, guard=guard, **kwargs)

    guarded_connect.__guarded_sqlite__ = True  # type: ignore[attr-defined]
    sqlite3.connect = sqlite3.dbapi2.connect = guarded_connect


def uninstall() -> None:
    """Restore the real ``sqlite3.connect``. Safe to call when not installed."""
    sqlite3.connect = sqlite3.dbapi2.connect = _sqlite3_connect  # type: ignore[assignment]
