"""Copies of SQLite databases in PostgreSQL schemas, one per database, recorded in
``guarded_sqlite.copies`` and built in one transaction under an advisory lock (see ``copy`` for the rules)."""

from __future__ import annotations

import hashlib
import re
import time
from typing import Any

from .._analysis.transpile import fold, transpile
from .._extras import install_hint
from ..errors import describe_error
from .copy_source import open_decoded, plan_notes, plan_sqlite, quote, read_batches, schema_names, source_key
from .loaders import InputError, PathLike
from .records import DatabaseCopy

DEFAULT_PG_SCHEMA_PREFIX = "spider_"
"""Prefix of the PostgreSQL schema that holds a database's copy: ``spider_<db_id>``."""

PG_META_SCHEMA = "guarded_sqlite"
PG_META_TABLE = "copies"

_PG_LOCK_KEY = 0x67_75_61_72_64_65_64  # "guarded": serialises copies between concurrent runs
_PG_TYPES = {"integer": "BIGINT", "real": "DOUBLE PRECISION", "text": 'TEXT COLLATE "C"', "blob": "BYTEA"}


def pg_schema_name(db_id: str, prefix: str = DEFAULT_PG_SCHEMA_PREFIX) -> str:
    """The schema holding ``db_id``'s copy: ``<prefix><db_id>`` lower-cased and made safe."""
    wanted = fold(prefix + db_id)
    safe = re.sub(r"[^a-z0-9_]", "_", wanted)
    if safe.startswith("pg_"):  # reserved for PostgreSQL's own schemas
        safe = "db_" + safe
    if safe != wanted or len(safe) > 63:
        digest = hashlib.sha1(db_id.encode()).hexdigest()[:8]
        safe = f"{safe[:54]}_{digest}"
    return safe


def connect_postgres(dsn: str) -> Any:
    """A psycopg connection in autocommit mode, or ``InputError`` saying why there is none."""
    try:
        import psycopg
    except ImportError:
        raise InputError(f"--engine postgres needs psycopg 3: {install_hint('postgres')}") from None
    try:
        return psycopg.connect(dsn, autocommit=True)
    except psycopg.Error as error:
        raise InputError(f"cannot connect to PostgreSQL with the given DSN: {describe_error(error)}") from None


def _ensure_meta(con: Any) -> None:
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {PG_META_SCHEMA}")
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {PG_META_SCHEMA}.{PG_META_TABLE} ("
        "schema_name text PRIMARY KEY, db_id text NOT NULL, source_path text NOT NULL, "
        "source_size bigint NOT NULL, source_mtime_ns bigint NOT NULL, loader_version integer NOT NULL, "
        "tables integer NOT NULL, rows bigint NOT NULL, notes text[] NOT NULL, seconds double precision NOT NULL, "
        "copied_at timestamptz NOT NULL DEFAULT now())"
    )


def copy_to_postgres(
    path: PathLike, db_id: str, dsn_or_connection: Any, prefix: str = DEFAULT_PG_SCHEMA_PREFIX
) -> DatabaseCopy:
    """Copy a SQLite database into the PostgreSQL schema ``pg_schema_name(db_id, prefix)``, unless
    an up-to-date copy is recorded in ``guarded_sqlite.copies``."""
    own = isinstance(dsn_or_connection, str)
    con = connect_postgres(dsn_or_connection) if own else dsn_or_connection
    try:
        con.execute("SELECT pg_advisory_lock(%s)", (_PG_LOCK_KEY,))
        try:
            return _copy_to_postgres_locked(con, path, db_id, prefix)
        finally:
            con.execute("SELECT pg_advisory_unlock(%s)", (_PG_LOCK_KEY,))
    finally:
        if own:
            con.close()


def _copy_to_postgres_locked(con: Any, path: PathLike, db_id: str, prefix: str) -> DatabaseCopy:
    started = time.perf_counter()
    schema = pg_schema_name(db_id, prefix)
    key = source_key(path)
    _ensure_meta(con)
    recorded = con.execute(
        f"SELECT source_path, source_size, source_mtime_ns, loader_version, tables, rows, notes "
        f"FROM {PG_META_SCHEMA}.{PG_META_TABLE} WHERE schema_name = %s AND to_regnamespace(%s) IS NOT NULL",
        (schema, quote(schema)),
    ).fetchone()
    if recorded is not None and tuple(recorded[:4]) == tuple(key.values()):
        return DatabaseCopy(
            db_id,
            "postgres",
            schema,
            "reused",
            round(time.perf_counter() - started, 4),
            int(recorded[4]),
            int(recorded[5]),
            tuple(recorded[6]),
        )

    plan = plan_sqlite(path)
    notes = plan_notes(plan)
    names = schema_names(path)
    source, decoder = open_decoded(path)
    rows = 0
    nul_stripped = 0
    quoted_schema = quote(schema)
    try:
        with con.transaction():
            con.execute(f"DROP SCHEMA IF EXISTS {quoted_schema} CASCADE")
            con.execute(f"CREATE SCHEMA {quoted_schema}")
            for table in plan.tables:
                target = f"{quoted_schema}.{quote(fold(table.name))}"
                columns = ", ".join(f"{quote(fold(c.name))} {_PG_TYPES[c.kind]}" for c in table.columns)
                con.execute(f"CREATE TABLE {target} ({columns})")
                text_columns = [i for i, c in enumerate(table.columns) if c.kind == "text"]
                column_list = ", ".join(quote(fold(c.name)) for c in table.columns)
                with con.cursor() as cursor, cursor.copy(f"COPY {target} ({column_list}) FROM STDIN") as copy:
                    for batch in read_batches(source, table):
                        for row in batch:
                            for i in text_columns:
                                value = row[i]
                                if value is not None and "\x00" in value:
                                    row = (*row[:i], value.replace("\x00", ""), *row[i + 1 :])
                                    nul_stripped += 1
                            copy.write_row(row)
                        rows += len(batch)
                if table.primary_key:
                    keys = ", ".join(quote(fold(column)) for column in table.primary_key)
                    try:
                        with con.transaction():
                            con.execute(f"ALTER TABLE {target} ADD PRIMARY KEY ({keys})")
                    except Exception as error:  # NULLs or duplicates that SQLite allowed
                        columns = ", ".join(table.primary_key)
                        notes.append(f"{table.name}: primary key ({columns}) not created: {describe_error(error)}")
            con.execute(f"SET LOCAL search_path TO {quoted_schema}")
            for name, create in plan.views:
                try:
                    statement = transpile(create, "postgres", names)
                    with con.transaction():
                        con.execute(statement)
                except Exception as error:  # not transpilable, or refused by PostgreSQL
                    notes.append(f"view {name} not copied: {describe_error(error)}")
            notes.extend(decoder.notes())
            if nul_stripped:
                notes.append(f"{nul_stripped} text value(s) held NUL characters, which PostgreSQL text cannot; removed")
            for table in plan.tables:
                con.execute(f"ANALYZE {quoted_schema}.{quote(fold(table.name))}")
            seconds = round(time.perf_counter() - started, 4)
            con.execute(
                f"INSERT INTO {PG_META_SCHEMA}.{PG_META_TABLE} (schema_name, db_id, source_path, source_size, "
                "source_mtime_ns, loader_version, tables, rows, notes, seconds) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (schema_name) DO UPDATE SET db_id = EXCLUDED.db_id, source_path = EXCLUDED.source_path, "
                "source_size = EXCLUDED.source_size, source_mtime_ns = EXCLUDED.source_mtime_ns, "
                "loader_version = EXCLUDED.loader_version, tables = EXCLUDED.tables, rows = EXCLUDED.rows, "
                "notes = EXCLUDED.notes, seconds = EXCLUDED.seconds, copied_at = now()",
                (schema, db_id, *key.values(), len(plan.tables), rows, notes, seconds),
            )
    finally:
        source.close()
    return DatabaseCopy(db_id, "postgres", schema, "copied", seconds, len(plan.tables), rows, tuple(notes))
