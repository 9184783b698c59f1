"""Rows and reports as an agent's model or a terminal reads them: values made JSON-safe, a report as a
dict, a plain text table; and whether a path is a SQLite file worth opening. Shared by the agent tools
(``guarded_sqlite.agent``) and the CLI's ``query``, so that the library never imports the CLI."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..report import GuardReport

__all__ = ["CELL_WIDTH", "database_problem", "format_table", "json_safe", "report_dict"]

CELL_WIDTH = 60
"""Longest cell in the text table; longer values are cut with an ellipsis (``--json`` has them whole)."""

_SQLITE_HEADER = b"SQLite format 3\x00"


def database_problem(path: Path) -> str | None:
    """Why ``path`` cannot be opened as a SQLite database, or None. Checked before connecting because
    sqlite3 reports these only as "unable to open database file" or at the first statement."""
    if not path.exists():
        return f"{path}: no such file"
    if path.is_dir():
        return f"{path}: is a directory, not a database file"
    if not path.is_file():
        return f"{path}: not a regular file"
    if not os.access(path, os.R_OK):
        return f"{path}: not readable"
    try:
        with path.open("rb") as handle:
            header = handle.read(len(_SQLITE_HEADER))
    except OSError as error:
        return f"{path}: cannot be read ({error.strerror or error})"
    # An empty file is a valid, empty database to SQLite.
    if header and header != _SQLITE_HEADER:
        return f"{path}: not a SQLite database"
    return None


def json_safe(value: Any) -> Any:
    """``value`` as JSON: dataclasses become dicts, tuples lists, ``bytes`` ``{"hex": "..."}`` (so a
    BLOB is not mistaken for text) and non-finite floats the strings ``"inf"``, ``"-inf"``, ``"nan"``
    (strict JSON has no such numbers)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: json_safe(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    if isinstance(value, dict):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"hex": bytes(value).hex()}
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def report_dict(report: GuardReport) -> dict[str, Any]:
    """Every field of ``report``, JSON-safe (``decisions`` as a list of dicts, ``rescue`` a dict or None)."""
    result: dict[str, Any] = json_safe(report)
    return result


def _cell(value: Any) -> str:
    if value is None:
        text = "NULL"
    elif isinstance(value, (bytes, bytearray, memoryview)):
        text = "x'" + bytes(value).hex() + "'"
    else:
        text = str(value)
    # One table row per result row: control characters would break the layout.
    text = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    if len(text) > CELL_WIDTH:
        text = text[: CELL_WIDTH - 1] + "…"
    return text


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """``rows`` as a plain text table under ``columns``: numbers right-aligned, everything else left."""
    cells = [[_cell(value) for value in row] for row in rows]
    heads = [_cell(name) for name in columns]
    widths = [max([len(heads[i])] + [len(row[i]) for row in cells]) for i in range(len(heads))]
    numeric = [
        bool(rows) and all(isinstance(row[i], (int, float)) and not isinstance(row[i], bool) for row in rows)
        for i in range(len(heads))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if right else v.ljust(w) for v, w, right in zip(values, widths, numeric)]
        return " | ".join(parts).rstrip()

    return [line(heads), "-+-".join("-" * width for width in widths), *(line(row) for row in cells)]
