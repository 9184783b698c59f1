"""Copies of SQLite databases in DuckDB and PostgreSQL, so that the same gold and predictions can be
evaluated on those engines.

**Where the copies go.** DuckDB: one ``.duckdb`` file per SQLite database in a cache folder
(``--cache-dir``; default ``$XDG_CACHE_HOME/guarded_sqlite/duckdb``), with a small JSON file next to
it that records what it was copied from. PostgreSQL: one schema per database on the server the user
runs (``--pg-dsn``), named ``spider_<db_id>`` (lower-cased; characters other than ``[a-z0-9_]``
become ``_`` and a short hash is appended when that or the 63-byte limit changed the name), with one
row per copy in the metadata table ``guarded_sqlite.copies``.

**Idempotent.** A copy is redone only when the SQLite file's resolved path, size or modification
time, or this loader's version (``LOADER_VERSION``; DuckDB's version too, for DuckDB files), differ
from what was recorded — otherwise it is reused as it is. A PostgreSQL copy is built in one
transaction (drop schema, create, load, record), under an advisory lock, so a concurrent or failed
run never leaves a half-built schema recorded as current.

**Names.** DuckDB keeps SQLite's table and column names (DuckDB matches identifiers
case-insensitively, quoted or not, as SQLite does). PostgreSQL gets them lower-cased (ASCII, as
SQLite folds): transpiled queries quote every identifier in lower case (see ``transpile``), so
``Country``, ``country`` and ``"COUNTRY"`` all resolve, as they do in SQLite.

**Types.** SQLite stores a value per row with its own storage class; the other engines need one
type per column. Each column's type is chosen from the values it actually holds (one scan per table):

======================================  ==================================  ================
values held (NULLs aside)               PostgreSQL                          DuckDB
======================================  ==================================  ================
only integers                           ``BIGINT``                          ``BIGINT``
only reals                              ``DOUBLE PRECISION``                ``DOUBLE``
integers and reals                      ``DOUBLE PRECISION`` (noted)        ``DOUBLE`` (noted)
only text                               ``TEXT COLLATE "C"``                ``VARCHAR``
only blobs                              ``BYTEA``                           ``BLOB``
text or blobs mixed with anything else  ``TEXT COLLATE "C"`` (noted)        ``VARCHAR`` (noted)
no values (empty or all NULL)           from the declared type's affinity   same
======================================  ==================================  ================

Declared types do not decide non-empty columns, because SQLite does not enforce them: a
``DECIMAL(19,4)`` column holding integers and reals becomes ``DOUBLE PRECISION``. Empty columns take
their SQLite affinity (``INTEGER`` → ``BIGINT``, ``REAL`` → double, ``TEXT`` and untyped → text,
``NUMERIC`` → double, except date/time declarations, which SQLite stores as text, and ``BOOL``
declarations, which become ``BIGINT``). Dates stay text, compared as strings as SQLite does. Text
columns in PostgreSQL use the ``"C"`` collation, which orders like SQLite's ``BINARY`` (code points),
not by the server's locale.

**What is reported** (``DatabaseCopy.notes``): columns whose values changed type (integers widened
to floating point; numbers or blobs stored as text, converted with SQLite's own ``CAST(x AS TEXT)``),
text that was not valid UTF-8 (bytes replaced by U+FFFD), NUL characters removed for PostgreSQL
(its text type cannot hold them), primary keys PostgreSQL refused, views that could not be
transpiled, virtual tables copied as plain tables.

**Primary keys** are created in PostgreSQL when the data satisfies them: PostgreSQL accepts a column
that is not in ``GROUP BY`` when the table's primary key is (SQLite accepts any), so they matter for
which queries run. DuckDB gets none (its binder does not use them for ``GROUP BY``).

Rows are loaded with ``COPY ... FROM STDIN`` on PostgreSQL and ``INSERT ... SELECT unnest(?)`` over
column lists on DuckDB (about 300k rows/s either way), in SQLite's row order.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import describe_error
from .loaders import InputError, PathLike, open_read_only
from .report import DatabaseCopy
from .transpile import NotOneStatement, TranspileError, fold, transpile

LOADER_VERSION = 1
"""Bumped whenever a change here would produce a different copy; older copies are then redone."""

DEFAULT_PG_SCHEMA_PREFIX = "spider_"
"""Prefix of the PostgreSQL schema that holds a database's copy: ``spider_<db_id>``."""

PG_META_SCHEMA = "guarded_sqlite"
PG_META_TABLE = "copies"

_PG_LOCK_KEY = 0x67_75_61_72_64_65_64  # "guarded": serialises copies between concurrent runs
_BATCH_ROWS = 50_000
_COLUMNS_PER_SCAN = 400

_PG_TYPES = {"integer": "BIGINT", "real": "DOUBLE PRECISION", "text": 'TEXT COLLATE "C"', "blob": "BYTEA"}
_DUCKDB_TYPES = {"integer": "BIGINT", "real": "DOUBLE", "text": "VARCHAR", "blob": "BLOB"}
_STORAGE_CLASSES = ("integer", "real", "text", "blob")


# --------------------------------------------------------------------------------------------------
# Reading the SQLite side


@dataclass(frozen=True)
class ColumnPlan:
    """One column of a SQLite table and the engine type chosen for it."""

    name: str
    declared: str
    """The declared type, as written in the CREATE TABLE (may be empty)."""

    affinity: str
    """SQLite's affinity for the declared type: INTEGER, REAL, TEXT, NUMERIC or BLOB."""

    counts: tuple[int, int, int, int]
    """Values stored as integer, real, text and blob (NULLs not counted)."""

    kind: str
    """The chosen type: ``"integer"``, ``"real"``, ``"text"`` or ``"blob"``."""

    note: str | None
    """Why the copy is not exactly the stored values, when it is not."""


@dataclass(frozen=True)
class TablePlan:
    """A SQLite table to copy."""

    name: str
    columns: tuple[ColumnPlan, ...]
    rows: int
    primary_key: tuple[str, ...]
    virtual: bool


@dataclass(frozen=True)
class SourcePlan:
    """What a SQLite database holds and how it will be copied."""

    path: str
    tables: tuple[TablePlan, ...]
    views: tuple[tuple[str, str], ...]
    """``(name, CREATE VIEW statement)`` in creation order."""


def affinity(declared: str) -> str:
    """SQLite's column affinity for a declared type (the rules of section 3.1 of its datatype docs)."""
    upper = declared.upper()
    if "INT" in upper:
        return "INTEGER"
    if "CHAR" in upper or "CLOB" in upper or "TEXT" in upper:
        return "TEXT"
    if "BLOB" in upper or not upper.strip():
        return "BLOB"
    if "REAL" in upper or "FLOA" in upper or "DOUB" in upper:
        return "REAL"
    return "NUMERIC"


def _kind_from_declaration(column_affinity: str, declared: str) -> str:
    if column_affinity == "INTEGER":
        return "integer"
    if column_affinity == "REAL":
        return "real"
    if column_affinity in ("TEXT", "BLOB"):
        return "text"
    upper = declared.upper()
    if "DATE" in upper or "TIME" in upper:
        return "text"  # SQLite stores dates as text
    if "BOOL" in upper:
        return "integer"
    return "real"


def choose_kind(column_affinity: str, declared: str, counts: Sequence[int]) -> tuple[str, str | None]:
    """The engine type for a column holding ``counts`` integer/real/text/blob values, and a note
    when the copy changes some values' type."""
    integers, reals, _texts, _blobs = counts
    held = {name for name, count in zip(_STORAGE_CLASSES, counts) if count}
    if not held:
        return _kind_from_declaration(column_affinity, declared), None
    if held == {"integer"}:
        return "integer", None
    if held == {"real"}:
        return "real", None
    if held == {"integer", "real"}:
        return (
            "real",
            f"{integers} integer value(s) widened to floating point (the column also holds {reals} real value(s))",
        )
    if held == {"text"}:
        return "text", None
    if held == {"blob"}:
        return "blob", None
    described = ", ".join(f"{count} {name}" for name, count in zip(_STORAGE_CLASSES, counts) if count)
    return "text", f"mixed storage classes ({described}); every value copied as text with SQLite's CAST(x AS TEXT)"


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def schema_names(path: PathLike) -> frozenset[str]:
    """Table, view and column names of a SQLite database (schema only, no data read)."""
    con = open_read_only(path)
    try:
        names: set[str] = set()
        for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"):
            names.add(name)
            names.update(row[0] for row in con.execute("SELECT name FROM pragma_table_info(?)", (name,)))
        return frozenset(names)
    finally:
        con.close()


def plan_sqlite(path: PathLike) -> SourcePlan:
    """Read a SQLite database's tables, views and the storage classes of every column."""
    con = open_read_only(path)
    try:
        tables = []
        listed = con.execute(
            "SELECT name, coalesce(sql, '') FROM sqlite_master WHERE type = 'table' "
            "AND (name NOT LIKE 'sqlite\\_%' ESCAPE '\\' OR name = 'sqlite_sequence') ORDER BY rowid"
        ).fetchall()
        for name, create in listed:
            info = con.execute("SELECT name, type, pk FROM pragma_table_info(?) ORDER BY cid", (name,)).fetchall()
            rows = int(con.execute(f"SELECT count(*) FROM {_quote(name)}").fetchone()[0])
            # Storage classes of every column in one scan (a few scans for very wide tables: SQLite
            # allows 2000 result columns by default).
            counted: list[Any] = []
            for first in range(0, len(info), _COLUMNS_PER_SCAN):
                sums = ", ".join(
                    f"sum(typeof({_quote(column)}) = '{storage}')"
                    for column, _, _ in info[first : first + _COLUMNS_PER_SCAN]
                    for storage in _STORAGE_CLASSES
                )
                counted.extend(con.execute(f"SELECT {sums} FROM {_quote(name)}").fetchone())
            columns = []
            for index, (column, declared, _) in enumerate(info):
                counts = tuple(int(value or 0) for value in counted[4 * index : 4 + 4 * index])
                column_affinity = affinity(declared or "")
                kind, note = choose_kind(column_affinity, declared or "", counts)
                columns.append(ColumnPlan(column, declared or "", column_affinity, counts, kind, note))  # type: ignore[arg-type]
            primary_key = tuple(column for column, _, pk in sorted(info, key=lambda row: row[2]) if pk)
            virtual = create.upper().lstrip().startswith("CREATE VIRTUAL")
            tables.append(TablePlan(name, tuple(columns), rows, primary_key, virtual))
        views = tuple(con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'view' ORDER BY rowid").fetchall())
        return SourcePlan(str(path), tuple(tables), views)
    finally:
        con.close()


class _Decoder:
    """``text_factory`` that decodes UTF-8 and counts values that were not valid UTF-8."""

    def __init__(self) -> None:
        self.replaced = 0

    def __call__(self, data: bytes) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            self.replaced += 1
            return data.decode("utf-8", errors="replace")


def _read_batches(con: sqlite3.Connection, table: TablePlan) -> Iterator[list[tuple[Any, ...]]]:
    """The table's rows in SQLite's order, each value already converted to its column's type."""
    expressions = []
    for column in table.columns:
        quoted = _quote(column.name)
        integers, reals, _texts, blobs = column.counts
        if column.kind == "real" and integers:
            expressions.append(f"CAST({quoted} AS REAL)")
        elif column.kind == "text" and (integers or reals or blobs):
            expressions.append(f"CAST({quoted} AS TEXT)")
        else:
            expressions.append(quoted)
    cursor = con.execute(f"SELECT {', '.join(expressions)} FROM {_quote(table.name)}")
    while True:
        batch = cursor.fetchmany(_BATCH_ROWS)
        if not batch:
            return
        yield batch


def _source_key(path: PathLike) -> dict[str, Any]:
    resolved = Path(path).resolve()
    stat = resolved.stat()
    return {
        "source_path": str(resolved),
        "source_size": stat.st_size,
        "source_mtime_ns": stat.st_mtime_ns,
        "loader_version": LOADER_VERSION,
    }


def _plan_notes(plan: SourcePlan) -> list[str]:
    notes = []
    for table in plan.tables:
        if table.virtual:
            notes.append(f"{table.name}: a virtual table in SQLite, copied as a plain table")
        for column in table.columns:
            if column.note:
                declared = f" ({column.declared})" if column.declared else ""
                notes.append(f"{table.name}.{column.name}{declared}: {column.note}")
    return notes


# --------------------------------------------------------------------------------------------------
# DuckDB


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/guarded_sqlite/duckdb`` (``~/.cache/...`` when the variable is unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "guarded_sqlite" / "duckdb"


def duckdb_copy_path(path: PathLike, db_id: str, cache_dir: PathLike) -> Path:
    """Where the DuckDB copy of ``path`` lives: ``<cache_dir>/<db_id>-<hash of the path>.duckdb``."""
    digest = hashlib.sha1(str(Path(path).resolve()).encode()).hexdigest()[:12]
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", db_id)[:80]
    return Path(cache_dir) / f"{safe}-{digest}.duckdb"


def copy_to_duckdb(path: PathLike, db_id: str, cache_dir: PathLike | None = None) -> DatabaseCopy:
    """Copy a SQLite database into a DuckDB file in ``cache_dir``, unless an up-to-date copy exists."""
    import duckdb

    started = time.perf_counter()
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    target = duckdb_copy_path(path, db_id, folder)
    sidecar = target.with_name(target.name + ".json")
    key = {**_source_key(path), "duckdb_version": duckdb.__version__}
    recorded = _read_json(sidecar)
    if recorded is not None and target.is_file() and all(recorded.get(name) == value for name, value in key.items()):
        return DatabaseCopy(
            db_id,
            "duckdb",
            str(target),
            "reused",
            round(time.perf_counter() - started, 4),
            int(recorded.get("tables", 0)),
            int(recorded.get("rows", 0)),
            tuple(recorded.get("notes", ())),
        )

    plan = plan_sqlite(path)
    notes = _plan_notes(plan)
    building = target.with_name(f"{target.name}.tmp{os.getpid()}")
    for leftover in (building, building.with_name(building.name + ".wal")):
        leftover.unlink(missing_ok=True)
    source = open_read_only(path)
    decoder = _Decoder()
    source.text_factory = decoder
    rows = 0
    con = duckdb.connect(str(building))
    try:
        for table in plan.tables:
            columns = ", ".join(f"{_quote(c.name)} {_DUCKDB_TYPES[c.kind]}" for c in table.columns)
            con.execute(f"CREATE TABLE {_quote(table.name)} ({columns})")
            casts = ", ".join(f"unnest(${i + 1}::{_DUCKDB_TYPES[c.kind]}[])" for i, c in enumerate(table.columns))
            insert = f"INSERT INTO {_quote(table.name)} SELECT {casts}"
            for batch in _read_batches(source, table):
                con.execute(insert, [list(values) for values in zip(*batch)])
                rows += len(batch)
        names = schema_names(path)
        for name, create in plan.views:
            try:
                con.execute(transpile(create, "duckdb", names))
            except (TranspileError, NotOneStatement, duckdb.Error) as error:
                notes.append(f"view {name} not copied: {describe_error(error)}")
        con.execute("CHECKPOINT")
    except BaseException:
        con.close()
        for leftover in (building, building.with_name(building.name + ".wal")):
            leftover.unlink(missing_ok=True)
        raise
    finally:
        source.close()
    con.close()
    if decoder.replaced:
        notes.append(f"{decoder.replaced} text value(s) were not valid UTF-8; invalid bytes replaced by U+FFFD")
    os.replace(building, target)
    seconds = round(time.perf_counter() - started, 4)
    _write_json(
        sidecar,
        {
            **key,
            "db_id": db_id,
            "tables": len(plan.tables),
            "rows": rows,
            "notes": notes,
            "seconds": seconds,
            "copied_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
    )
    return DatabaseCopy(db_id, "duckdb", str(target), "copied", seconds, len(plan.tables), rows, tuple(notes))


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    temporary = path.with_name(f"{path.name}.tmp{os.getpid()}")
    temporary.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(temporary, path)


# --------------------------------------------------------------------------------------------------
# PostgreSQL


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
        raise InputError("--engine postgres needs psycopg 3: pip install 'guarded-sqlite[postgres]'") from None
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
    key = _source_key(path)
    _ensure_meta(con)
    recorded = con.execute(
        f"SELECT source_path, source_size, source_mtime_ns, loader_version, tables, rows, notes "
        f"FROM {PG_META_SCHEMA}.{PG_META_TABLE} WHERE schema_name = %s AND to_regnamespace(%s) IS NOT NULL",
        (schema, _quote(schema)),
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
    notes = _plan_notes(plan)
    names = schema_names(path)
    source = open_read_only(path)
    decoder = _Decoder()
    source.text_factory = decoder
    rows = 0
    nul_stripped = 0
    quoted_schema = _quote(schema)
    try:
        with con.transaction():
            con.execute(f"DROP SCHEMA IF EXISTS {quoted_schema} CASCADE")
            con.execute(f"CREATE SCHEMA {quoted_schema}")
            for table in plan.tables:
                target = f"{quoted_schema}.{_quote(fold(table.name))}"
                columns = ", ".join(f"{_quote(fold(c.name))} {_PG_TYPES[c.kind]}" for c in table.columns)
                con.execute(f"CREATE TABLE {target} ({columns})")
                text_columns = [i for i, c in enumerate(table.columns) if c.kind == "text"]
                column_list = ", ".join(_quote(fold(c.name)) for c in table.columns)
                with con.cursor() as cursor, cursor.copy(f"COPY {target} ({column_list}) FROM STDIN") as copy:
                    for batch in _read_batches(source, table):
                        for row in batch:
                            for i in text_columns:
                                value = row[i]
                                if value is not None and "\x00" in value:
                                    row = (*row[:i], value.replace("\x00", ""), *row[i + 1 :])
                                    nul_stripped += 1
                            copy.write_row(row)
                        rows += len(batch)
                if table.primary_key:
                    keys = ", ".join(_quote(fold(column)) for column in table.primary_key)
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
            if decoder.replaced:
                notes.append(f"{decoder.replaced} text value(s) were not valid UTF-8; invalid bytes replaced by U+FFFD")
            if nul_stripped:
                notes.append(f"{nul_stripped} text value(s) held NUL characters, which PostgreSQL text cannot; removed")
            for table in plan.tables:
                con.execute(f"ANALYZE {quoted_schema}.{_quote(fold(table.name))}")
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


# --------------------------------------------------------------------------------------------------
# All databases of an evaluation


def prepare_copies(
    engine: str,
    paths: Mapping[str, PathLike],
    pg_dsn: str | None = None,
    cache_dir: PathLike | None = None,
    pg_schema_prefix: str = DEFAULT_PG_SCHEMA_PREFIX,
) -> dict[str, DatabaseCopy]:
    """Make sure every database in ``paths`` (db_id -> SQLite file) has an up-to-date copy on ``engine``."""
    copies: dict[str, DatabaseCopy] = {}
    if engine == "duckdb":
        try:
            import duckdb
        except ImportError:
            raise InputError("--engine duckdb needs duckdb: pip install 'guarded-sqlite[duckdb]'") from None
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
