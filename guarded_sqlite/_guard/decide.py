"""The guard's decision logic, shared by every way a connection is guarded.

Two thin I/O layers sit on top of this module: ``sqlite_fast`` (the ``sqlite3.Connection`` and
``sqlite3.Cursor`` subclasses that ``connect()`` and ``install()`` open) and the ``wrapt`` proxies of
``wrap()`` (``proxy``, ``proxy_duckdb``, ``proxy_psycopg``). A layer executes the statement and fetches
its result once (up to ``row_cap + 1`` rows); everything after that is here: the probe, the patch rules
and the rescue (``after_fetch``, ``after_error``), the report state and the per-connection facts
(``ConnectionState``). Serving the buffered rows (``serving``, ``redirect_outstanding``, ``Streaming``)
is in ``guarded_sqlite._core.serving``, re-exported here for the I/O layers.

Cursors of both layers keep the same attributes (``_self_rows``, ``_self_buffer``, ``_self_state``,
``_self_report``, ``_self_rescued_description``; the ``_self_`` prefix is what ``wrapt`` stores on a
proxy itself), so the functions below work on either.

Provenance. A patch rule that needs to know why duplicates repeat asks ``catalog.explain``, which
keeps the connection's schema view in ``ConnectionState.catalog`` (see ``guarded_sqlite._analysis.catalog`` for
what is read and when it is reused); ``forget_schema`` drops it. DuckDB and PostgreSQL have no cheap
way to tell a schema change: their view is dropped when a statement through this connection looks like
DDL (``CREATE``/``DROP``/``ALTER``/...; also every ``executescript``) or fails with an unknown-table error.
"""

from __future__ import annotations

import functools
import math
import re
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._core.probe import (
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
from .._core.serving import (  # re-exported: the I/O layers take everything they share from here
    DRIVER,
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
from .._engines import NO_PARAMETERS, SQLITE
from ..errors import TransactionLost, describe_error
from ..policy import GuardPolicy
from ..report import GuardReport, ReportState, RuleDecision, RuleName, routine_aggregate
from ..sinks import built, log_statement
from .aggregate_check import check_aggregates, reached_functions, reads_joining_view, user_functions
from .connection_state import (  # SMALL_RESULT, ConnectionState, policy_scope and settle re-exported
    SMALL_RESULT,
    ConnectionState,
    policy_scope,
    settle,
)
from .guard_statements import (  # read_only_fetch and settle_query_only re-exported for the I/O layers
    CALL_TIME_PASSED,
    call_time_passed,
    read_only_fetch,
    settle_query_only,
)

if TYPE_CHECKING:
    from .._analysis.provenance import Provenance
    from .._rules.fanout import FanoutOutcome
    from .._rules.patching import PatchOutcome

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
        "unknown_name": r"no such table|does not exist|doesn't exist|catalog error|undefined",
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


def unprobed(
    preset: str, sql: str, note: str | None, trigger: str | None = None, error: str | None = None
) -> ReportState:
    """The state of a statement the probe did not measure (built by position: see ``ReportState``)."""
    return _new_state(
        ReportState, (preset, sql, sql, trigger, "none", None, None, None, note, error, (), None, None, None, None, ())
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


def run_unprobed(cursor: Any, guard: ConnectionState, sql: Any, many: bool, call: Callable[[], Any]) -> None:
    """``executemany`` (``many``) or ``executescript`` through ``call()``: passed through unprobed."""
    mode = guard.policy.mode
    note = GUARD_OFF if mode == "off" else MANY_NOT_PROBED
    cursor._self_report = None
    # executemany ends a loop over the previous result, as over sqlite3's cursor; executescript
    # runs on a cursor of its own inside sqlite3, so a loop over this one goes on.
    if many and cursor._self_buffer is not None:
        redirect_outstanding(cursor, DRIVER)
    cursor._self_rows = DRIVER
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
        cursor._self_state = failed = unprobed(guard.preset, sql, note, trigger, text)
        if trigger is not None:
            log_statement(failed, guard.dialect)
        settle(guard, failed, cursor)
        raise
    finally:
        guard.epoch += 1  # a script or batch may change what no version number shows
        if guard.catalog is not None and guard.engine is not SQLITE:
            forget_schema(guard)  # a script or batch may change the schema; cheap to re-read once
    cursor._self_state = done = unprobed(guard.preset, sql, note)
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
        # policy (no flag, no P1; too small for P2 or no DISTINCT), so nothing below applies to it. Its
        # state is built by position, 0.8 µs cheaper than by name (see ``ReportState``). A single row needs
        # no comparison, only the check that it can be hashed (as set() would): its probe is not timed.
        try:
            if count == 1:
                hash(rows[0])
                # Its state holds nothing but the preset and the SQL: a statement repeated (a point query
                # by key) gets its last one again (states are immutable), not 16 fields built anew.
                state = guard.one_row
                if state is None or state[1] != sql:
                    state = guard.one_row = _new_state(
                        ReportState,
                        (guard.preset, sql, sql, None, "none", 1, 1, 1, None, None, (), 0, None, None, None, ()),
                    )
                return rows, state
            started = _perf_ns()
            if len(set(rows)) == count:
                return rows, _new_state(
                    ReportState,
                    (guard.preset, sql, sql, None, "none", count, count, count, None, None, (), _perf_ns() - started,
                     None, None, None, ()),
                )  # fmt: skip
        except Exception:  # rows that cannot be hashed or compared: the general path below sorts them out
            pass
    policy = guard.policy
    mode = policy.mode
    if count > policy.row_cap:
        note = f"more than row_cap={policy.row_cap} rows: not probed, rows stream through unchanged"
        return Streaming(rows, *tail(raw)), unprobed(guard.preset, sql, note)
    if type(rows) is BytesCapped:
        note = f"more than byte_cap={policy.byte_cap:,} bytes (estimated): not probed, rows stream through unchanged"
        return Streaming(list(rows), *tail(raw)), unprobed(guard.preset, sql, note)
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
            return rows, unprobed(guard.preset, sql, f"rows cannot be compared ({describe_error(error)}): not probed")
        trigger = classify(count, unique, policy.tau_inject)
    except Exception as error:  # a value whose __hash__ raises something else: same
        return rows, unprobed(guard.preset, sql, f"rows cannot be compared ({describe_error(error)}): not probed")
    detect_ns = _perf_ns() - started
    unread: RuleDecision | None = None  # the aggregate rule's refusal, for the row rules' report
    looked: FanoutOutcome | None = None  # the aggregate rule's outcome, where it already ran
    if patch and screen is not None and rescue_inputs is None and unique != count and count and _screened(guard, sql):
        # Repeated rows of an aggregate over a join (totals that coincide, a label per group) are the
        # aggregate rule's before the row repair's: P1 leaves a grouped result as it is, and the
        # inflated values would go unchecked (c34).
        fanned = looked = check_aggregates(guard, raw, sql, parameters, rows)
        if fanned.findings:
            return fanned.rows, _aggregate_state(guard, sql, AGGREGATE_FANOUT, fanned, count, unique, detect_ns)
        if not (fanned.decision.applied or routine_aggregate(fanned.decision)):
            # A refusal (ROLLUP, a correlated subquery ...) goes on the report whatever the row rules do (D8).
            unread = fanned.decision
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
            guard, guard.engine.row_factory(raw), sql, parameters, rows, exact_unique, trigger, rescue_inputs
        )
        if unread is not None:
            outcome = outcome._replace(decisions=(*outcome.decisions, unread))
        return _served_repair(
            cursor, guard, sql, trigger, outcome,
            rows=count, unique_rows=unique, detect_ns=detect_ns, error=None, provenance=outcome.provenance,
        )  # fmt: skip
    if (
        (trigger is None or (trigger == EMPTY_RESULT and rescue_inputs is None))
        and screen is not None
        and _screened(guard, sql)
    ):
        # An empty result too: an inflated HAVING (or an outer filter over an inflated subquery) can
        # filter out every group the truth keeps.
        fanned = looked if looked is not None else check_aggregates(guard, raw, sql, parameters, rows)
        trigger = AGGREGATE_FANOUT if fanned.findings else trigger
        return fanned.rows, _aggregate_state(guard, sql, trigger, fanned, count, unique, detect_ns)
    measured = ReportState(
        preset=guard.preset,
        sql=sql,
        final_sql=sql,
        trigger=trigger,
        action="none",
        rows=count,
        unique_rows=unique,
        final_rows=count,
        note=None,
        error=None,
        decisions=(),
        detect_ns=detect_ns,
        patch_ns=None,
    )
    if trigger is not None:
        log_statement(measured, guard.dialect)
    return rows, measured


def _screened(guard: ConnectionState, sql: str) -> bool:
    """Whether the aggregate rule looks at ``sql``: its text has a value aggregate and a join, or a value
    aggregate and the name of one of the connection's views that join (c35)."""
    known = mentions_value_aggregate_over_join(sql)
    return known is True or (bool(known) and reads_joining_view(guard, known))  # type: ignore[arg-type]


def _aggregate_state(
    guard: ConnectionState,
    sql: str,
    trigger: str | None,
    fanned: FanoutOutcome,
    count: int,
    unique: int | PartialCount,
    detect_ns: int,
) -> ReportState:
    """The report state of a statement the aggregate rule decided (``fanned``); logs it where flagged,
    or at risk and not checked (DEBUG)."""
    checked = ReportState(
        preset=guard.preset,
        sql=sql,
        final_sql=fanned.final_sql,
        trigger=trigger,
        action="aggregate_defanned" if fanned.decision.applied else "none",
        rows=count,
        unique_rows=unique,
        final_rows=len(fanned.rows),
        note=None,
        error=None,
        decisions=(fanned.decision,),
        detect_ns=detect_ns,
        patch_ns=fanned.elapsed_ns,
        aggregates=fanned.findings,
    )
    if fanned.findings or not (fanned.decision.applied or routine_aggregate(fanned.decision)):
        log_statement(checked, guard.dialect)
    return checked


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
    failed = unprobed(guard.preset, sql, None, EXEC_ERROR, describe_error(error))
    if rescue_inputs is not None and mode == "patch" and _LOCKED in str(error):
        # Every candidate would wait out the same busy timeout again.
        refusal = RuleDecision("rescue", False, "candidates not run: the database is locked")
        failed = failed._replace(decisions=(refusal,))
    elif rescue_inputs is not None and mode == "patch":
        outcome = repair_statement(
            guard, guard.engine.row_factory(raw), sql, parameters, None, None, EXEC_ERROR, rescue_inputs
        )
        if outcome.rescue is not None and outcome.rescue.chosen_index is not None:
            return _served_repair(
                cursor, guard, sql, EXEC_ERROR, outcome,
                rows=None, unique_rows=None, detect_ns=None, error=describe_error(error), provenance=None,
            )  # fmt: skip
        failed = failed._replace(decisions=outcome.decisions, patch_ns=outcome.elapsed_ns, rescue=outcome.rescue)
    cursor._self_rows = DRIVER
    cursor._self_state = failed
    log_statement(failed, guard.dialect)
    settle(guard, failed, cursor)
    return None


def _served_repair(
    cursor: Any,
    guard: ConnectionState,
    sql: str,
    trigger: str | None,
    outcome: PatchOutcome,
    *,
    rows: int | None,
    unique_rows: int | PartialCount | None,
    detect_ns: int | None,
    error: str | None,
    provenance: Provenance | None,
) -> tuple[list[Any], ReportState]:
    """The rows and report state of a statement ``repair_statement`` served (fetched and flagged, or
    failed and rescued): ``rows``, ``unique_rows`` and ``detect_ns`` are the probe's, None after an
    error. Keeps a rescued candidate's description on ``cursor`` and logs a flag or a change."""
    repaired = ReportState(
        preset=guard.preset,
        sql=sql,
        final_sql=outcome.final_sql,
        trigger=trigger,
        action=outcome.action,
        rows=rows,
        unique_rows=unique_rows,
        final_rows=len(outcome.rows),
        note=None,
        error=error,
        decisions=outcome.decisions,
        detect_ns=detect_ns,
        patch_ns=outcome.elapsed_ns,
        rescue=outcome.rescue,
        provenance=provenance,
    )
    if outcome.description is not None:
        cursor._self_rescued_description = (repaired, outcome.description)
    if trigger is not None or outcome.action != "none":
        log_statement(repaired, guard.dialect)
    return outcome.rows, repaired


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
    from .._analysis.catalog import explain
    from .._analysis.trees import Collecting
    from .._rules.patching import PatchOutcome, repair

    policy = guard.policy
    engine, raw = guard.engine, guard.raw

    def rerun(new_sql: str, max_rows: int) -> list[Any] | None:
        return read_only_fetch(guard, new_sql, parameters, row_factory, max_rows)

    def plain_rerun(new_sql: str, max_rows: int) -> list[Any] | None:
        # Only the join-copy check runs this, on a SELECT that calls no application function.
        return read_only_fetch(guard, new_sql, parameters, None, max_rows, writes_possible=False)

    rule: RuleName = "P1" if trigger == CARTESIAN_EXPLOSION else ("P2" if trigger is None else "rescue")
    if call_time_passed():
        decision = RuleDecision(rule, False, f"not run: {CALL_TIME_PASSED}")
        return PatchOutcome(sql, rows if rows is not None else [], "none", (decision,), 0)
    context = None if rescue_inputs is None else CandidateRunner(guard, rescue_inputs, parameters, row_factory)
    try:
        with Collecting(guard.dialect):  # the rules' trees are freed when dropped, not by the collector
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
                # A flagged statement's join-copy check runs it again anyway: one EXPLAIN, not the stamp.
                lambda statement: reached_functions(guard, statement, parameters, keep=False),
            )
    except TransactionLost:
        raise
    except Exception as error:  # a bug in the analysis must never cost the caller their result
        decision = RuleDecision(rule, False, f"internal error while repairing: {describe_error(error)}")
        return PatchOutcome(sql, rows if rows is not None else [], "none", (decision,), 0)


def forget_schema(guard: ConnectionState) -> None:
    """Drop the connection's schema view (facts and verdicts): the next rule that asks reads anew."""
    guard.catalog = None


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
    "DRIVER",
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
    "unprobed",
]
