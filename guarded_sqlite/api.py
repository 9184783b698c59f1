"""Ways in: ``connect`` like sqlite3, ``wrap``/``unwrap`` an existing connection, and ``install`` to
swap ``sqlite3.connect`` process-wide."""

from __future__ import annotations

import functools
import sqlite3
import sqlite3.dbapi2
from typing import Any, Callable, TypeVar

from .policy import GuardSpec, resolve_policy
from .proxy import GuardedConnection, GuardedCursor

_sqlite3_connect: Callable[..., sqlite3.Connection] = sqlite3.connect
"""The real ``sqlite3.connect``, kept before ``install()`` can replace it."""

T = TypeVar("T")


def connect(database: Any, *args: Any, guard: GuardSpec = None, **kwargs: Any) -> GuardedConnection:
    """Open a SQLite database like ``sqlite3.connect`` and return it guarded.

    Takes every argument ``sqlite3.connect`` takes (``timeout``, ``detect_types``, ``isolation_level``,
    ``check_same_thread``, ``factory``, ``cached_statements``, ``uri``, ...), plus ``guard``: ``"patch"``
    (default), ``"observe"``, ``"off"`` or a ``GuardPolicy``.
    """
    policy = resolve_policy(guard)
    # check_same_thread is sqlite3.connect's fourth parameter after the database.
    check_same_thread = kwargs.get("check_same_thread", args[3] if len(args) > 3 else True)
    raw = _sqlite3_connect(database, *args, **kwargs)
    return GuardedConnection(raw, policy, single_thread=bool(check_same_thread))


def wrap(connection: sqlite3.Connection, guard: GuardSpec = None) -> GuardedConnection:
    """Guard an open ``sqlite3.Connection``. Wrapping a guarded connection returns it unchanged, unless
    ``guard`` asks for a different policy, which gives a new proxy over the same connection."""
    if isinstance(connection, GuardedConnection):
        if guard is None or resolve_policy(guard) == connection.guard_policy:
            return connection
        old = connection._self_guard
        return GuardedConnection(connection.__wrapped__, resolve_policy(guard), old.dialect, single_thread=old.lock is None)
    if not isinstance(connection, sqlite3.Connection):
        raise TypeError(f"wrap() expects a sqlite3.Connection, not {type(connection).__name__}")
    return GuardedConnection(connection, resolve_policy(guard))


def unwrap(obj: T) -> T:
    """The raw sqlite3 object behind a guarded connection or cursor; anything else as it is."""
    if isinstance(obj, (GuardedConnection, GuardedCursor)):
        return obj.__wrapped__  # type: ignore[no-any-return]
    return obj


def install(guard: GuardSpec = None) -> None:
    """Make ``sqlite3.connect`` return guarded connections, process-wide, until ``uninstall()``.

    Code that did ``from sqlite3 import connect`` before this call keeps the original function.
    Calling it again replaces the policy.
    """
    policy = resolve_policy(guard)

    @functools.wraps(_sqlite3_connect)
    def guarded_connect(database: Any, *args: Any, guard: GuardSpec = policy, **kwargs: Any) -> GuardedConnection:
        return connect(database, *args, guard=guard, **kwargs)

    guarded_connect.__guarded_sqlite__ = True  # type: ignore[attr-defined]
    sqlite3.connect = sqlite3.dbapi2.connect = guarded_connect


def uninstall() -> None:
    """Restore the real ``sqlite3.connect``. Safe to call when not installed."""
    sqlite3.connect = sqlite3.dbapi2.connect = _sqlite3_connect

