"""Copies of SQLite databases in DuckDB, PostgreSQL, MySQL/MariaDB and ClickHouse (chDB), so that the
same gold and predictions can be evaluated on those engines. ClickHouse's copies are
``copy_clickhouse``'s (one chDB folder, a database per SQLite file, names lower-cased, ``Int64``,
``Float64``, ``String``, each ``Nullable`` but for a primary key without NULLs, which orders the table).

**Where the copies go.** DuckDB: one ``.duckdb`` file per SQLite database in a cache folder
(``--cache-dir``; default ``$XDG_CACHE_HOME/guarded_sqlite/duckdb``), with a small JSON file next to
it that records what it was copied from. PostgreSQL: one schema per database on the server the user
runs (``--pg-dsn``), named ``spider_<db_id>`` (lower-cased; characters other than ``[a-z0-9_]``
become ``_`` and a short hash is appended when that or the 63-byte limit changed the name), with one
row per copy in the metadata table ``guarded_sqlite.copies``. MySQL/MariaDB: one database per SQLite
database on the server the user runs (``--mysql-url``), named ``spider_<db_id>`` by the same rules
(64 characters at most), recorded in the table ``guarded_sqlite.copies`` of the database
``guarded_sqlite``.

**Idempotent.** A copy is redone only when the SQLite file's resolved path, size or modification
time, or this loader's version (``LOADER_VERSION``; DuckDB's version too, for DuckDB files), differ
from what was recorded — otherwise it is reused as it is. A PostgreSQL copy is built in one
transaction (drop schema, create, load, record), under an advisory lock, so a concurrent or failed
run never leaves a half-built schema recorded as current. MySQL's DDL is not transactional: there
the record is removed before a database is rebuilt and written once it is complete, under
``GET_LOCK``, with the same effect; the text collation is part of what is recorded.

**Names.** DuckDB keeps SQLite's table and column names (DuckDB matches identifiers
case-insensitively, quoted or not, as SQLite does). PostgreSQL gets them lower-cased (ASCII, as
SQLite folds): transpiled queries quote every identifier in lower case (see ``transpile``), so
``Country``, ``country`` and ``"COUNTRY"`` all resolve, as they do in SQLite. MySQL/MariaDB gets
lower-cased names too (its table names are case-sensitive on Linux, its column names never are).

**Types.** SQLite stores a value per row with its own storage class; the other engines need one
type per column. Each column's type is chosen from the values it actually holds (one scan per table):

=====================  ===========================  ==================  ========================
values held            PostgreSQL                   DuckDB              MySQL/MariaDB
(NULLs aside)
=====================  ===========================  ==================  ========================
only integers          ``BIGINT``                   ``BIGINT``          ``BIGINT``
only reals             ``DOUBLE PRECISION``         ``DOUBLE``          ``DOUBLE``
integers and reals     ``DOUBLE PRECISION``         ``DOUBLE``          ``DOUBLE``
                       (noted)                      (noted)             (noted)
only text              ``TEXT COLLATE "C"``         ``VARCHAR``         ``LONGTEXT``; in a
                                                                        primary key ``VARCHAR(n)``
only blobs             ``BYTEA``                    ``BLOB``            ``LONGBLOB``
text or blobs mixed    ``TEXT COLLATE "C"``         ``VARCHAR``         as text (noted)
with anything else     (noted)                      (noted)
no values (empty or    from the declared type's     same                same
all NULL)              affinity
=====================  ===========================  ==================  ========================

Declared types do not decide non-empty columns, because SQLite does not enforce them: a
``DECIMAL(19,4)`` column holding integers and reals becomes ``DOUBLE PRECISION``. Empty columns take
their SQLite affinity (``INTEGER`` → ``BIGINT``, ``REAL`` → double, ``TEXT`` and untyped → text,
``NUMERIC`` → double, except date/time declarations, which SQLite stores as text, and ``BOOL``
declarations, which become ``BIGINT``). Dates stay text, compared as strings as SQLite does. Text
columns in PostgreSQL use the ``"C"`` collation, which orders like SQLite's ``BINARY`` (code points),
not by the server's locale. MySQL/MariaDB text is ``utf8mb4`` in the server's default collation for
it (``--mysql-collation`` picks another), as an application's tables would have it: on MariaDB 10.11
``utf8mb4_general_ci``, which ignores case and trailing spaces where SQLite's ``BINARY`` does not.
This is kept, not hidden: every MySQL copy's notes say how its text compares, and the evaluation lists
the gold queries whose result differs from SQLite's (``EvalReport.gold_differences``);
``utf8mb4_nopad_bin`` (MariaDB) compares as ``BINARY`` does.

**What is reported** (``DatabaseCopy.notes``): columns whose values changed type (integers widened
to floating point; numbers or blobs stored as text, converted with SQLite's own ``CAST(x AS TEXT)``),
text that was not valid UTF-8 (bytes replaced by U+FFFD), NUL characters removed for PostgreSQL
(its text type cannot hold them), primary keys the engine refused, views that could not be
transpiled, virtual tables copied as plain tables; on MySQL/MariaDB the text collation, and infinite
or NaN reals (stored as NULL).

**Primary keys** are created in PostgreSQL when the data satisfies them: PostgreSQL accepts a column
that is not in ``GROUP BY`` when the table's primary key is (SQLite accepts any), so they matter for
which queries run. DuckDB gets none (its binder does not use them for ``GROUP BY``). MySQL/MariaDB
gets them too: the guard reads keys from the server's catalog, as it reads them from SQLite's
(``ONLY_FULL_GROUP_BY``, when the server's ``sql_mode`` has it, also accepts a column of a table
whose key is grouped). A key the collation makes non-unique (``'a'`` and ``'A'``) is refused and noted.

Rows are loaded with ``COPY ... FROM STDIN`` on PostgreSQL and ``INSERT ... SELECT unnest(?)`` over
column lists on DuckDB (about 300k rows/s either way), and with PyMySQL's multi-row ``INSERT`` on
MySQL/MariaDB, in SQLite's row order.

Modules: ``copy_source`` (reading the SQLite side), ``copy_duckdb``, ``copy_postgres``,
``copy_mysql``; this one makes sure every database of an evaluation has an up-to-date copy.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping

from .._extras import install_hint
from ..errors import describe_error
from .copy_duckdb import copy_to_duckdb, default_cache_dir, duckdb_copy_path
from .copy_mysql import (
    MYSQL_META_DATABASE,
    MYSQL_META_TABLE,
    connect_mysql,
    copy_to_mysql,
    mysql_database_name,
    mysql_params,
)
from .copy_postgres import (
    DEFAULT_PG_SCHEMA_PREFIX,
    PG_META_SCHEMA,
    PG_META_TABLE,
    connect_postgres,
    copy_to_postgres,
    pg_schema_name,
)
from .copy_source import (
    LOADER_VERSION,
    ColumnPlan,
    SourcePlan,
    TablePlan,
    affinity,
    choose_kind,
    plan_sqlite,
    schema_names,
)
from .loaders import InputError, PathLike
from .options import EngineSpec
from .records import DatabaseCopy

__all__ = [
    "DEFAULT_PG_SCHEMA_PREFIX",
    "LOADER_VERSION",
    "MYSQL_META_DATABASE",
    "MYSQL_META_TABLE",
    "PG_META_SCHEMA",
    "PG_META_TABLE",
    "ColumnPlan",
    "SourcePlan",
    "TablePlan",
    "affinity",
    "choose_kind",
    "connect_mysql",
    "connect_postgres",
    "copy_to_duckdb",
    "copy_to_mysql",
    "copy_to_postgres",
    "default_cache_dir",
    "duckdb_copy_path",
    "mysql_database_name",
    "mysql_params",
    "pg_schema_name",
    "plan_sqlite",
    "prepare_copies",
    "schema_names",
]


def prepare_copies(
    engine: str,
    paths: Mapping[str, PathLike],
    pg_dsn: str | None = None,
    cache_dir: PathLike | None = None,
    pg_schema_prefix: str = DEFAULT_PG_SCHEMA_PREFIX,
    spec: EngineSpec | None = None,
) -> dict[str, DatabaseCopy]:
    """Make sure every database in ``paths`` (db_id -> SQLite file) has an up-to-date copy on ``engine``
    (MySQL/MariaDB: on the server of ``spec``, an ``EngineSpec``)."""
    copies: dict[str, DatabaseCopy] = {}
    if engine == "mysql":
        if spec is None or not spec.mysql_url:
            raise InputError("--engine mysql needs --mysql-url (e.g. mysql://root@127.0.0.1:3306)")
        con = connect_mysql(spec.mysql_url)
        import pymysql

        try:
            for db_id, path in paths.items():
                try:
                    copies[db_id] = copy_to_mysql(path, db_id, con, spec.mysql_db_prefix, spec.mysql_collation)
                except (pymysql.err.MySQLError, sqlite3.Error) as error:
                    raise InputError(f"cannot copy {db_id} into MySQL/MariaDB: {describe_error(error)}") from error
        finally:
            con.close()
    elif engine == "clickhouse":
        from .copy_clickhouse import connect_clickhouse, copy_to_clickhouse

        con = connect_clickhouse(cache_dir)
        try:
            for db_id, path in paths.items():
                try:
                    copies[db_id] = copy_to_clickhouse(path, db_id, con, cache_dir)
                except (RuntimeError, sqlite3.Error) as error:  # chDB raises ChdbError, a RuntimeError
                    raise InputError(f"cannot copy {db_id} into ClickHouse: {describe_error(error)}") from error
        finally:
            con.close()
    elif engine == "duckdb":
        try:
            import duckdb
        except ImportError:
            raise InputError(f"--engine duckdb needs duckdb: {install_hint('duckdb')}") from None
        for db_id, path in paths.items():
            try:
                copies[db_id] = copy_to_duckdb(path, db_id, cache_dir)
            except (duckdb.Error, OSError, sqlite3.Error) as error:
                raise InputError(f"cannot copy {db_id} into DuckDB: {describe_error(error)}") from error
    elif engine == "postgres":
        if not pg_dsn:
            raise InputError("--engine postgres needs --pg-dsn (a libpq connection string or URI)")
        import psycopg

        con = connect_postgres(pg_dsn)
        try:
            for db_id, path in paths.items():
                try:
                    copies[db_id] = copy_to_postgres(path, db_id, con, pg_schema_prefix)
                except (psycopg.Error, sqlite3.Error) as error:
                    raise InputError(f"cannot copy {db_id} into PostgreSQL: {describe_error(error)}") from error
        finally:
            con.close()
    else:
        raise ValueError(f"no copies for engine {engine!r}")
    return copies
