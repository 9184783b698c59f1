"""P1, adding DISTINCT to an explosion (``inject``): under the paper preset the fetched rows
de-duplicated in order; under the key-based presets only on established join amplification and only
where the data shows join copies (``_find_copies``), see ``patching``'s docstring."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._analysis.rewrite import append_columns, inject_distinct
from .._core.probe import count_unique, distinct_in_order, dup_ratio, hashable_row
from ..policy import GuardPolicy
from ..report import RuleDecision
from .copies import UNCOMPARABLE, CopyCount, count_copies, values_of, without_copies
from .reruns import (
    SET_CHANGED,
    Explain,
    MayCollate,
    PlainRerun,
    ReachedFunctions,
    Rerun,
    RuleResult,
    UserFunctions,
    run_again,
    same_set,
)

if TYPE_CHECKING:
    from .._analysis.provenance import Provenance

__all__ = ["CopyCheck", "Why", "below_tau_applies", "inject"]


class Why:
    """``explain`` for one repair, remembering the last verdict for the report; gives None when the
    policy wants no analysis (the paper preset) or the connection provides none."""

    __slots__ = ("explain", "last")

    def __init__(self, explain: Explain | None) -> None:
        self.explain = explain
        self.last: Provenance | None = None

    def __call__(self, sql: str) -> Provenance | None:
        if self.explain is None:
            return None
        self.last = self.explain(sql)
        return self.last

    def contradicted(self, why: str) -> Provenance:
        """The verdict replaced by ``unknown`` because the result contradicts it (reported as such)."""
        return self.unknown(f"{why}: the facts and the data disagree")

    def unknown(self, evidence: str) -> Provenance:
        """The verdict replaced by ``unknown``: the keys allow join copies, but whether the data has any
        could not be established."""
        from .._analysis.provenance import Provenance

        self.last = Provenance("unknown", evidence)
        return self.last


class CopyCheck:
    """How the join-copy check reaches the connection: a re-execution that returns plain tuples, and
    the names of the connection's own functions (a statement calling one is never run again), and
    those of them a statement calls without naming them."""

    __slots__ = ("reached", "rerun", "user_functions")

    def __init__(
        self, rerun: PlainRerun | None, user_functions: UserFunctions, reached: ReachedFunctions | None = None
    ) -> None:
        self.rerun = rerun
        self.user_functions = user_functions
        self.reached = reached


def below_tau_applies(rows: int, unique_rows: int, policy: GuardPolicy) -> bool:
    """Whether a result below ``tau_inject`` is one text_to_sql's P1 may fire on (given amplification):
    duplicates at ``dup_ratio >= tau_amplified``. Never true for the other presets."""
    tau = policy._tau_act
    return tau < policy.tau_inject and 0 < unique_rows < rows and (rows - unique_rows) / rows >= tau


def inject(
    sql: str,
    rows: list[Any],
    unique_rows: int,
    policy: GuardPolicy,
    rerun: Rerun,
    may_collate: MayCollate,
    dialect: str,
    why: Why,
    below_tau: bool,
    copies: CopyCheck,
) -> RuleResult:
    """P1. Under the paper preset: DISTINCT on the explosion. Under the key-based presets it acts only on
    established join amplification and only where the data shows join copies: ``"patch"`` removes
    exactly the copies (two customers named alike stay two rows), ``"text_to_sql"`` serves the distinct
    values (its answers are sets)."""
    if not policy.inject_distinct:
        return RuleDecision("P1", False, "disabled by policy (inject_distinct=False)"), None
    rewrite = inject_distinct(sql, dialect)
    if rewrite.sql is None:
        return RuleDecision("P1", False, rewrite.reason), None
    ratio = dup_ratio(len(rows), unique_rows)
    if below_tau:
        threshold = (
            f"dup_ratio {ratio:.3f} >= tau_amplified {policy.tau_amplified} (below tau_inject {policy.tau_inject})"
        )
    else:
        threshold = f"dup_ratio {ratio:.3f} >= tau_inject {policy.tau_inject}"
    provenance = why(sql)
    if provenance is not None and provenance.verdict == "identified" and not provenance.amplification:
        # The keys say no row can repeat, yet rows repeat: the data breaks a declared key, or the
        # catalog is not what it says. Nothing the verdict rests on can be trusted.
        provenance = why.contradicted(
            f"the declared keys say no row can repeat ({provenance.evidence}), "
            f"yet {len(rows) - unique_rows} of {len(rows)} rows repeat"
        )
    copy_count: int | None = None
    served = "the fetched rows de-duplicated in order of first occurrence"
    if provenance is None:
        origin = ""
    elif provenance.amplification:
        origin = f"; join amplification ({provenance.verdict}): {provenance.evidence}"
        if provenance.verdict == "identified":
            # The projection holds a key of every projected table: equal rows are the same combination
            # of their rows, so every duplicate is a join copy, and nothing needs to run again.
            copy_count = len(rows) - unique_rows
            served = f"{copy_count} join copies (the projection identifies the rows); {served}"
        else:
            found = _find_copies(sql, rows, provenance.identities, provenance.identity_gap, dialect, copies)
            if isinstance(found, str):
                provenance = why.unknown(
                    f"{provenance.evidence}; whether the data repeats a row of the projected tables is "
                    f"not established: {found}"
                )
                return RuleDecision(
                    "P1", False, f"{threshold}, but provenance unknown ({found}): rows left as they are"
                ), None
            check_sql, values, checked, count = found
            copy_count = count.copies
            if not count.copies:
                return RuleDecision(
                    "P1",
                    False,
                    f"{threshold}{origin}; but no join copies on the data: every repeated row comes from a "
                    "different row of the projected tables (value repeats), rows left as they are",
                    copies=0,
                ), None
            # Some equal rows are distinct rows of the projected tables: DISTINCT would merge them.
            merges_values = len(count.kept) != sum(count.kept.values())
            if policy.provenance != "text_to_sql" and merges_values:
                kept_rows = without_copies(rows, values, count, checked, len(values[0]))
                merged = sum(count.kept.values()) - len(count.kept)
                reason = (
                    f"{threshold}{origin}; {count.copies} join copies on the data, removed: {len(rows)} -> "
                    f"{len(kept_rows)} rows, one per combination of the projected tables' rows in order of "
                    f"first occurrence ({merged} rows equal to another but from other rows of the projected "
                    "tables kept, where DISTINCT would merge them; final_sql is the check that told them apart)"
                )
                return RuleDecision("P1", True, reason, copies=count.copies), (
                    check_sql,
                    kept_rows,
                    "join_copies_removed",
                )
            how = "value repeats merged too (text_to_sql: answers are sets)" if merges_values else "no value repeat"
            served = f"{count.copies} join copies on the data, {how}; {served}"
    elif below_tau:
        return RuleDecision(
            "P1",
            False,
            f"{threshold}, but below tau_inject P1 fires only on join amplification; "
            f"provenance {provenance.verdict}: {provenance.evidence}",
        ), None
    elif provenance.verdict == "value_repeats":
        return RuleDecision(
            "P1",
            False,
            f"{threshold}, but the duplicates are value repeats, not join amplification: {provenance.evidence}",
        ), None
    else:
        # Fail closed: rows change only on established join amplification.
        return RuleDecision(
            "P1",
            False,
            f"{threshold}, but provenance unknown ({provenance.evidence}): P1 acts only on established "
            "join amplification, rows left as they are",
        ), None
    new_rows = distinct_in_order(rows)
    if len(new_rows) != unique_rows:  # the probe and the de-duplication disagree: serve nothing new
        return RuleDecision("P1", False, SET_CHANGED, copies=copy_count), None
    # Text that a collation could merge shows among the distinct rows already: no need to scan them all.
    doubt = _collation_doubt(sql, new_rows, may_collate)
    if doubt is None:
        how = f"{served}; nothing re-executed" if copy_count is None else served
    else:
        # Only the engine knows what its DISTINCT merges here: run the rewrite once, read-only, and serve
        # the de-duplicated rows only if it returns exactly them.
        verified, failure = run_again(rerun, rewrite.sql, unique_rows)
        if verified is None:
            return RuleDecision("P1", False, f"{doubt}; {failure or SET_CHANGED}", copies=copy_count), None
        if len(verified) != unique_rows or count_unique(verified) != unique_rows or not same_set(verified, rows):
            return RuleDecision("P1", False, f"{doubt}; {SET_CHANGED}", copies=copy_count), None
        how = f"{served}, checked by one read-only run ({doubt})"
    reason = f"{threshold}{origin}; {len(rows)} -> {len(new_rows)} rows ({how})"
    return RuleDecision("P1", True, reason, copies=copy_count), (rewrite.sql, new_rows, "distinct_injected")


def _find_copies(
    sql: str,
    rows: list[Any],
    identities: tuple[str, ...],
    gap: str,
    dialect: str,
    copies: CopyCheck,
) -> tuple[str, list[tuple[Any, ...]], list[Any], CopyCount] | str:
    """Run the join-copy check: the statement again, read-only, with the projected tables' row
    identities appended; the check's SQL, the rows' values and the count, or why it could not run."""
    if not identities:
        return gap or "no row identity for the projected tables"
    if copies.rerun is None:
        return "the connection cannot run the check"
    check = append_columns(sql, identities, dialect)
    if check.sql is None:
        return f"the check cannot be written: {check.reason}"
    functions = copies.user_functions()
    if functions is None:
        return "the connection's functions cannot be listed, so the check is not run (it could call one again)"
    called = _calls_any(sql, functions)
    if called:
        return f"the statement calls {called}(), a function of the application's: not run again"
    if functions:
        reached = None if copies.reached is None else copies.reached(sql)
        if reached is None:
            return "which of the application's functions the statement calls cannot be told: not run again"
        if reached:
            return (
                f"the statement calls {min(reached)}(), a function of the application's, without naming it "
                "(a view, a generated column, an operator): not run again"
            )
    values = values_of(rows)
    if values is None:
        return "the row factory's rows cannot be read back as values"
    checked, failure = run_again(copies.rerun, check.sql, len(rows))
    if checked is None:
        return failure or "the check returned more rows than the statement"
    width = len(values[0]) if values else 0
    count = count_copies(values, checked, width)
    if count == UNCOMPARABLE:  # a text_factory's bytearrays, say: compare hashable stand-ins instead
        values = [tuple(map(hashable_row, row)) for row in values]
        checked = [tuple(map(hashable_row, row)) for row in checked]
        count = count_copies(values, checked, width)
    if isinstance(count, str):
        return count
    return check.sql, values, checked, count


_CALL = re.compile(r"([A-Za-z_][\w$]*)\s*\(")


def _calls_any(sql: str, functions: frozenset[str]) -> str:
    """The first of ``functions`` that ``sql`` calls (a name followed by a parenthesis), or "". Names in
    string literals count too, which can only keep a statement from running again."""
    if not functions:
        return ""
    called = {name.lower() for name in _CALL.findall(sql)} & functions
    return min(called) if called else ""


_COLLATE = re.compile(r"\bcollate\b", re.IGNORECASE)


def _collation_doubt(sql: str, rows: Sequence[Any], may_collate: MayCollate) -> str | None:
    """Why SQL's DISTINCT might merge rows that Python keeps apart, or None.

    Python compares text by code points; a NOCASE or RTRIM collation (or a caller's own) also merges
    text that differs in ASCII case or trailing spaces. Only then could serving the Python-distinct
    rows differ from what ``SELECT DISTINCT`` returns, so the engine's collations are consulted only
    for results holding such near-duplicate text.
    """
    if _COLLATE.search(sql):
        return "the query names a COLLATE: SQL's DISTINCT may merge rows that differ in text"
    if not _has_case_or_space_variants(rows):
        return None
    if may_collate():
        return (
            "text values differ only in case or trailing spaces and the database declares collations: "
            "SQL's DISTINCT may merge them"
        )
    return None


def _has_case_or_space_variants(rows: Sequence[Any]) -> bool:
    folded: dict[tuple[int, str], str] = {}
    for row in rows:
        values = row.values() if isinstance(row, dict) else row
        for position, value in enumerate(values):
            if isinstance(value, str):
                key = (position, value.rstrip(" ").lower())
                seen = folded.setdefault(key, value)
                if seen != value:
                    return True
    return False
