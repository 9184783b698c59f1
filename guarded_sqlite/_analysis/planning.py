"""A statement's aggregate plan, composed: transparent sources read through (``transparent``), every
SELECT at risk planned (``deciding.inner_scopes``; the outer one over them corrected), the paging bound
and the check of every group added, all or nothing (issue 42). ``plan_cache.plan`` asks it with the
statement's schema facts."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

from sqlglot import exp

from .aggregates import AggregatePlan, grouped_only, plan_aggregates
from .deciding import inner_scopes, plan_whole, substituted
from .fusing import fused_check
from .joins import view_definition
from .paging import pages_groups, plan_bound
from .provenance import NUMBERED_NAME, numbers_back
from .schema import SchemaFacts
from .sqltree import rerun_hazard
from .transparent import flattened
from .trees import text_of

__all__ = ["aggregate_plan"]


def aggregate_plan(
    tree: exp.Expression, facts: SchemaFacts, dialect: str, scanned: Callable[[str], bool] | None = None
) -> AggregatePlan:
    planned = _statement_plan(tree, facts, dialect, scanned)
    return _numbered_back(planned) if dialect == "sqlite" else planned


def _statement_plan(
    tree: exp.Expression, facts: SchemaFacts, dialect: str, scanned: Callable[[str], bool] | None
) -> AggregatePlan:
    """The plan of every SELECT of ``tree`` at risk: the outer one's (``plan_aggregates``) made on the
    statement with the others corrected (``deciding.inner_scopes``), all or none corrected; derived
    tables, CTEs and views that only join and filter read through first (``transparent.flattened``)."""
    tree = flattened(tree, functools.partial(_view_body, facts, dialect)) or tree
    inner = inner_scopes(tree, facts, dialect, scanned)  # a subquery's check of every group may be pre-grouped
    if scanned is not None and (pages_groups(tree) or inner.planned):
        scanned = grouped_only  # the check bounded to the served groups, or one over corrected subqueries
    found = plan_aggregates(tree, facts, dialect, scanned)
    hazard = rerun_hazard(tree)
    risks = found.risks + inner.risks
    refused = inner.refusals
    if found.unanalysed and isinstance(tree, exp.Select):
        # The statement's own SELECT is not read: whether a corrected subquery changes its answer is unknown.
        refused = (f"the outer query: {found.note}", *refused)
    if refused or inner.unanalysed:
        notes = "; ".join((*refused, *inner.unanalysed))
        if not risks:
            return AggregatePlan(note=notes, unanalysed=True, hazard=hazard)
        # Several SELECTs at risk and one cannot be corrected, or not read (a RIGHT JOIN or ROLLUP in a
        # subquery, whose inflated value may choose the rows): none is (never a statement corrected in part).
        return AggregatePlan(risks, None, notes, hazard=hazard)
    if not inner.planned:
        if not found.risks:
            return found
        return plan_whole(plan_bound(dataclasses.replace(found, hazard=hazard), tree, dialect), tree, dialect)
    statement = substituted(tree, inner)
    checks = tuple(check for _, _, check in inner.planned)
    if not found.risks:
        written = text_of(statement, dialect)
        decides = "an outer query" + (" with ORDER BY" if tree.args.get("order") is not None else "")
        # The statement corrected and each SELECT's check of every group in one query, where that is exact.
        fused = fused_check(tree, inner, dialect)
        return AggregatePlan(
            inner.risks,
            written,
            check_sql=written,
            hazard=hazard,
            decides=decides,
            scopes=checks,
            fused_sql=None if fused is None else fused[0],
            fused_widths=() if fused is None else fused[1],
        )
    # The outer SELECT's plan, made on the statement with its subqueries corrected: its check reads them so.
    again = plan_aggregates(statement, facts, dialect, grouped_only)
    if again.corrected_sql is None or [(r.function, r.argument) for r in again.risks] != [
        (r.function, r.argument) for r in found.risks
    ]:
        why = again.note or "its aggregates read otherwise with its subqueries corrected"
        return AggregatePlan(risks, None, f"the outer query, with its subqueries corrected: {why}", hazard=hazard)
    return plan_whole(dataclasses.replace(again, hazard=hazard, scopes=checks), statement, dialect)


def _view_body(facts: SchemaFacts, dialect: str, table: exp.Table) -> exp.Select | None:
    """The parsed body of the view ``table`` names, where the catalog holds its text; else None."""
    found = facts.table(table.name, table.db or None)
    create = None if found is None else view_definition(found, dialect)
    body = None if create is None else create.args["expression"]
    return body.copy() if isinstance(body, exp.Select) else None


def _numbered_back(plan: AggregatePlan) -> AggregatePlan:
    """``plan`` with SQLite's numbered parameters, read as names to parse (``parse_statement``), written
    back as ``?N`` in every query it runs."""
    texts = (plan.corrected_sql, plan.check_sql, plan.whole_sql, plan.bounded_sql, plan.fused_sql)
    if not any(text is not None and NUMBERED_NAME in text for text in texts):
        return plan
    pregrouped = plan.pregrouped
    return dataclasses.replace(
        plan,
        scopes=tuple(scope._replace(whole_sql=numbers_back(scope.whole_sql)) for scope in plan.scopes),
        corrected_sql=None if plan.corrected_sql is None else numbers_back(plan.corrected_sql),
        check_sql=None if plan.check_sql is None else numbers_back(plan.check_sql),
        whole_sql=None if plan.whole_sql is None else numbers_back(plan.whole_sql),
        bounded_sql=None if plan.bounded_sql is None else numbers_back(plan.bounded_sql),
        fused_sql=None if plan.fused_sql is None else numbers_back(plan.fused_sql),
        pregrouped=None
        if pregrouped is None
        else (pregrouped[0], numbers_back(pregrouped[1]), numbers_back(pregrouped[2])),
    )
