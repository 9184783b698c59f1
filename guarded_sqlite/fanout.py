"""Aggregate fan-out on the data: run the corrected query ``aggregates.plan_aggregates`` wrote for a
statement at risk, compare, and say what the join inflated.

Only statements the pre-screen passes (``probe.mentions_value_aggregate_over_join``) and the analysis
finds at risk get here; a risk the data does not realise is not flagged. The corrected query runs as
P2's rerun does: read-only, under ``rerun_timeout``, with the caller's parameters, and only for a
read-only query. Under ``"text_to_sql"`` its rows are served (``action == "aggregate_defanned"``);
under the default ``"patch"`` preset the statement is flagged and its rows are left as they are:
whether a multiplied total is wanted is the question's to say, not the guard's. Observe mode runs
nothing extra and the paper preset has no such rule, so neither looks.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from .aggregates import AggregatePlan, AggregateRisk
from .engines import RerunRefused
from .errors import TransactionLost, describe_error
from .findings import AggregateFinding
from .report import RuleDecision
from .rewrite import is_read_only_query

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
    sql: str, rows: list[Any], plan: AggregatePlan, rerun: Rerun, row_cap: int, serve: bool, dialect: str
) -> FanoutOutcome | None:
    """Run ``plan``'s corrected query and compare its rows with ``rows``; None when nothing is at risk
    or nothing can be confirmed (the statement is then reported as if the rule had not looked)."""
    corrected_sql = plan.corrected_sql
    if not plan.risks or corrected_sql is None:
        return None
    started = time.perf_counter_ns()
    if not is_read_only_query(sql, dialect):
        return None
    try:
        corrected = rerun(corrected_sql, row_cap)
    except RerunRefused as refusal:
        return _unconfirmed(sql, rows, f"corrected query not run: {refusal}", started)
    except TransactionLost:
        raise
    except Exception as error:  # the original result stands whatever the corrected query does
        return _unconfirmed(sql, rows, f"corrected query failed: {describe_error(error)}", started)
    if corrected is None:
        return _unconfirmed(sql, rows, f"corrected query returned more than row_cap={row_cap} rows", started)
    if _comparable(rows, plan) == _comparable(corrected, plan):
        return None  # the join repeats no row of the argument's tables on this data
    findings = tuple(_finding(risk, rows, corrected, plan, corrected_sql) for risk in plan.risks)
    described = "; ".join(finding.describe() for finding in findings)
    if serve:
        decision = RuleDecision("aggregate", True, f"corrected values served: {described}")
        return FanoutOutcome(findings, corrected, corrected_sql, decision, time.perf_counter_ns() - started)
    decision = RuleDecision("aggregate", False, f"rows left as written ({described})")
    return FanoutOutcome(findings, rows, sql, decision, time.perf_counter_ns() - started)


def _unconfirmed(sql: str, rows: list[Any], why: str, started: int) -> FanoutOutcome:
    return FanoutOutcome((), rows, sql, RuleDecision("aggregate", False, why), time.perf_counter_ns() - started)


def _normal(value: Any) -> Any:
    # Sums of the same floats in another order differ in the last bits: twelve significant digits
    # tell an inflated total from a reordered one.
    if isinstance(value, float) and math.isfinite(value):
        return float(f"{value:.12g}")
    return value


def _comparable(rows: Sequence[Any], plan: AggregatePlan) -> Counter[tuple[Any, ...]]:
    """The rows as a multiset, with floats rounded and each GROUP_CONCAT's parts sorted (their order
    is unspecified, in the written query and the corrected one alike), without the items whose
    aggregates are not at risk (``AggregatePlan.steady``)."""
    separators = plan.separators
    steady = plan.steady
    normal: Counter[tuple[Any, ...]] = Counter()
    for row in rows:
        values = []
        for position, value in enumerate(row):
            if position in steady:
                continue
            separator = separators.get(position)
            if separator is not None and isinstance(value, str):
                value = separator.join(sorted(value.split(separator))) if separator else "".join(sorted(value))
            values.append(_normal(value))
        normal[tuple(values)] += 1
    return normal


def _finding(
    risk: AggregateRisk, rows: list[Any], corrected: list[Any], plan: AggregatePlan, corrected_sql: str
) -> AggregateFinding:
    written_value: object = None
    corrected_value: object = None
    factor: float | None = None
    column = risk.column
    if column is not None:
        # Rows match up by the columns that are not aggregates (the groups, when selected).
        aggregates = {r.column for r in plan.risks if r.column is not None} | plan.steady

        def key(row: Sequence[Any]) -> tuple[Any, ...]:
            return tuple(_normal(v) for i, v in enumerate(row) if i not in aggregates)

        by_key: dict[tuple[Any, ...], Any] = {}
        for row in corrected:
            by_key.setdefault(key(row), row[column])
        pairs = [(row[column], by_key[key(row)]) for row in rows if key(row) in by_key]
        for written, fixed in pairs:
            if _normal(written) != _normal(fixed):
                written_value, corrected_value = written, fixed
                break
        numeric = [
            (w, f) for w, f in pairs if isinstance(w, (int, float)) and isinstance(f, (int, float)) and w is not True
        ]
        total = sum(f for _, f in numeric)
        if numeric and total:
            factor = sum(w for w, _ in numeric) / total
    return AggregateFinding(
        risk.function,
        risk.argument,
        risk.repeated,
        risk.repeating,
        written_value,
        corrected_value,
        factor,
        corrected_sql,
    )
