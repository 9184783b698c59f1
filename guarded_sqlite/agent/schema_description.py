"""The schema as an agent tool shows it: tables, typed columns, keys, foreign keys with their cardinality,
and row counts (``schema_info.SchemaInfo``), read from the catalog of SQLite, DuckDB, PostgreSQL,
MySQL/MariaDB or ClickHouse (only the connection's current database: the tools read one schema). A
ClickHouse table shows no keys: its ``ORDER BY`` keeps duplicate values, so none identifies a row.

Keys and foreign keys come from the same readers the guard's analysis uses (``schema``,
``schema_servers``), so what the model is told about keys is what the guard reasons with. Column types
and row counts are read here: the analysis needs neither.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .._analysis.schema import (
    CatalogUnreadable,
    SchemaFacts,
    TableFacts,
    catalog_rows,
    fold,
    plain_cursor,
    quote_identifier,
    read_sqlite_schema,
)
from .schema_info import ForeignKeyInfo, SchemaInfo, TableInfo

__all__ = ["describe", "foreign_key_cardinality"]


def describe(raw: Any, dialect: str) -> SchemaInfo:
    """Read the schema of ``raw`` (an unguarded ``sqlite3``, ``duckdb``, ``psycopg`` or ``pymysql``
    connection; MySQL's in the agent's read-only transaction, each row count limited as PostgreSQL's).

    PostgreSQL: ``raw`` must be in a transaction (the agent's read-only one); each row count runs in a
    savepoint limited to what the enclosing ``call_deadline`` has left, and is None once that is spent
    or the count fails (a table the role may not read)."""
    default_schema = "main"
    primary_keys: dict[tuple[str, str], tuple[str, ...]] = {}
    if dialect == "postgres":
        from .._analysis.schema_servers import read_postgres_schema

        facts = read_postgres_schema(raw)
        types, primary_keys, default_schema = _postgres_columns(raw)
        reader = raw
    elif dialect == "mysql":
        from .._analysis.schema_mysql import read_mysql_schema

        types, primary_keys, default_schema = _mysql_columns(raw)
        facts = read_mysql_schema(raw)
        facts = dataclasses.replace(facts, tables=tuple(t for t in facts.tables if t.schema == default_schema))
        reader = raw
    elif dialect == "clickhouse":
        facts, types, default_schema = _clickhouse_catalog(raw)
        reader = raw
    elif dialect == "duckdb":
        from .._analysis.schema_servers import read_duckdb_schema

        facts = read_duckdb_schema(raw)
        types = _duckdb_types(raw)
        reader = raw
    else:
        facts = read_sqlite_schema(raw)
        types = {}
        # One plain cursor for every read: the caller's row factory never shapes them.
        reader = plain_cursor(raw)
    try:
        tables = []
        for table in sorted(facts.tables, key=lambda t: (t.schema != default_schema, t.schema, t.name.lower())):
            if dialect == "sqlite" and table.name.lower().startswith("sqlite_"):
                continue  # SQLite's own bookkeeping (sqlite_sequence, sqlite_stat1)
            primary_key: tuple[str, ...] = primary_keys.get((table.schema, table.name), ())
            if dialect == "sqlite":
                columns, primary_key = _sqlite_columns(reader, table)
            else:
                columns = types.get((table.schema, table.name)) or tuple((c, "") for c in table.columns)
            if dialect == "postgres":
                count = None if table.is_view else _postgres_row_count(raw, table)
            elif dialect == "mysql":
                count = None if table.is_view else _mysql_row_count(raw, table)
            elif dialect == "clickhouse":
                count = None if table.is_view else _clickhouse_row_count(raw, table)
            else:
                count = None if table.is_view else _row_count(reader, table)
            keys = _declared_keys(table)
            # The primary key first: it is the one a model should join through.
            keys = tuple(sorted(keys, key=lambda key: set(key) != set(primary_key)))
            tables.append(
                TableInfo(
                    name=table.name,
                    schema=table.schema,
                    kind="view" if table.is_view else "table",
                    columns=columns,
                    keys=keys,
                    foreign_keys=tuple(_foreign_key(table, fk, facts) for fk in table.foreign_keys),
                    row_count=count,
                )
            )
    finally:
        if reader is not raw:
            reader.close()
    return SchemaInfo(dialect, tuple(tables), default_schema)


def _declared_keys(table: TableFacts) -> tuple[tuple[str, ...], ...]:
    """The keys as declared column names, without SQLite's implicit ``rowid`` key (not a column the
    model sees with ``SELECT *``)."""
    by_fold = {fold(column): column for column in table.columns}
    keys = []
    for key in table.keys:
        if not key <= by_fold.keys():
            continue
        keys.append(tuple(by_fold[name] for name in sorted(key, key=list(by_fold).index)))
    return tuple(keys)


def foreign_key_cardinality(
    referencing: TableFacts, columns: tuple[str, ...], referenced: TableFacts | None, ref_columns: tuple[str, ...]
) -> str:
    """``"one-to-one"``, ``"many-to-one"`` or ``"unknown"`` for a foreign key (see ``ForeignKeyInfo``).

    >>> child = TableFacts("orders", columns=("id", "customer_id"), keys=(frozenset({"id"}),),
    ...                    not_null=frozenset({"id"}))
    >>> parent = TableFacts("customers", columns=("id",), keys=(frozenset({"id"}),), not_null=frozenset({"id"}))
    >>> foreign_key_cardinality(child, ("customer_id",), parent, ("id",))
    'many-to-one'
    >>> foreign_key_cardinality(child, ("id",), parent, ("id",))
    'one-to-one'
    >>> foreign_key_cardinality(child, ("customer_id",), parent, ("name",))
    'unknown'
    """
    target = frozenset(fold(c) for c in ref_columns)
    if referenced is None or not target or not any(key <= target for key in referenced.keys):
        return "unknown"
    source = frozenset(fold(c) for c in columns)
    return "one-to-one" if any(key <= source for key in referencing.identity_keys) else "many-to-one"


def _foreign_key(table: TableFacts, fk: Any, facts: SchemaFacts) -> ForeignKeyInfo:
    referenced = facts.table(fk.table, table.schema) or facts.table(fk.table)
    ref_columns = tuple(fk.ref_columns)
    if not ref_columns and referenced is not None:
        # A bare REFERENCES t names t's primary key; the first declared key of its columns stands for it.
        declared = _declared_keys(referenced)
        ref_columns = declared[0] if declared else ()
    return ForeignKeyInfo(
        columns=tuple(fk.columns),
        table=fk.table,
        ref_columns=ref_columns,
        cardinality=foreign_key_cardinality(table, tuple(fk.columns), referenced, ref_columns),
    )


def _qualified(table: TableFacts) -> str:
    return ".".join(quote_identifier(part) for part in table.schema.split(".")) + "." + quote_identifier(table.name)


def _sqlite_columns(cur: Any, table: TableFacts) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """``(name, declared type)`` of each column, and the primary key's columns in key order."""
    try:
        rows = catalog_rows(cur, f"PRAGMA {quote_identifier(table.schema)}.table_xinfo({quote_identifier(table.name)})")
    except CatalogUnreadable:
        return tuple((column, "") for column in table.columns), ()
    # table_xinfo's hidden column: 0 for ordinary columns, 2/3 for generated ones (shown), 1 for a
    # virtual table's hidden columns (not shown by SELECT *).
    columns = tuple((str(row[1]), str(row[2] or "")) for row in rows if row[6] != 1)
    primary_key = tuple(str(row[1]) for row in sorted((row for row in rows if row[5]), key=lambda row: row[5]))
    return columns, primary_key


def _duckdb_types(raw: Any) -> dict[tuple[str, str], tuple[tuple[str, str], ...]]:
    try:
        rows = raw.execute(
            "SELECT schema_name, table_name, column_name, data_type FROM duckdb_columns() "
            "WHERE database_name = current_database() ORDER BY schema_name, table_name, column_index"
        ).fetchall()
    except Exception:  # duckdb raises its own hierarchy; types are a courtesy, keys come from elsewhere
        return {}
    types: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for schema, name, column, kind in rows:
        types.setdefault((str(schema), str(name)), []).append((str(column), str(kind)))
    return {key: tuple(value) for key, value in types.items()}


_PG_COLUMN_TYPES = """
SELECT n.nspname, c.relname, a.attname, format_type(a.atttypid, a.atttypmod)
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'
ORDER BY n.nspname, c.relname, a.attnum
"""
_PG_PRIMARY_KEYS = """
SELECT n.nspname, c.relname, a.attname
FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, position) ON true
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indisprimary ORDER BY n.nspname, c.relname, k.position
"""


def _postgres_columns(
    raw: Any,
) -> tuple[dict[tuple[str, str], tuple[tuple[str, str], ...]], dict[tuple[str, str], tuple[str, ...]], str]:
    """Column types (``format_type``: ``integer``, ``character varying(20)``), primary keys in key order,
    and ``current_schema()``. Keys themselves come from ``read_postgres_schema``, as the guard's do; a
    failed read leaves types empty (a courtesy) rather than failing the schema."""
    from psycopg.rows import tuple_row

    types: dict[tuple[str, str], list[tuple[str, str]]] = {}
    primary: dict[tuple[str, str], list[str]] = {}
    default_schema = "public"
    try:
        with raw.transaction(), raw.cursor(row_factory=tuple_row) as cur:
            for schema, name, column, kind in cur.execute(_PG_COLUMN_TYPES).fetchall():
                types.setdefault((str(schema), str(name)), []).append((str(column), str(kind)))
            for schema, name, column in cur.execute(_PG_PRIMARY_KEYS).fetchall():
                primary.setdefault((str(schema), str(name)), []).append(str(column))
            row = cur.execute("SELECT current_schema()").fetchone()
            if row is not None and row[0] is not None:
                default_schema = str(row[0])
    except Exception:  # psycopg's errors; the savepoint keeps the transaction usable
        pass
    return (
        {key: tuple(value) for key, value in types.items()},
        {key: tuple(value) for key, value in primary.items()},
        default_schema,
    )


def _postgres_row_count(raw: Any, table: TableFacts) -> int | None:
    """``COUNT(*)`` in a savepoint, limited to what the call has left; None when nothing is left or the
    count fails. A full count of a large table is what can take long on a server."""
    from psycopg.rows import tuple_row

    from .._core.deadlines import time_left
    from .._engines.postgres import pg_statement_timeout

    left = time_left(None)
    if left is not None and left <= 0:
        return None
    try:
        with raw.transaction(), raw.cursor(row_factory=tuple_row) as cur:
            timeout = pg_statement_timeout(left)
            if timeout is not None:
                cur.execute("SELECT set_config('statement_timeout', %s, true)", (timeout,))
            row = cur.execute(f"SELECT COUNT(*) FROM {_qualified(table)}").fetchone()
    except Exception:  # a table the role may not read, or out of time
        return None
    return int(row[0]) if row is not None else None


def _row_count(reader: Any, table: TableFacts) -> int | None:
    """``reader``: a plain sqlite3 cursor or a DuckDB connection; both have ``execute().fetchone()``."""
    try:
        row = reader.execute(f"SELECT COUNT(*) FROM {_qualified(table)}").fetchone()
    except Exception:  # an unreadable table (a virtual table's module missing) has no count to show
        return None
    return int(row[0]) if row is not None else None


_MY_COLUMN_TYPES = (
    "SELECT table_name, column_name, column_type FROM information_schema.columns WHERE table_schema = DATABASE() "
    "ORDER BY table_name, ordinal_position"
)
_MY_PRIMARY_KEYS = (
    "SELECT table_name, column_name FROM information_schema.statistics WHERE table_schema = DATABASE() "
    "AND index_name = 'PRIMARY' ORDER BY table_name, seq_in_index"
)


def _mysql_columns(
    raw: Any,
) -> tuple[dict[tuple[str, str], tuple[tuple[str, str], ...]], dict[tuple[str, str], tuple[str, ...]], str]:
    """Column types (``int(11)``, ``varchar(20)``), primary keys in key order, and ``DATABASE()``, for
    the connection's current database; a failed read leaves types empty rather than failing."""
    import pymysql

    types: dict[tuple[str, str], list[tuple[str, str]]] = {}
    primary: dict[tuple[str, str], list[str]] = {}
    database = ""
    try:
        with raw.cursor(pymysql.cursors.Cursor) as cur:
            cur.execute("SELECT DATABASE()")
            row = cur.fetchone()
            database = "" if row is None or row[0] is None else str(row[0])
            cur.execute(_MY_COLUMN_TYPES)
            for name, column, kind in cur.fetchall():
                types.setdefault((database, str(name)), []).append((str(column), str(kind)))
            cur.execute(_MY_PRIMARY_KEYS)
            for name, column in cur.fetchall():
                primary.setdefault((database, str(name)), []).append(str(column))
    except pymysql.MySQLError:
        pass
    return (
        {key: tuple(value) for key, value in types.items()},
        {key: tuple(value) for key, value in primary.items()},
        database,
    )


def _mysql_row_count(raw: Any, table: TableFacts) -> int | None:
    """``COUNT(*)`` limited to what the call has left (MariaDB's ``SET STATEMENT max_statement_time``,
    MySQL's ``MAX_EXECUTION_TIME`` hint); None when nothing is left or the count fails."""
    import pymysql

    from .._core.deadlines import time_left
    from .._engines.mysql import is_mariadb

    left = time_left(None)
    if left is not None and left <= 0:
        return None
    name = ".".join("`" + part.replace("`", "``") + "`" for part in (table.schema, table.name))
    sql = f"SELECT COUNT(*) FROM {name}"
    if left is not None and is_mariadb(raw):
        sql = f"SET STATEMENT max_statement_time = {max(left, 0.001):.3f} FOR {sql}"
    elif left is not None:
        sql = f"SELECT /*+ MAX_EXECUTION_TIME({max(1, int(left * 1000))}) */ COUNT(*) FROM {name}"
    try:
        with raw.cursor(pymysql.cursors.Cursor) as cur:
            cur.execute(sql)
            row = cur.fetchone()
    except pymysql.MySQLError:  # a table the account may not read, or out of time
        return None
    return int(row[0]) if row is not None else None


_CH_COLUMNS = "SELECT table, name, type FROM system.columns WHERE database = currentDatabase() ORDER BY table, position"


def _clickhouse_catalog(raw: Any) -> tuple[SchemaFacts, dict[tuple[str, str], tuple[tuple[str, str], ...]], str]:
    """The current database's tables (without keys: ClickHouse enforces none), their column types, and
    the database's name, read on a cursor of the agent's own (read-only) session."""
    from .._analysis.schema_clickhouse import read_clickhouse_schema

    def fetch(sql: str) -> list[Any]:
        cur = raw.cursor()
        try:
            cur.execute(sql)
            return list(cur.fetchall())
        finally:
            cur.close()

    catalog = read_clickhouse_schema(fetch)
    database = catalog.facts.search_order[0] if catalog.facts.search_order else ""
    tables = tuple(t for t in catalog.facts.tables if fold(t.schema) == database)
    types: dict[tuple[str, str], list[tuple[str, str]]] = {}
    try:
        current = str(fetch("SELECT currentDatabase()")[0][0])
        for table, column, kind in fetch(_CH_COLUMNS):
            types.setdefault((current, str(table)), []).append((str(column), str(kind)))
    except Exception:  # types are a courtesy: the names come from the facts
        current = tables[0].schema if tables else database
    facts = SchemaFacts(tables, catalog.facts.search_order)
    return facts, {key: tuple(value) for key, value in types.items()}, current


def _clickhouse_row_count(raw: Any, table: TableFacts) -> int | None:
    """``count()`` under the session's own time limit; None when it fails."""
    name = ".".join("`" + part.replace("\\", "\\\\").replace("`", "\\`") + "`" for part in (table.schema, table.name))
    cur = raw.cursor()
    try:
        cur.execute(f"SELECT count() FROM {name}")
        rows = cur.fetchall()
    except Exception:  # a table whose engine cannot be read here (a URL table in a read-only session)
        return None
    finally:
        cur.close()
    return int(rows[0][0]) if rows else None
