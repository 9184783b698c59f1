"""Ways in: ``connect`` like sqlite3, ``wrap``/``unwrap`` an existing connection, and ``install`` to
swap ``sqlite3.connect`` process-wide."""

from __future__ import annotations

import functools
import sqlite3
import sqlite3.dbapi2
from collections.abc import Callable
from typing import Any, TypeVar

from .engines import DUCKDB, engine_for
from .policy import GuardSpec, resolve_policy
from .proxy import GuardedConnection, GuardedCursor, GuardedDuckDBConnection

_sqlite3_connect: Callable[..., sqlite3.Connection] = sqlite3.connect
"""The real ``sqlite3.connect``, kept before ``install()`` can replace it."""

T = TypeVar("T")


def connect(database: Any, *args: Any, guard: GuardSpec = None, **kwargs: Any) -> GuardedConnection:
    """Open a SQLite database like ``sqlite3.connect`` and return it guarded.

    Takes every argument ``sqlite3.connect`` takes (``timeout``, ``detect_types``, ``isolation_level``,
    ``check_same_thread``, ``factory``, ``cached_statements``, ``uri``, ...), plus ``guard``: a preset,
    ``"patch"`` (default), ``"text_to_sql"``, ``"paper"``, ``"observe"`` or ``"off"`` (see
    ``guarded_sqlite.policy``), or a ``GuardPolicy``.
    """
    policy = resolve_policy(guard)
    # check_same_thread is sqlite3.connect's fourth parameter after the database.
    check_same_thread = kwargs.get("check_same_thread", args[3] if len(args) > 3 else True)
    raw = _sqlite3_connect(database, *args, **kwargs)
    return GuardedConnection(raw, policy, single_thread=bool(check_same_thread))


def wrap(connection: Any, guard: GuardSpec = None, dialect: str | None = None) -> Any:
    """Guard an open connection: a ``sqlite3.Connection``, a ``duckdb.DuckDBPyConnection`` or a
    ``psycopg.Connection`` (PostgreSQL). ``dialect`` (``"sqlite"``, ``"duckdb"``, ``"postgres"``)
    defaults to the driver's and must agree with it. ``guard`` takes what ``connect`` takes.

    Wrapping a guarded connection returns it unchanged, unless ``guard`` asks for a different policy,
    which gives a new proxy over the same connection.
    """
    if isinstance(connection, (GuardedConnection, GuardedDuckDBConnection)):
        old = connection._self_guard
        if dialect is not None:
            engine_for(connection.__wrapped__, dialect)  # validates the dialect
        if guard is None or resolve_policy(guard) == old.policy:
            return connection
        connection = connection.__wrapped__
        single_thread = old.lock is None
    else:
        single_thread = False
    engine = engine_for(connection, dialect)
    policy = resolve_policy(guard)
    if engine is DUCKDB:
        return GuardedDuckDBConnection(connection, policy)
    return GuardedConnection(connection, policy, engine, single_thread=single_thread)


def unwrap(obj: T) -> T:
    """The raw sqlite3 object behind a guarded connection or cursor; anything else as it is."""
    if isinstance(obj, (GuardedConnection, GuardedCursor)):
        raw: T = obj.__wrapped__
        return raw
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
    def guarded_connect(database: Any, *args: Any, guard: GuardSpec = policy, **kwargs: Any) -> GuardedConnection:
        return connect(database, *args, guard=guard, **kwargs)

    guarded_connect.__guarded_sqlite__ = True  # type: ignore[attr-defined]
    sqlite3.connect = sqlite3.dbapi2.connect = guarded_connect  # type: ignore[assignment]


def uninstall() -> None:
    """Restore the real ``sqlite3.connect``. Safe to call when not installed."""
    sqlite3.connect = sqlite3.dbapi2.connect = _sqlite3_connect  # type: ignore[assignment]
