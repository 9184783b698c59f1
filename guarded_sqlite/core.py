"""The guard's decision logic, shared by every way a connection is guarded.

Two thin I/O layers sit on top of this module: ``sqlite_fast`` (the ``sqlite3.Connection`` and
``sqlite3.Cursor`` subclasses that ``connect()`` and ``install()`` open) and the ``wrapt`` proxies of
``wrap()`` (``proxy``, ``proxy_duckdb``, ``proxy_psycopg``). A layer executes the statement and fetches
its result once (up to ``row_cap + 1`` rows); everything after that is here: the probe, the patch rules
and the rescue (``after_fetch``, ``after_error``), the report state, serving the buffered rows
(``serving``, ``redirect_outstanding``, ``Streaming``) and the per-connection facts (``ConnectionState``).

Cursors of both layers keep the same attributes (``_self_rows``, ``_self_buffer``, ``_self_state``,
``_self_report``, ``_self_rescued_description``; the ``_self_`` prefix is what ``wrapt`` stores on a
proxy itself), so the functions below work on either.

Provenance. A patch rule that needs to know why duplicates repeat (``GuardPolicy.provenance``) asks
``explain``, which keeps the schema facts and a bounded dict of verdicts (one per SQL text) on the
``ConnectionState``. Nothing of it runs on a healthy result: the catalog is first read by the first
statement a rule asks about. SQLite: the facts are re-read when ``PRAGMA schema_version`` of ``main``,
``temp`` or a schema attached at reading time changed (checked on every ask, two or three PRAGMAs).
DuckDB and PostgreSQL have no cheap version: the facts are dropped when a statement through this
connection looks like DDL (``CREATE``/``DROP``/``ALTER``/...; also every ``executescript``) or fails
with an unknown-table error; DDL by other connections is seen only then.
"""

from __future__ import annotations

import functools
import math
import operator
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .engines import NO_PARAMETERS, SQLITE, Engine, WritableNotRestored
from .errors import TransactionLost, describe_error
from .policy import GuardPolicy
from .probe import (
    CARTESIAN_EXPLOSION,
    EMPTY_RESULT,
    EXEC_ERROR,
    PartialCount,
    classify,
    count_unique,
    mentions_distinct,
    probe_large,
)
from .report import GuardReport, ReportState, RuleDecision, RuleName

if TYPE_CHECKING:
    from collections.abc import Hashable

    from .patching import PatchOutcome
    from .provenance import Provenance
    from .schema import SchemaFacts

# Below this many rows one set() is cheaper than the early-stopping scan's bookkeeping.
_SMALL_RESULT = 2048

NOT_ROW_RETURNING = "statement returns no rows"
MANY_NOT_PROBED = "executemany/executescript results are not probed"
GUARD_OFF = "guard is off"
_LOCKED = "database is locked"
_VERDICTS = 256  # provenance verdicts kept per connection (one per SQL text), oldest dropped first


@functools.cache
def _pattern(name: str) -> re.Pattern[str]:
    """The module's regular expressions, compiled on first use (not by ``import guarded_sqlite``)."""
    sources = {
        # Statements after which DuckDB's/PostgreSQL's cached schema facts are dropped (SQLite has a version).
        "schema_change": r"\b(create|drop|alter|attach|detach|rename|truncate|use|search_path)\b",
        "unknown_name": r"no such table|does not exist|catalog error|undefined",
    }
    return re.compile(sources[name], re.IGNORECASE)


def changes_schema(sql: str) -> bool:
    """Whether ``sql`` may change the schema (DuckDB/PostgreSQL drop their cached facts then)."""
    return _pattern("schema_change").search(sql) is not None


NOTHING: Iterator[Any] = iter(())
LIST_ITERATOR: type = type(iter([]))

_new_state = tuple.__new__
_perf_ns = time.perf_counter_ns


class GuardedConnection:
    """A guarded connection: ``connect()``'s ``sqlite3.Connection`` subclasses and ``wrap()``'s proxies
    are both instances of this class (it holds no behaviour of its own)."""

    __slots__ = ()

    if TYPE_CHECKING:  # for type checkers: the driver connection's attributes, and the guard's

        @property
        def guard_policy(self) -> GuardPolicy: ...

        def __getattr__(self, name: str) -> Any: ...


class GuardedCursor:
    """A guarded cursor, of either kind (see ``GuardedConnection``)."""

    __slots__ = ()

    if TYPE_CHECKING:  # for type checkers: the driver cursor's attributes, and the guard's

        @property
        def guard_report(self) -> GuardReport | None: ...

        def __getattr__(self, name: str) -> Any: ...


def state(
    mode: str,
    sql: str,
    final_sql: str,
    trigger: str | None,
    action: str,
    rows: int | None,
    unique: int | PartialCount | None,
    final_rows: int | None,
    note: str | None,
    error: str | None,
    decisions: tuple[RuleDecision, ...],
    detect_ns: int | None,
    patch_ns: int | None,
    rescue: Any = None,
    provenance: Any = None,
) -> ReportState:
    """A ``ReportState`` built without the named tuple's Python-level ``__new__``."""
    return _new_state(
        ReportState,
        (mode, sql, final_sql, trigger, action, rows, unique, final_rows, note, error, decisions, detect_ns, patch_ns,
         rescue, provenance),
    )  # fmt: skip


def unprobed(
    mode: str, sql: str, note: str | None, trigger: str | None = None, error: str | None = None
) -> ReportState:
    """The state of a statement the probe did not measure."""
    return _new_state(
        ReportState, (mode, sql, sql, trigger, "none", None, None, None, note, error, (), None, None, None, None)
    )


class ConnectionState:
    """Per-connection facts the cursors need on every statement, in plain slots."""

    __slots__ = (
        "byte_cap",
        "dialect",
        "driver_options",
        "engine",
        "fetch_size",
        "first_fetch",
        "lock",
        "mode",
        "p2_rows",
        "policy",
        "proxy",
        "quick_below",
        "raw",
        "rescue_spend",
        "rescues",
        "restore_writable",
        "schema_cursor",
        "schema_facts",
        "schema_version",
        "serial",
        "status_results",
        "tau_below",
        "verdicts",
    )

    def __init__(self, policy: GuardPolicy, engine: Engine, proxy: Any, raw: Any, single_thread: bool) -> None:
        """``proxy``: the object cursors report as their ``connection``; ``raw``: the driver's connection
        the engine re-executes on (the same object for ``connect()``'s connections)."""
        self.policy = policy
        self.mode = policy.mode
        self.fetch_size = policy.row_cap + 1  # rows fetched per statement: one more than are buffered
        self.byte_cap = policy.byte_cap
        # The first fetch of every statement: all it may buffer, or with a byte budget the first rows
        # only (fetch_rest continues when they come back full).
        self.first_fetch = self.fetch_size if policy.byte_cap is None else min(FIRST_ROWS, self.fetch_size)
        self.engine = engine
        self.dialect = engine.dialect
        self.status_results = engine.status_results  # read on every statement: kept in a slot
        self.driver_options = engine.name == "postgres"  # psycopg's execute takes prepare=/binary=
        self.proxy = proxy
        self.raw = raw
        self.set_threading(single_thread)
        self.rescues = 0  # rescues run on this connection, for GuardPolicy.max_rescues
        self.rescue_spend = 0.0  # their known cost in USD, for GuardPolicy.max_rescue_cost
        # Set when a guard statement could not switch SQLite's query_only back off (the caller's
        # progress handler or interrupt() kept aborting it): done before the caller's next statement.
        self.restore_writable = False
        # The text_to_sql threshold when P1 may fire below tau_inject, else None (read per statement).
        self.tau_below: float | None = policy._tau_act if policy._tau_act < policy.tau_inject else None
        # Results of fewer rows than this, without a single duplicate, need nothing but the count: no
        # rule can apply (P2 needs at least policy._p2_min_rows rows), no early-stopping scan pays off.
        limits = [_SMALL_RESULT, policy.row_cap + 1]
        # From this many rows on, a DISTINCT query may be a P2 candidate (never outside patch mode).
        self.p2_rows = policy._p2_min_rows if policy.mode == "patch" else _SMALL_RESULT
        if self.tau_below is not None and self.tau_below <= 0:
            limits.append(0)
        self.quick_below = min(limits)
        # Provenance (see the module docstring): schema facts read on first need, the schema version
        # they were read at (SQLite: the schema names and their versions), verdicts by SQL text.
        self.schema_facts: SchemaFacts | None = None
        self.schema_cursor: sqlite3.Cursor | None = None  # SQLite: a plain cursor for the version PRAGMAs
        self.schema_version: Hashable = None
        self.verdicts: dict[str, Provenance] = {}

    def set_threading(self, single_thread: bool) -> None:
        # Patch re-execution flips PRAGMA query_only for the whole connection; statements issued
        # through this connection from other threads wait on this lock instead of hitting that window.
        # A connection sqlite3 itself keeps to one thread (check_same_thread=True) needs none.
        self.lock: threading.RLock | None = None if single_thread else threading.RLock()
        # The lock a statement takes. Patch mode runs statements of its own; observe mode steps through
        # a whole result at execute(), a much longer window than sqlite3's single step, during which
        # other threads' statements on the shared connection can trip sqlite3's own races ("another
        # row available"); so both serialise. "off" is sqlite3 itself.
        self.serial = self.lock if self.policy.mode != "off" else None


class RescueInputs:
    """What the caller passed for a rescue: candidate SQLs and the question they answer."""

    __slots__ = ("candidates", "hint", "question")

    def __init__(self, candidates: Sequence[str], question: str | None, hint: str | None) -> None:
        if isinstance(candidates, str) or not all(isinstance(c, str) for c in candidates):
            raise TypeError("candidates must be a sequence of SQL strings")
        self.candidates = tuple(candidates)
        self.question = question
        self.hint = hint


# --------------------------------------------------------------------------------------------------
# Serving rows
# --------------------------------------------------------------------------------------------------


FIRST_ROWS = 16
"""Rows fetched before the byte budget is looked at: results this small cost one fetch call, as before."""


class BytesCapped(list):  # type: ignore[type-arg]
    """The rows buffered before a result passed ``GuardPolicy.byte_cap``; the rest is still unfetched."""


def fetch_rest(
    fetchmany: Callable[[Any, int], list[Any]], cursor: Any, guard: ConnectionState, rows: list[Any]
) -> list[Any]:
    """After a first fetch of ``guard.first_fetch`` rows that came back full, the rest of the buffer: up
    to ``row_cap + 1`` rows in all, or a ``BytesCapped`` list once their estimated size passes
    ``byte_cap`` (the driver's cursor then holds the rest).

    Callers fetch ``first_fetch`` rows themselves, so a small result costs one call, as a plain
    ``fetchmany(row_cap + 1)`` would. The rest comes in chunks sized from the last row's estimated size,
    so a result of huge rows stops near the budget instead of after ``row_cap`` of them.
    """
    budget = guard.byte_cap
    wanted = guard.fetch_size
    if budget is None:
        return rows + fetchmany(cursor, wanted - len(rows))
    per_row = row_bytes(rows[-1])
    used = per_row * len(rows)
    while used <= budget:
        chunk = min(wanted - len(rows), max(1, (budget - used) // per_row))
        more = fetchmany(cursor, chunk)
        rows += more
        if len(more) < chunk or len(rows) >= wanted:
            return rows
        per_row = row_bytes(more[-1])
        used += per_row * len(more)
    return BytesCapped(rows)


def row_bytes(row: Any) -> int:
    """A rough size of one fetched row: 64 bytes, plus 16 per value, plus the length of text and blobs
    (values of exactly the types SQLite returns them as; a converter's objects count 16 bytes)."""
    try:
        values = row.values() if isinstance(row, dict) else row
        size = 64 + 16 * len(values)
        for value in values:
            if type(value) in _SIZED_TYPES:  # exact types: half the cost of isinstance on this hot path
                size += len(value)
    except TypeError:  # a row factory's object that is not a sized sequence
        return 64
    return size


_SIZED_TYPES = frozenset((str, bytes, bytearray))


class Streaming:
    """Serves a result past ``row_cap``: the buffered head, then the rest straight from the driver.

    A class rather than ``itertools.chain`` so that re-executing the cursor inside ``for row in cur``
    can point it at the new statement's rows, as sqlite3's cursor (its own iterator) does. ``tail`` is
    the driver's iterator over the rest (the raw cursor, or for a cursor subclass that overrides
    ``__next__``, an iterator calling sqlite3's own); ``raw`` is the driver's cursor. Buffered rows that
    a row factory shapes as they are served are one too: a ``factories.Shaped`` head and no tail.
    """

    __slots__ = ("head", "raw", "tail")

    def __init__(self, head: Iterable[Any], raw: Any, tail: Any) -> None:
        self.head: Iterator[Any] | None = iter(head)
        self.tail: Any = tail
        self.raw = raw

    def __iter__(self) -> Streaming:
        return self

    def __length_hint__(self) -> int:
        # The buffered rows left (redirect_outstanding measures a handed-out buffer's position by it).
        return 0 if self.head is None else operator.length_hint(self.head)

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
            sqlite3.Connection.cursor(self.raw.connection).close()

    def redirect(self, new_rows: Any) -> None:
        if type(new_rows) is list:
            self.head, self.tail = iter(new_rows), None
        elif type(new_rows) is Streaming:
            self.head, self.tail, self.raw = new_rows.head, new_rows.tail, new_rows.raw
        else:  # no rows (a failed statement, a write): the loop ends, as over a sqlite3 cursor
            self.head = self.tail = None


def serving(cursor: Any, raw: Any, check: Callable[[Any], Any], hand_out: bool = False) -> Any:
    """The iterator that serves ``cursor``'s rows, after ``check(raw)`` ran the driver's checks (a
    fetch on the exhausted raw cursor: closed cursor or connection, wrong thread).

    ``hand_out``: the iterator goes to the caller (``iter(cur)``), who may keep it across a re-execute;
    ``_self_buffer`` then records it, and the next execute redirects it (``redirect_outstanding``).
    Iterators only the cursor uses itself (``fetchone``/``fetchmany``) need no redirecting.
    """
    rows = cursor._self_rows
    kind = type(rows)
    if kind is list:
        check(raw)
        cursor._self_list = rows
        rows = cursor._self_rows = iter(rows)
        if hand_out:
            cursor._self_buffer = cursor._self_list
    elif kind is LIST_ITERATOR:
        check(raw)
        if hand_out:
            cursor._self_buffer = cursor._self_list
    elif kind is Streaming:
        rows.check_usable()
        if hand_out:
            cursor._self_buffer = rows
            for part in (rows.head, rows.tail):  # the tail, or a factories.Shaped head, holds the cursor weakly
                hold = getattr(part, "hold", None)
                if hold is not None:
                    hold()  # the caller's iterator keeps the cursor alive, as sqlite3's (the cursor) does
    return rows


def redirect_outstanding(cursor: Any, new_rows: Any) -> Any:
    """Point the iterator handed out for the previous statement at ``new_rows``; returns what the
    cursor serves from now on.

    sqlite3's iterator is the cursor, so a loop over it continues with whatever the cursor executes
    next. Ours is a list iterator; splicing the new rows in at its position gives the same effect.
    A new result that streams (past ``row_cap``) or has no rows just ends the old iterator. An
    iterator that already raised StopIteration never yields again, so then the new rows are served
    afresh instead.
    """
    buffer, outstanding = cursor._self_buffer, cursor._self_rows
    cursor._self_buffer = None
    if isinstance(buffer, Streaming):
        buffer.redirect(new_rows)
        if type(new_rows) is list or type(new_rows) is Streaming:
            cursor._self_buffer = buffer
            return buffer
        return new_rows
    position = len(buffer) - operator.length_hint(outstanding)
    del buffer[position:]
    if type(new_rows) is not list:
        return new_rows
    buffer.extend(new_rows)
    if operator.length_hint(outstanding) != len(new_rows):  # exhausted: it ignores the new rows
        return new_rows
    cursor._self_buffer = cursor._self_list = buffer
    return outstanding


def run_unprobed(cursor: Any, raw: Any, guard: ConnectionState, sql: Any, many: bool, call: Callable[[], Any]) -> None:
    """``executemany`` (``many``) or ``executescript`` through ``call()``: passed through unprobed."""
    mode = guard.policy.mode
    note = GUARD_OFF if mode == "off" else MANY_NOT_PROBED
    cursor._self_report = None
    # executemany ends a loop over the previous result, as over sqlite3's cursor; executescript
    # runs on a cursor of its own inside sqlite3, so a loop over this one goes on.
    if many and cursor._self_buffer is not None:
        redirect_outstanding(cursor, raw)
    cursor._self_rows = raw
    if guard.restore_writable:
        restore_writable(guard)
    try:
        lock = guard.lock
        if lock is None:
            call()
        else:
            with lock:
                call()
    except Exception as error:
        trigger, text = (None, None) if mode == "off" else (EXEC_ERROR, describe_error(error))
        cursor._self_state = unprobed(mode, sql, note, trigger, text)
        raise
    finally:
        if guard.schema_facts is not None and guard.engine is not SQLITE:
            forget_schema(guard)  # a script or batch may change the schema; cheap to re-read once
    cursor._self_state = unprobed(mode, sql, note)


def report_of(cursor: Any) -> GuardReport | None:
    """``guard_report``: built from the state on first read. ``_self_report`` pairs a built report with
    the state it describes, so executing never has to clear it."""
    global _last_report
    current = cursor._self_state
    if current is None:
        return None
    built = cursor._self_report
    if built is not None and built[0] is current:
        return built[1]  # type: ignore[no-any-return]
    # A statement repeated with the same facts (a point query by key: one healthy row, untimed) gets the
    # report already built for them: reports are immutable, and building one costs more than the probe.
    last = _last_report
    if last[0] == current:
        report = last[1]
    else:
        report = GuardReport.from_state(current)
        _last_report = (current, report)
    cursor._self_report = (current, report)
    return report


_last_report: tuple[ReportState | None, GuardReport | None] = (None, None)
"""The last report built in this process, with the state it was built from (one pair, replaced whole)."""


# --------------------------------------------------------------------------------------------------
# After the I/O layer executed and fetched
# --------------------------------------------------------------------------------------------------


def after_fetch(
    cursor: Any,
    raw: Any,
    guard: ConnectionState,
    sql: str,
    parameters: Any,
    rows: list[Any],
    rescue_inputs: RescueInputs | None,
    tail: Callable[[Any], Any],
) -> tuple[Any, ReportState]:
    """Probe the fetched ``rows`` (at most ``row_cap + 1``), maybe repair; returns what the cursor
    serves and the report state. ``tail(raw)`` gives the driver's cursor and its iterator over the
    rows past the cap, as ``Streaming`` keeps them."""
    count = len(rows)
    if 0 < count < guard.quick_below and type(rows) is list and (count < guard.p2_rows or not mentions_distinct(sql)):
        # The common case first: a small result with no duplicate row at all is healthy under every
        # policy (no flag, no P1; too small for P2 or no DISTINCT), so nothing below applies to it. A single row needs
        # no comparison, only the check that it can be hashed (as set() would): its probe is not timed.
        try:
            if count == 1:
                hash(rows[0])
                return rows, _new_state(
                    ReportState, (guard.mode, sql, sql, None, "none", 1, 1, 1, None, None, (), 0, None, None, None)
                )
            started = _perf_ns()
            if len(set(rows)) == count:
                return rows, _new_state(
                    ReportState,
                    (guard.mode, sql, sql, None, "none", count, count, count, None, None, (), _perf_ns() - started,
                     None, None, None),
                )  # fmt: skip
        except Exception:  # rows that cannot be hashed or compared: the general path below sorts them out
            pass
    policy = guard.policy
    mode = policy.mode
    if count > policy.row_cap:
        note = f"more than row_cap={policy.row_cap} rows: not probed, rows stream through unchanged"
        return Streaming(rows, *tail(raw)), unprobed(mode, sql, note)
    if type(rows) is BytesCapped:
        note = f"more than byte_cap={policy.byte_cap:,} bytes (estimated): not probed, rows stream through unchanged"
        return Streaming(list(rows), *tail(raw)), unprobed(mode, sql, note)
    patch = mode == "patch"
    # P2's cheap precondition (policy.removal_applies without its unique == count part, known below).
    removal_candidate = patch and count >= policy._p2_min_rows and mentions_distinct(sql)
    started = _perf_ns()
    unique: int | PartialCount
    try:
        if count < _SMALL_RESULT or removal_candidate:
            unique = len(set(rows))
            # classify(), inlined: the ratio exactly as defined (see probe.classify)
            trigger = (
                EMPTY_RESULT
                if count == 0
                else (CARTESIAN_EXPLOSION if (count - unique) / count >= policy.tau_inject else None)
            )
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
            return rows, unprobed(mode, sql, f"rows cannot be compared ({describe_error(error)}): not probed")
        trigger = classify(count, unique, policy.tau_inject)
    except Exception as error:  # a value whose __hash__ raises something else: same
        return rows, unprobed(mode, sql, f"rows cannot be compared ({describe_error(error)}): not probed")
    detect_ns = _perf_ns() - started
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
        exact_unique = unique.exact() if isinstance(unique, PartialCount) else unique
        outcome = repair_statement(
            guard, getattr(raw, "row_factory", None), sql, parameters, rows, exact_unique, trigger, rescue_inputs
        )
        repaired = state(
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
            cursor._self_rescued_description = (repaired, outcome.description)
        return outcome.rows, repaired
    return rows, _new_state(
        ReportState,
        (mode, sql, sql, trigger, "none", count, unique, count, None, None, (), detect_ns, None, None, None),
    )


def after_error(
    cursor: Any,
    raw: Any,
    guard: ConnectionState,
    sql: str,
    parameters: Any,
    error: Exception,
    rescue_inputs: RescueInputs | None,
) -> tuple[Any, ReportState] | None:
    """The statement failed: a rescue may serve a candidate instead (returns its rows and state);
    otherwise records the failure on ``cursor`` and returns None, and the caller re-raises ``error``."""
    mode = guard.policy.mode
    if guard.schema_facts is not None and guard.engine is not SQLITE and _pattern("unknown_name").search(str(error)):
        forget_schema(guard)  # an unknown table: the cached facts may predate someone's DDL
    failed = unprobed(mode, sql, None, EXEC_ERROR, describe_error(error))
    if rescue_inputs is not None and mode == "patch" and _LOCKED in str(error):
        # Every candidate would wait out the same busy timeout again.
        refusal = RuleDecision("rescue", False, "candidates not run: the database is locked")
        failed = failed._replace(decisions=(refusal,))
    elif rescue_inputs is not None and mode == "patch":
        outcome = repair_statement(
            guard, getattr(raw, "row_factory", None), sql, parameters, None, None, EXEC_ERROR, rescue_inputs
        )
        if outcome.rescue is not None and outcome.rescue.chosen_index is not None:
            rescued = state(
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
                cursor._self_rescued_description = (rescued, outcome.description)
            return outcome.rows, rescued
        failed = failed._replace(decisions=outcome.decisions, patch_ns=outcome.elapsed_ns, rescue=outcome.rescue)
    cursor._self_rows = raw
    cursor._self_state = failed
    return None


def repair_statement(
    guard: ConnectionState,
    row_factory: Any,
    sql: str,
    parameters: Any,
    rows: list[Any] | None,
    unique: int | None,
    trigger: str | None,
    rescue_inputs: RescueInputs | None,
) -> PatchOutcome:
    """Rescue and patch rules for a flagged (or DISTINCT) statement, with the connection's I/O."""
    # Imported here so that sqlglot (and, through a rescuer, litellm) is loaded by the first statement
    # that needs a repair, not by ``import guarded_sqlite``.
    from .patching import PatchOutcome, repair

    policy = guard.policy
    engine, raw = guard.engine, guard.raw

    def rerun(new_sql: str, max_rows: int) -> list[Any] | None:
        return read_only_fetch(guard, new_sql, parameters, row_factory, max_rows)

    context = None if rescue_inputs is None else CandidateRunner(guard, rescue_inputs, parameters, row_factory)
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
            functools.partial(explain, guard),
        )
    except TransactionLost:
        raise
    except Exception as error:  # a bug in the analysis must never cost the caller their result
        rule: RuleName = "P1" if trigger == CARTESIAN_EXPLOSION else ("P2" if trigger is None else "rescue")
        decision = RuleDecision(rule, False, f"internal error while repairing: {describe_error(error)}")
        return PatchOutcome(sql, rows if rows is not None else [], "none", (decision,), 0)


# --------------------------------------------------------------------------------------------------
# Provenance: schema facts and verdicts per connection
# --------------------------------------------------------------------------------------------------


def explain(guard: ConnectionState, sql: str) -> Provenance:
    """The provenance of ``sql``'s duplicates on this connection: the verdict cached for this schema
    version, or analysed now (reading the catalog first if the facts are missing or stale)."""
    from .provenance import Provenance, analyse

    try:
        facts = guard.schema_facts
        if guard.engine is SQLITE:
            known = guard.schema_version
            version = _sqlite_version(guard, known)
            if facts is None or version != known:
                facts = _read_schema(guard)
                # Asked by known names, the version misses schemas attached since: list them anew.
                guard.schema_version = _sqlite_version(guard, None) if known else version
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


def _read_schema(guard: ConnectionState) -> SchemaFacts:
    from .schema import read_duckdb_schema, read_postgres_schema, read_sqlite_schema

    reader = {"sqlite": read_sqlite_schema, "duckdb": read_duckdb_schema}.get(guard.engine.name, read_postgres_schema)
    facts = reader(guard.raw)
    guard.schema_facts = facts
    guard.verdicts.clear()
    return facts


def forget_schema(guard: ConnectionState) -> None:
    """Drop the cached schema facts and verdicts: the next rule that asks reads the catalog again."""
    guard.schema_facts = None
    guard.verdicts.clear()


def _sqlite_version(guard: ConnectionState, known: Any) -> tuple[tuple[str, int], ...]:
    """``schema.sqlite_schema_version`` of the connection, asking only for the schemas of ``known`` (the
    last answer): a PRAGMA per schema. A schema attached later changes no name the cached verdicts
    resolved (SQLite looks in temp, main, then in attach order); one detached since gives a token that
    matches nothing, which reads everything again. The cursor is kept on the connection's guard (only
    used under its lock), which saves creating one per check."""
    from .schema import sqlite_schema_version

    cursor = guard.schema_cursor
    if cursor is None:
        cursor = guard.schema_cursor = sqlite3.Cursor(guard.raw)
        cursor.row_factory = None
    return sqlite_schema_version(guard.raw, [name for name, _ in known] if known else None, cursor)


# --------------------------------------------------------------------------------------------------
# The guard's own statements
# --------------------------------------------------------------------------------------------------


def read_only_fetch(
    guard: ConnectionState,
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


def restore_writable(guard: ConnectionState) -> None:
    """Switch query_only off before the caller's next statement, after a guard statement could not."""
    if SQLITE.restore_writable(guard.raw):
        guard.restore_writable = False


class CandidateRunner:
    """The connection side of a rescue: runs candidates read-only, summarises the schema, keeps the
    connection's rescue budget (see ``patching.RescueContext``)."""

    def __init__(self, guard: ConnectionState, inputs: RescueInputs, parameters: Any, row_factory: Any) -> None:
        self._guard = guard
        self._parameters = parameters
        self._row_factory = row_factory
        self._descriptions: dict[str, Any] = {}
        self.candidates: Sequence[str] = inputs.candidates
        self.question: str | None = inputs.question
        self.hint: str | None = inputs.hint

    def run_candidate(self, sql: str) -> list[Any] | None:
        description: list[Any] = []
        rows = read_only_fetch(
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
        if policy.max_rescue_cost is not None and guard.rescue_spend == math.inf:
            return "rescue budget exhausted: a rescue reported an unusable cost (NaN, infinite or negative)"
        if policy.max_rescue_cost is not None and guard.rescue_spend >= policy.max_rescue_cost:
            return (
                f"rescue budget exhausted: ${guard.rescue_spend:.6f} of max_rescue_cost=${policy.max_rescue_cost} spent"
            )
        return None

    def record_rescue(self, cost_usd: float | None) -> None:
        self._guard.rescues += 1
        if cost_usd is None:  # unknown price: documented as not counted
            return
        if math.isfinite(cost_usd) and cost_usd >= 0:
            self._guard.rescue_spend += cost_usd
        else:
            # NaN, infinite or negative: a broken price. Spend cannot be known any more, so a spending
            # cap, if set, counts as reached rather than silently switched off.
            self._guard.rescue_spend = math.inf


__all__ = [
    "GUARD_OFF",
    "MANY_NOT_PROBED",
    "NOTHING",
    "NOT_ROW_RETURNING",
    "NO_PARAMETERS",
    "BytesCapped",
    "CandidateRunner",
    "ConnectionState",
    "GuardedConnection",
    "GuardedCursor",
    "RescueInputs",
    "Streaming",
    "after_error",
    "after_fetch",
    "changes_schema",
    "explain",
    "fetch_rest",
    "forget_schema",
    "read_only_fetch",
    "redirect_outstanding",
    "repair_statement",
    "report_of",
    "restore_writable",
    "run_unprobed",
    "serving",
    "state",
    "unprobed",
]
