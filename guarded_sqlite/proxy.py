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

Provenance. A patch rule that needs to know why duplicates repeat (``GuardPolicy.provenance``) asks
``_explain``, which keeps the schema facts and a bounded dict of verdicts (one per SQL text) on the
``ConnectionGuard``. Nothing of it runs on a healthy result: the catalog is first read by the first
statement a rule asks about. SQLite: the facts are re-read when ``PRAGMA schema_version`` of ``main``,
``temp`` or a schema attached at reading time changed (checked on every ask, two or three PRAGMAs).
DuckDB and PostgreSQL have no cheap version: the facts are dropped when a statement through this
connection looks like DDL (``CREATE``/``DROP``/``ALTER``/...; also every ``executescript``) or fails
with an unknown-table error; DDL by other connections is seen only then.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import operator
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import wrapt

from .engines import DUCKDB, NO_PARAMETERS, SQLITE, Engine, WritableNotRestored, execute_with
from .errors import TransactionLost, describe_error
from .policy import GuardPolicy
from .probe import CARTESIAN_EXPLOSION, EXEC_ERROR, PartialCount, classify, count_unique, mentions_distinct, probe_large
from .report import GuardReport, ReportState, RuleDecision, RuleName

if TYPE_CHECKING:
    from collections.abc import Hashable

    from .patching import PatchOutcome
    from .provenance import Provenance
    from .schema import SchemaFacts

_NO_PARAMETERS = NO_PARAMETERS

# Below this many rows one set() is cheaper than the early-stopping scan's bookkeeping.
_SMALL_RESULT = 2048

_NOT_ROW_RETURNING = "statement returns no rows"
_MANY_NOT_PROBED = "executemany/executescript results are not probed"
_GUARD_OFF = "guard is off"
_LOCKED = "database is locked"
_VERDICTS = 256  # provenance verdicts kept per connection (one per SQL text), oldest dropped first
# Statements after which DuckDB's/PostgreSQL's cached schema facts are dropped (SQLite has a version).
_SCHEMA_CHANGE = re.compile(r"\b(create|drop|alter|attach|detach|rename|truncate|use|search_path)\b", re.IGNORECASE)
_UNKNOWN_NAME = re.compile(r"no such table|does not exist|catalog error|undefined", re.IGNORECASE)


class ConnectionGuard:
    """Per-connection facts the cursors need on every statement, in plain slots."""

    __slots__ = (
        "dialect",
        "driver_options",
        "engine",
        "lock",
        "policy",
        "proxy",
        "raw",
        "rescue_spend",
        "rescues",
        "restore_writable",
        "schema_cursor",
        "schema_facts",
        "schema_version",
        "status_results",
        "tau_below",
        "verdicts",
    )

    def __init__(self, policy: GuardPolicy, engine: Engine, proxy: Any, single_thread: bool) -> None:
        self.policy = policy
        self.engine = engine
        self.dialect = engine.dialect
        self.status_results = engine.status_results  # read on every statement: kept in a slot
        self.driver_options = engine.name == "postgres"  # psycopg's execute takes prepare=/binary=
        # Patch re-execution flips PRAGMA query_only for the whole connection; statements issued
        # through this connection from other threads wait on this lock instead of hitting that window.
        # A connection sqlite3 itself keeps to one thread (check_same_thread=True) needs none.
        self.lock: threading.RLock | None = None if single_thread else threading.RLock()
        self.proxy = proxy
        self.raw = proxy.__wrapped__
        self.rescues = 0  # rescues run on this connection, for GuardPolicy.max_rescues
        self.rescue_spend = 0.0  # their known cost in USD, for GuardPolicy.max_rescue_cost
        # Set when a guard statement could not switch SQLite's query_only back off (the caller's
        # progress handler or interrupt() kept aborting it): done before the caller's next statement.
        self.restore_writable = False
        # The text_to_sql threshold when P1 may fire below tau_inject, else None (read per statement).
        self.tau_below: float | None = policy._tau_act if policy._tau_act < policy.tau_inject else None
        # Provenance (see the module docstring): schema facts read on first need, the schema version
        # they were read at (SQLite: the schema names and their versions), verdicts by SQL text.
        self.schema_facts: SchemaFacts | None = None
        self.schema_cursor: sqlite3.Cursor | None = None  # SQLite: a plain cursor for the version PRAGMAs
        self.schema_version: Hashable = None
        self.verdicts: dict[str, Provenance] = {}


if TYPE_CHECKING:
    _Proxy = wrapt.ObjectProxy[Any]
else:
    _Proxy = wrapt.ObjectProxy


class GuardedConnection(_Proxy):
    """A ``sqlite3.Connection`` (or ``psycopg.Connection``) whose cursors probe, and in patch mode
    repair, every query result. ``executescript``, ``backup`` and ``set_progress_handler`` are
    sqlite3's and delegate to the driver like everything else."""

    _self_guard: ConnectionGuard

    def __init__(self, raw: Any, policy: GuardPolicy, engine: Engine = SQLITE, single_thread: bool = False) -> None:
        """``single_thread``: the caller knows the driver refuses use from other threads (a sqlite3
        connection opened with ``check_same_thread=True``), so statements need no lock."""
        super().__init__(raw)
        self._self_guard = ConnectionGuard(policy, engine, self, single_thread)

    @property
    def guard_policy(self) -> GuardPolicy:
        """The policy this connection applies."""
        return self._self_guard.policy

    def cursor(self, *args: Any, **kwargs: Any) -> GuardedCursor:
        raw = self.__wrapped__.cursor(*args, **kwargs)
        cursor = _cursor_class(self._self_guard.engine, raw)(raw)
        cursor._self_guard = self._self_guard
        return cursor

    def execute(self, sql: str, parameters: Any = _NO_PARAMETERS, /, **rescue_inputs: Any) -> GuardedCursor:
        return self.cursor().execute(sql, parameters, **rescue_inputs)

    def executemany(self, sql: str, parameters: Any, /, **kwargs: Any) -> GuardedCursor:
        return self.cursor().executemany(sql, parameters, **kwargs)

    def executescript(self, script: str, /) -> GuardedCursor:
        return self.cursor().executescript(script)

    def backup(self, target: Any, **kwargs: Any) -> None:
        # sqlite3 type-checks ``target`` in C and refuses a proxy.
        self.__wrapped__.backup(target.__wrapped__ if isinstance(target, GuardedConnection) else target, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__wrapped__(*args, **kwargs)

    def __enter__(self) -> GuardedConnection:
        self.__wrapped__.__enter__()
        return self

    def __getattr__(self, name: str) -> Any:
        return _subclass_aware_getattr(self, name)

    def __exit__(self, *exc_info: Any) -> Any:
        return self.__wrapped__.__exit__(*exc_info)


_NOTHING: Iterator[Any] = iter(())
_UNIQUE_ROWS = ReportState._fields.index("unique_rows")
_ACTION = ReportState._fields.index("action")
_FINAL_ROWS = ReportState._fields.index("final_rows")
_LIST_ITERATOR: type = type(iter([]))


class _Streaming:
    """Serves a result past ``row_cap``: the buffered head, then the rest straight from the driver.

    A class rather than ``itertools.chain`` so that re-executing the cursor inside ``for row in cur``
    can point it at the new statement's rows, as sqlite3's cursor (its own iterator) does.
    """

    __slots__ = ("head", "raw", "tail")

    def __init__(self, head: list[Any], raw: Any) -> None:
        self.head: Iterator[Any] | None = iter(head)
        self.tail: Any = raw
        self.raw = raw

    def __iter__(self) -> _Streaming:
        return self

    def __next__(self) -> Any:
        head = self.head
        if head is not None:
            for row in head:
                return row
            self.head = None
        if self.tail is None:
            raise StopIteration
        return next(self.tail)

    def check_usable(self) -> None:
        """sqlite3's checks (closed connection, other thread) for rows served from the head; the
        driver runs its own for the tail."""
        if self.head is not None and isinstance(self.raw, sqlite3.Cursor):
            self.raw.connection.cursor().close()

    def redirect(self, new_rows: Any) -> None:
        if type(new_rows) is list:
            self.head, self.tail = iter(new_rows), None
        elif type(new_rows) is _Streaming:
            self.head, self.tail, self.raw = new_rows.head, new_rows.tail, new_rows.raw
        else:  # no rows (a failed statement, a write): the loop ends, as over a sqlite3 cursor
            self.head = self.tail = None


class GuardedCursor(_Proxy):
    """A ``sqlite3.Cursor`` that fetches each result once, probes it, and serves it from a buffer.

    ``GuardedConnection.cursor()`` sets ``_self_guard``; the other proxy-owned attributes start from
    the class defaults below, which keeps creating a cursor cheap.
    """

    _self_guard: ConnectionGuard
    # Serves fetches: the buffer list (until first touched), an iterator over it, the buffer then the
    # raw tail (past row_cap), or the raw cursor itself.
    _self_rows: list[Any] | Iterator[Any] = _NOTHING
    # The list behind ``_self_rows`` once an iterator over it was handed out, so that re-executing the
    # cursor can redirect that iterator to the new rows, as re-executing a sqlite3 cursor does.
    _self_buffer: list[Any] | _Streaming | None = None
    _self_state: tuple[Any, ...] | None = None  # a ReportState's fields, as a plain tuple
    _self_report: GuardReport | None = None
    _self_driver_options: dict[str, Any] | None = None  # psycopg's prepare/binary for the raw execute
    # The description of the rows served, when it is not the raw cursor's: a rescued candidate's, or
    # (DuckDB) the one recorded when the caller's statement ran.
    _self_description: Any = None
    # A rescued statement's description, paired with the report state it belongs to: it applies only
    # while that state is the cursor's, so execute() never has to clear it.
    _self_rescued_description: tuple[Any, Any] | None = None

    @property
    def connection(self) -> GuardedConnection:
        proxy: GuardedConnection = self._self_guard.proxy
        return proxy

    @property
    def guard_report(self) -> GuardReport | None:
        """What the guard saw and did for the last statement; None before the first execute."""
        report = self._self_report
        if report is None and self._self_state is not None:
            report = self._self_report = GuardReport.from_state(self._self_state)
        return report

    # Read often (pandas and DB-API code read description per query); a property is much cheaper
    # than the proxy's fallback lookup for attributes it does not define.
    @property
    def description(self) -> Any:
        rescued = self._self_rescued_description
        if rescued is not None and rescued[0] is self._self_state:
            return rescued[1]
        return self.__wrapped__.description

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
    ) -> GuardedCursor:
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
            # As after a failed sqlite3 execute: nothing of the previous statement is served any more.
            self._self_rows = raw
            raise
        self._self_rows = rows if self._self_buffer is None else self._redirect_outstanding(rows)
        return self

    def executemany(self, sql: str, parameters: Any, /, **kwargs: Any) -> GuardedCursor:
        return self._run_unprobed(self.__wrapped__.executemany, sql, parameters, **kwargs)

    def executescript(self, script: str, /) -> GuardedCursor:
        return self._run_unprobed(self.__wrapped__.executescript, script)

    def fetchone(self) -> Any:
        rows = self._serving()
        if rows is self.__wrapped__:
            return rows.fetchone()  # not buffered: the driver's own fetch (and its own errors)
        return next(rows, None)

    def fetchmany(self, size: Any = _NO_PARAMETERS) -> list[Any]:
        raw: Any = self.__wrapped__
        size = getattr(raw, "arraysize", 1) if size is _NO_PARAMETERS else operator.index(size)
        rows = self._serving()
        if rows is raw:  # not buffered: the driver's own fetch
            fetched: list[Any] = self.__wrapped__.fetchmany(size)
            return fetched
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
        rows = self._serving()
        if rows is self.__wrapped__:
            return self._drivers_fetchall()
        return list(rows)

    def _drivers_fetchall(self) -> list[Any]:
        rows: list[Any] = self.__wrapped__.fetchall()
        return rows

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
        return _subclass_aware_getattr(self, name)

    def _serving(self) -> Iterator[Any]:
        """The iterator that serves rows, after checking the cursor may still fetch."""
        rows = self._self_rows
        kind = type(rows)
        if kind is list:
            self.__wrapped__.fetchone()  # the raw cursor is exhausted: this only runs sqlite3's checks
            self._self_buffer = rows  # type: ignore[assignment]
            rows = self._self_rows = iter(rows)
        elif kind is _LIST_ITERATOR:
            self.__wrapped__.fetchone()
        elif kind is _Streaming:
            rows.check_usable()  # type: ignore[union-attr]
            self._self_buffer = rows  # type: ignore[assignment]  # handed out: redirected on re-execute
        return rows  # type: ignore[return-value]

    def _redirect_outstanding(self, new_rows: list[Any] | Iterator[Any]) -> list[Any] | Iterator[Any]:
        """Point the iterator handed out for the previous statement at ``new_rows``.

        sqlite3's iterator is the cursor, so a loop over it continues with whatever the cursor executes
        next. Ours is a list iterator; splicing the new rows in at its position gives the same effect.
        A new result that streams (past ``row_cap``) or has no rows just ends the old iterator. An
        iterator that already raised StopIteration never yields again, so then the new rows are served
        afresh instead.
        """
        buffer, outstanding = self._self_buffer, self._self_rows
        self._self_buffer = None
        assert buffer is not None
        if isinstance(buffer, _Streaming):
            buffer.redirect(new_rows)
            if type(new_rows) is list or type(new_rows) is _Streaming:
                self._self_buffer = buffer
                return buffer
            return new_rows
        position = len(buffer) - operator.length_hint(outstanding)
        del buffer[position:]
        if type(new_rows) is not list:
            return new_rows
        buffer.extend(new_rows)
        if operator.length_hint(outstanding) != len(new_rows):  # exhausted: it ignores the new rows
            return new_rows
        self._self_buffer = buffer
        return outstanding

    def _run_unprobed(self, method: Any, *args: Any, **kwargs: Any) -> GuardedCursor:
        guard = self._self_guard
        mode = guard.policy.mode
        sql = args[0]
        note = _GUARD_OFF if mode == "off" else _MANY_NOT_PROBED
        self._self_report = None
        # executemany ends a loop over the previous result, as over sqlite3's cursor; executescript
        # runs on a cursor of its own inside sqlite3, so a loop over this one goes on.
        if self._self_buffer is not None and method.__name__ == "executemany":
            self._redirect_outstanding(self.__wrapped__)
        self._self_rows = self.__wrapped__
        if guard.restore_writable:
            _restore_writable(guard)
        try:
            with guard.lock or contextlib.nullcontext():
                method(*args, **kwargs)
        except Exception as error:
            trigger, text = (None, None) if mode == "off" else (EXEC_ERROR, describe_error(error))
            self._self_state = (mode, sql, sql, trigger, "none", None, None, None, note, text, (), None, None)
            raise
        finally:
            if guard.schema_facts is not None and guard.engine is not SQLITE:
                _forget_schema(guard)  # a script or batch may change the schema; cheap to re-read once
        self._self_state = (mode, sql, sql, None, "none", None, None, None, note, None, (), None, None)
        return self


class _ContextCursor(GuardedCursor):
    """A guarded psycopg cursor: also a context manager (``with conn.cursor() as cur``), as psycopg's;
    ``execute`` takes psycopg's own ``prepare``/``binary`` keywords; ``rowcount`` and ``rownumber``
    describe the rows served (after a patch, the patched result)."""

    def execute(
        self,
        sql: Any,
        parameters: Any = _NO_PARAMETERS,
        /,
        *,
        prepare: bool | None = None,
        binary: bool | None = None,
        **rescue_inputs: Any,
    ) -> _ContextCursor:
        self._self_driver_options = (
            {"prepare": prepare, "binary": binary} if prepare is not None or binary is not None else None
        )
        return super().execute(sql, parameters, **rescue_inputs)  # type: ignore[return-value]

    @property
    def rowcount(self) -> int:
        raw_count: int = self.__wrapped__.rowcount
        state = self._self_state
        if state is None or state[_ACTION] == "none" or raw_count < 0:
            return raw_count
        final_rows: int = state[_FINAL_ROWS]
        return final_rows

    @property
    def rownumber(self) -> int | None:
        rows, state = self._self_rows, self._self_state
        if state is None or rows is self.__wrapped__ or state[_FINAL_ROWS] is None:
            number: int | None = self.__wrapped__.rownumber
            return number
        remaining = len(rows) if type(rows) is list else operator.length_hint(rows)
        served: int = state[_FINAL_ROWS] - remaining
        return served

    def stream(self, *args: Any, **kwargs: Any) -> Any:
        """psycopg's row-by-row streaming: passed through unbuffered and unprobed, as the report says."""
        sql = args[0] if args else kwargs.get("query")
        mode = self._self_guard.policy.mode
        self._self_report = None
        self._self_rows = self.__wrapped__
        self._self_state = (mode, sql, sql, None, "none", None, None, None, _STREAMED, None, (), None, None)
        return self.__wrapped__.stream(*args, **kwargs)

    def __enter__(self) -> _ContextCursor:
        self.__wrapped__.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> Any:
        return self.__wrapped__.__exit__(*exc_info)


class _StreamingCursor(_ContextCursor):
    """A server-side cursor (psycopg ``conn.cursor(name=...)``): rows stay on the server and stream.

    Buffering would defeat the reason it exists, so statements pass through unprobed and the report
    says so."""

    def execute(self, sql: str, parameters: Any = _NO_PARAMETERS, /, **kwargs: Any) -> _StreamingCursor:
        mode = self._self_guard.policy.mode
        self._self_report = None
        self._self_rows = self.__wrapped__
        self._self_state = (mode, sql, sql, None, "none", None, None, None, _SERVER_SIDE, None, (), None, None)
        raw = self.__wrapped__
        raw.execute(sql, **kwargs) if parameters is _NO_PARAMETERS else raw.execute(sql, parameters, **kwargs)
        return self


_SERVER_SIDE = "server-side cursor: rows stream from the server unbuffered and unprobed"
_STREAMED = "stream(): rows stream from the server unbuffered and unprobed"


def _cursor_class(engine: Engine, raw_cursor: Any) -> type[GuardedCursor]:
    if engine.name != "postgres":
        return GuardedCursor
    import psycopg

    return _StreamingCursor if isinstance(raw_cursor, psycopg.ServerCursor) else _ContextCursor


class GuardedDuckDBConnection(GuardedCursor):
    """A guarded ``duckdb.DuckDBPyConnection``, which is its own cursor: ``con.execute(sql)`` returns
    the connection and ``con.fetchall()`` reads its result.

    The guard's checks and re-runs use the same DuckDB connection, so ``description`` is the one
    recorded when the caller's statement ran. ``df()``/``fetchdf()``/``fetchnumpy()``/Arrow results
    cannot be rebuilt from fetched rows exactly, so they re-run the served SQL read-only (a proven
    read-only query only) and return what the caller has not fetched yet; otherwise ``df()`` builds a
    DataFrame from the buffered rows.
    """

    _self_parameters: Any = _NO_PARAMETERS

    def __init__(self, raw: Any, policy: GuardPolicy) -> None:
        super().__init__(raw)
        self._self_guard = ConnectionGuard(policy, DUCKDB, self, single_thread=False)
        DUCKDB.scan_callers_frames(raw)

    @property
    def guard_policy(self) -> GuardPolicy:
        return self._self_guard.policy

    @property
    def description(self) -> Any:
        rescued = self._self_rescued_description
        if rescued is not None and rescued[0] is self._self_state:
            return rescued[1]
        return self._self_description if self._self_state is not None else self.__wrapped__.description

    def cursor(self) -> GuardedDuckDBConnection:
        """A duplicate connection to the same database (DuckDB's cursor), guarded with the same policy."""
        return GuardedDuckDBConnection(self.__wrapped__.cursor(), self._self_guard.policy)

    def __enter__(self) -> GuardedDuckDBConnection:
        self.__wrapped__.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> Any:
        return self.__wrapped__.__exit__(*exc_info)

    def df(self, *args: Any, **kwargs: Any) -> Any:
        return self._native("df", *args, **kwargs)

    def fetchdf(self, *args: Any, **kwargs: Any) -> Any:
        return self._native("fetchdf", *args, **kwargs)

    def fetch_df(self, *args: Any, **kwargs: Any) -> Any:
        return self._native("fetch_df", *args, **kwargs)

    def fetchnumpy(self, *args: Any, **kwargs: Any) -> Any:
        return self._native("fetchnumpy", *args, **kwargs)

    def fetch_arrow_table(self, *args: Any, **kwargs: Any) -> Any:
        return self._native("fetch_arrow_table", *args, **kwargs)

    def to_arrow_table(self, *args: Any, **kwargs: Any) -> Any:
        return self._native("to_arrow_table", *args, **kwargs)

    def arrow(self, *args: Any, **kwargs: Any) -> Any:
        return self._native("arrow", *args, **kwargs)

    def _native(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """A DuckDB-native result for what the caller has not fetched yet (see the class docstring)."""
        raw = self.__wrapped__
        rows = self._self_rows
        if self._self_state is None or rows is raw:
            return getattr(raw, method)(*args, **kwargs)  # nothing buffered: DuckDB's own result
        from .rewrite import is_read_only_query

        remaining = list(self._serving())
        served_sql = self._self_state[2]
        if is_read_only_query(served_sql, "duckdb"):
            return _tail(self._rerun_natively(served_sql, method, *args, **kwargs), len(remaining))
        if method in ("df", "fetchdf", "fetch_df"):
            import pandas

            return pandas.DataFrame.from_records(remaining, columns=[d[0] for d in self._self_description])
        raise TypeError(
            f"{method}() cannot be rebuilt from the guarded buffer of a statement that is not a read-only query"
        )

    def _rerun_natively(self, sql: str, method: str, *args: Any, **kwargs: Any) -> Any:
        raw = self.__wrapped__
        parameters = self._self_parameters
        if DUCKDB.in_explicit_transaction(raw):
            # Only this connection sees the transaction's changes; the query is a proven read-only
            # query that just succeeded on it.
            execute_with(raw, sql, parameters)
            return getattr(raw, method)(*args, **kwargs)
        return DUCKDB.on_read_only_duplicate(
            raw, sql, parameters, None, lambda cursor: getattr(cursor, method)(*args, **kwargs)
        )

    def execute(self, sql: str, parameters: Any = _NO_PARAMETERS, /, **kwargs: Any) -> GuardedDuckDBConnection:
        self._self_parameters = parameters
        super().execute(sql, parameters, **kwargs)
        return self


def _tail(result: Any, count: int) -> Any:
    """The last ``count`` rows of a DataFrame, a dict of numpy arrays, or an Arrow table."""
    if hasattr(result, "iloc"):
        return result.iloc[len(result) - count :].reset_index(drop=True)
    if isinstance(result, dict):
        return {name: column[len(column) - count :] for name, column in result.items()}
    if hasattr(result, "slice") and hasattr(result, "num_rows"):
        return result.slice(result.num_rows - count)
    return result


class RescueInputs:
    """What the caller passed for a rescue: candidate SQLs and the question they answer."""

    __slots__ = ("candidates", "hint", "question")

    def __init__(self, candidates: Sequence[str], question: str | None, hint: str | None) -> None:
        if isinstance(candidates, str) or not all(isinstance(c, str) for c in candidates):
            raise TypeError("candidates must be a sequence of SQL strings")
        self.candidates = tuple(candidates)
        self.question = question
        self.hint = hint


def _execute_and_probe(
    cursor: GuardedCursor,
    raw: Any,
    sql: str,
    parameters: Any,
    guard: ConnectionGuard,
    rescue_inputs: RescueInputs | None = None,
) -> tuple[list[Any] | Iterator[Any], tuple[Any, ...]]:
    """Execute, fetch once, probe, maybe repair; returns the serving rows and the report state.

    On an execution error the state is stored on ``cursor`` before the error propagates unchanged
    (unless a rescue replaced the failed statement with a candidate).
    """
    policy = guard.policy
    mode = policy.mode
    if mode == "off":
        state: tuple[Any, ...] = (mode, sql, sql, None, "none", None, None, None, _GUARD_OFF, None, (), None, None)
        cursor._self_state = state  # also stands if execute raises: the guard reports nothing either way
        execute_with(raw, sql, parameters)
        return raw, state
    row_cap = policy.row_cap
    if guard.restore_writable:
        _restore_writable(guard)
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
                if guard.schema_facts is not None and _SCHEMA_CHANGE.search(sql):
                    _forget_schema(guard)
                return raw, (mode, sql, sql, None, "none", None, None, None, _NOT_ROW_RETURNING, None, (), None, None)
        elif raw.description is None:
            if guard.schema_facts is not None and guard.engine is not SQLITE and _SCHEMA_CHANGE.search(sql):
                _forget_schema(guard)
            return raw, (mode, sql, sql, None, "none", None, None, None, _NOT_ROW_RETURNING, None, (), None, None)
        rows = raw.fetchmany(row_cap + 1)
    except Exception as error:
        if guard.status_results:
            cursor._self_description = raw.description
        if guard.schema_facts is not None and guard.engine is not SQLITE and _UNKNOWN_NAME.search(str(error)):
            _forget_schema(guard)  # an unknown table: the cached facts may predate someone's DDL
        failed: tuple[Any, ...] = (
            mode,
            sql,
            sql,
            EXEC_ERROR,
            "none",
            None,
            None,
            None,
            None,
            describe_error(error),
            (),
            None,
            None,
        )
        if rescue_inputs is not None and mode == "patch" and _LOCKED in str(error):
            # Every candidate would wait out the same busy timeout again.
            refusal = RuleDecision("rescue", False, "candidates not run: the database is locked")
            failed = (*failed[:10], (refusal,), None, None)
        elif rescue_inputs is not None and mode == "patch":
            outcome = _repair(
                guard, getattr(raw, "row_factory", None), sql, parameters, None, None, EXEC_ERROR, rescue_inputs
            )
            if outcome.rescue is not None and outcome.rescue.chosen_index is not None:
                rescued_state = (
                    mode,
                    sql,
                    outcome.final_sql,
                    EXEC_ERROR,
                    outcome.action,
                    None,
                    None,
                    len(outcome.rows),
                    None,
                    describe_error(error),
                    outcome.decisions,
                    None,
                    outcome.elapsed_ns,
                    outcome.rescue,
                )
                if outcome.description is not None:
                    cursor._self_rescued_description = (rescued_state, outcome.description)
                return outcome.rows, rescued_state
            failed = (*failed[:10], outcome.decisions, None, outcome.elapsed_ns, outcome.rescue)
        cursor._self_rows = raw
        cursor._self_state = failed
        raise
    count = len(rows)
    if count > row_cap:
        note = f"more than row_cap={row_cap} rows: not probed, rows stream through unchanged"
        return _Streaming(rows, raw), (mode, sql, sql, None, "none", None, None, None, note, None, (), None, None)
    patch = mode == "patch"
    # P2's cheap precondition (policy.removal_applies without its unique == count part, known below).
    removal_candidate = patch and count >= policy._p2_min_rows and mentions_distinct(sql) is not None
    started = time.perf_counter_ns()
    unique: int | PartialCount
    try:
        if count < _SMALL_RESULT or removal_candidate:
            unique = len(set(rows))
            trigger = classify(count, unique, policy.tau_inject)
        elif guard.tau_below is None:
            trigger, unique = probe_large(rows, policy.tau_inject)
        else:  # text_to_sql: the exact count is needed down to tau_amplified
            trigger, unique = probe_large(rows, guard.tau_below)
            if trigger is not None:
                trigger = classify(count, unique, policy.tau_inject)  # type: ignore[arg-type]  # exact here
    except TypeError:  # unhashable rows from a row_factory or text_factory
        try:
            unique = count_unique(rows)
        except Exception as error:  # a value whose __eq__/__hash__ raises: serve the rows unjudged
            note = f"rows cannot be compared ({describe_error(error)}): not probed"
            return rows, (mode, sql, sql, None, "none", None, None, None, note, None, (), None, None)
        trigger = classify(count, unique, policy.tau_inject)
    except Exception as error:  # a value whose __hash__ raises something else: same
        note = f"rows cannot be compared ({describe_error(error)}): not probed"
        return rows, (mode, sql, sql, None, "none", None, None, None, note, None, (), None, None)
    detect_ns = time.perf_counter_ns() - started
    if patch and (
        trigger == CARTESIAN_EXPLOSION
        or (trigger is not None and rescue_inputs is not None)
        or (removal_candidate and trigger is None and unique == count)
        or (
            guard.tau_below is not None
            and trigger is None
            and type(unique) is int
            and (count - unique) / count >= guard.tau_below
        )
    ):
        # A flagged or DISTINCT result was counted exactly (probe_large defers only healthy counts).
        exact_unique = unique if type(unique) is int else unique.exact()  # type: ignore[union-attr]
        outcome = _repair(
            guard, getattr(raw, "row_factory", None), sql, parameters, rows, exact_unique, trigger, rescue_inputs
        )
        state = (
            mode,
            sql,
            outcome.final_sql,
            trigger,
            outcome.action,
            count,
            unique,
            len(outcome.rows),
            None,
            None,
            outcome.decisions,
            detect_ns,
            outcome.elapsed_ns,
            outcome.rescue,
            outcome.provenance,
        )
        if outcome.description is not None:
            cursor._self_rescued_description = (state, outcome.description)
        return outcome.rows, state
    return rows, (mode, sql, sql, trigger, "none", count, unique, count, None, None, (), detect_ns, None)


def _repair(
    guard: ConnectionGuard,
    row_factory: Any,
    sql: str,
    parameters: Any,
    rows: list[Any] | None,
    unique: int | None,
    trigger: str | None,
    rescue_inputs: RescueInputs | None,
) -> PatchOutcome:
    # Imported here so that sqlglot (and, through a rescuer, litellm) is loaded by the first statement
    # that needs a repair, not by ``import guarded_sqlite``.
    from .patching import PatchOutcome, repair

    policy = guard.policy
    engine, raw = guard.engine, guard.raw

    def rerun(new_sql: str, max_rows: int) -> list[Any] | None:
        return _read_only_fetch(guard, new_sql, parameters, row_factory, max_rows)

    context = None if rescue_inputs is None else _CandidateRunner(guard, rescue_inputs, parameters, row_factory)
    try:
        return repair(
            sql,
            rows,
            unique,
            trigger,
            policy,
            rerun,
            guard.dialect,
            context,
            lambda: engine.may_collate_text(raw),
            functools.partial(_explain, guard),
        )
    except TransactionLost:
        raise
    except Exception as error:  # a bug in the analysis must never cost the caller their result
        rule: RuleName = "P1" if trigger == CARTESIAN_EXPLOSION else ("P2" if trigger is None else "rescue")
        decision = RuleDecision(rule, False, f"internal error while repairing: {describe_error(error)}")
        return PatchOutcome(sql, rows if rows is not None else [], "none", (decision,), 0)


def _explain(guard: ConnectionGuard, sql: str) -> Provenance:
    """The provenance of ``sql``'s duplicates on this connection: the verdict cached for this schema
    version, or analysed now (reading the catalog first if the facts are missing or stale)."""
    from .provenance import Provenance, analyse

    try:
        facts = guard.schema_facts
        if guard.engine is SQLITE:
            version = _sqlite_version(guard, guard.schema_version)
            if facts is None or version != guard.schema_version:
                facts = _read_schema(guard)
                guard.schema_version = _sqlite_version(guard, None)
        elif facts is None:
            facts = _read_schema(guard)
    except TransactionLost:
        raise
    except Exception as error:  # the connection cannot tell us its schema: the paper's rules apply
        return Provenance("unknown", f"schema facts unavailable: {describe_error(error)}")
    verdicts = guard.verdicts
    verdict = verdicts.get(sql)
    if verdict is None:
        verdict = analyse(sql, facts, guard.dialect)
        if len(verdicts) >= _VERDICTS:
            del verdicts[next(iter(verdicts))]
        verdicts[sql] = verdict
    return verdict


def _read_schema(guard: ConnectionGuard) -> SchemaFacts:
    from .schema import read_duckdb_schema, read_postgres_schema, read_sqlite_schema

    reader = {"sqlite": read_sqlite_schema, "duckdb": read_duckdb_schema}.get(guard.engine.name, read_postgres_schema)
    facts = reader(guard.raw)
    guard.schema_facts = facts
    guard.verdicts.clear()
    return facts


def _forget_schema(guard: ConnectionGuard) -> None:
    """Drop the cached schema facts and verdicts: the next rule that asks reads the catalog again."""
    guard.schema_facts = None
    guard.verdicts.clear()


def _sqlite_version(guard: ConnectionGuard, known: Any) -> tuple[tuple[str, int], ...]:
    """``PRAGMA schema_version`` of ``main``, ``temp`` and each schema the facts were read with: any DDL
    changes it, also through another connection. Schemas come from ``known`` (the last answer) so the
    check costs a PRAGMA per schema; without it ``PRAGMA database_list`` names them. A schema attached
    later changes no name the cached verdicts resolved (SQLite looks in temp, main, then in attach
    order); one detached since makes its PRAGMA fail, which reads everything again. The cursor is kept
    on the connection's guard (only used under its lock), which saves creating one per check."""
    cursor = guard.schema_cursor
    if cursor is None:
        cursor = guard.schema_cursor = sqlite3.Cursor(guard.raw)
        cursor.row_factory = None
    if known:
        names = [name for name, _ in known]
    else:
        listed = [str(row[1]) for row in cursor.execute("PRAGMA database_list").fetchall()]
        names = ["main", "temp", *(n for n in listed if n.lower() not in ("main", "temp"))]
    out = []
    for name in names:
        quoted = '"' + name.replace('"', '""') + '"'
        try:
            row = cursor.execute(f"PRAGMA {quoted}.schema_version").fetchone()
        except sqlite3.OperationalError:  # detached since: read everything again
            return ()
        out.append((name, int(row[0]) if row else -1))
    return tuple(out)


def _read_only_fetch(
    guard: ConnectionGuard,
    sql: str,
    parameters: Any,
    row_factory: Any,
    max_rows: int,
    description: list[Any] | None = None,
) -> list[Any] | None:
    """One guard statement through the engine; remembers when SQLite's query_only is still on."""
    try:
        return guard.engine.read_only_fetch(
            guard.raw, sql, parameters, row_factory, max_rows, guard.policy.rerun_timeout, description
        )
    except WritableNotRestored:
        guard.restore_writable = True
        raise


def _restore_writable(guard: ConnectionGuard) -> None:
    """Switch query_only off before the caller's next statement, after a guard statement could not."""
    if SQLITE.restore_writable(guard.raw):
        guard.restore_writable = False


class _CandidateRunner:
    """The connection side of a rescue: runs candidates read-only, summarises the schema, keeps the
    connection's rescue budget (see ``patching.RescueContext``)."""

    def __init__(self, guard: ConnectionGuard, inputs: RescueInputs, parameters: Any, row_factory: Any) -> None:
        self._guard = guard
        self._parameters = parameters
        self._row_factory = row_factory
        self._descriptions: dict[str, Any] = {}
        self.candidates: Sequence[str] = inputs.candidates
        self.question: str | None = inputs.question
        self.hint: str | None = inputs.hint

    def run_candidate(self, sql: str) -> list[Any] | None:
        description: list[Any] = []
        rows = _read_only_fetch(
            self._guard, sql, self._parameters, self._row_factory, self._guard.policy.row_cap, description
        )
        self._descriptions[sql] = description[0] if description else None
        return rows

    def candidate_description(self, sql: str) -> Any:
        return self._descriptions.get(sql)

    def schema_summary(self) -> str:
        return self._guard.engine.schema_summary(self._guard.raw)

    def budget_refusal(self) -> str | None:
        guard, policy = self._guard, self._guard.policy
        if policy.max_rescues is not None and guard.rescues >= policy.max_rescues:
            return f"rescue budget exhausted: {guard.rescues} of max_rescues={policy.max_rescues} used"
        if policy.max_rescue_cost is not None and guard.rescue_spend >= policy.max_rescue_cost:
            return (
                f"rescue budget exhausted: ${guard.rescue_spend:.6f} of max_rescue_cost=${policy.max_rescue_cost} spent"
            )
        return None

    def record_rescue(self, cost_usd: float | None) -> None:
        self._guard.rescues += 1
        # Only a real price counts: NaN or a negative figure from a provider must not switch the cap off.
        if cost_usd is not None and math.isfinite(cost_usd) and cost_usd > 0:
            self._guard.rescue_spend += cost_usd


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


_DRIVER_MODULES = frozenset({"sqlite3", "psycopg", "duckdb", "_duckdb", "builtins"})


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
