"""Serving a statement's rows from the guard's buffer: the fetch of up to ``row_cap + 1`` rows within the
byte budget (``fetch_rest``, ``row_bytes``), the rows past the cap straight from the driver
(``Streaming``), and the iterator a cursor hands out, which follows the cursor to its next statement as
sqlite3's cursor (its own iterator) does (``serving``, ``redirect_outstanding``), and letting go of
the buffer once every row has been served (``buffer_served``; sqlite3 keeps no row it handed out).
Shared by both I/O layers (``sqlite_fast`` and the ``wrap()`` proxies) through ``_guard.decide``.
"""

from __future__ import annotations

import itertools
import operator
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from .probe import PartialCount

__all__ = [
    "DRIVER",
    "FIRST_ROWS",
    "LIST_ITERATOR",
    "NOTHING",
    "BytesCapped",
    "Streaming",
    "buffer_served",
    "fetch_rest",
    "redirect_outstanding",
    "row_bytes",
    "row_values",
    "serving",
]

NOTHING: Iterator[Any] = iter(())
LIST_ITERATOR: type = type(iter([]))


class _Driver:
    __slots__ = ()

    def __repr__(self) -> str:
        return "DRIVER"


DRIVER: Any = _Driver()
"""``_self_rows`` of a cursor whose rows come straight from the driver's cursor (nothing buffered: a
write, a failed statement, guard off). A marker rather than the driver's cursor itself: for
``connect()``'s cursors that is the cursor, and a cursor referring to itself is a reference cycle, which
only the cyclic collector frees, in whatever thread it runs (sqlite3 frees a cursor when it is dropped)."""


FIRST_ROWS = 16
"""Rows fetched before the byte budget is looked at: results this small cost one fetch call, as before."""


class FetchLimits(Protocol):
    """The connection's fetch settings ``fetch_rest`` reads (``ConnectionState`` has them; typed by what
    is read, so this module, which the connection state builds on, imports nothing of it)."""

    byte_cap: int | None
    fetch_size: int
    first_fetch: int


class BytesCapped(list):  # type: ignore[type-arg]
    """The rows buffered before a result passed ``GuardPolicy.byte_cap``; the rest is still unfetched."""


def fetch_rest(
    fetchmany: Callable[[Any, int], list[Any]], cursor: Any, guard: FetchLimits, rows: list[Any]
) -> list[Any]:
    """After a first fetch of ``guard.first_fetch`` rows that came back full, the rest of the buffer: up
    to ``row_cap + 1`` rows in all, or a ``BytesCapped`` list once their estimated size passes
    ``byte_cap`` (the driver's cursor then holds the rest).

    Callers fetch ``first_fetch`` rows themselves, so a small result costs one call, as a plain
    ``fetchmany(row_cap + 1)`` would. The rest comes in chunks sized from the last row's estimated size,
    so a result of huge rows stops near the budget instead of after ``row_cap`` of them.
    """
    budget = guard.byte_cap
    wanted = guard.fetch_size
    if budget is None:
        return rows + fetchmany(cursor, wanted - len(rows))
    per_row = row_bytes(rows[-1])
    used = per_row * len(rows)
    while used <= budget:
        chunk = min(wanted - len(rows), max(1, (budget - used) // per_row))
        more = fetchmany(cursor, chunk)
        rows += more
        if len(more) < chunk or len(rows) >= wanted:
            return rows
        per_row = row_bytes(more[-1])
        used += per_row * len(more)
    return BytesCapped(rows)


def row_bytes(row: Any) -> int:
    """A rough size of one fetched row: 64 bytes, plus 16 per value, plus the length of text and blobs
    (values of exactly the types SQLite returns them as; a converter's objects count 16 bytes)."""
    try:
        values = row.values() if isinstance(row, dict) else row
        size = 64 + 16 * len(values)
        for value in values:
            if type(value) in _SIZED_TYPES:  # exact types: half the cost of isinstance on this hot path
                size += len(value)
    except TypeError:  # a row factory's object that is not a sized sequence
        return 64
    return size


_SIZED_TYPES = frozenset((str, bytes, bytearray))


class Streaming:
    """Serves a result past ``row_cap``: the buffered head, then the rest straight from the driver.

    A class rather than ``itertools.chain`` so that re-executing the cursor inside ``for row in cur``
    can point it at the new statement's rows, as sqlite3's cursor (its own iterator) does. ``tail`` is
    the driver's iterator over the rest (the raw cursor, or for a cursor subclass that overrides
    ``__next__``, an iterator calling sqlite3's own); ``raw`` is the driver's cursor. Buffered rows that
    a row factory shapes as they are served are one too: a ``factories.Shaped`` head and no tail.
    """

    __slots__ = ("head", "raw", "tail")

    def __init__(self, head: Iterable[Any], raw: Any, tail: Any) -> None:
        self.head: Iterator[Any] | None = iter(head)
        self.tail: Any = tail
        self.raw = raw

    def __iter__(self) -> Streaming:
        return self

    def __length_hint__(self) -> int:
        # The buffered rows left (redirect_outstanding measures a handed-out buffer's position by it).
        return 0 if self.head is None else operator.length_hint(self.head)

    def __next__(self) -> Any:
        head = self.head
        if head is not None:
            for row in head:
                return row
            self.head = None
        if self.tail is None:
            raise StopIteration
        return next(self.tail)

    def check_usable(self) -> None:
        """sqlite3's checks (closed connection, other thread) for rows served from the head; the
        driver runs its own for the tail."""
        if self.head is not None and isinstance(self.raw, sqlite3.Cursor):
            sqlite3.Connection.cursor(self.raw.connection).close()

    def redirect(self, new_rows: Any) -> None:
        if type(new_rows) is list:
            self.head, self.tail = iter(new_rows), None
        elif type(new_rows) is Streaming:
            self.head, self.tail, self.raw = new_rows.head, new_rows.tail, new_rows.raw
        else:  # no rows (a failed statement, a write): the loop ends, as over a sqlite3 cursor
            self.head = self.tail = None


def serving(cursor: Any, raw: Any, check: Callable[[Any], Any], hand_out: bool = False) -> Any:
    """The iterator that serves ``cursor``'s rows, after ``check(raw)`` ran the driver's checks (a
    fetch on the exhausted raw cursor: closed cursor or connection, wrong thread); ``raw`` itself when
    the driver serves them (``DRIVER``).

    ``hand_out``: the iterator goes to the caller (``iter(cur)``), who may keep it across a re-execute;
    ``_self_buffer`` then records it, and the next execute redirects it (``redirect_outstanding``).
    Iterators only the cursor uses itself (``fetchone``/``fetchmany``) need no redirecting.

    The buffer list is reached only through its iterator (never kept beside it), so that it is freed
    as soon as the iterator is exhausted: a list iterator drops its list when it raises StopIteration.
    A handed-out iterator over a statement whose distinct count is still pending (``PartialCount``)
    ends with ``_AtEnd``, which settles the count when the caller's loop has served every row.
    """
    rows = cursor._self_rows
    kind = type(rows)
    if kind is list:
        check(raw)
        rows = cursor._self_rows = iter(rows)
    elif kind is LIST_ITERATOR:
        check(raw)
    elif kind is Streaming:
        rows.check_usable()
        if hand_out:
            for part in (rows.head, rows.tail):  # the tail, or a factories.Shaped head, holds the cursor weakly
                hold = getattr(part, "hold", None)
                if hold is not None:
                    hold()  # the caller's iterator keeps the cursor alive, as sqlite3's (the cursor) does
    else:
        return raw if rows is DRIVER else rows
    if hand_out:
        cursor._self_buffer = rows
        current = cursor._self_state
        if current is not None:
            count = current.unique_rows
            if type(count) is PartialCount and count.pending:
                return itertools.chain(rows, _AtEnd(cursor))
    return rows


class _AtEnd:
    """The end of an iterator handed out while the statement's distinct count is pending: ``chain``
    asks it for its iterator only once every buffered row before it was served (a for-loop over the
    list iterator runs in C, with no other place to notice its end). Holds the cursor, as the caller's
    iterator does in sqlite3 (it is the cursor)."""

    __slots__ = ("cursor",)

    def __init__(self, cursor: Any) -> None:
        self.cursor = cursor

    def __iter__(self) -> Iterator[Any]:
        buffer_served(self.cursor)
        return NOTHING


def buffer_served(cursor: Any) -> None:
    """Every buffered row of ``cursor``'s statement has been served (the fetch methods call this when
    their iterator has none left): let go of them, as sqlite3 keeps no row it handed out.

    The serving list iterator sits at the end without having raised StopIteration, so it still holds
    the list: it is dropped, unless it was handed out (the caller's loop may still be redirected to
    the next statement's rows; it drops the list itself when the loop ends). A pending distinct count
    keeps only its lower bound (``PartialCount.release``)."""
    rows = cursor._self_rows
    kind = type(rows)
    if kind is LIST_ITERATOR:
        if rows is not cursor._self_buffer:
            cursor._self_rows = NOTHING
    elif kind is Streaming:
        rows.head = None  # what its next __next__ would do; rows past row_cap still come from the tail
    current = cursor._self_state
    if current is not None:
        count = current.unique_rows
        if type(count) is PartialCount:
            count.release()


def _list_behind(rows: Iterator[Any]) -> tuple[list[Any], int] | None:
    """The list a list iterator serves and its position in it; None once it is exhausted (it then holds
    no list). Read through the iterator's pickle support, the one way to reach its list from Python."""
    reduced: Any = rows.__reduce__()  # (iter, (list,), position), or (iter, ([],)) once exhausted
    if len(reduced) < 3:
        return None
    return reduced[1][0], reduced[2]


def redirect_outstanding(cursor: Any, new_rows: Any) -> Any:
    """Point the iterator handed out for the previous statement at ``new_rows``; returns what the
    cursor serves from now on.

    sqlite3's iterator is the cursor, so a loop over it continues with whatever the cursor executes
    next. Ours is a list iterator; splicing the new rows in at its position gives the same effect.
    A new result that streams (past ``row_cap``) or has no rows just ends the old iterator. An
    iterator that already raised StopIteration never yields again, so then the new rows are served
    afresh instead.
    """
    buffer, outstanding = cursor._self_buffer, cursor._self_rows
    cursor._self_buffer = None
    if isinstance(buffer, Streaming):
        buffer.redirect(new_rows)
        if type(new_rows) is list or type(new_rows) is Streaming:
            cursor._self_buffer = buffer
            return buffer
        return new_rows
    behind = _list_behind(buffer)
    if behind is None:  # exhausted: it ignores the new rows
        return new_rows
    rows, position = behind
    del rows[position:]
    if type(new_rows) is not list:
        return new_rows
    rows.extend(new_rows)
    cursor._self_buffer = buffer
    return outstanding


def row_values(row: Any) -> Sequence[Any] | None:
    """A served row as a sequence of its values (a tuple, a mapping's values, any iterable row), or None."""
    if isinstance(row, tuple):
        return row
    if isinstance(row, Mapping):
        return tuple(row.values())
    try:
        return tuple(row)
    except TypeError:
        return None
