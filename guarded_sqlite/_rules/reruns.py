"""What the patch rules share: how they run SQL again (read-only, with the caller's parameters) and
compare its rows with the statement's, and the shapes of the connection's answers they are given."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._core.probe import row_set
from .._engines import RerunRefused
from ..errors import TransactionLost, describe_error
from ..report import Action, RuleDecision

if TYPE_CHECKING:
    from .._analysis.provenance import Provenance

__all__ = [
    "SET_CHANGED",
    "Explain",
    "MayCollate",
    "PlainRerun",
    "ReachedFunctions",
    "Rerun",
    "RuleResult",
    "UserFunctions",
    "run_again",
    "same_set",
]

Rerun = Callable[[str, int], list[Any] | None]
"""Executes SQL read-only with the caller's parameters; returns its rows, or None past the given
number of rows."""

Explain = Callable[[str], "Provenance"]
"""The provenance of a statement's duplicates on this connection (schema facts and verdicts cached by
the connection); asked only when a rule needs the verdict."""

PlainRerun = Callable[[str, int], list[Any] | None]
"""``Rerun`` without the caller's row factory: rows as plain tuples (the join-copy check reads its
appended identity columns by position), for a statement proven unable to write (a single SELECT that
calls no application function), which SQLite runs without switching ``query_only`` on."""

UserFunctions = Callable[[], "frozenset[str] | None"]
"""Folded names of the connection's functions that are not the engine's built-ins (None: cannot tell)."""

ReachedFunctions = Callable[[str], "frozenset[str] | None"]
"""Those of ``UserFunctions`` a statement calls, its text naming them or not (a view's body, a generated
column it reads: c19); None: cannot tell."""

MayCollate = Callable[[], bool]
"""Whether the engine may compare text with a non-binary collation in this database (asked only when
the rows hold text that such a collation could merge)."""

RuleResult = tuple[RuleDecision, tuple[str, list[Any], Action] | None]
"""A rule's decision, and what to serve when it applied: (final SQL, rows, action), else None."""


SET_CHANGED = "the rewritten query returns a different set of rows (a collation or non-deterministic function?)"


def run_again(rerun: Rerun, sql: str, max_rows: int) -> tuple[list[Any] | None, str]:
    """Rows of the re-execution, or None and why not ("" when it only passed ``max_rows``)."""
    try:
        rows = rerun(sql, max_rows)
    except RerunRefused as refusal:
        return None, f"not re-executed: {refusal}"
    except TransactionLost:
        raise
    except Exception as error:  # the original result stands whatever else the rerun does
        return None, f"re-execution failed: {describe_error(error)}"
    return rows, ""


def same_set(left: Sequence[Any], right: Sequence[Any]) -> bool:
    return row_set(left) == row_set(right)
