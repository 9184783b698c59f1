"""What makes checking an aggregate at risk cost about a query: reusing a confirmation while nothing it
read can have changed (issue 24, item 4).

``guarded_sqlite._rules.fanout.confirm`` runs the check query of a plan at risk on every execution. On SQLite
its rows (and the plan they are the rows of) are kept per (statement, parameters, row cap) and given to
``confirm`` again, which decides anew from them in microseconds, while a *data token* read before the
check ran is unchanged. The token is:

* ``PRAGMA <schema>.data_version`` of every attached schema (``PRAGMA database_list``, with their
  files): commits by other connections, to the main file or to an ATTACHed one;
* ``total_changes``: the connection's own INSERT, UPDATE and DELETE rows, committed or not (it never
  goes back, so a rolled-back change still moves it);
* ``PRAGMA <schema>.schema_version``: the connection's own DDL, which the two above do not see;
* whether LIKE compares case-sensitively (``SELECT 'a' LIKE 'A'``): ``PRAGMA case_sensitive_like`` run
  through a plain ``sqlite3.Cursor`` of the connection, which the guard does not see;
* the connection's *epoch* (``ConnectionState.epoch``), which the guarded connection moves on what none
  of these numbers show: a statement that returns no rows (ATTACH, DETACH, a PRAGMA that changes how
  text compares, DDL), a function or collation registered, an authorizer set (it can make a column
  read as NULL), an extension loaded, ``deserialize()``, a ``backup()`` into it, a blob opened for
  writing (``blobopen()``: its writes are not statements, so neither ``total_changes`` nor the own
  connection's ``data_version`` moves).

Where the numbers cannot tell, nothing is kept or reused: while a blob opened for writing through the
connection is open (``connection_state.writing_blob``), and under ``PRAGMA read_uncommitted`` (on a
shared cache the statement then reads other connections' uncommitted writes, which move nothing; a
shared cache without it is covered: another connection's commit moves ``data_version``, and its
uncommitted writes lock the tables they changed).

None of these moves on a ROLLBACK, which can undo a change the token already counted into the kept
rows. So nothing is kept or reused while a transaction is open (``in_transaction``): outside one,
every transaction since the check ended, and its changes, if any, moved ``total_changes`` or
``data_version``; a rolled-back DDL restores the schema it changed. ``schema_version`` can repeat
(``guarded_sqlite._analysis.catalog``), but only through a rollback, which restores the facts the plan used, or
through what moves the epoch.

A statement is never reused that calls a function that may be non-deterministic or the application's
(``sqltree.rerun_hazard``, read when the plan is made: ``AggregatePlan.hazard``), or that names one of
the connection's application functions (which may override a built-in's name) or reaches one unnamed,
through a view, a generated column or an operator (``aggregate_check.reached_functions``): its rows
would be computed by a function run fewer times than the caller's code expects, or would go stale.

DuckDB and PostgreSQL keep nothing: neither gives a cheap number that moves with every commit by
other connections (DuckDB's connections of one database in a process share its data; PostgreSQL's
MVCC snapshots change with every other session's commit, and reading ``pg_stat_database`` or
``txid_current_snapshot`` is itself a round trip that sees neither uncommitted own writes nor DDL
exactly), so a kept confirmation could serve another snapshot's values.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from .._analysis.paging import bounded_check
from .._engines import NO_PARAMETERS

__all__ = [
    "BUDGET_FLOOR",
    "BUDGET_RATIO",
    "KEPT",
    "Kept",
    "bounded_check",
    "budget",
    "names_function",
    "over_budget",
    "parameters_key",
    "sqlite_token",
]

KEPT = 64
"""Confirmations kept per connection, oldest dropped first."""

KEPT_ROWS = 10_000
"""A check query returning more rows than this is not kept (its rows would be held in memory)."""

REUSED = "confirmation reused: data, schema and functions unchanged since it ran"
"""Added to the decision of a confirmation served from what was kept."""


BUDGET_RATIO = 10.0
"""A confirmation may run this many times the statement's own time (execute and fetch) ..."""

BUDGET_FLOOR = 0.005
"""... and at least this many seconds; past its budget it is stopped and the rule did not look."""

MODEL_BUDGET_RATIO = 25.0
"""Under ``"text_to_sql"``, whose statements a model wrote in seconds: this many times the statement's time ..."""

MODEL_BUDGET_FLOOR = 0.1
"""... and at least this many seconds (a loaded machine must not leave a model's number unchecked)."""


def budget(statement_s: float | None, rerun_timeout: float, left: float | None, model: bool = False) -> float:
    """Seconds a confirmation may run: ``BUDGET_RATIO`` times the statement's own time, at least
    ``BUDGET_FLOOR`` (``model``, the ``"text_to_sql"`` preset: ``MODEL_BUDGET_RATIO`` and
    ``MODEL_BUDGET_FLOOR``), never more than ``rerun_timeout`` nor than what is left of an agent tool's
    deadline (``left``; the smaller of the two). Unknown statement time: ``rerun_timeout``."""
    ratio, floor = (MODEL_BUDGET_RATIO, MODEL_BUDGET_FLOOR) if model else (BUDGET_RATIO, BUDGET_FLOOR)
    limit = rerun_timeout if statement_s is None else min(rerun_timeout, max(floor, ratio * statement_s))
    return limit if left is None else min(limit, left)


def over_budget(limit: float, statement_s: float | None, left: float | None, model: bool = False) -> str:
    """The decision's reason for a confirmation stopped (or not started) at ``limit``."""
    ratio, floor = (MODEL_BUDGET_RATIO, MODEL_BUDGET_FLOOR) if model else (BUDGET_RATIO, BUDGET_FLOOR)
    if left is not None and left <= limit:
        why = "the agent tool's deadline"
    elif statement_s is None:
        why = "rerun_timeout"
    else:
        why = f"{ratio:g}x the statement's {statement_s * 1000:.2f} ms, at least {floor * 1000:g} ms"
    return (
        f"aggregate at risk, not checked: over budget ({max(limit, 0.0) * 1000:.1f} ms: {why}); "
        "the rule did not look, rows left as written"
    )


class Kept(NamedTuple):
    """One kept confirmation: valid while ``token`` and the application's ``functions`` are the same."""

    token: tuple[Any, ...]
    functions: frozenset[str]
    outcome: Any
    """What ``fanout.confirm`` gave (a ``FanoutOutcome``, or None: nothing realised): served again with
    the statement's rows of this execution, or, when it served corrected rows, with ``corrected``."""
    corrected: list[tuple[Any, ...]] | None
    """The corrected rows as plain tuples, shaped anew for each execution (the row factory may change)."""


_SCALARS = (int, str, bytes, type(None))


def parameters_key(parameters: Any) -> tuple[Any, ...] | None:
    """The caller's parameters as part of a key, each value with its type (``1``, ``1.0`` and ``True``
    are equal in Python but not to SQLite); None when they cannot be compared exactly (an adapted
    object, a buffer), and the confirmation is not kept."""
    if parameters is NO_PARAMETERS or parameters is None:
        return ()
    if isinstance(parameters, Mapping):
        items = sorted(parameters.items(), key=lambda item: str(item[0]))
        values = [_value(v) for _, v in items]
        if any(v is None for v in values):
            return None
        return ("named", *((str(k), v) for (k, _), v in zip(items, values, strict=True)))
    if not isinstance(parameters, (tuple, list)):
        return None
    values = [_value(v) for v in parameters]
    if any(v is None for v in values):
        return None
    return tuple(values)


def _value(value: Any) -> tuple[str, Any] | None:
    kind = type(value)
    if kind is float:
        return ("float", value.hex())  # tells -0.0 from 0.0 and compares NaN with itself
    if kind in _SCALARS:
        return (kind.__name__, value)
    return None


def sqlite_token(cur: Any, raw: Any, epoch: int, like: bool = True) -> tuple[Any, ...] | None:
    """The data token of a SQLite connection (see the module docstring), or None inside a transaction,
    under ``read_uncommitted`` (nothing is kept or reused there) or when the numbers cannot be read.
    ``cur``: a plain cursor of ``raw``; ``like``: whether built-in LIKE may be called (not the
    application's own ``like``)."""
    try:
        if raw.in_transaction:
            return None
        if cur.execute("PRAGMA read_uncommitted").fetchone()[0]:
            return None
        changes = raw.total_changes
        schemas = cur.execute("PRAGMA database_list").fetchall()
        versions = []
        for _, name, _ in schemas:
            quoted = _quoted(name)
            versions.append(cur.execute(f"PRAGMA {quoted}.data_version").fetchone()[0])
            versions.append(cur.execute(f"PRAGMA {quoted}.schema_version").fetchone()[0])
        if like:
            versions.append(cur.execute(_LIKE_CASE).fetchone()[0])
    except Exception:  # an authorizer's denial, a closed connection: keep nothing, reuse nothing
        return None
    return (epoch, changes, tuple(schemas), tuple(versions))


_LIKE_CASE = "SELECT 'a' LIKE 'A'"
"""0 under ``PRAGMA case_sensitive_like = 1``, which a plain ``sqlite3.Cursor`` can run unseen and which
changes what LIKE matches in the statement, its views and generated columns alike."""


_QUOTED: dict[str, str] = {}


def _quoted(name: str) -> str:
    quoted = _QUOTED.get(name)
    if quoted is None:
        quoted = '"' + name.replace('"', '""') + '"'
        if len(_QUOTED) < 256:
            _QUOTED[name] = quoted
    return quoted


def names_function(sql: str, functions: frozenset[str]) -> bool:
    """Whether ``sql`` may call one of ``functions`` (a name followed by a parenthesis anywhere, in a
    string literal too, quoted or not: a false alarm only keeps nothing)."""
    if not functions:
        return False
    return not called_names(sql).isdisjoint(functions)


_CALLED = re.compile(r"(?<![\w$])([^\W\d][\w$]*)[\"`\]]?\s*\(")


@functools.lru_cache(maxsize=256)
def called_names(sql: str) -> frozenset[str]:
    """Every name in ``sql`` followed by a parenthesis, lower-cased; one scan per text (the guard asks
    of the same check text several times, and of a repeated statement's on every execution)."""
    return frozenset(name.lower() for name in _CALLED.findall(sql))


def remember(kept: dict[Any, Kept], key: Any, entry: Kept) -> None:
    """Keep ``entry`` under ``key``, dropping the oldest when full."""
    if key not in kept and len(kept) >= KEPT:
        del kept[next(iter(kept))]
    kept[key] = entry
