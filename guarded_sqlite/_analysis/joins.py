"""Reading a SELECT for the provenance analysis: its table instances, and the functional dependencies
its join and WHERE conditions establish between their columns.

``JoinGraph`` turns the outermost FROM clause into table instances (``Instance``: a base table with
its keys from ``SchemaFacts``, a view, a derived table seen through when simple, a table function) and
records what the conditions say: ``A = B`` between columns (both ways, or one way for a LEFT JOIN's
ON), ``col = f(columns)`` for a deterministic ``f`` (the columns determine ``col``), pins to constants
and parameters, ``IS`` (as ``=``, except that it matches NULL), and conditions it does not model (a
user or non-deterministic function, a ``COLLATE``; on MySQL, an equality of two columns of different
collations, which compares them under one of them), which mark their instance *undecidable*. A unique
partial index of a table becomes a key of an instance once the conditions constraining that instance
state its whole predicate (``_imply_partial_keys``). Deciding
what follows from all this is ``guarded_sqlite._analysis.provenance``'s job; the pure questions about a sqlglot
tree it asks (conjuncts, join groups, canonical forms, the keys of a derived table) are ``sqltree``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import cast

from sqlglot import exp

from .schema import PartialKey, SchemaFacts, TableFacts, fold
from .sqltree import (
    ROWID_NAMES,
    canonical,
    conjuncts,
    derived_keys,
    is_parameter,
    join_group,
    not_modelled,
    outer_reference,
    parse_single,
    predicate_conjuncts,
    source_count,
)
from .trees import keep, text_of

__all__ = ["Closure", "Col", "Instance", "JoinGraph", "Unanalysable"]


class Unanalysable(Exception):
    """The analysis cannot see far enough; the message says why."""


@dataclass
class Instance:
    """One table instance of the outermost FROM clause."""

    label: str  # "alias (table)" or "table", for messages
    alias: str  # folded name the query refers to it by
    name: str  # the table's own name (folded) for qualifier matching
    display: str  # what column references are qualified with in messages
    kind: str  # "table", "view", "derived", "function", "unknown"
    columns: frozenset[str] | None  # folded; None when not known
    keys: tuple[frozenset[str], ...] = ()
    not_null: frozenset[str] = frozenset()
    opaque_reason: str = ""
    left_joined: bool = False
    joined_with_condition: bool = True
    original: dict[str, str] = field(default_factory=dict)  # folded column -> declared spelling
    partial_keys: tuple[PartialKey, ...] = ()  # unique partial indexes; a key once the query implies one
    foreign: bool = False  # PostgreSQL: a foreign table (no row id of its own)
    integer_columns: frozenset[str] = frozenset()  # SQLite: INTEGER affinity, BINARY (TableFacts)
    collations: dict[str, str] = field(default_factory=dict)  # MySQL: folded text column -> collation


Col = tuple[int, str]


@dataclass
class Closure:
    """What a set of reference instances determines: whole instances, and single columns."""

    determined: set[int]
    known: set[Col]
    keys_used: dict[int, frozenset[str]] = field(default_factory=dict)


class JoinGraph:
    """The table instances of a SELECT's FROM clause and what its conditions say about their columns:
    equalities (``edges``), functional dependencies on expressions (``derived``), pins, the columns
    proven non-NULL, and the instances matched by conditions not modelled (``undecidable``)."""

    def __init__(self, tree: exp.Expression, schema: SchemaFacts, dialect: str) -> None:
        self.schema = schema
        self.dialect = dialect
        node = tree
        while isinstance(node, exp.Subquery):
            node = node.this
        self.root = node
        self.instances: list[Instance] = []
        self.edges: list[tuple[Col, Col]] = []  # directed: knowing [0] gives [1]
        # A LEFT JOIN's ON equalities read backwards, from its NULL-extended side to the rest: knowing
        # [0] gives [1] only in rows where [0]'s instance is a real (matched) row, for then the ON held.
        self.reverse_edges: list[tuple[Col, Col]] = []
        self.pins: set[Col] = set()
        self.non_null: set[Col] = set()
        # Instances a WHERE conjunct or an inner join's condition reads with an equality or IS NOT NULL:
        # rows where a LEFT JOIN NULL-extended them are filtered out, so their keys identify them.
        self.null_rejected: set[int] = set()
        # column = f(other columns), f deterministic: knowing all of the sources gives the column.
        self.derived: list[tuple[frozenset[Col], Col]] = []
        # Instances matched by a condition the analysis does not model (why, per instance): whether
        # they fan out cannot be told, so they never establish a fan-out.
        self.undecidable: dict[int, str] = {}
        self.merged: dict[str, int] = {}  # USING/NATURAL column name -> first instance holding it
        # USING/NATURAL column name -> the instances whose column equals the merged one in every output
        # row: the first holder and each instance merged into it by an inner join outside any LEFT-joined
        # group. A LEFT JOIN's merged column is its left side's (SQLite), so its right side is not one.
        self.merged_holders: dict[str, list[int]] = {}
        self.ctes: dict[str, exp.Expression] = {}
        # Partial keys not yet implied: (instance, key columns, predicate conjuncts no condition matched).
        self.partial: list[tuple[int, frozenset[str], list[exp.Expression]]] = []

    # ------------------------------------------------------------------ FROM clause

    def _add_source(self, source: exp.Expression) -> int:
        instance = self._instance(source)
        self.instances.append(instance)
        k = len(self.instances) - 1
        for key in instance.partial_keys:
            forms = predicate_conjuncts(key.predicate, self.dialect)
            if forms:  # an unreadable predicate is no key
                self.partial.append((k, key.columns, list(forms)))
        return k

    def _add_sources(self, source: exp.Expression, restriction: frozenset[int] | None) -> None:
        """Add a FROM item's instances: one table or derived table, or each table of a parenthesised join
        group, ``(b JOIN c ON ...)``, whose own joins are read under ``restriction`` (see ``_add_join``)."""
        group = join_group(source)
        if group is None:
            self._add_source(source)
            return
        first, joins = group
        self._add_source(first)
        for join in joins:
            self._add_join(join, restriction)

    def _instance(self, source: exp.Expression) -> Instance:
        alias = source.alias if isinstance(source, (exp.Table, exp.Subquery)) else ""
        listed = _column_list(source, self.ctes)
        if listed:
            # ``t(k, id)`` names the columns by position: ``t.id`` may be another column of the body
            # than its ``id``, so keys found by name would identify the wrong rows.
            display = alias or source.name or "subquery"
            return Instance(
                display, fold(display), fold(display), display, "derived", None,
                opaque_reason=f"{listed} renames its columns by position: keys unknown",
            )  # fmt: skip
        if isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier):
            name = source.name
            db = source.db or None
            label = f"{alias} ({name})" if alias and fold(alias) != fold(name) else name
            display = alias or name
            if db is None and fold(name) in self.ctes:
                return self._derived(self.ctes[fold(name)], label, display, name, f"CTE {name}")
            facts = self.schema.table(name, db)
            if facts is None:
                shown = f"{db}.{name}" if db else name
                return Instance(
                    label,
                    fold(display),
                    fold(name),
                    display,
                    "unknown",
                    None,
                    opaque_reason=f"unknown table {shown}",
                )
            create = view_definition(facts, self.dialect)
            # A view whose text the catalog holds has its body's keys, unless it renames the body's
            # columns by position (``CREATE VIEW v (a, b) AS ...``), where keys found by name would be wrong.
            if create is not None and not isinstance(create.this, exp.Schema):
                body = cast(exp.Expression, keep(create.args["expression"].copy()))
                return self._derived(body, label, display, name, f"view {name}")
            return self._from_facts(facts, label, display)
        if isinstance(source, exp.Subquery):
            display = alias or "subquery"
            return self._derived(source.this, display, display, display, f"derived table {display}")
        if isinstance(source, exp.Table):  # a table-valued function such as json_each(?)
            display = alias or text_of(source.this, self.dialect)
            function = text_of(source.this, self.dialect)
            return Instance(
                display, fold(display), fold(display), display, "function", None,
                opaque_reason=f"table function {function} has no known key",
            )  # fmt: skip
        raise Unanalysable(f"unsupported FROM item {type(source).__name__}")

    def _from_facts(self, facts: TableFacts, label: str, display: str) -> Instance:
        kind = "view" if facts.is_view else "table"
        columns = facts.column_names | (ROWID_NAMES & frozenset().union(*facts.keys))
        if facts.is_view:
            opaque = f"view {facts.name} has no known key"
        elif facts.keys_unknown:
            opaque = f"{facts.keys_unknown}: keys unknown"
        else:
            opaque = ""
        return Instance(
            label, fold(display), fold(facts.name), display, kind, columns or None, facts.keys, facts.not_null,
            opaque_reason=opaque, original={fold(c): c for c in facts.columns},
            partial_keys=() if opaque else facts.partial_keys, foreign=facts.foreign,
            integer_columns=facts.integer_columns, collations=dict(facts.collations),
        )  # fmt: skip

    def _derived(self, body: exp.Expression, label: str, display: str, name: str, what: str) -> Instance:
        outer = outer_reference(body, self.schema, self.ctes) if self.dialect == "duckdb" else ""
        if outer:
            # DuckDB binds a correlated subquery in FROM laterally, without the LATERAL keyword: it has
            # rows per row of the tables before it, so its body's keys ("at most one row") do not hold.
            return Instance(
                label, fold(display), fold(name), display, "derived", None,
                opaque_reason=f"{what} {outer} (a lateral subquery): keys unknown",
            )  # fmt: skip
        columns, keys, why = derived_keys(body, self.schema, self.ctes)
        return Instance(
            label, fold(display), fold(name), display, "derived", columns, keys, frozenset().union(*keys),
            opaque_reason="" if keys else f"{what} {why}",
        )  # fmt: skip

    def _add_join(self, join: exp.Join, enclosing: frozenset[int] | None) -> None:
        """Add a join's instances and read its condition.

        ``enclosing``: the instances of the LEFT-joined group this join sits in, if any. A LEFT JOIN's
        condition (and an inner join's inside such a group) may let the rest of the query determine the
        joined side, never the reverse, and pins only that side: its rows can be NULL-extended."""
        side = (join.side or "").upper()
        if side in ("RIGHT", "FULL"):
            raise Unanalysable(f"{side} JOIN: not analysed")
        kind = (join.kind or "").upper()
        if kind in ("SEMI", "ANTI"):
            return  # filters the left side, never multiplies it
        left = side == "LEFT"
        index = len(self.instances)
        members = frozenset(range(index, index + source_count(join.this)))
        restriction = members if left else enclosing
        self._add_sources(join.this, restriction)
        instance = self.instances[index]
        instance.left_joined = left or enclosing is not None
        condition = join.args.get("on")
        using = join.args.get("using")
        natural = (join.method or "").upper() == "NATURAL"
        instance.joined_with_condition = condition is not None or bool(using) or natural
        names: list[str] = []
        if (using or natural) and len(members) > 1:
            raise Unanalysable("USING or NATURAL join of a parenthesised join group: not analysed")
        if using:
            names = [fold(identifier.name) for identifier in using]
        elif natural and instance.columns is not None:
            earlier = set().union(*(i.columns or frozenset() for i in self.instances[:index]))
            names = sorted((instance.columns - ROWID_NAMES) & earlier)
        # The left operand of this join: everything before it, or inside a parenthesised group only the
        # group's members before it (``a LEFT JOIN (b JOIN c USING (x)) ...`` merges b.x and c.x).
        left_operand = range(index) if enclosing is None else sorted(k for k in enclosing if k < index)
        for column in names:
            holder = self.merged.get(column) if enclosing is None else None
            if holder is None:
                holder = next((k for k in left_operand if column in (self.instances[k].columns or ())), None)
            if holder is None:
                continue
            self.merged.setdefault(column, holder)
            if restriction is None:
                self.null_rejected.update((holder, index))
                holders = self.merged_holders.setdefault(column, [holder])
                if holder in holders and index not in holders:
                    holders.append(index)
            self._equal(
                (holder, column), (index, column), directed=restriction is not None and holder not in restriction
            )
        if condition is not None:
            for conjunct in conjuncts(condition):
                self._constraint(conjunct, inner=restriction)

    # ------------------------------------------------------------------ constraints

    def _constraint(self, node: exp.Expression, inner: frozenset[int] | None) -> None:
        """Record an equality, a pin, or a functional dependency. ``inner``: the instances on the
        NULL-extended side of the LEFT JOIN whose ON this is (None for WHERE and inner joins outside such
        a join). ``IS`` (and ``IS NOT DISTINCT FROM``) counts as ``=`` except that it matches NULL, so it
        proves no column non-NULL and filters out no NULL-extended row."""
        if self.partial:
            self._imply_partial_keys(node, inner)
        if isinstance(node, exp.Not) and isinstance(node.this, exp.Is) and isinstance(node.this.expression, exp.Null):
            column = self._resolve_node(node.this.this)
            if column is not None and inner is None:
                self.non_null.add(column)
                self.null_rejected.add(column[0])
            return
        if isinstance(node, exp.In) and not node.args.get("query") and len(node.expressions) == 1:
            node = exp.EQ(this=node.this, expression=node.expressions[0])
        if not isinstance(node, (exp.EQ, exp.NullSafeEQ, exp.Is)):
            return
        strict = isinstance(node, exp.EQ)
        left, right = node.this, node.expression
        a, b = self._resolve_node(left), self._resolve_node(right)
        if any(isinstance(n, exp.Collate) for side in (left, right) for n in side.walk()):
            # A collation decides which rows compare equal: keys declared under another collation do
            # not say how many rows match.
            for column in (a, b):
                if column is not None:
                    self.undecidable.setdefault(column[0], "matched under an explicit COLLATE")
            return
        if a is not None and b is not None and self.dialect == "mysql":
            # MySQL compares two columns of different collations (or text with a number, as numbers)
            # under one of them: a key unique under its own may then match several rows.
            one, other = self.instances[a[0]].collations.get(a[1]), self.instances[b[0]].collations.get(b[1])
            if one != other:
                for column in (a, b):
                    self.undecidable.setdefault(column[0], f"matched under another collation ({one} = {other})")
                return
        if a is not None and b is not None:
            if inner is None:
                self._equal(a, b, directed=False, strict=strict)
                if strict:
                    self.null_rejected.update((a[0], b[0]))
            elif b[0] in inner and a[0] not in inner:
                self._equal(a, b, directed=True, strict=strict)
            elif a[0] in inner and b[0] not in inner:
                self._equal(b, a, directed=True, strict=strict)
            elif a[0] in inner and b[0] in inner:
                self._equal(a, b, directed=False, strict=strict)
            return
        for column, other in ((a, right), (b, left)):
            if column is None:
                continue
            if inner is not None and column[0] not in inner:
                continue  # a LEFT JOIN's condition constrains only its NULL-extended side
            why = not_modelled(other)
            sources = None if why else self._columns_of(other)
            if why or sources is None:
                # An equality whose other side the analysis cannot evaluate (a user function, a
                # non-deterministic one, a subquery, a column it cannot place): it may well
                # determine this instance, so a fan-out through it is not established.
                shown = text_of(other, self.dialect)
                self.undecidable.setdefault(column[0], f"matched on {shown} ({why or 'columns not resolved'})")
                continue
            if not sources:  # a constant or a parameter: a pin
                self.pins.add(column)
                if strict:
                    self.non_null.add(column)
                    if inner is None:
                        self.null_rejected.add(column[0])
                continue
            # column = deterministic expression of other columns: those columns determine it.
            self.derived.append((frozenset(sources), column))
            if strict:
                self.non_null.add(column)
                if inner is None:
                    self.null_rejected.add(column[0])

    def _imply_partial_keys(self, node: exp.Expression, inner: frozenset[int] | None) -> None:
        """Match a condition with the predicates of the partial keys pending; a key whose every
        predicate conjunct some condition states becomes a key of its instance.

        A condition constrains an instance's rows when every output row in which that instance is a real
        row satisfies it: a WHERE conjunct or an inner join's ON outside any LEFT JOIN (``inner`` None),
        or the ON of the LEFT JOIN (or of an inner join inside the LEFT-joined group) that joins the
        instance; never the ON of a LEFT JOIN that joins another instance, which filters nothing of
        this one. Compared as trees, with the instance's columns unqualified (``canonical``): a
        predicate ``deleted_at IS NULL`` is implied by ``p.deleted_at IS NULL``, not by
        ``p.deleted_at IS NULL OR ...`` nor ``u.deleted_at IS NULL``."""
        forms: dict[int, exp.Expression | None] = {}
        for k, columns, remaining in self.partial:
            if not remaining or (inner is not None and k not in inner):
                continue
            if k not in forms:
                forms[k] = canonical(node, partial(self._own_column, k=k))
            form = forms[k]
            if form is None:
                continue
            remaining[:] = [c for c in remaining if c != form]
            instance = self.instances[k]
            if not remaining and columns not in instance.keys:
                instance.keys = (*instance.keys, columns)

    def _own_column(self, column: exp.Column, k: int) -> str | None:
        """``column``'s folded name if it is a column of instance ``k``, else None."""
        if is_parameter(column) or isinstance(column.this, exp.Star):
            return None
        resolved = self._resolve(column)
        return resolved[1] if resolved is not None and resolved[0] == k else None

    def _columns_of(self, node: exp.Expression) -> list[Col] | None:
        """The resolved columns an expression reads, or None if one cannot be placed."""
        out: list[Col] = []
        for child in node.walk():
            if isinstance(child, exp.Column) and not isinstance(child.this, exp.Star) and not is_parameter(child):
                resolved = self._resolve(child)
                if resolved is None:
                    return None
                out.append(resolved)
        return out

    def _equal(self, a: Col, b: Col, directed: bool, strict: bool = True) -> None:
        self.edges.append((a, b))
        if strict:
            self.non_null.add(b)
        if directed and strict:  # IS matches NULL to NULL: a matched row of b proves nothing of a
            self.reverse_edges.append((b, a))
        if not directed:
            self.edges.append((b, a))
            if strict:
                self.non_null.add(a)

    def _resolve_node(self, node: exp.Expression) -> Col | None:
        while isinstance(node, exp.Paren):
            node = node.this
        if not isinstance(node, exp.Column) or isinstance(node.this, exp.Star) or is_parameter(node):
            return None
        return self._resolve(node)

    def _resolve(self, column: exp.Column) -> Col | None:
        name = fold(column.name)
        qualifier = fold(column.table) if column.table else ""
        if qualifier:
            matches = [k for k, i in enumerate(self.instances) if i.alias == qualifier]
            if not matches:
                matches = [k for k, i in enumerate(self.instances) if i.name == qualifier]
            return (matches[0], name) if len(matches) == 1 else None
        if name in self.merged:
            return (self.merged[name], name)
        holders = [k for k, i in enumerate(self.instances) if i.columns is not None and name in i.columns]
        if len(holders) == 1:
            return (holders[0], name)
        unknown = [k for k, i in enumerate(self.instances) if i.columns is None]
        if not holders and len(unknown) == 1:
            return (unknown[0], name)
        if not holders and len(self.instances) == 1:
            return (0, name)
        return None

    # ------------------------------------------------------------------ projection

    def _projected(self, star: set[str] | bool, read_columns: list[exp.Column]) -> set[int]:
        if star is True:
            return set(range(len(self.instances)))
        projected = {k for k, i in enumerate(self.instances) if isinstance(star, set) and i.alias in star}
        for column in read_columns:
            # A merged USING/NATURAL column of inner joins equals each holder's column: it is read from
            # all of them, whichever the FROM clause names first (the verdict must not depend on that).
            projected.update(self._merged_holders(column))
            resolved = self._resolve(column)
            if resolved is None:
                if fold(column.name) in ROWID_NAMES and len(self.instances) == 1:
                    resolved = (0, fold(column.name))
                else:
                    raise Unanalysable(f"cannot tell which table column {text_of(column, self.dialect)} belongs to")
            projected.add(resolved[0])
        return projected

    def _bare_columns(self, select: exp.Select, star: set[str] | bool) -> set[Col]:
        bare: set[Col] = set()
        for k, instance in enumerate(self.instances):
            if star is True or (isinstance(star, set) and instance.alias in star):
                # A star reads a table's declared columns, not SQLite's row id (``t.*`` of a keyless table
                # does not tell two equal rows apart), unless a column takes one of its names.
                hidden = ROWID_NAMES - set(instance.original) if instance.kind == "table" else frozenset()
                bare |= {(k, c) for c in instance.columns or () if c not in hidden}
                bare |= {(k, c) for key in instance.keys if not key & hidden for c in key}
        for item in select.expressions:
            body = item.unalias()
            if isinstance(body, exp.Column) and not isinstance(body.this, exp.Star) and not is_parameter(body):
                bare |= {(k, fold(body.name)) for k in self._merged_holders(body)}
                resolved = self._resolve(body)
                if resolved is not None:
                    bare.add(resolved)
        return bare

    def _merged_holders(self, column: exp.Column) -> list[int]:
        """The instances an unqualified merged USING/NATURAL column is read from (see ``merged_holders``)."""
        if column.table:
            return []
        return self.merged_holders.get(fold(column.name), [])

    def _identities_of(self, reads: set[int]) -> tuple[exp.Expression, ...] | str:
        """Expressions whose values tell apart the rows of the instances the argument reads, compared
        as the row numbering's PARTITION BY compares them, or why there are none. Per instance:

        * SQLite: its rowid (an integer: no collation decides anything), else a NOT NULL key with each
          column ``COLLATE BINARY``: rows distinct under the key's own collation are distinct under
          BINARY, and a row's copies are equal under any (a NOCASE column with a BINARY unique index
          merged 'widget' and 'WIDGET' when compared under the column's NOCASE, c12);
        * DuckDB: its ``rowid``, unless a column takes the name (then the table has none: a user column
          ``rowid`` is data, c07, and a key's collation cannot be overridden for any type);
        * PostgreSQL: ``tableoid`` with ``ctid``, unique across partitions and inheritance children,
          where ``ctid`` alone and a parent's PRIMARY KEY repeat (c06); none for a foreign table;
        * ClickHouse: a NOT NULL key the data proved unique (``schema_clickhouse``); none for a LEFT-joined
          table, whose unmatched rows carry the key's default value (``join_use_nulls = 0``);
        * a derived table seen through: its key (by output name; its rows are told apart as its
          DISTINCT or GROUP BY told them apart), ``COLLATE BINARY`` on SQLite.

        A key that may hold NULL is never used: rows whose key is NULL would share one number."""
        expressions: list[exp.Expression] = []
        for k in sorted(reads):
            instance = self.instances[k]
            found = self._identity(k)
            if found is None:
                why = instance.opaque_reason or "no NOT NULL key and no row id"
                return f"no row identity for {instance.label} ({why}): not corrected"
            expressions.extend(found)
        return tuple(expressions)

    def _identity(self, k: int) -> list[exp.Expression] | None:
        instance = self.instances[k]

        def column(name: str) -> exp.Column:
            return keep(exp.column(name, table=instance.display, quoted=True))

        def binary(name: str) -> exp.Expression:
            if self.dialect != "sqlite":
                return column(name)
            return keep(exp.Collate(this=column(name), expression=exp.var("BINARY")))

        if instance.kind == "derived":
            unnamed = instance.display == "subquery" or fold(instance.display) != instance.alias
            if not instance.keys or instance.opaque_reason or unnamed:
                return None
            return [binary(name) for name in sorted(instance.keys[0])]
        if instance.kind != "table" or instance.opaque_reason:
            return None
        if self.dialect == "clickhouse" and instance.left_joined:
            return None  # unmatched rows carry the key's default value (join_use_nulls = 0), as a real row may
        if self.dialect == "postgres":
            # A foreign table's ctid is its wrapper's to give, if any.
            return None if instance.foreign else [column("tableoid"), column("ctid")]
        if self.dialect == "duckdb":
            return None if "rowid" in (instance.original or {}) else [column("rowid")]
        identities = [key for key in instance.keys if key <= instance.not_null]
        rowid = next((alias for alias in ("rowid", "oid", "_rowid_") if frozenset({alias}) in identities), None)
        if rowid is not None:
            return [column(rowid)]
        key = next(iter(identities), None)
        if key is None:
            return None
        return [binary(instance.original.get(c, c)) for c in sorted(key)]


def _column_list(source: exp.Expression, ctes: dict[str, exp.Expression]) -> str:
    """How ``source`` is given a column list (``AS t(a, b)``, or a CTE ``t(a, b) AS (...)``), or ""."""
    if source.alias_column_names:
        return f"the column list of {source.alias}"
    if isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier) and not source.db:
        body = ctes.get(fold(source.name))
        if body is not None and isinstance(body.parent, exp.CTE) and body.parent.alias_column_names:
            return f"CTE {source.name}'s column list"
    return ""


def view_definition(facts: TableFacts, dialect: str) -> exp.Create | None:
    """The parsed ``CREATE VIEW`` of the view ``facts`` describes, with a query as its body, where the
    catalog holds its text; else None."""
    if not facts.is_view or not facts.view_sql:
        return None
    parsed = parse_single(facts.view_sql, dialect)
    if isinstance(parsed, exp.Create) and isinstance(parsed.args.get("expression"), exp.Query):
        return parsed
    return None
