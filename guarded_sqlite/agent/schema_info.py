"""What an agent tool's ``schema()`` answers (``SchemaInfo``: tables, typed columns, keys, foreign keys
with their cardinality, row counts) and how a model reads it (``SchemaInfo.text()``). Frozen dataclasses
with no reader attached: ``schema_description`` fills them from a catalog, ``guarded_sqlite.agent``
(which re-exports them) and the worker process pass them on, and none of those imports the others."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .presenting import json_safe

__all__ = ["ForeignKeyInfo", "SchemaInfo", "TableInfo"]


@dataclass(frozen=True)
class ForeignKeyInfo:
    """A declared foreign key, with what joining along it does to row counts."""

    columns: tuple[str, ...]
    """The referencing columns."""

    table: str
    """The referenced table."""

    ref_columns: tuple[str, ...]
    """The referenced columns (the referenced table's key when the declaration names none)."""

    cardinality: str
    """``"many-to-one"`` (each referenced row may match many referencing rows, so joining the
    referencing table repeats the referenced table's rows), ``"one-to-one"`` (the referencing columns are
    a key too), or ``"unknown"`` (the referenced columns are not a declared key)."""


@dataclass(frozen=True)
class TableInfo:
    """One table or view."""

    name: str
    """Its name."""

    schema: str
    """The schema it lives in (SQLite: ``main``, ``temp`` or an attached name)."""

    kind: str
    """``"table"`` or ``"view"``."""

    columns: tuple[tuple[str, str], ...]
    """``(name, declared type)`` pairs, in order (the type is ``""`` when none is declared)."""

    keys: tuple[tuple[str, ...], ...]
    """Declared keys (primary key, UNIQUE constraints and unique indexes), as column names: the values
    of a key's columns identify one row."""

    foreign_keys: tuple[ForeignKeyInfo, ...]
    """Declared foreign keys."""

    row_count: int | None
    """Rows in the table; None for a view or when it could not be counted."""


@dataclass(frozen=True)
class SchemaInfo:
    """The database's tables, as ``GuardedDatabase.schema()`` read them."""

    dialect: str
    """``"sqlite"``, ``"duckdb"`` or ``"postgres"``: the SQL the tables are queried in."""

    tables: tuple[TableInfo, ...]
    """Every table and view, by schema and name."""

    default_schema: str = "main"
    """The schema unqualified names resolve to (PostgreSQL: ``current_schema()``); ``text()`` names its
    tables without it, every other table with its schema."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``dialect`` and ``tables`` with every field."""
        result: dict[str, Any] = json_safe(self)
        return result

    def text(self) -> str:
        """The schema as text for a model: each table's columns, keys, foreign keys with what a join
        along them repeats, and its row count."""
        referenced: dict[str, list[tuple[str, str]]] = {}
        for table in self.tables:
            for fk in table.foreign_keys:
                if fk.cardinality == "many-to-one":
                    referenced.setdefault(fk.table.lower(), []).append((table.name, ", ".join(fk.columns)))
        lines = [f"Dialect: {self.dialect}"]
        for table in self.tables:
            size = "" if table.row_count is None else f", {table.row_count} rows"
            name = table.name if table.schema == self.default_schema else f"{table.schema}.{table.name}"
            lines.append(f"{table.kind.capitalize()} {name}{size}")
            columns = ", ".join(f"{column} {kind}".rstrip() for column, kind in table.columns)
            lines.append(f"  columns: {columns}")
            if table.keys:
                lines.append("  keys: " + ", ".join(f"({', '.join(key)})" for key in table.keys))
            elif table.kind == "table":
                lines.append("  keys: none declared (rows may repeat)")
            for fk in table.foreign_keys:
                target = f"{fk.table}({', '.join(fk.ref_columns)})"
                lines.append(f"  foreign key: ({', '.join(fk.columns)}) -> {target}, {fk.cardinality}")
            for source, columns in referenced.get(table.name.lower(), ()):
                lines.append(
                    f"  referenced by {source}({columns}): joining {source} repeats each {table.name} row once "
                    f"per matching {source} row"
                )
        return "\n".join(lines)
