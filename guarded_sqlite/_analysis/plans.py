"""The aggregate rule's records: one aggregate at risk (``AggregateRisk``), one other SELECT of a statement
checked on its own (``ScopeCheck``), and what the planning found for a statement (``AggregatePlan``).
Frozen, built by ``aggregates.plan_aggregates`` and ``planning.aggregate_plan``, read by
``guarded_sqlite._rules.fanout``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = ["AggregatePlan", "AggregateRisk", "ScopeCheck"]


@dataclass(frozen=True)
class AggregateRisk:
    """One value aggregate whose argument's rows the join can repeat."""

    function: str
    """``"SUM"``, ``"AVG"``, ``"TOTAL"`` or ``"GROUP_CONCAT"`` (``string_agg`` included)."""

    argument: str
    """The argument's SQL."""

    repeated: tuple[str, ...]
    """The tables the argument reads (``alias (table)``), whose rows the join repeats."""

    repeating: tuple[str, ...]
    """The tables that repeat them: not determined by the argument's tables and the groups."""

    column: int | None
    """Position of the aggregate in the select list when it is a whole select item, else None."""


class ScopeCheck(NamedTuple):
    """One SELECT inside a statement (a derived table, a CTE, a subquery, a set-operation branch) whose
    value aggregate is at risk, corrected in the statement's ``corrected_sql``, and checked on its own."""

    label: str
    """Where it is: ``"derived table d"``, ``"CTE t"``, ``"set-operation branch 2"``, ``"subquery 1"``."""
    risks: tuple[AggregateRisk, ...]
    """Its aggregates at risk."""
    whole_sql: str
    """Its check query without HAVING, ORDER BY, LIMIT and OFFSET: every group's counts."""
    whole_binds: tuple[int, int] | None
    """The slice of the statement's positional parameters ``whole_sql`` binds (None: all of them)."""
    width: int
    """How many columns the SELECT has (its counts start after them)."""


@dataclass(frozen=True)
class AggregatePlan:
    """What ``plan_aggregates`` found: the aggregates at risk and the corrected query, or why none."""

    risks: tuple[AggregateRisk, ...] = ()
    corrected_sql: str | None = None
    note: str = ""
    """Why no aggregate is at risk, or why the risk cannot be corrected (then ``corrected_sql`` is None)."""
    separators: dict[int, str] = field(default_factory=dict)
    """Select-list position -> separator of each GROUP_CONCAT at risk (its parts compare as a multiset)."""
    steady: frozenset[int] = frozenset()
    """Select-list positions of the items with an aggregate but none at risk: the corrected query computes
    them over the same rows, perhaps in another order (a GROUP_CONCAT's parts, a float sum's last bits)."""
    check_sql: str | None = None
    """``corrected_sql`` with five columns per risk (in ``risks`` order) after the select list: the
    aggregate as written and as corrected, the join rows with a non-NULL argument, the distinct rows of
    the argument's tables among them, and the magnitudes summed (``SUM(ABS(arg))``; NULL for
    GROUP_CONCAT). ``guarded_sqlite._rules.fanout`` runs it, decides from the counts, serves its first
    ``width`` columns."""
    width: int = 0
    """How many columns the statement (and ``corrected_sql``) has."""
    unnamed: tuple[tuple[int, str], ...] = ()
    """(position, fallback name) of each select item the caller did not alias: the corrected query
    aliases it ``"__gs_c<position>"``, which ``served_sql`` names as the caller's cursor named it."""
    aliases: tuple[str, ...] = ()
    """The caller's own select-list aliases."""
    items: tuple[int | None, ...] = ()
    """Per risk, the position of the select item it is in; None for one only in HAVING or ORDER BY,
    whose correction shows only in which rows are served (and in what order)."""
    hazard: str = ""
    """Why running the statement again could give other rows or do more than the caller's execution
    (``sqltree.rerun_hazard``: a function that may be the application's or non-deterministic), or "":
    a confirmation of a statement with a hazard is never kept (``guarded_sqlite._rules.confirmations``)."""
    bounded_sql: str | None = None
    """For a paging query (LIMIT/OFFSET over groups): ``check_sql`` for the served groups only, with a
    marker the served keys replace (``guarded_sqlite._analysis.paging``); None: the whole check runs."""
    group_items: tuple[int, ...] = ()
    """With ``bounded_sql``: the select-list position of each GROUP BY key."""
    group_sql: tuple[str, ...] = ()
    """With ``bounded_sql``: each GROUP BY key's SQL, as the derived table reads it."""
    paging: str = ""
    """Why a paging query's confirmation cannot be bounded to its groups (it is then not run), or ""."""
    whole_sql: str | None = None
    """``check_sql`` without HAVING, ORDER BY, LIMIT, OFFSET where an aggregate decides which rows are served
    (``guarded_sqlite._analysis.deciding``): every group's counts; None where the check's rows hold them all."""
    whole_binds: tuple[int, int] | None = None
    """The slice of the statement's positional parameters ``whole_sql`` binds (None: all of them)."""
    nested: int = 0
    """An aggregate at risk in a subquery or CTE: the width of that SELECT, whose check over every group
    ``whole_sql`` is; ``corrected_sql`` and ``check_sql`` are the statement with it corrected. Else 0."""
    decides: str = ""
    """What an aggregate decides the rows or their order by (``"HAVING"``, ``"ORDER BY with LIMIT"``), or ""."""
    pregrouped: tuple[str, str, str] | None = None
    """SQLite: (the leaf's name, ``corrected_sql``, ``check_sql``) with the one table that repeats the
    argument's rows pre-grouped (``guarded_sqlite._analysis.pregroup``), to run instead where the statement
    scans that table whole; None where the shape does not allow it."""
    scopes: tuple[ScopeCheck, ...] = ()
    """The statement's other SELECTs with an aggregate at risk, every one corrected in ``corrected_sql``
    (and in ``check_sql``, which reads them corrected) and checked on its own: a corrected statement is
    served only when every one of them is (``guarded_sqlite._analysis.deciding.inner_scopes``)."""
    fused_sql: str | None = None
    """SQLite, a statement whose own SELECT has no aggregate at risk: one query holding ``check_sql``'s rows
    and every scope's ``whole_sql`` rows, each scope's check evaluated once for both (``guarded_sqlite.
    _analysis.fusing``); the rule splits its rows by ``fused_widths``. None: the queries run on their own."""
    fused_widths: tuple[int, ...] = ()
    """With ``fused_sql``: how many columns ``check_sql`` has, then each scope's ``whole_sql``, in
    ``scopes`` order (the fused query's rows hold each part in its own columns, after a part number)."""
    unanalysed: bool = False
    """The statement could not be analysed (a shape the analysis does not read: RIGHT/FULL JOIN, ROLLUP,
    unparseable SQL ...; ``note`` says which): whether an aggregate is at risk is unknown, and the rule
    says so in a decision rather than nothing (issue 42 item 2)."""
