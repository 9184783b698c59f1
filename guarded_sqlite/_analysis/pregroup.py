"""SQLite's pre-grouped form of an aggregate check: the one table that repeats the argument's rows
counted per join key before the join, instead of every join row sorted into its (group, row identity).

``SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id JOIN items i ON
i.order_id = o.id GROUP BY c.id`` adds each order's total once per item. The grouped check
(``aggregate_sql.grouped_form``) sorts the join's rows by (group, order) to count each order's copies:
about 2.3x the statement on ``bench_aggregates``. Here ``items`` is the only table repeating the orders,
and it is read nowhere but in its own ON, whose equalities compare INTEGER columns: each order's copies
are the number of items with its ``order_id``, which ``(SELECT order_id, COUNT(*) AS __gs_n FROM items
GROUP BY order_id) AS i`` gives, joined by the same ON. The derived table then has one row per (group,
order) already, with its argument as it is and its copies in ``__gs_n``: about 1.5x the statement.

Exact where ``leaf_join`` finds the shape, for these reasons. Every other table of the join is
determined by the argument's tables and the groups (the planner's key closure: it repeats nothing), so
without the leaf the join has one row per (group, argument row), and with it that row once per
matching leaf row. Grouping the leaf by the columns its ON compares puts together rows whose values
are equal as SQLite compares them there: two INTEGER-affinity columns declared without any
``COLLATE`` compare with no conversion and under BINARY, as ``GROUP BY`` does (``TableFacts.
integer_columns``), so a group's rows all match or all miss any other row, and its count is their
number. An inner join only (a LEFT JOIN's unmatched rows have one copy, not zero); no subquery, CTE or
USING; no later USING or NATURAL join that may compare a leaf's column by name (it reads the leaf with
no Column node, and the pre-grouped leaf keeps only its ON's columns); parts only ``MIN`` of the
argument and ``COUNT(*)``.

Cheaper only where the statement reads the whole leaf anyway: grouping it reads every row, which a
statement that looks its rows up by index (a paging query, a selective WHERE) never does.
``scans_whole`` reads that from the statement's ``EXPLAIN QUERY PLAN``, which ``plan_cache.plan`` reads
once per plan, for the statement's own SELECT and for each subquery's check of every group alike (a
statement that also corrects its subqueries, or pages its groups, keeps the grouped form for its own).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from sqlglot import exp

from .joins import Col, Instance
from .schema import fold
from .sqltree import ROWID_NAMES, conjuncts
from .trees import keep

__all__ = ["COPIES", "Leaf", "leaf_join", "pregrouped", "scans_whole"]

COPIES = "__gs_n"
"""The pre-grouped leaf's column counting its rows per join key."""


class Leaf(NamedTuple):
    """The table to pre-group: its join's position in the SELECT's joins, the name the query reads it
    by, and its columns its ON compares (as declared)."""

    position: int
    alias: str
    columns: tuple[str, ...]


def leaf_join(
    select: exp.Select,
    instances: Sequence[Instance],
    repeating: int,
    resolve: Callable[[exp.Column], Col | None],
) -> Leaf | None:
    """The join of instance ``repeating`` when the check may pre-group it (module docstring), else None."""
    instance = instances[repeating]
    if instance.kind != "table" or instance.opaque_reason or instance.left_joined:
        return None
    if select.args.get("with_") or select.args.get("with"):
        return None
    if any(isinstance(node, (exp.Subquery, exp.Exists, exp.Select)) for node in select.walk() if node is not select):
        return None
    joins = select.args.get("joins") or []
    found = [
        j
        for j, join in enumerate(joins)
        if isinstance(join.this, exp.Table) and fold(join.this.alias_or_name) == instance.alias
    ]
    if len(found) != 1:
        return None
    position = found[0]
    join = joins[position]
    table = join.this
    if (table.db and not table.alias) or join.side or join.method or join.args.get("using"):
        return None
    if (join.kind or "").upper() not in ("", "INNER", "CROSS"):
        return None
    on = join.args.get("on")
    if on is None:
        return None
    columns: list[str] = []
    for conjunct in conjuncts(on):
        if not isinstance(conjunct, exp.EQ):
            return None
        sides = (conjunct.this, conjunct.expression)
        if not all(_qualified_column(side) for side in sides):
            return None
        resolved = [resolve(side) for side in sides if isinstance(side, exp.Column)]
        own = [col for col in resolved if col is not None and col[0] == repeating]
        other = [col for col in resolved if col is not None and col[0] != repeating]
        if len(own) != 1 or len(other) != 1:
            return None
        name = own[0][1]
        if name in ROWID_NAMES or name not in instance.integer_columns:
            return None
        if other[0][1] not in instances[other[0][0]].integer_columns:
            return None
        declared = instance.original.get(name, name)
        if declared not in columns:
            columns.append(declared)
    if _compared_by_name(joins[position + 1 :], instances, instance):
        return None
    in_on = {id(node) for node in on.find_all(exp.Column)}
    leaf_names = {instance.alias, instance.name}
    for node in select.find_all(exp.Column):
        if id(node) in in_on:
            continue
        col = resolve(node)
        if col is not None:
            if col[0] == repeating:
                return None
        elif fold(node.table) in leaf_names or (not node.table and fold(node.name) in (instance.columns or ())):
            return None  # a name that may be the leaf's (a select-list alias in ORDER BY is not)
    return Leaf(position, table.alias_or_name, tuple(columns))


def _compared_by_name(later: Sequence[exp.Join], instances: Sequence[Instance], leaf: Instance) -> bool:
    """Whether a USING or NATURAL join after the leaf's may compare one of the leaf's columns. Such a
    join reads the tables to its left by name, with no Column node to resolve, and the pre-grouped leaf
    keeps only its ON's columns: a condition on any other would be lost (c20). Unsure is yes."""
    if leaf.columns is None:
        return True
    held = _named(leaf) | {COPIES}
    for join in later:
        using = join.args.get("using")
        if using:
            if any(fold(name.name) in held for name in using):
                return True
        elif (join.method or "").upper() == "NATURAL":
            right = join.this
            if not isinstance(right, (exp.Table, exp.Subquery)):
                return True
            named = [i for i in instances if i.alias == fold(right.alias_or_name)]
            if len(named) != 1 or named[0].columns is None or not _named(named[0]).isdisjoint(held):
                return True
    return False


def _named(instance: Instance) -> frozenset[str]:
    """The columns a NATURAL join can see: a table's rowid is not one, unless a column takes its name."""
    columns = instance.columns or frozenset()
    if instance.kind != "table":
        return columns
    return columns - (ROWID_NAMES - instance.original.keys())


def _qualified_column(node: exp.Expression) -> bool:
    return isinstance(node, exp.Column) and bool(node.table) and isinstance(node.this, exp.Identifier)


def pregrouped(middle: exp.Select, leaf: Leaf) -> exp.Select | None:
    """``grouped_form``'s derived table ``middle`` with ``leaf`` pre-grouped and no GROUP BY of its own:
    each ``MIN`` part is its argument, each ``COUNT(*)`` part the leaf's ``COPIES``; None when a part
    is anything else or the shape is not the one ``leaf`` was found in."""
    joins = middle.args.get("joins") or []
    if middle.args.get("group") is None or leaf.position >= len(joins):
        return None
    table = joins[leaf.position].this
    if not isinstance(table, exp.Table) or table.alias_or_name != leaf.alias:
        return None
    items: list[exp.Expr] = keep([])  # copies, dropped when the shape does not fit
    for item in middle.expressions:
        if not (isinstance(item, exp.Alias) and item.alias.startswith("__gs_p")):
            items.append(item.copy())
            continue
        body = item.this
        if isinstance(body, exp.Min) and not any(isinstance(n, exp.AggFunc) for n in body.this.walk()):
            value: exp.Expression = body.this.copy()
        elif isinstance(body, exp.Count) and isinstance(body.this, exp.Star):
            value = exp.column(COPIES, table=leaf.alias, quoted=True)
        else:
            return None
        items.append(exp.alias_(value, item.alias, quoted=True, copy=False))
    source = table.copy()
    source.set("alias", None)
    keys = [exp.column(name, quoted=True) for name in leaf.columns]
    counted = exp.Select(
        expressions=[
            *(
                exp.alias_(key.copy(), name, quoted=True, copy=False)
                for key, name in zip(keys, leaf.columns, strict=True)
            ),
            exp.alias_(exp.Count(this=exp.Star()), COPIES, quoted=True, copy=False),
        ]
    )
    counted.set("from_", exp.From(this=source))
    counted.set("group", exp.Group(expressions=keys))
    result = keep(middle.copy())
    join = result.args["joins"][leaf.position]
    keep([*result.expressions, result.args.get("group"), join.this])  # replaced below
    result.set("expressions", items)
    result.set("group", None)
    alias = exp.TableAlias(this=exp.to_identifier(leaf.alias, quoted=True))
    join.set("this", exp.Subquery(this=counted, alias=alias))
    return result


def scans_whole(plan_rows: Iterable[Sequence[Any]], alias: str) -> bool:
    """Whether an ``EXPLAIN QUERY PLAN``'s rows read the table the statement calls ``alias`` whole: a
    full scan (``SCAN i``, ``SCAN i USING INDEX ...``) or an automatic index, which SQLite builds from
    one (``SEARCH i USING AUTOMATIC ...``); not lookups in an index of the schema (``SEARCH i ...``)."""
    scan, automatic = f"SCAN {alias}", f"SEARCH {alias} USING AUTOMATIC "
    return any(
        isinstance(row[-1], str)
        and (row[-1] == scan or row[-1].startswith(scan + " ") or row[-1].startswith(automatic))
        for row in plan_rows
    )
