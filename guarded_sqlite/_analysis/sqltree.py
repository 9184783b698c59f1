"""Pure questions about a sqlglot SELECT tree, for the join analysis (``joins``), the provenance verdict
and the aggregate rule: its conjuncts and join groups, its select list and grouping, whether an
expression is deterministic and safe to run again (``rerun_hazard``), the keys and output names of a
derived table or CTE (``derived_keys``), and canonical forms of expressions for comparing conditions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from typing import cast

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from .rewrite import quiet_sqlglot
from .schema import SchemaFacts, fold
from .trees import forget_positions, keep, release, text_of

__all__ = [
    "ROWID_NAMES",
    "canonical",
    "conjuncts",
    "derived_keys",
    "expanded_items",
    "grouping",
    "is_one",
    "is_parameter",
    "join_group",
    "not_modelled",
    "numbering_keys",
    "outer_reference",
    "outer_scope",
    "output_names",
    "parse_single",
    "plain_column",
    "predicate_conjuncts",
    "rerun_hazard",
    "select_list",
    "source_count",
    "too_big",
    "within",
]

ROWID_NAMES = frozenset({"rowid", "oid", "_rowid_"})
"""SQLite's names for a table's row id (unless a column takes one of them)."""


@lru_cache(maxsize=256)
def predicate_conjuncts(predicate: str, dialect: str) -> tuple[exp.Expression, ...] | None:
    """A partial index's predicate as the ``canonical`` forms of its conjuncts (its columns are the
    table's own), or None if it cannot be read. Cached: one parse per index text, never modified."""
    try:
        with quiet_sqlglot():
            tree: exp.Expression = exp.maybe_parse(predicate, dialect=dialect)
    except (SqlglotError, ValueError, RecursionError):
        return None
    forms: list[exp.Expression] = []
    for conjunct in conjuncts(tree):
        form = canonical(conjunct, lambda column: None if is_parameter(column) else fold(column.name))
        if form is None:
            release(tree, forms)
            return None
        forms.append(form)
    # Kept by the cache without parent links: an evicted entry is freed at once, not by the collector.
    release(tree, forms)
    return tuple(forms)


def canonical(node: exp.Expression, place: Callable[[exp.Column], str | None]) -> exp.Expression | None:
    """A condition in the form partial-index predicates are compared in: every column replaced by its
    folded name (``place``: the name, or None when the column is not the table's, which makes the whole
    condition None), parentheses dropped, ``x IN (v)`` as ``x = v`` and a column written first in an
    equality, a string literal cast to text as the literal. Nothing else is rewritten: ``deleted_at IS
    NULL``, ``x IS NOT NULL`` and ``status = 'live'`` match only themselves (a literal only the same
    literal), any other condition only the same tree. A condition with a subquery is None (its columns
    are another scope's)."""
    if any(isinstance(n, (exp.Select, exp.Subquery, exp.Exists)) for n in node.walk()):
        return None
    tree: exp.Expression = keep(node.copy())
    while isinstance(tree, exp.Paren):
        tree = tree.this
    for column in list(tree.find_all(exp.Column)):
        name = place(column)
        if name is None:
            return None
        plain = exp.Column(this=exp.Identifier(this=name, quoted=True))
        if column is tree:
            tree = plain
        else:
            keep(column).replace(plain)
    for paren in list(tree.find_all(exp.Paren)):
        paren.replace(paren.this)
    # A string literal cast to text is that literal (PostgreSQL's pg_get_expr writes 'x'::text); a cast
    # of a column stays, as it can change what compares equal.
    for convert in list(tree.find_all(exp.Cast)):
        literal = convert.this
        if isinstance(literal, exp.Literal) and literal.is_string and convert.to.is_type("text", "varchar"):
            if convert is tree:
                tree = literal
            else:
                keep(convert).replace(literal)
    if isinstance(tree, exp.In) and not tree.args.get("query") and len(tree.expressions) == 1:
        tree = exp.EQ(this=tree.this, expression=tree.expressions[0])
    if isinstance(tree, exp.EQ) and isinstance(tree.expression, exp.Column) and not isinstance(tree.this, exp.Column):
        tree = exp.EQ(this=tree.expression, expression=tree.this)
    return tree


def join_group(source: exp.Expression) -> tuple[exp.Expression, list[exp.Join]] | None:
    """A parenthesised join group, ``(b JOIN c ON ...)`` (sqlglot: an alias-less subquery around a table
    that carries the joins), as its first table and its joins; None for any other FROM item."""
    node = source
    while isinstance(node, (exp.Subquery, exp.Paren)) and not node.alias:
        node = node.this
    if isinstance(node, exp.Table) and node.args.get("joins"):
        return node, list(node.args["joins"])
    return None


def source_count(source: exp.Expression) -> int:
    """How many instances ``_add_sources`` adds for a FROM item (SEMI/ANTI joins add none)."""
    group = join_group(source)
    if group is None:
        return 1
    _, joins = group
    semi = ("SEMI", "ANTI")
    return 1 + sum(source_count(j.this) for j in joins if (j.kind or "").upper() not in semi)


def too_big(node: exp.Expression, limit: int) -> bool:
    """Whether the tree has more than ``limit`` nodes (stops counting there)."""
    for count, _ in enumerate(node.walk(), start=1):
        if count > limit:
            return True
    return False


def conjuncts(node: exp.Expression) -> Iterator[exp.Expression]:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        yield from conjuncts(node.this)
        yield from conjuncts(node.expression)
    else:
        yield node


def outer_scope(node: exp.Expression) -> Iterator[exp.Expr]:
    """Nodes of ``node`` outside window functions and subqueries."""
    yield from node.walk(prune=lambda n: isinstance(n, (exp.Window, exp.Subquery, exp.Select, exp.Exists)))


def select_list(select: exp.Select) -> tuple[set[str] | bool, list[exp.Column], str]:
    """Stars (True, or the qualifiers of ``t.*``), the columns read outside windows, and a description of
    the select list when it reads no column at all (else empty)."""
    star: set[str] | bool = False
    qualified: set[str] = set()
    columns: list[exp.Column] = []
    windows = False
    for item in select.expressions:
        body = item.unalias()
        if isinstance(body, exp.Star):
            star = True
            continue
        if isinstance(body, exp.Column) and isinstance(body.this, exp.Star):
            qualified.add(fold(body.table))
            continue
        for node in outer_scope(body):
            if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star) and not is_parameter(node):
                columns.append(node)
            elif isinstance(node, exp.Window):
                windows = True
    if star is False and qualified:
        star = qualified
    if star or columns:
        return star, columns, ""
    what = "window functions give one value per row" if windows else "the select list reads no column"
    return star, columns, what


_ANONYMOUS_AGGREGATES = frozenset({"total", "group_concat", "string_agg", "json_group_array", "json_group_object"})


def grouping(select: exp.Select) -> str:
    if select.args.get("group") is not None:
        return "grouped query: each row is its own group"
    for item in select.expressions:
        for node in outer_scope(item):
            if isinstance(node, exp.AggFunc) or (
                isinstance(node, exp.Anonymous) and str(node.name).lower() in _ANONYMOUS_AGGREGATES
            ):
                return "aggregate query: one row per group"
    return ""


def is_parameter(column: exp.Column) -> bool:
    """A ``$name`` parameter, which sqlglot's SQLite dialect parses as a column."""
    ident = column.this
    return (
        not column.table and isinstance(ident, exp.Identifier) and not ident.quoted and str(ident.this).startswith("$")
    )


# SQLite's deterministic built-in functions that sqlglot parses as anonymous calls; any other anonymous
# name may be a user function (which may be non-deterministic, e.g. registered without deterministic=True).
_DETERMINISTIC_BUILTINS = frozenset(
    {
        "char", "datetime", "format", "glob", "iif", "json", "json_extract", "json_type", "julianday",
        "like", "likelihood", "likely", "ltrim", "printf", "quote", "rtrim", "sign", "soundex", "unhex",
        "unicode", "unixepoch", "unlikely",
    }
)  # fmt: skip
_NON_DETERMINISTIC = tuple(
    getattr(exp, name)
    for name in (
        "Rand",
        "Randn",
        "Randstr",
        "Uuid",
        "CurrentDate",
        "CurrentDatetime",
        "CurrentTime",
        "CurrentTimestamp",
    )
    if hasattr(exp, name)
)


def not_modelled(node: exp.Expression) -> str:
    """Why the analysis cannot treat ``node`` as a deterministic function of the columns it reads
    (the same inputs always give the same value), or "" when it can."""
    for child in node.walk():
        if isinstance(child, (exp.Subquery, exp.Select, exp.Exists, exp.Star, exp.Window)):
            return "a subquery or window"
        why = _unknown_call(child, aggregates_known=False)
        if why:
            return why
    return ""


def rerun_hazard(tree: exp.Expression) -> str:
    """Why running ``tree`` once more could do what the caller's execution did not, or "": it calls a
    function that may be a user function (any name sqlglot does not know as a built-in; a user function
    may count its calls or write) or a non-deterministic one (``random()``, the current time), anywhere
    in the statement. The guard's own re-executions skip such statements."""
    for node in tree.walk():
        why = _unknown_call(node, aggregates_known=True)
        if why:
            return f"{why}: the statement is not run again"
    return ""


def unknown_function(node: exp.Expr) -> bool:
    """Whether ``node`` calls a name that is neither a built-in sqlglot knows nor one of SQLite's: it may
    be the application's, an aggregate (``create_aggregate``) as well as a scalar function."""
    return isinstance(node, exp.Anonymous) and bool(_unknown_call(node, aggregates_known=True))


def _unknown_call(node: exp.Expr, aggregates_known: bool) -> str:
    """Why one node is not a call of a deterministic built-in (a name that may be a user function, a
    non-deterministic function, the current time), or "". ``aggregates_known``: SQLite's aggregates that
    sqlglot parses as anonymous calls (``total()``) count as built-ins."""
    if isinstance(node, _CLOCK_CALLS) and _reads_clock(node):
        return f"{text_of(node, 'sqlite')} reads the current time"
    if isinstance(node, exp.Anonymous):
        name = str(node.name).lower()
        if name not in _DETERMINISTIC_BUILTINS and not (aggregates_known and name in _ANONYMOUS_AGGREGATES):
            return f"function {name}() may be a user function or non-deterministic"
    elif isinstance(node, _NON_DETERMINISTIC):
        return f"{text_of(node, 'sqlite')} is not deterministic"
    elif isinstance(node, exp.Literal) and node.is_string and node.this.strip().lower() == "now":
        return "'now' is not deterministic"
    return ""


_CLOCK_CALLS = (exp.Anonymous, exp.Date)
_CLOCK_FUNCTIONS = frozenset({"date", "time", "datetime", "julianday", "unixepoch", "timediff"})


def _reads_clock(node: exp.Expression) -> bool:
    """Whether ``node`` is one of SQLite's date and time functions called without a time value, which
    then reads the current time (``unixepoch()``, ``date()``: c32)."""
    if isinstance(node, exp.Date):
        return node.args.get("this") is None and not node.expressions
    return str(node.name).lower() in _CLOCK_FUNCTIONS and not node.expressions


def derived_keys(
    body: exp.Expression, schema: SchemaFacts, ctes: dict[str, exp.Expression]
) -> tuple[frozenset[str] | None, tuple[frozenset[str], ...], str]:
    """Output columns and keys of a derived table or CTE body, or why it is opaque."""
    while isinstance(body, exp.Subquery):
        body = body.this
    if isinstance(body, exp.Union) and body.args.get("distinct"):
        names = output_names(cast(Sequence[exp.Expression], body.selects))
        return (frozenset(names), (frozenset(names),), "") if names else (None, (), "has unnamed columns")
    if not isinstance(body, exp.Select):
        return None, (), "is not a plain SELECT"
    names = output_names(body.expressions)
    items: list[exp.Expression] = list(body.expressions)
    if names is None:
        expanded = expanded_items(body, schema, ctes)
        if expanded is None:
            return None, (), "selects * (columns unknown)"
        items = expanded
        names = [fold(item.alias_or_name) for item in items]
    outputs = frozenset(names)
    found, why = _body_keys(body, schema, ctes, items, names)
    keys = tuple(dict.fromkeys([*found, *numbering_keys(body, items, names)]))
    return outputs, keys, "" if keys else why


def _body_keys(
    body: exp.Select,
    schema: SchemaFacts,
    ctes: dict[str, exp.Expression],
    items: list[exp.Expression],
    names: list[str],
) -> tuple[tuple[frozenset[str], ...], str]:
    """The keys a body's LIMIT 1, DISTINCT, grouping or single keyed table gives its output (by output
    name), or none and why."""
    outputs = frozenset(names)
    if body.args.get("limit") is not None and is_one(body.args["limit"]):
        return (frozenset(),), ""
    if body.args.get("distinct") is not None and body.args["distinct"].args.get("on") is None:
        return (outputs,), ""
    group = body.args.get("group")
    if group is not None:
        if any(group.args.get(part) for part in ("rollup", "cube", "grouping_sets", "totals")) or any(
            isinstance(item, (exp.Rollup, exp.Cube, exp.GroupingSets)) for item in group.expressions
        ):
            return (), "groups by ROLLUP, CUBE or GROUPING SETS"
        single = _single_table(body)

        def output(node: exp.Expression) -> str | None:
            # By the column's qualified place, never its bare name: ``o.id`` is not ``c.id`` (c05).
            place = _column_place(node, single)
            found = [
                name
                for item, name in zip(items, names)
                if place is not None
                and name
                and names.count(name) == 1
                and _column_place(item.unalias(), single) == place
            ]
            return found[0] if len(found) == 1 else None

        key = [output(g) for g in group.expressions]
        if key and all(key):
            return (frozenset(k for k in key if k),), ""
        return (), "groups by something it does not output"
    if grouping(body):
        return (frozenset(),), ""  # an aggregate without GROUP BY: at most one row
    from_ = body.args.get("from_") or body.args.get("from")
    if from_ is None or body.args.get("joins"):
        return (), "joins tables (not seen through)"
    table = from_.this
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier) or fold(table.name) in ctes:
        return (), "reads a nested derived table (not seen through)"
    facts = schema.table(table.name, table.db or None)
    if facts is None or facts.is_view:
        return (), f"reads {table.name}, whose keys are unknown"
    renamed: dict[str, str] = {}
    for item, name in zip(items, names):
        inner = item.unalias()
        if isinstance(inner, exp.Column) and not isinstance(inner.this, exp.Star):
            renamed.setdefault(fold(inner.name), name)
    keys = tuple(frozenset(renamed[c] for c in key) for key in facts.identity_keys if key <= renamed.keys())
    return keys, "does not output a key of " + table.name if not keys else ""


def outer_reference(body: exp.Expression, schema: SchemaFacts, ctes: dict[str, exp.Expression]) -> str:
    """Why a derived table's body may read the outer query's columns (it is then correlated: DuckDB
    binds it laterally), or "". A qualified column counts when no table, derived table or CTE inside the
    body takes its qualifier; an unqualified one when no source inside the body is known to hold it
    (a source whose columns are not known, a CTE or a nested derived table, may: failing closed)."""
    inner: set[str] = set(ctes)
    columns: set[str] | None = set()
    for node in body.walk():
        if isinstance(node, exp.CTE):
            inner.add(fold(node.alias_or_name))
            columns = None
        elif isinstance(node, exp.Subquery) and node.alias:
            inner.add(fold(node.alias))
            columns = None
        elif isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier) and node.name:
            inner.update(fold(n) for n in (node.alias, node.name) if n)
            facts = None if fold(node.name) in ctes else schema.table(node.name, node.db or None)
            if facts is None:
                columns = None
            elif columns is not None:
                columns |= facts.column_names | ROWID_NAMES
        elif isinstance(node, exp.Table):
            columns = None  # a table function
    outputs = {fold(item.alias) for select in body.find_all(exp.Select) for item in select.expressions if item.alias}
    for column in body.find_all(exp.Column):
        if isinstance(column.this, exp.Star) or is_parameter(column):
            continue
        name = fold(column.name)
        if column.table:
            if fold(column.table) not in inner:
                return f"reads {text_of(column)} of the outer query"
        elif name not in outputs and (columns is None or name not in columns):
            if columns is not None:
                return f"reads {text_of(column)} of the outer query"
            return f"reads {text_of(column)}, which no table inside it is known to hold"
    return ""


def numbering_keys(body: exp.Select, items: list[exp.Expression], names: list[str]) -> list[frozenset[str]]:
    """Keys a body gives its own output by numbering or picking rows, by output name, whatever else it
    does (joins, WHERE, GROUP BY, DISTINCT: they decide which rows there are, not how they are numbered):

    * ``ROW_NUMBER() OVER (PARTITION BY p1, p2 ...) AS n``: {p1, p2, ..., n}, {n} without PARTITION BY
      (RANK and DENSE_RANK give ties the same number; a named window is not looked up);
    * ``DISTINCT ON (e1, e2 ...)`` (PostgreSQL): {e1, e2, ...}, one row per distinct combination.

    Each expression must be a column the body outputs under a name no other output takes; NULLs of a
    partition column form one partition (and DISTINCT ON keeps one row for them), so these keys hold
    with NULLs as values, as the keys of a grouped body do."""
    single = _single_table(body)

    def output(node: exp.Expr) -> str | None:
        place = _column_place(node, single)
        if place is None:
            return None
        for item, name in zip(items, names):
            if name and names.count(name) == 1 and _column_place(item.unalias(), single) == place:
                return name
        return None

    keys: list[frozenset[str]] = []
    for item, name in zip(items, names):
        window = item.unalias()
        if (
            not isinstance(window, exp.Window)
            or not isinstance(window.this, exp.RowNumber)
            or window.args.get("alias") is not None
            or not name
            or names.count(name) != 1
        ):
            continue
        parts = [output(p) for p in window.args.get("partition_by") or ()]
        if all(parts):
            keys.append(frozenset([*(p for p in parts if p), name]))
    distinct = body.args.get("distinct")
    on = distinct.args.get("on") if distinct is not None else None
    if on is not None:
        parts = [output(e) for e in (on.expressions if isinstance(on, exp.Tuple) else [on])]
        if parts and all(parts):
            keys.append(frozenset(p for p in parts if p))
    return keys


def _single_table(body: exp.Select) -> frozenset[str] | None:
    """The names a one-table body's columns may be qualified with (its alias and name, folded), or None
    when the body reads more than one table (or no table)."""
    from_ = body.args.get("from_") or body.args.get("from")
    if from_ is None or body.args.get("joins") or not isinstance(from_.this, exp.Table):
        return None
    table = from_.this
    return frozenset(fold(n) for n in (table.alias, table.name) if n)


def _column_place(node: exp.Expr, single: frozenset[str] | None) -> tuple[str, str] | None:
    """A column as (qualifier, name), folded, to match a window's or DISTINCT ON's column with the
    select list's: in a one-table body the qualifier is dropped (it can only name that table); in a
    join it must be written the same on both sides, as a bare name may be another table's column (c05)."""
    while isinstance(node, exp.Paren):
        node = node.this
    if not isinstance(node, exp.Column) or isinstance(node.this, exp.Star) or is_parameter(node):
        return None
    qualifier = fold(node.table) if node.table else ""
    if single is not None:
        if qualifier and qualifier not in single:
            return None
        qualifier = ""
    return qualifier, fold(node.name)


def output_names(items: Sequence[exp.Expression]) -> list[str] | None:
    names = []
    for item in items:
        if isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star)):
            return None
        names.append(fold(item.alias_or_name))
    return names


def expanded_items(
    body: exp.Select, schema: SchemaFacts, ctes: dict[str, exp.Expression]
) -> list[exp.Expression] | None:
    """The select list of a one-table SELECT with ``*`` or ``t.*`` spelled out as the table's declared
    columns; None for anything else (a join, a CTE or view underneath, an unknown table)."""
    from_ = body.args.get("from_") or body.args.get("from")
    if from_ is None or body.args.get("joins"):
        return None
    table = from_.this
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier) or fold(table.name) in ctes:
        return None
    facts = schema.table(table.name, table.db or None)
    if facts is None or facts.is_view:
        return None
    items: list[exp.Expression] = []
    for item in body.expressions:
        if isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star)):
            items.extend(exp.column(column, quoted=True) for column in facts.columns)
        else:
            items.append(item)
    return items


def plain_column(node: exp.Expression) -> str:
    body = node.unalias()
    return fold(body.name) if isinstance(body, exp.Column) else ""


def is_one(limit: exp.Expression) -> bool:
    value = limit.expression if isinstance(limit, exp.Limit) else limit
    return isinstance(value, exp.Literal) and value.this == "1"


def within(node: exp.Expression, outer: exp.Expression) -> bool:
    """Whether ``node`` sits inside ``outer`` (identity, not equality: the same place in the tree)."""
    parent = node.parent
    while parent is not None:
        if parent is outer:
            return True
        parent = parent.parent
    return False


def parse_single(sql: str, dialect: str) -> exp.Expression | str:
    """The syntax tree of a single statement, kept for the rule's analysis (``trees.keep``), or why there
    is none. A table written in parentheses (``FROM (customers c), orders o``) is read as the table
    itself, and a parenthesised join group first in FROM as its joins (PostgreSQL and DuckDB write
    their views' bodies so)."""
    try:
        with quiet_sqlglot():
            trees = [t for t in sqlglot.parse(sql, read=dialect) if t is not None and not isinstance(t, exp.Semicolon)]
    except (SqlglotError, ValueError, RecursionError) as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        return f"unparseable SQL: {first}"
    keep(forget_positions(trees))  # by the rule's analysis, until it is done
    if len(trees) != 1:
        return "not a single statement"
    tree = cast(exp.Expression, trees[0])
    for node in list(tree.find_all(exp.Subquery)):
        if not isinstance(node.this, exp.Table) or node.alias or not isinstance(node.parent, (exp.From, exp.Join)):
            continue
        grouped = node.this.args.get("joins")
        if not grouped:
            node.replace(node.this)  # the subquery node is dropped with the parse's other trees
        elif isinstance(node.parent, exp.From) and isinstance(node.parent.parent, exp.Select):
            # ``FROM (a JOIN b ON ...) JOIN c``: joins group to the left, so the parentheses change nothing.
            select = node.parent.parent
            table = node.this
            table.set("joins", None)
            node.replace(table)
            select.set("joins", [*grouped, *(select.args.get("joins") or [])])
    return tree
