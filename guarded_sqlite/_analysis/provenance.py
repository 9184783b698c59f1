"""Duplicate provenance: decide from declared keys whether a query's duplicate rows can be join repeats.

A pure analysis of the outermost SELECT (a sqlglot tree plus ``SchemaFacts``; no database access;
``guarded_sqlite._analysis.joins`` reads the tree, this module judges it). It answers *why* a result may hold
duplicate rows, so that a policy can tell a join that multiplies rows (usually a bug in generated SQL)
from values that legitimately repeat (one column of one table, N:1 lookups, computed values).

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
``value_repeats`` (``guarded_sqlite._rules.patching``): it merges equal values of distinct rows, as written.

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

Failing closed. Keyless base tables fan out (a link table without a key is the commonest source of
join repeats: the catalog says so). Views, unknown names, opaque derived tables, table functions and
tables whose keys could not be read are not guessed at, nor are conditions the analysis does not model
(an equality with a user or non-deterministic function, a ``COLLATE``): a fan-out is established only
if it holds with every such instance taken as determined; otherwise the verdict is ``unknown``.
``col = f(columns)`` with ``f`` deterministic lets those columns determine ``col``; ``IS`` works as
``=`` except that it proves nothing non-NULL. A LEFT JOIN's ON equalities let the left side determine
the right side; the reverse holds only from a matched (real) row of the right side, so the reference
closures read it backwards from a reference instance (the rows where it is NULL-extended are copies of
none of its rows) and the identity closure never (see ``Analysis._closure``).
A parenthesised join group, ``a LEFT JOIN (b JOIN c ON c.id = b.c_id) ON b.a_id = a.id`` (how ORMs
eager-load across a many-to-many), is read table by table: inside it, equalities work both ways; from
outside a LEFT-joined group, into it (and backwards only as above).
Derived tables and CTEs are seen through when simple: a DISTINCT or grouped body is keyed by its output
(or group) columns, an aggregate without GROUP BY has at most one row, a single-table body keeps the
keys it projects, and ``ROW_NUMBER() OVER (PARTITION BY p ...) AS n`` or ``DISTINCT ON (p)`` key any
body by those output columns (``sqltree.numbering_keys``); any other derived table is opaque.

>>> from guarded_sqlite._analysis.schema import SchemaFacts, TableFacts
>>> shop = SchemaFacts((TableFacts("customers", columns=("id", "name"), keys=(frozenset({"id"}),)),
...                     TableFacts("orders", columns=("id", "customer_id"), keys=(frozenset({"id"}),))))
>>> p = analyse("SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id", shop)
>>> p.verdict, p.fanning
('amplified', ('o (orders)',))
>>> analyse("SELECT c.name FROM orders o JOIN customers c ON o.customer_id = c.id", shop).verdict
'value_repeats'
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from sqlglot import exp

from .joins import Closure, Col, JoinGraph, Unanalysable
from .schema import SchemaFacts, fold
from .sqltree import ROWID_NAMES, conjuncts, grouping, parse_single, rerun_hazard, select_list, too_big
from .trees import keep, text_of

__all__ = [
    "MAX_NODES",
    "MAX_SQL_CHARS",
    "Analysis",
    "Provenance",
    "Reference",
    "Verdict",
    "analyse",
    "analyse_tree",
    "named_numbers",
    "numbers_back",
    "parse_statement",
    "table_names",
]

Verdict = Literal["amplified", "identified", "value_repeats", "unknown"]
Reference = Literal["leading", "projected", "either", "both"]

MAX_SQL_CHARS = 50_000
"""Longer statements are not parsed: the verdict is ``unknown``."""

MAX_NODES = 5_000
"""Trees with more nodes are not analysed: the verdict is ``unknown``."""


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

    identities: tuple[str, ...] = ()
    """For an ``amplified`` verdict: SQL expressions (qualified, quoted) that together identify one row of
    each projected instance (a NOT NULL key, else the engine's row id), which the join-copy check appends
    to the select list. Empty for the other verdicts, or when some projected instance has none
    (``identity_gap`` says why)."""

    identity_gap: str = ""
    """Why ``identities`` is empty for an ``amplified`` verdict: a projected view, table function or
    derived table without a key, or a statement whose re-execution could call a user or
    non-deterministic function again."""

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


def parse_statement(sql: str, dialect: str = "sqlite", numbered: bool = False) -> exp.Expression | Provenance:
    """The syntax tree of a single statement, or the ``unknown`` verdict saying why there is none. A table
    written in parentheses (``FROM (customers c), orders o``) is read as the table itself, and a
    parenthesised join group first in FROM as its joins. ``numbered``:
    SQLite's numbered parameters (``?1``, which sqlglot cannot parse) are read as the named parameters
    ``:__gs_p1`` (``NUMBERED_NAME``), which the caller writes back as ``?1`` in the SQL it generates (c29)."""
    if len(sql) > MAX_SQL_CHARS:
        return Provenance("unknown", f"statement longer than {MAX_SQL_CHARS} characters: not analysed")
    if numbered and dialect == "sqlite" and "?" in sql:
        sql = named_numbers(sql)
    parsed = parse_single(sql, dialect)
    return Provenance("unknown", parsed) if isinstance(parsed, str) else parsed


NUMBERED_NAME = "__gs_p"
"""The name ``parse_statement`` gives a numbered parameter: ``?3`` is read as ``:__gs_p3``."""

# A string, a quoted name or a comment (kept as they are), or a parameter: group 1 a numbered one's
# number, group 2 a bare ``?``.
_PARAMETER_TEXT = r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|`[^`]*`|\[[^\]]*\]|--[^\n]*|/\*.*?\*/|\?(\d+)|(\?)"""


def named_numbers(sql: str) -> str:
    """``sql`` with each numbered parameter ``?N`` written ``:__gs_pN``; unchanged where a bare ``?`` is
    mixed with them (SQLite numbers it after the largest so far, which the names would not say).

    >>> named_numbers("SELECT '?1', x FROM t WHERE a > ?1 LIMIT ?2")
    "SELECT '?1', x FROM t WHERE a > :__gs_p1 LIMIT :__gs_p2"
    >>> named_numbers("SELECT x FROM t WHERE a > ?1 LIMIT ?")
    'SELECT x FROM t WHERE a > ?1 LIMIT ?'
    """
    parts: list[str] = []
    at = 0
    for match in re.finditer(_PARAMETER_TEXT, sql, re.DOTALL):
        if match.group(2) is not None:
            return sql
        if match.group(1) is not None:
            parts += (sql[at : match.start()], f":{NUMBERED_NAME}{match.group(1)}")
            at = match.end()
    return "".join(parts) + sql[at:] if parts else sql


def numbers_back(sql: str) -> str:
    """``named_numbers`` undone in SQL the analysis generated: ``:__gs_p3`` is ``?3`` again."""
    return re.sub(rf":{NUMBERED_NAME}(\d+)\b", r"?\1", sql) if NUMBERED_NAME in sql else sql


def table_names(tree: exp.Expression) -> tuple[tuple[str | None, str], ...]:
    """Every table the statement could read, as (folded schema qualifier or None, folded name), sorted:
    what ``analyse_tree`` may look up in the schema facts. A name some CTE defines is left out (the
    analysis reads the CTE; a table of that name elsewhere in the statement is then unknown to it)."""
    ctes = {fold(cte.alias_or_name) for cte in tree.find_all(exp.CTE)}
    names = {
        (fold(node.db) if node.db else None, fold(node.name))
        for node in tree.find_all(exp.Table)
        if isinstance(node.this, exp.Identifier) and node.name and (node.db or fold(node.name) not in ctes)
    }
    return tuple(sorted(names, key=lambda n: (n[0] or "", n[1])))


def analyse_tree(
    tree: exp.Expression, schema: SchemaFacts, dialect: str = "sqlite", reference: Reference = "both"
) -> Provenance:
    """``analyse`` for a tree the caller already parsed (it is not modified). Never raises."""
    try:
        return Analysis(tree, schema, dialect).run(reference)
    except Unanalysable as why:
        return Provenance("unknown", str(why))
    except Exception as error:  # a tree shape we did not foresee must never break the caller
        return Provenance("unknown", f"analysis failed: {type(error).__name__}: {error}")


class Analysis(JoinGraph):
    """The verdict over a ``JoinGraph``: closures of what the reference tables determine, and evidence."""

    # ------------------------------------------------------------------ driver

    def run(self, reference: Reference) -> Provenance:
        select = self.root
        if isinstance(select, exp.SetOperation):
            return Provenance("unknown", f"compound query ({type(select).__name__.upper()}): not analysed")
        if not isinstance(select, exp.Select):
            return Provenance("unknown", f"not a SELECT ({type(select).__name__})")
        if too_big(select, MAX_NODES):
            return Provenance("unknown", f"query has more than {MAX_NODES} syntax nodes: not analysed")
        with_ = select.args.get("with_") or select.args.get("with")
        if with_ is not None:
            for cte in with_.expressions:
                self.ctes[fold(cte.alias_or_name)] = cte.this

        grouped = grouping(select)
        if grouped:
            return Provenance("value_repeats", grouped)
        star, read_columns, computed_only = select_list(select)
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
            for conjunct in conjuncts(where.this):
                self._constraint(conjunct, inner=None)

        projected = self._projected(star, read_columns)
        bare = self._bare_columns(select, star)
        return self._verdict(reference, projected, bare)

    # ------------------------------------------------------------------ closure and verdict

    def _closure(self, start: set[int], seeds: set[Col], identity: bool = False) -> Closure:
        """What ``start`` and ``seeds`` determine. ``identity``: whether equal output rows are one row
        combination, where a LEFT-joined instance's key does not count unless its NULL-extended rows
        are filtered out (two unmatched rows share its NULL key).

        Without ``identity`` a LEFT JOIN's ON equalities also work backwards (``reverse_edges``), from
        an instance whose row is a real one: one of ``start`` (a reference row is a row of its table;
        the rows where a LEFT JOIN NULL-extended it are copies of none of its rows), one whose
        NULL-extended rows are filtered out, or one reached backwards from such a row (its strict ON
        equality held). A matched right row then fixes the left row exactly as an inner join's would.
        Never from an instance determined only forwards: that may be the NULL row, which matches
        every row of the rest (``a CROSS JOIN b LEFT JOIN o ON o.a_id = a.id AND o.b_id = b.id`` does
        not make ``b`` a lookup of ``a``)."""
        result = Closure(set(start), set(seeds) | self.pins)
        non_null = set(self.non_null)
        real = set() if identity else set(start) | self.null_rejected
        backwards = () if identity else self.reverse_edges
        changed = True
        while changed:
            changed = False
            for a, b in self.edges:
                if (a[0] in result.determined or a in result.known) and b not in result.known:
                    result.known.add(b)
                    changed = True
            for a, b in backwards:
                if a[0] in real and (a[0] in result.determined or a in result.known) and b not in result.known:
                    result.known.add(b)
                    real.add(b[0])
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

    def _fanning(self, start: set[int]) -> tuple[list[int], Closure]:
        closure = self._closure(start, set())
        return [k for k in range(len(self.instances)) if k not in closure.determined], closure

    def _verdict(self, reference: Reference, projected: set[int], bare: set[Col]) -> Provenance:
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
        common: dict[str, Any] = {
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
            identities, gap = self._identities(projected)
            return Provenance(
                "amplified",
                f"{reasons}; projection has no key of {missing}",
                fanned,
                **common,
                identities=identities,
                identity_gap=gap,
            )
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
            # About the keys, not the rows: rows that repeat anyway mean the data breaks a declared key
            # (``patching`` then reports the contradiction), and the evidence must not deny what they show.
            return Provenance(
                "identified", f"the projection identifies {held}: the keys allow no repeated row", **common
            )
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

    def _identities(self, projected: set[int]) -> tuple[tuple[str, ...], str]:
        """Expressions that identify one row of each projected instance, or why there are none (see
        ``Provenance.identities``)."""
        hazard = rerun_hazard(self.root)
        if hazard:
            return (), hazard
        expressions: list[str] = []
        for k in sorted(projected):
            instance = self.instances[k]
            names = self._identity_columns(k)
            if names is None:
                why = instance.opaque_reason or f"{instance.label} has no NOT NULL key and no row id"
                return (), f"no row identity for {instance.label}: {why}"
            expressions.extend(
                text_of(keep(exp.column(name, table=instance.display, quoted=True)), self.dialect) for name in names
            )
        if not expressions:
            return (), "the projected tables have at most one row each: nothing to tell their rows apart by"
        return tuple(expressions), ""

    def _identity_columns(self, k: int) -> tuple[str, ...] | None:
        """The columns (as spelled for the query) that identify one row of instance ``k``: a key whose
        columns cannot be NULL (SQLite's rowid is one), else the engine's own row id (DuckDB ``rowid``
        unless a column takes that name; PostgreSQL ``tableoid`` with ``ctid``, unique across partitions
        and inheritance children); a derived table's key. None when it has none, and on ClickHouse for a
        LEFT-joined table, whose unmatched rows carry the key's default value (``join_use_nulls = 0``,
        the default), which a real row may hold too."""
        instance = self.instances[k]
        if instance.kind == "derived":
            if not instance.keys or fold(instance.display) != instance.alias or instance.display == "subquery":
                return None
            return tuple(sorted(instance.keys[0]))
        if instance.kind != "table" or instance.opaque_reason:
            return None
        if self.dialect == "clickhouse" and instance.left_joined:
            return None  # unmatched rows get the columns' defaults (join_use_nulls = 0): a real row's key
        identities = [key for key in instance.keys if key <= instance.not_null]
        # A declared key reads best in final_sql; of SQLite's row id aliases, the one users know.
        key = next((key for key in identities if not key & ROWID_NAMES), None) or next(
            (frozenset({alias}) for alias in ("rowid", "oid", "_rowid_") if frozenset({alias}) in identities), None
        )
        if key is not None:
            return tuple(instance.original.get(c, c) for c in sorted(key))
        if self.dialect == "duckdb" and "rowid" not in (instance.columns or ()):
            return ("rowid",)
        if self.dialect == "postgres":
            return ("tableoid", "ctid")
        return None

    def _known(self, k: int) -> bool:
        """Whether instance ``k``'s keys are known (a base table, or a derived table seen through)."""
        instance = self.instances[k]
        return not instance.opaque_reason or bool(instance.keys)

    def _lookups(self, closure: Closure, start: set[int]) -> str:
        parts = [
            f"{self.instances[k].label} is an N:1 lookup ({self._key_cols(k, closure)} is a key)"
            if closure.keys_used.get(k)
            else f"{self.instances[k].label} has at most one row"
            for k in range(len(self.instances))
            if k not in start
        ]
        return _clauses(parts) or "the projected tables are the only ones"

    def _key_text(self, k: int, closure: Closure) -> str:
        """``label (by key a.x)``, the key the closure used to determine instance ``k``."""
        key = closure.keys_used.get(k)
        label = self.instances[k].label
        if key is None:
            return label
        return f"{label} (by key {self._key_cols(k, closure)})" if key else f"{label} (at most one row)"

    def _key_cols(self, k: int, closure: Closure) -> str:
        instance = self.instances[k]
        key = closure.keys_used.get(k, frozenset())
        return ", ".join(f"{instance.display}.{instance.original.get(c, c)}" for c in sorted(key)) or "one row"

    def _why_fans(self, k: int, closure: Closure, start: set[int]) -> str:
        instance = self.instances[k]
        ref = ", ".join(self.instances[r].label for r in sorted(start))
        head = f"{instance.label} fans out {ref}"
        if not any(key and not key & ROWID_NAMES for key in instance.keys):  # nothing declared besides the rowid
            return f"{head} ({instance.label} has no key)"
        known = closure.known

        def given(c: Col) -> bool:
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
