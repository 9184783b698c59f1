"""A paging query's aggregate confirmation, bounded to the groups the statement served (issue 24 item 4, c13).

``SELECT c.id, SUM(fx(c.points)) FROM customers c JOIN orders o ON ... GROUP BY c.id ORDER BY c.id
LIMIT 10`` reads ten groups; the check query (``AggregatePlan.check_sql``) numbers the rows of the whole
join in a derived table before grouping, so it reads every group and calls ``fx`` once per join row of
the table, several times over. For a statement with ``LIMIT`` or ``OFFSET`` and a ``GROUP BY``,
``plan_bound`` (at plan time, kept with the plan) writes ``AggregatePlan.bounded_sql``: the check query
without its LIMIT and OFFSET, whose derived table keeps only the rows of the groups served (a marker
condition, replaced by ``bounded_check`` with the served rows' key values written as literals), and
which computes each function call of the outer query once per derived-table row (hoisted into the
derived table), so that a user function runs once per join row of the served groups.

This is exact only when the corrected query would serve the same groups: the groups are ordered and
filtered by what the correction leaves as it is. So a statement whose ORDER BY or HAVING reads an
aggregate (by itself, its alias or its position, c22) keeps the whole check (the corrected values can
reorder or filter the groups), and so does one with a positional parameter in LIMIT or OFFSET; a statement whose
GROUP BY keys are not all select items cannot tell which groups it served and is refused
(``AggregatePlan.paging``); so are served key values that cannot be written exactly as literals (a
float, a date, a NUL in a string), which ``bounded_check`` says.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any

import sqlglot
from sqlglot import exp

from .._core.serving import row_values
from .aggregate_sql import is_aggregate
from .aggregates import AggregatePlan
from .deciding import reads_aggregate
from .trees import forget_positions, keep, text_of

__all__ = ["MAX_KEYS", "bounded_check", "pages_groups", "plan_bound"]

MAX_KEYS = 1000
"""Served groups beyond which the whole check runs instead (a longer list costs more than it saves)."""

MAX_COMPOSITE = 100
"""The same for keys of several columns, written as ORs of ANDs (SQLite's expression depth is 1000)."""

_MARKER = "__gs_bound"
"""The condition ``plan_bound`` leaves in the check for ``bounded_check`` to replace: a quoted name, written
as the dialect quotes names (MariaDB's backticks: c38)."""
_INNER = "__gs_t"


def pages_groups(tree: exp.Expression) -> bool:
    """Whether ``tree`` is a paging query over groups whose check ``plan_bound`` bounds (or refuses)."""
    if not isinstance(tree, exp.Select) or (tree.args.get("limit") is None and tree.args.get("offset") is None):
        return False
    if not _groups(tree):
        return False  # one group at most: the check reads what the statement reads
    # The bounded check drops LIMIT and OFFSET, and positional parameters bind by place (DuckDB refuses
    # a name its statement lacks): the whole check binds every parameter as the statement does (R5).
    return not _ordered_by_aggregate(tree) and not any(
        isinstance(node, (exp.Placeholder, exp.Parameter)) for node in _limits(tree)
    )


def plan_bound(plan: AggregatePlan, tree: exp.Expression, dialect: str) -> AggregatePlan:
    """``plan`` with ``bounded_sql`` and the group keys' places, or ``paging`` saying why a paging
    query is refused; unchanged for a statement that is not a paging query over groups."""
    if plan.check_sql is None or not isinstance(tree, exp.Select) or not pages_groups(tree):
        return plan
    groups = _groups(tree)
    positions = []
    for group in groups:
        position = next((i for i, item in enumerate(tree.expressions) if item.unalias() == group), None)
        if position is None:
            why = (
                f"paging query whose GROUP BY key {text_of(group, dialect)} is not a select item: the groups it "
                "served cannot be told, and checking every group would cost the whole join"
            )
            return dataclasses.replace(plan, paging=why)
        positions.append(position)
    check = keep(forget_positions(sqlglot.parse_one(plan.check_sql, read=dialect)))
    if not isinstance(check, exp.Select):
        return plan
    from_ = check.args.get("from_") or check.args.get("from")
    derived = from_.this if from_ is not None else None
    if not isinstance(derived, exp.Subquery) or not isinstance(derived.this, exp.Select):
        return plan
    inner = derived.this
    keep([check.args.get("limit"), check.args.get("offset")])  # dropped just below
    check.set("limit", None)
    check.set("offset", None)
    _hoist_calls(check, inner)
    inner.where(exp.column(_MARKER, quoted=True), copy=False)
    return dataclasses.replace(
        plan,
        bounded_sql=text_of(check, dialect),
        group_items=tuple(positions),
        group_sql=tuple(text_of(group, dialect) for group in groups),
    )


def bounded_check(plan: AggregatePlan, rows: Sequence[Any], dialect: str) -> str | None:
    """The check query to run for ``rows`` (the statement's), restricted to their groups when
    ``plan.bounded_sql`` allows; raises ``ValueError`` saying why when it must not run at all."""
    if plan.paging:
        raise ValueError(plan.paging)
    if plan.bounded_sql is None:
        return plan.check_sql
    keys: dict[tuple[Any, ...], None] = {}
    for row in rows:
        values = row_values(row)
        if values is None or len(values) != plan.width:
            raise ValueError("paging query whose rows cannot be read as columns: its groups cannot be told")
        keys[tuple(values[p] for p in plan.group_items)] = None
    single = len(plan.group_sql) == 1
    if len(keys) > (MAX_KEYS if single else MAX_COMPOSITE):
        return plan.check_sql
    written = [[_literal(value, dialect) for value in key] for key in keys]
    if single and all(value != "NULL" for (value,) in written):
        condition = f"{plan.group_sql[0]} IN ({', '.join(value for (value,) in written)})"
    else:
        condition = " OR ".join(
            "(" + " AND ".join(_equals(sql, value) for sql, value in zip(plan.group_sql, key, strict=True)) + ")"
            for key in written
        )
    return plan.bounded_sql.replace(_marker(dialect), f"({condition})")


@functools.cache
def _marker(dialect: str) -> str:
    """``_MARKER`` as ``dialect`` writes a quoted name (once per dialect: generating it costs 50 µs)."""
    return exp.to_identifier(_MARKER, quoted=True).sql(dialect)


def _equals(sql: str, value: str) -> str:
    return f"{sql} IS NULL" if value == "NULL" else f"{sql} = {value}"


def _literal(value: Any, dialect: str) -> str:
    """``value`` as a SQL literal that compares equal to it exactly, or ValueError."""
    if value is None:
        return "NULL"
    kind = type(value)
    if kind is int:
        return str(value)
    if isinstance(value, str) and "\x00" not in value:
        return "'" + value.replace("'", "''") + "'"
    if kind is bytes and dialect == "sqlite":
        return f"X'{value.hex()}'"
    if kind is Decimal and dialect != "sqlite" and value.is_finite():
        return str(value)
    raise ValueError(f"paging query with a group key value of type {kind.__name__}: not written exactly as SQL")


def _groups(select: exp.Select) -> list[exp.Expression]:
    """The GROUP BY expressions with positions and select-list aliases replaced by the item they name."""
    group = select.args.get("group")
    if group is None:
        return []
    aliases = {item.alias.lower(): item.unalias() for item in select.expressions if item.alias}
    found: list[exp.Expression] = []
    for item in group.expressions:
        if isinstance(item, exp.Literal) and item.is_int and 1 <= int(item.name) <= len(select.expressions):
            found.append(select.expressions[int(item.name) - 1].unalias())
        elif isinstance(item, exp.Column) and not item.table and item.name.lower() in aliases:
            found.append(aliases[item.name.lower()])
        else:
            found.append(item)
    return found


def _limits(select: exp.Select) -> Iterator[exp.Expr]:
    for key in ("limit", "offset"):
        part = select.args.get(key)
        if part is not None:
            yield from part.walk()


def _ordered_by_aggregate(select: exp.Select) -> bool:
    """Whether HAVING or ORDER BY reads an aggregate, directly or by a select item's alias or position
    (an alias in HAVING too: c22)."""
    return any(
        (part := select.args.get(key)) is not None and reads_aggregate(select, part) for key in ("having", "order")
    )


def _hoist_calls(outer: exp.Select, inner: exp.Select) -> None:
    """Compute each call of a function sqlglot does not know (an application's) in ``outer`` that reads
    only the derived table's columns once per derived-table row: a projection of ``inner`` the outer
    query reads instead (the check query repeats the argument in five places). Only a call that must
    be a scalar function moves: one inside a known aggregate's argument (aggregates do not nest) or in
    GROUP BY; elsewhere ``mycount(o.id)`` may be the application's aggregate, which computed per row
    would make the derived table one row (R6)."""
    columns = {item.alias: item.this for item in inner.expressions if isinstance(item, exp.Alias) and item.alias}
    hoisted: dict[str, str] = {}
    # Depth first, in the order written (a stack, not a nested function calling itself: that is a cycle);
    # each node with whether it must be scalar (inside a known aggregate's argument, or in GROUP BY).
    stack: list[tuple[exp.Expression, bool]] = []
    for key in ("order", "having", "group", "expressions"):
        part = outer.args.get(key)
        parts = reversed(part) if isinstance(part, list) else [part] if part is not None else []
        stack.extend((node, key == "group") for node in parts)
    while stack:
        node, scalar = stack.pop()
        if not (scalar and _hoistable(node, columns)):
            inside = scalar or is_aggregate(node)
            stack.extend((child, inside) for child in reversed(list(node.iter_expressions())))
            continue
        source = keep(node.copy())  # alias_ below attaches a copy of it
        for column in list(source.find_all(exp.Column)):
            keep(column).replace(columns[column.name].copy())
        text = text_of(source)
        name = hoisted.get(text)
        if name is None:
            name = hoisted[text] = f"__gs_f{len(hoisted)}"
            inner.append("expressions", exp.alias_(source, name, quoted=True))
        keep(node).replace(exp.column(name, table=_INNER, quoted=True))


def _hoistable(node: exp.Expression, columns: Mapping[str, exp.Expression]) -> bool:
    # Calls sqlglot does not know (the application's functions): built-ins are cheap and do nothing else.
    if not isinstance(node, exp.Anonymous) or is_aggregate(node):
        return False
    if any(is_aggregate(inside) or isinstance(inside, (exp.Window, exp.Star)) for inside in node.walk()):
        return False
    reads = list(node.find_all(exp.Column))
    return bool(reads) and all(column.table == _INNER and column.name in columns for column in reads)
