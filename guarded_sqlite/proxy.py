"""The drop-in proxies: a guarded connection and its guarded cursors.

These classes do the I/O and nothing else: execute, fetch the result once, time the probe, and hand
the decision to ``probe`` (pure) and, when it calls for a patch, to ``patching``. Everything they do
not override goes straight to the wrapped ``sqlite3`` object through ``wrapt``'s C proxy, so
``isinstance(con, sqlite3.Connection)`` holds.

Fetch once: a statement that returns rows is fetched in full (up to ``row_cap + 1`` rows) during
``execute``; every fetch method then serves from that buffer. Past the cap the rest streams from
SQLite on demand.

Speed notes. Reading a proxy-owned attribute through wrapt costs several times a plain slot read,
so per-connection facts live in one slotted ``ConnectionGuard`` that each cursor reaches with a single
proxy read, and the hot path is a module function working on locals.
"""

from __future__ import annotations

import itertools
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Optional, Union

import wrapt

from .policy import GuardPolicy
from .probe import CARTESIAN_EXPLOSION, EXEC_ERROR, PartialCount, classify, count_unique, probe_large
from .report import GuardReport, ReportState, RuleDecision

if TYPE_CHECKING:
    from .patching import PatchOutcome

_NO_PARAMETERS: Any = object()
"""Sentinel: the caller passed no parameters (sqlite3 treats that differently from ``()``)."""

# P2 can only apply to SQL that contains the word; testing for it keeps every other query unparsed.
_mentions_distinct = re.compile("distinct", re.IGNORECASE).search

# Below this many rows one set() is cheaper than the early-stopping scan's bookkeeping.
_SMALL_RESULT = 2048

_NOT_ROW_RETURNING = "statement returns no rows"
_MANY_NOT_PROBED = "executemany/executescript results are not probed"
_GUARD_OFF = "guard is off"


class ConnectionGuard:
    """Per-connection facts the cursors need on every statement, in plain slots."""

    __slots__ = ("policy", "dialect", "lock", "closed", "proxy")

    def __init__(self, policy: GuardPolicy, dialect: str, proxy: "GuardedConnection") -> None:
        self.policy = policy
        self.dialect = dialect
        # Patch re-execution flips PRAGMA query_only for the whole connection; statements issued
        # through this connection from other threads wait on this lock instead of hitting that window.
        self.lock = threading.RLock()
        self.closed = False
        self.proxy = proxy


class GuardedConnection(wrapt.ObjectProxy):  # type: ignore[misc]
    """A ``sqlite3.Connection`` whose cursors probe, and in patch mode repair, every query result."""

    _self_guard: ConnectionGuard

    def __init__(self, raw: sqlite3.Connection, policy: GuardPolicy, dialect: str = "sqlite") -> None:
        super().__init__(raw)
        self._self_guard = ConnectionGuard(policy, dialect, self)

    @property
    def guard_policy(self) -> GuardPolicy:
        """The policy this connection applies."""
        return self._self_guard.policy

    def cursor(self, *args: Any, **kwargs: Any) -> "GuardedCursor":
        cursor = GuardedCursor(self.__wrapped__.cursor(*args, **kwargs))
        cursor._self_guard = self._self_guard
        return cursor

    def execute(self, sql: str, parameters: Any = _NO_PARAMETERS, /) -> "GuardedCursor":
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Any, /) -> "GuardedCursor":
        return self.cursor().executemany(sql, parameters)

    def executescript(self, script: str, /) -> "GuardedCursor":
        return self.cursor().executescript(script)

    def close(self) -> None:
        self.__wrapped__.close()
        self._self_guard.closed = True

    def backup(self, target: Any, **kwargs: Any) -> None:
        # sqlite3 type-checks ``target`` in C and refuses a proxy.
        self.__wrapped__.backup(target.__wrapped__ if isinstance(target, GuardedConnection) else target, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__wrapped__(*args, **kwargs)

    def __enter__(self) -> "GuardedConnection":
        self.__wrapped__.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> Any:
        return self.__wrapped__.__exit__(*exc_info)

    def _read_only_fetch(self, sql: str, parameters: Any, row_factory: Any, row_cap: int) -> Optional[list[Any]]:
        """Run ``sql`` with ``PRAGMA query_only`` on; its rows, or None past ``row_cap``.

        Runs on this connection (not a second one) so it sees the caller's uncommitted changes.
        Plain ``sqlite3.Cursor``s keep a ``factory=`` subclass's cursor hooks out of the guard's work.
        """
        raw = self.__wrapped__
        pragma = sqlite3.Cursor(raw)
        pragma.row_factory = None
        was_query_only = pragma.execute("PRAGMA query_only").fetchone()[0]
        if not was_query_only:
            pragma.execute("PRAGMA query_only = ON")
        try:
            cursor = sqlite3.Cursor(raw)
            cursor.row_factory = row_factory
            if parameters is _NO_PARAMETERS:
                cursor.execute(sql)
            else:
                cursor.execute(sql, parameters)
            rows = cursor.fetchmany(row_cap + 1)
            cursor.close()
        finally:
            if not was_query_only:
                pragma.execute("PRAGMA query_only = OFF")
            pragma.close()
        return None if len(rows) > row_cap else rows


_NOTHING: Iterator[Any] = iter(())


class GuardedCursor(wrapt.ObjectProxy):  # type: ignore[misc]
    """A ``sqlite3.Cursor`` that fetches each result once, probes it, and serves it from a buffer.

    ``GuardedConnection.cursor()`` sets ``_self_guard``; the other proxy-owned attributes start from
    the class defaults below, which keeps creating a cursor cheap.
    """

    _self_guard: ConnectionGuard
    # Serves fetches: the buffer list (until first touched), an iterator over it, the buffer then the
    # raw tail (past row_cap), or the raw cursor itself.
    _self_rows: Union[list[Any], Iterator[Any]] = _NOTHING
    _self_state: Optional[tuple[Any, ...]] = None  # a ReportState's fields, as a plain tuple
    _self_report: Optional[GuardReport] = None

    @property
    def connection(self) -> GuardedConnection:
        return self._self_guard.proxy

    @property
    def guard_report(self) -> Optional[GuardReport]:
        """What the guard saw and did for the last statement; None before the first execute."""
        report = self._self_report
        if report is None and self._self_state is not None:
            report = self._self_report = GuardReport.from_state(ReportState(*self._self_state))
        return report

    # Read often (pandas and DB-API code read description per query); a property is much cheaper
    # than the proxy's fallback lookup for attributes it does not define.
    @property
    def description(self) -> Any:
        return self.__wrapped__.description

    @property
    def rowcount(self) -> int:
        return self.__wrapped__.rowcount  # type: ignore[no-any-return]

    @property
    def lastrowid(self) -> Optional[int]:
        return self.__wrapped__.lastrowid  # type: ignore[no-any-return]

    def execute(self, sql: str, parameters: Any = _NO_PARAMETERS, /) -> "GuardedCursor":
        guard = self._self_guard
        raw = self.__wrapped__
        self._self_report = None
        if guard.policy.mode == "patch":
            with guard.lock:
                self._self_rows, self._self_state = _execute_and_probe(self, raw, sql, parameters, guard)
        else:
            self._self_rows, self._self_state = _execute_and_probe(self, raw, sql, parameters, guard)
        return self

    def executemany(self, sql: str, parameters: Any, /) -> "GuardedCursor":
        return self._run_unprobed(self.__wrapped__.executemany, sql, parameters)

    def executescript(self, script: str, /) -> "GuardedCursor":
        return self._run_unprobed(self.__wrapped__.executescript, script)

    def fetchone(self) -> Any:
        return next(self._serving(), None)

    def fetchmany(self, size: Optional[int] = None) -> list[Any]:
        raw = self.__wrapped__
        rows = self._serving()
        if size is None:
            size = raw.arraysize
        if rows is raw:
            return raw.fetchmany(size)
        return list(itertools.islice(rows, max(size, 0)))

    def fetchall(self) -> list[Any]:
        rows = self._self_rows
        if type(rows) is list and not self._self_guard.closed:
            # Untouched buffer: hand over the list itself instead of copying it.
            self._self_rows = _NOTHING
            return rows
        return list(self._serving())

    def close(self) -> None:
        self.__wrapped__.close()
        self._self_rows = self.__wrapped__

    def __iter__(self) -> Iterator[Any]:
        # The serving iterator itself, so a for-loop runs at C speed; it shares its position with
        # fetchone()/fetchmany(), so mixing the two works as it does on sqlite3.
        return self._serving()

    def __next__(self) -> Any:
        return next(self._serving())

    def _serving(self) -> Iterator[Any]:
        """The iterator that serves rows, after turning an untouched buffer list into one."""
        rows = self._self_rows
        if self._self_guard.closed:
            # sqlite3 refuses to fetch from a closed connection; let it raise its own error.
            rows = self._self_rows = self.__wrapped__
        elif type(rows) is list:
            rows = self._self_rows = iter(rows)
        return rows  # type: ignore[return-value]

    def _run_unprobed(self, method: Any, *args: Any) -> "GuardedCursor":
        guard = self._self_guard
        mode = guard.policy.mode
        sql = args[0]
        note = _GUARD_OFF if mode == "off" else _MANY_NOT_PROBED
        self._self_report = None
        self._self_rows = self.__wrapped__
        try:
            with guard.lock:
                method(*args)
        except Exception as error:
            trigger, text = (None, None) if mode == "off" else (EXEC_ERROR, _describe(error))
            self._self_state = (mode, sql, sql, trigger, "none", None, None, None, note, text, (), None, None)
            raise
        self._self_state = (mode, sql, sql, None, "none", None, None, None, note, None, (), None, None)
        return self


def _execute_and_probe(
    cursor: GuardedCursor, raw: sqlite3.Cursor, sql: str, parameters: Any, guard: ConnectionGuard
) -> tuple[Union[list[Any], Iterator[Any]], tuple[Any, ...]]:
    """Execute, fetch once, probe, maybe patch; returns the serving iterator and the report state.

    On an execution error the state is stored on ``cursor`` before the error propagates unchanged.
    """
    policy = guard.policy
    mode = policy.mode
    if mode == "off":
        raw.execute(sql) if parameters is _NO_PARAMETERS else raw.execute(sql, parameters)
        return raw, (mode, sql, sql, None, "none", None, None, None, _GUARD_OFF, None, (), None, None)
    row_cap = policy.row_cap
    try:
        if parameters is _NO_PARAMETERS:
            raw.execute(sql)
        else:
            raw.execute(sql, parameters)
        if raw.description is None:
            return raw, (mode, sql, sql, None, "none", None, None, None, _NOT_ROW_RETURNING, None, (), None, None)
        rows = raw.fetchmany(row_cap + 1)
    except Exception as error:
        cursor._self_rows = raw
        cursor._self_state = (mode, sql, sql, EXEC_ERROR, "none", None, None, None, None, _describe(error), (), None, None)
        raise
    count = len(rows)
    if count > row_cap:
        note = f"more than row_cap={row_cap} rows: not probed, rows stream through unchanged"
        return itertools.chain(rows, raw), (mode, sql, sql, None, "none", None, None, None, note, None, (), None, None)
    patch = mode == "patch"
    removal_candidate = patch and count >= policy._p2_min_rows and _mentions_distinct(sql) is not None
    started = time.perf_counter_ns()
    unique: Union[int, PartialCount]
    try:
        if count < _SMALL_RESULT or removal_candidate:
            unique = len(set(rows))
            trigger = classify(count, unique, policy.tau_inject)
        else:
            trigger, unique = probe_large(rows, policy.tau_inject)
    except TypeError:  # unhashable rows from a row_factory or text_factory
        unique = count_unique(rows)
        trigger = classify(count, unique, policy.tau_inject)
    detect_ns = time.perf_counter_ns() - started
    if patch and (trigger == CARTESIAN_EXPLOSION or (removal_candidate and trigger is None and unique == count)):
        outcome = _patch(guard, raw.row_factory, sql, parameters, rows, unique, trigger)  # type: ignore[arg-type]
        state = (
            mode, sql, outcome.final_sql, trigger, outcome.action, count, unique, len(outcome.rows),
            None, None, outcome.decisions, detect_ns, outcome.elapsed_ns,
        )
        return outcome.rows, state
    # A partial count still reads the buffer later, so the caller gets a copy rather than the list.
    serving = iter(rows) if type(unique) is PartialCount else rows
    return serving, (mode, sql, sql, trigger, "none", count, unique, count, None, None, (), detect_ns, None)


def _patch(
    guard: ConnectionGuard, row_factory: Any, sql: str, parameters: Any, rows: list[Any], unique: int, trigger: Optional[str]
) -> PatchOutcome:
    # Imported here so that sqlglot is loaded by the first query that needs a patch, not by
    # ``import guarded_sqlite``.
    from .patching import PatchOutcome, apply_patches

    policy = guard.policy

    def rerun(new_sql: str) -> Optional[list[Any]]:
        return guard.proxy._read_only_fetch(new_sql, parameters, row_factory, policy.row_cap)

    try:
        return apply_patches(sql, rows, unique, trigger, policy, rerun, guard.dialect)
    except Exception as error:  # a bug in the analysis must never cost the caller their result
        rule = "P1" if trigger == CARTESIAN_EXPLOSION else "P2"
        decision = RuleDecision(rule, False, f"internal error while patching: {_describe(error)}")
        return PatchOutcome(sql, rows, "none", (decision,), 0)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"
