"""One query for a statement corrected and its SELECTs' checks of every group (issue 44).

``SELECT MAX(s) FROM (SELECT c.name, SUM(o.total) AS s FROM customers c JOIN orders o ... JOIN items i
... GROUP BY c.id)`` has its aggregate at risk in a derived table (``deciding.inner_scopes``): the rule
runs the statement with the derived table corrected (``AggregatePlan.check_sql``) and, where its rows
differ from the statement's, the derived table's check over every group (``ScopeCheck.whole_sql``). Both
evaluate the same corrected SELECT, most of either's cost. ``fused_check`` writes one query that evaluates
it once, on SQLite:

    WITH "__gs_f0"("__gs_f0_0", ...) AS MATERIALIZED (<the derived table's check of every group>)
    SELECT 0, "__gs_o".*, NULL, ... FROM (<the statement, the derived table read from "__gs_f0">) AS "__gs_o"
    UNION ALL SELECT 1, NULL, ..., "__gs_f0_0", ... FROM "__gs_f0"

The check of every group is the corrected SELECT with counting columns after its own (the same FROM,
WHERE and GROUP BY, no HAVING, ORDER BY, LIMIT or OFFSET), so its first columns are the corrected
SELECT's rows: the statement reads those, named as the corrected SELECT names them. A materialised CTE
(``AS MATERIALIZED``, SQLite 3.35) is evaluated once for both readers. Each part has columns of its own,
after the part's number: the leftmost SELECT gives a compound's column names and declared types, so a
part never takes another's (``detect_types`` converters). ``guarded_sqlite._rules.fanout`` splits the rows
back into what the queries would have returned, and runs them on their own where the fused query fails
or returns more rows than the parts may hold together.

Not fused (the queries run on their own, as before): another engine (a CTE is materialised once only
where the engine says so: PostgreSQL's MATERIALIZED, DuckDB's own choice), a statement whose own SELECT
has an aggregate at risk (its check is planned on the statement with its subqueries corrected, not read
from a CTE), a SELECT at risk with HAVING, ORDER BY, LIMIT or OFFSET (its check of every group leaves
them out: other rows than the corrected SELECT's), a statement with ORDER BY, LIMIT or OFFSET of its own
(inside the compound it is a derived table, whose order SQLite keeps in practice but does not promise),
and one whose columns cannot be counted from its text (``*``).
"""

from __future__ import annotations

import sqlite3

from sqlglot import exp

from .deciding import InnerScopes, substituted
from .plans import ScopeCheck
from .trees import keep, text_of

__all__ = ["fused_check"]

_TAIL = ("having", "order", "limit", "offset")


def fused_check(tree: exp.Expression, inner: InnerScopes, dialect: str) -> tuple[str, tuple[int, ...]] | None:
    """The fused query for ``tree`` (whose own SELECT has no aggregate at risk) and its SELECTs at risk
    ``inner``, with the column count of each part (the statement, then each SELECT's check, in
    ``inner.planned`` order); None where it is not fused (the module's docstring says where)."""
    if dialect != "sqlite" or sqlite3.sqlite_version_info < (3, 35, 0) or not inner.planned:
        return None
    if not isinstance(tree, (exp.Select, exp.SetOperation)) or any(tree.args.get(key) for key in _TAIL[1:]):
        return None
    items = tree.selects
    if not items or any(isinstance(item.unalias(), exp.Star) or _star_column(item.unalias()) for item in items):
        return None
    reads: list[tuple[int, exp.Expr, ScopeCheck]] = []
    ctes: list[str] = []
    widths = [len(items)]
    for n, (index, corrected, check) in enumerate(inner.planned):
        shown = corrected.expressions
        if (
            not isinstance(corrected, exp.Select)
            or any(corrected.args.get(key) is not None for key in _TAIL)
            or len(shown) != check.width
            or not all(isinstance(item, exp.Alias) for item in shown)
        ):
            return None
        name = f"__gs_f{n}"
        columns = [f"{name}_{i}" for i in range(check.width + 5 * len(check.risks))]
        # The statement reads the corrected SELECT's rows from the check's first columns, under its names.
        read = keep(
            exp.Select(
                expressions=[
                    exp.alias_(exp.column(column, table=name, quoted=True), item.args["alias"].copy(), copy=False)
                    for column, item in zip(columns, shown)
                ]
            ).from_(exp.Table(this=exp.to_identifier(name, quoted=True)), copy=False)
        )
        reads.append((index, read, check))
        listed = ", ".join(f'"{column}"' for column in columns)
        ctes.append(f'"{name}"({listed}) AS MATERIALIZED ({check.whole_sql})')
        widths.append(len(columns))
    statement = text_of(substituted(tree, InnerScopes(tuple(reads))), dialect)
    total = sum(widths)
    parts = [f'SELECT 0 AS "__gs_part", "__gs_o".*{_nulls(total - widths[0])} FROM ({statement}) AS "__gs_o"']
    before = widths[0]
    for n, width in enumerate(widths[1:]):
        listed = ", ".join(f'"__gs_f{n}_{i}"' for i in range(width))
        parts.append(f'SELECT {n + 1}{_nulls(before)}, {listed}{_nulls(total - before - width)} FROM "__gs_f{n}"')
        before += width
    return f"WITH {', '.join(ctes)} " + " UNION ALL ".join(parts), tuple(widths)


def _nulls(count: int) -> str:
    return ", NULL" * count


def _star_column(node: exp.Expr) -> bool:
    return isinstance(node, exp.Column) and isinstance(node.this, exp.Star)
