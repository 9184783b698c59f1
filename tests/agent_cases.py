"""The queries the agent-tool tests (core, MCP, LangChain, LlamaIndex) send on the demo database: two
kinds of multiplicity the guard feeds back, a revision for each, and the right rows written another way
(checked with plain sqlite3), so that each framework's loop is held to the same answer; and the body of
the server tests' fixtures that open ``GuardedDatabase`` instances (``opened_databases``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from guarded_sqlite.agent import GuardedDatabase

OpenDb = Callable[..., GuardedDatabase]
"""``open_([uri], **options)``: a ``GuardedDatabase`` the fixture closes after the test."""


def opened_databases(uri: str, **defaults: Any) -> Iterator[OpenDb]:
    """A fixture's body: ``GuardedDatabase.open(uri or the default, **options)``, ``defaults`` applied
    where the test does not say otherwise, each database closed after the test."""
    opened: list[GuardedDatabase] = []

    def open_(target: str | None = None, **options: Any) -> GuardedDatabase:
        db = GuardedDatabase.open(target or uri, **{**defaults, **options})
        opened.append(db)
        return db

    yield open_
    for db in opened:
        db.close()


FAN_OUT = "SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id"
"""Each customer once per order: 30 rows, 6 distinct (observe flags it and serves all 30)."""

FAN_OUT_EXISTS = "SELECT c.name FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)"
FAN_OUT_DISTINCT = "SELECT DISTINCT c.name FROM customers c JOIN orders o ON o.customer_id = c.id"
FAN_OUT_RIGHT = "SELECT name FROM customers WHERE id IN (SELECT customer_id FROM orders)"

AGGREGATE = "SELECT c.name, SUM(c.points) FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.name"
"""Each customer's points summed once per order (patch flags it and serves the sums as computed)."""

AGGREGATE_FIX = "SELECT name, points FROM customers WHERE id IN (SELECT customer_id FROM orders)"
AGGREGATE_RIGHT = (
    "SELECT c.name, c.points FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)"
)

FEEDBACK_MARKS = ("Guard feedback:", "add DISTINCT", "An aggregate counts rows several times")
"""What a scripted model looks for in a tool's answer before it revises its query."""


def loop_cases(fan_out_fix: str) -> list[object]:
    """``(guard, first, revised, right, mark)`` for the fan-out (revised to ``fan_out_fix``) and the
    aggregate fan-out, under the presets that feed each back while serving the rows as written."""
    return [
        pytest.param("observe", FAN_OUT, fan_out_fix, FAN_OUT_RIGHT, "add DISTINCT", id="fan-out-observe"),
        pytest.param(
            "patch",
            AGGREGATE,
            AGGREGATE_FIX,
            AGGREGATE_RIGHT,
            "An aggregate counts rows several times",
            id="aggregate-patch",
        ),
    ]
