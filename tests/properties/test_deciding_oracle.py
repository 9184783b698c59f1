"""Property (hypothesis, issues 34 and 42): where an aggregate at risk decides *which* rows are served
(c24), or several SELECTs of one statement are at risk (c25, c26), the guard serves the statement's rows or
the truth, never a third answer, and never an inflated answer in silence. On SQLite, DuckDB, PostgreSQL
and MariaDB, under ``"patch"`` and ``"text_to_sql"``. ``test_oracle_mutations`` shows that most drawn
examples inflate (a floor per shape) and that the properties fail when a shape's check is switched off.

Generated data: ``customers`` (1..4, names repeat, a ``city_id`` into the lookup table ``cities``, maybe
NULL), ``orders`` (0..3 per customer, a few orphans; ``total`` REAL/DOUBLE or INTEGER, NULL, negative,
zero and equal values; dyadic values, so every engine sums them exactly in any order), ``items`` (0..3
per order: the join repeats each order that many times). Seven cases in eight hold c24's fan trap on two
or three customers (a true SUM or AVG below another customer's, inflated above it), so that most
statements' answers differ from the truth. Keys are named ``id`` or, where NATURAL JOIN and USING can be
written, ``customer_id``/``order_id``/``item_id``/``city_id``.

Generated statements: SUM or AVG of ``orders.total`` over a join with ``items`` (ON, in either order,
USING or NATURAL; the lookup joined, LEFT joined or not; maybe a pinned WHERE) deciding the answer:
ranking (``ORDER BY agg [DESC], key`` by expression, alias or position, with or without ``LIMIT``/
``OFFSET``), ``HAVING agg > t`` (expression or alias; PostgreSQL has no aliases in HAVING), a derived
table read by an outer ``MAX``/``MIN``/filter/ranking, a CTE filtered by the value or by its ``MAX``, a
scalar subquery, an ``IN`` subquery (by HAVING or by ranking), a window ``RANK() OVER (ORDER BY agg)``, a
``CASE WHEN agg > t`` label, a correlated ``EXISTS (... HAVING agg > t)``; several SELECTs at risk in one
statement (``COMPOSITE``: two derived tables combined ``a.s - b.s``, two scalar subqueries, a UNION ALL of
two grouped branches, an outer SUM with an ``IN`` subquery chosen by HAVING, an outer SUM joined back to a
derived table filtered on its own SUM; the second SELECT with the same aliases or its own, joined the same
way or another); GROUP BY the key, the name, the lookup's key, or ordinals, or ROLLUP (not SQLite); the
join ON, USING, NATURAL, or RIGHT/FULL (MariaDB has no FULL); the alias ``s`` or ``total`` (a column's
name too); literals, positional, named or numbered parameters (``?``/``:n``/``?1``, ``?``/``$n``/``$1``,
``%s``/``%(n)s``) in LIMIT, OFFSET, HAVING and WHERE, a named one reused inside and outside a subquery.

The truth is the same statement with ``items`` taken out of the join and ``o.<key> IN (SELECT order_id
FROM items)`` added to its WHERE: the same orders, each counted once (no other item of the statement
reads ``items`` or counts join rows, so nothing else changes), run on the raw driver.

Properties, for every served result:
  1. it is exactly the statement's rows (as the raw driver returns them) or the truth (as a list where
     the outer query orders by a total order, else as a multiset);
  2. under ``"patch"`` it is the statement's rows;
  3. where the statement's rows differ from the truth and the statement's rows are served, the report
     is flagged (``trigger == "aggregate_fanout"``); shapes the library documents as "not checked"
     (positional parameters both inside and outside a subquery) may carry an aggregate decision
     instead (``REFUSED``);
  4. under ``"text_to_sql"``, when flagged, the truth is served;
  5. a shape the analysis documents it does not read (RIGHT/FULL JOIN, ROLLUP) is served as written, with
     an aggregate decision "aggregate not analysed: ...".

Property 2 of issue 42 ("a decision for every aggregate over a join"), read with sqlglot's scopes, not the
library's planner (``aggregate_over_join``): every statement whose answer differs from the truth has an
aggregate over a join (asserted), and is flagged or carries a decision (3.); how often an aggregate over a
join leaves with no decision at all (a plan proved safe, a risk the data does not realise) is measured,
not asserted (``OVER_JOIN``, hypothesis events; printed by ``test_outcomes_seen``).

Decision-only outcomes allowed by design: a correlated subquery (EXISTS), positional parameters both inside
and outside the subquery, an alias that is also a column name, a window function reading the aggregate
(``REFUSED``), a SELECT the analysis does not read (a decision "... not analysed"). Defects the properties
found, each kept below as a regression test of its fix: D1 DuckDB named parameters bound to a check that
no longer holds them, D2 ``execute(sql, None)`` refused the subquery check, D3 every group filtered out
(``empty_result``, never checked), D4 a window function ordered by the aggregate never checked (now refused
with a decision), D5 the subquery check bound the positional parameters of the HAVING/LIMIT it dropped, D6
an outer SUM corrected over an inflated subquery the analysis does not read.

A long run: ``GUARDED_SQLITE_ORACLE_EXAMPLES=20000`` (every engine) or ``sqlite=9000,duckdb=3000,...``;
``GUARDED_SQLITE_ORACLE_STATS=<file>`` keeps ``test_outcomes_seen``'s figures.
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, Literal

import pytest
import sqlglot
from hypothesis import HealthCheck, event, example, given, note, reject, settings
from hypothesis import strategies as st
from sqlglot import exp

import guarded_sqlite
from guarded_sqlite.report import routine_aggregate

Preset = Literal["patch", "text_to_sql"]
PRESETS: tuple[Preset, ...] = ("patch", "text_to_sql")
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# Statements with several SELECTs at risk (issue 42): two derived tables combined, two scalar subqueries, a
# UNION ALL of two grouped branches, an outer SUM with an IN subquery chosen by HAVING, an outer SUM joined
# back to a derived table filtered on its own SUM.
COMPOSITE = ("minus", "scalars", "union", "outer_in", "joinback")
SHAPES = ("rank", "having", "derived", "cte", "scalar", "in", "rank", "having", "window", "label", "exists", *COMPOSITE)
OUTER = {
    "derived": ("max", "min", "filter", "top"),
    "cte": ("filter", "top"),
    "scalar": ("value", "filter"),
    "in": ("having", "top"),
    "minus": ("pair", "keyed"),
    "scalars": ("pair", "diff"),
}
REAL_TOTALS = [2.5, 100.0, 150.0, 60.0, 40.0, 10.0, 25.0, 10.0, 100.0, 0.0, -5.0, None]
INT_TOTALS = [5, 100, 150, 60, 40, 10, 25, 10, 100, 0, -5, None]
SQLGLOT = {"sqlite": "sqlite", "duckdb": "duckdb", "postgres": "postgres", "mariadb": "mysql"}
SENTINEL = 987654321  # a parameter, written as a literal for sqlglot to count
THRESHOLDS = [-1, 0, 10, 20, 30, 60, 100, 150]
NAMES = ["ana", "bo", "cy", "ana"]
CITIES = ((1, "north"), (2, "south"))

Row = tuple[Any, ...]


@dataclass(frozen=True)
class Case:
    named: bool  # keys named customer_id/order_id/item_id/city_id (NATURAL JOIN and USING possible)
    integer: bool  # orders.total INTEGER (else REAL / DOUBLE)
    customers: tuple[tuple[int, str, int | None], ...]
    orders: tuple[tuple[int, int, Any], ...]
    items: tuple[tuple[int, int, int], ...]
    shape: str
    outer: str
    join: str  # "on", "reversed", "using", "natural"; "right", "full" (not analysed: a decision)
    lookup: str  # "", "join", "left"
    group: str  # "c" (customers) or "l" (cities)
    bare_key: bool  # the customer key unqualified (USING/NATURAL only)
    func: str
    arg: str  # "o.total" or "total"
    order_by: str  # "expr", "alias", "position"
    desc: bool
    show: bool  # the aggregate among the select items
    limit: int | None
    offset: int | None
    threshold: int
    pin: int | None  # WHERE <customer key> <> pin
    outer_pin: int | None  # the outer query of a nested shape: AND x.<key> <> pin
    style: str  # "literal", "positional", "named", "numbered" (?1 on SQLite, $1 on DuckDB)
    sorted_having: bool = True
    group_ordinal: bool = False  # GROUP BY 1, 2 (rank and having: the keys are the first items)
    keyed_orders: bool = True  # orders without a declared key: the engine's row id tells them apart
    alias: str = "s"  # or "total", the name of orders' column too (SQLite reads it as the column in HAVING)
    wrap: str = ""  # rank by an expression of the aggregate: "neg" (-agg), "coalesce", "half" (agg / 2)
    reuse: bool = False  # named style: the outer pin reuses the inner pin's name (and value)
    picks: tuple[int, int] = (1, 2)  # the customers the two SELECTs of "minus", "scalars" and "union" pick
    rollup: bool = False  # GROUP BY ROLLUP (having, label; not on SQLite): not analysed, a decision
    join2: str = ""  # the second SELECT's join in "outer_in" and "joinback" ("": the case's)
    rename: bool = False  # the second SELECT's aliases suffixed with "2" (c2, o2, ...), else the same names
    func2: str = ""  # the second SELECT's function (composite shapes)

    # ---------------------------------------------------------------- schema and data

    def key(self, table: str) -> str:
        return {"c": "customer_id", "o": "order_id", "i": "item_id", "l": "city_id"}[table] if self.named else "id"

    def ddl(self, dialect: str) -> list[str]:
        real = {"sqlite": "REAL", "duckdb": "DOUBLE", "postgres": "DOUBLE PRECISION", "mariadb": "DOUBLE"}[dialect]
        total = "INTEGER" if self.integer else real
        return [
            f"CREATE TABLE cities ({self.key('l')} INTEGER PRIMARY KEY, city TEXT)",
            f"CREATE TABLE customers ({self.key('c')} INTEGER PRIMARY KEY, name TEXT, city_id INTEGER)",
            f"CREATE TABLE orders ({self.key('o')} INTEGER{' PRIMARY KEY' if self.keyed_orders else ''}, "
            f"customer_id INTEGER, total {total})",
            f"CREATE TABLE items ({self.key('i')} INTEGER PRIMARY KEY, order_id INTEGER, qty INTEGER)",
        ]

    def inserts(self) -> list[str]:
        def literal(value: Any) -> str:
            return "NULL" if value is None else f"'{value}'" if isinstance(value, str) else repr(value)

        out = []
        for table, rows in (
            ("cities", CITIES),
            ("customers", self.customers),
            ("orders", self.orders),
            ("items", self.items),
        ):
            if rows:
                values = ", ".join("(" + ", ".join(map(literal, row)) + ")" for row in rows)
                out.append(f"INSERT INTO {table} VALUES {values}")
        return out

    # ---------------------------------------------------------------- the statement and its truth

    def _join(self, join: str | None) -> str:
        return self.join if join is None else join

    def _from(self, truth: bool, s: str = "", join: str | None = None) -> str:
        """The FROM of a SELECT at risk (``s`` suffixes its aliases, ``join`` replaces the case's join);
        the truth's leaves ``items`` out."""
        join = self._join(join)
        c, o, i, lu = (f"{alias}{s}" for alias in "coil")
        ck, ok, lk = self.key("c"), self.key("o"), self.key("l")
        left = "LEFT " if self.lookup == "left" else ""
        lookup = f" {left}JOIN cities {lu} ON {lu}.{lk} = {c}.city_id"
        if join == "natural":
            text = f"customers {c} NATURAL JOIN orders {o}" + ("" if truth else f" NATURAL JOIN items {i}")
            lookup = f" NATURAL {left}JOIN cities {lu}"
        elif join == "using":
            text = f"customers {c} JOIN orders {o} USING (customer_id)"
            text += "" if truth else f" JOIN items {i} USING (order_id)"
            lookup = f" {left}JOIN cities {lu} USING (city_id)"
        elif join in ("right", "full"):
            # Every order kept, with its items or without: the truth counts each once (no semi-join).
            text = f"orders {o}"
            if not truth and join == "right":
                text = f"items {i} RIGHT JOIN orders {o} ON {i}.order_id = {o}.{ok}"
            elif not truth:
                text = f"orders {o} FULL JOIN items {i} ON {i}.order_id = {o}.{ok}"
            text += f" JOIN customers {c} ON {c}.{ck} = {o}.customer_id"
        elif join == "reversed":
            text = f"orders {o} JOIN customers {c} ON {c}.{ck} = {o}.customer_id"
            if not truth:
                text = (
                    f"items {i} JOIN orders {o} ON {o}.{ok} = {i}.order_id "
                    f"JOIN customers {c} ON {c}.{ck} = {o}.customer_id"
                )
        else:
            text = f"customers {c} JOIN orders {o} ON {o}.customer_id = {c}.{ck}"
            text += "" if truth else f" JOIN items {i} ON {i}.order_id = {o}.{ok}"
        return text + (lookup if self.lookup else "")

    def _where(
        self, truth: bool, s: str = "", join: str | None = None, extra: tuple[str, ...] = (), pinned: bool = True
    ) -> str:
        conds = list(extra)
        if pinned and self.pin is not None:
            conds.insert(0, f"{self._ckey(s, join)} <> {self._p('pin', self.pin)}")
        if truth and self._join(join) not in ("right", "full"):
            conds.append(f"o{s}.{self.key('o')} IN (SELECT order_id FROM items)")
        return " WHERE " + " AND ".join(conds) if conds else ""

    def _p(self, name: str, value: int) -> str:
        return str(value) if self.style == "literal" else f"<<{name}>>"

    def _ckey(self, s: str = "", join: str | None = None) -> str:
        bare = self.bare_key and self._join(join) in ("using", "natural")
        return "customer_id" if bare else f"c{s}.{self.key('c')}"

    def _group(self) -> tuple[list[str], str]:
        """The GROUP BY items and the key that orders the groups totally."""
        if self.group == "n":
            return ["c.name"], "c.name"
        if self.group == "l":
            return [f"l.{self.key('l')}", "l.city"], f"l.{self.key('l')}"
        return [self._ckey(), "c.name"], self._ckey()

    def _agg(self, s: str = "", func: str = "") -> str:
        return f"{func or self.func}({self.arg.replace('o.', f'o{s}.')})"

    def _wrapped(self) -> str:
        agg = self._agg()
        return {"": agg, "neg": f"-{agg}", "coalesce": f"COALESCE({agg}, 0)", "half": f"{agg} / 2"}[self.wrap]

    def _limit(self, limit: int | None, offset: int | None) -> str:
        if limit is None:
            return ""
        text = f" LIMIT {self._p('k', limit)}"
        return text + (f" OFFSET {self._p('m', offset)}" if offset is not None else "")

    def _grouped(
        self,
        truth: bool,
        items: list[str],
        tail: str,
        s: str = "",
        join: str | None = None,
        keys: list[str] | None = None,
        extra: tuple[str, ...] = (),
        pinned: bool = True,
        rollup: str = "",
    ) -> str:
        """A grouped SELECT (``rollup``: the dialect whose ROLLUP it is written in, "" for none)."""
        keys = self._group()[0] if keys is None else keys
        ordinal = self.group_ordinal and not rollup and items[: len(keys)] == keys
        by = ", ".join(str(n) for n in range(1, len(keys) + 1)) if ordinal else ", ".join(keys)
        if rollup:
            by = f"{by} WITH ROLLUP" if rollup == "mariadb" else f"ROLLUP ({by})"
        where = self._where(truth, s, join, extra, pinned)
        return f"SELECT {', '.join(items)} FROM {self._from(truth, s, join)}{where} GROUP BY {by}{tail}"

    def text(self, truth: bool, dialect: str) -> tuple[str, bool]:
        """The statement (or its truth) with ``<<name>>`` where a parameter goes, and whether its outer
        query orders its rows totally."""
        keys, key = self._group()
        agg, thr = self._agg(), self._p("t", self.threshold)
        direction = " DESC" if self.desc else ""
        rollup = dialect if self.rollup else ""
        if self.shape in COMPOSITE:
            return self._composite(truth), self.shape != "union"
        if self.shape == "rank":
            items = [*keys, f"{agg} AS {self.alias}"] if self.show else list(keys)
            by = {"expr": self._wrapped(), "alias": self.alias, "position": str(len(keys) + 1)}[self.order_by]
            tail = f" ORDER BY {by}{direction}, {key}" + self._limit(self.limit, self.offset)
            return self._grouped(truth, items, tail), True
        if self.shape == "window":
            items = [*keys, f"RANK() OVER (ORDER BY {self._wrapped()}{direction}) AS r"]
            return self._grouped(truth, items, f" ORDER BY {key}"), True
        if self.shape == "label":
            items = [*keys, f"CASE WHEN {agg} > {thr} THEN 'big' ELSE 'small' END AS size"]
            # MariaDB has no ORDER BY with ROLLUP (its rows are compared as a multiset anyway)
            order = "" if rollup == "mariadb" else f" ORDER BY {key}"
            return self._grouped(truth, items, order, rollup=rollup), not rollup
        if self.shape == "exists":
            ck, ok = self.key("c"), self.key("o")
            joined = "orders o" if truth else f"orders o JOIN items i ON i.order_id = o.{ok}"
            semi = f" AND o.{ok} IN (SELECT order_id FROM items)" if truth else ""
            sub = (
                f"SELECT 1 FROM {joined} WHERE o.customer_id = x.{ck}{semi} GROUP BY o.customer_id HAVING {agg} > {thr}"
            )
            return f"SELECT x.{ck} FROM customers x WHERE EXISTS ({sub}) ORDER BY x.{ck}", True
        if self.shape == "having":
            items = [*keys, f"{agg} AS {self.alias}"] if self.show else list(keys)
            # PostgreSQL has no aliases in HAVING; SQLite reads a name both a column and an alias as the column
            alias = self.order_by == "alias" and self.show and dialect != "postgres"
            alias = alias and not (dialect == "sqlite" and self.alias == "total")
            tail = f" HAVING {self.alias if alias else agg} > {thr}"
            if self.sorted_having and rollup != "mariadb":
                tail += f" ORDER BY {key}" + self._limit(self.limit, self.offset)
            return self._grouped(truth, items, tail, rollup=rollup), self.sorted_having and not rollup
        outer_name = "pin" if self.reuse and self.pin is not None else "q"
        outer_pin = "" if self.outer_pin is None else self._p(outer_name, self.outer_pin)
        inner = self.inner(truth)
        if self.shape in ("derived", "cte"):
            if self.shape == "derived":
                source, where = f"({inner}) t", f" WHERE t.k <> {outer_pin}" if outer_pin else ""
                glue = " AND" if outer_pin else " WHERE"
                if self.outer in ("max", "min"):
                    return f"SELECT {self.outer.upper()}(t.s) FROM {source}{where}", True
                if self.outer == "filter":
                    return f"SELECT t.k FROM {source}{where}{glue} t.s > {thr} ORDER BY t.k", True
                return (
                    f"SELECT t.k, t.s FROM {source}{where} ORDER BY t.s{direction}, t.k{self._limit(self.limit, None)}",
                    True,
                )
            where = f" AND k <> {outer_pin}" if outer_pin else ""
            if self.outer == "filter":
                return f"WITH t AS ({inner}) SELECT k FROM t WHERE s > {thr}{where} ORDER BY k", True
            return f"WITH t AS ({inner}) SELECT k, s FROM t WHERE s = (SELECT MAX(s) FROM t){where} ORDER BY k", True
        ck = self.key("c")
        xpin = f" AND x.{ck} <> {outer_pin}" if outer_pin else ""
        if self.shape == "scalar":
            if self.outer == "value":
                return f"SELECT ({inner}) AS v", True
            return f"SELECT x.{ck} FROM customers x WHERE ({inner}) > x.{ck} * {thr}{xpin} ORDER BY x.{ck}", True
        # IN: the customers the subquery chooses
        return f"SELECT x.{ck}, x.name FROM customers x WHERE x.{ck} IN ({inner}){xpin} ORDER BY x.{ck}", True

    def _composite(self, truth: bool) -> str:
        """A statement with several SELECTs at risk (issue 42, c25, c26): two derived tables combined, two
        scalar subqueries, a UNION ALL of two grouped branches, an outer SUM with an ``IN`` subquery chosen
        by HAVING, or an outer SUM joined back to a derived table filtered on its own inflated sum. The
        second SELECT's aliases are suffixed with "2" where ``rename``, and it may join otherwise
        (``join2``)."""
        ck, (keys, key) = self._ckey(), self._group()
        agg, other, thr = self._agg(), self._agg(func=self.func2), self._p("t", self.threshold)
        a, b = self._p("a", self.picks[0]), self._p("b", self.picks[1])
        s, join2 = ("2" if self.rename else ""), (self.join2 or None)
        if self.shape in ("minus", "scalars") and self.outer != "keyed":
            one = f"SELECT {agg}{' AS s' * (self.shape == 'minus')} FROM {self._from(truth)}"
            one += self._where(truth, extra=(f"{ck} = {a}",), pinned=False)
            two = f"SELECT {other}{' AS s' * (self.shape == 'minus')} FROM {self._from(truth)}"
            two += self._where(truth, extra=(f"{ck} = {b}",), pinned=False)
            if self.shape == "minus":
                return f"SELECT a.s - b.s AS d FROM ({one}) a, ({two}) b"
            return f"SELECT ({one}) - ({two}) AS d" if self.outer == "diff" else f"SELECT ({one}) AS a, ({two}) AS b"
        if self.shape == "minus":  # keyed: both grouped by the customer, joined on it
            one = self._grouped(truth, [f"{ck} AS k", f"{agg} AS s"], "", keys=[ck])
            two = self._grouped(truth, [f"{ck} AS k", f"{other} AS s"], "", keys=[ck], pinned=False)
            return f"SELECT a.k, a.s - b.s AS d FROM ({one}) a JOIN ({two}) b ON b.k = a.k ORDER BY a.k"
        if self.shape == "union":
            one = self._grouped(truth, ["c.name", f"{agg} AS s"], "", keys=[ck, "c.name"], extra=(f"{ck} = {a}",))
            two = self._grouped(truth, ["c.name", f"{other} AS s"], "", keys=["c.name"], extra=(f"{ck} <> {a}",))
            return f"{one} UNION ALL {two}"
        ck2 = self._ckey(s, join2)
        items = [*keys, f"{agg} AS {self.alias}"]
        if self.shape == "outer_in":
            having = f" HAVING {self._agg(s, self.func2)} > {thr}"
            inner = self._grouped(truth, [ck2], having, s=s, join=join2, keys=[ck2], pinned=False)
            return self._grouped(truth, items, f" ORDER BY {key}", extra=(f"{ck} IN ({inner})",))
        # joinback: the outer SUM joined to a derived table filtered on its own SUM
        inner_items = [f"{ck2} AS k", f"{self._agg(s, self.func2)} AS s"]
        inner = self._grouped(truth, inner_items, "", s=s, join=join2, keys=[ck2], pinned=False)
        where = self._where(truth, extra=(f"d.s > {thr}",))
        return (
            f"SELECT {', '.join(items)} FROM {self._from(truth)} JOIN ({inner}) d ON d.k = {ck}{where} "
            f"GROUP BY {', '.join(keys)} ORDER BY {key}"
        )

    def inner(self, truth: bool) -> str:
        """A nested shape's SELECT with the aggregate at risk ("" for rank and having)."""
        _, key = self._group()
        agg = self._agg()
        direction = " DESC" if self.desc else ""
        if self.shape in ("derived", "cte"):
            return self._grouped(truth, [f"{key} AS k", f"{agg} AS s"], "")
        if self.shape == "scalar":
            return f"SELECT {agg} FROM {self._from(truth)}{self._where(truth)}"
        if self.shape == "in":
            ckey = self._ckey()
            if self.outer == "having":
                return self._grouped(truth, [ckey], f" HAVING {agg} > {self._p('t', self.threshold)}")
            tail = f" ORDER BY {agg}{direction}, {ckey}" + self._limit(self.limit or 1, None)
            return self._grouped(truth, [ckey], tail)
        return ""

    def unread(self) -> bool:
        """A shape the analysis documents it does not read (RIGHT/FULL JOIN, ROLLUP): an aggregate decision
        ("aggregate not analysed: ..."), the rows as written."""
        return self.join in ("right", "full") or self.rollup

    def mixed_positional(self, dialect: str) -> bool:
        """Positional parameters both inside a SELECT with a value aggregate and outside it (``deciding``
        refuses those by design, with a decision saying why): read with sqlglot, each parameter a
        sentinel literal."""
        if self.style != "positional":
            return False
        text = re.sub(r"<<\w+>>", str(SENTINEL), self.text(False, dialect)[0])
        tree = sqlglot.parse_one(text, read=SQLGLOT[dialect])

        def marks(node: exp.Expression) -> int:
            return sum(1 for n in node.find_all(exp.Literal) if n.name == str(SENTINEL))

        total = marks(tree)
        return any(
            0 < marks(select) < total
            for select in tree.find_all(exp.Select)
            if any(True for _ in select.find_all(exp.Sum, exp.Avg))
        )

    def values(self) -> dict[str, int]:
        return {
            "pin": self.pin or 0,
            "q": self.outer_pin or 0,
            "t": self.threshold,
            "k": self.limit or 1,
            "m": self.offset or 0,
            "a": self.picks[0],
            "b": self.picks[1],
        }

    def literal_text(self, dialect: str) -> str:
        """The statement with its parameters' values written in (what sqlglot reads for property 2)."""
        values = self.values()
        return re.sub(r"<<(\w+)>>", lambda m: str(values[m.group(1)]), self.text(False, dialect)[0])

    def render(self, dialect: str, truth: bool) -> tuple[str, Any, bool]:
        """(SQL, parameters or None, ordered) in ``dialect``'s parameter syntax."""
        text, ordered = self.text(truth, dialect)
        names = re.findall(r"<<(\w+)>>", text)
        if not names:
            return text, None, ordered
        values = self.values()
        if self.style == "positional":
            mark = {"sqlite": "?", "duckdb": "?", "postgres": "%s", "mariadb": "%s"}[dialect]
            return re.sub(r"<<\w+>>", lambda _: mark, text), tuple(values[n] for n in names), ordered
        if self.style == "numbered":  # ?1 (SQLite), $1 (DuckDB): each name one number, reused
            numbers = {name: n for n, name in enumerate(dict.fromkeys(names), 1)}
            mark = {"sqlite": "?{}", "duckdb": "${}"}[dialect]
            sql = re.sub(r"<<(\w+)>>", lambda m: mark.format(numbers[m.group(1)]), text)
            return sql, [values[n] for n in numbers], ordered
        mark = {"sqlite": ":{}", "duckdb": "${}", "postgres": "%({})s", "mariadb": "%({})s"}[dialect]
        sql = re.sub(r"<<(\w+)>>", lambda m: mark.format(m.group(1)), text)
        return sql, {n: values[n] for n in dict.fromkeys(names)}, ordered


def written_and_true(
    customers: tuple[tuple[int, str, int | None], ...],
    orders: list[tuple[int, int, Any]],
    items: list[tuple[int, int, int]],
    func: str,
) -> list[tuple[Any, Any]]:
    """Each customer's ``func`` over ``orders.total`` as the join with ``items`` writes it and as the
    truth has it, where the two differ: what a threshold between them tells apart."""
    per_order = Counter(order for _, order, _ in items)
    out = []
    for customer, *_ in customers:
        rows = [(total, per_order[order]) for order, who, total in orders if who == customer]
        rows = [(total, n) for total, n in rows if n and total is not None]
        if not rows:
            continue
        if func == "SUM":
            written, true = sum(t * n for t, n in rows), sum(t for t, _ in rows)
        else:
            written, true = sum(t * n for t, n in rows) / sum(n for _, n in rows), sum(t for t, _ in rows) / len(rows)
        if written != true:
            out.append((written, true))
    return out


@st.composite
def cases(draw: Any, dialect: str = "sqlite", shape: str | None = None, outer: str | None = None) -> Case:
    """A case for ``dialect`` (the shapes, joins, GROUP BY and parameter styles it runs), of ``shape``
    (and ``outer``) or any. Data is drawn so that most cases inflate: nearly every customer has orders and nearly every
    order items, often several; thresholds mostly fall between a customer's inflated and true value."""
    named = draw(st.booleans())
    integer = draw(st.integers(0, 3)) == 0
    totals = INT_TOTALS if integer else REAL_TOTALS

    def cycled(choices: list[Any], at: int) -> Any:
        """``choices[at]`` moved on by a drawn step (none: c24's pattern, where hypothesis shrinks to)."""
        return choices[(at + draw(st.integers(0, len(choices) - 1))) % len(choices)]

    n = draw(st.sampled_from([4, 3, 2, 4, 3, 1]))
    func = draw(st.sampled_from(["SUM", "SUM", "AVG"]))
    # Seven cases in eight hold c24's fan trap: the heavy customer's true SUM (110) is below a light one's
    # (150) and its inflated SUM (310) above; its true AVG (55) below another's (60) and its inflated AVG
    # (77.5) above. So the join changes a ranking, a threshold's side, a label, the customers an IN chooses,
    # a window's rank. (``light`` is the one the case's function passes, ``light2`` the other one.)
    steer = n > 1 and draw(st.integers(0, 7)) > 0
    roles = draw(st.permutations(range(1, n + 1))) if steer else []
    heavy, light, light2 = [*roles, 0, 0, 0][:3]
    role_names = {heavy: "cy", light: "bo", light2: "ana"}
    customers = tuple(
        (i, role_names[i], cycled([2, 1], i)) if i in role_names else (i, cycled(NAMES, i), cycled([2, 1, 2, None], i))
        for i in range(1, n + 1)
    )
    specs: list[tuple[int, Any, int]] = []  # (customer, total, items)
    for customer in range(1, n + 1):
        if customer == heavy:
            specs += [(customer, totals[1], 3), (customer, totals[5], 1)]
        elif customer in (light, light2):
            specs.append((customer, totals[2 if (customer == light) == (func == "SUM") else 3], 1))
        else:
            for _ in range(cycled([3, 1, 1, 2, 2, 0], customer)):
                specs.append((customer, cycled(totals, len(specs) + 1), cycled([1, 3, 1, 2, 1, 0, 2], len(specs) + 1)))
    for _ in range(draw(st.sampled_from([0, 1]))):  # an orphan order
        specs.append((9, cycled(totals, len(specs) + 1), draw(st.sampled_from([1, 0, 2]))))
    orders = [(j, customer, total) for j, (customer, total, _) in enumerate(specs, 1)]
    items: list[tuple[int, int, int]] = []
    for j, (_, _, count) in enumerate(specs, 1):
        for _ in range(count):
            items.append((len(items) + 1, j, draw(st.integers(1, 3))))
    shape = draw(st.sampled_from(SHAPES)) if shape is None else shape
    outers = OUTER.get(shape, ("",))
    if dialect == "mariadb" and shape == "in":
        outers = ("having",)  # MariaDB has no LIMIT in an IN subquery
    outer = draw(st.sampled_from(outers)) if outer is None else outer
    join = draw(st.sampled_from(["on", "on", "reversed", "using", "natural"] if named else ["on", "on", "reversed"]))
    unread_joins = ["right"] if dialect == "mariadb" else ["right", "full"]  # MariaDB has no FULL JOIN
    if shape != "exists" and draw(st.integers(0, 11)) == 0:
        join = draw(st.sampled_from(unread_joins))
    join2 = ""
    if shape in ("outer_in", "joinback") and draw(st.integers(0, 2)) == 0:
        join2 = draw(st.sampled_from(["on", "reversed", *(["using", "natural"] if named else []), *unread_joins]))
    lookup = draw(st.sampled_from(["", "", "join", "left"]))
    group = "c"
    if shape in ("rank", "having", "window", "label", "derived", "cte") and draw(st.integers(0, 3)) == 0:
        group = "l" if lookup and draw(st.booleans()) else "n" if shape not in ("derived", "cte") else "c"
    bare_key = join in ("using", "natural") and draw(st.booleans())
    rollup = dialect != "sqlite" and shape in ("having", "label") and draw(st.integers(0, 5)) == 0
    show = draw(st.booleans())
    order_by = draw(st.sampled_from(["expr", "alias", "position"] if show else ["expr"]))
    limit = None if rollup else draw(st.one_of(st.none(), st.integers(1, 3)))
    offset = draw(st.sampled_from([None, None, 0, 1])) if limit is not None else None
    styles = ["literal", "literal", "positional", "named"] + (["numbered"] if dialect in ("sqlite", "duckdb") else [])
    style = draw(st.sampled_from(styles))
    others = [c for c in range(1, n + 1) if c not in (heavy, light, light2)] if steer else [1, 2]
    pin = draw(st.sampled_from([None, None, None, *others]))
    outer_pin = draw(st.sampled_from([None, None, 1, 3])) if shape in ("derived", "cte", "scalar", "in") else None
    if shape == "scalar" and outer == "value":
        outer_pin = None
    reuse = style == "named" and pin is not None and outer_pin is not None and draw(st.booleans())
    if reuse:
        outer_pin = pin
    pairs = written_and_true(customers, orders, items, func)
    between = sorted({math.ceil(min(pair)) for pair in pairs if math.ceil(min(pair)) < max(pair)})
    if steer and draw(st.integers(0, 4)) > 0:  # between the heavy customer's inflated and true value
        threshold = 110 if func == "SUM" else 55
    elif between and draw(st.integers(0, 4)) > 0:
        threshold = draw(st.sampled_from(between))
    else:
        threshold = draw(st.sampled_from(THRESHOLDS))
    inflated = [c for c, *_ in customers if any(o[1] == c and sum(i[1] == o[0] for i in items) > 1 for o in orders)]
    ids = [c for c, *_ in customers]
    first = draw(st.sampled_from(inflated or ids))
    second = draw(st.sampled_from([c for c in ids if c != first] or ids))
    return Case(
        named=named,
        integer=integer,
        customers=customers,
        orders=tuple(orders),
        items=tuple(items),
        shape=shape,
        outer=outer,
        join=join,
        lookup=lookup,
        group=group,
        bare_key=bare_key,
        func=func,
        arg=draw(st.sampled_from(["o.total", "o.total", "total"])),
        order_by=order_by,
        desc=draw(st.booleans()),
        show=show,
        limit=limit,
        offset=offset,
        threshold=threshold,
        pin=pin,
        outer_pin=outer_pin,
        style=style,
        sorted_having=draw(st.integers(0, 3)) > 0,
        group_ordinal=draw(st.integers(0, 4)) == 0,
        keyed_orders=draw(st.integers(0, 4)) > 0,
        alias=draw(st.sampled_from(["s", "s", "total"])),
        wrap=draw(st.sampled_from(["", "", "", "neg", "coalesce", "half"])),
        reuse=reuse,
        picks=(first, second),
        rollup=rollup,
        join2=join2,
        rename=draw(st.booleans()),
        func2=draw(st.sampled_from(["SUM", "AVG"])) if shape in COMPOSITE else "",
    )


# The c24 repro's data (``../shared/repros/correctness/c24_...``): cy's orders equal, then not.
C24 = Case(
    named=False,
    integer=False,
    customers=((1, "ana", 1), (2, "bo", 1), (3, "cy", 2)),
    orders=((1, 1, 100.0), (2, 2, 150.0), (3, 3, 60.0), (4, 3, 60.0)),
    items=((1, 1, 1), (2, 1, 1), (3, 1, 1), (4, 2, 1), (5, 3, 1), (6, 3, 1), (7, 4, 1)),
    shape="rank",
    outer="",
    join="on",
    lookup="",
    group="c",
    bare_key=False,
    func="SUM",
    arg="o.total",
    order_by="alias",
    desc=True,
    show=True,
    limit=1,
    offset=None,
    threshold=140,
    pin=None,
    outer_pin=None,
    style="literal",
)
C24_EXAMPLES = [
    C24,
    replace(C24, orders=((1, 1, 100.0), (2, 2, 150.0), (3, 3, 60.0), (4, 3, 150.0))),
    replace(C24, shape="having", order_by="expr", show=False, limit=None),
    replace(C24, shape="derived", outer="max"),
    replace(C24, shape="cte", outer="filter", func="AVG", threshold=100),
    replace(C24, shape="in", outer="having", threshold=149),
    replace(C24, shape="scalar", outer="value"),
    replace(C24, style="positional", offset=1),
    replace(C24, style="named", offset=0, order_by="position"),
]


def with_c24_examples(test: Any) -> Any:
    for case in C24_EXAMPLES:
        test = example(case=case)(test)
    return test


# --------------------------------------------------------------------------------------------------
# Comparing rows
# --------------------------------------------------------------------------------------------------


def _norm(value: Any) -> Any:
    if isinstance(value, (float, Decimal)) and not isinstance(value, bool):
        f = float(value)
        return round(f, 6) if math.isfinite(f) else f
    return value


def exactly(a: list[Row], b: list[Row], ordered: bool) -> bool:
    return a == b if ordered else Counter(a) == Counter(b)


def nearly(a: list[Row], b: list[Row], ordered: bool) -> bool:
    """Equal values within rounding (the guard's corrected query may sum floats in another order)."""
    na = [tuple(map(_norm, row)) for row in a]
    nb = [tuple(map(_norm, row)) for row in b]
    return exactly(na, nb, ordered)


def types_of(rows: list[Row]) -> list[tuple[str, ...]]:
    return [tuple(type(v).__name__ for v in row if v is not None) for row in rows]


# Outcomes seen per shape (flagged / decision only / silent) where the statement's inflated rows were served.
SEEN: Counter[tuple[str, str, str, str]] = Counter()
# Property 2's measure, not asserted: statements in which a value aggregate reads a join (sqlglot says), per
# (dialect, shape, whether the answer is inflated, "decision" or "no decision"). Issue 42 asks for a decision
# on every one; today a plan proved safe or a risk the data does not realise leaves with none.
OVER_JOIN: Counter[tuple[str, str, bool, str]] = Counter()


def aggregate_over_join(sql: str, dialect: str) -> bool:
    """Whether a SUM or AVG of some SELECT of ``sql`` reads more than one source (table, derived table, CTE
    or view) of that SELECT's own FROM: sqlglot's scopes, not the library's planner."""
    from sqlglot.optimizer.scope import traverse_scope

    for scope in traverse_scope(sqlglot.parse_one(sql, read=SQLGLOT[dialect])):
        select = scope.expression
        if not isinstance(select, exp.Select) or len(scope.selected_sources) < 2:
            continue
        if any(node.find_ancestor(exp.Select) is select for node in select.find_all(exp.Sum, exp.Avg)):
            return True
    return False


def label(case: Case) -> str:
    parts = [case.shape, case.outer or case.order_by, case.join]
    if case.style != "literal":
        parts.append(case.style)
    return "/".join(parts)


def check(
    case: Case,
    dialect: str,
    raw_rows: Callable[[str, Any], list[Row]],
    serve: Callable[[Preset, str, Any], Any],
    seen: Counter[tuple[str, str, str, str]] = SEEN,
) -> None:
    progress = os.environ.get("GUARDED_SQLITE_ORACLE_PROGRESS")
    if not progress:
        _check(case, dialect, raw_rows, serve, seen)
        return
    # A long run's record, one line per example (readable while it runs, or after it is stopped).
    outcome = "rejected or error"
    try:
        outcome = "passed, " + ("inflated" if _check(case, dialect, raw_rows, serve, seen) else "as true")
    except AssertionError as failure:
        outcome = "FAILED " + " | ".join(str(failure).splitlines()[:3])
        raise
    finally:
        with open(progress, "a") as out:
            out.write(f"{dialect}\t{label(case)}\t{outcome}\n")


def _check(
    case: Case,
    dialect: str,
    raw_rows: Callable[[str, Any], list[Row]],
    serve: Callable[[Preset, str, Any], Any],
    seen: Counter[tuple[str, str, str, str]],
) -> bool:
    """The properties for one case; whether its statement's rows differ from the truth."""
    sql, params, ordered = case.render(dialect, truth=False)
    truth_sql, truth_params, _ = case.render(dialect, truth=True)
    try:
        written = raw_rows(sql, params)
        truth = raw_rows(truth_sql, truth_params)
    except Exception as error:  # a combination the engine refuses (both or neither run)
        note(f"{dialect} refused: {error}\n{sql}")
        reject()
    data = f"customers={case.customers}\norders={case.orders}\nitems={case.items}\ncities={CITIES}"
    note(f"[{dialect}] {label(case)}\nsql={sql}\nparams={params}\ntruth_sql={truth_sql}\n{data}")
    differ = not nearly(written, truth, ordered)
    over_join = aggregate_over_join(case.literal_text(dialect), dialect)
    event(f"{dialect}: statement {'differs from' if differ else 'is'} the truth")
    event(f"{case.shape}: statement {'differs from' if differ else 'is'} the truth")
    # An answer the join changed comes from an aggregate that reads a join: sqlglot's reading agrees.
    assert over_join or not differ, f"inflated, but sqlglot sees no aggregate over a join\n{sql}"
    for preset in PRESETS:
        served, report = serve(preset, sql, params)
        flagged = report is not None and report.trigger == "aggregate_fanout"
        # Routine decisions ("not at risk", "checked: ...") explain nothing: an inflated answer needs more.
        decisions = (
            []
            if report is None
            else [d for d in report.decisions if d.rule == "aggregate" and not routine_aggregate(d)]
        )
        decided = True
        if over_join:  # 2. an aggregate over a join leaves with an aggregate decision (routine ones count)
            decided = flagged or bool(report is not None and any(d.rule == "aggregate" for d in report.decisions))
            OVER_JOIN[(dialect, case.shape, differ, "decision" if decided else "no decision")] += 1
            if not decided:
                event(f"{dialect} {preset}: aggregate over a join, no decision ({'inflated' if differ else 'as true'})")
        story = (
            f"[{dialect} {preset}] {label(case)}\nsql={sql}\nparams={params}\ntruth_sql={truth_sql}\n{data}\n"
            f"statement={written}\ntruth={truth}\nserved={served}\n"
            f"trigger={None if report is None else report.trigger} action={None if report is None else report.action}"
            f" decisions={[(d.rule, d.applied, d.reason) for d in decisions]}"
        )
        is_written = exactly(served, written, ordered)
        is_truth = nearly(served, truth, ordered)
        assert not over_join or decided, "an aggregate over a join without an aggregate decision\n" + story
        # 1. the statement's rows or the truth, nothing else
        assert is_written or is_truth, "served neither the statement's rows nor the truth\n" + story
        if is_truth and not is_written:
            assert types_of(served) == types_of(truth), "the truth's values with other types\n" + story
        # 2. the default leaves the rows as written
        if preset == "patch":
            assert is_written, "patch changed the rows\n" + story
        # RIGHT/FULL JOIN and ROLLUP: not analysed, said so ("aggregate not analysed: ...", or "... not analysed"
        # among the reasons a SELECT at risk is not checked), the rows as written
        if case.unread():
            assert is_written, "a shape the analysis does not read, served otherwise\n" + story
            assert any("not analysed" in d.reason and not d.applied for d in decisions), (
                "a shape the analysis does not read, without its decision\n" + story
            )
        # 3. an inflated answer is never served in silence (refusals the library documents may only explain)
        refused = any(reason in d.reason for d in decisions for reason in REFUSED)
        unread_inside = case.unread() or case.join2 in ("right", "full")  # a SELECT not analysed says so (D6)
        refused = refused or (unread_inside and any("not analysed" in d.reason for d in decisions))
        if differ and is_written:
            outcome = "flagged" if flagged else "decision only" if decisions else "silent"
            seen[(dialect, preset, label(case), outcome)] += 1
            event(f"{dialect} {preset}: inflated rows served, {outcome}")
            if not flagged and not (
                decisions and (case.mixed_positional(dialect) or case.shape == "exists" or refused)
            ):
                raise AssertionError(f"inflated rows served, {outcome}\n" + story)
        # 4. text_to_sql serves the truth once it flags
        if preset == "text_to_sql" and flagged:
            assert is_truth, "flagged under text_to_sql, but not the truth served\n" + story
    return differ


# Refusals ``plan_aggregates`` documents: an alias that is also a column name (``SUM(total) AS total``), a
# window function reading the aggregate (``RANK() OVER (ORDER BY SUM(...))``, D4), a table with no key
# where the engine has no row id (``orders`` without its PRIMARY KEY on MariaDB: ``schema_mysql``).
REFUSED = (
    "names both a select item and a column: not corrected",
    "a window function in the query: not corrected",
    "(no NOT NULL key and no row id): not corrected",
)
UNREAD = "aggregate not analysed: "  # RIGHT/FULL JOIN, ROLLUP (c28, c31)


# --------------------------------------------------------------------------------------------------
# The engines
# --------------------------------------------------------------------------------------------------


def _fetch(target: Any, sql: str, params: Any) -> Any:
    return target.execute(sql) if params is None else target.execute(sql, params)


def examples(engine: str, default: int) -> int:
    """The examples ``engine``'s property draws: ``default`` (CI), or ``GUARDED_SQLITE_ORACLE_EXAMPLES`` for
    a long run, one count for every engine (``20000``) or one per engine (``sqlite=9000,duckdb=3000``)."""
    wanted = os.environ.get("GUARDED_SQLITE_ORACLE_EXAMPLES", "").strip()
    if not wanted:
        return default
    if "=" not in wanted:
        return int(wanted)
    counts = dict(part.split("=") for part in wanted.replace(" ", "").split(","))
    return int(counts.get(engine, default))


@settings(SETTINGS, max_examples=examples("sqlite", 100))
@with_c24_examples
@given(case=cases("sqlite"))
def test_sqlite_an_aggregate_that_decides_the_rows(case: Case) -> None:
    on_sqlite(case)


def on_sqlite(case: Case, seen: Counter[tuple[str, str, str, str]] = SEEN) -> None:
    """The properties for ``case`` on SQLite (``guarded_sqlite.connect``)."""
    raw = sqlite3.connect(":memory:")
    for statement in [*case.ddl("sqlite"), *case.inserts()]:
        raw.execute(statement)
    raw.commit()
    guarded = {}
    for preset in PRESETS:
        con = guarded_sqlite.connect(":memory:", guard=preset)
        raw.backup(con)
        guarded[preset] = con

    def serve(preset: Preset, sql: str, params: Any) -> Any:
        cursor = _fetch(guarded[preset], sql, params)
        return cursor.fetchall(), cursor.guard_report

    try:
        check(case, "sqlite", lambda sql, params: _fetch(raw, sql, params).fetchall(), serve, seen)
    finally:
        raw.close()
        for con in guarded.values():
            con.close()


@settings(SETTINGS, max_examples=examples("duckdb", 60))
@with_c24_examples
@given(case=cases("duckdb"))
def test_duckdb_an_aggregate_that_decides_the_rows(case: Case) -> None:
    duckdb = pytest.importorskip("duckdb")
    raw = duckdb.connect()
    for statement in [*case.ddl("duckdb"), *case.inserts()]:
        raw.execute(statement)

    def serve(preset: Preset, sql: str, params: Any) -> Any:
        con = guarded_sqlite.wrap(raw, guard=preset, dialect="duckdb")
        cursor = _fetch(con, sql, params)
        return cursor.fetchall(), cursor.guard_report

    try:
        check(case, "duckdb", lambda sql, params: _fetch(raw, sql, params).fetchall(), serve)
    finally:
        raw.close()


@contextmanager
def postgres_schema(pg_dsn: str) -> Iterator[Any]:
    """A raw psycopg connection (autocommit) whose search_path is a fresh schema, dropped after."""
    import psycopg

    schema = f"deciding_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    raw = psycopg.connect(pg_dsn, autocommit=True, options=f"-c search_path={schema}")
    try:
        yield raw
    finally:
        raw.close()
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


@settings(SETTINGS, max_examples=examples("postgres", 40))
@with_c24_examples
@given(case=cases("postgres"))
def test_postgres_an_aggregate_that_decides_the_rows(pg_dsn: str, case: Case) -> None:
    with postgres_schema(pg_dsn) as raw:
        for statement in [*case.ddl("postgres"), *case.inserts()]:
            raw.execute(statement)

        def raw_rows(sql: str, params: Any) -> list[Row]:
            return [tuple(row) for row in raw.execute(sql, params).fetchall()]

        def serve(preset: Preset, sql: str, params: Any) -> Any:
            cursor = guarded_sqlite.wrap(raw, guard=preset, dialect="postgres").cursor()
            _fetch(cursor, sql, params)  # execute(sql, None) is D2
            return [tuple(row) for row in cursor.fetchall()], cursor.guard_report

        check(case, "postgres", raw_rows, serve)


@contextmanager
def mariadb_database(params: dict[str, Any]) -> Iterator[Any]:
    """A raw PyMySQL connection (autocommit) to a fresh database, dropped after."""
    import pymysql

    name = f"deciding_{uuid.uuid4().hex[:12]}"
    admin = pymysql.connect(**params, autocommit=True)
    admin.cursor().execute(f"CREATE DATABASE {name}")
    raw = pymysql.connect(**params, database=name, autocommit=True)
    try:
        yield raw
    finally:
        raw.close()
        admin.cursor().execute(f"DROP DATABASE {name}")
        admin.close()


@settings(SETTINGS, max_examples=examples("mariadb", 30))
@with_c24_examples
@given(case=cases("mariadb"))
def test_mariadb_an_aggregate_that_decides_the_rows(mariadb_params: dict[str, Any], case: Case) -> None:
    with mariadb_database(mariadb_params) as raw:
        cur = raw.cursor()
        for statement in [*case.ddl("mariadb"), *case.inserts()]:
            cur.execute(statement)

        def raw_rows(sql: str, params: Any) -> list[Row]:
            cursor = raw.cursor()
            cursor.execute(sql, params)
            return [tuple(row) for row in cursor.fetchall()]

        def serve(preset: Preset, sql: str, params: Any) -> Any:
            cursor = guarded_sqlite.wrap(raw, guard=preset).cursor()
            _fetch(cursor, sql, params)
            return [tuple(row) for row in cursor.fetchall()], cursor.guard_report

        check(case, "mariadb", raw_rows, serve)


# --------------------------------------------------------------------------------------------------
# Defects the properties found, shrunk: regression tests of their fixes
# --------------------------------------------------------------------------------------------------

SHOP = [
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)",
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, total {real})",
    "CREATE TABLE items (id INTEGER PRIMARY KEY, order_id INTEGER)",
    "INSERT INTO customers VALUES (1, 'ana'), (2, 'bo')",
    "INSERT INTO orders VALUES (1, 1, 100), (2, 2, 150)",
    "INSERT INTO items VALUES (1, 1), (2, 1), (3, 1), (4, 2)",  # ana's order three times: 300 > 150
]
JOIN = "FROM customers c JOIN orders o ON o.customer_id = c.id JOIN items i ON i.order_id = o.id"
RANKED = f"SELECT c.id, SUM(o.total) AS s {JOIN} GROUP BY c.id ORDER BY s DESC, c.id LIMIT {{k}}"
NESTED = f"SELECT MAX(t.s) FROM (SELECT c.id AS k, SUM(o.total) AS s {JOIN} GROUP BY c.id) t"
# Every group filtered out: the inflated -5 * 3 + 10 fails HAVING, the true -5 + 10 passes.
EMPTY = [
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)",
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, total {real})",
    "CREATE TABLE items (id INTEGER PRIMARY KEY, order_id INTEGER)",
    "INSERT INTO customers VALUES (1, 'ana')",
    "INSERT INTO orders VALUES (1, 1, 10), (2, 1, -5)",
    "INSERT INTO items VALUES (1, 1), (2, 2), (3, 2), (4, 2)",
]
HAVING_ALL_OUT = f"SELECT c.id {JOIN} GROUP BY c.id HAVING SUM(o.total) > 0"


def _duckdb(schema: list[str]) -> Any:
    duckdb = pytest.importorskip("duckdb")
    raw = duckdb.connect()
    for statement in schema:
        raw.execute(statement.format(real="DOUBLE"))
    return raw


def _served_as_corrected(
    served: Callable[[Preset], tuple[list[Row], Any]], truth: list[Row], written: list[Row]
) -> None:
    """``"patch"``: the statement's rows, flagged; ``"text_to_sql"``: the truth, flagged."""
    for preset in PRESETS:
        rows, report = served(preset)
        story = f"{preset}: served {rows}, statement {written}, truth {truth}, {report.trigger}, {report.decisions}"
        assert report.trigger == "aggregate_fanout", story
        assert rows == (written if preset == "patch" else truth), story


def test_d1_duckdb_named_limit_parameter() -> None:
    raw = _duckdb(SHOP)
    sql = RANKED.format(k="$k")

    def served(preset: Preset) -> tuple[list[Row], Any]:
        cursor = guarded_sqlite.wrap(raw, guard=preset, dialect="duckdb").execute(sql, {"k": 1})
        return cursor.fetchall(), cursor.guard_report

    _served_as_corrected(served, [(2, 150.0)], [(1, 300.0)])


def test_d1_duckdb_named_parameter_outside_the_subquery() -> None:
    raw = _duckdb(SHOP)
    sql = NESTED + " WHERE t.k <> $q"

    def served(preset: Preset) -> tuple[list[Row], Any]:
        cursor = guarded_sqlite.wrap(raw, guard=preset, dialect="duckdb").execute(sql, {"q": 9})
        return cursor.fetchall(), cursor.guard_report

    _served_as_corrected(served, [(150.0,)], [(300.0,)])


def test_d2_duckdb_parameters_none() -> None:
    raw = _duckdb(SHOP)

    def served(preset: Preset) -> tuple[list[Row], Any]:
        cursor = guarded_sqlite.wrap(raw, guard=preset, dialect="duckdb").execute(NESTED, None)
        return cursor.fetchall(), cursor.guard_report

    _served_as_corrected(served, [(150.0,)], [(300.0,)])


def _on_postgres(raw: Any, schema: list[str], run: Callable[[Any], Any]) -> Callable[[Preset], tuple[list[Row], Any]]:
    """``served(preset)``: ``run(cursor)`` on a guarded cursor of ``raw`` (``schema`` created first), and
    the rows and report."""
    for statement in schema:
        raw.execute(statement.format(real="DOUBLE PRECISION"))

    def served(preset: Preset) -> tuple[list[Row], Any]:
        cursor = guarded_sqlite.wrap(raw, guard=preset, dialect="postgres").cursor()
        run(cursor)
        return [tuple(row) for row in cursor.fetchall()], cursor.guard_report

    return served


def test_d2_postgres_parameters_none(pg_dsn: str) -> None:
    with postgres_schema(pg_dsn) as raw:
        served = _on_postgres(raw, SHOP, lambda cursor: cursor.execute(NESTED, None))
        _served_as_corrected(served, [(150.0,)], [(300.0,)])


# D3, fixed in 8377fee: every group filtered out by the inflated value, so the statement served no rows, and
# the aggregate check never ran ("empty_result", no finding, no decision). Kept as regression tests.


def _embedded(dialect: str, schema: list[str], sql: str, params: Any) -> Callable[[Preset], tuple[list[Row], Any]]:
    """``served(preset)``: ``sql`` run under ``preset`` on ``schema``, on a fresh SQLite connection or a
    DuckDB one (``wrap()``), and its rows and report."""
    if dialect == "duckdb":
        raw = _duckdb(schema)

        def on_duckdb(preset: Preset) -> tuple[list[Row], Any]:
            cursor = _fetch(guarded_sqlite.wrap(raw, guard=preset, dialect="duckdb"), sql, params)
            return cursor.fetchall(), cursor.guard_report

        return on_duckdb
    base = sqlite3.connect(":memory:")
    for statement in schema:
        base.execute(statement.format(real="REAL"))
    base.commit()

    def on_sqlite(preset: Preset) -> tuple[list[Row], Any]:
        con = guarded_sqlite.connect(":memory:", guard=preset)
        base.backup(con)
        cursor = _fetch(con, sql, params)
        return cursor.fetchall(), cursor.guard_report

    return on_sqlite


@pytest.mark.parametrize("dialect", ["sqlite", "duckdb"])
def test_d3_every_group_filtered_out(dialect: str) -> None:
    _served_as_corrected(_embedded(dialect, EMPTY, HAVING_ALL_OUT, None), [(1,)], [])


def test_d3_postgres_every_group_filtered_out(pg_dsn: str) -> None:
    with postgres_schema(pg_dsn) as raw:
        served = _on_postgres(raw, EMPTY, lambda cursor: cursor.execute(HAVING_ALL_OUT))
        _served_as_corrected(served, [(1,)], [])


D4_SQL = f"SELECT c.id, RANK() OVER (ORDER BY SUM(o.total) DESC) AS r {JOIN} GROUP BY c.id ORDER BY c.id"
D5_HAVING = (
    f"SELECT x.id FROM customers x WHERE x.id IN (SELECT c.id {JOIN} GROUP BY c.id HAVING SUM(o.total) > ?) "
    "ORDER BY x.id"
)
D5_LIMIT = (
    f"SELECT x.id FROM customers x WHERE x.id IN (SELECT c.id {JOIN} GROUP BY c.id ORDER BY SUM(o.total) DESC, "
    "c.id LIMIT ?) ORDER BY x.id"
)
# D4: the window reads the group's SUM (ana's 100 counted 3 times outranks bo's 150): refused with a
# decision, rows as written. D5: the subquery's HAVING / LIMIT parameter is left out of its check.
DEFECT_CASES = [
    pytest.param(D4_SQL, None, [(1, 2), (2, 1)], [(1, 1), (2, 2)], id="D4-window"),
    pytest.param(D5_HAVING, (200,), [], [(1,)], id="D5-having"),
    pytest.param(D5_LIMIT, (1,), [(2,)], [(1,)], id="D5-limit"),
]


def _served_or_refused(
    served: Callable[[Preset], tuple[list[Row], Any]], sql: str, truth: list[Row], written: list[Row]
) -> None:
    if sql != D4_SQL:
        _served_as_corrected(served, truth, written)
        return
    for preset in PRESETS:
        rows, report = served(preset)
        assert rows == written, (preset, rows)
        assert any(REFUSED[1] in d.reason for d in report.decisions if d.rule == "aggregate"), report.decisions


@pytest.mark.parametrize(("sql", "params", "truth", "written"), DEFECT_CASES)
@pytest.mark.parametrize("dialect", ["sqlite", "duckdb"])
def test_d4_d5(dialect: str, sql: str, params: Any, truth: list[Row], written: list[Row]) -> None:
    _served_or_refused(_embedded(dialect, SHOP, sql, params), sql, truth, written)


@pytest.mark.parametrize(("sql", "params", "truth", "written"), DEFECT_CASES)
def test_d4_d5_postgres(pg_dsn: str, sql: str, params: Any, truth: list[Row], written: list[Row]) -> None:
    with postgres_schema(pg_dsn) as raw:
        served = _on_postgres(raw, SHOP, lambda cursor: _fetch(cursor, sql.replace("?", "%s"), params))
        _served_or_refused(served, sql, truth, written)


# D6 (issue 42, found by the composite shapes): the outer SUM at risk was corrected while the IN subquery
# that chooses the customers, a RIGHT JOIN the analysis does not read, was kept as written: its inflated
# SUM (300 > 100) chose bo, whose corrected 100 was served with cy's 150, neither the statement's rows nor
# the truth. Fixed in catalog._statement_plan: a SELECT not analysed leaves the whole statement as written,
# with a decision that names it, as one that cannot be checked does.
D6_SQL = (
    f"SELECT c.id, c.name, SUM(o.total) AS s {JOIN} WHERE c.id IN (SELECT c.id FROM items i RIGHT JOIN orders o "
    "ON i.order_id = o.id JOIN customers c ON c.id = o.customer_id GROUP BY c.id HAVING SUM(o.total) > 100) "
    "GROUP BY c.id, c.name ORDER BY c.id"
)
D6_SHOP = [*SHOP[:3], "INSERT INTO customers VALUES (1, 'bo'), (2, 'cy')", *SHOP[4:]]


@pytest.mark.parametrize("dialect", ["sqlite", "duckdb"])
def test_d6_a_subquery_not_analysed_leaves_the_outer_query_uncorrected(dialect: str) -> None:
    served = _embedded(dialect, D6_SHOP, D6_SQL, None)
    for preset in PRESETS:
        rows, report = served(preset)
        assert rows == [(1, "bo", 300.0), (2, "cy", 150.0)], (preset, rows)  # as written; the truth: cy 150 alone
        (decision,) = [d for d in report.decisions if d.rule == "aggregate"]
        assert not decision.applied
        assert "RIGHT JOIN: not analysed" in decision.reason, decision.reason


# D7 (issue 42, found by the oracle's long run): DuckDB's ``$1``/``$2`` bound from a list, two scalar
# subqueries at risk; the second one's check holds ``$2`` alone, and DuckDB refused the list [1, 2] ("excess
# parameters: 1"), so ``text_to_sql`` served the statement's -72.5 flagged instead of the truth's -95. Fixed
# in aggregate_check._binding: on DuckDB a check binds the numbers it holds by name ({"2": 2}).
D7_SHOP = [
    *SHOP[:3],
    "INSERT INTO customers VALUES (1, 'ana'), (2, 'bo')",
    "INSERT INTO orders VALUES (1, 1, 100), (2, 1, 10), (3, 2, 150)",
    "INSERT INTO items VALUES (1, 1), (2, 1), (3, 1), (4, 2), (5, 3)",
]
D7_SQL = f"SELECT (SELECT AVG(o.total) {JOIN} WHERE c.id = $1) - (SELECT SUM(o.total) {JOIN} WHERE c.id = $2) AS d"


def test_d7_duckdb_a_subquery_check_binds_the_numbers_it_holds() -> None:
    _served_as_corrected(_embedded("duckdb", D7_SHOP, D7_SQL, [1, 2]), [(55.0 - 150.0,)], [(77.5 - 150.0,)])


# D8 (issue 42, found by the oracle's long run on PostgreSQL; fixed): under ``text_to_sql`` a ROLLUP result whose
# rows repeat went to the row rule P1 ("has GROUP BY: each output row is a separate group") and left with no
# aggregate decision, though under ``"patch"`` the same statement has "aggregate not analysed: ... ROLLUP".
# The SUM is inflated (300 for 100) and was served in silence; the aggregate rule's refusal now goes on the
# report beside the row rules' decisions.
D8_SHOP = [
    "CREATE TABLE cities (id INTEGER PRIMARY KEY, city TEXT)",
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city_id INTEGER)",
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, total INTEGER)",
    "CREATE TABLE items (id INTEGER PRIMARY KEY, order_id INTEGER)",
    "INSERT INTO customers VALUES (1, 'bo', NULL)",
    "INSERT INTO orders VALUES (1, 1, 100)",
    "INSERT INTO items VALUES (1, 1), (2, 1), (3, 1)",
]
D8_SQL = (
    "SELECT l.id, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id "
    "JOIN items i ON i.order_id = o.id LEFT JOIN cities l ON l.id = c.city_id GROUP BY ROLLUP (l.id)"
)


def test_d8_duckdb_rollup_with_repeated_rows_has_its_decision_under_text_to_sql() -> None:
    rows, report = _embedded("duckdb", D8_SHOP, D8_SQL, None)("text_to_sql")
    assert rows == [(None, 300), (None, 300)]  # as written (the truth: 100 twice)
    assert any(d.rule == "aggregate" and "not analysed" in d.reason for d in report.decisions), report.decisions


def test_outcomes_seen() -> None:
    """The property's third point (inflated rows are never served in silence) is not vacuous: of the
    generated SQLite cases that run, at least a tenth serve the statement's inflated rows under some
    preset (each of them flagged or given a documented decision, else ``check`` fails). Counted in a run
    of its own, not read from the other tests' (under xdist those run in other processes); which shapes
    got which outcome is in the assertion's message."""
    seen: Counter[tuple[str, str, str, str]] = Counter()
    ran: list[Case] = []

    @settings(SETTINGS, max_examples=60)
    @given(case=cases())
    def run(case: Case) -> None:
        on_sqlite(case, seen)  # rejects the combinations SQLite refuses: those are not counted
        ran.append(case)

    run()
    assert sum(seen.values()) >= len(ran) / 10, (len(ran), sorted(seen.items()))
    # Which shapes got which outcome, and property 2's measure, in this process (run with ``-s``).
    lines = [" ".join(map(str, (*key, count))) for key, count in sorted(SEEN.items())]
    lines += [
        f"{dialect} {shape} {'inflated' if differ else 'as true'} {decided} {count}"
        for (dialect, shape, differ, decided), count in sorted(OVER_JOIN.items())
    ]
    print(*lines, sep="\n")
    if os.environ.get("GUARDED_SQLITE_ORACLE_STATS"):  # a long run's figures, kept
        with open(os.environ["GUARDED_SQLITE_ORACLE_STATS"], "a") as out:
            out.write("\n".join(lines) + "\n")
