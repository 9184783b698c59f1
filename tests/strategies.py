"""Hypothesis strategies for the property tests: small tables, generated SQL, thresholds and policies.

``databases()`` builds one to three small tables ``t0..t2 (k, a, b)`` filled with INTEGER/TEXT/REAL/
NULL/BLOB values (with many duplicates). ``queries()`` generates SELECT statements over them
(projections, 2- and 3-way joins on equal or always-true conditions, WHERE filters, ORDER BY,
DISTINCT/ALL, LIMIT/OFFSET, GROUP BY with aggregates, window functions, UNION ALL and other compounds,
CTEs, subqueries in FROM, ``?`` and ``:name`` parameters (and now and then ``?NNN``, ``$name``,
``@name``), comments and odd whitespace) and records what it knows of each statement's shape.

``explosion_cases()`` and ``removal_cases()`` build data and statements on which P1 (DISTINCT
injection) or P2 (DISTINCT removal) must fire, by construction: ``Query.expect_rule`` says which.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from guarded_sqlite.policy import GuardPolicy

# --------------------------------------------------------------------------------------------------
# Values, tables and thresholds
# --------------------------------------------------------------------------------------------------

_TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=3)

SCALARS = st.one_of(
    st.none(),
    st.integers(-2, 3),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from(["a", "b", "A", "", "select", "x'y", "DISTINCT ?", "1"]),
    _TEXT,
    st.sampled_from([0.5, -1.5, 1.0, 2.0, 0.0, -0.0]),
    # NaN is excluded: SQLite stores it as NULL, and NaN != NaN would break every row comparison.
    st.floats(allow_nan=False),
    st.sampled_from([b"", b"a", b"\x00\xff"]),
    st.binary(max_size=3),
)
KEYS = st.one_of(st.none(), st.integers(0, 3), st.sampled_from([1.0, "1"]))
# NOCASE makes SQLite's DISTINCT merge rows Python keeps apart ('a' vs 'A'): the patches must notice.
DECLARED_TYPES = st.sampled_from(["", "TEXT", "REAL", "INTEGER", "BLOB", "NUMERIC", "ANY", "TEXT COLLATE NOCASE"])


@dataclass(frozen=True)
class Table:
    name: str
    types: tuple[str, str, str]
    rows: tuple[tuple[Any, Any, Any], ...]


@st.composite
def databases(draw: Any, min_tables: int = 1, max_rows: int = 10, max_pool: int = 8) -> tuple[Table, ...]:
    """One to three tables ``t0..t2 (k, a, b)``; rows are drawn from a small pool, so duplicates abound."""
    tables = []
    for i in range(draw(st.integers(min_tables, 3))):
        types = (draw(st.sampled_from(["INTEGER", ""])), draw(DECLARED_TYPES), draw(DECLARED_TYPES))
        pool = draw(st.lists(st.tuples(KEYS, SCALARS, SCALARS), min_size=1, max_size=max_pool))
        # The pool itself (often all-distinct rows: P2's territory), a resample (duplicates), or empty.
        layout = draw(st.sampled_from(["pool"] * 5 + ["resample"] * 6 + ["empty"]))
        if layout == "pool":
            rows = pool
        elif layout == "resample":
            rows = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=max_rows))
        else:
            rows = []
        tables.append(Table(f"t{i}", types, tuple(rows)))
    return tuple(tables)


def _fraction_taus(low: int, high_inclusive: bool) -> st.SearchStrategy[float]:
    """k/d for small d, and the floats one ulp either side: where float rounding bites."""
    fractions = st.integers(1, 60).flatmap(
        lambda d: st.integers(low, d if high_inclusive else d - 1).map(lambda k: k / d)
    )
    nudged = st.tuples(fractions, st.sampled_from([-1.0, 0.0, 2.0])).map(lambda p: math.nextafter(*p))
    return st.one_of(fractions, nudged)


def _in_range(lo_open: bool, hi_open: bool) -> Any:
    def ok(tau: float) -> bool:
        return (tau > 0 if lo_open else tau >= 0) and (tau < 1 if hi_open else tau <= 1)

    return ok


TAU_INJECT = st.one_of(
    st.sampled_from([0.8, 0.5, 0.2, 1.0]),
    st.floats(min_value=0.0, max_value=1.0, exclude_min=True),
    _fraction_taus(1, True),
).filter(_in_range(lo_open=True, hi_open=False))
TAU_REMOVE = st.one_of(
    st.sampled_from([0.1, 0.0, 0.3, 0.9]),
    st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
    _fraction_taus(0, False),
).filter(_in_range(lo_open=False, hi_open=True))

PATCH_POLICIES = st.builds(
    GuardPolicy,
    mode=st.just("patch"),
    tau_inject=TAU_INJECT,
    # Vanishingly small tau_remove values are left to test_guard_policy_accepts_every_valid_tau, which
    # runs GuardPolicy() under a time limit: a regression there (it once hung or raised OverflowError)
    # then fails one test instead of hanging data generation for the whole file.
    tau_remove=TAU_REMOVE.filter(lambda t: t == 0 or t >= 1e-6),
    # A small row_cap sends large results (and large re-executions) down the unprobed streaming path.
    row_cap=st.sampled_from([1_000_000, 1_000_000, 1, 4, 12]),
    # "off" is the paper preset's rule: the generated schemas' DISTINCT queries are value repeats or hide
    # a keyless join, where the key-based presets keep the DISTINCT, so P2's mechanics need "off" too.
    provenance=st.sampled_from(["keys", "off"]),
)
# The presets at their default thresholds half of the time: their operating points deserve a share.
PATCH_SPECS = st.one_of(st.sampled_from(["patch", "paper"]), PATCH_POLICIES)


# --------------------------------------------------------------------------------------------------
# Query generation
# --------------------------------------------------------------------------------------------------

_MARK = re.compile("\x00([0-9]+)\x00")
_NO_VALUE = object()
# Mostly small integers, which the generated filters compare with the k column (0-3 or NULL).
PARAM_VALUES = st.one_of(st.integers(-1, 3), st.integers(0, 2), SCALARS)


@dataclass
class Query:
    """A generated statement, what the caller passes, and what the generator knows of its shape."""

    sql: str  # the full statement, as executed
    body: str  # ``sql`` without the trailing semicolon/comment, safe to wrap in ``( ... )``
    params: Any  # None (no parameters passed), a tuple, or a dict
    comments: list[str]
    placeholders: list[str]
    compound: bool = False
    outer_quantifier: str = ""  # "", "DISTINCT" or "ALL" on the outermost SELECT
    outer_limit: bool = False
    outer_group: bool = False
    outer_aggregate: bool = False
    outer_window: bool = False
    outer_order: bool = False
    expect_rule: str | None = None  # "P1"/"P2": built so that this rule must fire where the policy allows it
    plain_body: str | None = None  # for "P2": ``body`` without its outermost DISTINCT, written by the generator

    def run(self, con: Any) -> Any:
        return con.execute(self.sql) if self.params is None else con.execute(self.sql, self.params)

    def run_plain(self, con: Any) -> Any:
        """Execute ``plain_body`` with the same parameters."""
        assert self.plain_body is not None
        text = self.plain_body
        return con.execute(text) if self.params is None else con.execute(text, self.params)


@dataclass
class _Shape:
    quantifier: str = ""
    limit: bool = False
    group: bool = False
    aggregate: bool = False
    window: bool = False
    order: bool = False


@dataclass
class _Gen:
    draw: Any
    tables: list[str]
    upper: bool
    messy: bool
    values: list[Any] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)

    def kw(self, words: str) -> str:
        return words if self.upper else words.lower()

    def sp(self) -> str:
        """A separator between tokens: usually one space; with a messy layout, whitespace or comments."""
        if not self.messy:
            return " "
        choice = self.draw(st.sampled_from([" ", " ", " ", "\n", "  ", "\t", "block", "line"]))
        if choice == "block":
            text = f"/* c{len(self.comments)} SELECT DISTINCT ? :x */"
            self.comments.append(text)
            return f" {text} "
        if choice == "line":
            text = f"-- c{len(self.comments)} select distinct ? 'x"
            self.comments.append(text)
            return f" {text}\n"
        return choice

    def param(self, value: Any = _NO_VALUE) -> str:
        if value is _NO_VALUE:
            value = self.draw(PARAM_VALUES)
        self.values.append(value)
        return f"\x00{len(self.values) - 1}\x00"

    def pick(self, options: Any) -> Any:
        return self.draw(st.sampled_from(options))

    def chance(self, one_in: int) -> bool:
        """True about once in ``one_in`` draws. (``integers(0, n) == 0`` would fire far more often:
        hypothesis favours small and boundary values, so optional clauses would crowd every query.)"""
        return self.pick([False] * (one_in - 1) + [True])

    # -- expressions ------------------------------------------------------------------------------

    def column(self, aliases: list[str]) -> str:
        return f"{self.pick(aliases)}.{self.pick(['k', 'a', 'b'])}"

    def scalar_expr(self, aliases: list[str], shape: _Shape) -> str:
        x = self.pick(aliases)
        kind = self.pick(["col", "col", "col", "col", "plus", "typeof", "coalesce", "lit", "param", "window", "subq"])
        if kind == "col":
            return self.column(aliases)
        if kind == "plus":
            return f"{x}.k + 1"
        if kind == "typeof":
            return f"typeof({x}.a)"
        if kind == "coalesce":
            return f"coalesce({x}.b, 'z')"
        if kind == "lit":
            return self.pick(["'lit'", "1", "NULL", "x'00'", "'SELECT'"])
        if kind == "param":
            return self.param()
        if kind == "window":
            shape.window = True
            return self.pick(["count(*) OVER ()", f"max({x}.k) OVER (PARTITION BY {x}.a)", f"sum({x}.k) OVER ()"])
        t = self.pick(self.tables)
        # An aggregate inside a scalar subquery does not make the outer query an aggregate query.
        return f"({self.kw('SELECT')} count(*) {self.kw('FROM')} {t} AS s {self.kw('WHERE')} s.k = {x}.k)"

    def aggregate_expr(self, aliases: list[str]) -> str:
        x = self.pick(aliases)
        return self.pick(
            [
                "count(*)",
                f"sum({x}.k)",
                f"max({x}.a)",
                f"min({x}.b)",
                f"group_concat({x}.k)",
                f"total({x}.k)",
                f"count(DISTINCT {x}.a)",
                f"avg({x}.k)",
                f"json_group_array({x}.k)",
                f"coalesce(max({x}.k), 0)",
            ]
        )

    def predicate(self, aliases: list[str]) -> str:
        x = self.pick(aliases)
        kind = self.pick(["notnull", "gt", "eq", "ne", "in", "exists", "between", "true", "like"])
        if kind == "notnull":
            return f"{self.column(aliases)} IS NOT NULL"
        if kind == "gt":
            return f"{x}.k > {self.param()}"
        if kind == "eq":
            return f"{x}.k = {self.param()}"
        if kind == "ne":
            return f"{x}.a <> 'select'"
        if kind == "in":
            return f"{x}.k IN ({self.kw('SELECT')} k {self.kw('FROM')} {self.pick(self.tables)})"
        if kind == "exists":
            t = self.pick(self.tables)
            return f"EXISTS ({self.kw('SELECT')} 1 {self.kw('FROM')} {t} AS e {self.kw('WHERE')} e.k = {x}.k)"
        if kind == "between":
            return f"{x}.k BETWEEN {self.param()} AND {self.param()}"
        if kind == "like":
            return f"{x}.a LIKE 'a%'"
        return "1"

    def limit(self) -> str:
        kind = self.pick(["n", "param", "offset"])
        n = self.pick([3, 1, 2, 4, 5, 6, 8, 10, 0])  # LIMIT 0 empties the result: keep it rare
        if kind == "n":
            return f"{self.kw('LIMIT')} {n}"
        if kind == "param":
            return f"{self.kw('LIMIT')} {self.param(n)}"
        return f"{self.kw('LIMIT')} {n} {self.kw('OFFSET')} {self.draw(st.integers(0, 3))}"

    # -- FROM ---------------------------------------------------------------------------------------

    def source(self, alias: str, ctes: list[str]) -> str:
        kind = self.pick(["table", "table", "table", "derived", "derived_compound"] + (["cte"] * 2 if ctes else []))
        as_ = self.pick([" AS ", " "])
        if kind == "table":
            return f"{self.pick(self.tables)}{as_}{alias}"
        if kind == "cte":
            return f"{self.pick(ctes)}{as_}{alias}"
        S, F, W = self.kw("SELECT"), self.kw("FROM"), self.kw("WHERE")
        if kind == "derived":
            inner = f"{S} k, a, b {F} {self.pick(self.tables)}"
            if self.chance(3):
                inner += f" {W} k <> {self.param()}"
            if self.chance(3):
                # LIMIT inside a subquery does not exempt the outer query.
                inner += f" {self.kw('ORDER BY')} k {self.limit()}"
            return f"({inner}){as_}{alias}"
        left, right = self.pick(self.tables), self.pick(self.tables)
        return f"({S} k, a, b {F} {left} {self.kw('UNION ALL')} {S} k, a, b {F} {right}){as_}{alias}"

    def from_clause(self, aliases: list[str], ctes: list[str]) -> str:
        text = self.source(aliases[0], ctes)
        for i, alias in enumerate(aliases[1:], start=1):
            prev = self.pick(aliases[:i])
            src = self.source(alias, ctes)
            op = self.pick(["comma", "eq", "true", "cross", "left", "is", "using", "eq", "true"])
            j = self.kw("JOIN")
            text += {
                "comma": f",{self.sp()}{src}",
                "eq": f"{self.sp()}{j} {src} {self.kw('ON')} {prev}.k = {alias}.k",
                "true": f"{self.sp()}{j} {src} {self.kw('ON')} 1",
                "cross": f"{self.sp()}{self.kw('CROSS JOIN')} {src}",
                "left": f"{self.sp()}{self.kw('LEFT JOIN')} {src} {self.kw('ON')} {prev}.k = {alias}.k",
                "is": f"{self.sp()}{self.kw('INNER JOIN')} {src} {self.kw('ON')} {prev}.k IS {alias}.k",
                "using": f"{self.sp()}{j} {src} {self.kw('USING')} (k)",
            }[op]
        return text

    # -- SELECT -------------------------------------------------------------------------------------

    def simple_select(
        self,
        ctes: list[str],
        arity: int | None = None,
        tail: bool = True,
        distinct: bool = False,
        fanout: bool = False,
    ) -> tuple[str, _Shape]:
        """One SELECT core (with ORDER BY/LIMIT when ``tail``); ``arity`` forces a plain select list,
        ``distinct`` a plain or star SELECT DISTINCT (what P2 looks at), ``fanout`` a plain join with no
        DISTINCT, LIMIT or aggregate (what P1 looks at)."""
        shape = _Shape()
        aliases = [f"x{i}" for i in range(self.draw(st.integers(2 if fanout else 1, 3)))]
        if arity is not None:
            kind = "plain"
        elif distinct or fanout:
            kind = self.pick(["plain", "star"])
        else:
            kind = self.pick(["plain", "plain", "plain", "star", "agg", "group"])
        shape.quantifier = (
            self.pick(["", "", "", "DISTINCT", "DISTINCT", "ALL"]) if kind != "agg" else self.pick(["", "DISTINCT"])
        )
        if distinct or fanout:
            shape.quantifier = "DISTINCT" if distinct else ""
        ordinals = 1
        if kind == "plain":
            n = arity if arity is not None else self.draw(st.integers(1, 3))
            items = [self.scalar_expr(aliases, shape) for _ in range(n)]
            ordinals = n
        elif kind == "star":
            items = [self.pick(["*", f"{self.pick(aliases)}.*"])]
            ordinals = 3
        elif kind == "agg":
            shape.aggregate = True
            items = [self.aggregate_expr(aliases) for _ in range(self.draw(st.integers(1, 2)))]
        else:
            shape.group = True
            group_key = self.column(aliases)
            if self.chance(3):  # the key not selected: counts repeat, an "explosion" P1 must leave alone
                items = [self.aggregate_expr(aliases)]
                ordinals = 1
            else:
                items = [group_key, self.aggregate_expr(aliases)]
                ordinals = 2
        select = self.kw("SELECT") + self.sp()
        if shape.quantifier:
            select += self.kw(shape.quantifier) + self.sp()
        text = select + f",{self.sp()}".join(items)
        text += f"{self.sp()}{self.kw('FROM')} {self.from_clause(aliases, ctes)}"
        if self.chance(4):
            preds = [self.predicate(aliases) for _ in range(self.draw(st.integers(1, 2)))]
            text += f"{self.sp()}{self.kw('WHERE')} " + f" {self.kw('AND')} ".join(preds)
        if shape.group:
            text += f"{self.sp()}{self.kw('GROUP BY')} {group_key}"
            if self.chance(2):
                text += f" {self.kw('HAVING')} count(*) >= {self.param(self.draw(st.integers(0, 3)))}"
        if tail and self.chance(3):
            shape.order = True
            terms = []
            for _ in range(self.draw(st.integers(1, 2))):
                if kind in ("plain",) and self.chance(2):
                    term = self.column(aliases)
                else:
                    term = str(self.draw(st.integers(1, ordinals)))
                terms.append(term + self.pick(["", " DESC", " ASC", " NULLS LAST"]))
            text += f"{self.sp()}{self.kw('ORDER BY')} " + ", ".join(terms)
        if tail and not fanout and self.chance(5):
            shape.limit = True
            text += f"{self.sp()}{self.limit()}"
        return text, shape

    def compound_select(self, ctes: list[str]) -> tuple[str, _Shape]:
        arity = self.draw(st.integers(1, 3))
        text, _ = self.simple_select(ctes, arity=arity, tail=False)
        for _ in range(self.draw(st.integers(1, 2))):
            op = self.pick(["UNION ALL", "UNION ALL", "UNION", "INTERSECT", "EXCEPT"])
            core, _ = self.simple_select(ctes, arity=arity, tail=False)
            text += f"{self.sp()}{self.kw(op)}{self.sp()}{core}"
        shape = _Shape()
        if self.chance(2):
            shape.order = True
            text += f"{self.sp()}{self.kw('ORDER BY')} {self.draw(st.integers(1, arity))}"
        if self.chance(4):
            shape.limit = True
            text += f"{self.sp()}{self.limit()}"
        return text, shape

    def cte(self) -> str:
        """``WITH c0 AS (...)``; its DISTINCT, LIMIT or compound belong to the CTE, not the outer query."""
        S, F = self.kw("SELECT"), self.kw("FROM")
        distinct = self.kw("DISTINCT ") if self.chance(3) else ""
        body = f"{S} {distinct}k, a, b {F} {self.pick(self.tables)}"
        if self.chance(3):
            body += f" {self.kw('WHERE')} k IS NOT {self.param()}"
        ending = self.pick(["", "", "union", "limit"])
        if ending == "union":
            body += f" {self.kw('UNION ALL')} {S} k, a, b {F} {self.pick(self.tables)}"
        elif ending == "limit":
            body += f" {self.kw('ORDER BY')} k {self.limit()}"
        return f"{self.kw('WITH')} c0 {self.kw('AS')} ({body}){self.sp()}"


def _bind(draw: Any, g: _Gen, texts: list[str], styles: list[str]) -> tuple[list[str], Any, list[str]]:
    """Spell the parameter marks ``g`` left in ``texts`` in one of ``styles`` (the first text holds every mark,
    the others the same marks in the same order); returns (texts, parameters, placeholders)."""
    style = draw(st.sampled_from(styles))
    order = [int(m.group(1)) for m in _MARK.finditer(texts[0])]
    params: Any
    if style == "qmark":
        placeholders = ["?"] * len(order)
        params = tuple(g.values[i] for i in order)
    elif style == "numbered":
        placeholders = [f"?{n}" for n in range(1, len(order) + 1)]
        params = tuple(g.values[i] for i in order)
    else:
        prefix = {"named": ":", "dollar": "$", "at": "@"}[style]
        placeholders = [f"{prefix}p{i}" for i in order]
        params = {f"p{i}": g.values[i] for i in order}
    spelled = dict(zip(order, placeholders))
    texts = [_MARK.sub(lambda m: spelled[int(m.group(1))], text) for text in texts]
    if not order:
        params = draw(st.sampled_from([None, () if isinstance(params, tuple) else {}]))
    return texts, params, placeholders


@st.composite
def queries(draw: Any, tables: tuple[Table, ...], distinct: bool = False, fanout: bool = False) -> Query:
    """A SELECT statement over ``tables``: see the module docstring for the grammar it covers."""
    g = _Gen(draw, [t.name for t in tables], upper=draw(st.booleans()), messy=draw(st.booleans()))
    lead = draw(st.sampled_from(["", "", "", "/* lead SELECT */ ", "-- lead ?\n", "\n  "]))
    prefix = ""
    ctes: list[str] = []
    if g.chance(4):
        prefix = g.cte()
        ctes = ["c0"]
    shape_kind = "simple" if distinct or fanout else draw(st.sampled_from(["simple"] * 6 + ["compound", "wrapped"]))
    compound = False
    if shape_kind == "simple":
        text, shape = g.simple_select(ctes, distinct=distinct, fanout=fanout)
    elif shape_kind == "compound":
        text, shape = g.compound_select(ctes)
        compound = True
    else:
        # SELECT [DISTINCT] q.* FROM (<any query>) AS q: the outer query is plain whatever is inside.
        inner, _ = g.compound_select(ctes) if draw(st.booleans()) else g.simple_select(ctes)
        shape = _Shape(quantifier=g.pick(["", "", "DISTINCT"]))
        select = g.kw("SELECT") + " " + (g.kw(shape.quantifier) + " " if shape.quantifier else "")
        text = f"{select}q.*{g.sp()}{g.kw('FROM')} ({inner}) AS q"
    tail = draw(st.sampled_from(["", "", "", ";", " ;\n", "\n-- tail ?", "; -- tail"]))
    body = lead + prefix + text
    sql = body + tail

    comments = list(g.comments)
    for c in ("/* lead SELECT */", "-- lead ?", "-- tail ?"):
        if c in sql:
            comments.append(c)
    # ``?`` and ``:name`` mostly; SQLite's other spellings (``?NNN``, ``$name``, ``@name``) now and then.
    (sql, body), params, placeholders = _bind(
        draw, g, [sql, body], ["qmark", "named", "qmark", "named", "numbered", "dollar", "at"]
    )
    return Query(
        sql=sql,
        body=body,
        params=params,
        comments=comments,
        placeholders=placeholders,
        compound=compound,
        outer_quantifier=shape.quantifier,
        outer_limit=shape.limit,
        outer_group=shape.group,
        outer_aggregate=shape.aggregate,
        outer_window=shape.window,
        outer_order=shape.order,
    )


@st.composite
def cases(draw: Any, max_rows: int = 10) -> tuple[tuple[Table, ...], Query]:
    tables = draw(databases(max_rows=max_rows))
    return tables, draw(queries(tables))


@st.composite
def distinct_cases(draw: Any) -> tuple[tuple[Table, ...], Query]:
    """SELECT DISTINCT over somewhat larger tables: the queries P2 (DISTINCT removal) may act on."""
    tables = draw(databases(max_rows=14, max_pool=12))
    return tables, draw(queries(tables, distinct=True))


@st.composite
def fanout_cases(draw: Any) -> tuple[tuple[Table, ...], Query]:
    """Plain 2- and 3-way joins without DISTINCT, LIMIT or aggregates: the queries P1 may act on."""
    tables = draw(databases())
    return tables, draw(queries(tables, fanout=True))


# --------------------------------------------------------------------------------------------------
# Cases built for one rule: P1 or P2 must fire on them wherever the policy lets it
# --------------------------------------------------------------------------------------------------

# Values on which SQLite's DISTINCT and Python's equality agree, in columns without a collation that
# merges values: the guard's own checks then have no reason to refuse a patch.
PLAIN_SCALARS = st.one_of(
    st.none(),
    st.integers(-2, 3),
    st.sampled_from(["a", "b", "A", "", "select", "x'y", "DISTINCT ?", "1"]),
    st.sampled_from([0.5, -1.5, 2.0]),
    st.sampled_from([b"", b"a", b"\x00\xff"]),
)
PLAIN_TYPES = st.sampled_from(["", "TEXT", "REAL", "INTEGER", "BLOB", "NUMERIC", "ANY"])
_LEADS = ["", "", "/* lead SELECT */ ", "-- lead ?\n", "\n  "]
_TAILS = ["", "", ";", " ;\n", "; -- tail"]
# sqlglot does not parse ?NNN: P1 and P2 refuse such statements, so rule cases spell parameters otherwise.
_PARSEABLE_STYLES = ["qmark", "named", "dollar", "at"]


def _always_true(g: _Gen, alias: str) -> str:
    """A WHERE condition that holds on every row (so it keeps every copy)."""
    kind = g.pick(["one", "notnull", "is", "param"])
    if kind == "one":
        return "1"
    if kind == "notnull":
        return f"{alias}.rowid {g.kw('IS NOT NULL')}"
    if kind == "is":
        return f"{alias}.k {g.kw('IS')} {alias}.k"
    value = g.draw(PARAM_VALUES)
    return f"{g.param(value)} {g.kw('IS')} {g.param(value)}"


def _comments_in(sql: str, g: _Gen) -> list[str]:
    return list(g.comments) + [c for c in ("/* lead SELECT */", "-- lead ?", "-- tail") if c in sql]


@st.composite
def explosion_cases(draw: Any) -> tuple[tuple[Table, ...], Query]:
    """A join that repeats each row of t0 once per row of t1, which has 5 to 8 rows, selecting only t0's
    columns (and constants): every result row comes in at least 5 copies, so dup_ratio >= 1 - 1/5 = 0.8
    by construction, and nothing in the statement exempts it from P1."""
    base = draw(st.lists(st.tuples(KEYS, PLAIN_SCALARS, PLAIN_SCALARS), min_size=1, max_size=6))
    fan = draw(st.lists(st.tuples(KEYS, SCALARS, SCALARS), min_size=5, max_size=8))
    tables = (
        Table("t0", (draw(st.sampled_from(["INTEGER", ""])), draw(PLAIN_TYPES), draw(PLAIN_TYPES)), tuple(base)),
        Table("t1", (draw(st.sampled_from(["INTEGER", ""])), draw(DECLARED_TYPES), draw(DECLARED_TYPES)), tuple(fan)),
    )
    g = _Gen(draw, ["t0", "t1"], upper=draw(st.booleans()), messy=draw(st.booleans()))
    if g.chance(4):
        items = ["x0.*"]
    else:
        # At least one column of t0, so that the copies come from the join, not from constants alone.
        columns = ["x0.k", "x0.a", "x0.b", "typeof(x0.a)", "x0.k + 1", "coalesce(x0.b, 'z')"]
        choices = [*columns, "'lit'", "NULL", "?"]
        items = [g.pick(columns)] + [g.pick(choices) for _ in range(draw(st.integers(0, 2)))]
        items = [g.param() if item == "?" else item for item in draw(st.permutations(items))]
    join = g.pick(
        [
            f"{g.kw('JOIN')} t1 AS x1 {g.kw('ON')} 1",
            f"{g.kw('CROSS JOIN')} t1 AS x1",
            ", t1 AS x1",
            f"{g.kw('LEFT JOIN')} t1 AS x1 {g.kw('ON')} 1",
            f"{g.kw('JOIN')} t1 x1 {g.kw('ON')} x1.k {g.kw('IS')} x1.k",
        ]
    )
    text = f"{g.kw('SELECT')}{g.sp()}{f',{g.sp()}'.join(items)}{g.sp()}{g.kw('FROM')} t0 AS x0{g.sp()}{join}"
    if g.chance(3):
        text += f"{g.sp()}{g.kw('WHERE')} {_always_true(g, g.pick(['x0', 'x1']))}"
    order = g.chance(3)
    if order:
        text += f"{g.sp()}{g.kw('ORDER BY')} 1{g.pick(['', ' DESC'])}"
    body = draw(st.sampled_from(_LEADS)) + text
    sql = body + draw(st.sampled_from(_TAILS))
    comments = _comments_in(sql, g)
    (sql, body), params, placeholders = _bind(draw, g, [sql, body], _PARSEABLE_STYLES)
    return tables, Query(
        sql=sql,
        body=body,
        params=params,
        comments=comments,
        placeholders=placeholders,
        outer_order=order,
        expect_rule="P1",
    )


@st.composite
def removal_cases(draw: Any) -> tuple[tuple[Table, ...], Query]:
    """SELECT DISTINCT over u >= 9 distinct rows (the key k = 0..u-1 tells them apart, and every select
    list keeps k) plus 1 <= d <= u // 9 extra copies of some of them: without DISTINCT the result has
    u + d rows and dup_ratio d / (u + d) <= 1/10 by construction, which P2 commits on at tau_remove 0.1."""
    u = draw(st.integers(9, 24))
    d = draw(st.integers(1, u // 9))
    distinct_rows = [(i, draw(PLAIN_SCALARS), draw(PLAIN_SCALARS)) for i in range(u)]
    copies = [draw(st.sampled_from(distinct_rows)) for _ in range(d)]
    rows = draw(st.permutations(distinct_rows + copies))
    tables = (Table("t0", ("INTEGER", draw(PLAIN_TYPES), draw(PLAIN_TYPES)), tuple(rows)),)
    g = _Gen(draw, ["t0"], upper=draw(st.booleans()), messy=draw(st.booleans()))
    if g.chance(4):
        items = [g.pick(["*", "x0.*"])]
    else:
        extra = ["x0.a", "x0.b", "typeof(x0.b)", "'lit'", "?"]
        items = [g.pick(["x0.k", "k", "x0.k + 1"])] + [g.pick(extra) for _ in range(draw(st.integers(0, 2)))]
        items = [g.param() if item == "?" else item for item in draw(st.permutations(items))]
    rest = f"{f',{g.sp()}'.join(items)}{g.sp()}{g.kw('FROM')} t0 AS x0"
    if g.chance(3):
        rest += f"{g.sp()}{g.kw('WHERE')} {_always_true(g, 'x0')}"
    order = g.chance(3)
    if order:
        rest += f"{g.sp()}{g.kw('ORDER BY')} 1{g.pick(['', ' DESC'])}"
    lead = draw(st.sampled_from(_LEADS))
    select = g.kw("SELECT") + g.sp()
    body = f"{lead}{select}{g.kw('DISTINCT')}{g.sp()}{rest}"
    plain_body = f"{lead}{select}{rest}"
    sql = body + draw(st.sampled_from(_TAILS))
    comments = _comments_in(sql, g)
    (sql, body, plain_body), params, placeholders = _bind(draw, g, [sql, body, plain_body], _PARSEABLE_STYLES)
    return tables, Query(
        sql=sql,
        body=body,
        params=params,
        comments=comments,
        placeholders=placeholders,
        outer_quantifier="DISTINCT",
        outer_order=order,
        expect_rule="P2",
        plain_body=plain_body,
    )


# Patch-mode tests see the general grammar, P1's and P2's territory, and cases where each rule must fire.
PATCH_CASES = st.one_of(cases(), cases(), distinct_cases(), fanout_cases(), explosion_cases(), removal_cases())


def explicit_case(
    rows: dict[str, list[tuple[Any, Any, Any]]], sql: str, **facts: Any
) -> tuple[tuple[Table, ...], Query]:
    """A hand-written case for ``@example``: tables ``name (k INTEGER, a, b)`` and one statement."""
    tables = tuple(Table(name, ("INTEGER", "", ""), tuple(r)) for name, r in rows.items())
    return tables, Query(sql=sql, body=sql, params=None, comments=[], placeholders=[], **facts)


# P1 at the default thresholds: 2 x 6 rows joined on an always-true condition, 12 rows, 2 distinct.
P1_CASE = explicit_case(
    {"t0": [(1, "a", 1.5), (2, "b", 2.5)], "t1": [(k, "x", None) for k in range(6)]},
    "SELECT x0.a FROM t0 AS x0 JOIN t1 AS x1 ON 1",
    expect_rule="P1",
)
# P1 under the key-based presets: t0 holds two equal rows, which ``x0.*`` does not tell apart (no key, and a
# star does not read the rowid): removing the join copies serves both, SELECT DISTINCT would serve one.
P1_EQUAL_ROWS_CASE = explicit_case(
    {"t0": [(1, "a", 2), (1, "a", 2), (2, "b", 3)], "t1": [(k, "x", None) for k in range(5)]},
    "SELECT x0.* FROM t0 AS x0 JOIN t1 AS x1 ON 1",
    expect_rule="P1",
)
# P2 at the default thresholds: 10 distinct rows, 11 without DISTINCT (dup_ratio 1/11 <= 0.1).
P2_CASE = explicit_case(
    {"t0": [(k, "a", k) for k in range(10)] + [(0, "a", 0)]},
    "SELECT DISTINCT x0.k, x0.a FROM t0 AS x0",
    outer_quantifier="DISTINCT",
    expect_rule="P2",
    plain_body="SELECT x0.k, x0.a FROM t0 AS x0",
)


@st.composite
def large_cases(draw: Any) -> tuple[tuple[Table, ...], Query]:
    """A 3-way cross join of one 13-16 row table: 2197-4096 rows, past the proxy's early-stopping size."""
    n = draw(st.integers(13, 16))
    distinct_keys = draw(st.integers(1, n))
    rows = tuple((i % distinct_keys, draw(st.sampled_from(["a", "b", None])), i) for i in range(n))
    tables = (Table("t0", ("INTEGER", "", ""), rows),)
    cols = draw(st.sampled_from(["x0.k, x1.k, x2.k", "x0.k, x1.a", "x0.a", "x0.b, x1.b, x2.b", "x0.k"]))
    sql = f"SELECT {cols} FROM t0 AS x0, t0 AS x1, t0 AS x2"
    return tables, Query(sql=sql, body=sql, params=None, comments=[], placeholders=[])


def near(value: float) -> st.SearchStrategy[float]:
    """``value`` or a float one ulp either side of it: the thresholds where two float formulas can disagree."""
    return st.sampled_from([math.nextafter(value, -1.0), value, math.nextafter(value, 2.0)])


@st.composite
def row_lists(draw: Any) -> list[Any]:
    """Row lists up to 6000 long with a chosen number of distinct rows, in several layouts."""
    n = draw(st.integers(0, 6000))
    d = draw(st.integers(1, max(n, 1)))
    layout = draw(st.sampled_from(["cycle", "blocks", "random", "tail_unique"]))
    if layout == "cycle":
        return [(i % d, "x") for i in range(n)]
    if layout == "blocks":
        return [(i * d // max(n, 1),) for i in range(n)]
    if layout == "tail_unique":  # duplicates first, distinct rows last: the early stop must not lie
        dups = n - d + 1 if n else 0
        return [0] * dups + list(range(1, n - dups + 1))
    rng = draw(st.randoms(use_true_random=False))
    return [rng.randrange(d) for _ in range(n)]


TINY_TAUS = st.sampled_from([1e-30, 1e-100, 1e-300, 2e-308, 5e-324]) | st.floats(min_value=0.0, max_value=1e-25)


@st.composite
def write_statements(draw: Any, tables: tuple[Table, ...]) -> tuple[str, str, tuple[Any, ...]]:
    """(kind, sql, params): a write (many with RETURNING), a fanning-out SELECT between writes, or a commit."""
    names = [t.name for t in tables]
    target = draw(st.sampled_from(names))
    src = draw(st.sampled_from(names))
    returning = draw(st.sampled_from(["", "", " RETURNING *", " RETURNING 1", " RETURNING k", " RETURNING k, a, b"]))
    lead = draw(st.sampled_from(["", "", "/* w SELECT */ ", "-- w\n"]))
    kind = draw(
        st.sampled_from(
            [
                "values",
                "select",
                "select_join",
                "select_distinct",
                "cte",
                "update",
                "delete",
                "upsert",
                "replace",
                "read",
                "commit",
            ]
        )
    )
    if kind == "values":
        n = draw(st.integers(1, 3))
        values = tuple(v for _ in range(n) for v in (draw(KEYS), draw(SCALARS), draw(SCALARS)))
        return kind, f"{lead}INSERT INTO {target} (k, a, b) VALUES " + ", ".join(["(?, ?, ?)"] * n) + returning, values
    if kind == "select":
        return (
            kind,
            f"{lead}INSERT INTO {target} (k, a, b) SELECT k, a, b FROM {src} WHERE k IS NOT ?{returning}",
            (draw(KEYS),),
        )
    if kind == "select_join":  # fans out: RETURNING 1 gives an explosion
        select = f"SELECT x.k, x.a, y.b FROM {src} AS x JOIN {src} AS y ON 1 WHERE 1 LIMIT 30"
        sql = f"{lead}INSERT INTO {target} {select}{returning}"
        return kind, sql, ()
    if kind == "select_distinct":  # all-distinct RETURNING rows from a DISTINCT: P2 bait
        return kind, f"{lead}INSERT INTO {target} SELECT DISTINCT k, a, b FROM {src} WHERE 1{returning}", ()
    if kind == "cte":
        cte = f"WITH c AS (SELECT DISTINCT k, a, b FROM {src})"
        sql = f"{lead}{cte} INSERT INTO {target} SELECT * FROM c WHERE 1{returning}"
        return kind, sql, ()
    if kind == "update":
        sql = f"{lead}UPDATE {target} SET a = ?, k = coalesce(k, 0) + 1 WHERE k >= ?{returning}"
        return kind, sql, (draw(SCALARS), draw(st.integers(0, 3)))
    if kind == "delete":
        return kind, f"{lead}DELETE FROM {target} WHERE k = ? OR a IS NULL{returning}", (draw(KEYS),)
    if kind == "upsert":
        sql = f"{lead}INSERT INTO {target} (k, a, b) VALUES (?, ?, ?) ON CONFLICT DO NOTHING{returning}"
        return kind, sql, (draw(KEYS), draw(SCALARS), draw(SCALARS))
    if kind == "replace":
        return (
            kind,
            f"{lead}REPLACE INTO {target} (k, a, b) VALUES (?, ?, ?){returning}",
            (draw(KEYS), draw(SCALARS), draw(SCALARS)),
        )
    if kind == "read":  # a patchable query between writes: must see the uncommitted rows, and leave writes possible
        return kind, f"{lead}SELECT x.a FROM {target} AS x JOIN {src} AS y ON 1", ()
    return kind, "COMMIT", ()
