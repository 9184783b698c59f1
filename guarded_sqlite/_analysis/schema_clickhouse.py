"""Schema facts from ClickHouse's ``system.tables`` and ``system.columns``, in ``schema``'s shape, and the
keys a statement may rest on: only those the data proves unique when the statement is analysed.

ClickHouse enforces no key. A MergeTree table's ``PRIMARY KEY`` and ``ORDER BY`` (``system.tables``'
``primary_key``, ``sorting_key``) order and index its rows and keep every duplicate: inserting the same
id twice keeps both rows, and a ReplacingMergeTree removes them only when parts happen to merge. A
declared key is therefore only a *candidate* (``ClickHouseCatalog.candidates``): one whose parts are
plain columns that cannot hold NULL. ``prove_keys`` asks the data, in one statement, whether each
candidate of the tables a statement names is unique over the whole table now (``count() =
uniqExact(columns)``); a key unique on the whole table is unique on any rows a statement reads of it.
Proven keys become the table's keys for that statement's analysis; a table whose candidates the data
contradicts has none (its rows have no identity, and a join to it may fan out); one whose proof could
not be read (a time limit, an error) has ``keys_unknown``, which the analysis treats like a view.

ClickHouse has no snapshot across statements: the proof is read right after the caller's statement
(and before the guard's check runs), so a writer that inserts a duplicate key in between can make it
stale. Nothing short of reading the key with the statement could close that window.

Names: ClickHouse tells ``T`` from ``t`` (tables and columns), the analysis folds case. Two tables of a
database, or two columns of a table, whose names differ only in case are read with their keys
unknown (the analysis could take one for the other). Unqualified names resolve in the session's
current database. Views, materialized views and dictionaries carry no keys. Temporary tables are not
read (a name that is one is unknown). The reader never raises; when a read fails no table is known.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from .schema import SchemaFacts, TableFacts, fold

__all__ = ["ClickHouseCatalog", "key_columns", "prove_keys", "read_clickhouse_schema"]

_TABLES = (
    "SELECT database, name, engine, primary_key, sorting_key FROM system.tables "
    "WHERE NOT is_temporary AND database NOT IN ('system', 'information_schema', 'INFORMATION_SCHEMA')"
)
_COLUMNS = (
    "SELECT database, table, name, type, position FROM system.columns "
    "WHERE database NOT IN ('system', 'information_schema', 'INFORMATION_SCHEMA')"
)
_VIEWS = frozenset({"View", "MaterializedView", "LiveView", "WindowView", "Dictionary"})
_IDENTIFIER = re.compile(r"^(?:`((?:[^`\\]|\\.)+)`|([A-Za-z_][A-Za-z0-9_]*))$")

PROOF_SECONDS = 5.0
"""How long the one statement proving a statement's candidate keys may run."""


@dataclass(frozen=True)
class ClickHouseCatalog:
    """The catalog as read (every table keyless) and each table's candidate keys, by folded
    (database, table): the key columns as declared, each candidate once."""

    facts: SchemaFacts = field(default_factory=SchemaFacts)
    candidates: dict[tuple[str, str], tuple[tuple[str, ...], ...]] = field(default_factory=dict)


def key_columns(expression: str) -> tuple[str, ...] | None:
    """The columns of a ``system.tables`` key expression (``id``, ``a, b``, a backquoted name), or None
    when a part is not a plain column (``toDate(ts)``, ``cityHash64(x)``: not a key of rows).

    >>> key_columns("id, `order id`")
    ('id', 'order id')
    >>> key_columns("(id)")  # ORDER BY (id) is listed with its parentheses
    ('id',)
    >>> key_columns("toDate(ts), id") is None
    True
    >>> key_columns("") is None
    True
    """
    expression = expression.strip()
    while expression.startswith("(") and expression.endswith(")") and _balanced(expression[1:-1]):
        expression = expression[1:-1].strip()
    if not expression:
        return None
    columns = []
    for part in expression.split(","):
        found = _IDENTIFIER.match(part.strip())
        if found is None:
            return None
        quoted, bare = found.groups()
        columns.append(bare if bare is not None else re.sub(r"\\(.)", r"\1", quoted))
    return tuple(columns)


def _balanced(text: str) -> bool:
    """Whether ``text``'s parentheses pair up (so ``(a), (b)`` is not taken for one wrapped list)."""
    depth = 0
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


def _nullable(type_name: str) -> bool:
    return type_name.startswith(("Nullable(", "LowCardinality(Nullable("))


def read_clickhouse_schema(fetch: Callable[[str], list[Any]]) -> ClickHouseCatalog:
    """Read the catalog through ``fetch`` (rows of one read-only statement; raises when it fails).
    Never raises: an unreadable catalog gives no table at all, every name unknown."""
    try:
        current = fetch("SELECT currentDatabase()")
        database = str(current[0][0]) if current else ""
        tables = [(str(d), str(t), str(e), str(p), str(s)) for d, t, e, p, s in fetch(_TABLES)]
        columns: dict[tuple[str, str], list[tuple[int, str, str]]] = {}
        for db, table, name, type_name, position in fetch(_COLUMNS):
            columns.setdefault((str(db), str(table)), []).append((int(position), str(name), str(type_name)))
    except Exception:  # an unreadable catalog: every name unknown, never keyless
        return ClickHouseCatalog()
    folded: dict[tuple[str, str], int] = {}
    for db, table, *_ in tables:
        folded[(fold(db), fold(table))] = folded.get((fold(db), fold(table)), 0) + 1
    facts, candidates = [], {}
    for db, table, engine, primary, sorting in sorted(tables):
        cols = sorted(columns.get((db, table), []))
        names = [name for _, name, _ in cols]
        not_null = frozenset(fold(name) for _, name, type_name in cols if not _nullable(type_name))
        view = engine in _VIEWS
        twin = ""
        if folded[(fold(db), fold(table))] > 1:
            twin = f"another table's name differs from {table}'s only in case"
        elif len({fold(name) for name in names}) < len(names):
            twin = f"two of {table}'s column names differ only in case"
        facts.append(TableFacts(table, db, tuple(names), (), not_null, (), view, keys_unknown=twin if not view else ""))
        if view or twin:
            continue
        found = []
        for expression in (primary, sorting):
            key = key_columns(expression)
            if key is not None and key not in found and {fold(c) for c in key} <= not_null:
                found.append(key)
        if found:
            candidates[(fold(db), fold(table))] = tuple(found)
    return ClickHouseCatalog(SchemaFacts(tuple(facts), (fold(database),) if database else ()), candidates)


def _quoted(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def proof_statement(catalog: ClickHouseCatalog, tables: Iterable[TableFacts]) -> tuple[str, list[TableFacts]]:
    """One statement answering, per table with candidates, a bit mask of its candidates unique over the
    whole table (bit i: candidate i), and the tables in the order of its columns ("" when none)."""
    parts: list[str] = []
    asked: list[TableFacts] = []
    for facts in tables:
        keys = catalog.candidates.get((fold(facts.schema), fold(facts.name)), ())
        if not keys:
            continue
        bits = " + ".join(
            f"{1 << i} * toUInt64(count() = uniqExact({', '.join(_quoted(c) for c in key)}))"
            for i, key in enumerate(keys)
        )
        parts.append(f"(SELECT {bits} FROM {_quoted(facts.schema)}.{_quoted(facts.name)}) AS k{len(parts)}")
        asked.append(facts)
    return ("SELECT " + ", ".join(parts)) if parts else "", asked


def prove_keys(
    catalog: ClickHouseCatalog, names: Iterable[tuple[str | None, str]], fetch: Callable[[str], list[Any]]
) -> SchemaFacts:
    """The catalog's facts with, for each table ``names`` resolves to, the candidate keys the data proves
    unique now as its keys (see the module docstring); ``fetch`` runs the one proof statement."""
    facts = catalog.facts
    named = {id(t): t for t in (facts.table(name, schema) for schema, name in names) if t is not None}
    sql, asked = proof_statement(catalog, named.values())
    if not sql:
        return facts
    proven: dict[int, TableFacts] = {}
    try:
        rows = fetch(sql)
        masks = [int(value) for value in rows[0]]
    except Exception as error:  # a time limit, an error: these tables' keys are not known
        why = f"whether its declared key is unique could not be read ({type(error).__name__}: {error})"
        for table in asked:
            proven[id(table)] = replace(table, keys_unknown=why[:300])
    else:
        for table, mask in zip(asked, masks, strict=True):
            keys = catalog.candidates[(fold(table.schema), fold(table.name))]
            unique = tuple(frozenset(fold(c) for c in key) for i, key in enumerate(keys) if mask >> i & 1)
            proven[id(table)] = replace(table, keys=unique)
    return SchemaFacts(tuple(proven.get(id(table), table) for table in facts.tables), facts.search_order)
