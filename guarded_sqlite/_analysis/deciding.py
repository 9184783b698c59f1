"""Aggregates that decide which rows a statement serves: read by ``HAVING``, by ``ORDER BY`` (under
``LIMIT``/``OFFSET``, or only the order), or by an outer query (issue 34, c24).

``SELECT c.name FROM customers c JOIN orders o ... JOIN items i ... GROUP BY c.id ORDER BY SUM(o.total)
DESC LIMIT 1`` shows no inflated number: the inflated sum picks *who* is served. The check query
(``AggregatePlan.check_sql``) is the corrected query, so it orders, filters and limits by the corrected
values, and its rows are the groups the truth serves; when none of those groups had an argument row
counted twice, nothing in them shows the fan-out, while the groups the inflation chose are not there to
see. For such a statement ``plan_whole`` writes ``AggregatePlan.whole_sql``: the check query without
its ``HAVING``, ``ORDER BY``, ``LIMIT`` and ``OFFSET``, whose rows are every group's counts. The rule
runs it only when the check's own rows show nothing and the corrected query serves other rows (or the
same rows in another order, where ``ORDER BY`` reads the aggregate), and flags (or corrects) the
statement only where some group's argument rows were counted several times.

``inner_scopes`` does the same for every other SELECT of the statement (subqueries, derived tables, CTE
bodies, set-operation branches, any depth) whose aggregate is at risk: each one's check over every
group, and ``substituted`` writes the statement with all of them corrected, which the outer SELECT's
own plan (if it has risks too) is made on, so that its check reads them corrected. The rule compares
the statement's rows with the corrected statement's, and serves the corrected statement only when
every SELECT at risk was corrected and checked: one that cannot be (correlated, parameters that bind
by place, inside another at risk) leaves the whole statement as written, with a decision that names
it (issue 42, c25, c26).

Positional parameters of the clauses a check leaves out (``LIMIT ?``) are not bound to it:
``AggregatePlan.whole_binds`` is the slice of the statement's positional parameters it binds (those
clauses end a SELECT, so their parameters are its last ones); named ones bind by name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import NamedTuple

import sqlglot
from sqlglot import exp

from .aggregate_sql import aggregate_function, is_aggregate, outer_parts
from .aggregates import AggregatePlan, AggregateRisk, ScopeCheck, grouped_only, plan_aggregates, served_sql
from .schema import SchemaFacts, fold
from .sqltree import outer_reference, outer_scope, within
from .trees import forget_positions, keep, text_of

__all__ = ["InnerScopes", "inner_scopes", "plan_whole", "reads_aggregate", "substituted"]

_TAIL = ("having", "order", "limit", "offset")


def plan_whole(plan: AggregatePlan, tree: exp.Expression, dialect: str) -> AggregatePlan:
    """``plan`` with ``whole_sql``, ``whole_binds`` and ``decides`` set where an aggregate it may put at
    risk decides which rows are served, or in which order; unchanged otherwise."""
    if plan.check_sql is None or not isinstance(tree, exp.Select):
        return plan
    having = tree.args.get("having")
    order = tree.args.get("order")
    limited = tree.args.get("limit") is not None or tree.args.get("offset") is not None
    by_having = having is not None and reads_aggregate(tree, having, value_only=True)
    by_order = order is not None and reads_aggregate(tree, order, value_only=True)
    if not (by_having or by_order):
        return plan
    ordered = "ORDER BY" + (" with LIMIT" if limited else "")
    decides = " and ".join(part for part, used in (("HAVING", by_having), (ordered, by_order)) if used)
    if not (by_having or limited):
        # Every group is in the check's rows already: only their order is decided.
        return dataclasses.replace(plan, decides=decides)
    check = keep(forget_positions(sqlglot.parse_one(plan.check_sql, read=dialect)))
    if not isinstance(check, exp.Select):
        return plan
    _drop_tail(check)
    tail = _tail_positional(tree)
    binds = (0, _positional(tree) - tail) if tail else None
    return dataclasses.replace(plan, whole_sql=text_of(check, dialect), whole_binds=binds, decides=decides)


class InnerScopes(NamedTuple):
    """What ``inner_scopes`` found: the SELECTs it corrected (their walk index in the statement, the
    corrected tree, their check), the aggregates at risk in all of them, and why any cannot be."""

    planned: tuple[tuple[int, exp.Expr, ScopeCheck], ...] = ()
    risks: tuple[AggregateRisk, ...] = ()
    refusals: tuple[str, ...] = ()
    unanalysed: tuple[str, ...] = ()
    """Labels and notes of SELECTs with a value aggregate the analysis could not read."""


def inner_scopes(
    tree: exp.Expression, facts: SchemaFacts, dialect: str, scanned: Callable[[str], bool] | None = None
) -> InnerScopes:
    """Every SELECT inside ``tree`` (subqueries, derived tables, CTE bodies, set-operation branches, any
    depth) whose value aggregate a join puts at risk, each planned alone: its corrected tree and its
    check over every group. A SELECT that cannot be checked alone is a refusal that names it: one that
    reads the outer query's columns (correlated), one whose positional parameters cannot be told apart
    from the statement's (some inside it and some outside: they bind by place), one inside another at
    risk, one in a recursive query, one whose correction the planner refuses. The caller serves a
    corrected statement only where there is no refusal at all (issue 42: all or nothing).

    ``scanned`` is ``plan_aggregates``' (SQLite: whether the statement reads a table whole, by its
    alias): a SELECT whose one repeating table the statement scans whole has the pre-grouped correction
    and check (``pregroup``, exact as the grouped ones); without it, the grouped ones."""
    if not isinstance(tree, (exp.Select, exp.SetOperation)):
        return InnerScopes()
    with_ = tree.args.get("with_") or tree.args.get("with")
    recursive = with_ is not None and bool(with_.args.get("recursive"))
    ctes = {fold(cte.alias_or_name): cte.this for cte in with_.expressions} if with_ is not None else {}
    positional = _positional(tree)
    planned: list[tuple[int, exp.Expr, ScopeCheck, exp.Select]] = []
    risks: list[AggregateRisk] = []
    refusals: list[str] = []
    unanalysed: list[str] = []
    for index, inner in enumerate(tree.find_all(exp.Select)):
        if inner is tree or not any(
            aggregate_function(node) is not None for part in outer_parts(inner) for node in outer_scope(part)
        ):
            continue
        label = _label(inner, index)
        alone = keep(inner.copy())
        if with_ is not None and any(fold(table.name) in ctes for table in inner.find_all(exp.Table)):
            alone.set("with_", with_.copy())
        # Its own check runs alone. Whether the statement scans its leaf whole is read from the statement's
        # query plan by the leaf's alias, which another SELECT may share: a wrong guess costs time, not
        # an answer (either form is exact).
        found = plan_aggregates(alone, facts, dialect, scanned or grouped_only)
        if found.unanalysed:
            unanalysed.append(f"{label}: {found.note}")
            continue
        if not found.risks:
            continue
        risks.extend(found.risks)
        if recursive:
            refusals.append(f"{label}: in a recursive query, whose rows have no identity")
            continue
        if found.corrected_sql is None or found.check_sql is None:
            refusals.append(f"{label}: {found.note}")
            continue
        why = outer_reference(inner, facts, ctes)
        inside = _positional(inner)
        if not why and inside not in (0, positional):
            why = "has positional parameters both inside and outside it"
        if why:
            refusals.append(f"{label} {why}: not checked")
            continue
        whole = keep(forget_positions(sqlglot.parse_one(found.check_sql, read=dialect)))
        _drop_tail(whole)
        # Its own HAVING, ORDER BY, LIMIT and OFFSET are left out, with their parameters (D5).
        tail = _tail_positional(inner)
        corrected = keep(forget_positions(sqlglot.parse_one(served_sql(found, None) or "", read=dialect)))
        keep(corrected.args.get("with_"))
        corrected.set("with_", None)  # in its place the statement's own CTEs are in scope again
        check = ScopeCheck(label, found.risks, text_of(whole, dialect), (0, inside - tail), found.width)
        planned.append((index, corrected, check, inner))
    for _, _, check, inner in planned:
        outer = next((other for _, _, other, node in planned if node is not inner and within(inner, node)), None)
        if outer is not None:
            refusals.append(f"{check.label}: inside {outer.label}, also at risk: not corrected")
    return InnerScopes(
        tuple((index, corrected, check) for index, corrected, check, _ in planned),
        tuple(risks),
        tuple(refusals),
        tuple(unanalysed),
    )


def substituted(tree: exp.Expression, scopes: InnerScopes) -> exp.Expression:
    """A copy of ``tree`` with every planned SELECT replaced by its corrected tree, each found at its
    place (the copy walks as the tree does) before any is replaced."""
    statement = keep(tree.copy())
    wanted = {index for index, _, _ in scopes.planned}
    places = {at: node for at, node in enumerate(statement.find_all(exp.Select)) if at in wanted}
    for index, corrected, _ in scopes.planned:
        keep(places[index]).replace(corrected.copy())
    return statement


def _label(select: exp.Select, index: int) -> str:
    """How a decision names an inner SELECT."""
    parent = select.parent
    if isinstance(parent, exp.Subquery) and parent.alias and isinstance(parent.parent, (exp.From, exp.Join)):
        return f"derived table {parent.alias}"
    if isinstance(parent, exp.CTE):
        return f"CTE {parent.alias_or_name}"
    if isinstance(parent, exp.SetOperation):
        return f"set-operation branch {index}"
    return f"subquery {index}"


def _drop_tail(select: exp.Expr) -> None:
    """Take ``select``'s HAVING, ORDER BY, LIMIT and OFFSET off (each released with the block's trees)."""
    for key in _TAIL:
        keep(select.args.get(key))
        select.set(key, None)


def _tail_positional(select: exp.Expression) -> int:
    """How many positional parameters ``select``'s HAVING, ORDER BY, LIMIT and OFFSET hold: a check that
    leaves those clauses out does not bind them."""
    return sum(_positional(part) for key in _TAIL if (part := select.args.get(key)) is not None)


def _positional(node: exp.Expression) -> int:
    """How many positional (unnamed) parameters ``node`` holds."""
    return sum(1 for inside in node.walk() if isinstance(inside, exp.Placeholder) and not inside.this)


def reads_aggregate(select: exp.Select, part: exp.Expression, value_only: bool = False) -> bool:
    """Whether ``part`` (``select``'s HAVING or ORDER BY) reads an aggregate (``value_only``: a SUM,
    AVG, TOTAL or GROUP_CONCAT), directly or through a select item's alias or position. A name that is
    both an alias and a column counts as the alias: reading too much costs a check, never an answer."""

    def wanted(node: exp.Expr) -> bool:
        return aggregate_function(node) is not None if value_only else is_aggregate(node)

    return any(wanted(node) for node in _resolved(select, part))


def _resolved(select: exp.Select, part: exp.Expression) -> Iterator[exp.Expr]:
    items = select.expressions
    aliases = {item.alias.lower(): item.unalias() for item in items if item.alias}
    positional = isinstance(part, exp.Order)
    for node in part.walk():
        yield node
        if isinstance(node, exp.Column) and not node.table and node.name.lower() in aliases:
            yield from aliases[node.name.lower()].walk()
        elif (
            positional
            and isinstance(node, exp.Literal)
            and node.is_int
            and isinstance(node.parent, exp.Ordered)
            and 1 <= int(node.name) <= len(items)
        ):
            yield from items[int(node.name) - 1].walk()
