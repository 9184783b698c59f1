"""The SQLite side of a copy: what a database holds, the engine type chosen for each column, and its
rows read in batches already converted to those types (see ``copy`` for the rules)."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .loaders import PathLike, open_read_only

LOADER_VERSION = 1
"""Bumped whenever a change here would produce a different copy; older copies are then redone."""

_BATCH_ROWS = 50_000
_COLUMNS_PER_SCAN = 400
_STORAGE_CLASSES = ("integer", "real", "text", "blob")


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


def quote(name: str) -> str:
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
            rows = int(con.execute(f"SELECT count(*) FROM {quote(name)}").fetchone()[0])
            # Storage classes of every column in one scan (a few scans for very wide tables: SQLite
            # allows 2000 result columns by default).
            counted: list[Any] = []
            for first in range(0, len(info), _COLUMNS_PER_SCAN):
                sums = ", ".join(
                    f"sum(typeof({quote(column)}) = '{storage}')"
                    for column, _, _ in info[first : first + _COLUMNS_PER_SCAN]
                    for storage in _STORAGE_CLASSES
                )
                counted.extend(con.execute(f"SELECT {sums} FROM {quote(name)}").fetchone())
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


class Decoder:
    """``text_factory`` that decodes UTF-8 and counts values that were not valid UTF-8."""

    def __init__(self) -> None:
        self.replaced = 0

    def __call__(self, data: bytes) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            self.replaced += 1
            return data.decode("utf-8", errors="replace")

    def notes(self) -> list[str]:
        """The copy's note on the values decoded with replacements, if there were any."""
        if not self.replaced:
            return []
        return [f"{self.replaced} text value(s) were not valid UTF-8; invalid bytes replaced by U+FFFD"]


def open_decoded(path: PathLike) -> tuple[sqlite3.Connection, Decoder]:
    """The SQLite file opened read-only, its text read through a fresh ``Decoder`` (returned with it)."""
    source = open_read_only(path)
    decoder = Decoder()
    source.text_factory = decoder
    return source, decoder


def read_batches(con: sqlite3.Connection, table: TablePlan) -> Iterator[list[tuple[Any, ...]]]:
    """The table's rows in SQLite's order, each value already converted to its column's type."""
    expressions = []
    for column in table.columns:
        quoted = quote(column.name)
        integers, reals, _texts, blobs = column.counts
        if column.kind == "real" and integers:
            expressions.append(f"CAST({quoted} AS REAL)")
        elif column.kind == "text" and (integers or reals or blobs):
            expressions.append(f"CAST({quoted} AS TEXT)")
        else:
            expressions.append(quoted)
    cursor = con.execute(f"SELECT {', '.join(expressions)} FROM {quote(table.name)}")
    while True:
        batch = cursor.fetchmany(_BATCH_ROWS)
        if not batch:
            return
        yield batch


def source_key(path: PathLike) -> dict[str, Any]:
    resolved = Path(path).resolve()
    stat = resolved.stat()
    return {
        "source_path": str(resolved),
        "source_size": stat.st_size,
        "source_mtime_ns": stat.st_mtime_ns,
        "loader_version": LOADER_VERSION,
    }


def plan_notes(plan: SourcePlan) -> list[str]:
    notes = []
    for table in plan.tables:
        if table.virtual:
            notes.append(f"{table.name}: a virtual table in SQLite, copied as a plain table")
        for column in table.columns:
            if column.note:
                declared = f" ({column.declared})" if column.declared else ""
                notes.append(f"{table.name}.{column.name}{declared}: {column.note}")
    return notes


def read_record(path: Path) -> dict[str, Any] | None:
    """A copy's JSON record, or None where it is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_record(path: Path, data: Mapping[str, Any]) -> None:
    """Write a copy's JSON record whole or not at all (a temporary file renamed over it)."""
    temporary = path.with_name(f"{path.name}.tmp{os.getpid()}")
    temporary.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(temporary, path)
