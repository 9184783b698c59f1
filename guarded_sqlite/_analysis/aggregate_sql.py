"""The aggregate rule's pure pieces of SQL (``guarded_sqlite._analysis.aggregates`` plans with them): which calls
are value aggregates and what they aggregate, the parts of a SELECT read after its join, and SQLite's
grouped form of a corrected or check query (``grouped_form``: one row per group and row identity
instead of a window numbering every join row)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import cast

from sqlglot import exp

from .sqltree import outer_scope, unknown_function
from .trees import keep, text_of

__all__ = [
    "INNER_TABLE",
    "aggregate_argument",
    "aggregate_function",
    "grouped_form",
    "is_aggregate",
    "may_aggregate",
    "outer_parts",
    "outside_aggregates",
    "read_by",
    "read_outside",
    "repetition_invariant",
    "window_reads",
    "without_counts",
]

INNER_TABLE = "__gs_t"
"""The alias of the derived table a corrected query reads the join's rows from."""

_ANONYMOUS = {"total": "TOTAL"}
_OTHER_AGGREGATES = frozenset({"group_concat", "string_agg", "json_group_array", "json_group_object", "total"})


def aggregate_function(node: exp.Expr) -> str | None:
    if isinstance(node, exp.Sum):
        return "SUM"
    if isinstance(node, exp.Avg):
        return "AVG"
    if isinstance(node, exp.GroupConcat):
        return "GROUP_CONCAT"
    if isinstance(node, exp.Anonymous):
        return _ANONYMOUS.get(str(node.name).lower())
    return None


def aggregate_argument(node: exp.Expr) -> exp.Expression | None:
    if isinstance(node, exp.Anonymous):
        return node.expressions[0] if len(node.expressions) == 1 else None
    argument = node.args.get("this")
    return argument if isinstance(argument, exp.Expression) and not isinstance(argument, exp.Distinct) else None


def is_aggregate(node: exp.Expr) -> bool:
    return isinstance(node, exp.AggFunc) or (
        isinstance(node, exp.Anonymous) and str(node.name).lower() in _OTHER_AGGREGATES
    )


def repetition_invariant(node: exp.Expr) -> bool:
    """Whether an aggregate has the same value however often the join repeats its rows."""
    if isinstance(node, (exp.Min, exp.Max)):
        return True
    argument = node.args.get("this")
    return isinstance(argument, exp.Distinct)


def grouped_form(query: exp.Select, extra_count: int, rows: exp.Select) -> tuple[exp.Select, exp.Select] | None:
    """SQLite's cheaper form of the corrected (or check) query ``query`` over the numbered ``rows``, or
    None where it does not apply: one row per (group, row identity) instead of a number per join row.

    The derived table groups the join by the window's partition and keeps, per partition, the
    argument at risk once (``MIN``: the argument reads only the tables the partition identifies, so
    every copy has the same value) and how many join rows it had; an aggregate over the first row of
    each partition becomes the same aggregate over those values, and the other aggregates are
    combined from per-partition parts. Only counts and sums combine exactly (a MIN or MAX part would
    lose its column's collation, an AVG or a GROUP_CONCAT its grouping): any other aggregate, DISTINCT
    or FILTER, or a function sqlglot does not know (it may be the application's aggregate), keeps
    the window. The window numbers and sorts every join row and then the outer query groups them
    again: about 5x the statement on ``bench_aggregates`` where this form is about 2x. ``extra_count``:
    the trailing select items that are the check's counting columns (five per risk, in
    ``check_sql``'s order)."""
    window_item = rows.expressions[-1]
    window = window_item.this if isinstance(window_item, exp.Alias) else None
    if not isinstance(window, exp.Window):
        return None
    number = window_item.alias
    columns = {item.alias: item.this for item in rows.expressions[:-1] if isinstance(item, exp.Alias)}
    query = keep(query.copy())
    middle = keep(exp.Select(expressions=[item.copy() for item in rows.expressions[:-1]]))
    for key in ("from_", "joins", "where"):
        if rows.args.get(key) is not None:
            middle.set(key, rows.args[key].copy() if key != "joins" else [join.copy() for join in rows.args[key]])
    middle.set("group", exp.Group(expressions=[part.copy() for part in window.args.get("partition_by") or ()]))
    parts: dict[str, str] = {}

    def part(expression: exp.Expression) -> exp.Column:
        """A per-partition value of the derived table, by name (the same expression once)."""
        source = keep(expression.copy())
        for column in list(source.find_all(exp.Column)):
            if column.table == INNER_TABLE and column.name in columns:
                keep(column).replace(columns[column.name].copy())
        text = text_of(source, "sqlite")
        name = parts.get(text)
        if name is None:
            name = parts[text] = f"__gs_p{len(parts)}"
            middle.append("expressions", exp.alias_(source, name, quoted=True, copy=False))
        return exp.column(name, table=INNER_TABLE, quoted=True)

    def once(aggregate: exp.Expression) -> exp.Expression | None:
        """The argument at risk of an aggregate over each partition's first row, or None."""
        argument = aggregate_argument(aggregate)
        if not isinstance(argument, exp.Case) or argument.args.get("default") is not None:
            return None
        ifs = argument.args.get("ifs") or []
        if len(ifs) != 1:
            return None
        condition = ifs[0].this
        if not (
            isinstance(condition, exp.EQ)
            and isinstance(condition.this, exp.Column)
            and condition.this.table == INNER_TABLE
            and condition.this.name == number
            and condition.expression == exp.Literal.number(1)
        ):
            return None
        return cast(exp.Expression, ifs[0].args["true"])

    rows_counted = keep(exp.Count(this=exp.Star()))

    def with_argument(aggregate: exp.Expression, argument: exp.Expression) -> exp.Expression:
        combined = keep(aggregate.copy())
        if isinstance(combined, exp.Anonymous):
            keep(combined.expressions)
            combined.set("expressions", [argument])
        else:
            keep(combined.this)
            combined.set("this", argument)
        return combined

    def combined(aggregate: exp.Expression) -> exp.Expression | None:
        """``aggregate`` over the join's rows, computed from the derived table's parts, or None."""
        if isinstance(aggregate.parent, exp.Filter) or any(isinstance(n, exp.Distinct) for n in aggregate.walk()):
            return None
        carried = once(aggregate)
        if carried is not None:
            return with_argument(aggregate, part(keep(exp.Min(this=carried.copy()))))
        if isinstance(aggregate, exp.Count):
            return exp.Coalesce(this=exp.Sum(this=part(aggregate)), expressions=[exp.Literal.number(0)])
        if isinstance(aggregate, exp.Sum) or (
            isinstance(aggregate, exp.Anonymous) and str(aggregate.name).lower() == "total"
        ):
            return with_argument(aggregate, part(aggregate))
        return None

    items = query.expressions
    head, extras = items[: len(items) - extra_count], items[len(items) - extra_count :]
    for item in head:
        if keep(_convert(item, combined)) is None:
            return None
    for key in ("group", "having", "order"):
        if query.args.get(key) is not None and keep(_convert(query.args[key], combined)) is None:
            return None
    if len(extras) % 5:
        return None
    for j in range(0, len(extras), 5):
        replaced = keep([cast(exp.Alias, item).this for item in extras[j : j + 5]])
        written, corrected, _, _, magnitude = replaced
        carried = once(corrected)
        if carried is None:
            return None
        value = keep(part(keep(exp.Min(this=carried.copy()))))
        copies = keep(part(rows_counted))
        # Every copy of a partition's row has its value: the written aggregate is each value times
        # its copies (a GROUP_CONCAT's parts cannot be multiplied: it keeps one per partition).
        counted_rows = exp.Case(
            ifs=[exp.If(this=exp.Is(this=value.copy(), expression=exp.Null()), true=exp.Literal.number(0))],
            default=copies.copy(),
        )
        times = keep(exp.Mul(this=value.copy(), expression=copies.copy()))
        keep(counted_rows)
        if isinstance(written, exp.GroupConcat):
            as_written: exp.Expression = with_argument(written, part(written))
        elif isinstance(written, exp.Avg):
            total = exp.Anonymous(this="TOTAL", expressions=[times])
            as_written = exp.Div(this=total, expression=exp.Sum(this=counted_rows.copy()))
        elif isinstance(written, exp.Sum):
            as_written = exp.Sum(this=times)
        elif isinstance(written, exp.Anonymous) and str(written.name).lower() == "total":
            as_written = exp.Anonymous(this="TOTAL", expressions=[times])
        else:
            return None
        replacements = [
            as_written,
            with_argument(corrected, value.copy()),
            exp.Coalesce(this=exp.Sum(this=counted_rows), expressions=[exp.Literal.number(0)]),
            exp.Count(this=value.copy()),
            exp.Anonymous(
                this="TOTAL",
                expressions=[
                    exp.Mul(
                        this=exp.Abs(this=exp.Cast(this=value.copy(), to=exp.DataType.build("REAL"))),
                        expression=copies.copy(),
                    )
                ],
            )
            if not isinstance(written, exp.GroupConcat)
            else magnitude.copy(),
        ]
        for item, replacement in zip(extras[j : j + 5], replacements, strict=True):
            item.set("this", replacement)
    # Columns the outer query no longer reads (an argument now read through its part) are dropped: the
    # sorter behind the derived table's GROUP BY then carries narrower rows (1-2% of the check's time
    # on bench_aggregates; a text column costs more). No column of a GROUP BY query depends on another's
    # presence: a bare column's row is chosen by the group's MIN part, or is any row of the group.
    _narrow(middle, query)
    return query, middle


def _narrow(rows: exp.Select, query: exp.Select) -> None:
    """Drop, in place, the columns of the derived table ``rows`` that ``query`` does not read."""
    read = {column.name for column in query.find_all(exp.Column) if column.table == INNER_TABLE}
    keep(list(rows.expressions))
    rows.set("expressions", [item for item in rows.expressions if item.alias_or_name in read])


def without_counts(check: exp.Select, extra_count: int) -> exp.Select:
    """A copy of ``grouped_form``'s check query without its trailing ``extra_count`` counting columns:
    the corrected query's grouped form (``read_by`` gives its derived table)."""
    corrected = keep(check.copy())
    items = corrected.expressions
    keep(items[len(items) - extra_count :])
    corrected.set("expressions", items[: len(items) - extra_count])
    return corrected


def read_by(query: exp.Select, rows: exp.Select) -> exp.Select:
    """A copy of the derived table ``rows`` with only the columns ``query`` reads."""
    narrowed = keep(rows.copy())
    _narrow(narrowed, query)
    return narrowed


def _convert(
    node: exp.Expression, combined: Callable[[exp.Expression], exp.Expression | None]
) -> exp.Expression | None:
    """``grouped_form``'s conversion of ``node`` over the join's rows into one over the derived table's
    parts (``combined`` of each aggregate in it), in place; None where one does not convert. Not a
    closure: a nested function that calls itself is a reference cycle (its cell holds it)."""
    if is_aggregate(node) or aggregate_function(node) is not None:
        return combined(node)
    if isinstance(node, exp.Anonymous):
        return None  # perhaps the application's aggregate: it would see one row per partition
    for child in list(node.iter_expressions()):
        if isinstance(child, (exp.Select, exp.Subquery)):
            return None
        converted = _convert(child, combined)
        if converted is None:
            return None
        if converted is not child:
            keep(child).replace(converted)
    return node


def outer_parts(select: exp.Select) -> list[exp.Expression]:
    """The SELECT's parts read after the join: select list, GROUP BY, HAVING, ORDER BY."""
    parts: list[exp.Expression] = list(select.expressions)
    for key in ("group", "having", "order"):
        part = select.args.get(key)
        if part is not None:
            parts.append(part)
    return parts


def window_reads(part: exp.Expression) -> Iterator[exp.Expr]:
    """The nodes a window function of ``part`` reads outside its own function: its arguments, PARTITION
    BY and ORDER BY (``RANK() OVER (ORDER BY SUM(o.total))`` ranks by the group's SUM, D4)."""
    for window in outer_scope(part):
        if isinstance(window, exp.Window):
            function = window.this
            for key, value in window.args.items():
                if key != "this" and isinstance(value, exp.Expression):
                    yield from outer_scope(value)
            if isinstance(function, exp.Expression):
                for argument in function.iter_expressions():
                    yield from outer_scope(argument)


def outside_aggregates(node: exp.Expression) -> bool:
    parent = node.parent
    while parent is not None and not isinstance(parent, exp.Select):
        if isinstance(parent, exp.AggFunc):
            return False
        if isinstance(parent, exp.Anonymous) and aggregate_function(parent) is not None:
            return False
        parent = parent.parent
    return True


def read_outside(select: exp.Select, name: str) -> bool:
    """Whether the derived table's column ``name`` is read outside aggregates in ``select``'s list or ORDER BY."""
    for part in [*select.expressions, select.args.get("order")]:
        if part is None:
            continue
        for node in outer_scope(part):
            if isinstance(node, exp.Column) and node.name == name and outside_aggregates(node):
                return True
    return False


def may_aggregate(call: exp.Expr, expression: exp.Expr) -> bool:
    """Whether ``call`` names a function that may be the application's and stands where an aggregate
    could in ``expression``: not inside an aggregate's or another unknown call's arguments, and wrapping
    no aggregate (which would make it a scalar function)."""
    if not unknown_function(call) or any(is_aggregate(inner) for inner in call.walk() if inner is not call):
        return False
    parent = call.parent
    while parent is not None and parent is not expression.parent:
        if is_aggregate(parent) or unknown_function(parent):
            return False
        parent = parent.parent
    return True
