"""Aggregate fan-out: a value aggregate (``SUM``, ``AVG``, ``TOTAL``, ``GROUP_CONCAT``/``string_agg``)
over a join that repeats its argument's rows, and the query that computes what it meant.

``SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id JOIN items i ON
i.order_id = o.id GROUP BY c.id`` adds each order's total once per item line: no duplicate row is left
to see, every total is wrong. ``plan_aggregates`` decides, from the declared keys and the query's
equalities (the key closure of ``guarded_sqlite.provenance``), which aggregates are at risk: those
whose argument's instances, with the GROUP BY columns and the pins, do not determine every other
instance of the join. Safe by construction: ``MIN``/``MAX``, counts (whether a count of join rows is
inflated depends on what the question counts), ``DISTINCT`` aggregates, arguments at the join's own
grain (``SUM(i.qty * p.cost)``), semi-joins (they are not instances), pinned keys, and derived tables
keyed at the right grain. As everywhere in the analysis, a fan-out counts only if it holds whatever the
instances the analysis cannot see do.

For the aggregates at risk it writes the corrected query: the same FROM and WHERE in a derived table
that numbers the rows of each (group, key of the argument's tables) combination, and the same SELECT,
GROUP BY, HAVING and ORDER BY over it, with each aggregate at risk reading its argument only on the
first row of each combination (``SUM(CASE WHEN rn = 1 THEN arg END)``). That is exact: each row of the
argument's tables counts once per group, whatever the join repeats, for integers and floats alike, on
SQLite, DuckDB and PostgreSQL (window functions). Whether the data realises the risk is decided by
running it (``guarded_sqlite.patching``); this module only reads trees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from sqlglot import exp

from .joins import Col, Unanalysable, outer_scope
from .provenance import MAX_NODES, _Analysis
from .schema import SchemaFacts, fold

__all__ = ["AggregatePlan", "AggregateRisk", "plan_aggregates"]


@dataclass(frozen=True)
class AggregateRisk:
    """One value aggregate whose argument's rows the join can repeat."""

    function: str
    """``"SUM"``, ``"AVG"``, ``"TOTAL"`` or ``"GROUP_CONCAT"`` (``string_agg`` included)."""

    argument: str
    """The argument's SQL."""

    repeated: tuple[str, ...]
    """The tables the argument reads (``alias (table)``), whose rows the join repeats."""

    repeating: tuple[str, ...]
    """The tables that repeat them: not determined by the argument's tables and the groups."""

    column: int | None
    """Position of the aggregate in the select list when it is a whole select item, else None."""


@dataclass(frozen=True)
class AggregatePlan:
    """What ``plan_aggregates`` found: the aggregates at risk and the corrected query, or why none."""

    risks: tuple[AggregateRisk, ...] = ()
    corrected_sql: str | None = None
    note: str = ""
    """Why no aggregate is at risk, or why the risk cannot be corrected (then ``corrected_sql`` is None)."""
    separators: dict[int, str] = field(default_factory=dict)
    """Select-list position -> separator of each GROUP_CONCAT at risk (its parts compare as a multiset)."""
    steady: frozenset[int] = frozenset()
    """Select-list positions of the items with an aggregate but none at risk: the corrected query computes
    them over the same rows, perhaps in another order (a GROUP_CONCAT's parts, a float sum's last bits),
    so they do not decide whether the risk is realised."""


_ANONYMOUS = {"total": "TOTAL"}
_ROW_IDS = {"duckdb": "rowid", "postgres": "ctid"}
_INNER = "__gs_t"


def _function(node: exp.Expr) -> str | None:
    if isinstance(node, exp.Sum):
        return "SUM"
    if isinstance(node, exp.Avg):
        return "AVG"
    if isinstance(node, exp.GroupConcat):
        return "GROUP_CONCAT"
    if isinstance(node, exp.Anonymous):
        return _ANONYMOUS.get(str(node.name).lower())
    return None


def _argument(node: exp.Expr) -> exp.Expression | None:
    if isinstance(node, exp.Anonymous):
        return node.expressions[0] if len(node.expressions) == 1 else None
    argument = node.args.get("this")
    return argument if isinstance(argument, exp.Expression) and not isinstance(argument, exp.Distinct) else None


def plan_aggregates(tree: exp.Expression, schema: SchemaFacts, dialect: str = "sqlite") -> AggregatePlan:
    """The value aggregates of ``tree``'s outermost SELECT that a join may inflate, and the corrected
    query. Never raises: a shape it does not handle is reported in ``note``."""
    try:
        return _Planner(tree, schema, dialect).plan()
    except Unanalysable as why:
        return AggregatePlan(note=str(why))
    except Exception as error:  # a tree shape we did not foresee must never break the caller
        return AggregatePlan(note=f"analysis failed: {type(error).__name__}: {error}")


class _Planner(_Analysis):
    def plan(self) -> AggregatePlan:
        select = self.root
        if not isinstance(select, exp.Select):
            return AggregatePlan(note="not a single SELECT")
        if _too_big(select):
            return AggregatePlan(note=f"query has more than {MAX_NODES} syntax nodes: not analysed")
        with_ = select.args.get("with_") or select.args.get("with")
        if with_ is not None:
            for cte in with_.expressions:
                self.ctes[fold(cte.alias_or_name)] = cte.this
        from_ = select.args.get("from_") or select.args.get("from")
        if from_ is None:
            return AggregatePlan(note="no FROM clause")
        candidates = [
            (cast(exp.Expression, node), name)
            for part in _outer_parts(select)
            for node in outer_scope(part)
            if (name := _function(node)) is not None
        ]
        if not candidates:
            return AggregatePlan(note="no value aggregate")
        self._add_sources(from_.this, None)
        for join in select.args.get("joins") or ():
            self._add_join(join, None)
        if len(self.instances) < 2:
            return AggregatePlan(note="one table: nothing repeats its rows")
        where = select.args.get("where")
        if where is not None:
            from .joins import conjuncts

            for conjunct in conjuncts(where.this):
                self._constraint(conjunct, inner=None)
        groups = self._group_expressions(select)
        seeds = {col for expression in groups if (col := self._resolve_node(expression)) is not None}
        unseen = {k for k in range(len(self.instances)) if not self._known(k) or k in self.undecidable}
        labels = [instance.label for instance in self.instances]
        risks: list[tuple[exp.Expression, AggregateRisk, tuple[Col, ...]]] = []
        for node, name in candidates:
            argument = _argument(node)
            if argument is None or isinstance(node.parent, exp.Filter):
                continue  # DISTINCT inside: counts each value once already; FILTER: see _rewrite's caveat
            reads = self._reads(argument)
            if not reads:
                continue  # SUM(1) and the like count join rows: counts are not flagged
            closure = self._closure(reads | unseen, seeds)
            repeating = [k for k in range(len(self.instances)) if k not in closure.determined and k not in unseen]
            if not repeating:
                continue
            keys = self._keys(reads)
            if keys is None:
                return AggregatePlan(note=f"{name}({argument.sql(dialect=self.dialect)}): its tables have no key")
            column = next(
                (i for i, item in enumerate(select.expressions) if item.unalias() is node),
                None,
            )
            risk = AggregateRisk(
                name,
                argument.sql(dialect=self.dialect),
                tuple(labels[k] for k in sorted(reads)),
                tuple(labels[k] for k in repeating),
                column,
            )
            risks.append((node, risk, keys))
        if not risks:
            return AggregatePlan(note="every value aggregate reads rows the join does not repeat")
        found = tuple(risk for _, risk, _ in risks)
        separators: dict[int, str] = {}
        for node, risk, _ in risks:
            if risk.function == "GROUP_CONCAT":
                separator = node.args.get("separator")
                if risk.column is None or (separator is not None and not isinstance(separator, exp.Literal)):
                    return AggregatePlan(found, None, "GROUP_CONCAT at risk inside an expression: not corrected")
                separators[risk.column] = "," if separator is None else separator.name
        refusal = self._refusal(select, groups)
        if refusal:
            return AggregatePlan(found, None, refusal)
        at_risk = {id(node) for node, _, _ in risks}
        steady = frozenset(
            position
            for position, item in enumerate(select.expressions)
            if not any(id(node) in at_risk for node in outer_scope(item))
            and any(isinstance(node, (exp.AggFunc, exp.Anonymous)) for node in outer_scope(item))
        )
        return AggregatePlan(found, self._rewrite(select, groups, risks), "", separators, steady)

    # ------------------------------------------------------------------ reading

    def _group_expressions(self, select: exp.Select) -> list[exp.Expression]:
        group = select.args.get("group")
        if group is None:
            return []
        aliases = {item.alias.lower(): item.unalias() for item in select.expressions if item.alias}
        expressions: list[exp.Expression] = []
        for item in group.expressions:
            if isinstance(item, exp.Literal) and item.is_int:
                position = int(item.name)
                if not 1 <= position <= len(select.expressions):
                    raise Unanalysable(f"GROUP BY {position}: no such select item")
                expressions.append(select.expressions[position - 1].unalias())
            elif isinstance(item, exp.Column) and not item.table and self._resolve(item) is None:
                body = aliases.get(item.name.lower())
                if body is None:
                    raise Unanalysable(f"GROUP BY {item.sql()}: not a column the analysis can place")
                expressions.append(body)
            else:
                expressions.append(item)
        return expressions

    def _reads(self, argument: exp.Expression) -> set[int]:
        reads: set[int] = set()
        for node in outer_scope(argument):
            if isinstance(node, (exp.Subquery, exp.Select, exp.Exists)):
                raise Unanalysable("a subquery in an aggregate's argument")
            if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
                col = self._resolve(node)
                if col is None:
                    raise Unanalysable(f"column {node.sql()} of an aggregate's argument: no single table holds it")
                reads.add(col[0])
        return reads

    def _keys(self, reads: set[int]) -> tuple[Col, ...] | None:
        """A key of each instance the argument reads: a declared NOT NULL one, else the engine's row id
        of a base table (DuckDB's ``rowid``, PostgreSQL's ``ctid``; SQLite's is among the declared keys
        of a rowid table already), else a key that may hold NULL (rows whose key is NULL would share one
        number: a nullable UNIQUE column tells them apart only where it is not NULL). None if an
        instance has none of these."""
        columns: list[Col] = []
        for k in sorted(reads):
            instance = self.instances[k]
            key = next((key for key in instance.keys if key <= instance.not_null), None)
            row_id = _ROW_IDS.get(self.dialect)
            if key is None and row_id is not None and instance.kind == "table" and not instance.opaque_reason:
                key = frozenset({row_id})
            if key is None:
                key = next(iter(instance.keys), None)
            if key is None:
                return None
            columns.extend((k, column) for column in sorted(key))
        return tuple(columns)

    def _refusal(self, select: exp.Select, groups: list[exp.Expression]) -> str:
        """Why the corrected query could not be written for this SELECT, or ''."""
        for part in _outer_parts(select):
            for node in part.walk():
                if isinstance(node, (exp.Subquery, exp.Exists)) or (
                    isinstance(node, exp.Select) and node is not select
                ):
                    return "a subquery outside FROM and WHERE: not corrected"
                if isinstance(node, exp.Window):
                    return "a window function in the query: not corrected"
        for item in select.expressions:
            body = item.unalias()
            if isinstance(body, exp.Star) or (isinstance(body, exp.Column) and isinstance(body.this, exp.Star)):
                return "SELECT *: not corrected"
        for expression in groups:
            if any(isinstance(node, (exp.Placeholder, exp.Parameter)) for node in expression.walk()):
                return "a parameter in GROUP BY: not corrected"
        # Columns outside aggregates must be fixed by the groups, or the outer GROUP BY below (which
        # lists them so that every engine accepts it) would split groups.
        grouped = self._closure(set(), {c for e in groups if (c := self._resolve_node(e)) is not None})
        for part in _outer_parts(select):
            for node in outer_scope(part):
                if isinstance(node, exp.Column) and _outside_aggregates(node):
                    col = self._resolve(node)
                    if col is not None and col not in grouped.known and col[0] not in grouped.determined:
                        return f"column {node.sql()} is neither grouped nor fixed by the groups: not corrected"
        return ""

    # ------------------------------------------------------------------ the corrected query

    def _rewrite(
        self,
        select: exp.Select,
        groups: list[exp.Expression],
        risks: list[tuple[exp.Expression, AggregateRisk, tuple[Col, ...]]],
    ) -> str:
        aliases: dict[Col, str] = {}
        projections: list[exp.Expr] = []

        def alias_of(column: exp.Column) -> str | None:
            col = self._resolve(column)
            if col is None:
                return None
            name = aliases.get(col)
            if name is None:
                name = aliases[col] = f"__gs{len(aliases)}"
                projections.append(exp.alias_(column.copy(), name, quoted=True))
            return name

        def key_column(col: Col) -> exp.Column:
            instance = self.instances[col[0]]
            return exp.column(instance.original.get(col[1], col[1]), table=instance.alias, quoted=True)

        outer = select.copy()
        for key in ("from_", "from", "joins", "where", "with_", "with"):
            outer.set(key, None)
        # Risky aggregates, found again in the copy by their place in the walk.
        original = [node for part in _outer_parts(select) for node in outer_scope(part)]
        copied = [node for part in _outer_parts(outer) for node in outer_scope(part)]
        place = {id(node): i for i, node in enumerate(original)}  # by identity: equal nodes are distinct aggregates
        windows: list[exp.Expr] = []
        numbering: dict[str, int] = {}  # one row number per distinct partition
        targets: dict[int, int] = {}
        for node, _, keys in risks:
            partition = [expression.copy() for expression in groups] + [key_column(col) for col in keys]
            text = ", ".join(part.sql() for part in partition)
            if text not in numbering:
                numbering[text] = len(windows)
                number = exp.Window(this=exp.RowNumber(), partition_by=partition)
                windows.append(exp.alias_(number, f"__gs_rn{len(windows)}", quoted=True))
            targets[id(copied[place[id(node)]])] = numbering[text]
        for walked in list(copied):
            n = targets.get(id(walked))
            if n is None:
                continue
            argument = cast(exp.Expression, walked.expressions[0] if isinstance(walked, exp.Anonymous) else walked.this)
            first = exp.EQ(this=exp.column(f"__gs_rn{n}", table=_INNER, quoted=True), expression=exp.Literal.number(1))
            case = exp.Case(ifs=[exp.If(this=first, true=argument.copy())])
            argument.replace(case)
        for part in _outer_parts(outer):
            for read in list(outer_scope(part)):
                if isinstance(read, exp.Column) and not isinstance(read.this, exp.Star) and read.table != _INNER:
                    name = alias_of(read)
                    if name is not None:
                        read.replace(exp.column(name, table=_INNER, quoted=True))
        group = outer.args.get("group")
        if group is not None:
            # Columns the groups fix, read outside aggregates: grouped too, which changes no group and
            # lets PostgreSQL and DuckDB accept the derived table's columns in the select list.
            listed = {item.sql() for item in group.expressions}
            extra = [
                exp.column(name, table=_INNER, quoted=True)
                for name in aliases.values()
                if exp.column(name, table=_INNER, quoted=True).sql() not in listed and _read_outside(outer, name)
            ]
            group.set("expressions", [*group.expressions, *extra])
        inner = exp.Select(expressions=[*projections, *windows])
        inner.set("from_", cast(exp.From, select.args.get("from_") or select.args.get("from")).copy())
        if select.args.get("joins"):
            inner.set("joins", [join.copy() for join in select.args["joins"]])
        if select.args.get("where") is not None:
            inner.set("where", select.args["where"].copy())
        derived = exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(_INNER)))
        outer.set("from_", exp.From(this=derived))
        with_ = select.args.get("with_") or select.args.get("with")
        if with_ is not None:
            outer.set("with_", with_.copy())
        return outer.sql(dialect=self.dialect)


def _outer_parts(select: exp.Select) -> list[exp.Expression]:
    """The SELECT's parts read after the join: select list, GROUP BY, HAVING, ORDER BY."""
    parts: list[exp.Expression] = list(select.expressions)
    for key in ("group", "having", "order"):
        part = select.args.get(key)
        if part is not None:
            parts.append(part)
    return parts


def _outside_aggregates(node: exp.Expression) -> bool:
    parent = node.parent
    while parent is not None and not isinstance(parent, exp.Select):
        if isinstance(parent, exp.AggFunc) or (isinstance(parent, exp.Anonymous) and _function(parent) is not None):
            return False
        parent = parent.parent
    return True


def _read_outside(select: exp.Select, name: str) -> bool:
    """Whether the derived table's column ``name`` is read outside aggregates in ``select``'s list or ORDER BY."""
    for part in [*select.expressions, select.args.get("order")]:
        if part is None:
            continue
        for node in outer_scope(part):
            if isinstance(node, exp.Column) and node.name == name and _outside_aggregates(node):
                return True
    return False


def _too_big(select: exp.Select) -> bool:
    from .joins import too_big

    return too_big(select, MAX_NODES)
