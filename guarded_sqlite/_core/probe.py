"""The runtime probe: pure functions that judge an executed result.

The probe never touches the database. It receives rows that were already fetched and answers three
questions in the paper's order: did execution fail, is the result empty, and are most rows duplicate
copies of others (``dup_ratio >= tau``). Everything here runs on the hot path of every query, so it is
written for speed: one ``set()`` over the rows, with a slower fallback only for unhashable rows.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, Final

EXEC_ERROR: Final = "exec_error"
EMPTY_RESULT: Final = "empty_result"
CARTESIAN_EXPLOSION: Final = "cartesian_explosion"
AGGREGATE_FANOUT: Final = "aggregate_fanout"


def mentions_distinct(sql: str) -> bool:
    """Cheap pre-screen for P2: SQL without the word cannot have an outermost DISTINCT, and is never parsed.

    ``str.lower`` and a substring test cost a fifth of a case-insensitive regex search, and this runs on
    every duplicate-free result big enough for P2 (SQLite's keywords are ASCII, which ``lower`` folds)."""
    return "distinct" in sql.lower()


VALUE_AGGREGATE_NAMES = frozenset({"sum", "avg", "mean", "total", "group_concat", "string_agg", "listagg"})
"""The value aggregates' names, lower-cased, that a statement's text is screened for (and
``_analysis.keyed_joins`` reads): an aggregate whose value a join can inflate."""

# A value aggregate's name (bare or quoted), then its parenthesis; read after comments are taken out.
_VALUE_AGGREGATE_TEXT = r"(?:\b|[\"`\[])(?:" + "|".join(sorted(VALUE_AGGREGATE_NAMES)) + r")[\"`\]]?\s*\("
# What the screen skips: comments and string literals (their text is not SQL), replaced by a space.
_SKIPPED_TEXT = r"--[^\n]*|/\*.*?(?:\*/|$)|'(?:[^']|'')*(?:'|$)"
# Quoted names, which the join scan reads as one word (a table named "order" ends no FROM clause).
_QUOTED_NAMES = r'"(?:[^"]|"")*(?:"|$)|`[^`]*(?:`|$)|\[[^\]]*(?:\]|$)'
# Both in one flat alternation (groups around them would cost the regex engine its first-character
# skip: 2.7 us a statement instead of 0.6).
_SQL_TEXT = f"{_SKIPPED_TEXT}|{_QUOTED_NAMES}"

# The words and signs the join scan reads: JOIN, FROM, the clause words that end a FROM clause, commas
# and parentheses.
_JOIN_WORDS = r"\b(?:join|from|where|group|order|having|limit|union|intersect|except|window|qualify)\b|[(),]"
AGGREGATE_SCREEN: dict[str, bool | frozenset[str]] = {}
"""SQL text -> the pre-screen's answer; read directly by ``_guard.decide`` on the hot path (a lookup, no call)."""
_SCREEN_SIZE = 4096


def mentions_value_aggregate_over_join(sql: str) -> bool | frozenset[str]:
    """Cheap pre-screen for the aggregate fan-out rule: SQL whose text has no value aggregate (``SUM``,
    ``AVG``, ``TOTAL``, ``GROUP_CONCAT``, ``string_agg``) or no join (``JOIN``, or a comma in FROM) is
    never parsed for it: a comment, a string or a parenthesised first item cannot hide either (c37).
    Kept per SQL text (applications repeat theirs): a repeated statement pays a
    dict lookup. A false positive costs one parse; a miss is never flagged. For a value aggregate
    without a join the answer is the text's words (lower-cased), truthy: the caller passes it on
    where one of them names a view of the connection that joins (``aggregate_check.reads_joining_view``).

    >>> mentions_value_aggregate_over_join("SELECT c.name, SUM(o.total) FROM c JOIN o ON o.c = c.id GROUP BY 1")
    True
    >>> sorted(mentions_value_aggregate_over_join("SELECT SUM(total) FROM orders"))
    ['from', 'orders', 'select', 'sum', 'total']
    >>> mentions_value_aggregate_over_join("SELECT COUNT(*) FROM orders")
    False
    >>> mentions_value_aggregate_over_join("SELECT SUM(o.total) FROM orders o, customers c WHERE o.c = c.id")
    True
    >>> mentions_value_aggregate_over_join("SELECT SUM(k) FROM t UNION ALL SELECT k, a FROM u") is True
    False
    >>> mentions_value_aggregate_over_join("SELECT SUM/**/(o.v) FROM (SELECT id, n FROM c) c, o WHERE o.c = c.id")
    True
    >>> mentions_value_aggregate_over_join("SELECT SUM(v) FROM t WHERE k IN (1, 2) AND n = 'a, b'") is True
    False
    >>> mentions_value_aggregate_over_join('SELECT "sum"(o.v) FROM "order" o, items i')
    True
    """
    known = AGGREGATE_SCREEN.get(sql)
    if known is None:
        # re caches compiled patterns; compiling them here rather than at import keeps import time down.
        flags = re.IGNORECASE | re.DOTALL
        text = _sql_only(sql)
        if re.search(_VALUE_AGGREGATE_TEXT, text, flags) is None:
            known = False
        elif _joins(re.sub(_QUOTED_NAMES, " x ", text)):
            known = True
        else:  # an aggregate and no join: its words and quoted names, for the views that join (c35)
            known = _names(text) or False
        if len(AGGREGATE_SCREEN) >= _SCREEN_SIZE:
            AGGREGATE_SCREEN.clear()
        AGGREGATE_SCREEN[sql] = known
    return known


def joining_view_names(views: Iterable[tuple[str, str]]) -> frozenset[str]:
    """The names, lower-cased, of the views among ``views`` (name, ``CREATE VIEW`` text) whose body
    joins, or reads a view that does, at any depth: a view over a joining view repeats its rows."""
    bodies = {str(name).lower(): body for name, body in views if body}
    joining = {name for name, body in bodies.items() if view_joins(body)}
    reading = {name: _names(_sql_only(body)) for name, body in bodies.items() if name not in joining}
    grown = True
    while grown:
        grown = False
        for name, words in reading.items():
            if name not in joining and not words.isdisjoint(joining):
                joining.add(name)
                grown = True
    return frozenset(joining)


def _names(text: str) -> frozenset[str]:
    """The words of ``text`` (comments and strings taken out), lower-cased, and each quoted name's own
    text, so that a view named ``"order lines"`` is found among them as one name."""
    names = {word.lower() for word in re.findall(r"\w+", text)}
    for quoted in re.findall(_QUOTED_NAMES, text):
        inner = quoted[1:-1] if len(quoted) > 1 and quoted[-1] in '"`]' else quoted[1:]
        names.add((inner.replace('""', '"') if quoted[0] == '"' else inner).lower())
    return frozenset(names)


def view_joins(body: str) -> bool:
    """Whether a view's ``CREATE VIEW`` text joins (comments, strings and quoted names taken out)."""
    return _joins(re.sub(_QUOTED_NAMES, " x ", _sql_only(body)))


def _sql_only(sql: str) -> str:
    """``sql`` with its comments and string literals replaced by a space and its quoted names kept, read
    in one pass from left to right as SQLite reads them: a ``--``, ``/*`` or quote inside a quoted name
    (``"or--ders"``, ``[it's]``) starts nothing, where a pass over comments and strings alone took the
    rest of the line, or of the statement, for one (and missed the joins in it)."""
    return re.sub(_SQL_TEXT, _blank_skipped, sql, flags=re.IGNORECASE | re.DOTALL)


def _blank_skipped(match: re.Match[str]) -> str:
    text = match.group()
    return text if text[0] in _QUOTES else " "


_QUOTES = frozenset('"`[')


def _joins(text: str) -> bool:
    """Whether ``text`` (comments and strings taken out) has a JOIN, or a comma directly in a FROM clause
    at any depth: ``FROM (SELECT a, b FROM t) x, u`` joins, ``SELECT a, b FROM t`` does not (c37). A
    FROM clause ends at a clause word or at the parenthesis that closes the query holding it; what a
    parenthesis inside it opens (a derived table, a function's arguments) is skipped to its end."""
    # One entry per open parenthesis: whether a FROM clause is open at that level.
    in_from = [False]
    for match in re.finditer(_JOIN_WORDS, text, re.IGNORECASE):
        word = match.group().lower()
        if word == "join":
            return True
        if word == "(":
            in_from.append(False)
        elif word == ")":
            if len(in_from) > 1:
                in_from.pop()
        elif word == ",":
            if in_from[-1]:
                return True
        else:
            in_from[-1] = word == "from"
    return False


def hashable_row(value: Any) -> Hashable:
    """Return a hashable stand-in for ``value`` that is equal exactly when the values are equal.

    Rows from a custom ``row_factory`` (dicts, lists) or values from a custom ``text_factory``
    (bytearray) cannot go into a set as they are. Objects we cannot freeze stand for themselves by
    identity, which can only make rows look *more* distinct: the probe then errs towards not flagging.
    """
    try:
        hash(value)
        return value  # type: ignore[no-any-return]  # hashable: hash() just said so
    except TypeError:
        pass
    if isinstance(value, Mapping):
        return ("mapping", tuple((k, hashable_row(v)) for k, v in value.items()))
    if isinstance(value, (bytearray, memoryview)):
        return ("bytes", bytes(value))
    if isinstance(value, (Sequence, Iterable)) and not isinstance(value, (str, bytes)):
        return ("sequence", tuple(hashable_row(v) for v in value))
    return ("object", id(value))


def count_unique(rows: Sequence[Any]) -> int:
    """Number of distinct rows, comparing rows by value."""
    try:
        return len(set(rows))
    except TypeError:
        return len({hashable_row(row) for row in rows})


def row_set(rows: Sequence[Any]) -> set[Hashable]:
    """The rows as a set of hashable values (used to check that a patch kept the same set)."""
    try:
        return set(rows)
    except TypeError:
        return {hashable_row(row) for row in rows}


def distinct_in_order(rows: Sequence[Any]) -> list[Any]:
    """The distinct rows, each at its first occurrence: what ``SELECT DISTINCT`` returns for the same
    rows when values compare as Python compares them (P1 serves this instead of re-executing).

    >>> distinct_in_order([(2, "b"), (1, "a"), (2, "b"), (1, "a")])
    [(2, 'b'), (1, 'a')]
    """
    try:
        return list(dict.fromkeys(rows))
    except TypeError:
        seen: set[Hashable] = set()
        kept = []
        for row in rows:
            key = hashable_row(row)
            if key not in seen:
                seen.add(key)
                kept.append(row)
        return kept


class PartialCount:
    """A distinct-row count the probe stopped early, finished only if someone asks for it while the
    rows are still there.

    Deciding that a large result is *not* an explosion needs only enough distinct rows to clear the
    threshold; with ``tau_inject = 0.8`` that is about a fifth of the rows. The exact count is for the
    report, so it is completed lazily from the rows the cursor buffers, as long as it buffers them.
    Once every row has been served the cursor lets go of them (``release``, called by
    ``serving.buffer_served``): finishing the count then would cost four times the probe (the ratio of a
    100,000-row ``fetchall`` to sqlite3's went from 1.05 to 1.17 in one measurement), so only the lower
    bound is kept and ``exact()`` returns None.
    """

    __slots__ = ("_bound", "_exact", "_rows", "_scanned", "_seen")

    def __init__(self, rows: Sequence[Any], seen: set[Any], scanned: int) -> None:
        self._rows: Sequence[Any] | None = rows
        self._seen, self._scanned = seen, scanned
        self._exact: int | None = None
        self._bound = 0

    @property
    def lower_bound(self) -> int:
        if self._exact is not None:
            return self._exact
        return len(self._seen) if self._rows is not None else self._bound

    @property
    def pending(self) -> bool:
        """Whether the count can still be finished: neither finished nor released."""
        return self._exact is None and self._rows is not None

    def exact(self) -> int | None:
        """The number of distinct rows; None when the rows were released before it was finished."""
        rows = self._rows
        if self._exact is None and rows is not None:
            self._seen.update(rows[self._scanned :])
            self._exact = len(self._seen)
            self._rows, self._seen = (), set()
        return self._exact

    def release(self) -> None:
        """The rows are going: drop every reference to them (the probe's set holds a fifth of them),
        keeping the lower bound. A finished count is kept as it is."""
        if self._rows is not None and self._exact is None:
            self._bound = len(self._seen)
            self._rows, self._seen = None, set()


def probe_large(rows: Sequence[Any], tau: float) -> tuple[str | None, int | PartialCount]:
    """``classify`` for a large hashable result, stopping as soon as the verdict is certain.

    Rows go into a set in chunks, each just big enough to possibly settle the question. The result is
    certainly healthy once ``(rows - seen) / rows < tau``: the true distinct count is at least
    ``seen``, so the true ratio is no larger. Raises TypeError for unhashable rows, like ``set()``.
    """
    total = len(rows)
    seen: set[Any] = set()
    scanned = 0
    while scanned < total:
        # Roughly the distinct rows still needed before the ratio can drop below tau; at least one.
        needed = max(1, int(total - tau * total) + 1 - len(seen))
        seen.update(rows[scanned : scanned + needed])
        scanned += needed
        if (total - len(seen)) / total < tau:
            if scanned >= total:
                return None, len(seen)
            return None, PartialCount(rows, seen, scanned)
    return classify(total, len(seen), tau), len(seen)


def dup_ratio(rows: int, unique_rows: int) -> float:
    """Fraction of rows that are redundant copies: ``(rows - unique_rows) / rows``, in [0, 1).

    Defined for non-empty results only; the paper's equation (1).
    """
    if rows <= 0:
        raise ValueError("dup_ratio is defined for non-empty results only")
    return (rows - unique_rows) / rows


def classify(rows: int, unique_rows: int, tau: float) -> str | None:
    """The probe's verdict for a result that executed: ``empty_result``, ``cartesian_explosion`` or None.

    The ratio is computed exactly as defined, ``(rows - unique_rows) / rows >= tau``: the
    multiplied-out form can disagree with it by one float ulp at the threshold.
    """
    if rows == 0:
        return EMPTY_RESULT
    if (rows - unique_rows) / rows >= tau:
        return CARTESIAN_EXPLOSION
    return None


def removal_can_commit(rows: int, tau_remove: float) -> bool:
    """Whether P2 (DISTINCT removal) could commit at all on a DISTINCT result of ``rows`` rows.

    P2 commits only if the result without DISTINCT has the same set of rows (so ``rows`` distinct
    ones), strictly more rows ``m > rows``, and ``(m - rows) / m <= tau_remove``. The smallest ratio
    comes from ``m = rows + 1``, so P2 is possible only when ``1 / (rows + 1) <= tau_remove`` (computed
    in that form, as the runtime check computes its ratio). Checking this first keeps small DISTINCT
    results (every point query) off the re-execution path.
    """
    return rows > 0 and 1 / (rows + 1) <= tau_remove


def min_rows_for_removal(tau_remove: float) -> int:
    """The smallest ``rows`` for which ``removal_can_commit(rows, tau_remove)`` holds.

    Found by bisection on the predicate itself (it is monotone in ``rows``), so the two can never
    disagree, whatever float rounding does at the boundary.
    """
    if tau_remove <= 0:
        return 2**63  # removal can never commit: it needs more rows without any duplicate
    high = 1
    while not removal_can_commit(high, tau_remove):  # at most ~1,100 doublings, even for subnormal tau
        high *= 2
    low = 0  # removal_can_commit(0, ...) is False
    while high - low > 1:
        middle = (low + high) // 2
        if removal_can_commit(middle, tau_remove):
            high = middle
        else:
            low = middle
    return high
