"""A statement whose joins cannot repeat the rows its value aggregates read, recognised from its tokens
(issue 44 item 3): no parse, no analysis, for the plainest and most common case of "nothing at risk".

``SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.id``
sums ``orders``; each order row meets one customer at most (``c.id`` is a key), so no order is counted
twice. ``read_joins`` reads such a statement from its words (SQLite's): one SELECT (no subquery, CTE
or set operation), a FROM clause of bare table names with optional aliases joined by ``JOIN``, ``INNER
JOIN`` or ``LEFT [OUTER] JOIN ... ON``, every value aggregate's argument reading the columns of one
alias only, qualified (``o.total``). Anything else (a comma, a parenthesis, a quoted or qualified name,
USING, NATURAL, RIGHT/FULL/CROSS, a window, FILTER, ROLLUP, a comment, a bare column in an aggregate,
...) makes the reading None and the statement is planned in full; an ON condition with OR, BETWEEN or
CASE (whose ANDs are not all conjunctions) matches its table on nothing. A reading that is not sure
is no reading.

``cannot_fan_out`` then decides from the catalog facts: starting from the aggregated alias, a table is
*determined* where an ON condition (a top-level conjunct ``y.k = z.c`` of the join that introduces ``y``,
or, for an inner join, ``z``) equates a single-column key ``k`` of its table that cannot be NULL with a
column ``c`` of a determined alias, both of INTEGER affinity compared under BINARY (``TableFacts.
integer_columns``: no conversion, no collation, so a value matches one key value at most). When every
alias is determined, each row of the aggregated table meets at most one row of every other table: the
join repeats none of the rows any value aggregate reads. Views and tables whose keys are unknown are
never determined.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from .._core.probe import VALUE_AGGREGATE_NAMES
from .schema import SchemaFacts, TableFacts, fold

__all__ = ["JoinReading", "cannot_fan_out", "read_joins"]

# A comment (``--``, ``/*``) is "other": what it holds is not SQL to SQLite, and read as words it could
# supply an ON equality the statement does not have (``ON 1 -- AND c.id = o.customer_id``). Spaces are
# SQLite's only (its tokenizer reads a no-break space as part of a name) and digits ASCII.
_TOKEN = re.compile(
    r"(?P<string>'(?:[^']|'')*')|(?P<other>--|/\*)|(?P<number>[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+)"
    r"|(?P<word>[A-Za-z_][\w$]*)|(?P<parameter>[?:@$][\w$]*)|(?P<sign><>|<=|>=|!=|==|\|\||[-+*/%=<>(),.&|~])"
    r"|(?P<space>[ \t\n\v\f\r]+)|(?P<anything>.)",
    re.DOTALL,
)
# Words that make the statement more than this module reads: it is planned in full.
_REFUSED = frozenset(
    {
        "with", "union", "intersect", "except", "natural", "using", "cross", "right", "full", "over",
        "filter", "window", "rollup", "cube", "grouping", "values", "recursive", "exists", "indexed",
    }
)  # fmt: skip
_CLAUSE_ENDS = frozenset({("word", word) for word in ("where", "group", "having", "order", "limit")})
# Words after which an ON condition's ANDs are not all its conjunctions (OR: none of them is one).
_NESTING = frozenset({"or", "between", "case"})
# Bare words an aggregate's argument may hold besides qualified columns and function names.
_ARGUMENT_WORDS = frozenset(
    {"case", "when", "then", "else", "end", "and", "or", "is", "null", "like", "between", "in", "cast", "as",
     "real", "integer", "int", "text", "numeric", "distinct", "glob", "collate", "nocase", "binary", "rtrim"}
)  # fmt: skip


class JoinReading(NamedTuple):
    """What ``read_joins`` read: each alias with its table (folded), the ON equalities between qualified
    columns (the join's own alias, then the two sides), and the one alias the value aggregates read."""

    tables: tuple[tuple[str, str], ...]
    equalities: tuple[tuple[str, tuple[str, str], tuple[str, str]], ...]
    aggregated: str
    left: frozenset[str] = frozenset()
    """The aliases a LEFT JOIN introduces."""


def read_joins(sql: str) -> JoinReading | None:
    """``sql`` read as described in the module docstring, or None.

    >>> reading = read_joins("SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id")
    >>> reading.tables, reading.equalities, reading.aggregated
    ((('c', 'customers'), ('o', 'orders')), (('o', ('o', 'customer_id'), ('c', 'id')),), 'o')
    >>> read_joins("SELECT SUM(o.total) FROM customers c, orders o WHERE o.customer_id = c.id") is None
    True
    """
    tokens: list[tuple[str, str]] = []
    for match in _TOKEN.finditer(sql):
        kind = match.lastgroup or "other"
        if kind == "space":
            continue
        if kind in ("other", "anything"):
            return None  # a comment, a quote, a bracket, a semicolon, another space: not read here
        text = match.group()
        tokens.append((kind, fold(text) if kind == "word" else text))
    words = [text for kind, text in tokens if kind == "word"]
    if not words or words[0] != "select" or words.count("select") != 1 or words.count("from") != 1:
        return None
    if not _REFUSED.isdisjoint(words):
        return None
    start = tokens.index(("word", "from")) + 1
    end = next((i for i in range(start, len(tokens)) if tokens[i] in _CLAUSE_ENDS), len(tokens))
    joins = _read_from(tokens[start:end])
    if joins is None:
        return None
    tables, equalities, left = joins
    aliases = {alias for alias, _ in tables}
    if len(aliases) != len(tables):
        return None
    aggregated = _aggregated(tokens)
    if aggregated is None or len(aggregated) != 1 or not aggregated <= aliases:
        return None
    return JoinReading(tables, equalities, next(iter(aggregated)), left)


Equality = tuple[str, tuple[str, str], tuple[str, str]]


def _read_from(
    tokens: list[tuple[str, str]],
) -> tuple[tuple[tuple[str, str], ...], tuple[Equality, ...], frozenset[str]] | None:
    """The FROM clause's tables, ON equalities and LEFT-joined aliases, or None where it is more than
    bare names joined on conditions."""
    tables: list[tuple[str, str]] = []
    equalities: list[Equality] = []
    left: set[str] = set()
    words: list[str] = []
    at = 0
    while at < len(tokens):
        if tables:  # a join: JOIN, INNER JOIN, LEFT JOIN, LEFT OUTER JOIN
            words = []
            while at < len(tokens) and tokens[at][1] in ("inner", "left", "outer", "join"):
                words.append(tokens[at][1])
                at += 1
            if words not in (["join"], ["inner", "join"], ["left", "join"], ["left", "outer", "join"]):
                return None
        if at >= len(tokens) or tokens[at][0] != "word":
            return None
        table = tokens[at][1]
        at += 1
        alias = table
        if at < len(tokens) and tokens[at] == ("word", "as"):
            at += 1
        if at < len(tokens) and tokens[at][0] == "word" and tokens[at][1] not in ("on", "join", "inner", "left"):
            alias = tokens[at][1]
            at += 1
        tables.append((alias, table))
        if len(tables) == 1:
            continue
        if words[0] == "left":
            left.add(alias)
        if at >= len(tokens) or tokens[at] != ("word", "on"):
            return None
        at += 1
        condition: list[tuple[str, str]] = []
        while at < len(tokens) and tokens[at][1] not in ("join", "inner", "left"):
            condition.append(tokens[at])
            at += 1
        if not condition or any(text in ("(", ")", ",") for _, text in condition):
            return None
        if not _NESTING.isdisjoint(text for _, text in condition):
            # No conjunct can be told apart: the join is filtered, not determined. An AND of BETWEEN or
            # inside CASE is no conjunction: ``o.v BETWEEN 0 AND c.id = o.c`` is ``(o.v BETWEEN 0 AND
            # c.id) = o.c``, and ``CASE WHEN 1 AND c.id = o.c AND 1 THEN 0 ELSE 1 END`` matches the others.
            continue
        for conjunct in _split(condition):
            pair = _equality(conjunct)
            if pair is not None:
                equalities.append((alias, *pair))
    return tuple(tables), tuple(equalities), frozenset(left)


def _split(condition: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    parts: list[list[tuple[str, str]]] = [[]]
    for token in condition:
        if token == ("word", "and"):
            parts.append([])
        else:
            parts[-1].append(token)
    return parts


def _equality(tokens: list[tuple[str, str]]) -> tuple[tuple[str, str], tuple[str, str]] | None:
    """``a.x = b.y`` (two qualified columns) as ((a, x), (b, y)), else None."""
    texts = [text for _, text in tokens]
    kinds = [kind for kind, _ in tokens]
    if len(tokens) == 7 and texts[1] == texts[5] == "." and texts[3] in ("=", "=="):
        if kinds[0] == kinds[2] == kinds[4] == kinds[6] == "word":
            return (texts[0], texts[2]), (texts[4], texts[6])
    return None


def _aggregated(tokens: list[tuple[str, str]]) -> set[str] | None:
    """The aliases every value aggregate's argument reads (qualified columns only), or None where an
    argument holds a word that may be a column of any table."""
    found: set[str] = set()
    at = 0
    while at < len(tokens):
        kind, text = tokens[at]
        if kind == "word" and text in VALUE_AGGREGATE_NAMES and at + 1 < len(tokens) and tokens[at + 1][1] == "(":
            depth, at = 1, at + 2
            argument: list[tuple[str, str]] = []
            while at < len(tokens) and depth:
                depth += {"(": 1, ")": -1}.get(tokens[at][1], 0)
                if depth:
                    argument.append(tokens[at])
                at += 1
            if depth:
                return None
            for i, (part_kind, part) in enumerate(argument):
                after = argument[i + 1][1] if i + 1 < len(argument) else ""
                before = argument[i - 1][1] if i else ""
                if part_kind != "word" or before == ".":
                    if part == "*":
                        return None
                    continue
                if after == ".":
                    found.add(part)
                elif after != "(" and part not in _ARGUMENT_WORDS:
                    return None  # a bare column: of which table the text does not say
            continue
        at += 1
    return found


def cannot_fan_out(reading: JoinReading, facts: SchemaFacts) -> bool:
    """Whether every alias of ``reading`` is determined by the aggregated one (module docstring)."""
    tables: dict[str, TableFacts] = {}
    for alias, name in reading.tables:
        table = facts.table(name)
        if table is None or table.is_view or table.keys_unknown:
            return False
        tables[alias] = table
    determined = {reading.aggregated}
    grown = True
    while grown:
        grown = False
        for joined, one, other in reading.equalities:
            for (alias, column), (source, by) in ((one, other), (other, one)):
                if alias in determined or source not in determined or joined not in (alias, source):
                    continue
                if joined in reading.left and alias != joined:
                    # A LEFT JOIN's condition matches the joined table to each row before it, at most once
                    # on its key; it filters none of those rows, so it determines nothing else.
                    continue
                if alias not in tables or source not in tables:
                    return False  # a qualifier that names no table of the FROM clause
                if _strict_key(tables[alias], column) and by in tables[source].integer_columns:
                    determined.add(alias)
                    grown = True
    return determined == set(tables)


def _strict_key(table: TableFacts, column: str) -> bool:
    """Whether ``column`` alone is a key of ``table`` that cannot be NULL, of INTEGER affinity under BINARY."""
    return frozenset({column}) in table.keys and column in table.not_null and column in table.integer_columns
