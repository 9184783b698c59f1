"""Aggregate fan-out on the data: run the check query ``aggregates.plan_aggregates`` wrote for a
statement at risk, decide from its counts, and say what the join inflated.

The check query is the corrected query with, per aggregate at risk, the value as written and as
corrected, the join rows with a non-NULL argument and the distinct rows of the argument's tables among
them, and the magnitudes summed. A risk is realised where the join counted a row several times (the two
counts differ) and that changed a value the statement shows (``differs``: exact for integers and exact
sums, within the rounding bound of the magnitudes summed for floats), or, for one that decides which
rows are served (HAVING, ORDER BY, an outer query: ``guarded_sqlite._analysis.deciding``), where some
group's rows were counted several times and the corrected query serves other rows. Float rounding
can neither invent a fan-out nor hide one (c11); an AVG over a uniform repetition, or repeated rows
whose argument is NULL, is right as written and not flagged. A plan at risk that cannot be corrected
exactly is reported (a decision, not applied) and changes nothing.

Only statements the pre-screen passes (``probe.mentions_value_aggregate_over_join``) and the analysis
finds at risk get here; a risk the data does not realise is not flagged. The corrected query runs as
P2's rerun does: read-only, under ``rerun_timeout``, with the caller's parameters, and only for a
read-only query. Under ``"text_to_sql"`` its rows are served (``action == "aggregate_defanned"``);
under the default ``"patch"`` preset the statement is flagged and its rows are left as they are:
whether a multiplied total is wanted is the question's to say, not the guard's. Observe mode runs
nothing extra and the paper preset has no such rule, so neither looks.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Collection, Sequence
from decimal import Decimal
from operator import itemgetter
from typing import Any, NamedTuple

from .._analysis.aggregates import AggregatePlan, AggregateRisk, ScopeCheck, served_sql
from .._analysis.rewrite import is_read_only_query
from .._analysis.shapes import shaped_text
from .._core.serving import row_values
from .._engines import RerunRefused
from ..errors import TransactionLost, describe_error
from ..findings import AggregateFinding
from ..report import RuleDecision
from .copies import same_multiset

Rerun = Callable[[str, int], list[Any] | None]


class FanoutOutcome(NamedTuple):
    """What the confirmation found: the findings (empty: not realised), the rows to serve, the SQL
    they are the rows of, the decision, and the time it took."""

    findings: tuple[AggregateFinding, ...]
    rows: list[Any]
    final_sql: str
    decision: RuleDecision
    elapsed_ns: int


def confirm(
    sql: str,
    rows: list[Any],
    plan: AggregatePlan,
    rerun: Rerun,
    row_cap: int,
    serve: bool,
    dialect: str,
    names: Sequence[Any] | None = None,
    shape: Callable[[list[tuple[Any, ...]]], list[Any]] | None = None,
    whole: Rerun | None = None,
    scope_run: Callable[[ScopeCheck, str, int], list[Any] | None] | None = None,
) -> FanoutOutcome | None:
    """Run ``plan``'s check query and decide from its counts whether the join counted an argument row
    several times where that changes a value; None when nothing is at risk or the data does not
    realise the risk (the statement is then reported as if the rule had not looked).

    ``rerun`` must give plain tuples; ``names`` are the written statement's column names (the served
    SQL's items take them, ``aggregates.served_sql``) and ``shape`` makes the served rows from plain
    tuples as the caller's cursor makes its rows (its row factory over its own description).

    Where an aggregate decides which rows are served (``plan.whole_sql``, ``guarded_sqlite._analysis.
    deciding``) and the check's rows show no repeated argument row, ``whole`` (``rerun`` binding the
    parameters ``whole_sql`` keeps) runs the check over every group: the groups the inflated values
    chose may be ones the corrected query does not serve.

    The statement's other SELECTs at risk (``plan.scopes``) are corrected in the same check query; where
    its rows differ from the statement's, ``scope_run(scope, whole_sql, max_rows)`` runs each one's
    check over every group (binding what it holds). A check that cannot run leaves the statement as
    written (with the findings so far): a statement corrected in part is never served. Where the plan has
    ``fused_sql`` (SQLite), that one query gives the check query's rows and every scope's check over every
    group, split back (``fused_parts``) and read as the separate queries' rows would be."""
    if not plan.risks:
        return None
    started = time.perf_counter_ns()
    check_sql, corrected_sql = plan.check_sql, served_sql(plan, names)
    if check_sql is None or corrected_sql is None:
        return _unconfirmed(sql, rows, f"aggregate at risk, not checked: {plan.note}", started)
    # Once per shape: a statement new only in its literals (text-to-SQL's) is not tokenized again.
    if not is_read_only_query(shaped_text(sql, dialect), dialect):
        return None
    width = plan.width
    fused = _fused(rerun, plan, row_cap) if plan.fused_sql is not None else None
    checked = _attempt(rerun, check_sql, row_cap, "corrected query") if fused is None else fused[0]
    if isinstance(checked, str):
        return _unconfirmed(sql, rows, checked, started)
    findings: list[AggregateFinding] = []
    if width:  # the statement's own SELECT has aggregates at risk (without, its width is not needed)
        changes = realised(plan, checked)
        counted = checked  # the rows the changes were found in
        shown = [j for j in changes if j < len(plan.items) and plan.items[j] is not None]
        other = None  # whether the corrected query serves other rows: compared once, where needed
        if not changes and plan.whole_sql is not None:
            # With their values: no group the check served had a row counted twice, so a served value
            # that differs is another group's, even where the columns shown cannot tell groups apart (c30).
            other = _other_rows(plan, rows, checked, values=_item_positions(plan, ()))
            if other:
                every_group = _attempt(whole, plan.whole_sql, row_cap, "check of every group")
                if isinstance(every_group, str):
                    return _unconfirmed(sql, rows, f"{_CHOSE.format(plan.decides)}; {every_group}", started)
                changes, counted = realised(plan, every_group), every_group
        if other is None and changes and (plan.decides or not shown):  # else what it would say is not read
            # A value the correction did not change that differs all the same is another group's (c30).
            other = _other_rows(plan, rows, checked, values=_item_positions(plan, changes))
        chose = bool(changes) and bool(other)
        # Else no argument row counted twice where it changes a value the statement shows, on this data,
        # nor which rows it serves or their order (an aggregate in HAVING or ORDER BY alone).
        if shown or chose:
            findings.extend(
                _finding(risk, changes[j], counted, width + 5 * j, corrected_sql, plan.decides if chose else "")
                for j, risk in enumerate(plan.risks)
                if j in changes
            )
    if plan.scopes and _other_rows(AggregatePlan(width=width, decides=plan.decides), rows, checked):
        # The other SELECTs at risk, corrected in the same query, changed the answer: whether their groups
        # counted a row several times, each by its own check over every group.
        for k, scope in enumerate(plan.scopes):
            every_group = fused[k + 1] if fused is not None else (
                _attempt(scope_run and functools.partial(scope_run, scope), scope.whole_sql, row_cap,
                         f"check of {scope.label}"))  # fmt: skip
            if isinstance(every_group, str):
                return _left(sql, rows, findings, every_group, started)
            changes = realised(AggregatePlan(scope.risks, width=scope.width), every_group)
            findings.extend(
                _finding(risk, changes[j], every_group, scope.width + 5 * j, corrected_sql, plan.decides)
                for j, risk in enumerate(scope.risks)
                if j in changes
            )
    if not findings:
        return None
    found = tuple(findings)
    described = "; ".join(finding.describe() for finding in found)
    if serve and width and not plan.decides and not _reproduced(plan, rows, checked):
        # Corrected values are served only from a check that read what the statement read.
        return _left(sql, rows, findings, _NOT_REPRODUCED, started)
    if serve:
        corrected = [tuple(row[:width]) if width else tuple(row) for row in checked]
        served = shape(corrected) if shape is not None else corrected
        decision = RuleDecision("aggregate", True, f"corrected values served: {described}")
        return FanoutOutcome(found, served, corrected_sql, decision, time.perf_counter_ns() - started)
    decision = RuleDecision("aggregate", False, f"rows left as written ({described})")
    return FanoutOutcome(found, rows, sql, decision, time.perf_counter_ns() - started)


_NOT_REPRODUCED = (
    "not corrected: the check's written values are not the statement's (the data changed in between, a "
    "function returned other values, or the statement was read otherwise than the database reads it)"
)


def _reproduced(plan: AggregatePlan, rows: Sequence[Any], checked: Sequence[Sequence[Any]]) -> bool:
    """Whether the statement's rows show, for each aggregate at risk that is a select item, the value the
    check computed as written (``realised``'s first column) in a check row with the same other columns:
    the check then read what the statement read. Asked where no aggregate decides which groups are served
    (the check's rows are then the statement's groups). Rows with columns no check row has, rows that
    cannot be read as values and GROUP_CONCATs (whose parts the check cannot order) are not compared.

    Exact values are compared as multisets of (groups, values) in one C-level pass; only where those
    differ (float rounding, groups the check holds beyond the statement's) is each row matched within
    rounding (``differs``)."""
    width = plan.width
    # The select items that are the aggregate itself (not CASE WHEN SUM(..) > 9 THEN ..).
    pairs = [
        (j, risk.column)
        for j, risk in enumerate(plan.risks)
        if risk.column is not None and risk.column < width and risk.function != "GROUP_CONCAT"
    ]
    if not pairs or not rows:
        return True
    groups = _group_positions(plan, width)
    try:
        if type(rows[0]) is tuple:  # a result's rows are all of one kind: plain tuples, the usual case
            values: Sequence[Sequence[Any]] = rows
        else:
            read = [row_values(row) for row in rows]
            values = [row for row in read if row is not None]
            if len(values) != len(read):
                return True
        if set(map(len, values)) != {width}:
            return True
        shown = _picker([*groups, *(position for _, position in pairs)])
        written = _picker([*groups, *(width + 5 * j for j, _ in pairs)])
        if same_multiset(map(shown, values), map(written, checked)):
            return True
        group = _picker(groups)
        by_group: dict[Any, list[Sequence[Any]]] = {}
        for row in checked:
            by_group.setdefault(group(row), []).append(row)

        def same(row: Sequence[Any], check: Sequence[Any]) -> bool:
            return not any(
                differs(plan.risks[j].function, row[p], check[width + 5 * j], check[width + 5 * j + 2],
                        check[width + 5 * j + 4])
                for j, p in pairs
            )  # fmt: skip

        for row in values:
            candidates = by_group.get(group(row))
            if candidates and not any(same(row, check) for check in candidates):
                return False
    except TypeError:  # unhashable values: not compared
        return True
    return True


def _left(sql: str, rows: list[Any], findings: list[AggregateFinding], why: str, started: int) -> FanoutOutcome:
    """The statement's rows as written: a SELECT at risk could not be checked, so no corrected statement is
    served (never one corrected in part); the findings made so far flag it."""
    described = "; ".join(finding.describe() for finding in findings)
    reason = f"rows left as written ({described}); {why}" if findings else why
    return FanoutOutcome(
        tuple(findings), rows, sql, RuleDecision("aggregate", False, reason), time.perf_counter_ns() - started
    )


def _attempt(run: Rerun | None, check: str | None, row_cap: int, what: str) -> list[Any] | str:
    """``run(check)``'s rows, or why there are none (the statement's rows then stand, whatever the check
    query does)."""
    if run is None or check is None:
        return f"{what} not run: its positional parameters cannot be told apart"
    try:
        checked = run(check, row_cap)
    except RerunRefused as refusal:
        return f"{what} not run: {refusal}"
    except TransactionLost:
        raise
    except Exception as error:
        return f"{what} failed: {describe_error(error)}"
    return _over_cap(what, row_cap) if checked is None else checked


def _fused(rerun: Rerun, plan: AggregatePlan, row_cap: int) -> list[list[Any] | str] | None:
    """``plan.fused_sql``'s rows split into the corrected query's and each scope's check of every group
    (``fused_parts``), or None where the queries must run on their own: the fused query failed (the
    check's written values can overflow where the corrected query does not: each query then says what
    it says) or returned more rows than its parts may hold together (which one is over is unknown)."""
    try:
        rows = rerun(plan.fused_sql or "", row_cap * len(plan.fused_widths))
    except TransactionLost:
        raise
    except Exception:
        return None
    return None if rows is None else fused_parts(plan, rows, row_cap)


def fused_parts(
    plan: AggregatePlan, rows: Sequence[Sequence[Any]], row_cap: int, count: int | None = None
) -> list[list[Any] | str]:
    """The rows of ``plan.fused_sql`` as the queries it fuses return them: the corrected query's, then
    each scope's check of every group (``guarded_sqlite._analysis.fusing``), or the first ``count`` of
    them; a part with more than ``row_cap`` rows is what ``_attempt`` says of it."""
    labels = ["corrected query", *(f"check of {scope.label}" for scope in plan.scopes)]
    parts: list[list[Any] | str] = []
    start = 1  # after the part's number, each part's columns at their own place
    for k, width in enumerate(plan.fused_widths[:count]):
        end = start + width
        # One pass per part, in C mostly: a loop appending each row to its part cost twice as much.
        part = [row[start:end] for row in rows if row[0] == k]
        parts.append(part if len(part) <= row_cap else _over_cap(labels[k], row_cap))
        start = end
    return parts


def corrected_rows(plan: AggregatePlan, ran: Sequence[tuple[str, list[Any] | None]], row_cap: int) -> list[Any] | None:
    """The corrected query's rows among the checks ``ran`` (each query with its rows, in the order run):
    its own, or its part of the fused query's (None: more than ``row_cap``). The first run is one of them."""
    for sql, rows in ran:
        if sql == plan.check_sql:
            return rows
        if sql == plan.fused_sql and rows is not None:
            part = fused_parts(plan, rows, row_cap, 1)[0]
            return None if isinstance(part, str) else part
    return ran[0][1]


def _over_cap(what: str, row_cap: int) -> str:
    return f"{what} returned more than row_cap={row_cap} rows"


def _unconfirmed(sql: str, rows: list[Any], why: str, started: int) -> FanoutOutcome:
    return FanoutOutcome((), rows, sql, RuleDecision("aggregate", False, why), time.perf_counter_ns() - started)


def realised(plan: AggregatePlan, checked: Sequence[Sequence[Any]]) -> dict[int, tuple[Any, Any]]:
    """Risk index -> (written, corrected) in the first row of ``plan.check_sql``'s where the join
    counted one of its argument's rows several times (join rows with a non-NULL argument outnumber the
    distinct rows of its tables) and that changed the value. Counts decide that rows repeat, never
    float rounding (c11); an AVG over a uniform repetition, or repeated rows whose argument is NULL,
    change nothing and are not taken."""
    found: dict[int, tuple[Any, Any]] = {}
    for j, risk in enumerate(plan.risks):
        at = plan.width + 5 * j
        function = risk.function
        for row in checked:
            # The counts first: most rows of a realised risk, and every row of an unrealised one,
            # are told apart by them alone.
            count = row[at + 2]
            if count != row[at + 3] and differs(function, row[at], row[at + 1], count, row[at + 4]):
                found[j] = (row[at], row[at + 1])
                break
    return found


def _item_positions(plan: AggregatePlan, changed: Collection[int]) -> frozenset[int]:
    """The select-list positions of the aggregates at risk, but those holding one in ``changed`` (risk
    indexes): a correction there explains a difference."""
    corrected = {p for j, p in enumerate(plan.items) if j in changed}
    return frozenset(p for p in plan.items if p is not None and p not in corrected)


def _other_rows(
    plan: AggregatePlan, rows: Sequence[Any], checked: Sequence[Sequence[Any]], values: frozenset[int] = frozenset()
) -> bool:
    """Whether the corrected query serves other rows than the statement, compared on the columns
    without an aggregate (the groups: exact values, taken from the same rows) and the aggregates at risk
    at the positions ``values`` (ones the correction left unchanged: a value that differs there is
    another group's) as a multiset, or as a sequence where ORDER BY reads an aggregate
    (``plan.decides``). A row that cannot be read as a
    sequence of ``plan.width`` values counts as other (the rows differ as far as anything can tell)."""
    width = plan.width or (len(checked[0]) if checked else 0)  # a statement with a subquery corrected: whole rows
    pick = _picker(_group_positions(plan, width, values))
    written: list[Any] = []
    for row in rows:
        row_read = row if type(row) is tuple else row_values(row)
        if row_read is None or len(row_read) != width:
            return True
        written.append(pick(row_read))
    corrected = [pick(row) for row in checked]
    if "ORDER BY" in plan.decides:
        return written != corrected
    return not same_multiset(written, corrected)


def _group_positions(plan: AggregatePlan, width: int, values: frozenset[int] = frozenset()) -> list[int]:
    """The select-list positions, of ``width``, that hold no aggregate (the groups' columns), but for the
    aggregates at risk at the positions ``values``, which count as such columns."""
    aggregated = set(plan.steady) | ({p for p in plan.items if p is not None} - values)
    return [i for i in range(width) if i not in aggregated]


def _picker(positions: list[int]) -> Callable[[Sequence[Any]], Any]:
    """A function giving a row's values at ``positions``, compared as ``_other_rows`` compares them."""
    if len(positions) > 1:
        return itemgetter(*positions)  # a tuple, made in C: most of the comparison's time was this
    if positions:
        return itemgetter(positions[0])
    return lambda row: ()


_CHOSE = "the aggregate may decide the rows served ({})"


_EPSILON = 2.0**-52
_NUMBERS = frozenset({int, float, Decimal})


def differs(function: str, written: Any, corrected: Any, count: Any, magnitude: Any) -> bool:
    """Whether an aggregate's written and corrected values differ by more than rounding can explain.

    Integers and exact sums (``Decimal``, except an AVG's division) compare exactly; floats within
    the error bound of summing ``count`` terms whose absolute values add up to ``magnitude``
    (``count * eps * magnitude`` for a sum, ``eps * magnitude`` for an average), plus the last bit of
    either value. A GROUP_CONCAT whose parts repeat always differs."""
    if function == "GROUP_CONCAT":
        return True
    if written is None or corrected is None:
        return (written is None) != (corrected is None)
    if type(written) is int and type(corrected) is int:
        return written != corrected
    if isinstance(written, Decimal) and isinstance(corrected, Decimal) and function != "AVG":
        return written != corrected
    try:
        w, c = float(written), float(corrected)
    except (TypeError, ValueError, OverflowError):
        return bool(written != corrected)
    if not (math.isfinite(w) and math.isfinite(c)):
        return not (w == c or (math.isnan(w) and math.isnan(c)))
    try:
        scale = abs(float(magnitude)) if magnitude is not None else 0.0
        terms = float(count) + 1.0
    except (TypeError, ValueError, OverflowError):
        scale, terms = 0.0, 1.0
    if not math.isfinite(scale):
        return False  # an overflowing magnitude: rounding can explain any difference
    bound = 4.0 * _EPSILON * (scale * (terms if function in ("SUM", "TOTAL") else 1.0) + max(abs(w), abs(c)))
    return abs(w - c) > bound


def _finding(
    risk: AggregateRisk, change: tuple[Any, Any], checked: list[Any], at: int, corrected_sql: str, chose: str
) -> AggregateFinding:
    written_value, corrected_value = change
    factor: float | None = None
    written_total = corrected_total = 0.0
    numeric = False
    try:
        for row in checked:
            written, corrected = row[at], row[at + 1]
            # Exact types (a bool is not a number here): the check's rows are the driver's plain values.
            if type(written) in _NUMBERS and type(corrected) in _NUMBERS:
                numeric = True
                written_total += float(written)
                corrected_total += float(corrected)
        if numeric and corrected_total:
            factor = written_total / corrected_total
    except (OverflowError, ValueError):
        factor = None
    return AggregateFinding(
        risk.function,
        risk.argument,
        risk.repeated,
        risk.repeating,
        written_value,
        corrected_value,
        factor,
        corrected_sql,
        chose,
    )
