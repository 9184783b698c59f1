"""Derived tables, CTEs and views that only join and filter, read through: their tables joined into the
SELECT that reads them, so that a join they hide is analysed like one written out (issue 42, c35).

``SELECT c.name, SUM(l.total) FROM customers c JOIN order_lines l ON l.customer_id = c.id GROUP BY c.id``,
where ``order_lines`` joins every order to its items, repeats each order's total once per item; to the
aggregate analysis the view (or a derived table, or a CTE, with the same body) is one opaque table, and
"one table repeats nothing". ``flattened`` rewrites such a source into its body's tables, renamed
``<alias>__<inner alias>`` so that no name of the outer query is taken, its output columns replaced by the
expressions they stand for, its condition and the body's WHERE moved to the outer WHERE:

    SELECT c.name, SUM(l__o.total) FROM customers c, orders l__o JOIN items l__i ON l__i.order_id = l__o.id
    WHERE l__o.customer_id = c.id GROUP BY c.id

The same rows for every query it rewrites: only inner joins of a source are rewritten, in a SELECT with
no RIGHT or FULL join (an inner join's condition means the same in WHERE there), only bodies that are a
plain SELECT of inner joins, an optional WHERE and named select items (no aggregate, window, DISTINCT,
GROUP BY, HAVING, ORDER BY, LIMIT, OFFSET, set operation, subquery, ``*``), and only where every
reference to the source can be resolved (qualified by its alias, or unqualified in a SELECT reading
nothing else), no select-list alias of the outer query takes a name of the source's columns, and no
inner SELECT reuses its alias. Anything else is left as written (and stays opaque to the analysis).
Pure: a copy of the tree is returned.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from .schema import fold
from .sqltree import within

__all__ = ["flattened"]

MAX_ROUNDS = 16
"""Most sources read through per statement (nested views and CTEs included)."""


def flattened(tree: exp.Expression, view_body: Callable[[exp.Table], exp.Select | None]) -> exp.Expression | None:
    """A copy of ``tree`` with every transparent derived table, CTE reference and view (``view_body``
    gives a view's parsed body, or None for a table) read through; None where there is none."""
    with_ = tree.args.get("with_") or tree.args.get("with")
    if with_ is not None and with_.args.get("recursive"):
        return None
    if not _candidates(tree, with_, view_body):
        return None  # the common case: no copy made (a tree's copy costs about what its parse does)
    copy = tree.copy()
    with_ = copy.args.get("with_") or copy.args.get("with")
    ctes = {fold(cte.alias_or_name): cte.this for cte in with_.expressions} if with_ is not None else {}
    changed = False
    for _ in range(MAX_ROUNDS):
        if not any(_merge_one(select, ctes, view_body) for select in list(copy.find_all(exp.Select))):
            break
        changed = True
    return copy if changed else None


def _candidates(
    tree: exp.Expression, with_: exp.Expression | None, view_body: Callable[[exp.Table], exp.Select | None]
) -> bool:
    """Whether any SELECT of ``tree`` reads a source that may be transparent (checked on the original)."""
    ctes = {fold(cte.alias_or_name): cte.this for cte in with_.expressions} if with_ is not None else {}
    for select in tree.find_all(exp.Select):
        from_ = select.args.get("from_")
        if from_ is None:
            continue
        sources = (from_.this, *(join.this for join in select.args.get("joins") or ()))
        for source in sources:
            body, alias = _body_of(source, ctes, view_body, len(sources))
            if body is not None and alias and _transparent(body):
                return True
    return False


def _merge_one(
    select: exp.Select, ctes: dict[str, exp.Expression], view_body: Callable[[exp.Table], exp.Select | None]
) -> bool:
    """Read one transparent source of ``select`` through (in place); whether one was."""
    from_ = select.args.get("from_")
    if from_ is None:
        return False
    joins: list[exp.Join] = list(select.args.get("joins") or [])
    if any((join.side or "").upper() in ("RIGHT", "FULL") for join in joins):
        return False  # a condition moved to WHERE would drop the rows such a join NULL-extends
    sources: list[exp.Expression] = [from_.this, *(join.this for join in joins)]
    for position, source in enumerate(sources):
        join = joins[position - 1] if position else None
        if join is not None and (
            (join.side or "") or (join.kind or "").upper() not in ("", "INNER", "CROSS") or join.args.get("using")
        ):
            continue
        if join is not None and (join.method or ""):
            continue  # NATURAL
        body, alias = _body_of(source, ctes, view_body, len(sources))
        if body is None or not alias or not _transparent(body):
            continue
        if _merge(select, position, source, join, body.copy(), alias, len(sources)):
            return True
    return False


def _body_of(
    source: exp.Expression,
    ctes: dict[str, exp.Expression],
    view_body: Callable[[exp.Table], exp.Select | None],
    source_count: int,
) -> tuple[exp.Select | None, str]:
    """A source's body and the alias its tables are renamed under: a derived table without an alias
    (SQLite takes one) is read through as ``subquery`` where it is its SELECT's only source, whose
    columns are then all unqualified."""
    if isinstance(source, exp.Subquery) and isinstance(source.this, exp.Select):
        return source.this, source.alias or ("subquery" if source_count == 1 else "")
    if isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier):
        alias = source.alias_or_name
        if not source.db and fold(source.name) in ctes:
            body = ctes[fold(source.name)]
            return (body if isinstance(body, exp.Select) else None), alias
        return view_body(source), alias
    return None, ""


def _transparent(body: exp.Select) -> bool:
    """Whether ``body`` only joins (inner) and filters, with named columns."""
    if any(body.args.get(key) for key in ("group", "having", "order", "limit", "offset", "distinct", "with_")):
        return False
    if any(isinstance(node, (exp.AggFunc, exp.Window, exp.Star)) for node in body.walk()):
        return False
    if any(node is not body for node in body.find_all(exp.Select)):
        return False
    from_ = body.args.get("from_")
    if from_ is None or not isinstance(from_.this, exp.Table):
        return False
    for join in body.args.get("joins") or ():
        if (join.side or "") or (join.kind or "").upper() not in ("", "INNER", "CROSS") or join.args.get("using"):
            return False
        if join.method or not isinstance(join.this, exp.Table):
            return False
    return all(item.alias_or_name for item in body.expressions)


def _merge(
    select: exp.Select,
    position: int,
    source: exp.Expression,
    join: exp.Join | None,
    body: exp.Select,
    alias: str,
    source_count: int,
) -> bool:
    key = fold(alias)
    outputs: dict[str, exp.Expression] = {}
    for item in body.expressions:
        name = fold(item.alias_or_name)
        if name in outputs:
            return False
        outputs[name] = item.unalias()
    # Another SELECT inside that takes the alias would see its own source, not this one.
    for inner in select.find_all(exp.Select):
        if (
            inner is not select
            and not within(inner, source)
            and any(fold(node.alias_or_name) == key for node in inner.find_all(exp.Table, exp.Subquery))
        ):
            return False
    taken = {fold(item.alias) for item in select.expressions if item.alias}
    if taken & set(outputs):
        return False  # ORDER BY/GROUP BY of that name would mean the alias, not the column
    # The source's own body is not the outer query's: its columns are left to the renaming below.
    own = [
        column
        for column in select.find_all(exp.Column)
        if not isinstance(column.this, exp.Star) and not within(column, source)
    ]
    references = [column for column in own if fold(column.table) == key and not column.args.get("db")]
    unqualified = [
        column
        for column in own
        if not column.table and fold(column.name) in outputs and column.find_ancestor(exp.Select) is select
    ]
    if unqualified and source_count > 1:
        return False
    if any(
        not column.table and fold(column.name) in outputs and column.find_ancestor(exp.Select) is not select
        for column in own
    ):
        # A subquery's unqualified column of that name may be the source's output (SQLite looks outward
        # for a name its own tables lack): read through, it would be another table's column of that name.
        return False
    if any(fold(column.name) not in outputs for column in references):
        return False
    # The body's tables, renamed so that no name of the outer query is taken.
    names = {fold(node.alias_or_name) for node in select.find_all(exp.Table, exp.Subquery)}
    renames: dict[str, str] = {}
    tables = [body.args["from_"].this, *(j.this for j in body.args.get("joins") or ())]
    for table in tables:
        inner_alias = fold(table.alias_or_name)
        if inner_alias in renames:
            return False
        new = f"{alias}__{table.alias_or_name}"
        while fold(new) in names:
            new += "_"
        names.add(fold(new))
        renames[inner_alias] = new
    single = len(tables) == 1
    for column in list(body.find_all(exp.Column)):
        if column.table:
            if fold(column.table) not in renames:
                return False
            column.set("table", exp.to_identifier(renames[fold(column.table)]))
        elif single:
            column.set("table", exp.to_identifier(renames[fold(tables[0].alias_or_name)]))
        else:
            return False  # an unqualified column of a join: its table is not known here
    for table in tables:
        table.set("alias", exp.TableAlias(this=exp.to_identifier(renames[fold(table.alias_or_name)])))
    # The references, replaced by what they stand for (a select item keeps the name it showed).
    for column in [*references, *unqualified]:
        replacement: exp.Expr = outputs[fold(column.name)].copy()
        if isinstance(column.parent, exp.Select) and column in column.parent.expressions:
            if not isinstance(replacement, exp.Column) or fold(replacement.name) != fold(column.name):
                replacement = exp.alias_(replacement, column.name)
        column.replace(replacement)
    conditions = [c for c in (body.args.get("where") and body.args["where"].this,) if c is not None]
    if join is not None and join.args.get("on") is not None:
        conditions.append(join.args["on"])
    first, rest = tables[0], [j for j in body.args.get("joins") or ()]
    if position == 0:
        select.args["from_"].set("this", first)
        select.set("joins", [*rest, *(select.args.get("joins") or [])])
    else:
        assert join is not None
        spliced = exp.Join(this=first, kind="CROSS")
        joins = list(select.args.get("joins") or [])
        at = joins.index(join)
        select.set("joins", [*joins[:at], spliced, *rest, *joins[at + 1 :]])
    for condition in conditions:
        select.where(condition.copy(), copy=False)
    return True
