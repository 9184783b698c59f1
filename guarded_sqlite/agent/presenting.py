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

__all__ = ["CELL_WIDTH", "database_problem", "format_table", "json_safe", "plain_account", "report_dict"]

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


def _rows(count: int | None) -> str:
    return f"{count} row" if count == 1 else f"{count} rows"


def plain_account(report: GuardReport) -> str:
    """What happened to a statement's rows, in one sentence for someone who has never read the docs: no
    rule names, thresholds or verdict names (those stay in ``report``'s fields and ``summary()``).

    >>> from guarded_sqlite.report import GuardReport
    >>> plain_account(GuardReport.from_state(("patch", "q", "q", None, "none", 4, 4, 4, None, None, (), 0, None)))
    'All 4 rows are different: the guard changed nothing.'
    >>> plain_account(GuardReport.from_state(("patch", "q", "q", "cartesian_explosion", "distinct_injected",
    ...                                       90, 6, 6, None, None, (), 0, 1)))
    'The joins repeated rows: 90 rows came back but only 6 are different, so the guard served each once (6 rows).'
    """
    rows, unique, final = report.rows, report.unique_rows, report.final_rows
    action, trigger = report.action, report.trigger
    repeats = None if rows is None or unique is None else rows - unique
    if action.startswith("candidate_selected"):
        chosen = report.rescue.chosen_index if report.rescue is not None else None
        return (
            f"The statement was replaced by candidate {chosen} of the ones given, whose rows the guard "
            f"served ({_rows(final)})."
        )
    if trigger == "exec_error":
        return f"The statement failed: {(report.error or '').rstrip('.')}."
    if action == "distinct_injected":
        return (
            f"The joins repeated rows: {_rows(rows)} came back but only {unique} are different, so the guard "
            f"served each once ({_rows(final)})."
        )
    if action == "join_copies_removed":
        copies = next((d.copies for d in report.decisions if d.copies is not None), None)
        removed = rows - final if rows is not None and final is not None else copies
        return (
            f"The joins repeated rows: of {_rows(rows)}, {removed} only repeated a row already there, so the guard "
            f"removed them and served {_rows(final)} (equal rows that come from different rows of the tables are kept)."
        )
    if action == "distinct_removed":
        return (
            f"The query's DISTINCT hid few repeats, so the guard ran it without DISTINCT and served all {_rows(final)}."
        )
    if action == "aggregate_defanned" or trigger == "aggregate_fanout":
        served = "served the corrected values" if action == "aggregate_defanned" else "served the values as computed"
        return (
            "A join made a SUM, AVG or COUNT count some rows several times "
            f"({'; '.join(f.describe() for f in report.aggregates)}): the guard {served} and flagged it."
        )
    if action != "none":
        return f"The guard changed the rows ({action})."
    if trigger == "empty_result":
        return (
            "The query returned no rows: the guard changed nothing (a condition may not match the data, "
            "or no row is meant)."
        )
    if trigger == "cartesian_explosion":
        copies = next((d.copies for d in report.decisions if d.copies is not None), None)
        if report.mode != "patch":
            why = f"guard={report.mode!r} only reports"
        elif copies == 0:
            why = "each repeat comes from a different row of the tables, so the repeats may be meant"
        else:
            why = "the guard could not show which rows the joins repeated"
        return (
            f"{repeats} of the {_rows(rows)} repeat another row (only {unique} are different): served as "
            f"returned, and flagged ({why})."
        )
    if not report.probed:
        return f"The guard did not check the rows: {report.note or 'not probed'}."
    unchecked = next((d.reason for d in report.decisions if d.rule == "aggregate" and not d.applied), None)
    if unchecked is not None:
        return f"The rows are as the database returned them; a total over a join could not be checked ({unchecked})."
    if repeats:
        return f"{repeats} of the {_rows(rows)} repeat another row, too few to act on: the guard changed nothing."
    if rows == 0:
        return "The query returned no rows: the guard changed nothing."
    if unique is None:
        return f"The guard changed nothing ({_rows(rows)})."
    if rows == 1:
        return "One row: the guard changed nothing."
    return f"All {_rows(rows)} are different: the guard changed nothing."


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
