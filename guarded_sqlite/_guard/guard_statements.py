"""The statements the guard runs for itself on the caller's connection (a re-execution, a check, a
rescue candidate): through the engine, read-only, within what the policy's ``rerun_timeout`` and the
caller's ``deadlines.call_deadline`` leave; and what SQLite's ``query_only`` needs before the caller's
next statement (``settle_query_only``: switched back off, or on for a function a fenced check calls).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from .._core.deadlines import time_left
from .._engines import SQLITE, GuardStatement, RerunRefused, WritableNotRestored
from .connection_state import (
    QUERY_ONLY_FENCE,
    QUERY_ONLY_FENCED,
    QUERY_ONLY_KEPT,
    QUERY_ONLY_RESTORE,
    ConnectionState,
)

__all__ = ["CALL_TIME_PASSED", "call_time_passed", "read_only_fetch", "reads_only", "settle_query_only"]

CALL_TIME_PASSED = "the call's time limit has passed"


def call_time_passed() -> bool:
    """True once the caller's ``deadlines.call_deadline`` has passed: the guard starts no more work."""
    left = time_left(None)
    return left is not None and left <= 0


def read_only_fetch(
    guard: ConnectionState,
    sql: str,
    parameters: Any,
    row_factory: Any,
    max_rows: int,
    description: list[Any] | None = None,
    writes_possible: bool = True,
    time_limit: float | None = None,
    fenced: bool = False,
) -> list[Any] | None:
    """One guard statement through the engine, under ``time_limit`` (default: ``rerun_timeout``) and
    what the caller's ``deadlines.call_deadline`` has left; remembers when SQLite's query_only is still on.

    ``fenced``: a statement that can write only through functions the application registered through
    this connection's own methods runs without query_only; SQL such a function runs through the
    connection switches it on first (``QUERY_ONLY_FENCE``), and this switches it off again after."""
    limit = time_left(guard.policy.rerun_timeout if time_limit is None else time_limit)
    if limit is not None and limit <= 0:
        raise RerunRefused(CALL_TIME_PASSED)
    if fenced and guard.query_only_due == 0:
        guard.query_only_due = QUERY_ONLY_FENCE
        try:
            return guard.engine.read_only_fetch(
                guard.raw, GuardStatement(sql, parameters, row_factory, max_rows, limit, description, False)
            )
        finally:
            fence_tripped = guard.query_only_due == QUERY_ONLY_FENCED
            guard.query_only_due = 0
            if fence_tripped and not SQLITE.restore_writable(guard.raw):
                guard.query_only_due = QUERY_ONLY_RESTORE
    try:
        return guard.engine.read_only_fetch(
            guard.raw, GuardStatement(sql, parameters, row_factory, max_rows, limit, description, writes_possible)
        )
    except WritableNotRestored:
        guard.query_only_due = QUERY_ONLY_RESTORE
        raise


def settle_query_only(guard: ConnectionState) -> None:
    """Before a statement through the connection's own methods, what ``guard.query_only_due`` says:
    query_only switched back off after a guard statement could not, or switched on for a function a
    fenced guard check calls (raising ``sqlite3.OperationalError`` if it cannot be)."""
    due = guard.query_only_due
    if due == QUERY_ONLY_RESTORE:
        if SQLITE.restore_writable(guard.raw):
            guard.query_only_due = 0
    elif due == QUERY_ONLY_FENCE:
        try:
            switched = SQLITE.switch_query_only_on(guard.raw)
        except sqlite3.Error as error:
            raise sqlite3.OperationalError(
                f"guarded_sqlite: a function its check called ran SQL, and query_only could not be set: {error}"
            ) from error
        # Already on (the caller's own setting): nothing to switch back, nothing more to do.
        guard.query_only_due = QUERY_ONLY_FENCED if switched else QUERY_ONLY_KEPT


def reads_only(sql: str, dialect: str) -> bool:
    """Whether the guard may run ``sql`` again natively (a DuckDB frame of served rows it rewrote):
    it reads as one query and nothing else. Only asked of SQL the guard rewrote, so the analysis it
    imports is loaded already."""
    from .._analysis.rewrite import is_read_only_query

    return is_read_only_query(sql, dialect)
