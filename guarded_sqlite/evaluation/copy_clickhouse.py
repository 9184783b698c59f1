"""Copies of SQLite databases in ClickHouse through chDB: one chDB folder (``<cache_dir>/chdb``) holding a
database per SQLite file, with a JSON record per copy next to it (see ``copy`` for the rules).

chDB serves one folder per process and locks it, so every copy lives in the same folder, and the
evaluation runs in one process (``runner`` uses one worker for ClickHouse). Names are lower-cased, as
on PostgreSQL: ``transpile`` quotes every identifier in lower case, and ClickHouse, unlike SQLite,
tells ``Country`` from ``country``. Types: ``Int64``, ``Float64``, ``String`` (text and blobs), each
``Nullable`` but for the columns of a primary key that hold no NULL, which become the table's
``ORDER BY`` (a MergeTree key that ClickHouse keeps duplicates under: the guard proves it unique on the
data before it uses it); a table without one is ordered by nothing (``ORDER BY tuple()``) and keeps
SQLite's row order as inserted.

chdb is imported only when a copy is made.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path
from typing import Any

from .._analysis.transpile import NotOneStatement, TranspileError, fold, transpile
from ..errors import describe_error
from .copy_source import (
    ColumnPlan,
    open_decoded,
    plan_notes,
    plan_sqlite,
    read_batches,
    read_record,
    schema_names,
    source_key,
    write_record,
)
from .loaders import PathLike
from .records import DatabaseCopy

__all__ = ["clickhouse_database_name", "clickhouse_folder", "connect_clickhouse", "copy_to_clickhouse"]

_TYPES = {"integer": "Int64", "real": "Float64", "text": "String", "blob": "String"}
_BATCH = 2_000


def clickhouse_folder(cache_dir: PathLike | None) -> Path:
    """The chDB folder of the copies: ``<cache_dir>/chdb`` (default ``$XDG_CACHE_HOME/guarded_sqlite/clickhouse``)."""
    if cache_dir is None:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        return Path(base) / "guarded_sqlite" / "clickhouse" / "chdb"
    return Path(cache_dir) / "chdb"


def clickhouse_database_name(db_id: str, prefix: str = "spider_") -> str:
    """The database holding ``db_id``'s copy: ``<prefix><db_id>`` lower-cased, ``[a-z0-9_]`` only (a short
    hash appended when that changed the name)."""
    wanted = fold(prefix + db_id)
    safe = re.sub(r"[^a-z0-9_]", "_", wanted)
    if safe != wanted:
        safe = f"{safe}_{hashlib.sha1(db_id.encode()).hexdigest()[:8]}"
    return safe


def connect_clickhouse(cache_dir: PathLike | None) -> Any:
    """A chDB connection to the copies' folder (made when missing)."""
    from chdb import dbapi

    folder = clickhouse_folder(cache_dir)
    folder.mkdir(parents=True, exist_ok=True)
    connect: Any = dbapi.connect  # untyped in chdb; typed Any whether chdb is installed or not (mypy in CI)
    return connect(str(folder))


def _quote(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def _column_type(column: ColumnPlan, keyed: bool) -> str:
    base = _TYPES[column.kind]
    return base if keyed else f"Nullable({base})"


def copy_to_clickhouse(path: PathLike, db_id: str, con: Any, cache_dir: PathLike | None) -> DatabaseCopy:
    """Copy a SQLite database into its chDB database on ``con``, unless an up-to-date copy exists."""
    import chdb

    started = time.perf_counter()
    database = clickhouse_database_name(db_id)
    record_path = clickhouse_folder(cache_dir).parent / f"{database}.json"
    key = {**source_key(path), "chdb_version": chdb.__version__}
    cur = con.cursor()
    try:
        cur.execute(f"SELECT count() FROM system.databases WHERE name = '{database}'")
        exists = bool(cur.fetchall()[0][0])
        recorded = read_record(record_path)
        if exists and recorded is not None and all(recorded.get(name) == value for name, value in key.items()):
            return DatabaseCopy(
                db_id, "clickhouse", database, "reused", round(time.perf_counter() - started, 4),
                int(recorded.get("tables", 0)), int(recorded.get("rows", 0)), tuple(recorded.get("notes", ())),
            )  # fmt: skip
        record_path.unlink(missing_ok=True)  # not current until the new copy is complete
        plan = plan_sqlite(path)
        notes = plan_notes(plan)
        cur.execute(f"DROP DATABASE IF EXISTS {_quote(database)}")
        cur.execute(f"CREATE DATABASE {_quote(database)}")
        source, decoder = open_decoded(path)
        rows = 0
        try:
            for table in plan.tables:
                primary = {fold(name) for name in table.primary_key}
                keyed = [
                    column
                    for column in table.columns
                    if fold(column.name) in primary and sum(column.counts) == table.rows and table.rows
                ]
                if keyed and len(keyed) != len(primary):
                    keyed = []  # a key column may hold NULL: no ORDER BY key
                    notes.append(f"{table.name}: its primary key holds NULL; no ORDER BY key")
                kept = {id(column) for column in keyed}
                columns = ", ".join(f"{_quote(fold(c.name))} {_column_type(c, id(c) in kept)}" for c in table.columns)
                order = f"({', '.join(_quote(fold(c.name)) for c in keyed)})" if keyed else "tuple()"
                name = f"{_quote(database)}.{_quote(fold(table.name))}"
                cur.execute(f"CREATE TABLE {name} ({columns}) ENGINE = MergeTree ORDER BY {order}")
                placeholders = ", ".join(["%s"] * len(table.columns))
                for batch in read_batches(source, table):
                    for start in range(0, len(batch), _BATCH):
                        cur.executemany(f"INSERT INTO {name} VALUES ({placeholders})", batch[start : start + _BATCH])
                    rows += len(batch)
            names = schema_names(path)
            cur.execute(f"USE {_quote(database)}")
            for view, create in plan.views:
                try:
                    cur.execute(transpile(create, "clickhouse", names))
                except (TranspileError, NotOneStatement, RuntimeError) as error:
                    notes.append(f"view {view} not copied: {describe_error(error)}")
        finally:
            source.close()
        notes.extend(decoder.notes())
    finally:
        cur.close()
    seconds = round(time.perf_counter() - started, 4)
    record = {**key, "db_id": db_id, "tables": len(plan.tables), "rows": rows, "notes": notes, "seconds": seconds}
    write_record(record_path, record)
    return DatabaseCopy(db_id, "clickhouse", database, "copied", seconds, len(plan.tables), rows, tuple(notes))
