"""Aggregate fan-out: a value aggregate (``SUM``, ``AVG``, ``TOTAL``, ``GROUP_CONCAT``/``string_agg``)
over a join that repeats its argument's rows, and the query that computes what it meant.

``SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id JOIN items i ON
i.order_id = o.id GROUP BY c.id`` adds each order's total once per item line: no duplicate row is left
to see, every total is wrong. ``plan_aggregates`` decides, from the declared keys and the query's
equalities (the key closure of ``guarded_sqlite._analysis.provenance``), which aggregates are at risk: those
whose argument's instances, with the GROUP BY columns and the pins, do not determine every other
instance of the join. Safe by construction: ``MIN``/``MAX``, counts (whether a count of join rows is
inflated depends on what the question counts), ``DISTINCT`` aggregates, arguments at the join's own
grain (``SUM(i.qty * p.cost)``), semi-joins (they are not instances), pinned keys, and derived tables
keyed at the right grain. As everywhere in the analysis, a fan-out counts only if it holds whatever the
instances the analysis cannot see do.

For the aggregates at risk it writes the corrected query: the same FROM and WHERE in a derived table
that numbers the rows of each (group, row identity of the argument's tables) combination, and the same
SELECT, GROUP BY, HAVING and ORDER BY over it, with each aggregate at risk reading its argument only on
the first row of each combination (``SUM(CASE WHEN rn = 1 THEN arg END)``), on SQLite, DuckDB and
PostgreSQL (window functions). On SQLite, where every other aggregate of the statement is a count or a
sum, the derived table groups by that combination instead (``grouped_form``): one row per row identity with
its argument once and its number of copies, about half the window's cost. Exact or silent: a corrected
value is the written expression over each row of the argument's tables once, on the same groups and in
the same order, or the plan says why not (``note``, ``corrected_sql`` None). So names resolve as the
engine resolves them (a bare ORDER BY term that is a select-list alias is the alias; a name that is both
an alias and a column elsewhere is refused); an expression mixing an aggregate at risk with one the
correction leaves as written and the join inflates (``SUM(x) / COUNT(x)``) is refused whole; a pin in a
LEFT JOIN's ON fixes nothing of the groups; row identities are the engine's own where a key could
mislead (``joins.Analysis._identities_of``: SQLite's rowid or a key compared under BINARY, DuckDB's rowid
unless a column takes the name, PostgreSQL's ``tableoid`` with ``ctid``). ``check_sql`` adds the counts
``guarded_sqlite._rules.fanout`` decides from; ``served_sql`` names the served columns as the caller's did.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from sqlglot import exp

from .aggregate_sql import (
    INNER_TABLE,
    aggregate_argument,
    aggregate_function,
    grouped_form,
    is_aggregate,
    may_aggregate,
    outer_parts,
    outside_aggregates,
    read_by,
    read_outside,
    repetition_invariant,
    window_reads,
    without_counts,
)
from .joins import Col, Unanalysable, view_definition
from .plans import AggregatePlan, AggregateRisk, ScopeCheck
from .pregroup import Leaf, leaf_join, pregrouped
from .provenance import MAX_NODES, Analysis
from .schema import SchemaFacts, fold
from .sqltree import conjuncts, join_group, outer_scope, too_big
from .trees import keep, spent_text, text_of

__all__ = ["AggregatePlan", "AggregateRisk", "ScopeCheck", "grouped_only", "plan_aggregates", "served_sql"]


_PLACEHOLDER, _AT_RISK = "__gs_c", "with an aggregate at risk"
# Argument shapes that are NULL wherever a column they read is NULL (a LEFT JOIN's unmatched rows).
_NULL_PROPAGATING = (
    exp.Column, exp.Literal, exp.Paren, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Neg, exp.Cast, exp.Identifier,
    exp.DataType, exp.Mod, exp.IntDiv, exp.Placeholder,
)  # fmt: skip
# Where an expression ends, going up from an aggregate: a select item, an ORDER BY term, a condition.
_BOUNDARIES = (exp.Select, exp.Alias, exp.Ordered, exp.Order, exp.Group, exp.Having, exp.And, exp.Or, exp.Not)


def served_sql(plan: AggregatePlan, names: Sequence[Any] | None) -> str | None:
    """``plan.corrected_sql`` with each select item the caller did not alias named as the caller's
    cursor named its column (``names``: the written statement's description names; without them a
    name read from the SQL), so that the corrected rows, a DataFrame of the served SQL and its
    description read as the written statement's (c14). A name that is also one of the caller's aliases
    keeps the placeholder: an ORDER BY of that alias would become ambiguous."""
    sql = plan.corrected_sql
    if sql is None:
        return None
    given = list(names) if names is not None and len(names) == plan.width else None
    taken = {fold(alias) for alias in plan.aliases}
    for position, fallback in plan.unnamed:
        name = given[position] if given is not None else fallback
        if not isinstance(name, str) or not name or fold(name) in taken:
            continue
        sql = sql.replace(f'"{_PLACEHOLDER}{position}"', '"' + name.replace('"', '""') + '"')
    return sql


def plan_aggregates(
    tree: exp.Expression, schema: SchemaFacts, dialect: str = "sqlite", scanned: Callable[[str], bool] | None = None
) -> AggregatePlan:
    """The value aggregates of ``tree``'s outermost SELECT that a join may inflate, and the corrected
    query. Never raises: a shape it does not handle is reported in ``note``. ``scanned``: asked, where
    a table can be pre-grouped (SQLite), whether the statement reads it whole (by its alias); the
    corrected and check queries are then the pre-grouped ones, else the grouped ones, and only those
    are written. Without it both are (``AggregatePlan.pregrouped``)."""
    try:
        return _Planner(tree, schema, dialect, scanned).plan()
    except Unanalysable as why:
        return AggregatePlan(note=str(why), unanalysed=True)
    except Exception as error:  # a tree shape we did not foresee must never break the caller
        return AggregatePlan(note=f"analysis failed: {type(error).__name__}: {error}", unanalysed=True)


def _copied(value: Any) -> Any:
    """A copy of a node's argument: a node, a list of nodes, or a plain value (a flag, a name)."""
    if isinstance(value, exp.Expr):
        return value.copy()
    if isinstance(value, list):
        return [item.copy() if isinstance(item, exp.Expr) else item for item in value]
    return value


def _join_hidden_in(
    source: exp.Expression, ctes: dict[str, exp.Expression], schema: SchemaFacts, dialect: str, depth: int = 0
) -> str:
    """What names ``source`` (a FROM clause's only source) where it is a derived table, CTE or view whose
    body joins, or reads one that does, with no DISTINCT, GROUP BY or aggregate making its rows
    distinct; else "". A view whose body cannot be read, or too deep a nesting, counts as joining."""
    if join_group(source) is not None:  # (a JOIN b ON ...): DuckDB and PostgreSQL write views' joins so
        return "a parenthesised join"
    if isinstance(source, exp.Subquery):
        body, what = source.this, f"derived table {source.alias}".rstrip()
    elif isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier):
        if not source.db and fold(source.name) in ctes:
            body, what = ctes[fold(source.name)], f"CTE {source.name}"
        else:
            table = schema.table(source.name, source.db or None)
            if table is None or not table.is_view:
                return ""
            create = view_definition(table, dialect)
            body, what = (create.expression if create is not None else None), f"view {source.name}"
    else:
        return ""
    if not isinstance(body, exp.Query) or depth >= _HIDDEN_DEPTH:
        return what
    return what if _body_joins(body, ctes, schema, dialect, depth + 1) else ""


def _body_joins(
    body: exp.Query, ctes: dict[str, exp.Expression], schema: SchemaFacts, dialect: str, depth: int
) -> bool:
    """Whether the rows of ``body`` may repeat rows it joins (``_join_hidden_in``)."""
    while isinstance(body, exp.Subquery) and isinstance(body.this, exp.Query):  # a query in parentheses
        body = body.this
    if isinstance(body, exp.SetOperation):
        if body.args.get("distinct"):
            return False
        return any(
            isinstance(branch, exp.Query) and _body_joins(branch, ctes, schema, dialect, depth)
            for branch in (body.left, body.right)
        )
    if not isinstance(body, exp.Select) or body.args.get("distinct") or body.args.get("group"):
        return False
    if any(isinstance(node, exp.AggFunc) for item in body.expressions for node in item.walk()):
        return False
    if body.args.get("joins"):
        return True
    from_ = body.args.get("from_") or body.args.get("from")
    return from_ is not None and bool(_join_hidden_in(from_.this, ctes, schema, dialect, depth))


_HIDDEN_DEPTH = 8
"""Views, CTEs and derived tables followed into one another before a source counts as joining."""


def grouped_only(leaf: str) -> bool:
    """``plan_aggregates``' ``scanned`` where only the grouped check may run (a paging query, a subquery)."""
    return False


Risk = tuple[exp.Expression, AggregateRisk, tuple[exp.Expression, ...]]
"""An aggregate at risk: its node, what is reported, and the expressions that identify a row of each
table its argument reads (the row numbering's partition, after the groups)."""


class _Planner(Analysis):
    def __init__(
        self, tree: exp.Expression, schema: SchemaFacts, dialect: str, scanned: Callable[[str], bool] | None
    ) -> None:
        super().__init__(tree, schema, dialect)
        self.scanned = scanned

    def plan(self) -> AggregatePlan:
        select = self.root
        if not isinstance(select, exp.Select):
            return AggregatePlan(note="not a single SELECT")
        if too_big(select, MAX_NODES):
            return AggregatePlan(note=f"query has more than {MAX_NODES} syntax nodes: not analysed", unanalysed=True)
        with_ = select.args.get("with_") or select.args.get("with")
        if with_ is not None:
            for cte in with_.expressions:
                self.ctes[fold(cte.alias_or_name)] = cte.this
        from_ = select.args.get("from_") or select.args.get("from")
        if from_ is None:
            return AggregatePlan(note="no FROM clause")
        candidates = [
            (cast(exp.Expression, node), name)
            for part in outer_parts(select)
            for node in (*outer_scope(part), *window_reads(part))
            if (name := aggregate_function(node)) is not None
        ]
        if not candidates:
            return AggregatePlan(note="no value aggregate")
        self._add_sources(from_.this, None)
        for join in select.args.get("joins") or ():
            self._add_join(join, None)
        if len(self.instances) < 2:
            joining = _join_hidden_in(from_.this, self.ctes, self.schema, self.dialect)
            if joining:
                # Not read through (``transparent``: a ``*``, an outer join, ...): its rows may repeat
                # what it joins, which "one table" would call safe without looking.
                return AggregatePlan(note=f"{joining} joins and is not read through", unanalysed=True)
            return AggregatePlan(note="one table: nothing repeats its rows")
        where = select.args.get("where")
        if where is not None:
            for conjunct in conjuncts(where.this):
                self._constraint(conjunct, inner=None)
        groups = self._group_expressions(select)
        seeds = {col for expression in groups if (col := self._resolve_node(expression)) is not None}
        unseen = {k for k in range(len(self.instances)) if not self._known(k) or k in self.undecidable}
        labels = [instance.label for instance in self.instances]
        risks: list[Risk] = []
        repeating_tables: set[tuple[int, ...]] = set()
        safe: set[int] = set()  # value aggregates found not at risk: the same value in the corrected query
        refusal = ""
        filters = [node.parent for node, _ in candidates if isinstance(node.parent, exp.Filter)]
        for node, name in candidates:
            argument = aggregate_argument(node)
            if argument is None or isinstance(node.parent, exp.Filter):
                continue  # DISTINCT inside: counts each value once already; FILTER: see _rewrite's caveat
            reads = self._reads(argument)
            if not reads:
                continue  # SUM(1) and the like count join rows: counts are not flagged
            closure = self._closure(reads | unseen, seeds)
            repeating = [k for k in range(len(self.instances)) if k not in closure.determined and k not in unseen]
            if not repeating:
                # A source whose keys are unknown (a view not read through, a table function) may itself
                # hold several rows per row read: not at risk only where the rows read determine it.
                hidden = sorted(unseen - self._closure(reads, seeds).determined)
                if not hidden:
                    safe.add(id(node))
                    continue
                repeating = hidden
                why = self.instances[hidden[0]].opaque_reason or f"{labels[hidden[0]]}'s rows cannot be told apart"
                refusal = refusal or f"{name}({text_of(argument, self.dialect)}): {why}, so it may repeat the rows read"
            identities = self._identities_of(reads)
            keys = () if isinstance(identities, str) else identities
            if isinstance(identities, str):
                refusal = refusal or f"{name}({text_of(argument, self.dialect)}): {identities}"
            column = next((i for i, item in enumerate(select.expressions) if item.unalias() is node), None)
            risk = AggregateRisk(
                name,
                text_of(argument, self.dialect),
                tuple(labels[k] for k in sorted(reads)),
                tuple(labels[k] for k in repeating),
                column,
            )
            risks.append((node, risk, keys))
            repeating_tables.add(tuple(repeating))
            refusal = refusal or self._argument_refusal(node, argument, reads)
        if not risks:
            return AggregatePlan(note="every value aggregate reads rows the join does not repeat")
        # One risk per distinct aggregate: ``SUM(o.total)`` in the select list and again in HAVING is one
        # value, counted once in the check (five columns, one finding), corrected in both places.
        # sqlglot compares nodes by structure (a separator included); equal arguments read the same rows.
        signatures = [node for node, _, _ in risks]
        twins: dict[exp.Expr, list[int]] = {}
        for j, signature in enumerate(signatures):
            twins.setdefault(signature, []).append(j)
        firsts = sorted(group[0] for group in twins.values())
        found = tuple(risks[j][1] for j in firsts)
        separators: dict[int, str] = {}
        for node, risk, _ in risks:
            if risk.function == "GROUP_CONCAT":
                separator = node.args.get("separator")
                if risk.column is None or (separator is not None and not isinstance(separator, exp.Literal)):
                    return AggregatePlan(found, None, "GROUP_CONCAT at risk inside an expression: not corrected")
                separators[risk.column] = "," if separator is None else separator.name
        at_risk = {id(node) for node, _, _ in risks}
        if filters and risks:  # a FILTER left as written beside a corrected twin would contradict it
            refusal = refusal or f"{text_of(filters[0], self.dialect)} is left as written: not corrected"
        refusal = refusal or self._refusal(select, groups) or self._mixed(risks, at_risk | safe)
        if refusal:
            return AggregatePlan(found, None, refusal)
        steady = frozenset(
            position
            for position, item in enumerate(select.expressions)
            if not any(id(node) in at_risk for node in outer_scope(item))
            and any(isinstance(node, (exp.AggFunc, exp.Anonymous)) for node in outer_scope(item))
        )
        places = {id(n): i for i, item in enumerate(select.expressions) for n in outer_scope(item)}
        # A risk's select item: that of the first of its twins in one.
        items = tuple(
            next((places[id(risks[k][0])] for k in twins[signatures[j]] if id(risks[k][0]) in places), None)
            for j in firsts
        )
        only = next(iter(repeating_tables)) if len(repeating_tables) == 1 else ()
        pregroupable = self.dialect == "sqlite" and len(only) == 1 and not unseen
        leaf = leaf_join(select, self.instances, only[0], self._resolve) if pregroupable else None
        chosen = None if leaf is None or self.scanned is None else self.scanned(leaf.alias)
        counted_once = {id(risks[j][0]) for j in firsts}
        corrected, check, unnamed, before_join = self._rewrite(select, groups, risks, counted_once, leaf, chosen)
        return AggregatePlan(
            found,
            corrected,
            "",
            separators,
            steady,
            check,
            len(select.expressions),
            unnamed,
            tuple(item.alias for item in select.expressions if item.alias),
            items,
            pregrouped=before_join,
        )

    # ------------------------------------------------------------------ reading

    def _group_expressions(self, select: exp.Select) -> list[exp.Expression]:
        group = select.args.get("group")
        if group is None:
            return []
        if any(group.args.get(part) for part in ("rollup", "cube", "grouping_sets", "totals")) or any(
            isinstance(item, (exp.Rollup, exp.Cube, exp.GroupingSets)) for item in group.expressions
        ):
            raise Unanalysable("GROUP BY ROLLUP, CUBE or GROUPING SETS: not analysed")
        aliases = {fold(item.alias): item.unalias() for item in select.expressions if item.alias}
        expressions: list[exp.Expression] = []
        for item in group.expressions:
            if isinstance(item, exp.Literal) and item.is_int:
                position = int(item.name)
                if not 1 <= position <= len(select.expressions):
                    raise Unanalysable(f"GROUP BY {position}: no such select item")
                expressions.append(select.expressions[position - 1].unalias())
            elif isinstance(item, exp.Column) and not item.table and self._resolve(item) is None:
                body = aliases.get(fold(item.name))
                if body is None:
                    raise Unanalysable(f"GROUP BY {text_of(item)}: not a column the analysis can place")
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
                    raise Unanalysable(f"column {text_of(node)} of an aggregate's argument: no single table holds it")
                reads.add(col[0])
        return reads

    def _argument_refusal(self, node: exp.Expression, argument: exp.Expression, reads: set[int]) -> str:
        """Why one aggregate at risk cannot be corrected exactly, or ''."""
        if isinstance(argument, exp.Order):
            return f"{text_of(node, self.dialect)}: an ordered aggregate at risk: not corrected"
        if any(isinstance(n, (exp.Placeholder, exp.Parameter)) for n in argument.walk()):
            # The check query reads the argument more than once: positional parameters would shift.
            return f"{text_of(node, self.dialect)}: a parameter in an argument at risk: not corrected"
        nullable = [k for k in reads if self.instances[k].left_joined and k not in self.null_rejected]
        if nullable and any(not isinstance(n, _NULL_PROPAGATING) for n in argument.walk()):
            # On a LEFT JOIN's unmatched rows the table has no row to count once, and this argument
            # may not be NULL there (COALESCE, CASE, a function): what "once" means is not defined.
            label = self.instances[nullable[0]].label
            shown = text_of(node, self.dialect)
            return f"{shown} reads {label}, LEFT JOINed, through more than arithmetic: not corrected"
        return ""

    def _mixed(self, risks: list[Risk], corrected_or_same: set[int]) -> str:
        """Why an expression with an aggregate at risk mixes it with one the correction leaves as
        written and the join inflates (a count, c02), or ''. Whole expressions are corrected or none:
        ``SUM(o.total) * 1.0 / COUNT(o.id)`` corrected halfway is neither what was written nor meant."""
        for node, _, _ in risks:
            expression: exp.Expr = node
            while expression.parent is not None and not isinstance(expression.parent, _BOUNDARIES):
                expression = expression.parent
            for other in outer_scope(cast(exp.Expression, expression)):
                if not may_aggregate(other, expression) and (
                    other is node
                    or id(other) in corrected_or_same
                    or not is_aggregate(other)
                    or repetition_invariant(other)
                ):
                    continue
                left = "the correction leaves as written" if is_aggregate(other) else "may be an application aggregate"
                return (
                    f"{text_of(expression, self.dialect)} mixes {text_of(node, self.dialect)}, at risk, "
                    f"with {text_of(other, self.dialect)}, which {left}: not corrected"
                )
        return ""

    def _alias_reference(self, column: exp.Column, aliases: dict[str, exp.Expression]) -> bool:
        """Whether ``column`` is an unqualified name that a select-list alias takes."""
        return not column.table and not isinstance(column.this, exp.Star) and fold(column.name) in aliases

    def _refusal(self, select: exp.Select, groups: list[exp.Expression]) -> str:
        """Why the corrected query could not be written for this SELECT, or ''."""
        for part in outer_parts(select):
            for node in part.walk():
                if isinstance(node, (exp.Subquery, exp.Exists)) or (
                    isinstance(node, exp.Select) and node is not select
                ):
                    return "a subquery outside FROM and WHERE: not corrected"
                if isinstance(node, exp.Window):
                    return "a window function in the query: not corrected"
        for key in ("qualify", "windows", "distinct", "connect", "prewhere"):
            if select.args.get(key):
                return f"{'SELECT DISTINCT' if key == 'distinct' else key.upper()} {_AT_RISK}: not corrected"
        for item in select.expressions:
            body = item.unalias()
            if isinstance(body, exp.Star) or (isinstance(body, exp.Column) and isinstance(body.this, exp.Star)):
                return "SELECT *: not corrected"
        for expression in groups:
            if any(isinstance(node, (exp.Placeholder, exp.Parameter)) for node in expression.walk()):
                return "a parameter in GROUP BY: not corrected"
        # Names as the engine resolves them: a bare ORDER BY term that is a select-list alias is the
        # alias (c01); a name elsewhere that is both an alias and a column of the FROM tables is
        # resolved differently by different engines: refused unless both are the same column.
        aliases = {fold(item.alias): item.unalias() for item in select.expressions if item.alias}
        bare_terms = self._alias_terms(select, aliases)
        for part in outer_parts(select)[len(select.expressions) :]:
            for node in outer_scope(part):
                if not isinstance(node, exp.Column) or id(node) in bare_terms:
                    continue
                if self._alias_reference(node, aliases) and (col := self._resolve(node)) is not None:
                    if self._resolve_node(aliases[fold(node.name)]) != col:
                        return f"{text_of(node)} names both a select item and a column: not corrected"
        # Columns outside aggregates must be fixed by the groups, or the outer GROUP BY below (which
        # lists them so that every engine accepts it) would split groups. SQLite takes a bare column
        # from any row of the group, as the written statement does: it is left out of that GROUP BY.
        if self.dialect == "sqlite":
            return ""
        grouped = self._fixed_by(groups)
        for part in outer_parts(select):
            for node in outer_scope(part):
                if isinstance(node, exp.Column) and outside_aggregates(node) and id(node) not in bare_terms:
                    col = self._resolve(node)
                    if col is not None and col not in grouped.known and col[0] not in grouped.determined:
                        return f"column {text_of(node)} is neither grouped nor fixed by the groups: not corrected"
        return ""

    def _fixed_by(self, groups: list[exp.Expression]) -> Any:
        """What the groups fix in every row of a group. A pin in a LEFT JOIN's ON holds on its matched
        rows only (the unmatched ones are NULL there): it fixes nothing unless those rows are filtered
        out (c03); a key it completes still determines the instance (at most one row, or NULL)."""
        seeds = {c for e in groups if (c := self._resolve_node(e)) is not None}
        closure = self._closure(set(), seeds)
        loose = {
            col
            for col in self.pins
            if self.instances[col[0]].left_joined and col[0] not in self.null_rejected and col not in seeds
        }
        closure.known -= {col for col in loose if col[0] not in closure.determined}
        return closure

    def _alias_terms(self, select: exp.Select, aliases: dict[str, exp.Expression]) -> set[int]:
        """The ids of the ORDER BY terms that are a bare select-list alias (the alias, on every engine)."""
        order = select.args.get("order")
        if order is None:
            return set()
        return {
            id(term.this)
            for term in order.expressions
            if isinstance(term, exp.Ordered)
            and isinstance(term.this, exp.Column)
            and self._alias_reference(term.this, aliases)
        }

    # ------------------------------------------------------------------ the corrected query

    def _rewrite(
        self,
        select: exp.Select,
        groups: list[exp.Expression],
        risks: list[Risk],
        counted_once: set[int],
        leaf: Leaf | None,
        chosen: bool | None,
    ) -> tuple[str, str, tuple[tuple[int, str], ...], tuple[str, str, str] | None]:
        """The corrected query, the same with the counting columns (``AggregatePlan.check_sql``), the
        select items given a placeholder name, and ``AggregatePlan.pregrouped``. ``counted_once``: the
        risks' nodes the check counts (one per distinct aggregate; its twins are corrected alike);
        ``chosen``: whether the pre-grouped forms replace the others (None: both are written)."""
        aliases: dict[Col, str] = {}
        projections: list[exp.Expr] = []

        def alias_of(column: exp.Column) -> str | None:
            col = self._resolve(column)
            if col is None:
                return None
            name = aliases.get(col)
            if name is None:
                name = aliases[col] = f"__gs{len(aliases)}"
                projections.append(exp.alias_(column.copy(), name, quoted=True, copy=False))
            return name

        # The statement's SELECT without the clauses the derived table takes: copied part by part, not
        # whole and then cut (the FROM clause is most of a statement).
        taken = {"from_", "from", "joins", "where", "with_", "with"}
        outer = keep(exp.Select(**{key: _copied(value) for key, value in select.args.items() if key not in taken}))
        # Risky aggregates, found again in the copy by their place in the walk.
        original = [node for part in outer_parts(select) for node in outer_scope(part)]
        copied = [node for part in outer_parts(outer) for node in outer_scope(part)]
        place = {id(node): i for i, node in enumerate(original)}  # by identity: equal nodes are distinct aggregates
        select_aliases = {fold(item.alias): item.unalias() for item in select.expressions if item.alias}
        bare_terms = {place[i] for i in self._alias_terms(select, select_aliases) if i in place}
        as_written = {id(copied[i]) for i in bare_terms}
        windows: list[exp.Expr] = []
        numbering: dict[str, int] = {}  # one row number per distinct partition
        targets: dict[int, int] = {}
        for node, _, keys in risks:
            partition = keep([expression.copy() for expression in groups] + [key.copy() for key in keys])
            text = ", ".join(text_of(part) for part in partition)
            if text not in numbering:
                numbering[text] = len(windows)
                number = exp.Window(this=exp.RowNumber(), partition_by=partition)
                windows.append(exp.alias_(number, f"__gs_rn{len(windows)}", quoted=True, copy=False))
            targets[id(copied[place[id(node)]])] = numbering[text]
        extras: list[exp.Expr] = keep([])  # check's items take copies of them
        for node, _, _ in risks:
            walked = copied[place[id(node)]]
            n = targets[id(walked)]
            argument = cast(exp.Expression, walked.expressions[0] if isinstance(walked, exp.Anonymous) else walked.this)
            written = walked.copy()
            numbered = exp.column(f"__gs_rn{n}", table=INNER_TABLE, quoted=True)
            first = exp.EQ(this=numbered, expression=exp.Literal.number(1))
            case = exp.Case(ifs=[exp.If(this=first, true=argument.copy())])
            counted = exp.Count(this=argument.copy())
            distinct = exp.Count(this=case.copy())
            if isinstance(walked, exp.GroupConcat):
                magnitude: exp.Expression = exp.Null()
            elif self.dialect == "sqlite":
                # TOTAL of REAL absolute values: never an integer overflow, never an error.
                magnitude = exp.Anonymous(
                    this="TOTAL",
                    expressions=[exp.Abs(this=exp.Cast(this=argument.copy(), to=exp.DataType.build("REAL")))],
                )
            else:
                magnitude = exp.Sum(this=exp.Abs(this=argument.copy()))
            keep(argument).replace(case)
            if id(node) in counted_once:
                extras.extend([written, walked.copy(), counted, distinct, magnitude])
            else:  # a twin of one counted already: corrected alike, not counted again
                keep([written, counted, distinct, magnitude])
        for part in [*outer_parts(outer), *extras]:
            for read in list(outer_scope(cast(exp.Expression, part))):
                if (
                    isinstance(read, exp.Column)
                    and not isinstance(read.this, exp.Star)
                    and read.table != INNER_TABLE
                    and id(read) not in as_written
                ):
                    name = alias_of(read)
                    if name is not None:
                        keep(read).replace(exp.column(name, table=INNER_TABLE, quoted=True))
        group = outer.args.get("group")
        if group is not None and self.dialect != "sqlite":
            # Columns the groups fix, read outside aggregates: grouped too, which changes no group and
            # lets PostgreSQL and DuckDB accept the derived table's columns in the select list. SQLite
            # reads every such column as a bare column (any row of the group), as the written statement
            # does: a longer sort key would only cost (about 5% of bench_aggregates' check).
            fixed = self._fixed_by(groups)
            listed = {text_of(item) for item in group.expressions}
            extra = [
                exp.column(name, table=INNER_TABLE, quoted=True)
                for col, name in aliases.items()
                if text_of(keep(exp.column(name, table=INNER_TABLE, quoted=True))) not in listed
                and read_outside(outer, name)
                and (col in fixed.known or col[0] in fixed.determined)
            ]
            group.set("expressions", [*group.expressions, *extra])
        unnamed: list[tuple[int, str]] = []
        items: list[exp.Expr] = []
        for position, item in enumerate(outer.expressions):
            if isinstance(item, exp.Alias):
                items.append(item)
                continue
            given = select.expressions[position]
            unnamed.append((position, given.name if isinstance(given, exp.Column) else text_of(given, self.dialect)))
            items.append(exp.alias_(item, f"{_PLACEHOLDER}{position}", quoted=True, copy=False))
        outer.set("expressions", items)
        inner = keep(exp.Select(expressions=[*projections, *windows]))
        inner.set("from_", cast(exp.From, select.args.get("from_") or select.args.get("from")).copy())
        if select.args.get("joins"):
            inner.set("joins", [join.copy() for join in select.args["joins"]])
        if select.args.get("where") is not None:
            inner.set("where", select.args["where"].copy())
        with_ = select.args.get("with_") or select.args.get("with")
        check = keep(outer.copy())
        check.set(
            "expressions",
            [
                *check.expressions,
                *(exp.alias_(extra, f"__gs_x{i}", quoted=True) for i, extra in enumerate(extras)),
            ],
        )

        def over(query: exp.Select, rows: exp.Select) -> str:
            """``query`` reading the derived table ``rows``, as SQL: both are spent (generated in place)."""
            derived = exp.Subquery(this=rows, alias=exp.TableAlias(this=exp.to_identifier(INNER_TABLE)))
            query.set("from_", exp.From(this=derived))
            if with_ is not None:
                query.set("with_", with_.copy())
            return spent_text(query, self.dialect)

        named = tuple(unnamed)
        grouped = grouped_form(check, len(extras), inner) if self.dialect == "sqlite" and len(windows) == 1 else None
        if grouped is None:
            return over(outer, keep(inner.copy())), over(check, inner), named, None
        # Only the SQL that may run is written: generating it costs more than building the trees. The
        # corrected query is the check's grouped form without its counting columns (the same SQL as its
        # own grouped form: the parts it reads are met first, and so are named alike).
        query, rows = grouped
        leaf_rows = pregrouped(rows, leaf) if leaf is not None and chosen is not False else None
        corrected = without_counts(query, len(extras))
        if leaf is None or leaf_rows is None:
            return over(corrected, read_by(corrected, rows)), over(query, rows), named, None
        if chosen:
            return over(corrected, read_by(corrected, leaf_rows)), over(query, leaf_rows), named, None
        # Both forms: a copy of each query (a few select items, no FROM yet) reads the pre-grouped rows.
        before_join = over(keep(corrected.copy()), read_by(corrected, leaf_rows)), over(keep(query.copy()), leaf_rows)
        return over(corrected, read_by(corrected, rows)), over(query, rows), named, (leaf.alias, *before_join)
