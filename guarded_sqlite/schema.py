"""Schema facts read from an engine's catalog: the declared keys that decide where duplicates come from.

The provenance analysis (``guarded_sqlite.provenance``) needs, for every table a query names, its
columns, the column sets that identify a row (keys), which columns may hold NULL, and whether the name
is a view. This module reads those facts from SQLite (``PRAGMA``), DuckDB (``duckdb_constraints()`` and
friends) and PostgreSQL (``pg_index``/``pg_constraint``; psycopg 3), into one engine-neutral shape.

What counts as a key:

* the PRIMARY KEY (composite ones included); in a SQLite rowid table also ``rowid``/``oid``/``_rowid_``
  (unless a column takes the name), which an ``INTEGER PRIMARY KEY`` column aliases;
* every UNIQUE constraint and every unique index over plain columns that is *not* partial (a partial
  index constrains only some rows) and has no expression column.

The NULL rule. A UNIQUE column may hold many NULLs, so "equal key values ⇒ same row" holds only for
non-NULL values. ``TableFacts.keys`` lists every declared key; it is sound wherever the key columns are
matched with ``=`` (a join or a pin to a constant never matches NULL). ``TableFacts.identity_keys`` keeps
only the keys whose columns cannot be NULL: columns declared NOT NULL and PRIMARY KEY columns. SQLite lets
a non-``INTEGER`` PRIMARY KEY column of a rowid table hold NULL (a documented legacy bug); we still count
PRIMARY KEY columns as NOT NULL, as every other engine enforces and as data practically always satisfies.

Readers never raise on an odd catalog: whatever cannot be read simply has no keys. Reading runs through
a private plain cursor, so a caller's ``row_factory`` or cursor factory never sees or changes anything.
Nothing here runs on a healthy result: the guard reads the catalog only once duplicates were found, and
keeps the facts per connection (``core.explain``) until ``sqlite_schema_version`` changes.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

__all__ = [
    "ForeignKey",
    "SchemaFacts",
    "TableFacts",
    "read_duckdb_schema",
    "read_postgres_schema",
    "read_sqlite_schema",
    "sqlite_schema_version",
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
class TableFacts:
    """What the catalog says about one table or view."""

    name: str
    """The table's name as declared."""

    schema: str = "main"
    """The schema (SQLite: ``main``, ``temp`` or an attached name) it lives in."""

    columns: tuple[str, ...] = ()
    """Column names as declared, in order."""

    keys: tuple[frozenset[str], ...] = ()
    """Every declared key as a set of lower-cased column names (see the module's NULL rule)."""

    not_null: frozenset[str] = frozenset()
    """Lower-cased columns that cannot hold NULL (declared NOT NULL, or part of the primary key)."""

    foreign_keys: tuple[ForeignKey, ...] = ()
    """Declared foreign keys."""

    is_view: bool = False
    """Whether the name is a view (views carry no keys)."""

    @property
    def column_names(self) -> frozenset[str]:
        """The lower-cased column names."""
        return frozenset(c.lower() for c in self.columns)

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
    """Lower-cased schema names in the order an unqualified name is resolved (SQLite: temp, main, attached)."""

    _by_name: dict[tuple[str, str], TableFacts] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for facts in self.tables:
            self._by_name.setdefault((facts.schema.lower(), facts.name.lower()), facts)

    def table(self, name: str, schema: str | None = None) -> TableFacts | None:
        """The facts of ``schema.name``, or of ``name`` resolved along ``search_order``; None if unknown."""
        lowered = name.lower()
        if schema:
            return self._by_name.get((schema.lower(), lowered))
        for candidate in self.search_order:
            found = self._by_name.get((candidate, lowered))
            if found is not None:
                return found
        return None


# ---------------------------------------------------------------------------------------------- SQLite


def _text(value: Any) -> str:
    """A catalog value as text, whatever the connection's ``text_factory`` made of it."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    return "" if value is None else str(value)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _raw_sqlite(con: Any) -> sqlite3.Connection:
    """The real ``sqlite3.Connection`` behind a proxy (wrapt proxies expose ``__wrapped__``)."""
    for _ in range(8):  # a proxy passes isinstance() checks, so unwrap whatever exposes __wrapped__
        inner = getattr(con, "__wrapped__", None)
        if inner is None:
            break
        con = inner
    if not issubclass(type(con), sqlite3.Connection):
        raise TypeError("not a sqlite3 connection")
    return cast(sqlite3.Connection, con)


def _close(cur: sqlite3.Cursor) -> None:
    try:
        cur.close()
    except sqlite3.Error:
        pass


def _rows(cur: sqlite3.Cursor, sql: str) -> list[tuple[Any, ...]]:
    try:
        return list(cur.execute(sql).fetchall())
    except sqlite3.Error:
        return []


def _sqlite_schemas(cur: sqlite3.Cursor) -> list[str]:
    """Schema names in SQLite's resolution order for unqualified names: temp, main, then attached."""
    names = [_text(row[1]) for row in _rows(cur, "PRAGMA database_list")]
    attached = [n for n in names if n.lower() not in ("main", "temp")]
    return ["temp", "main", *attached]


_WITHOUT_ROWID = re.compile(r"\bwithout\s+rowid\b", re.IGNORECASE)
_ROWID_NAMES = ("rowid", "oid", "_rowid_")
_ROWID_SET = frozenset(_ROWID_NAMES)


def _sqlite_table(cur: sqlite3.Cursor, schema: str, name: str, kind: str, sql: str) -> TableFacts:
    prefix = f"PRAGMA {_quote(schema)}."
    info = _rows(cur, f"{prefix}table_xinfo({_quote(name)})") or _rows(cur, f"{prefix}table_info({_quote(name)})")
    columns = tuple(_text(row[1]) for row in info)
    lowered = {c.lower() for c in columns}
    if kind == "view":
        return TableFacts(name, schema, columns, is_view=True)
    virtual = sql.lstrip().upper().startswith("CREATE VIRTUAL")
    not_null = {_text(row[1]).lower() for row in info if row[3]}
    pk = [(int(row[5]), _text(row[1]).lower()) for row in info if row[5]]
    keys: list[frozenset[str]] = []
    if pk:
        pk_columns = frozenset(c for _, c in sorted(pk))
        keys.append(pk_columns)
        not_null |= pk_columns
    if not virtual and not _WITHOUT_ROWID.search(sql):
        for alias in _ROWID_NAMES:
            if alias not in lowered:
                keys.append(frozenset({alias}))
                not_null.add(alias)
    for row in _rows(cur, f"{prefix}index_list({_quote(name)})"):
        unique = bool(row[2])
        partial = bool(row[4]) if len(row) > 4 else False
        if not unique or partial:
            continue
        index_columns = _rows(cur, f"{prefix}index_info({_quote(_text(row[1]))})")
        names = [_text(r[2]).lower() if r[2] is not None else "" for r in index_columns]
        if names and all(names):  # an expression column (name NULL) is not a column key
            keys.append(frozenset(names))
    foreign: dict[int, list[tuple[Any, ...]]] = {}
    for row in _rows(cur, f"{prefix}foreign_key_list({_quote(name)})"):
        foreign.setdefault(int(row[0]), []).append(row)
    fks = tuple(
        ForeignKey(
            tuple(_text(r[3]) for r in parts),
            _text(parts[0][2]),
            tuple(_text(r[4]) for r in parts if r[4] is not None),
        )
        for parts in (sorted(rows, key=lambda r: int(r[1])) for rows in foreign.values())
    )
    return TableFacts(name, schema, columns, _unique_keys(keys), frozenset(not_null), fks)


def _unique_keys(keys: Iterable[frozenset[str]]) -> tuple[frozenset[str], ...]:
    """Keys without repeats, smallest first."""
    out: list[frozenset[str]] = []
    for key in sorted(set(keys), key=lambda k: (bool(k & _ROWID_SET), len(k), sorted(k))):
        if key:
            out.append(key)
    return tuple(out)


def read_sqlite_schema(con: Any) -> SchemaFacts:
    """Read every table and view of ``main``, ``temp`` and each attached schema. Never raises."""
    try:
        raw = _raw_sqlite(con)
        cur = sqlite3.Cursor(raw)
    except (TypeError, sqlite3.Error):
        return SchemaFacts()
    cur.row_factory = None
    try:
        order = _sqlite_schemas(cur)
        tables: list[TableFacts] = []
        for schema in order:
            master = "sqlite_temp_master" if schema.lower() == "temp" else f"{_quote(schema)}.sqlite_master"
            listed = _rows(cur, f"SELECT type, name, sql FROM {master} WHERE type IN ('table', 'view')")
            for kind, name, sql in listed:
                tables.append(_sqlite_table(cur, schema, _text(name), _text(kind), _text(sql)))
        return SchemaFacts(tuple(tables), tuple(s.lower() for s in order))
    finally:
        _close(cur)


def sqlite_schema_version(
    con: Any, names: Iterable[str] | None = None, cursor: sqlite3.Cursor | None = None
) -> tuple[tuple[str, int], ...]:
    """``PRAGMA schema_version`` of every schema (temp included), for cache invalidation.

    Any DDL, ATTACH or DETACH changes the answer, also through another connection. ``names``: the
    schemas of an earlier answer, which saves ``PRAGMA database_list`` (a schema detached since
    answers ``()``, a token that matches nothing); ``cursor``: a plain ``sqlite3.Cursor`` on ``con``
    (``row_factory`` None) to reuse instead of creating one. Costs a few microseconds per schema.
    """
    own = cursor is None
    try:
        cur = sqlite3.Cursor(_raw_sqlite(con)) if cursor is None else cursor
    except (TypeError, sqlite3.Error):
        return ()
    if own:
        cur.row_factory = None
    try:
        if names is None:
            if not _rows(cur, "PRAGMA database_list"):
                return ()  # closed or unusable connection
            names = _sqlite_schemas(cur)
        out: list[tuple[str, int]] = []
        for schema in names:
            try:
                # fetchall, not fetchone: the statement must finish, or it keeps the database busy
                # (a backup into this connection would fail with "destination database is in use").
                row = cur.execute(f"PRAGMA {_quote(schema)}.schema_version").fetchall()
            except sqlite3.Error:  # detached since, or the connection closed
                return ()
            out.append((schema.lower(), int(row[0][0]) if row else -1))
        return tuple(out)
    finally:
        if own:
            _close(cur)


# ---------------------------------------------------------------------------------------------- DuckDB


def _strip_identifier(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1].replace('""', '"')
    return text


def read_duckdb_schema(con: Any) -> SchemaFacts:
    """Read a DuckDB connection's tables, views and key constraints. Never raises.

    Tables of the current database are filed under their schema name; temporary tables under ``temp``;
    those of other attached databases under ``database.schema`` (and ``database`` for its ``main``).

    Inside an explicit transaction the reads run on a duplicate cursor, because DuckDB has no
    savepoints and a failing read would abort the caller's transaction; that cursor does not see the
    caller's temporary tables or uncommitted DDL (they get no keys). Otherwise they run on ``con``.
    """
    from .engines import DUCKDB

    try:
        reader = con.cursor() if DUCKDB.in_explicit_transaction(con) else con
    except Exception:
        return SchemaFacts()

    def fetch(sql: str) -> list[tuple[Any, ...]]:
        try:
            return list(reader.execute(sql).fetchall())
        except Exception:  # duckdb raises its own hierarchy; an odd catalog just has no facts
            return []

    try:
        return _read_duckdb_catalog(fetch)
    finally:
        if reader is not con:
            try:
                reader.close()
            except Exception:
                pass


def _read_duckdb_catalog(fetch: Callable[[str], list[tuple[Any, ...]]]) -> SchemaFacts:

    current = fetch("SELECT current_database(), current_schema(), current_setting('search_path')")
    database, default_schema = (str(current[0][0]), str(current[0][1])) if current else ("memory", "main")
    path = [p.strip().strip('"') for p in str(current[0][2] or "").split(",") if p.strip()] if current else []

    def schema_of(db: str, schema: str) -> str:
        if db == "temp":
            return "temp"
        if db == database:
            return schema
        return db if schema == "main" else f"{db}.{schema}"

    columns: dict[tuple[str, str], list[tuple[int, str, bool]]] = {}
    for db, schema, table, column, nullable, index in fetch(
        "SELECT database_name, schema_name, table_name, column_name, is_nullable, column_index FROM duckdb_columns()"
    ):
        columns.setdefault((schema_of(db, schema), table), []).append((int(index), column, bool(nullable)))
    keys: dict[tuple[str, str], list[frozenset[str]]] = {}
    fks: dict[tuple[str, str], list[ForeignKey]] = {}
    for db, schema, table, kind, names, referenced, ref_names in fetch(
        "SELECT database_name, schema_name, table_name, constraint_type, constraint_column_names, "
        "referenced_table, referenced_column_names FROM duckdb_constraints()"
    ):
        where = (schema_of(db, schema), table)
        if kind in ("PRIMARY KEY", "UNIQUE") and names:
            keys.setdefault(where, []).append(frozenset(str(n).lower() for n in names))
        elif kind == "FOREIGN KEY" and names and referenced:
            fks.setdefault(where, []).append(ForeignKey(tuple(names), str(referenced), tuple(ref_names or ())))
    for db, schema, table, expressions in fetch(
        "SELECT database_name, schema_name, table_name, expressions FROM duckdb_indexes() WHERE is_unique"
    ):
        parts = [_strip_identifier(p) for p in str(expressions or "").strip("[]").split(",")]
        where = (schema_of(db, schema), table)
        known = {name.lower() for _, name, _ in columns.get(where, [])}
        if parts and all(p.lower() in known for p in parts):
            keys.setdefault(where, []).append(frozenset(p.lower() for p in parts))
    views = {
        (schema_of(db, schema), view)
        for db, schema, view in fetch(
            "SELECT database_name, schema_name, view_name FROM duckdb_views() WHERE NOT internal"
        )
    }
    tables = {
        (schema_of(db, schema), table)
        for db, schema, table in fetch("SELECT database_name, schema_name, table_name FROM duckdb_tables()")
    }
    out = []
    for where in sorted(tables | views):
        cols = [name for _, name, _ in sorted(columns.get(where, []))]
        is_view = where in views
        not_null = frozenset(name.lower() for _, name, nullable in columns.get(where, []) if not nullable)
        table_keys = () if is_view else _unique_keys(keys.get(where, []))
        out.append(
            TableFacts(where[1], where[0], tuple(cols), table_keys, not_null, tuple(fks.get(where, [])), is_view)
        )
    order = tuple(dict.fromkeys(["temp", default_schema.lower(), *(p.lower() for p in path)]))
    return SchemaFacts(tuple(out), order)


# ------------------------------------------------------------------------------------------ PostgreSQL

_PG_RELATIONS = """
SELECT c.oid, n.nspname, c.relname, c.relkind IN ('v', 'm')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'
  AND (n.nspname NOT LIKE 'pg_temp%' OR n.oid = pg_my_temp_schema())
"""
_PG_COLUMNS = """
SELECT a.attrelid, a.attnum, a.attname, a.attnotnull
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'
"""
_PG_UNIQUE = """
SELECT i.indrelid, i.indkey::int2[], i.indisprimary
FROM pg_index i
WHERE i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL AND i.indisvalid
"""
_PG_FOREIGN = """
SELECT f.conrelid, f.conkey, r.relname, f.confrelid, f.confkey
FROM pg_constraint f JOIN pg_class r ON r.oid = f.confrelid
WHERE f.contype = 'f'
"""


def read_postgres_schema(con: Any) -> SchemaFacts:
    """Read a psycopg 3 connection's tables, views and keys (unique, non-partial, plain-column indexes,
    which include every PRIMARY KEY and UNIQUE constraint). Never raises.

    Unqualified names resolve as PostgreSQL does: the session's temporary schema, then ``search_path``.
    The reads run in a savepoint (BEGIN/ROLLBACK outside a transaction) that is always rolled back, so
    the caller's transaction state is exactly as before; a failed transaction is not read at all.
    """
    try:
        from psycopg.pq import TransactionStatus
        from psycopg.rows import tuple_row
    except ImportError:
        return SchemaFacts()
    try:
        status = con.info.transaction_status
    except Exception:
        return SchemaFacts()
    if status not in (TransactionStatus.IDLE, TransactionStatus.INTRANS):
        return SchemaFacts()  # a failed transaction runs nothing; a statement in flight must not be disturbed

    try:
        # A savepoint inside the caller's transaction (BEGIN/ROLLBACK outside one): a failing catalog
        # query can then never abort the caller's transaction, and nothing is left open.
        with con.transaction(force_rollback=True), con.cursor(row_factory=tuple_row) as cur:

            def fetch(sql: str) -> list[tuple[Any, ...]]:
                with con.transaction():  # one failing read must not poison the others
                    cur.execute(sql)
                    return list(cur.fetchall())

            path = fetch("SELECT nspname FROM pg_namespace WHERE oid = pg_my_temp_schema()")
            temp = [str(path[0][0])] if path else []
            schemas = fetch("SELECT current_schemas(true)")
            search = [str(s) for s in (schemas[0][0] if schemas else ["public"])]
            relations = {int(oid): (str(ns), str(name), bool(view)) for oid, ns, name, view in fetch(_PG_RELATIONS)}
            columns: dict[int, dict[int, tuple[str, bool]]] = {}
            for relid, num, name, notnull in fetch(_PG_COLUMNS):
                columns.setdefault(int(relid), {})[int(num)] = (str(name), bool(notnull))
            keys: dict[int, list[frozenset[str]]] = {}
            for relid, indkey, _primary in fetch(_PG_UNIQUE):
                cols = columns.get(int(relid), {})
                names = [cols.get(int(n), ("", False))[0].lower() for n in (indkey or [])]
                if names and all(names):
                    keys.setdefault(int(relid), []).append(frozenset(names))
            fks: dict[int, list[ForeignKey]] = {}
            for relid, conkey, ref_name, ref_id, confkey in fetch(_PG_FOREIGN):
                own, ref = columns.get(int(relid), {}), columns.get(int(ref_id), {})
                fks.setdefault(int(relid), []).append(
                    ForeignKey(
                        tuple(own.get(int(n), ("?", False))[0] for n in conkey or ()),
                        str(ref_name),
                        tuple(ref.get(int(n), ("?", False))[0] for n in confkey or ()),
                    )
                )
    except Exception:  # an odd catalog: no keys rather than an error
        return SchemaFacts()
    tables = []
    for oid, (ns, name, view) in relations.items():
        cols = columns.get(oid, {})
        tables.append(
            TableFacts(
                name,
                ns,
                tuple(cols[n][0] for n in sorted(cols)),
                () if view else _unique_keys(keys.get(oid, [])),
                frozenset(c.lower() for c, notnull in cols.values() if notnull),
                tuple(fks.get(oid, [])),
                view,
            )
        )
    order = tuple(s.lower() for s in [*temp, *search])
    facts = SchemaFacts(tuple(tables), order)
    for schema in temp:  # ``pg_temp`` names the session's temporary schema in SQL
        facts._by_name.update({("pg_temp", n): t for (s, n), t in facts._by_name.items() if s == schema.lower()})
    return facts
