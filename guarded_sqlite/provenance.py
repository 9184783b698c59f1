"""Duplicate provenance: decide from declared keys whether a query's duplicate rows can be join repeats.

A pure analysis of the outermost SELECT (a sqlglot tree plus ``SchemaFacts``; no database access). It
answers *why* a result may hold duplicate rows, so that a policy can tell a join that multiplies rows
(usually a bug in generated SQL) from values that legitimately repeat (one column of one table, N:1
lookups, computed values).

Method: functional dependencies. Each table instance in the FROM clause (self-joins and aliases are
separate instances) is *determined* once the rows it contributes are fixed by what is already known.
The closure starts from a reference set of instances (see below), adds columns pinned to a constant or a
parameter, follows ``A = B`` equalities from inner-join ON clauses, ``USING``/``NATURAL`` joins and
top-level WHERE conjuncts (comma joins included), and lets every declared key of an instance, once all
its columns are known, determine that whole instance. An instance the closure never reaches can
contribute several rows for one reference row: it *fans out*.

Relative to what. Two table sets can be taken as fixed: the FROM clause's *leading* table (the first,
which a LEFT JOIN preserves) and the *projected* tables (those the select list reads). ``fanning_leading``
and ``fanning_projected`` report both closures, whatever the verdict. The verdict uses ``reference``:

* ``"both"`` (the default): amplification only when something fans out relative to each set. This is
  the measured choice (``benchmarks/provenance_spider_results.md``): on Spider dev it gives the
  text-to-SQL P1 rule +7/+9/+4 Multiset-EX pairs on the three released systems (2 losses on the gold
  queries) against +6/+7/+0 (4 losses) for ``"leading"``, and it keeps Django's ``values("note__note")``
  shape, ``SELECT note.note FROM item LEFT JOIN note ON item.note_id = note.id``, a ``value_repeats``
  (N:1 lookups from the leading table), which ``"projected"`` calls amplified.
* ``"leading"``, ``"projected"``, ``"either"``: kept for measurement.

For P2 (removing a DISTINCT) the question is the opposite one, whether the DISTINCT may *hide* a join's
multiplication, and either set counts: ``Provenance.hides_amplification``. ``SELECT DISTINCT T2.Name FROM
country T1 JOIN city T2 ON T2.CountryCode = T1.Code`` is ``value_repeats`` (city names repeat across
cities) but hides the country rows' multiplication by their cities; removing that DISTINCT broke 3 gold
queries on Spider, and refusing it costs nothing there. The presets also keep a DISTINCT over
``value_repeats`` (``guarded_sqlite.patching``): it merges equal values of distinct rows, as written.

Verdicts (the analysis ignores the outermost DISTINCT flag: it describes the query without it):

* ``amplified``: some instance fans out under ``reference`` (a 1:N join whose N side is not determined,
  a cross join, a table with no key), and the projection does not identify the rows of the tables it
  reads.
* ``identified``: the projected columns (with the pins) determine every projected instance, so equal
  output rows are the same row combination: duplicates are join repeats if something fans out
  (``fanning`` non-empty; e.g. an ORM filter across a multi-valued relation that selects the key), and
  impossible otherwise (data that keeps its declared keys has no duplicates there).
* ``value_repeats``: nothing fans out under ``reference`` (one table, N:1 lookups, keys pinned by
  constants, semi-joins via IN/EXISTS, which are not in the FROM clause), or the select list is
  computed values (no column read outside window functions: constants, ``count(*) OVER ()``), or each
  row is a group (GROUP BY or an aggregate): duplicates repeat values and are legitimate.
* ``unknown``: the analysis cannot see it, and ``evidence`` says why: unparseable SQL, compound
  queries, RIGHT/FULL joins, a USING/NATURAL join of a join group, a view, derived table, table function
  or unknown table whose keys are unknown and which is not determined, an unresolvable column, or a
  statement too large (``MAX_SQL_CHARS``, ``MAX_NODES``).

Keyless base tables are treated as fanning out (a link table without a key is the commonest source of
join repeats); views and unknown names are not guessed at (``unknown``). A LEFT JOIN is used in one
direction only: its ON equalities let the left side determine the right side, never the reverse.
A parenthesised join group, ``a LEFT JOIN (b JOIN c ON c.id = b.c_id) ON b.a_id = a.id`` (how ORMs
eager-load across a many-to-many), is read table by table: inside it, equalities work both ways; from
outside a LEFT-joined group, only into it.
Derived tables and CTEs are seen through when simple: a DISTINCT or grouped body is keyed by its output
(or group) columns, an aggregate without GROUP BY has at most one row, a single-table body keeps the
keys it projects; any other derived table is opaque.

>>> from guarded_sqlite.schema import SchemaFacts, TableFacts
>>> shop = SchemaFacts((TableFacts("customers", columns=("id", "name"), keys=(frozenset({"id"}),)),
...                     TableFacts("orders", columns=("id", "customer_id"), keys=(frozenset({"id"}),))))
>>> p = analyse("SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id", shop)
>>> p.verdict, p.fanning
('amplified', ('o (orders)',))
>>> analyse("SELECT c.name FROM orders o JOIN customers c ON o.customer_id = c.id", shop).verdict
'value_repeats'
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, cast

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from .rewrite import quiet_sqlglot
from .schema import SchemaFacts, TableFacts, fold

__all__ = [
    "MAX_NODES",
    "MAX_SQL_CHARS",
    "Provenance",
    "Reference",
    "Verdict",
    "analyse",
    "analyse_tree",
    "parse_statement",
    "table_names",
]

Verdict = Literal["amplified", "identified", "value_repeats", "unknown"]
Reference = Literal["leading", "projected", "either", "both"]

MAX_SQL_CHARS = 50_000
"""Longer statements are not parsed: the verdict is ``unknown``."""

MAX_NODES = 5_000
"""Trees with more nodes are not analysed: the verdict is ``unknown``."""

_ROWID = frozenset({"rowid", "oid", "_rowid_"})


@dataclass(frozen=True)
class Provenance:
    """Where a query's duplicate rows can come from."""

    verdict: Verdict
    """``amplified``, ``identified``, ``value_repeats`` or ``unknown`` (see the module docstring)."""

    evidence: str
    """One readable sentence: which instance fans out along which join, which keys were used, or why unknown."""

    fanning: tuple[str, ...] = ()
    """The instances behind an ``amplified``/``identified`` verdict: they can contribute several rows per
    reference row (``alias (table)`` or ``table``). Empty for the other verdicts."""

    fanning_leading: tuple[str, ...] = ()
    """Instances that can match several rows per row of the leading table (whatever the verdict)."""

    fanning_projected: tuple[str, ...] = ()
    """Instances that can match several rows per combination of the projected tables' rows."""

    reference: tuple[str, ...] = ()
    """The instances taken as fixed: the leading table (or the projected tables, per ``reference=``)."""

    projected: tuple[str, ...] = ()
    """The instances whose columns the select list reads (outside window functions and subqueries)."""

    keys_used: tuple[str, ...] = ()
    """Keys that determined an instance, as ``alias.(col, ...)``: the N:1 lookups and identifying keys."""

    @property
    def amplification(self) -> bool:
        """Whether a join multiplies rows and duplicates can be join repeats (the P1 question)."""
        return self.verdict in ("amplified", "identified") and bool(self.fanning)

    @property
    def hides_amplification(self) -> bool:
        """Whether a DISTINCT on this query may be hiding a join's multiplication, relative to the leading
        table *or* to the projected tables (the P2 question: removing the DISTINCT lets join repeats through)."""
        return bool(self.fanning_leading or self.fanning_projected)


def analyse(sql: str, schema: SchemaFacts, dialect: str = "sqlite", reference: Reference = "both") -> Provenance:
    """The provenance of ``sql``'s duplicates, given the schema facts. Never raises."""
    parsed = parse_statement(sql, dialect)
    if isinstance(parsed, Provenance):
        return parsed
    return analyse_tree(parsed, schema, dialect, reference)


def parse_statement(sql: str, dialect: str = "sqlite") -> exp.Expression | Provenance:
    """The syntax tree of a single statement, or the ``unknown`` verdict saying why there is none."""
    if len(sql) > MAX_SQL_CHARS:
        return Provenance("unknown", f"statement longer than {MAX_SQL_CHARS} characters: not analysed")
    try:
        with quiet_sqlglot():
            trees = [t for t in sqlglot.parse(sql, read=dialect) if t is not None and not isinstance(t, exp.Semicolon)]
    except (SqlglotError, ValueError, RecursionError) as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        return Provenance("unknown", f"unparseable SQL: {first}")
    if len(trees) != 1:
        return Provenance("unknown", "not a single statement")
    return cast(exp.Expression, trees[0])


def table_names(tree: exp.Expression) -> tuple[tuple[str | None, str], ...]:
    """Every table the statement could read, as (folded schema qualifier or None, folded name), sorted;
    CTE names included: a superset of what ``analyse_tree`` looks up in the schema facts."""
    names = {
        (fold(node.db) if node.db else None, fold(node.name))
        for node in tree.find_all(exp.Table)
        if isinstance(node.this, exp.Identifier) and node.name
    }
    return tuple(sorted(names, key=lambda n: (n[0] or "", n[1])))


def analyse_tree(
    tree: exp.Expression, schema: SchemaFacts, dialect: str = "sqlite", reference: Reference = "both"
) -> Provenance:
    """``analyse`` for a tree the caller already parsed (it is not modified). Never raises."""
    try:
        return _Analysis(tree, schema, dialect).run(reference)
    except _Unknown as why:
        return Provenance("unknown", str(why))
    except Exception as error:  # a tree shape we did not foresee must never break the caller
        return Provenance("unknown", f"analysis failed: {type(error).__name__}: {error}")


class _Unknown(Exception):
    """The analysis cannot see far enough; the message says why."""


@dataclass
class _Instance:
    """One table instance of the outermost FROM clause."""

    label: str  # "alias (table)" or "table", for messages
    alias: str  # lower-cased name the query refers to it by
    name: str  # the table's own name (lower-cased) for qualifier matching
    display: str  # what column references are qualified with in messages
    kind: str  # "table", "view", "derived", "function", "unknown"
    columns: frozenset[str] | None  # lower-cased; None when not known
    keys: tuple[frozenset[str], ...] = ()
    not_null: frozenset[str] = frozenset()
    opaque_reason: str = ""
    left_joined: bool = False
    joined_with_condition: bool = True
    original: dict[str, str] = field(default_factory=dict)  # lower-cased column -> declared spelling


_Col = tuple[int, str]


@dataclass
class _Closure:
    determined: set[int]
    known: set[_Col]
    keys_used: dict[int, frozenset[str]] = field(default_factory=dict)


class _Analysis:
    def __init__(self, tree: exp.Expression, schema: SchemaFacts, dialect: str) -> None:
        self.schema = schema
        self.dialect = dialect
        node = tree
        while isinstance(node, exp.Subquery):
            node = node.this
        self.root = node
        self.instances: list[_Instance] = []
        self.edges: list[tuple[_Col, _Col]] = []  # directed: knowing [0] gives [1]
        self.pins: set[_Col] = set()
        self.non_null: set[_Col] = set()
        # Instances a WHERE conjunct or an inner join's condition reads with an equality or IS NOT NULL:
        # rows where a LEFT JOIN NULL-extended them are filtered out, so their keys identify them.
        self.null_rejected: set[int] = set()
        # column = f(other columns), f deterministic: knowing all of the sources gives the column.
        self.derived: list[tuple[frozenset[_Col], _Col]] = []
        # Instances matched by a condition the analysis does not model (why, per instance): whether
        # they fan out cannot be told, so they never establish a fan-out.
        self.undecidable: dict[int, str] = {}
        self.merged: dict[str, int] = {}  # USING/NATURAL column name -> first instance holding it
        self.ctes: dict[str, exp.Expression] = {}

    # ------------------------------------------------------------------ driver

    def run(self, reference: Reference) -> Provenance:
        select = self.root
        if isinstance(select, exp.SetOperation):
            return Provenance("unknown", f"compound query ({type(select).__name__.upper()}): not analysed")
        if not isinstance(select, exp.Select):
            return Provenance("unknown", f"not a SELECT ({type(select).__name__})")
        if _too_big(select):
            return Provenance("unknown", f"query has more than {MAX_NODES} syntax nodes: not analysed")
        with_ = select.args.get("with_") or select.args.get("with")
        if with_ is not None:
            for cte in with_.expressions:
                self.ctes[fold(cte.alias_or_name)] = cte.this

        grouped = _grouping(select)
        if grouped:
            return Provenance("value_repeats", grouped)
        star, read_columns, computed_only = _select_list(select)
        if not star and computed_only:
            return Provenance("value_repeats", f"computed values: {computed_only}")
        from_ = select.args.get("from_") or select.args.get("from")
        if from_ is None:
            return Provenance("value_repeats", "no FROM clause: one row")

        self._add_sources(from_.this, None)
        for join in select.args.get("joins") or ():
            self._add_join(join, None)
        where = select.args.get("where")
        if where is not None:
            for conjunct in _conjuncts(where.this):
                self._constraint(conjunct, inner=None)

        projected = self._projected(star, read_columns)
        bare = self._bare_columns(select, star)
        return self._verdict(reference, projected, bare)

    # ------------------------------------------------------------------ FROM clause

    def _add_source(self, source: exp.Expression) -> int:
        instance = self._instance(source)
        self.instances.append(instance)
        return len(self.instances) - 1

    def _add_sources(self, source: exp.Expression, restriction: frozenset[int] | None) -> None:
        """Add a FROM item's instances: one table or derived table, or each table of a parenthesised join
        group, ``(b JOIN c ON ...)``, whose own joins are read under ``restriction`` (see ``_add_join``)."""
        group = _join_group(source)
        if group is None:
            self._add_source(source)
            return
        first, joins = group
        self._add_source(first)
        for join in joins:
            self._add_join(join, restriction)

    def _instance(self, source: exp.Expression) -> _Instance:
        alias = source.alias if isinstance(source, (exp.Table, exp.Subquery)) else ""
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
                return _Instance(
                    label,
                    fold(display),
                    fold(name),
                    display,
                    "unknown",
                    None,
                    opaque_reason=f"unknown table {shown}",
                )
            return self._from_facts(facts, label, display)
        if isinstance(source, exp.Subquery):
            display = alias or "subquery"
            return self._derived(source.this, display, display, display, f"derived table {display}")
        if isinstance(source, exp.Table):  # a table-valued function such as json_each(?)
            display = alias or source.this.sql(self.dialect)
            function = source.this.sql(self.dialect)
            return _Instance(
                display, fold(display), fold(display), display, "function", None,
                opaque_reason=f"table function {function} has no known key",
            )  # fmt: skip
        raise _Unknown(f"unsupported FROM item {type(source).__name__}")

    def _from_facts(self, facts: TableFacts, label: str, display: str) -> _Instance:
        kind = "view" if facts.is_view else "table"
        columns = facts.column_names | (_ROWID & frozenset().union(*facts.keys))
        if facts.is_view:
            opaque = f"view {facts.name} has no known key"
        elif facts.keys_unknown:
            opaque = f"{facts.keys_unknown}: keys unknown"
        else:
            opaque = ""
        return _Instance(
            label, fold(display), fold(facts.name), display, kind, columns or None, facts.keys, facts.not_null,
            opaque_reason=opaque, original={fold(c): c for c in facts.columns},
        )  # fmt: skip

    def _derived(self, body: exp.Expression, label: str, display: str, name: str, what: str) -> _Instance:
        columns, keys, why = _derived_keys(body, self.schema, self.ctes)
        return _Instance(
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
            raise _Unknown(f"{side} JOIN: not analysed")
        kind = (join.kind or "").upper()
        if kind in ("SEMI", "ANTI"):
            return  # filters the left side, never multiplies it
        left = side == "LEFT"
        index = len(self.instances)
        members = frozenset(range(index, index + _source_count(join.this)))
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
            raise _Unknown("USING or NATURAL join of a parenthesised join group: not analysed")
        if using:
            names = [fold(identifier.name) for identifier in using]
        elif natural and instance.columns is not None:
            earlier = set().union(*(i.columns or frozenset() for i in self.instances[:index]))
            names = sorted((instance.columns - _ROWID) & earlier)
        for column in names:
            holder = self.merged.get(column)
            if holder is None:
                holder = next((k for k in range(index) if column in (self.instances[k].columns or ())), None)
            if holder is None:
                continue
            self.merged.setdefault(column, holder)
            if restriction is None:
                self.null_rejected.update((holder, index))
            self._equal(
                (holder, column), (index, column), directed=restriction is not None and holder not in restriction
            )
        if condition is not None:
            for conjunct in _conjuncts(condition):
                self._constraint(conjunct, inner=restriction)

    # ------------------------------------------------------------------ constraints

    def _constraint(self, node: exp.Expression, inner: frozenset[int] | None) -> None:
        """Record an equality, a pin, or a functional dependency. ``inner``: the instances on the
        NULL-extended side of the LEFT JOIN whose ON this is (None for WHERE and inner joins outside such
        a join). ``IS`` (and ``IS NOT DISTINCT FROM``) counts as ``=`` except that it matches NULL, so it
        proves no column non-NULL and filters out no NULL-extended row."""
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
            why = _not_modelled(other)
            sources = None if why else self._columns_of(other)
            if why or sources is None:
                # An equality whose other side the analysis cannot evaluate (a user function, a
                # non-deterministic one, a subquery, a column it cannot place): it may well
                # determine this instance, so a fan-out through it is not established.
                shown = other.sql(self.dialect)
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

    def _columns_of(self, node: exp.Expression) -> list[_Col] | None:
        """The resolved columns an expression reads, or None if one cannot be placed."""
        out: list[_Col] = []
        for child in node.walk():
            if isinstance(child, exp.Column) and not isinstance(child.this, exp.Star) and not _is_parameter(child):
                resolved = self._resolve(child)
                if resolved is None:
                    return None
                out.append(resolved)
        return out

    def _equal(self, a: _Col, b: _Col, directed: bool, strict: bool = True) -> None:
        self.edges.append((a, b))
        if strict:
            self.non_null.add(b)
        if not directed:
            self.edges.append((b, a))
            if strict:
                self.non_null.add(a)

    def _resolve_node(self, node: exp.Expression) -> _Col | None:
        while isinstance(node, exp.Paren):
            node = node.this
        if not isinstance(node, exp.Column) or isinstance(node.this, exp.Star) or _is_parameter(node):
            return None
        return self._resolve(node)

    def _resolve(self, column: exp.Column) -> _Col | None:
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
            resolved = self._resolve(column)
            if resolved is None:
                if fold(column.name) in _ROWID and len(self.instances) == 1:
                    resolved = (0, fold(column.name))
                else:
                    raise _Unknown(f"cannot tell which table column {column.sql(self.dialect)} belongs to")
            projected.add(resolved[0])
        return projected

    def _bare_columns(self, select: exp.Select, star: set[str] | bool) -> set[_Col]:
        bare: set[_Col] = set()
        for k, instance in enumerate(self.instances):
            if star is True or (isinstance(star, set) and instance.alias in star):
                bare |= {(k, c) for c in instance.columns or ()}
                bare |= {(k, c) for key in instance.keys for c in key}
        for item in select.expressions:
            body = item.unalias()
            if isinstance(body, exp.Column) and not isinstance(body.this, exp.Star) and not _is_parameter(body):
                resolved = self._resolve(body)
                if resolved is not None:
                    bare.add(resolved)
        return bare

    # ------------------------------------------------------------------ closure and verdict

    def _closure(self, start: set[int], seeds: set[_Col], identity: bool = False) -> _Closure:
        """What ``start`` and ``seeds`` determine. ``identity``: whether equal output rows are one row
        combination, where a LEFT-joined instance's key does not count unless its NULL-extended rows
        are filtered out (two unmatched rows share its NULL key)."""
        result = _Closure(set(start), set(seeds) | self.pins)
        non_null = set(self.non_null)
        changed = True
        while changed:
            changed = False
            for a, b in self.edges:
                if (a[0] in result.determined or a in result.known) and b not in result.known:
                    result.known.add(b)
                    changed = True
            for sources, target in self.derived:
                if target not in result.known and all(c[0] in result.determined or c in result.known for c in sources):
                    result.known.add(target)
                    changed = True
            for k, instance in enumerate(self.instances):
                if k in result.determined or (identity and instance.left_joined and k not in self.null_rejected):
                    continue
                for key in instance.keys:
                    if all((k, c) in result.known and (c in instance.not_null or (k, c) in non_null) for c in key):
                        result.determined.add(k)
                        result.keys_used[k] = key
                        changed = True
                        break
        return result

    def _fanning(self, start: set[int]) -> tuple[list[int], _Closure]:
        closure = self._closure(start, set())
        return [k for k in range(len(self.instances)) if k not in closure.determined], closure

    def _verdict(self, reference: Reference, projected: set[int], bare: set[_Col]) -> Provenance:
        labels = [i.label for i in self.instances]
        leading = {0}
        by_projection = projected or leading
        fan_l, closure_l = self._fanning(leading)
        fan_p, closure_p = self._fanning(by_projection)
        known_l = [k for k in fan_l if self._known(k)]
        known_p = [k for k in fan_p if self._known(k)]
        # A fan-out is established only if it holds whatever the instances the analysis cannot see
        # do: with every opaque or undecidably matched instance taken as determined, a table with
        # known keys that is still not determined fans out for certain.
        unseen = {k for k in range(len(self.instances)) if not self._known(k) or k in self.undecidable}
        sure_l = [k for k in self._fanning(leading | unseen)[0] if k not in unseen] if unseen else known_l
        sure_p = [k for k in self._fanning(by_projection | unseen)[0] if k not in unseen] if unseen else known_p
        sides = {"leading": (sure_l, closure_l, leading), "projected": (sure_p, closure_p, by_projection)}
        certain = _combine(reference, bool(sure_l), bool(sure_p))
        possible = _combine(reference, bool(fan_l), bool(fan_p))
        identity = self._closure(set(), bare, identity=True)
        identified = bool(projected) and projected <= identity.determined
        keys_used = {**closure_l.keys_used, **identity.keys_used}
        common = {
            "fanning_leading": tuple(labels[k] for k in known_l),
            "fanning_projected": tuple(labels[k] for k in known_p),
            "reference": tuple(labels[k] for k in sorted(leading if reference == "leading" else by_projection)),
            "projected": tuple(labels[k] for k in sorted(projected)),
            "keys_used": tuple(
                f"{self.instances[k].display}.({', '.join(sorted(key))})" for k, key in sorted(keys_used.items())
            ),
        }
        if certain:
            used = [side for name, side in sides.items() if side[0] and reference in (name, "either", "both")]
            reasons = _clauses(dict.fromkeys(self._why_fans(k, c, st) for ks, c, st in used for k in ks))
            fanned = tuple(dict.fromkeys(labels[k] for ks, _, _ in used for k in ks))
            if identified:
                held = _clauses(self._key_text(k, identity) for k in sorted(projected))
                evidence = f"{reasons}; the projection identifies {held}: duplicates repeat the same rows"
                return Provenance("identified", evidence, fanned, **common)
            missing = ", ".join(
                labels[k] + (" (LEFT JOIN: NULL for unmatched rows)" if self.instances[k].left_joined else "")
                for k in sorted(projected - identity.determined)
            )
            return Provenance("amplified", f"{reasons}; projection has no key of {missing}", fanned, **common)
        if possible:
            hidden = dict.fromkeys(k for k in [*fan_l, *fan_p] if k in unseen)
            why = _clauses(
                self.instances[k].opaque_reason
                if not self._known(k)
                else f"{self.instances[k].label} is {self.undecidable[k]}"
                for k in hidden
            )
            return Provenance("unknown", f"{why}, and nothing determines its rows", **common)
        if identified:
            held = _clauses(self._key_text(k, identity) for k in sorted(projected))
            return Provenance("identified", f"the projection identifies {held}: no duplicate rows", **common)
        if len(self.instances) == 1:
            return Provenance("value_repeats", f"one table ({labels[0]}): duplicates repeat its values", **common)
        if not fan_l and not fan_p:
            lookups = self._lookups(closure_l, leading)
            return Provenance("value_repeats", f"no join multiplies rows: {lookups}", **common)
        # Fans out relative to one reference only (reference "both"): say which way.
        if not fan_l:
            note = _clauses(self._why_fans(k, closure_p, by_projection) for k in known_p)
            lookups = self._lookups(closure_l, leading)
            evidence = f"no join multiplies {labels[0]}: {lookups} (relative to the projected tables: {note})"
        else:
            note = _clauses(self._why_fans(k, closure_l, leading) for k in known_l)
            lookups = self._lookups(closure_p, by_projection)
            evidence = f"no join repeats a row of the projected tables: {lookups} (but {note})"
        return Provenance("value_repeats", evidence, **common)

    def _known(self, k: int) -> bool:
        """Whether instance ``k``'s keys are known (a base table, or a derived table seen through)."""
        instance = self.instances[k]
        return not instance.opaque_reason or bool(instance.keys)

    def _lookups(self, closure: _Closure, start: set[int]) -> str:
        parts = [
            f"{self.instances[k].label} is an N:1 lookup ({self._key_cols(k, closure)} is a key)"
            if closure.keys_used.get(k)
            else f"{self.instances[k].label} has at most one row"
            for k in range(len(self.instances))
            if k not in start
        ]
        return _clauses(parts) or "the projected tables are the only ones"

    def _key_text(self, k: int, closure: _Closure) -> str:
        """``label (by key a.x)``, the key the closure used to determine instance ``k``."""
        key = closure.keys_used.get(k)
        label = self.instances[k].label
        if key is None:
            return label
        return f"{label} (by key {self._key_cols(k, closure)})" if key else f"{label} (at most one row)"

    def _key_cols(self, k: int, closure: _Closure) -> str:
        instance = self.instances[k]
        key = closure.keys_used.get(k, frozenset())
        return ", ".join(f"{instance.display}.{instance.original.get(c, c)}" for c in sorted(key)) or "one row"

    def _why_fans(self, k: int, closure: _Closure, start: set[int]) -> str:
        instance = self.instances[k]
        ref = ", ".join(self.instances[r].label for r in sorted(start))
        head = f"{instance.label} fans out {ref}"
        if not any(key and not key & _ROWID for key in instance.keys):  # nothing declared besides the rowid
            return f"{head} ({instance.label} has no key)"
        known = closure.known

        def given(c: _Col) -> bool:
            return c[0] in closure.determined or c in known

        linked = sorted(
            {b[1] for a, b in self.edges if b[0] == k and given(a)}
            | {t[1] for sources, t in self.derived if t[0] == k and all(given(c) for c in sources)}
        )
        pinned = sorted(c for i, c in self.pins if i == k)
        joined = [*linked, *(c for c in pinned if c not in linked)]
        if joined:
            cols = ", ".join(f"{instance.display}.{instance.original.get(c, c)}" for c in joined)
            verb = "is not a key" if len(joined) == 1 else "are not a key"
            return f"{head} ({cols} {verb})"
        # Equalities only with instances that are not determined themselves: name those joined before
        # this one (the way the FROM clause reaches it), else any.
        others = {a[0] for a, b in self.edges if b[0] == k and a[0] != k} | {
            c[0] for sources, t in self.derived if t[0] == k for c in sources if c[0] != k
        }
        through = sorted({t for t in others if t < k} or others)
        if through:
            labels = ", ".join(self.instances[t].label for t in through)
            return f"{head} (joined only through {labels}, which {'fans' if len(through) == 1 else 'fan'} out)"
        determines = sorted({b[0] for a, b in self.edges if a[0] == k and b[0] != k})
        if determines:  # equalities only into other instances: the ON of a LEFT JOIN, one direction only
            labels = ", ".join(self.instances[t].label for t in determines)
            return f"{head} (a LEFT JOIN's condition lets it determine {labels}, not the reverse)"
        if not instance.joined_with_condition:
            return f"{head} (cross join)"
        return f"{head} (no equality on its columns)"


# ---------------------------------------------------------------------- helpers over the tree


def _combine(reference: Reference, leading: bool, projected: bool) -> bool:
    """Whether the query fans out under ``reference``, given whether it does relative to each table set."""
    if reference == "leading":
        return leading
    if reference == "projected":
        return projected
    if reference == "either":
        return leading or projected
    return leading and projected


MAX_CLAUSES = 4
"""Most per-table clauses one list in ``evidence`` spells out; the rest are counted ("and 3 more"). The
fields ``fanning_leading``, ``fanning_projected`` and ``keys_used`` always list every table."""


def _clauses(parts: Iterable[str]) -> str:
    """``parts`` joined with "; ", the first ``MAX_CLAUSES`` of them, then how many more there were: an
    ORM's eager load can join a dozen tables, and the evidence goes into log records."""
    listed = list(parts)
    shown = "; ".join(listed[:MAX_CLAUSES])
    rest = len(listed) - MAX_CLAUSES
    return f"{shown}; and {rest} more" if rest > 0 else shown


def _join_group(source: exp.Expression) -> tuple[exp.Expression, list[exp.Join]] | None:
    """A parenthesised join group, ``(b JOIN c ON ...)`` (sqlglot: an alias-less subquery around a table
    that carries the joins), as its first table and its joins; None for any other FROM item."""
    node = source
    while isinstance(node, (exp.Subquery, exp.Paren)) and not node.alias:
        node = node.this
    if isinstance(node, exp.Table) and node.args.get("joins"):
        return node, list(node.args["joins"])
    return None


def _source_count(source: exp.Expression) -> int:
    """How many instances ``_add_sources`` adds for a FROM item (SEMI/ANTI joins add none)."""
    group = _join_group(source)
    if group is None:
        return 1
    _, joins = group
    semi = ("SEMI", "ANTI")
    return 1 + sum(_source_count(j.this) for j in joins if (j.kind or "").upper() not in semi)


def _too_big(node: exp.Expression) -> bool:
    for count, _ in enumerate(node.walk(), start=1):
        if count > MAX_NODES:
            return True
    return False


def _conjuncts(node: exp.Expression) -> Iterator[exp.Expression]:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        yield from _conjuncts(node.this)
        yield from _conjuncts(node.expression)
    else:
        yield node


def _outer_scope(node: exp.Expression) -> Iterator[exp.Expr]:
    """Nodes of ``node`` outside window functions and subqueries."""
    yield from node.walk(prune=lambda n: isinstance(n, (exp.Window, exp.Subquery, exp.Select, exp.Exists)))


def _select_list(select: exp.Select) -> tuple[set[str] | bool, list[exp.Column], str]:
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
        for node in _outer_scope(body):
            if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star) and not _is_parameter(node):
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


def _grouping(select: exp.Select) -> str:
    if select.args.get("group") is not None:
        return "grouped query: each row is its own group"
    for item in select.expressions:
        for node in _outer_scope(item):
            if isinstance(node, exp.AggFunc) or (
                isinstance(node, exp.Anonymous) and str(node.name).lower() in _ANONYMOUS_AGGREGATES
            ):
                return "aggregate query: one row per group"
    return ""


def _is_parameter(column: exp.Column) -> bool:
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


def _not_modelled(node: exp.Expression) -> str:
    """Why the analysis cannot treat ``node`` as a deterministic function of the columns it reads
    (the same inputs always give the same value), or "" when it can."""
    for child in node.walk():
        if isinstance(child, (exp.Subquery, exp.Select, exp.Exists, exp.Star, exp.Window)):
            return "a subquery or window"
        if isinstance(child, exp.Anonymous):
            name = str(child.name).lower()
            if name not in _DETERMINISTIC_BUILTINS:
                return f"function {name}() may be a user function or non-deterministic"
        elif isinstance(child, _NON_DETERMINISTIC):
            return f"{child.sql('sqlite')} is not deterministic"
        elif isinstance(child, exp.Literal) and child.is_string and child.this.strip().lower() == "now":
            return "'now' is not deterministic"
    return ""


def _derived_keys(
    body: exp.Expression, schema: SchemaFacts, ctes: dict[str, exp.Expression]
) -> tuple[frozenset[str] | None, tuple[frozenset[str], ...], str]:
    """Output columns and keys of a derived table or CTE body, or why it is opaque."""
    while isinstance(body, exp.Subquery):
        body = body.this
    if isinstance(body, exp.Union) and body.args.get("distinct"):
        names = _output_names(cast(Sequence[exp.Expression], body.selects))
        return (frozenset(names), (frozenset(names),), "") if names else (None, (), "has unnamed columns")
    if not isinstance(body, exp.Select):
        return None, (), "is not a plain SELECT"
    names = _output_names(body.expressions)
    if names is None:
        return None, (), "selects * (columns unknown)"
    outputs = frozenset(names)
    if body.args.get("limit") is not None and _is_one(body.args["limit"]):
        return outputs, (frozenset(),), ""
    if body.args.get("distinct") is not None and body.args["distinct"].args.get("on") is None:
        return outputs, (outputs,), ""
    group = body.args.get("group")
    if group is not None:
        by_name = {_plain(e): n for e, n in zip(body.expressions, names) if _plain(e)}
        key = [by_name.get(_plain(g)) for g in group.expressions]
        if key and all(key):
            return outputs, (frozenset(k for k in key if k),), ""
        return outputs, (), "groups by something it does not output"
    if _grouping(body):
        return outputs, (frozenset(),), ""  # an aggregate without GROUP BY: at most one row
    from_ = body.args.get("from_") or body.args.get("from")
    if from_ is None or body.args.get("joins"):
        return outputs, (), "joins tables (not seen through)"
    table = from_.this
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier) or fold(table.name) in ctes:
        return outputs, (), "reads a nested derived table (not seen through)"
    facts = schema.table(table.name, table.db or None)
    if facts is None or facts.is_view:
        return outputs, (), f"reads {table.name}, whose keys are unknown"
    renamed: dict[str, str] = {}
    for item, name in zip(body.expressions, names):
        inner = item.unalias()
        if isinstance(inner, exp.Column) and not isinstance(inner.this, exp.Star):
            renamed.setdefault(fold(inner.name), name)
    keys = tuple(frozenset(renamed[c] for c in key) for key in facts.identity_keys if key <= renamed.keys())
    return outputs, keys, "does not output a key of " + table.name if not keys else ""


def _output_names(items: Sequence[exp.Expression]) -> list[str] | None:
    names = []
    for item in items:
        if isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star)):
            return None
        names.append(fold(item.alias_or_name))
    return names


def _plain(node: exp.Expression) -> str:
    body = node.unalias()
    return fold(body.name) if isinstance(body, exp.Column) else ""


def _is_one(limit: exp.Expression) -> bool:
    value = limit.expression if isinstance(limit, exp.Limit) else limit
    return isinstance(value, exp.Literal) and value.this == "1"
