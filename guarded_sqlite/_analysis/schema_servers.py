"""Schema facts from DuckDB's and PostgreSQL's catalogs, in ``guarded_sqlite._analysis.schema``'s shape.

DuckDB: ``duckdb_columns()``, ``duckdb_constraints()``, ``duckdb_indexes()``, ``duckdb_views()``.
PostgreSQL (psycopg 3): ``pg_class``/``pg_attribute``/``pg_index``/``pg_constraint``. Keys follow
``guarded_sqlite._analysis.schema``'s rules (PRIMARY KEY, UNIQUE, unique non-partial indexes over plain
columns; PostgreSQL's unique partial indexes over plain columns as ``PartialKey``s, their predicate from
``pg_get_expr(indpred)``; DuckDB has no partial indexes). Both readers never raise, and fail closed:
when a catalog query fails they return no tables at all, so every name is unknown to the analysis
rather than keyless.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .schema import CatalogUnreadable, ForeignKey, PartialKey, SchemaFacts, TableFacts, fold, unique_keys

__all__ = ["read_duckdb_schema", "read_postgres_schema"]


# ---------------------------------------------------------------------------------------------- DuckDB


def _strip_identifier(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1].replace('""', '"')
    return text


def read_duckdb_schema(con: Any) -> SchemaFacts:
    """Read a DuckDB connection's tables, views and key constraints. Never raises: if any catalog query
    fails, no table is known (rather than every table keyless).

    Tables of the current database are filed under their schema name; temporary tables under ``temp``;
    those of other attached databases under ``database.schema`` (and ``database`` for its ``main``).

    Inside an explicit transaction the reads run on a duplicate cursor, because DuckDB has no
    savepoints and a failing read would abort the caller's transaction; that cursor does not see the
    caller's temporary tables or uncommitted DDL (they get no keys). Otherwise they run on ``con``.
    """
    from .._engines import DUCKDB

    try:
        reader = con.cursor() if DUCKDB.in_explicit_transaction(con) else con
    except Exception:
        return SchemaFacts()

    def fetch(sql: str) -> list[tuple[Any, ...]]:
        try:
            return list(reader.execute(sql).fetchall())
        except Exception as error:  # duckdb raises its own hierarchy
            raise CatalogUnreadable(f"{type(error).__name__}: {error}") from None

    try:
        return _read_duckdb_catalog(fetch)
    except CatalogUnreadable:  # no tables at all: every name is unknown, never "keyless"
        return SchemaFacts()
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
            keys.setdefault(where, []).append(frozenset(fold(str(n)) for n in names))
        elif kind == "FOREIGN KEY" and names and referenced:
            fks.setdefault(where, []).append(ForeignKey(tuple(names), str(referenced), tuple(ref_names or ())))
    for db, schema, table, expressions in fetch(
        "SELECT database_name, schema_name, table_name, expressions FROM duckdb_indexes() WHERE is_unique"
    ):
        parts = [_strip_identifier(p) for p in str(expressions or "").strip("[]").split(",")]
        where = (schema_of(db, schema), table)
        known = {fold(name) for _, name, _ in columns.get(where, [])}
        if parts and all(fold(p) in known for p in parts):
            keys.setdefault(where, []).append(frozenset(fold(p) for p in parts))
    views = {
        (schema_of(db, schema), view): str(sql or "")
        for db, schema, view, sql in fetch(
            "SELECT database_name, schema_name, view_name, sql FROM duckdb_views() WHERE NOT internal"
        )
    }
    tables = {
        (schema_of(db, schema), table)
        for db, schema, table in fetch("SELECT database_name, schema_name, table_name FROM duckdb_tables()")
    }
    out = []
    for where in sorted(tables | set(views)):
        cols = [name for _, name, _ in sorted(columns.get(where, []))]
        is_view = where in views
        not_null = frozenset(fold(name) for _, name, nullable in columns.get(where, []) if not nullable)
        table_keys = () if is_view else unique_keys(keys.get(where, []))
        out.append(
            TableFacts(
                where[1],
                where[0],
                tuple(cols),
                table_keys,
                not_null,
                tuple(fks.get(where, [])),
                is_view,
                view_sql=views.get(where, ""),
            )
        )
    order = tuple(dict.fromkeys(["temp", fold(default_schema), *(fold(p) for p in path)]))
    return SchemaFacts(tuple(out), order)


# ------------------------------------------------------------------------------------------ PostgreSQL

_PG_RELATIONS = """
SELECT c.oid, n.nspname, c.relname, c.relkind IN ('v', 'm'), c.relkind = 'f',
  CASE WHEN c.relkind = 'v' THEN pg_get_viewdef(c.oid) END
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'
  AND (n.nspname NOT LIKE 'pg_temp%' OR n.oid = pg_my_temp_schema())
"""
"""The tables and views, with a plain view's body (a materialized view's rows are stored: its body is
not read through)."""
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
_PG_PARTIAL = """
SELECT i.indrelid, i.indkey::int2[], pg_get_expr(i.indpred, i.indrelid)
FROM pg_index i
WHERE i.indisunique AND i.indpred IS NOT NULL AND i.indexprs IS NULL AND i.indisvalid
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
            relations = {
                int(oid): (str(ns), str(name), bool(view), bool(foreign), str(body or ""))
                for oid, ns, name, view, foreign, body in fetch(_PG_RELATIONS)
            }
            columns: dict[int, dict[int, tuple[str, bool]]] = {}
            for relid, num, name, notnull in fetch(_PG_COLUMNS):
                columns.setdefault(int(relid), {})[int(num)] = (str(name), bool(notnull))
            keys: dict[int, list[frozenset[str]]] = {}
            for relid, indkey, _primary in fetch(_PG_UNIQUE):
                cols = columns.get(int(relid), {})
                names = [fold(cols.get(int(n), ("", False))[0]) for n in (indkey or [])]
                if names and all(names):
                    keys.setdefault(int(relid), []).append(frozenset(names))
            partial: dict[int, list[PartialKey]] = {}
            for relid, indkey, predicate in fetch(_PG_PARTIAL):
                cols = columns.get(int(relid), {})
                names = [fold(cols.get(int(n), ("", False))[0]) for n in (indkey or [])]
                if names and all(names) and predicate:
                    partial.setdefault(int(relid), []).append(PartialKey(frozenset(names), str(predicate)))
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
    for oid, (ns, name, view, foreign, body) in relations.items():
        cols = columns.get(oid, {})
        tables.append(
            TableFacts(
                name,
                ns,
                tuple(cols[n][0] for n in sorted(cols)),
                () if view else unique_keys(keys.get(oid, [])),
                frozenset(fold(c) for c, notnull in cols.values() if notnull),
                tuple(fks.get(oid, [])),
                view,
                partial_keys=() if view else tuple(partial.get(oid, [])),
                foreign=foreign,
                view_sql=_pg_create_view(ns, name, body),
            )
        )
    order = tuple(fold(s) for s in [*temp, *search])
    facts = SchemaFacts(tuple(tables), order)
    for schema in temp:  # ``pg_temp`` names the session's temporary schema in SQL
        facts._by_name.update({("pg_temp", n): t for (s, n), t in facts._by_name.items() if s == fold(schema)})
    return facts


def _pg_create_view(schema: str, name: str, body: str) -> str:
    """The ``CREATE VIEW`` text of a plain view from ``pg_get_viewdef``'s body, or ""."""
    body = body.strip().rstrip(";")
    if not body:
        return ""
    quoted = ".".join('"' + part.replace('"', '""') + '"' for part in (schema, name))
    return f"CREATE VIEW {quoted} AS {body}"
