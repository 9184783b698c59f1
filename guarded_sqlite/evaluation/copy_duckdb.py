"""Copies of SQLite databases in DuckDB files, one per database in a cache folder, with a JSON sidecar
recording what each was copied from (see ``copy`` for the rules)."""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path

from .._analysis.transpile import NotOneStatement, TranspileError, transpile
from ..errors import describe_error
from .copy_source import (
    open_decoded,
    plan_notes,
    plan_sqlite,
    quote,
    read_batches,
    read_record,
    schema_names,
    source_key,
    write_record,
)
from .loaders import PathLike
from .records import DatabaseCopy

_DUCKDB_TYPES = {"integer": "BIGINT", "real": "DOUBLE", "text": "VARCHAR", "blob": "BLOB"}


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
    key = {**source_key(path), "duckdb_version": duckdb.__version__}
    recorded = read_record(sidecar)
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
    notes = plan_notes(plan)
    building = target.with_name(f"{target.name}.tmp{os.getpid()}")
    for leftover in (building, building.with_name(building.name + ".wal")):
        leftover.unlink(missing_ok=True)
    source, decoder = open_decoded(path)
    rows = 0
    con = duckdb.connect(str(building))
    try:
        for table in plan.tables:
            columns = ", ".join(f"{quote(c.name)} {_DUCKDB_TYPES[c.kind]}" for c in table.columns)
            con.execute(f"CREATE TABLE {quote(table.name)} ({columns})")
            casts = ", ".join(f"unnest(${i + 1}::{_DUCKDB_TYPES[c.kind]}[])" for i, c in enumerate(table.columns))
            insert = f"INSERT INTO {quote(table.name)} SELECT {casts}"
            for batch in read_batches(source, table):
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
    notes.extend(decoder.notes())
    os.replace(building, target)
    seconds = round(time.perf_counter() - started, 4)
    write_record(
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
