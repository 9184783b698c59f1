"""The guard's decision logic, shared by every way a connection is guarded.

Two thin I/O layers sit on top of this module: ``sqlite_fast`` (the ``sqlite3.Connection`` and
``sqlite3.Cursor`` subclasses that ``connect()`` and ``install()`` open) and the ``wrapt`` proxies of
``wrap()`` (``proxy``, ``proxy_duckdb``, ``proxy_psycopg``). A layer executes the statement and fetches
its result once (up to ``row_cap + 1`` rows); everything after that is here: the probe, the patch rules
and the rescue (``after_fetch``, ``after_error``), the report state and the per-connection facts
(``ConnectionState``). Serving the buffered rows (``serving``, ``redirect_outstanding``, ``Streaming``)
is in ``guarded_sqlite.serving``, re-exported here for the I/O layers.

Cursors of both layers keep the same attributes (``_self_rows``, ``_self_buffer``, ``_self_state``,
``_self_report``, ``_self_rescued_description``; the ``_self_`` prefix is what ``wrapt`` stores on a
proxy itself), so the functions below work on either.

Provenance. A patch rule that needs to know why duplicates repeat asks ``catalog.explain``, which
keeps the connection's schema view in ``ConnectionState.catalog`` (see ``guarded_sqlite.catalog`` for
what is read and when it is reused); ``forget_schema`` drops it. DuckDB and PostgreSQL have no cheap
way to tell a schema change: their view is dropped when a statement through this connection looks like
DDL (``CREATE``/``DROP``/``ALTER``/...; also every ``executescript``) or fails with an unknown-table error.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from .connection_state import (  # SMALL_RESULT, ConnectionState, policy_scope and settle re-exported
    QUERY_ONLY_FENCE,
    QUERY_ONLY_FENCED,
    QUERY_ONLY_KEPT,
    QUERY_ONLY_RESTORE,
    SMALL_RESULT,
    ConnectionState,
    policy_scope,
    settle,
)
from .deadlines import time_left
from .engines import NO_PARAMETERS, SQLITE, GuardStatement, RerunRefused, WritableNotRestored
from .errors import TransactionLost, describe_error
from .policy import GuardPolicy
from .probe import (
    AGGREGATE_FANOUT,
    CARTESIAN_EXPLOSION,
    EMPTY_RESULT,
    EXEC_ERROR,
    PartialCount,
    classify,
    count_unique,
    mentions_distinct,
    mentions_value_aggregate_over_join,
    probe_large,
)
from .report import GuardReport, ReportState, RuleDecision, RuleName
from .serving import (  # re-exported: the I/O layers take everything they share from core
    FIRST_ROWS,
    LIST_ITERATOR,
    NOTHING,
    BytesCapped,
    Streaming,
    buffer_served,
    fetch_rest,
    redirect_outstanding,
    row_bytes,
    serving,
)
from .sinks import built, log_statement

if TYPE_CHECKING:
    from .fanout import FanoutOutcome
    from .patching import PatchOutcome

_SMALL_RESULT = SMALL_RESULT

NOT_ROW_RETURNING = "statement returns no rows"
MANY_NOT_PROBED = "executemany/executescript results are not probed"
GUARD_OFF = "guard is off"
_LOCKED = "database is locked"


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


_new_state = tuple.__new__
_perf_ns = time.perf_counter_ns


class GuardedConnection:
    """A guarded connection: ``connect()``'s ``sqlite3.Connection`` subclasses and ``wrap()``'s proxies
    are both instances of this class (it holds no behaviour of its own)."""

    __slots__ = ()

    if TYPE_CHECKING:  # for type checkers: the guard's attributes (the driver's come from its own class)

        @property
        def guard_policy(self) -> GuardPolicy: ...

        @property
        def guard_report(self) -> GuardReport | None: ...


class GuardedCursor:
    """A guarded cursor, of either kind (see ``GuardedConnection``)."""

    __slots__ = ()

    if TYPE_CHECKING:  # for type checkers: the guard's attributes (the driver's come from its own class)

        @property
        def guard_report(self) -> GuardReport | None: ...


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
    aggregates: tuple[Any, ...] = (),
) -> ReportState:
    """A ``ReportState`` built without the named tuple's Python-level ``__new__``."""
    return _new_state(
        ReportState,
        (mode, sql, final_sql, trigger, action, rows, unique, final_rows, note, error, decisions, detect_ns, patch_ns,
         rescue, provenance, aggregates),
    )  # fmt: skip


def unprobed(
    mode: str, sql: str, note: str | None, trigger: str | None = None, error: str | None = None
) -> ReportState:
    """The state of a statement the probe did not measure."""
    return _new_state(
        ReportState, (mode, sql, sql, trigger, "none", None, None, None, note, error, (), None, None, None, None, ())
    )


class RescueInputs:
    """What the caller passed for a rescue: candidate SQLs and the question they answer."""

    __slots__ = ("candidates", "hint", "question")

    def __init__(self, candidates: Sequence[str], question: str | None, hint: str | None) -> None:
        if isinstance(candidates, str) or not all(isinstance(c, str) for c in candidates):
            raise TypeError("candidates must be a sequence of SQL strings")
        self.candidates = tuple(candidates)
        self.question = question
        self.hint = hint


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
    if guard.query_only_due:
        settle_query_only(guard)
    try:
        lock = guard.lock
        if lock is None:
            call()
        else:
            with lock:
                call()
    except Exception as error:
        trigger, text = (None, None) if mode == "off" else (EXEC_ERROR, describe_error(error))
        cursor._self_state = failed = unprobed(mode, sql, note, trigger, text)
        if trigger is not None:
            log_statement(failed, guard.dialect)
        settle(guard, failed, cursor)
        raise
    finally:
        guard.epoch += 1  # a script or batch may change what no version number shows
        if guard.catalog is not None and guard.engine is not SQLITE:
            forget_schema(guard)  # a script or batch may change the schema; cheap to re-read once
    cursor._self_state = done = unprobed(mode, sql, note)
    settle(guard, done, cursor)


def report_of(cursor: Any) -> GuardReport | None:
    """``guard_report``: built from the state on first read. ``_self_report`` pairs a built report with
    the state it describes, so executing never has to clear it."""
    current = cursor._self_state
    if current is None:
        return None
    built_report = cursor._self_report
    if built_report is not None and built_report[0] is current:
        return built_report[1]  # type: ignore[no-any-return]
    report = built(current)
    cursor._self_report = (current, report)
    return report


def last_report(guard: ConnectionState) -> GuardReport | None:
    """The connection's ``guard_report``: the report of the last statement any of its cursors ran."""
    current = guard.last
    return None if current is None else built(current)


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
    screen = guard.aggregate_screen
    if (
        0 < count < guard.quick_below
        and type(rows) is list
        and (count < guard.p2_rows or not mentions_distinct(sql))
        and (screen is None or screen.get(sql) is False)
    ):
        # The common case first: a small result with no duplicate row at all is healthy under every
        # policy (no flag, no P1; too small for P2 or no DISTINCT), so nothing below applies to it. A single row needs
        # no comparison, only the check that it can be hashed (as set() would): its probe is not timed.
        try:
            if count == 1:
                hash(rows[0])
                return rows, _new_state(
                    ReportState, (guard.mode, sql, sql, None, "none", 1, 1, 1, None, None, (), 0, None, None, None, ())
                )
            started = _perf_ns()
            if len(set(rows)) == count:
                return rows, _new_state(
                    ReportState,
                    (guard.mode, sql, sql, None, "none", count, count, count, None, None, (), _perf_ns() - started,
                     None, None, None, ()),
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
        if trigger is not None or outcome.action != "none":
            log_statement(repaired, guard.dialect)
        return outcome.rows, repaired
    if trigger is None and screen is not None and count and mentions_value_aggregate_over_join(sql):
        fanned = check_aggregates(guard, raw, sql, parameters, rows)
        if fanned is not None:
            findings = fanned.findings
            checked = state(
                mode,
                sql,
                fanned.final_sql,
                AGGREGATE_FANOUT if findings else None,
                "aggregate_defanned" if fanned.decision.applied else "none",
                count,
                unique,
                len(fanned.rows),
                None,
                None,
                (fanned.decision,),
                detect_ns,
                fanned.elapsed_ns,
                aggregates=findings,
            )
            if findings or not fanned.decision.applied:  # flagged, or at risk and not checked (DEBUG)
                log_statement(checked, guard.dialect)
            return fanned.rows, checked
    measured = _new_state(
        ReportState,
        (mode, sql, sql, trigger, "none", count, unique, count, None, None, (), detect_ns, None, None, None, ()),
    )
    if trigger is not None:
        log_statement(measured, guard.dialect)
    return rows, measured


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
    if guard.catalog is not None and guard.engine is not SQLITE and _pattern("unknown_name").search(str(error)):
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
            log_statement(rescued, guard.dialect)
            return outcome.rows, rescued
        failed = failed._replace(decisions=outcome.decisions, patch_ns=outcome.elapsed_ns, rescue=outcome.rescue)
    cursor._self_rows = raw
    cursor._self_state = failed
    log_statement(failed, guard.dialect)
    settle(guard, failed, cursor)
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
    from .catalog import explain
    from .patching import PatchOutcome, repair

    policy = guard.policy
    engine, raw = guard.engine, guard.raw

    def rerun(new_sql: str, max_rows: int) -> list[Any] | None:
        return read_only_fetch(guard, new_sql, parameters, row_factory, max_rows)

    def plain_rerun(new_sql: str, max_rows: int) -> list[Any] | None:
        # Only the join-copy check runs this, on a SELECT that calls no application function.
        return read_only_fetch(guard, new_sql, parameters, None, max_rows, writes_possible=False)

    rule: RuleName = "P1" if trigger == CARTESIAN_EXPLOSION else ("P2" if trigger is None else "rescue")
    if _call_time_passed():
        decision = RuleDecision(rule, False, f"not run: {_CALL_TIME_PASSED}")
        return PatchOutcome(sql, rows if rows is not None else [], "none", (decision,), 0)
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
            plain_rerun,
            functools.partial(user_functions, guard),
        )
    except TransactionLost:
        raise
    except Exception as error:  # a bug in the analysis must never cost the caller their result
        decision = RuleDecision(rule, False, f"internal error while repairing: {describe_error(error)}")
        return PatchOutcome(sql, rows if rows is not None else [], "none", (decision,), 0)


def user_functions(guard: ConnectionState) -> frozenset[str] | None:
    """The application's functions on the connection (None: they cannot be listed): the engine's list,
    read once per connection, and every function registered through the guarded connection since."""
    listed = guard.listed_functions
    if listed is None:
        listed = guard.engine.user_functions(guard.raw)
        if listed is None:
            return None
        guard.listed_functions = listed
    return listed | guard.registered_functions


def check_aggregates(
    guard: ConnectionState, raw: Any, sql: str, parameters: Any, rows: list[Any]
) -> FanoutOutcome | None:
    """The aggregate fan-out rule for a healthy result the pre-screen passed (``guarded_sqlite.fanout``);
    on SQLite a confirmation is reused while nothing it read can have changed (``guarded_sqlite.confirmations``)."""
    if not _AGGREGATE_RULE:  # imported on first use: it loads sqlglot
        from . import confirmations
        from .catalog import plan
        from .fanout import confirm

        _AGGREGATE_RULE.extend((plan, confirm, confirmations))
    plan, confirm, kept = _AGGREGATE_RULE
    if _call_time_passed():
        from .fanout import FanoutOutcome

        return FanoutOutcome((), rows, sql, RuleDecision("aggregate", False, f"not checked: {_CALL_TIME_PASSED}"), 0)
    try:
        # The written statement's column names, before the catalog read (DuckDB's connection is its
        # own cursor: a read would replace its description).
        description = getattr(raw, "description", None)
        names = [column[0] for column in description] if description else None
        key = token = entry = None
        if guard.engine is SQLITE:
            params = kept.parameters_key(parameters)
            if params is not None:
                key = (sql, params, guard.policy.row_cap, guard.defan)
                entry = guard.confirmations.get(key)
        if entry is not None:
            token = kept.sqlite_token(_plain_cursor(guard), guard.raw, guard.epoch)
            if entry.token == token and entry.functions == user_functions(guard):
                kept_outcome = entry.outcome
                if kept_outcome is None:
                    return None
                decision = kept_outcome.decision
                served = rows
                if decision.applied and entry.corrected is not None:
                    shape = guard.engine.plain_rows(raw)[1]
                    served = shape(list(entry.corrected)) if shape is not None else list(entry.corrected)
                reused = RuleDecision(decision.rule, decision.applied, f"{decision.reason}; {kept.REUSED}")
                return cast("FanoutOutcome", kept_outcome._replace(rows=served, decision=reused, elapsed_ns=0))
        found = plan(guard, sql)
        if not found.risks:
            return None
        try:
            # A paging query checks the groups it served (guarded_sqlite.paging).
            check_sql = kept.bounded_check(found, rows, guard.dialect)
        except ValueError as refusal:
            check_sql, note = None, str(refusal)
        else:
            note = found.note
        if key is not None and token is None and not found.hazard:
            # Read before the check runs: a commit meanwhile makes the kept rows older than the token says.
            token = kept.sqlite_token(_plain_cursor(guard), guard.raw, guard.epoch)
        checked_plan = (
            found if check_sql == found.check_sql else dataclasses.replace(found, check_sql=check_sql, note=note)
        )
        plain, shape = guard.engine.plain_rows(raw)
        ran: list[list[Any] | None] = []
        started = guard.started
        own = (_perf_ns() - started) / 1e9 if started else None
        left = time_left(None)
        limit = kept.budget(own, guard.policy.rerun_timeout, left)
        if limit <= 0:
            return _not_looked(sql, rows, kept.over_budget(limit, own, left))
        stopped: list[bool] = []
        # Without a hazard, and with no application function replacing a built-in it names, the check
        # calls only the engine's deterministic built-ins and cannot write: SQLite's query_only is then
        # left alone, which keeps the connection's prepared statements (SQLite expires all of them when
        # a flag PRAGMA changes; re-preparing cost about as much as running the check).
        # A hazard (a name that may be a user function) makes the check able to write; on SQLite, where
        # every function it may call that is not built in was registered through this connection's own
        # methods (Python code, which reaches the connection through them), the check is fenced instead.
        own_methods = guard.engine is SQLITE and guard.proxy is guard.raw and not guard.extensions_loadable
        functions = user_functions(guard) if not found.hazard or own_methods else None
        check_text = check_sql or ""
        writes_possible = bool(found.hazard) or functions is None or kept.names_function(check_text, functions)
        fenced = (
            writes_possible
            and own_methods
            and functions is not None
            and not kept.names_function(check_text, functions - guard.registered_functions)
        )

        def rerun(new_sql: str, max_rows: int) -> list[Any] | None:
            began = _perf_ns()
            try:
                checked = read_only_fetch(
                    guard,
                    new_sql,
                    parameters,
                    plain,
                    max_rows,
                    time_limit=limit,
                    writes_possible=writes_possible,
                    fenced=fenced,
                )
            except Exception:  # an interrupt at the budget: told apart by the time it took
                if (_perf_ns() - began) / 1e9 >= limit * 0.9:
                    stopped.append(True)
                raise
            ran.append(checked)
            return checked

        outcome = confirm(
            sql, rows, checked_plan, rerun, guard.policy.row_cap, guard.defan, guard.dialect, names, shape
        )
        if stopped:
            return _not_looked(sql, rows, kept.over_budget(limit, own, left))
        if token is not None and len(ran) == 1 and not found.hazard:
            checked = ran[0]
            # ``functions`` was read before the check; a registration since moved the epoch in the token.
            if (
                functions is not None
                and (checked is None or len(checked) <= kept.KEPT_ROWS)
                and not kept.names_function(sql, functions)
            ):
                width = found.width
                corrected = None if checked is None else [tuple(row[:width]) for row in checked]
                # Not this execution's rows: each reuse serves its own.
                stripped = None if outcome is None else outcome._replace(rows=[])
                kept.remember(guard.confirmations, key, kept.Kept(token, functions, stripped, corrected))
        return outcome
    except TransactionLost:
        raise
    except Exception as error:  # a bug in the analysis must never cost the caller their result
        from .fanout import FanoutOutcome

        why = f"internal error while checking aggregates: {describe_error(error)}"
        return FanoutOutcome((), rows, sql, RuleDecision("aggregate", False, why), 0)


def _not_looked(sql: str, rows: list[Any], why: str) -> FanoutOutcome:
    from .fanout import FanoutOutcome

    return FanoutOutcome((), rows, sql, RuleDecision("aggregate", False, why), 0)


def _plain_cursor(guard: ConnectionState) -> Any:
    """The schema view's plain cursor (made with the view): the guard's own reads on SQLite."""
    from .catalog import schema_view
    from .schema import plain_cursor

    view = schema_view(guard)
    cur = view.cursor  # type: ignore[union-attr]
    if cur is None:
        cur = view.cursor = plain_cursor(view.raw)  # type: ignore[union-attr]
    return cur


_AGGREGATE_RULE: list[Any] = []
"""``catalog.plan``, ``fanout.confirm`` and ``guarded_sqlite.confirmations``, once the rule first runs."""


def forget_schema(guard: ConnectionState) -> None:
    """Drop the connection's schema view (facts and verdicts): the next rule that asks reads anew."""
    guard.catalog = None


# --------------------------------------------------------------------------------------------------
# The guard's own statements
# --------------------------------------------------------------------------------------------------


_CALL_TIME_PASSED = "the call's time limit has passed"


def _call_time_passed() -> bool:
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
        raise RerunRefused(_CALL_TIME_PASSED)
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
    "FIRST_ROWS",
    "GUARD_OFF",
    "LIST_ITERATOR",
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
    "buffer_served",
    "changes_schema",
    "fetch_rest",
    "forget_schema",
    "last_report",
    "policy_scope",
    "read_only_fetch",
    "redirect_outstanding",
    "repair_statement",
    "report_of",
    "row_bytes",
    "run_unprobed",
    "serving",
    "settle",
    "settle_query_only",
    "state",
    "unprobed",
]
