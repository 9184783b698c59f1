"""Letting go of sqlglot trees without leaving reference cycles.

Every node of a sqlglot tree refers to its parent and the parent to it (through its ``args``), so a tree
the analysis drops is a reference cycle: only Python's cyclic collector frees it, in whatever thread
next allocates, and until then it holds its memory and counts towards the next collection (issue 35:
the collector, run in one thread, finalised another thread's sqlite3 cursor and deadlocked). So the
analysis clears the parent links of the trees it made once it is done with them (``release``); reference
counting then frees each tree the moment it is dropped, as it frees sqlite3's objects.

A rule's analysis runs inside ``Collecting()``; a tree it makes and drops (a parse, a copy, a node
built or replaced) is handed to ``keep``, and every tree kept is released when the block ends. A tree a
cache holds is never kept (``release`` would clear the parent links its later readers need), nor a
node of one: a kept tree takes copies of cached nodes, never the nodes themselves.
"""

from __future__ import annotations

import contextvars
import gc
from typing import Any, TypeVar

from sqlglot import Dialect, exp

__all__ = ["Collecting", "dialect_named", "forget_positions", "keep", "release", "spent_text", "text_of"]

_Node = exp.Expr
T = TypeVar("T")

_KEPT: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar("guarded_sqlite_trees", default=None)


def release(*trees: Any) -> None:
    """Clear the parent link of every node under each of ``trees`` (nodes, or lists and tuples of
    them; anything else is skipped). A node attached to a larger tree is then held by it only one
    way: release a tree only once nothing reads its nodes' parents any more."""
    _visit(list(trees), parents=True)


def _visit(stack: list[Any], parents: bool) -> None:
    """Every node under the trees in ``stack``: its parent link cleared (``parents``), else its source
    positions (``forget_positions``). One walk for both, with the choice made per node rather than a
    generator's frame per node: releasing is on every planned statement's path."""
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        node = pop()
        if isinstance(node, _Node):
            if parents:
                node.parent = None
            else:
                meta = node._meta
                if meta is not None and meta.keys() <= _POSITION_KEYS:
                    node._meta = None
            for value in node.args.values():
                if isinstance(value, list):
                    extend(value)
                elif isinstance(value, _Node):
                    push(value)
        elif isinstance(node, (list, tuple)):
            extend(node)


_POSITION_KEYS = frozenset(("line", "col", "start", "end"))  # what sqlglot's parser records per node


def forget_positions(tree: T) -> T:
    """``tree`` (a node, or a list of nodes) with the source positions sqlglot's parser records on most
    nodes dropped: nothing here reads them, and every copy of a tree (the rewrite makes dozens per
    statement) deep-copied each node's position dict through ``copy.deepcopy``, about two thirds of the
    copy's time. Metadata other than positions (a comment's ``sqlglot.meta``) is kept."""
    _visit([tree], parents=False)
    return tree


def keep(tree: T) -> T:
    """``tree`` (a node, or a list of nodes), released when the enclosing ``Collecting()`` block ends;
    outside one, nothing happens to it."""
    kept = _KEPT.get()
    if kept is not None:
        kept.append(tree)
    return tree


class Collecting:
    """Releases every tree ``keep`` is given inside the block when it ends, however it ends (blocks
    nest: an inner one releases its own at its end). ``dialect``: the connection's, loaded first."""

    __slots__ = ("dialect", "kept", "token")

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect

    def __enter__(self) -> None:
        if self.dialect not in _LOADED:
            _load(self.dialect)
        self.kept: list[Any] = []
        self.token = _KEPT.set(self.kept)

    def __exit__(self, *exc_info: object) -> None:
        _KEPT.reset(self.token)
        release(self.kept)
        self.kept.clear()


_LOADED: set[str] = set()


def _load(dialect: str) -> None:
    """Load ``dialect`` and SQLite's (the analysis writes some SQLite SQL whatever the engine), then
    collect once. Importing sqlglot leaves about 360 objects of cyclic garbage, and loading a dialect
    about 200 more: classes that sqlglot's class machinery (and enum's, in the modules its dialect
    registry imports to read entry points) builds and discards. Collected here, once per dialect and
    process, where the guard first loads it (loads that size run the collector several times anyway),
    rather than left to a collection in whatever thread allocates next: no statement after leaves any."""
    for name in ("sqlite", dialect):
        Dialect.get_or_raise(name)
    gc.collect()
    _LOADED.update(("sqlite", dialect))


def dialect_named(name: str) -> Dialect:
    """``sqlglot.Dialect.get_or_raise(name)``, loaded as ``Collecting`` loads it (raises as it does)."""
    if name not in _LOADED:
        _load(name)
    return Dialect.get_or_raise(name)


def text_of(node: exp.Expr, dialect: str | None = None, **options: Any) -> str:
    """``node.sql(dialect, **options)`` without leaving garbage: sqlglot's generator works on a copy of
    the tree (it may change what it generates from) and drops it, a cycle; this releases the copy."""
    copied = node.copy()
    try:
        return copied.sql(dialect=dialect, copy=False, **options)
    finally:
        release(copied)


def spent_text(node: exp.Expr, dialect: str) -> str:
    """``node``'s SQL, generated in place: for a tree the caller made, has handed to ``keep`` and reads
    no more (sqlglot's generator may rewrite what it generates from). ``text_of`` copies the tree first,
    which for the corrected queries cost as much as generating them."""
    return node.sql(dialect=dialect, copy=False)
