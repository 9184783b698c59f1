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

import contextlib
import functools
import itertools
import operator
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Optional, Union

import wrapt

from .policy import GuardPolicy
from .probe import CARTESIAN_EXPLOSION, EXEC_ERROR, PartialCount, classify, count_unique, mentions_distinct, probe_large
from .report import GuardReport, ReportState, RuleDecision

if TYPE_CHECKING:
    from .patching import PatchOutcome

_NO_PARAMETERS: Any = object()
"""Sentinel: the caller passed no parameters (sqlite3 treats that differently from ``()``)."""

# Below this many rows one set() is cheaper than the early-stopping scan's bookkeeping.
_SMALL_RESULT = 2048

_NOT_ROW_RETURNING = "statement returns no rows"
_MANY_NOT_PROBED = "executemany/executescript results are not probed"
_GUARD_OFF = "guard is off"


class ConnectionGuard:
    """Per-connection facts the cursors need on every statement, in plain slots."""

    __slots__ = ("policy", "dialect", "lock", "proxy", "rescues", "rescue_spend", "progress_handler")

    def __init__(self, policy: GuardPolicy, dialect: str, proxy: "GuardedConnection", single_thread: bool) -> None:
        self.policy = policy
        self.dialect = dialect
        # Patch re-execution flips PRAGMA query_only for the whole connection; statements issued
        # through this connection from other threads wait on this lock instead of hitting that window.
        # A connection sqlite3 itself keeps to one thread (check_same_thread=True) needs none.
        self.lock: Optional[threading.RLock] = None if single_thread else threading.RLock()
        self.proxy = proxy
        self.rescues = 0  # rescues run on this connection, for GuardPolicy.max_rescues
        self.rescue_spend = 0.0  # their known cost in USD, for GuardPolicy.max_rescue_cost
        # The caller's progress handler (set through this proxy), restored after a candidate's time limit.
        self.progress_handler: tuple[Any, int] = (None, 0)


class GuardedConnection(wrapt.ObjectProxy):  # type: ignore[misc]
    """A ``sqlite3.Connection`` whose cursors probe, and in patch mode repair, every query result."""

    _self_guard: ConnectionGuard

    def __init__(self, raw: sqlite3.Connection, policy: GuardPolicy, dialect: str = "sqlite", single_thread: bool = False) -> None:
        """``single_thread``: the caller knows sqlite3 refuses use from other threads (the connection
        was opened with ``check_same_thread=True``), so statements need no lock."""
        super().__init__(raw)
        self._self_guard = ConnectionGuard(policy, dialect, self, single_thread)

    @property
    def guard_policy(self) -> GuardPolicy:
        """The policy this connection applies."""
        return self._self_guard.policy

    def cursor(self, *args: Any, **kwargs: Any) -> "GuardedCursor":
        cursor = GuardedCursor(self.__wrapped__.cursor(*args, **kwargs))
        cursor._self_guard = self._self_guard
        return cursor

    def execute(self, sql: str, parameters: Any = _NO_PARAMETERS, /, **rescue_inputs: Any) -> "GuardedCursor":
        return self.cursor().execute(sql, parameters, **rescue_inputs)

    def executemany(self, sql: str, parameters: Any, /) -> "GuardedCursor":
        return self.cursor().executemany(sql, parameters)

    def executescript(self, script: str, /) -> "GuardedCursor":
        return self.cursor().executescript(script)

    def backup(self, target: Any, **kwargs: Any) -> None:
        # sqlite3 type-checks ``target`` in C and refuses a proxy.
        self.__wrapped__.backup(target.__wrapped__ if isinstance(target, GuardedConnection) else target, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__wrapped__(*args, **kwargs)

    def set_progress_handler(self, progress_handler: Any, n: int) -> None:
        # Remembered so that a candidate's time limit can put it back afterwards.
        self.__wrapped__.set_progress_handler(progress_handler, n)
        self._self_guard.progress_handler = (progress_handler, n)

    def __enter__(self) -> "GuardedConnection":
        self.__wrapped__.__enter__()
        return self

    def __getattr__(self, name: str) -> Any:
        return _subclass_aware_getattr(self, sqlite3.Connection, name)

    def __exit__(self, *exc_info: Any) -> Any:
        return self.__wrapped__.__exit__(*exc_info)

    def _read_only_fetch(
        self, sql: str, parameters: Any, row_factory: Any, row_cap: int, time_limit: Optional[float] = None
    ) -> Optional[list[Any]]:
        """Run ``sql`` with ``PRAGMA query_only`` on; its rows, or None past ``row_cap``.

        Runs on this connection (not a second one) so it sees the caller's uncommitted changes.
        Plain ``sqlite3.Cursor``s keep a ``factory=`` subclass's cursor hooks out of the guard's work.
        With ``time_limit`` (seconds) a progress handler makes SQLite interrupt the statement.
        """
        raw = self.__wrapped__
        if time_limit is not None:
            with _time_limited(raw, time_limit, self._self_guard.progress_handler):
                return self._read_only_fetch(sql, parameters, row_factory, row_cap)
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


class _time_limited:
    """Interrupt statements on ``raw`` after ``seconds``, still honouring the caller's own handler."""

    def __init__(self, raw: sqlite3.Connection, seconds: float, previous: tuple[Any, int]) -> None:
        self._raw, self._seconds, self._previous = raw, seconds, previous

    def __enter__(self) -> None:
        deadline = time.monotonic() + self._seconds
        user_handler = self._previous[0]

        def handler() -> int:
            if time.monotonic() > deadline:
                return 1
            return user_handler() if user_handler is not None else 0

        self._raw.set_progress_handler(handler, 1000)

    def __exit__(self, *exc_info: object) -> None:
        self._raw.set_progress_handler(*self._previous)


_NOTHING: Iterator[Any] = iter(())
_UNIQUE_ROWS = ReportState._fields.index("unique_rows")
_LIST_ITERATOR = type(iter([]))


class GuardedCursor(wrapt.ObjectProxy):  # type: ignore[misc]
    """A ``sqlite3.Cursor`` that fetches each result once, probes it, and serves it from a buffer.

    ``GuardedConnection.cursor()`` sets ``_self_guard``; the other proxy-owned attributes start from
    the class defaults below, which keeps creating a cursor cheap.
    """

    _self_guard: ConnectionGuard
    # Serves fetches: the buffer list (until first touched), an iterator over it, the buffer then the
    # raw tail (past row_cap), or the raw cursor itself.
    _self_rows: Union[list[Any], Iterator[Any]] = _NOTHING
    # The list behind ``_self_rows`` once an iterator over it was handed out, so that re-executing the
    # cursor can redirect that iterator to the new rows, as re-executing a sqlite3 cursor does.
    _self_buffer: Optional[list[Any]] = None
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
            report = self._self_report = GuardReport.from_state(self._self_state)
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

    def execute(
        self,
        sql: str,
        parameters: Any = _NO_PARAMETERS,
        /,
        *,
        candidates: Optional[Sequence[str]] = None,
        question: Optional[str] = None,
        hint: Optional[str] = None,
    ) -> "GuardedCursor":
        """``sqlite3.Cursor.execute``; with ``candidates`` (alternative SQLs for the same question) a
        flagged statement may be rescued by the policy's rescuer."""
        guard = self._self_guard
        raw = self.__wrapped__
        self._self_report = None
        rescue_inputs = None if candidates is None else RescueInputs(candidates, question, hint)
        try:
            lock = guard.lock
            if lock is not None and guard.policy.mode == "patch":
                with lock:
                    rows, self._self_state = _execute_and_probe(self, raw, sql, parameters, guard, rescue_inputs)
            else:
                rows, self._self_state = _execute_and_probe(self, raw, sql, parameters, guard, rescue_inputs)
        except BaseException:
            if self._self_buffer is not None:
                self._redirect_outstanding(raw)
            raise
        self._self_rows = rows if self._self_buffer is None else self._redirect_outstanding(rows)
        return self

    def executemany(self, sql: str, parameters: Any, /) -> "GuardedCursor":
        return self._run_unprobed(self.__wrapped__.executemany, sql, parameters)

    def executescript(self, script: str, /) -> "GuardedCursor":
        return self._run_unprobed(self.__wrapped__.executescript, script)

    def fetchone(self) -> Any:
        return next(self._serving(), None)

    def fetchmany(self, size: Any = _NO_PARAMETERS) -> list[Any]:
        raw = self.__wrapped__
        size = raw.arraysize if size is _NO_PARAMETERS else operator.index(size)
        rows = self._serving()
        if rows is raw:
            return raw.fetchmany(size)
        # sqlite3 returns every remaining row for a size of zero or less.
        return list(itertools.islice(rows, size)) if size > 0 else list(rows)

    def fetchall(self) -> list[Any]:
        rows = self._self_rows
        if type(rows) is list:
            self.__wrapped__.fetchone()  # raises as sqlite3 would: closed cursor or connection, wrong thread
            state = self._self_state
            # Untouched buffer: hand over the list itself instead of copying it, unless a partial
            # distinct count still has to read it for the report.
            if state is None or type(state[_UNIQUE_ROWS]) is not PartialCount:
                self._self_rows = _NOTHING
                return rows
        return list(self._serving())

    def close(self) -> None:
        self.__wrapped__.close()
        self._self_rows = self.__wrapped__
        self._self_buffer = None

    def __iter__(self) -> Iterator[Any]:
        # The serving iterator itself rather than the cursor, so a for-loop runs at C speed; it shares
        # its position with fetchone()/fetchmany(), and execute() redirects it to the new rows.
        return self._serving()

    def __next__(self) -> Any:
        return next(self._serving())

    def __getattr__(self, name: str) -> Any:
        return _subclass_aware_getattr(self, sqlite3.Cursor, name)

    def _serving(self) -> Iterator[Any]:
        """The iterator that serves rows, after checking the cursor may still fetch."""
        rows = self._self_rows
        kind = type(rows)
        if kind is list:
            self.__wrapped__.fetchone()  # the raw cursor is exhausted: this only runs sqlite3's checks
            self._self_buffer = rows  # type: ignore[assignment]
            rows = self._self_rows = iter(rows)  # type: ignore[arg-type]
        elif kind is _LIST_ITERATOR:
            self.__wrapped__.fetchone()
        return rows  # type: ignore[return-value]

    def _redirect_outstanding(self, new_rows: Union[list[Any], Iterator[Any]]) -> Union[list[Any], Iterator[Any]]:
        """Point the iterator handed out for the previous statement at ``new_rows``.

        sqlite3's iterator is the cursor, so a loop over it continues with whatever the cursor executes
        next. Ours is a list iterator; splicing the new rows in at its position gives the same effect.
        A new result that streams (past ``row_cap``) or has no rows just ends the old iterator.
        """
        buffer, outstanding = self._self_buffer, self._self_rows
        self._self_buffer = None
        assert buffer is not None
        position = len(buffer) - operator.length_hint(outstanding)
        del buffer[position:]
        if type(new_rows) is not list:
            return new_rows
        buffer.extend(new_rows)
        self._self_buffer = buffer
        return outstanding

    def _run_unprobed(self, method: Any, *args: Any) -> "GuardedCursor":
        guard = self._self_guard
        mode = guard.policy.mode
        sql = args[0]
        note = _GUARD_OFF if mode == "off" else _MANY_NOT_PROBED
        self._self_report = None
        self._self_rows = self.__wrapped__
        try:
            with guard.lock or contextlib.nullcontext():
                method(*args)
        except Exception as error:
            trigger, text = (None, None) if mode == "off" else (EXEC_ERROR, _describe(error))
            self._self_state = (mode, sql, sql, trigger, "none", None, None, None, note, text, (), None, None)
            raise
        self._self_state = (mode, sql, sql, None, "none", None, None, None, note, None, (), None, None)
        return self


class RescueInputs:
    """What the caller passed for a rescue: candidate SQLs and the question they answer."""

    __slots__ = ("candidates", "question", "hint")

    def __init__(self, candidates: Sequence[str], question: Optional[str], hint: Optional[str]) -> None:
        if isinstance(candidates, str) or not all(isinstance(c, str) for c in candidates):
            raise TypeError("candidates must be a sequence of SQL strings")
        self.candidates = tuple(candidates)
        self.question = question
        self.hint = hint


def _execute_and_probe(
    cursor: GuardedCursor,
    raw: sqlite3.Cursor,
    sql: str,
    parameters: Any,
    guard: ConnectionGuard,
    rescue_inputs: Optional[RescueInputs] = None,
) -> tuple[Union[list[Any], Iterator[Any]], tuple[Any, ...]]:
    """Execute, fetch once, probe, maybe repair; returns the serving rows and the report state.

    On an execution error the state is stored on ``cursor`` before the error propagates unchanged
    (unless a rescue replaced the failed statement with a candidate).
    """
    policy = guard.policy
    mode = policy.mode
    if mode == "off":
        state = (mode, sql, sql, None, "none", None, None, None, _GUARD_OFF, None, (), None, None)
        cursor._self_state = state  # also stands if execute raises: the guard reports nothing either way
        raw.execute(sql) if parameters is _NO_PARAMETERS else raw.execute(sql, parameters)
        return raw, state
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
        failed = (mode, sql, sql, EXEC_ERROR, "none", None, None, None, None, _describe(error), (), None, None)
        if rescue_inputs is not None and mode == "patch":
            outcome = _repair(guard, raw.row_factory, sql, parameters, None, None, EXEC_ERROR, rescue_inputs)
            if outcome.rescue is not None and outcome.rescue.chosen_index is not None:
                return outcome.rows, (
                    mode, sql, outcome.final_sql, EXEC_ERROR, outcome.action, None, None, len(outcome.rows),
                    None, _describe(error), outcome.decisions, None, outcome.elapsed_ns, outcome.rescue,
                )
            failed = (*failed[:10], outcome.decisions, None, outcome.elapsed_ns, outcome.rescue)
        cursor._self_rows = raw
        cursor._self_state = failed
        raise
    count = len(rows)
    if count > row_cap:
        note = f"more than row_cap={row_cap} rows: not probed, rows stream through unchanged"
        return itertools.chain(rows, raw), (mode, sql, sql, None, "none", None, None, None, note, None, (), None, None)
    patch = mode == "patch"
    removal_candidate = patch and count >= policy._p2_min_rows and mentions_distinct(sql) is not None
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
    if patch and (
        trigger == CARTESIAN_EXPLOSION
        or (trigger is not None and rescue_inputs is not None)
        or (removal_candidate and trigger is None and unique == count)
    ):
        outcome = _repair(guard, raw.row_factory, sql, parameters, rows, unique, trigger, rescue_inputs)  # type: ignore[arg-type]
        state = (
            mode, sql, outcome.final_sql, trigger, outcome.action, count, unique, len(outcome.rows),
            None, None, outcome.decisions, detect_ns, outcome.elapsed_ns, outcome.rescue,
        )
        return outcome.rows, state
    return rows, (mode, sql, sql, trigger, "none", count, unique, count, None, None, (), detect_ns, None)


def _repair(
    guard: ConnectionGuard,
    row_factory: Any,
    sql: str,
    parameters: Any,
    rows: Optional[list[Any]],
    unique: Optional[int],
    trigger: Optional[str],
    rescue_inputs: Optional[RescueInputs],
) -> PatchOutcome:
    # Imported here so that sqlglot (and, through a rescuer, litellm) is loaded by the first statement
    # that needs a repair, not by ``import guarded_sqlite``.
    from .patching import PatchOutcome, repair

    policy = guard.policy
    connection = guard.proxy

    def rerun(new_sql: str) -> Optional[list[Any]]:
        return connection._read_only_fetch(new_sql, parameters, row_factory, policy.row_cap)

    context = None if rescue_inputs is None else _CandidateRunner(guard, rescue_inputs, parameters, row_factory)
    try:
        return repair(sql, rows, unique, trigger, policy, rerun, guard.dialect, context)
    except Exception as error:  # a bug in the analysis must never cost the caller their result
        rule = "P1" if trigger == CARTESIAN_EXPLOSION else ("P2" if trigger is None else "rescue")
        decision = RuleDecision(rule, False, f"internal error while repairing: {_describe(error)}")  # type: ignore[arg-type]
        return PatchOutcome(sql, rows if rows is not None else [], "none", (decision,), 0)


class _CandidateRunner:
    """The connection side of a rescue: runs candidates read-only, summarises the schema, keeps the
    connection's rescue budget (see ``patching.RescueContext``)."""

    def __init__(self, guard: ConnectionGuard, inputs: RescueInputs, parameters: Any, row_factory: Any) -> None:
        self._guard = guard
        self._parameters = parameters
        self._row_factory = row_factory
        self.candidates = inputs.candidates
        self.question = inputs.question
        self.hint = inputs.hint

    def run_candidate(self, sql: str) -> Optional[list[Any]]:
        policy = self._guard.policy
        return self._guard.proxy._read_only_fetch(sql, self._parameters, self._row_factory, policy.row_cap, policy.candidate_timeout)

    def schema_summary(self) -> str:
        return schema_summary(self._guard.proxy.__wrapped__)

    def budget_refusal(self) -> Optional[str]:
        guard, policy = self._guard, self._guard.policy
        if policy.max_rescues is not None and guard.rescues >= policy.max_rescues:
            return f"rescue budget exhausted: {guard.rescues} of max_rescues={policy.max_rescues} used"
        if policy.max_rescue_cost is not None and guard.rescue_spend >= policy.max_rescue_cost:
            return f"rescue budget exhausted: ${guard.rescue_spend:.6f} of max_rescue_cost=${policy.max_rescue_cost} spent"
        return None

    def record_rescue(self, cost_usd: Optional[float]) -> None:
        self._guard.rescues += 1
        if cost_usd:
            self._guard.rescue_spend += cost_usd


def schema_summary(raw: sqlite3.Connection) -> str:
    """``table(col, col, ...)`` per table of the main database, one per line."""
    cursor = sqlite3.Cursor(raw)
    cursor.row_factory = None
    tables = cursor.execute(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' ORDER BY name"
    ).fetchall()
    lines = []
    for (table,) in tables:
        columns = [row[1] for row in cursor.execute("SELECT * FROM pragma_table_info(?)", (table,)).fetchall()]
        lines.append(f"{table}({', '.join(columns)})")
    cursor.close()
    return "\n".join(lines)


def _subclass_aware_getattr(proxy: Any, base: type, name: str) -> Any:
    """Attribute lookup for what the proxy does not define itself.

    Methods that a ``factory=`` subclass adds to ``base`` are bound to the proxy, so that their own
    ``self.execute(...)``/``self.fetchone()`` go through the guard (on the raw object they would find
    an already-drained cursor). Methods using zero-argument ``super()`` need the real object, so they
    stay bound to it; so does everything ``base`` itself defines.
    """
    raw = proxy.__wrapped__
    attribute = _added_by_subclass(type(raw), base, name)
    if attribute is None:
        return getattr(raw, name)
    return attribute.__get__(proxy, type(raw))


@functools.lru_cache(maxsize=256)
def _added_by_subclass(cls: type, base: type, name: str) -> Any:
    for klass in cls.__mro__:
        if klass is base or klass is object:
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


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"
