"""Schema facts read from an engine's catalog: the declared keys that decide where duplicates come from.

The provenance analysis (``guarded_sqlite._analysis.provenance``) needs, for every table a query names, its
columns, the column sets that identify a row (keys), which columns may hold NULL, and whether the name
is a view. This module holds that engine-neutral shape and reads it from SQLite (``PRAGMA``);
``guarded_sqlite._analysis.schema_servers`` reads it from DuckDB and PostgreSQL, ``schema_mysql`` from
MySQL and MariaDB.
Which tables are read, and when facts read earlier may be reused, is ``guarded_sqlite._analysis.catalog``'s job.

What counts as a key:

* the PRIMARY KEY (composite ones included); in a SQLite rowid table also ``rowid``/``oid``/``_rowid_``
  (unless a column takes the name), which an ``INTEGER PRIMARY KEY`` column aliases; the rowid of the
  virtual tables of SQLite's own full-text and R*Tree modules;
* every UNIQUE constraint and every unique index over plain columns that is *not* partial (a partial
  index constrains only some rows) and has no expression column.

A unique partial index over plain columns is a ``PartialKey``: its columns and its WHERE predicate
(SQLite: read from the index's ``sqlite_master.sql``; PostgreSQL: ``pg_index.indpred``; DuckDB has no
partial indexes). It is a key only of the rows its predicate holds for: the analysis uses one for a
table instance only where the query's own conditions on that instance imply the predicate.

The NULL rule. A UNIQUE column may hold many NULLs, so "equal key values ⇒ same row" holds only for
non-NULL values. ``TableFacts.keys`` lists every declared key; it is sound wherever the key columns are
matched with ``=`` (a join or a pin to a constant never matches NULL). ``TableFacts.identity_keys`` keeps
only the keys whose columns cannot be NULL. SQLite lets a PRIMARY KEY column of a rowid table hold NULL
(a documented legacy) unless it is declared NOT NULL or is the rowid itself; such a key identifies rows
only where its columns are matched with ``=``.

Failing closed. Whatever cannot be read is never taken for "no keys" (which would make every join look
like a fan-out): SQLite reads raise ``CatalogUnreadable`` for the guard to report ``unknown``; a virtual
table of another module, whose rowid SQLite does not promise to be unique, gets ``keys_unknown``.
Identifiers are folded as SQLite folds them (``fold``: ASCII letters only). Reading runs through a
private plain cursor, so a caller's ``row_factory`` or cursor factory never sees or changes anything.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

__all__ = [
    "CatalogUnreadable",
    "ForeignKey",
    "PartialKey",
    "SchemaFacts",
    "TableFacts",
    "fold",
    "has_table_statement",
    "index_list_statement",
    "lookup_statement",
    "quote_identifier",
    "raw_sqlite",
    "read_index_list",
    "read_lookup",
    "read_schemas",
    "read_sqlite_schema",
    "sqlite_declarations",
    "sqlite_has_table",
    "sqlite_index_list",
    "sqlite_schemas",
    "sqlite_table_facts",
    "sqlite_temp_names",
]


@dataclass(frozen=True)
class ForeignKey:
    """A declared foreign key (used to explain a verdict, never to decide one)."""

    columns: tuple[str, ...]
    """The referencing columns, as declared."""

    table: str
    """The referenced table."""

    ref_columns: tuple[str, ...]
    """The referenced columns; empty when the declaration names only the table (its primary key)."""


@dataclass(frozen=True)
class PartialKey:
    """A unique partial index over plain columns: a key of the rows its predicate holds for."""

    columns: frozenset[str]
    """The indexed columns, folded (``fold``)."""

    predicate: str
    """The index's WHERE condition as SQL text in the engine's dialect (its columns unqualified)."""


@dataclass(frozen=True)
class TableFacts:
    """What the catalog says about one table or view."""

    name: str
    """The table's name as declared."""

    schema: str = "main"
    """The schema (SQLite: ``main``, ``temp`` or an attached name) it lives in."""

    columns: tuple[str, ...] = ()
    """Column names as declared, in order."""

    keys: tuple[frozenset[str], ...] = ()
    """Every declared key as a set of folded column names (``fold``; see the module's NULL rule)."""

    not_null: frozenset[str] = frozenset()
    """Folded names of the columns that cannot hold NULL (declared NOT NULL, or a key SQLite enforces
    as NOT NULL: the rowid, a WITHOUT ROWID table's primary key; elsewhere a primary key)."""

    foreign_keys: tuple[ForeignKey, ...] = ()
    """Declared foreign keys."""

    is_view: bool = False
    """Whether the name is a view (views carry no keys)."""

    view_sql: str = ""
    """A view's ``CREATE VIEW`` statement where the catalog gives it (SQLite), else ""."""

    keys_unknown: str = ""
    """Why the keys of this table are not known, if they are not (a virtual table of a module without a
    unique rowid, an unreadable catalog entry): the analysis treats it like a view."""

    rowid: bool = False
    """SQLite: whether it is a rowid table (``rowid`` among its keys unless a column takes the name)."""

    partial_keys: tuple[PartialKey, ...] = ()
    """Unique partial indexes over plain columns (never among ``keys``): keys only where a query's
    conditions imply the predicate."""

    foreign: bool = False
    """PostgreSQL: a foreign table, whose ``ctid`` (if any) is its wrapper's, no row identity."""

    integer_columns: frozenset[str] = frozenset()
    """SQLite: folded names of the columns with INTEGER affinity (a declared type containing ``INT``,
    and the rowid) that compare under BINARY, i.e. none when the declaration says ``COLLATE`` anywhere.
    Two such columns compare as the values they hold, with no conversion and no collation, just as
    grouping one of them compares them (``aggregate_sql.pregrouped``)."""

    collations: tuple[tuple[str, str], ...] = ()
    """MySQL/MariaDB: (folded column name, collation) of each text column. A key is unique under its
    columns' collations, where values that differ only in case or trailing spaces (the default
    collations) are one value: it tells rows apart where it is compared under that collation, not
    where an equality compares it under another (``joins``)."""

    @property
    def column_names(self) -> frozenset[str]:
        """The folded column names."""
        return frozenset(fold(c) for c in self.columns)

    @property
    def identity_keys(self) -> tuple[frozenset[str], ...]:
        """The keys whose columns cannot be NULL: equal values of these identify one row."""
        return tuple(k for k in self.keys if k <= self.not_null)

    @property
    def qualified_name(self) -> str:
        """``schema.name``."""
        return f"{self.schema}.{self.name}"


@dataclass(frozen=True)
class SchemaFacts:
    """The tables of one connection, looked up case-insensitively, qualified or not."""

    tables: tuple[TableFacts, ...] = ()
    """Every table and view read, in no particular order."""

    search_order: tuple[str, ...] = ("temp", "main")
    """Folded schema names in the order an unqualified name is resolved (SQLite: temp, main, attached)."""

    _by_name: dict[tuple[str, str], TableFacts] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for facts in self.tables:
            self._by_name.setdefault((fold(facts.schema), fold(facts.name)), facts)

    def table(self, name: str, schema: str | None = None) -> TableFacts | None:
        """The facts of ``schema.name``, or of ``name`` resolved along ``search_order``; None if unknown."""
        lowered = fold(name)
        if schema:
            return self._by_name.get((fold(schema), lowered))
        for candidate in self.search_order:
            found = self._by_name.get((candidate, lowered))
            if found is not None:
                return found
        return None


# ---------------------------------------------------------------------------------------------- SQLite


class CatalogUnreadable(Exception):
    """The catalog could not be read (an authorizer's denial, a closed connection, a missing virtual
    table module, ...): the tables concerned are not known, which the analysis reports as ``unknown``."""


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def fold(name: str) -> str:
    """An identifier as SQLite compares identifiers: ASCII letters in lower case, every other character
    as it is (``"Ärzte"`` and ``"ärzte"`` are two tables; Python's ``str.lower()`` would merge them)."""
    return name.lower() if name.isascii() else name.translate(_ASCII_LOWER)


def _text(value: Any) -> str:
    """A catalog value as text, whatever the connection's ``text_factory`` made of it."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    return "" if value is None else str(value)


def quote_identifier(name: str) -> str:
    """``name`` as a double-quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def raw_sqlite(con: Any) -> sqlite3.Connection:
    """The real ``sqlite3.Connection`` behind a proxy (wrapt proxies expose ``__wrapped__``)."""
    for _ in range(8):  # a proxy passes isinstance() checks, so unwrap whatever exposes __wrapped__
        inner = getattr(con, "__wrapped__", None)
        if inner is None:
            break
        con = inner
    if not issubclass(type(con), sqlite3.Connection):
        raise TypeError("not a sqlite3 connection")
    return cast(sqlite3.Connection, con)


def plain_cursor(con: Any) -> sqlite3.Cursor:
    """A plain ``sqlite3.Cursor`` on ``con``'s real connection, without a row factory: the caller's
    ``row_factory`` and cursor classes never see or change a catalog read."""
    cur = sqlite3.Cursor(raw_sqlite(con))
    cur.row_factory = None
    return cur


def _close(cur: sqlite3.Cursor) -> None:
    try:
        cur.close()
    except sqlite3.Error:
        pass


def catalog_rows(cur: sqlite3.Cursor, sql: str, parameters: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """All rows of a catalog statement; any failure is ``CatalogUnreadable``, never an empty answer
    (an empty answer would read as "no keys", which makes every join look like a fan-out)."""
    try:
        return list(cur.execute(sql, parameters).fetchall())
    except sqlite3.Error as error:
        raise CatalogUnreadable(f"{type(error).__name__}: {error}") from None


def sqlite_schemas(cur: sqlite3.Cursor) -> tuple[str, ...]:
    """Schema names in SQLite's resolution order for unqualified names: temp, main, then attached."""
    return read_schemas(catalog_rows(cur, "PRAGMA database_list"))


def read_schemas(rows: Sequence[tuple[Any, ...]]) -> tuple[str, ...]:
    """``PRAGMA database_list``'s rows as ``sqlite_schemas`` gives them."""
    if not rows:  # it always lists main: an authorizer answered SQLITE_IGNORE to the PRAGMA
        raise CatalogUnreadable("PRAGMA database_list answered nothing (an authorizer ignoring PRAGMA?)")
    names = [_text(row[1]) for row in sorted(rows, key=lambda r: int(r[0]))]
    attached = [n for n in names if fold(n) not in ("main", "temp")]
    return ("temp", "main", *attached)


Declaration = tuple[int, str, str, str, str]
"""One ``sqlite_master`` row: (rowid, type, name, tbl_name, sql)."""


def _master(schema: str) -> str:
    return "sqlite_temp_master" if schema == "temp" else f"{quote_identifier(schema)}.sqlite_master"


def _declaration(row: tuple[Any, ...]) -> Declaration:
    return (int(row[0]), _text(row[1]), _text(row[2]), _text(row[3]), _text(row[4]))


def sqlite_declarations(cur: sqlite3.Cursor, schema: str, table: str) -> tuple[Declaration, ...]:
    """The ``sqlite_master`` rows of table or view ``table`` of ``schema`` and of its indexes, by rowid.

    Everything the key facts of a table follow from is here: the CREATE TABLE text (columns, PRIMARY
    KEY, UNIQUE, NOT NULL, WITHOUT ROWID, the virtual table module) and the CREATE INDEX texts. Scans
    the schema's catalog (names match as SQLite matches identifiers: ``NOCASE`` folds ASCII only), so
    the guard reads this once per declaration and afterwards checks the rows by rowid
    (``lookup_statement``)."""
    rows = catalog_rows(
        cur,
        f"SELECT rowid, type, name, tbl_name, sql FROM {_master(schema)} "
        "WHERE type IN ('table', 'view', 'index') AND tbl_name = ?1 COLLATE NOCASE ORDER BY rowid",
        (table,),
    )
    return tuple(_declaration(row) for row in rows)


def lookup_statement(
    schemas: Sequence[str], rowids: dict[int, list[int]], temp_names: Sequence[str]
) -> tuple[str, list[Any]]:
    """One statement giving the TEMP tables and views among ``temp_names`` and, per schema position,
    the ``sqlite_master`` rows with the given rowids (read back with ``read_lookup``)."""
    marks = ", ".join("?" * len(temp_names)) or "NULL"
    arms = [
        "SELECT -1, 0, type, name, tbl_name, NULL FROM sqlite_temp_master "
        f"WHERE type IN ('table', 'view') AND name COLLATE NOCASE IN ({marks})"
    ]
    parameters: list[Any] = list(temp_names)
    for position, wanted in rowids.items():
        master = _master(schemas[position])
        # One arm per rowid: a rowid IN (...) list costs an ephemeral table, 2 µs more here.
        arms.extend(
            f"SELECT {int(position)}, rowid, type, name, tbl_name, sql FROM {master} WHERE rowid = ?" for _ in wanted
        )
        parameters.extend(wanted)
    return " UNION ALL ".join(arms), parameters


def read_lookup(rows: Iterable[tuple[Any, ...]]) -> tuple[frozenset[str], dict[int, dict[int, Declaration]]]:
    """``lookup_statement``'s rows: the folded TEMP names, and the rows found per schema position by rowid."""
    temp: set[str] = set()
    found: dict[int, dict[int, Declaration]] = {}
    for row in rows:
        if int(row[0]) == -1:
            temp.add(fold(_text(row[3])))
        else:
            declaration = _declaration(row[1:])
            found.setdefault(int(row[0]), {})[declaration[0]] = declaration
    return frozenset(temp), found


def index_list_statement(schema: str, table: str) -> str:
    """``PRAGMA index_list`` of a table (read back with ``read_index_list``)."""
    return f"PRAGMA {quote_identifier(schema)}.index_list({quote_identifier(table)})"


def read_index_list(rows: Iterable[tuple[Any, ...]]) -> tuple[tuple[str, int, str, int], ...]:
    """(name, unique, origin, partial) of every index, by name."""
    return tuple(sorted((_text(r[1]), int(r[2]), _text(r[3]), int(r[4]) if len(r) > 4 else 0) for r in rows))


def sqlite_index_list(cur: sqlite3.Cursor, schema: str, table: str) -> tuple[tuple[str, int, str, int], ...]:
    """``PRAGMA index_list``: (name, unique, origin, partial) of every index of the table, by name."""
    return read_index_list(catalog_rows(cur, index_list_statement(schema, table)))


def has_table_statement(schema: str, table: str) -> str:
    """A statement with rows if and only if ``schema`` holds a table or view named ``table``."""
    return f"PRAGMA {quote_identifier(schema)}.table_xinfo({quote_identifier(table)})"


def sqlite_has_table(cur: sqlite3.Cursor, schema: str, table: str) -> bool:
    """Whether ``schema`` holds a table or view named ``table`` (a lookup in SQLite's own schema cache)."""
    return bool(catalog_rows(cur, has_table_statement(schema, table)))


def sqlite_temp_names(cur: sqlite3.Cursor) -> frozenset[str]:
    """The folded names of the connection's TEMP tables and views (usually none or a few)."""
    return frozenset(
        fold(_text(r[0]))
        for r in catalog_rows(cur, "SELECT name FROM sqlite_temp_master WHERE type IN ('table', 'view')")
    )


_VIRTUAL = re.compile(r"^\s*create\s+virtual\s+table\b.*?\busing\s+[\"'`\[]?(\w+)", re.IGNORECASE | re.DOTALL)
_ROWID_NAMES = ("rowid", "oid", "_rowid_")
_ROWID_SET = frozenset(_ROWID_NAMES)
# Virtual table modules whose rowid is unique (SQLite's own full-text and R*Tree modules). Other
# modules may return any rowid, so their tables have no known key.
_UNIQUE_ROWID_MODULES = frozenset({"fts3", "fts4", "fts5", "rtree", "rtree_i32", "geopoly"})


def sqlite_table_facts(cur: sqlite3.Cursor, schema: str, name: str, kind: str, sql: str) -> TableFacts:
    """The facts of one table or view (``kind`` and ``sql`` as ``sqlite_master`` has them), read with
    the ``PRAGMA``s of its schema. Raises ``CatalogUnreadable`` when a read fails.

    Nullability as SQLite enforces it: a PRIMARY KEY column of a rowid table may hold NULL (a
    documented legacy of SQLite) unless it is declared NOT NULL or is the rowid itself (a lone
    ``INTEGER PRIMARY KEY``, which has no index of its own); a WITHOUT ROWID table's key cannot.
    """
    prefix = f"PRAGMA {quote_identifier(schema)}."
    info = catalog_rows(cur, f"{prefix}table_xinfo({quote_identifier(name)})")
    if not info:
        raise CatalogUnreadable(f"no columns listed for {schema}.{name}")
    columns = tuple(_text(row[1]) for row in info)
    folded = {fold(c) for c in columns}
    if kind == "view":
        return TableFacts(name, schema, columns, is_view=True, view_sql=sql or "")
    virtual = _VIRTUAL.match(sql)
    if virtual is not None:
        module = virtual.group(1).lower()
        if module not in _UNIQUE_ROWID_MODULES:
            return TableFacts(name, schema, columns, keys_unknown=f"virtual table {name} (module {module})")
        aliases = frozenset(a for a in _ROWID_NAMES if a not in folded)
        return TableFacts(name, schema, columns, tuple(frozenset({a}) for a in sorted(aliases)), aliases)
    not_null = {fold(_text(row[1])) for row in info if row[3]}
    pk = [fold(_text(row[1])) for row in sorted((row for row in info if row[5]), key=lambda r: int(r[5]))]
    indexes = catalog_rows(cur, f"{prefix}index_list({quote_identifier(name)})")
    keys: list[frozenset[str]] = []
    rowid_table = True
    pk_index = next((row for row in indexes if _text(row[3]) == "pk"), None)
    if pk_index is not None:
        # A WITHOUT ROWID table's primary key index carries the whole row; a rowid table's ends in the rowid.
        entries = _index_entries(cur, f"{prefix}index_xinfo({quote_identifier(_text(pk_index[1]))})")
        rowid_table = any(int(entry[1]) == -1 for entry in entries)
    elif len(pk) == 1:
        # A lone INTEGER PRIMARY KEY without an index is the rowid under another name: never NULL.
        not_null.add(pk[0])
    if pk:
        keys.append(frozenset(pk))
    if rowid_table:
        for alias in _ROWID_NAMES:
            if alias not in folded:
                keys.append(frozenset({alias}))
                not_null.add(alias)
    partial_keys: list[PartialKey] = []
    for row in indexes:
        unique = bool(row[2])
        partial = bool(row[4]) if len(row) > 4 else False
        if not unique or _text(row[3]) == "pk":
            continue
        entries = _index_entries(cur, f"{prefix}index_info({quote_identifier(_text(row[1]))})")
        names = [fold(_text(entry[2])) if entry[2] is not None else "" for entry in entries]
        if not names or not all(names):  # an expression column (name NULL) is not a column key
            continue
        if not partial:
            keys.append(frozenset(names))
            continue
        declared = catalog_rows(
            cur, f"SELECT sql FROM {_master(schema)} WHERE type = 'index' AND name = ?1", (_text(row[1]),)
        )
        predicate = index_predicate(_text(declared[0][0])) if declared else None
        if predicate:  # a predicate that cannot be read is no key at all
            partial_keys.append(PartialKey(frozenset(names), predicate))
    foreign = _sqlite_foreign_keys(cur, schema, name)
    integer_columns: frozenset[str] = frozenset()
    if "collate" not in sql.lower():
        integer = {fold(_text(row[1])) for row in info if "INT" in _text(row[2] or "").upper()}
        if rowid_table:
            integer.update(alias for alias in _ROWID_NAMES if alias not in folded)
        integer_columns = frozenset(integer)
    return TableFacts(
        name, schema, columns, unique_keys(keys), frozenset(not_null), foreign,
        rowid=rowid_table, partial_keys=tuple(partial_keys), integer_columns=integer_columns,
    )  # fmt: skip


def index_predicate(create_index: str) -> str | None:
    """The WHERE condition of a ``CREATE INDEX`` statement as SQLite SQL, or None if it has none or
    cannot be parsed. Parses with sqlglot, imported here: this runs only when a partial unique index is
    read, by the provenance analysis, which has sqlglot loaded already."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    from .rewrite import quiet_sqlglot
    from .trees import release, text_of

    try:
        with quiet_sqlglot():
            tree = sqlglot.parse_one(create_index, read="sqlite")
    except (SqlglotError, ValueError, RecursionError):
        return None
    index = tree.this if isinstance(tree, exp.Create) else None
    params = index.args.get("params") if isinstance(index, exp.Index) else None
    where = params.args.get("where") if params is not None else None
    predicate = text_of(where.this, "sqlite") if isinstance(where, exp.Where) else None
    release(tree)
    return predicate


def _index_entries(cur: sqlite3.Cursor, pragma: str) -> list[tuple[Any, ...]]:
    """The columns of an index that ``index_list`` listed: never none (an ignored PRAGMA answers none,
    and a key read as columnless would simply be missing)."""
    entries = catalog_rows(cur, pragma)
    if not entries:
        raise CatalogUnreadable(f"{pragma} answered nothing (an authorizer ignoring PRAGMA?)")
    return entries


def _sqlite_foreign_keys(cur: sqlite3.Cursor, schema: str, name: str) -> tuple[ForeignKey, ...]:
    foreign: dict[int, list[tuple[Any, ...]]] = {}
    for row in catalog_rows(cur, f"PRAGMA {quote_identifier(schema)}.foreign_key_list({quote_identifier(name)})"):
        foreign.setdefault(int(row[0]), []).append(row)
    return tuple(
        ForeignKey(
            tuple(_text(r[3]) for r in parts),
            _text(parts[0][2]),
            tuple(_text(r[4]) for r in parts if r[4] is not None),
        )
        for parts in (sorted(rows, key=lambda r: int(r[1])) for rows in foreign.values())
    )


def unique_keys(keys: Iterable[frozenset[str]]) -> tuple[frozenset[str], ...]:
    """Keys without repeats, smallest first."""
    out: list[frozenset[str]] = []
    for key in sorted(set(keys), key=lambda k: (bool(k & _ROWID_SET), len(k), sorted(k))):
        if key:
            out.append(key)
    return tuple(out)


def read_sqlite_schema(con: Any) -> SchemaFacts:
    """Read every table and view of ``main``, ``temp`` and each attached schema: a fresh, uncached view
    of the whole catalog (the guard itself reads only the tables a statement names, in
    ``guarded_sqlite._analysis.catalog``). Never raises: a table whose facts cannot be read
    is listed with ``keys_unknown`` saying why, and an unreadable catalog gives no tables at all
    (every name then unknown to the analysis)."""
    try:
        cur = plain_cursor(con)
    except (TypeError, sqlite3.Error):
        return SchemaFacts()
    try:
        order = sqlite_schemas(cur)
        tables: list[TableFacts] = []
        for schema in order:
            master = "sqlite_temp_master" if schema == "temp" else f"{quote_identifier(schema)}.sqlite_master"
            listed = catalog_rows(cur, f"SELECT type, name, sql FROM {master} WHERE type IN ('table', 'view')")
            for kind, name, sql in listed:
                try:
                    facts = sqlite_table_facts(cur, schema, _text(name), _text(kind), _text(sql))
                except CatalogUnreadable as why:
                    facts = TableFacts(_text(name), schema, keys_unknown=f"catalog unreadable ({why})")
                tables.append(facts)
        return SchemaFacts(tuple(tables), tuple(fold(s) for s in order))
    except CatalogUnreadable:
        return SchemaFacts()
    finally:
        _close(cur)
