"""Join copies on the data: which of a result's repeated rows repeat the same combination of the
projected tables' rows, as pure functions of rows already fetched.

A join that multiplies rows repeats each row of the tables the select list reads once per matching
row of the other tables: those repeats are *join copies*. Two rows with equal values that come from two
different rows of a projected table (two customers named alike) are *value repeats*, and are not
copies. To tell them apart the guard runs the statement once more, read-only, with a row identity of
each projected table appended to the select list (``rewrite.append_columns``, identities from
``provenance.Provenance.identities``), and hands both results to ``count_copies``.

A NULL in a row's identity (a projected table NULL-extended by a LEFT JOIN) stands for "no row of that
table", which is one state for the rest of the combination: rows equal in their values and in their
whole identity, NULLs included, are copies. A row whose identity is NULL throughout is never taken for
a copy: nothing at all tells which rows it stands for.

>>> count = count_copies([("Ana",), ("Ana",), ("Ana",)], [("Ana", 1), ("Ana", 1), ("Ana", 2)], width=1)
>>> count.copies, count.kept
(1, {('Ana',): 2})
>>> without_copies(["r1", "r2", "r3"], [("Ana",), ("Ana",), ("Ana",)], count, [("Ana", 1), ("Ana", 1), ("Ana", 2)], 1)
['r1', 'r3']
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import Any, NamedTuple, cast

__all__ = ["UNCOMPARABLE", "CopyCount", "count_copies", "plain_values", "same_multiset", "values_of", "without_copies"]

UNCOMPARABLE = "the rows hold values that cannot be compared (unhashable)"
"""``count_copies``' answer for rows whose values cannot go into a set."""


class CopyCount(NamedTuple):
    """What the data shows: for each distinct row of values, how many rows of it are distinct
    combinations of the projected tables' rows, and how many rows in all are copies."""

    kept: dict[tuple[Any, ...], int]
    """Distinct row values -> how many of its rows to keep (one per combination)."""

    copies: int
    """Rows that repeat a combination another row already stands for."""

    aligned: bool = False
    """Whether the check returned the rows in the statement's own order (the usual case: the same
    plan), so that its rows tell which of the statement's rows is the first of its combination."""

    firsts: list[int] | None = None
    """Where aligned and no identity holds NULL: the positions of the first row of each combination, in
    order (the rows ``without_copies`` serves)."""


def plain_values(row: Any) -> tuple[Any, ...] | None:
    """A fetched row's values as a tuple (a tuple, a ``sqlite3.Row``, a mapping's values), or None for a
    row factory's object whose values cannot be read back."""
    if type(row) is tuple:
        return row
    if isinstance(row, dict):
        return tuple(row.values())
    if isinstance(row, (tuple, list)):
        return tuple(row)
    if hasattr(row, "keys") and hasattr(row, "__len__") and hasattr(row, "__getitem__"):  # sqlite3.Row
        try:
            return tuple(row[i] for i in range(len(row)))
        except (IndexError, TypeError, KeyError):
            return None
    return None


def values_of(rows: Sequence[Any]) -> list[tuple[Any, ...]] | None:
    """Every fetched row's values (``plain_values``), or None if a row's cannot be read back. Rows
    fetched without a row factory are their values already and are returned as they are."""
    if set(map(type, rows)) <= {tuple}:
        return cast(list[tuple[Any, ...]], list(rows) if not isinstance(rows, list) else rows)
    values = []
    for row in rows:
        plain = plain_values(row)
        if plain is None:
            return None
        values.append(plain)
    return values


def count_copies(values: Sequence[tuple[Any, ...]], checked: Sequence[Sequence[Any]], width: int) -> CopyCount | str:
    """Match the check's rows (the statement's ``width`` columns, then the identity columns) with the
    statement's own rows (``values``), and count the copies; or say why they cannot be matched (the
    check returned other rows: a non-deterministic query, or data that changed in between).

    Written for rows by the hundred thousand: the passes are C-level (slices, sets, Counters); only
    rows whose identity holds NULL take a Python loop."""
    if len(checked) != len(values):
        return f"the check returned {len(checked)} rows where the statement returned {len(values)}"
    if checked and len(checked[0]) <= width:  # a result's rows are all as wide
        return "the check returned fewer columns than expected"
    prefix = itemgetter(slice(0, width))
    rows = _tuples(checked)
    try:
        checked_values = list(map(prefix, rows))
        aligned = checked_values == (values if type(values) is list else list(values))  # the usual case
        if not aligned and not same_multiset(checked_values, values):
            return "the check returned other rows than the statement (non-deterministic, or the data changed)"
        # Each combination with the position of its first row: the dict is filled from the last row
        # back, so an earlier row's position overwrites a later one's (C-level, as a set would be).
        first = dict(zip(reversed(rows), range(len(rows) - 1, -1, -1)))
    except TypeError:  # unhashable values from a converter: the caller may retry with stand-ins
        return UNCOMPARABLE
    null_identity = _null_identity(rows, width)
    if null_identity:
        # An identity NULL throughout: that row is its own, each one kept.
        kept: Counter[tuple[Any, ...]] = Counter(row[:width] for row in first if not _unidentified(row, width))
        kept.update(value for value, row in zip(checked_values, rows) if _unidentified(row, width))
    else:
        kept = Counter(map(prefix, first))
    kept_rows = dict(kept)
    firsts = None if null_identity or not aligned else sorted(first.values())
    return CopyCount(kept_rows, len(values) - sum(kept_rows.values()), aligned, firsts)


def same_multiset(rows: Iterable[Any], others: Iterable[Any]) -> bool:
    """Whether ``rows`` and ``others`` hold the same values as often each (raises ``TypeError`` on an
    unhashable value). Compared as dicts: ``Counter.__eq__`` walks both in Python, three times the
    cost, to treat missing values as zero counts, which counts of rows never hold."""
    return dict.__eq__(Counter(rows), Counter(others)) is True


def _tuples(rows: Sequence[Sequence[Any]]) -> Sequence[tuple[Any, ...]]:
    """The rows as tuples (the check's rows are tuples already: it runs without a row factory)."""
    if set(map(type, rows)) <= {tuple}:
        return cast(Sequence[tuple[Any, ...]], rows)
    return [tuple(row) for row in rows]


def _unidentified(row: tuple[Any, ...], width: int) -> bool:
    """Whether the row's identity columns (from ``width`` on) are all NULL."""
    return all(part is None for part in row[width:])


def _null_identity(rows: Sequence[tuple[Any, ...]], width: int) -> bool:
    """Whether some row's identity columns (from ``width`` on) hold NULL."""
    columns = len(rows[0]) if rows else 0
    return any(None in map(itemgetter(position), rows) for position in range(width, columns))


def without_copies(
    rows: Sequence[Any],
    values: Sequence[tuple[Any, ...]],
    count: CopyCount,
    checked: Sequence[Sequence[Any]] = (),
    width: int = 0,
) -> list[Any]:
    """``rows`` with the copies removed, in the order the statement returned them: where the check's
    order matched the statement's (``CopyCount.aligned``), the first row of each combination, read
    from the check's rows; else the first ``kept[value]`` rows of each value (the same rows by value;
    only which of several equal rows stands where may differ)."""
    if count.firsts is not None and len(rows) == len(values):
        return [rows[position] for position in count.firsts]
    if count.aligned and checked:
        full = _tuples(checked)
        seen: set[tuple[Any, ...]] = set()
        add = seen.add
        if not _null_identity(full, width):  # the first row of each combination: one C-level pass
            return [row for row, combination in zip(rows, full) if not (combination in seen or add(combination))]
        served: list[Any] = []
        for row, combination in zip(rows, full):
            if combination in seen and not _unidentified(combination, width):
                continue
            add(combination)
            served.append(row)
        return served
    remaining = dict(count.kept)
    served = []
    for row, value in zip(rows, values):
        left = remaining[value]
        if left:
            remaining[value] = left - 1
            served.append(row)
    return served
