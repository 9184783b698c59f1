"""Copies of SQLite databases in MySQL or MariaDB, one database per SQLite file, recorded in
``guarded_sqlite.copies`` and built under a named lock (see ``copy`` for the rules).

MySQL's DDL is not transactional, so a copy cannot be built in one transaction as on PostgreSQL.
Instead its record is deleted before the old database is dropped and written only once the new one
is complete: a failed or interrupted run leaves a database that is not recorded as current, and the
next run builds it again. ``GET_LOCK`` serialises copies between concurrent runs.

pymysql is imported only when a copy is made.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
import urllib.parse
from typing import Any

from .._analysis.transpile import fold, transpile
from .._extras import install_hint
from ..errors import describe_error
from .copy_source import TablePlan, open_decoded, plan_notes, plan_sqlite, quote, read_batches, schema_names, source_key
from .loaders import InputError, PathLike
from .records import DatabaseCopy

MYSQL_META_DATABASE = "guarded_sqlite"
MYSQL_META_TABLE = "copies"

_LOCK = "guarded_sqlite.copies"
_LOCK_WAIT_S = 600
_MAX_NAME = 64  # MySQL's limit for database, table and column names
_KEY_CHARS = 768  # InnoDB's 3,072-byte index key over utf8mb4's 4 bytes per character
_RESERVED = frozenset({"mysql", "information_schema", "performance_schema", "sys", MYSQL_META_DATABASE})
_BATCH_ROWS = 2_000
_URL_OPTIONS = {"unix_socket": str, "connect_timeout": int}
_SCHEMES = ("mysql", "mariadb", "mysql+pymysql", "mariadb+pymysql")


def mysql_database_name(db_id: str, prefix: str) -> str:
    """The database holding ``db_id``'s copy: ``<prefix><db_id>`` lower-cased and made safe."""
    wanted = fold(prefix + db_id)
    safe = re.sub(r"[^a-z0-9_]", "_", wanted)
    if safe in _RESERVED:
        safe = "db_" + safe
    if safe != wanted or len(safe) > _MAX_NAME:
        digest = hashlib.sha1(db_id.encode()).hexdigest()[:8]
        safe = f"{safe[: _MAX_NAME - 9]}_{digest}"
    return safe


def mysql_params(url: str) -> dict[str, Any]:
    """PyMySQL's keyword arguments for ``mysql://user:password@host:port`` (``mariadb://`` too; query
    options ``unix_socket`` and ``connect_timeout``), or ``InputError`` saying what is wrong."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in _SCHEMES:
        raise InputError(f"a MySQL/MariaDB address starts with mysql:// or mariadb://, not {parts.scheme or url!r}")
    if parts.path not in ("", "/"):
        raise InputError(
            "the MySQL/MariaDB address names the server only: each database is copied into a database of "
            "its own (--mysql-db-prefix), so leave the database name out of the URL"
        )
    try:
        port = parts.port
    except ValueError:
        raise InputError("the MySQL/MariaDB address has an invalid port") from None
    params: dict[str, Any] = {"host": parts.hostname or "127.0.0.1", "charset": "utf8mb4"}
    if port is not None:
        params["port"] = port
    if parts.username:
        params["user"] = urllib.parse.unquote(parts.username)
    if parts.password is not None:
        params["password"] = urllib.parse.unquote(parts.password)
    for name, values in urllib.parse.parse_qs(parts.query, keep_blank_values=True).items():
        kind = _URL_OPTIONS.get(name)
        if kind is None:
            raise InputError(f"unknown option {name!r} in the MySQL/MariaDB address; known: {', '.join(_URL_OPTIONS)}")
        try:
            params[name] = kind(values[-1])
        except ValueError:
            raise InputError(f"option {name!r} of the MySQL/MariaDB address must be {kind.__name__}") from None
    return params


def connect_mysql(url: str) -> Any:
    """A PyMySQL connection in autocommit mode, or ``InputError`` saying why there is none."""
    params = mysql_params(url)
    try:
        import pymysql
    except ImportError:
        raise InputError(f"--engine mysql needs PyMySQL: {install_hint('mysql')}") from None
    try:
        return pymysql.connect(**params, autocommit=True)
    except pymysql.err.MySQLError as error:
        raise InputError(f"cannot connect to MySQL/MariaDB at the given address: {describe_error(error)}") from None


def mysql_quote(name: str) -> str:
    """A back-quoted MySQL identifier, safe inside PyMySQL's ``%``-formatted statements too."""
    return "`" + name.replace("`", "``").replace("%", "%%") + "`"


def resolve_collation(cursor: Any, collation: str | None) -> str:
    """The ``utf8mb4`` collation the copies' text uses: ``collation``, checked, or the server's default."""
    if collation is None:
        cursor.execute("SELECT @@character_set_server, @@collation_server")
        charset, server_collation = cursor.fetchone()
        if charset == "utf8mb4":
            return str(server_collation)
        cursor.execute(
            "SELECT DEFAULT_COLLATE_NAME FROM information_schema.CHARACTER_SETS WHERE CHARACTER_SET_NAME = 'utf8mb4'"
        )
        return str(cursor.fetchone()[0])
    cursor.execute(
        "SELECT CHARACTER_SET_NAME FROM information_schema.COLLATIONS WHERE COLLATION_NAME = %s", (collation,)
    )
    found = cursor.fetchone()
    if found is None or found[0] != "utf8mb4":
        raise InputError(f"{collation!r} is not a utf8mb4 collation of this server (the copies' text is utf8mb4)")
    return collation


def collation_note(cursor: Any, collation: str) -> str:
    """How text compares under ``collation``, against SQLite's ``BINARY``, as the server answers."""
    quoted = collation.replace("`", "")
    cursor.execute(f"SELECT _utf8mb4'a' COLLATE {quoted} = _utf8mb4'A', _utf8mb4'a' COLLATE {quoted} = _utf8mb4'a '")
    ignores_case, ignores_spaces = (bool(value) for value in cursor.fetchone())
    if not ignores_case and not ignores_spaces:
        return f"text compares under {collation}: case and trailing spaces count, as in SQLite's BINARY"
    what = " and ".join(
        part for part, on in (("ignoring case", ignores_case), ("ignoring trailing spaces", ignores_spaces)) if on
    )
    return (
        f"text compares under {collation}, {what}, where SQLite's BINARY does not: '=', LIKE, "
        "GROUP BY, DISTINCT and keys may match or merge values SQLite keeps apart"
    )


def copy_to_mysql(
    path: PathLike, db_id: str, url_or_connection: Any, prefix: str, collation: str | None = None
) -> DatabaseCopy:
    """Copy a SQLite database into the MySQL/MariaDB database ``mysql_database_name(db_id, prefix)``,
    unless an up-to-date copy (same source, loader and collation) is recorded in ``guarded_sqlite.copies``."""
    own = isinstance(url_or_connection, str)
    con = connect_mysql(url_or_connection) if own else url_or_connection
    try:
        cursor = con.cursor()
        cursor.execute("SELECT GET_LOCK(%s, %s)", (_LOCK, _LOCK_WAIT_S))
        if cursor.fetchone()[0] != 1:
            raise InputError(f"another run held the lock {_LOCK!r} for {_LOCK_WAIT_S} s: no copy made")
        try:
            return _copy_locked(con, path, db_id, prefix, collation)
        finally:
            cursor.execute("SELECT RELEASE_LOCK(%s)", (_LOCK,))
            cursor.close()
    finally:
        if own:
            con.close()


def _ensure_meta(cursor: Any) -> None:
    cursor.execute(f"CREATE DATABASE IF NOT EXISTS {MYSQL_META_DATABASE} CHARACTER SET utf8mb4")
    cursor.execute(
        f"CREATE TABLE IF NOT EXISTS {MYSQL_META_DATABASE}.{MYSQL_META_TABLE} ("
        "database_name VARCHAR(64) PRIMARY KEY, db_id TEXT NOT NULL, source_path TEXT NOT NULL, "
        "source_size BIGINT NOT NULL, source_mtime_ns BIGINT NOT NULL, loader_version INT NOT NULL, "
        "collation_name VARCHAR(64) NOT NULL, tables INT NOT NULL, `rows` BIGINT NOT NULL, notes LONGTEXT NOT NULL, "
        "seconds DOUBLE NOT NULL, copied_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP)"
    )


def _copy_locked(con: Any, path: PathLike, db_id: str, prefix: str, collation: str | None) -> DatabaseCopy:
    started = time.perf_counter()
    database = mysql_database_name(db_id, prefix)
    key = source_key(path)
    cursor = con.cursor()
    _ensure_meta(cursor)
    chosen = resolve_collation(cursor, collation)
    cursor.execute(
        f"SELECT source_path, source_size, source_mtime_ns, loader_version, collation_name, tables, `rows`, notes "
        f"FROM {MYSQL_META_DATABASE}.{MYSQL_META_TABLE} WHERE database_name = %s "
        "AND EXISTS (SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s)",
        (database, database),
    )
    recorded = cursor.fetchone()
    if recorded is not None and (*recorded[:4], recorded[4]) == (*key.values(), chosen):
        seconds = round(time.perf_counter() - started, 4)
        return DatabaseCopy(
            db_id,
            "mysql",
            database,
            "reused",
            seconds,
            int(recorded[5]),
            int(recorded[6]),
            tuple(json.loads(recorded[7])),
        )

    plan = plan_sqlite(path)
    notes = [collation_note(cursor, chosen), *plan_notes(plan)]
    target = mysql_quote(database)
    cursor.execute(f"DELETE FROM {MYSQL_META_DATABASE}.{MYSQL_META_TABLE} WHERE database_name = %s", (database,))
    cursor.execute(f"DROP DATABASE IF EXISTS {target}")
    cursor.execute(f"CREATE DATABASE {target} CHARACTER SET utf8mb4 COLLATE {chosen}")
    source, decoder = open_decoded(path)
    rows = 0
    not_finite = 0
    try:
        lengths = _text_lengths(source, plan.tables)
        for table in plan.tables:
            name = f"{target}.{mysql_quote(fold(table.name))}"
            keyed = _key_columns(table, lengths, notes)
            types = [_column_type(c.kind, lengths.get((table.name, c.name), 0), c.name in keyed) for c in table.columns]
            columns = ", ".join(f"{mysql_quote(fold(c.name))} {kind}" for c, kind in zip(table.columns, types))
            cursor.execute(f"CREATE TABLE {name} ({columns})")
            placeholders = ", ".join(["%s"] * len(table.columns))
            column_list = ", ".join(mysql_quote(fold(c.name)) for c in table.columns)
            insert = f"INSERT INTO {name} ({column_list}) VALUES ({placeholders})"
            reals = [i for i, c in enumerate(table.columns) if c.kind == "real"]
            for batch in read_batches(source, table):
                if reals:
                    batch, replaced = _finite(batch, reals)
                    not_finite += replaced
                for first in range(0, len(batch), _BATCH_ROWS):
                    cursor.executemany(insert, batch[first : first + _BATCH_ROWS])
                rows += len(batch)
            if keyed:
                keys = ", ".join(mysql_quote(fold(column)) for column in table.primary_key)
                try:
                    cursor.execute(f"ALTER TABLE {name} ADD PRIMARY KEY ({keys})")
                except Exception as error:  # NULLs, or values SQLite keeps apart that the collation merges
                    listed = ", ".join(table.primary_key)
                    notes.append(f"{table.name}: primary key ({listed}) not created: {describe_error(error)}")
        con.select_db(database)
        names = schema_names(path)
        for view, create in plan.views:
            try:
                cursor.execute(transpile(create, "mysql", names))  # no parameters: no %-formatting
            except Exception as error:  # not transpilable, or refused by the server
                notes.append(f"view {view} not copied: {describe_error(error)}")
        if plan.tables:
            cursor.execute(f"ANALYZE TABLE {', '.join(f'{target}.{mysql_quote(fold(t.name))}' for t in plan.tables)}")
            cursor.fetchall()
    finally:
        source.close()
    notes.extend(decoder.notes())
    if not_finite:
        notes.append(f"{not_finite} real value(s) were infinite or NaN, which MySQL cannot store; copied as NULL")
    seconds = round(time.perf_counter() - started, 4)
    cursor.execute(
        f"INSERT INTO {MYSQL_META_DATABASE}.{MYSQL_META_TABLE} (database_name, db_id, source_path, source_size, "
        "source_mtime_ns, loader_version, collation_name, tables, `rows`, notes, seconds) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (database, db_id, *key.values(), chosen, len(plan.tables), rows, json.dumps(notes), seconds),
    )
    cursor.close()
    return DatabaseCopy(db_id, "mysql", database, "copied", seconds, len(plan.tables), rows, tuple(notes))


def _text_lengths(source: Any, tables: tuple[TablePlan, ...]) -> dict[tuple[str, str], int]:
    """The longest value, in bytes of UTF-8 (an upper bound on its characters), of every text column."""
    lengths: dict[tuple[str, str], int] = {}
    for table in tables:
        texts = [c.name for c in table.columns if c.kind == "text"]
        if not texts or not table.rows:
            continue
        maxima = ", ".join(f"max(length(CAST({quote(name)} AS BLOB)))" for name in texts)
        values = source.execute(f"SELECT {maxima} FROM {quote(table.name)}").fetchone()
        lengths.update({(table.name, name): int(value or 0) for name, value in zip(texts, values)})
    return lengths


def _key_columns(table: TablePlan, lengths: dict[tuple[str, str], int], notes: list[str]) -> frozenset[str]:
    """The primary key's columns when MySQL can index them whole, else none (with a note)."""
    if not table.primary_key:
        return frozenset()
    kinds = {c.name: c.kind for c in table.columns}
    for column in table.primary_key:
        if kinds.get(column) == "blob" or lengths.get((table.name, column), 0) > _KEY_CHARS:
            notes.append(
                f"{table.name}: primary key ({', '.join(table.primary_key)}) not created: "
                f"{column} holds blobs or text longer than MySQL indexes whole"
            )
            return frozenset()
    return frozenset(table.primary_key)


def _column_type(kind: str, length: int, key: bool) -> str:
    """MySQL's type for a column of ``kind``: text in a key is ``VARCHAR`` (indexable), other text ``LONGTEXT``."""
    if kind == "integer":
        return "BIGINT"
    if kind == "real":
        return "DOUBLE"
    if kind == "blob":
        return "LONGBLOB"
    return f"VARCHAR({max(1, length)})" if key else "LONGTEXT"


def _finite(batch: list[tuple[Any, ...]], reals: list[int]) -> tuple[list[tuple[Any, ...]], int]:
    """The batch with infinite and NaN reals replaced by NULL, and how many were."""
    replaced = 0
    out = []
    for row in batch:
        if any(row[i] is not None and not math.isfinite(row[i]) for i in reals):
            values = list(row)
            for i in reals:
                if values[i] is not None and not math.isfinite(values[i]):
                    values[i] = None
                    replaced += 1
            row = tuple(values)
        out.append(row)
    return out, replaced
