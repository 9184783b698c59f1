"""Why a gold query answers differently on another engine than on SQLite: the checks behind
``EvalReport.gold_differences``.

Off SQLite, every gold query also runs on the SQLite file it was written for. When the two results
differ as multisets, the first of these causes that fits is reported (``CATEGORIES``); the first
three are checked on the rows themselves, the next two read the query, and ``"other"`` is what is
left:

1. ``sqlite_error``: it fails on SQLite and runs on the engine.
2. ``numeric``: the results are equal once every number is compared as a float rounded to 4
   decimals (MySQL's ``AVG`` of integers is a ``DECIMAL`` with 4 decimals; PostgreSQL's a ``NUMERIC``).
3. ``case_or_spaces``: they are equal once text is compared ignoring case and trailing spaces, as
   a case-insensitive, PAD SPACE collation compares it: the engine merged values SQLite keeps apart
   and kept another spelling (``GROUP BY``, ``DISTINCT``).
4. ``limit_ties``: the query cuts with LIMIT, both results have the same size, and the engine's rows
   are among SQLite's rows without the cut (checked on SQLite): the engines chose different rows
   among ties of the ORDER BY, or of no ORDER BY at all.
5. ``bare_column``: a SELECT that aggregates or groups returns a column neither grouped nor
   aggregated; SQLite takes it from the row of a lone MIN/MAX (else from some row of the group), the
   engine from any row.
6. ``division``: the query divides with ``/``, which is integer division of integers on SQLite.
7. ``text_comparison``: the query compares with a string literal or matches with ``LIKE``: the
   engine's collation or ``LIKE`` decides case and trailing spaces differently (on MySQL/MariaDB's
   default collation both are ignored; on PostgreSQL, DuckDB and ClickHouse ``LIKE`` is case-sensitive).
8. ``number_comparison``: the query compares a column with a number: SQLite compares a text
   column's values as text (``'95' > 150``), MySQL as numbers.
9. ``other``: none of the above; read the query.

Categories 5 to 8 say what the query does, not that it was proven to be the cause.

>>> classify([(3.3333333333333335,)], [(Decimal("3.3333"),)], None)
'numeric'
>>> classify([("Korea ",), ("Korea ",)], [("korea",), ("korea",)], None)
'case_or_spaces'
>>> classify([], [("Korea",)], None)
'other'
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from decimal import Decimal
from typing import Any

from .._analysis.transpile import QueryShape

CATEGORIES = {
    "sqlite_error": "fails on SQLite, runs on the engine",
    "numeric": "numbers differ only in type or beyond the 4th decimal (a DECIMAL or NUMERIC average)",
    "case_or_spaces": "text differs only in case or trailing spaces: the engine's collation merged values",
    "limit_ties": "LIMIT kept other rows among equals: ties broken differently",
    "bare_column": "returns a column neither grouped nor aggregated: each engine picks its own row",
    "division": "divides with '/', which SQLite computes as integer division of integers",
    "text_comparison": "compares text with a literal or LIKE: the collation or LIKE treats case/spaces differently",
    "number_comparison": "compares a column with a number: a text column compares as text on SQLite",
    "other": "not explained by the checks above",
}
"""Each category and what it means, in the order they are tried."""


def _number(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float, Decimal)):
        return round(float(value), 4) + 0.0  # + 0.0: -0.0 and 0.0 are one value
    return value


def _text(value: Any) -> Any:
    if isinstance(value, str):
        return value.rstrip(" ").casefold()
    return _number(value)


def _normalised(rows: Sequence[Any], value: Any) -> Counter[Hashable]:
    return Counter(tuple(value(cell) for cell in row) for row in rows)


def describe(sqlite_rows: Sequence[Hashable] | None, engine_rows: Sequence[Hashable], error: str | None) -> str:
    """One line on how the results differ: their sizes and a row found only on each side."""
    if sqlite_rows is None:
        return f"SQLite: {error}"
    only_sqlite = Counter(sqlite_rows) - Counter(engine_rows)
    only_engine = Counter(engine_rows) - Counter(sqlite_rows)
    parts = [f"{len(sqlite_rows)} row(s) on SQLite, {len(engine_rows)} on the engine"]
    for side, rows in (("SQLite", only_sqlite), ("the engine", only_engine)):
        if rows:
            parts.append(
                f"only on {side}: {_short(next(iter(rows)))}" + (f" (+{len(rows) - 1})" if len(rows) > 1 else "")
            )
    return "; ".join(parts)


def _short(row: Any) -> str:
    text = repr(row)
    return text if len(text) <= 80 else text[:77] + "..."


def differs(sqlite_rows: Sequence[Hashable], engine_rows: Sequence[Hashable]) -> bool:
    """Whether two results differ as multisets (order ignored, duplicates counted)."""
    return len(sqlite_rows) != len(engine_rows) or Counter(sqlite_rows) != Counter(engine_rows)


def classify(
    sqlite_rows: Sequence[Any] | None,
    engine_rows: Sequence[Any],
    shape: QueryShape | None,
    unlimited_rows: Sequence[Any] | None = None,
) -> str:
    """The first category of ``CATEGORIES`` that explains why ``engine_rows`` differ from
    ``sqlite_rows`` (None: the query failed on SQLite). ``unlimited_rows``: SQLite's rows of the
    query without its outermost LIMIT, when it has one."""
    if sqlite_rows is None:
        return "sqlite_error"
    if _normalised(sqlite_rows, _number) == _normalised(engine_rows, _number):
        return "numeric"
    if _normalised(sqlite_rows, _text) == _normalised(engine_rows, _text):
        return "case_or_spaces"
    if shape is not None and shape.limited and unlimited_rows is not None and len(sqlite_rows) == len(engine_rows):
        pool = _normalised(unlimited_rows, _number)
        if not _normalised(engine_rows, _number) - pool:
            return "limit_ties"
    if shape is None:
        return "other"
    for category, fits in (
        ("bare_column", shape.bare_columns),
        ("division", shape.divides),
        ("text_comparison", shape.compares_text),
        ("number_comparison", shape.compares_number),
    ):
        if fits:
            return category
    return "other"
