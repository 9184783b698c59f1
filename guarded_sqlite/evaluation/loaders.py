"""Reading the evaluation inputs: gold files, prediction files and the database folder.

Everything here is validation. Predictions are paired with gold queries by position, so a file with a
missing or extra line silently shifts every later pair and scores near zero; these loaders refuse such
inputs with an ``InputError`` that names the offending line or index (the CLI exits with status 2).

Accepted gold formats:

* BIRD ``dev.json``: a JSON list of objects with ``SQL``, ``db_id`` and ``difficulty``;
* Spider ``dev.json``: a JSON list of objects with ``query`` and ``db_id``;
* text lines ``SQL<TAB>db_id`` (BIRD's ``dev_gold.sql``, Spider's ``gold.sql``).

Accepted prediction formats:

* text, one SQL per line (a trailing newline, or none, are both fine);
* BIRD's JSON object ``{"0": "SQL\\t----- bird -----\\tdb_id", ...}``;
* a JSON object ``{"0": "SQL", ...}`` or a JSON list ``["SQL", ...]``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

BIRD_MARKER = "\t----- bird -----\t"
"""What BIRD's prediction JSON puts between a predicted SQL and its db_id."""

PathLike = Union[str, "os.PathLike[str]"]


class InputError(ValueError):
    """The gold, prediction or database inputs (or the options) cannot be evaluated as given."""


@dataclass(frozen=True)
class GoldItem:
    """One gold question: the reference SQL and the database it runs on."""

    sql: str
    """The gold SQL."""

    db_id: str
    """The database, found at ``<db_root>/<db_id>/<db_id>.sqlite``."""

    difficulty: str | None = None
    """BIRD's difficulty label (``simple``/``moderate``/``challenging``) when the gold file has one."""

    question: str | None = None
    """The natural-language question (BIRD and Spider ``question``), given to a rescuer."""

    hint: str | None = None
    """BIRD's ``evidence``, given to a rescuer as the hint."""


@dataclass(frozen=True)
class Prediction:
    """One predicted SQL as read from the prediction file."""

    sql: str
    """The predicted SQL, exactly as written (minus a line's ``\\r``)."""

    where: str
    """Where it came from, for error messages: ``"line 12"`` or ``"index 11"``."""

    db_id: str | None = None
    """The db_id the file itself names (BIRD's JSON format), checked against the gold."""


@dataclass(frozen=True)
class Pair:
    """A gold query and the prediction for the same question."""

    index: int
    """0-based position in the gold file; records and error messages keep it."""

    db_id: str
    """The database both queries run on."""

    gold_sql: str
    """The gold SQL."""

    pred_sql: str
    """The predicted SQL."""

    difficulty: str | None = None
    """The gold's difficulty label, if any."""

    question: str | None = None
    """The gold's question, if any (passed to the rescuer)."""

    hint: str | None = None
    """The gold's hint (BIRD ``evidence``), if any (passed to the rescuer)."""

    candidates: tuple[str, ...] = ()
    """Candidate SQLs for a rescue (``--candidates``); empty: no rescue for this pair."""


def _read_text(path: PathLike) -> str:
    try:
        # utf-8-sig: tolerate a byte-order mark written by some editors.
        return Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a file") from None
    except OSError as error:  # permission denied, a FIFO that fails, ...: still the input's problem
        raise InputError(f"{path}: cannot be read ({error.strerror or type(error).__name__})") from None
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: not UTF-8 text ({error})") from None


def output_file_problem(path: PathLike) -> str | None:
    """Why a file could not be written at ``path``, or None when it can be, as far as can be told
    without writing: it must not be a directory, and its folder must exist and be writable (as must
    the file, if it exists). Checked before a run, so a long evaluation is not lost to a typo."""
    target = Path(path)
    folder = target.parent
    if target.is_dir():
        return f"{path}: is a directory"
    if not folder.exists():
        return f"{path}: folder {folder} does not exist"
    if not folder.is_dir():
        return f"{path}: {folder} is not a directory"
    if target.exists():
        if not os.access(target, os.W_OK):
            return f"{path}: not writable"
    elif not os.access(folder, os.W_OK | os.X_OK):
        return f"{path}: folder {folder} is not writable"
    return None


def check_output_file(path: PathLike, option: str) -> None:
    """Raise ``InputError`` naming ``option`` (e.g. ``--json``) when ``path`` cannot be written."""
    problem = output_file_problem(path)
    if problem is not None:
        raise InputError(f"{option} {problem}")


def _looks_like_json(text: str) -> bool:
    # No SQL statement starts with a bracket or a brace, so the first character decides the format.
    return text.lstrip()[:1] in ("[", "{")


def _parse_json(path: PathLike, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(f"{path}: invalid JSON ({error})") from None


def load_gold(path: PathLike) -> list[GoldItem]:
    """Read a gold file in any of the accepted formats (see the module docstring)."""
    text = _read_text(path)
    if _looks_like_json(text):
        return gold_from_json(_parse_json(path, text), source=str(path))
    return gold_from_lines(text.split("\n"), source=str(path))


def gold_from_json(data: Any, source: str = "gold") -> list[GoldItem]:
    """Gold items from a parsed BIRD or Spider ``dev.json`` (a list of objects)."""
    if not isinstance(data, list):
        raise InputError(f"{source}: a gold JSON file must hold a list of questions, not a {type(data).__name__}")
    items = []
    for index, entry in enumerate(data):
        if not isinstance(entry, Mapping):
            raise InputError(f"{source}: index {index} is a {type(entry).__name__}, not an object")
        # BIRD calls the gold SQL "SQL", Spider calls it "query".
        sql = entry.get("SQL", entry.get("query"))
        db_id = entry.get("db_id")
        if not isinstance(sql, str) or not isinstance(db_id, str):
            raise InputError(
                f"{source}: index {index} needs a string 'SQL' (BIRD) or 'query' (Spider) and a string 'db_id'"
            )
        difficulty = entry.get("difficulty")
        question, hint = entry.get("question"), entry.get("evidence")
        items.append(
            GoldItem(
                sql,
                db_id,
                None if difficulty is None else str(difficulty),
                question if isinstance(question, str) and question else None,
                hint if isinstance(hint, str) and hint else None,
            )
        )
    return items


def gold_from_lines(lines: Sequence[str], source: str = "gold") -> list[GoldItem]:
    """Gold items from ``SQL<TAB>db_id`` lines; blank lines are allowed only at the end."""
    lines = [line.rstrip("\r") for line in lines]
    while lines and not lines[-1].strip():
        lines.pop()
    items = []
    for number, line in enumerate(lines, start=1):
        # The db_id is after the last tab: SQL may itself contain tabs, a db_id never does.
        sql, tab, db_id = line.rpartition("\t")
        if not tab or not sql.strip() or not db_id.strip():
            raise InputError(f"{source}: line {number} is not 'SQL<TAB>db_id': {line[:80]!r}")
        items.append(GoldItem(sql, db_id.strip()))
    return items


def load_predictions(path: PathLike, expected: int) -> list[Prediction]:
    """Read a prediction file in any accepted format and check it holds exactly ``expected`` entries."""
    text = _read_text(path)
    if _looks_like_json(text):
        return predictions_from_json(_parse_json(path, text), expected, source=str(path))
    # A final newline ends the last line; it does not start an empty prediction.
    return predictions_from_lines(text.removesuffix("\n").split("\n"), expected, source=str(path))


def predictions_from_lines(lines: Sequence[str], expected: int, source: str = "predictions") -> list[Prediction]:
    """One prediction per line, line *i* for gold *i*.

    Spider's files end with or without a newline (the data README reads them with
    ``read().split('\\n')[:n]``). ``load_predictions`` drops the file's final newline before
    splitting, so that a file one line short is caught rather than padded with a blank prediction;
    extra blank lines past the gold count are ignored, but a non-blank one, or too few lines, is an
    error.
    """
    lines = [line.rstrip("\r") for line in lines]
    count = len(lines)
    while count > expected and not lines[count - 1].strip():
        count -= 1
    if count != expected:
        if count > expected:
            detail = f"line {expected + 1} is past the last gold query"
        else:
            detail = f"lines {count + 1}..{expected} are missing"
        raise InputError(f"{source}: {count} predictions (lines) but the gold has {expected} queries; {detail}")
    return [Prediction(sql, f"line {number}") for number, sql in enumerate(lines[:expected], start=1)]


def predictions_from_json(data: Any, expected: int, source: str = "predictions") -> list[Prediction]:
    """Predictions from a JSON list, or an object keyed by 0-based index (BIRD's format included)."""
    if isinstance(data, list):
        if len(data) != expected:
            raise InputError(f"{source}: {len(data)} predictions (list entries) but the gold has {expected} queries")
        entries: Iterable[tuple[int, Any]] = enumerate(data)
    elif isinstance(data, Mapping):
        by_index: dict[int, Any] = {}
        for key, value in data.items():
            try:
                index = int(key)
            except (TypeError, ValueError):
                raise InputError(f"{source}: key {key!r} is not an index") from None
            if not 0 <= index < expected:
                raise InputError(
                    f"{source}: index {index} has no gold query (the gold has {expected}, indices 0..{expected - 1})"
                )
            by_index[index] = value
        missing = [index for index in range(expected) if index not in by_index]
        if missing:
            shown = ", ".join(map(str, missing[:10])) + (", ..." if len(missing) > 10 else "")
            raise InputError(
                f"{source}: {len(by_index)} predictions but the gold has {expected} queries; missing index {shown}"
            )
        entries = sorted(by_index.items())
    else:
        raise InputError(f"{source}: predictions JSON must be a list or an object, not a {type(data).__name__}")
    predictions = []
    for index, value in entries:
        if not isinstance(value, str):
            raise InputError(f"{source}: index {index} is a {type(value).__name__}, not an SQL string")
        sql, marker, db_id = value.partition(BIRD_MARKER)
        predictions.append(Prediction(sql, f"index {index}", db_id.strip() if marker else None))
    return predictions


def pair_up(gold: Sequence[GoldItem], predictions: Sequence[Prediction]) -> list[Pair]:
    """Pair by position, refusing a count mismatch or a prediction that names another database."""
    if len(gold) != len(predictions):
        raise InputError(f"{len(predictions)} predictions but {len(gold)} gold queries")
    pairs = []
    for index, (item, prediction) in enumerate(zip(gold, predictions, strict=True)):
        if prediction.db_id is not None and prediction.db_id != item.db_id:
            raise InputError(
                f"prediction {prediction.where} is for db_id {prediction.db_id!r} but gold {index} "
                f"(line {index + 1}) is for {item.db_id!r}: are the files in the same order?"
            )
        pairs.append(Pair(index, item.db_id, item.sql, prediction.sql, item.difficulty, item.question, item.hint))
    return pairs


def exclude_databases(pairs: Sequence[Pair], db_ids: Iterable[str]) -> tuple[list[Pair], int]:
    """Drop the pairs of the named databases; returns the rest and how many were dropped."""
    excluded = set(db_ids)
    unknown = sorted(excluded - {pair.db_id for pair in pairs})
    if unknown:
        raise InputError(f"--exclude-db names {', '.join(map(repr, unknown))}, which no gold query uses")
    kept = [pair for pair in pairs if pair.db_id not in excluded]
    return kept, len(pairs) - len(kept)


def database_path(db_root: PathLike, db_id: str) -> Path:
    """Where BIRD and Spider keep a database: ``<db_root>/<db_id>/<db_id>.sqlite``."""
    return Path(db_root) / db_id / f"{db_id}.sqlite"


def locate_databases(db_root: PathLike, db_ids: Iterable[str]) -> dict[str, Path]:
    """The file of every database, checked to exist before any query runs."""
    root = Path(db_root)
    if not root.is_dir():
        raise InputError(f"--db-root {db_root}: not a directory")
    paths = {db_id: database_path(root, db_id) for db_id in sorted(set(db_ids))}
    missing = [str(path) for path in paths.values() if not path.is_file()]
    if missing:
        shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise InputError(f"{len(missing)} database file(s) not found: {shown}")
    return paths


def open_read_only(path: PathLike) -> sqlite3.Connection:
    """Open a database read-only (URI ``mode=ro``), so no predicted SQL can change it."""
    # as_uri() percent-escapes the path, so names with spaces, '?' or '#' still open the right file.
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    return sqlite3.connect(uri, uri=True)


def candidates_from_json(data: Any, expected: int, source: str = "candidates") -> dict[int, tuple[str, ...]]:
    """Candidate lists by pair index from a parsed JSON list or object (index -> list of SQL strings).

    An index may be missing or map to an empty list (or null): that pair gets no rescue.
    """
    if isinstance(data, list):
        entries = list(enumerate(data))
        if len(data) > expected:
            raise InputError(f"{source}: {len(data)} candidate lists but the gold has {expected} queries")
    elif isinstance(data, Mapping):
        entries = []
        for key, value in data.items():
            try:
                index = int(key)
            except (TypeError, ValueError):
                raise InputError(f"{source}: key {key!r} is not an index") from None
            entries.append((index, value))
    else:
        raise InputError(
            f"{source}: candidates JSON must be a list or an object of index -> list of SQL, "
            f"not a {type(data).__name__}"
        )
    result: dict[int, tuple[str, ...]] = {}
    for index, value in entries:
        if not 0 <= index < expected:
            raise InputError(
                f"{source}: index {index} has no gold query (the gold has {expected}, indices 0..{expected - 1})"
            )
        if index in result:
            raise InputError(f"{source}: index {index} is given twice")
        if value is None:
            value = []
        if not isinstance(value, list):
            raise InputError(f"{source}: index {index} is a {type(value).__name__}, not a list of SQL strings")
        for position, sql in enumerate(value):
            if not isinstance(sql, str):
                raise InputError(
                    f"{source}: index {index}, candidate {position} is a {type(sql).__name__}, not an SQL string"
                )
        result[index] = tuple(value)
    return result


def load_candidates(candidates: Any, expected: int) -> dict[int, tuple[str, ...]]:
    """Candidate lists from a JSON file path, or an in-memory list/mapping (see ``candidates_from_json``)."""
    if isinstance(candidates, (str, os.PathLike)):
        return candidates_from_json(_parse_json(candidates, _read_text(candidates)), expected, source=str(candidates))
    if isinstance(candidates, (Mapping, list, tuple)):
        data = list(candidates) if isinstance(candidates, tuple) else candidates
        return candidates_from_json(
            {k: (list(v) if isinstance(v, tuple) else v) for k, v in data.items()}
            if isinstance(data, Mapping)
            else [list(v) if isinstance(v, tuple) else v for v in data],
            expected,
        )
    raise InputError(f"candidates must be a JSON file path, a list or a mapping, not a {type(candidates).__name__}")


def load_pairs(gold: Any, pred: Any, candidates: Any = None) -> list[Pair]:
    """Load and pair gold and predictions given as paths or as in-memory sequences.

    ``gold`` may be a path, or a sequence of ``GoldItem`` or ``(sql, db_id)`` tuples; ``pred`` may be
    a path or a sequence of SQL strings.
    """
    if isinstance(gold, (str, os.PathLike)):
        gold_items = load_gold(gold)
    else:
        gold_items = [item if isinstance(item, GoldItem) else GoldItem(*item) for item in gold]
    if isinstance(pred, (str, os.PathLike)):
        predictions = load_predictions(pred, len(gold_items))
    else:
        predictions = [Prediction(sql, f"index {index}") for index, sql in enumerate(pred)]
    pairs = pair_up(gold_items, predictions)
    if candidates is not None:
        by_index = load_candidates(candidates, len(pairs))
        pairs = [dataclasses.replace(pair, candidates=by_index.get(pair.index, ())) for pair in pairs]
    return pairs
