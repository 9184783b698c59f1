"""Repairing one flagged (or DISTINCT) statement: rescue and patches, in the policy's order.

The proxy hands over the original rows and a ``Connection`` (how to run SQL read-only with the
caller's parameters, and what the engine knows about collations), plus a ``RescueContext`` when the
caller passed candidates. This module picks the rule (P1 for explosions, P2 for DISTINCT results under
the paper preset) and asks ``rewrite`` for the new text. With candidates the rescuer runs before the
patches (``rescue_first``, the paper's v2) or after them (``patch_first``, v1). Every check that fails
becomes a reason in the report; nothing here raises except ``TransactionLost`` and
KeyboardInterrupt/SystemExit, which must reach the caller.

P1 under the paper preset (``provenance="off"``) serves the fetched rows de-duplicated in order of first
occurrence: SQL's DISTINCT over the same rows can only give those rows, so nothing runs again. Under the
key-based presets it asks ``explain`` (the connection's cached ``guarded_sqlite._analysis.provenance`` verdict)
*after* the rewrite itself was accepted, so statements the rewrite refuses never cost a catalog read,
and fails closed: it acts only on established join amplification (``value_repeats``, ``unknown`` and a
verdict the rows contradict are left alone), and only where the data shows *join copies*, rows that
repeat a combination of the projected tables' rows. An ``identified`` projection needs no look (every
repeat is a copy); otherwise the join-copy check runs the statement once more, read-only, with the
projected tables' row identities appended, and ``guarded_sqlite._rules.copies`` counts the copies. Whatever
the check cannot establish (a statement calling an application's function, rows that differ from the
statement's, a check that cannot run) leaves the rows as they are with an ``unknown`` verdict; no
copies leaves them too. ``"patch"`` then removes exactly the copies (``"join_copies_removed"``, or
``"distinct_injected"`` where that is SELECT DISTINCT's result); ``"text_to_sql"`` serves the distinct
rows. P2 re-executes and commits only if the new rows pass its runtime checks; the key-based presets
never run it (``GuardPolicy``).

Decisions are logged by ``core`` once the statement's state is final (``guarded_sqlite.sinks``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from .._analysis.rewrite import append_columns, inject_distinct, is_read_only_query, remove_distinct
from .._core.probe import (
    CARTESIAN_EXPLOSION,
    classify,
    count_unique,
    distinct_in_order,
    dup_ratio,
    hashable_row,
    row_set,
)
from .._engines.engines import RerunRefused
from ..errors import TransactionLost, describe_error
from ..policy import GuardPolicy, removal_applies, removal_row_limit
from ..report import Action, RuleDecision
from ..rescue import PREVIEW_ROWS, CandidatePreview, RescueReport, RescueRequest, rescuer_name, run_rescuer
from .copies import UNCOMPARABLE, CopyCount, count_copies, values_of, without_copies

if TYPE_CHECKING:
    from .._analysis.provenance import Provenance

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

MayCollate = Callable[[], bool]
"""Whether the engine may compare text with a non-binary collation in this database (asked only when
the rows hold text that such a collation could merge)."""


class RescueContext(Protocol):
    """What the connection provides for a rescue: the caller's candidates and a way to run them."""

    candidates: Sequence[str]
    question: str | None
    hint: str | None

    def run_candidate(self, sql: str) -> list[Any] | None:
        """Rows of ``sql`` run read-only under the candidate time limit; None past the row cap."""

    def candidate_description(self, sql: str) -> Any:
        """The cursor description of the candidate last run as ``sql``."""

    def schema_summary(self) -> str:
        """The database's tables and columns, for the prompt."""

    def budget_refusal(self) -> str | None:
        """Why the connection's rescue budget forbids another rescue, or None."""

    def record_rescue(self, cost_usd: float | None) -> None:
        """Count one rescue (and its known cost) against the budget."""


class PatchOutcome(NamedTuple):
    """What the cursor should serve after rescue and patch rules had their say."""

    final_sql: str
    rows: list[Any]
    action: Action
    decisions: tuple[RuleDecision, ...]
    elapsed_ns: int
    rescue: RescueReport | None = None
    description: Any = None
    """The served candidate's cursor description when a rescue replaced the statement, else None."""
    provenance: Provenance | None = None
    """The provenance verdict a rule asked for (the last one, after a rescue), else None."""


class _Judged(NamedTuple):
    """The statement the patch rules judge, with its result: the caller's, or the candidate a rescue chose."""

    sql: str
    rows: list[Any] | None
    unique_rows: int | None
    trigger: str | None


def repair(
    sql: str,
    rows: list[Any] | None,
    unique_rows: int | None,
    trigger: str | None,
    policy: GuardPolicy,
    rerun: Rerun,
    dialect: str = "sqlite",
    context: RescueContext | None = None,
    may_collate: MayCollate = lambda: True,
    explain: Explain | None = None,
    plain_rerun: PlainRerun | None = None,
    user_functions: UserFunctions = lambda: None,
) -> PatchOutcome:
    """Run the rescue (if the statement is flagged and came with candidates) and the patch rules.

    ``rows`` is None only for ``exec_error``; then only a rescue can produce rows, and the outcome's
    ``rows`` stays empty with ``action == "none"`` when it does not. ``explain`` gives the provenance
    verdict when ``policy.provenance`` asks for one; without it the rules act as the paper's.
    ``plain_rerun`` and ``user_functions`` serve the join-copy check (without them it cannot run, and
    a verdict that needs it leaves the rows as they are).
    """
    started = time.perf_counter_ns()
    decisions: list[RuleDecision] = []
    why = _Why(explain if policy.provenance != "off" else None)
    copies = _CopyCheck(plain_rerun, user_functions)
    rescue_report: RescueReport | None = None
    rescued: tuple[str, list[Any]] | None = None
    current = _Judged(sql, rows, unique_rows, trigger)
    wants_rescue = trigger is not None and context is not None

    if wants_rescue and policy.order == "rescue_first":
        rescue_report, rescued, refusal = _rescue(sql, rows, unique_rows, trigger, policy, dialect, context)  # type: ignore[arg-type]
        decisions.extend(refusal)
        if rescued is not None:
            new_sql, new_rows = rescued
            new_unique = count_unique(new_rows)
            current = _Judged(new_sql, new_rows, new_unique, classify(len(new_rows), new_unique, policy.tau_inject))

    patched_sql, patched_rows, patch_action = _patches(
        current, policy, rerun, may_collate, dialect, decisions, why, copies
    )

    if wants_rescue and policy.order == "patch_first":
        rescue_report, rescued, refusal = _rescue(sql, rows, unique_rows, trigger, policy, dialect, context)  # type: ignore[arg-type]
        decisions.extend(refusal)
        if rescued is not None:  # v1: the rescue overwrites whatever the patches did
            patched_sql, patched_rows = rescued
            patch_action = "none"

    description = None
    if rescued is not None:
        action: Action = "candidate_selected" if patch_action == "none" else f"candidate_selected+{patch_action}"  # type: ignore[assignment]
        description = context.candidate_description(rescued[0]) if context is not None else None
    else:
        action = patch_action
    elapsed = time.perf_counter_ns() - started
    provenance = why.last
    return PatchOutcome(
        patched_sql,
        patched_rows if patched_rows is not None else [],
        action,
        tuple(decisions),
        elapsed,
        rescue_report,
        description,
        provenance,
    )


class _Why:
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


class _CopyCheck:
    """How the join-copy check reaches the connection: a re-execution that returns plain tuples, and
    the names of the connection's own functions (a statement calling one is never run again)."""

    __slots__ = ("rerun", "user_functions")

    def __init__(self, rerun: PlainRerun | None, user_functions: UserFunctions) -> None:
        self.rerun = rerun
        self.user_functions = user_functions


def _patches(
    judged: _Judged,
    policy: GuardPolicy,
    rerun: Rerun,
    may_collate: MayCollate,
    dialect: str,
    decisions: list[RuleDecision],
    why: _Why,
    copies: _CopyCheck,
) -> tuple[str, list[Any] | None, Action]:
    """P1 on an explosion (or, text_to_sql, on duplicates at ``tau_amplified``), P2 on a healthy DISTINCT
    result; appends its decision."""
    sql, rows, unique_rows, trigger = judged
    if rows is None or unique_rows is None:
        return sql, rows, "none"
    if trigger == CARTESIAN_EXPLOSION or (trigger is None and below_tau_applies(len(rows), unique_rows, policy)):
        below_tau = trigger is None
        decision, new = _inject(sql, rows, unique_rows, policy, rerun, may_collate, dialect, why, below_tau, copies)
    elif trigger is None and removal_applies(sql, len(rows), unique_rows, policy):
        decision, new = _remove(sql, rows, policy, rerun, dialect)
    else:
        return sql, rows, "none"
    decisions.append(decision)
    if new is None:
        return sql, rows, "none"
    return new


_Result = tuple[RuleDecision, tuple[str, list[Any], Action] | None]


def below_tau_applies(rows: int, unique_rows: int, policy: GuardPolicy) -> bool:
    """Whether a result below ``tau_inject`` is one text_to_sql's P1 may fire on (given amplification):
    duplicates at ``dup_ratio >= tau_amplified``. Never true for the other presets."""
    tau = policy._tau_act
    return tau < policy.tau_inject and 0 < unique_rows < rows and (rows - unique_rows) / rows >= tau


def _inject(
    sql: str,
    rows: list[Any],
    unique_rows: int,
    policy: GuardPolicy,
    rerun: Rerun,
    may_collate: MayCollate,
    dialect: str,
    why: _Why,
    below_tau: bool,
    copies: _CopyCheck,
) -> _Result:
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
        return RuleDecision("P1", False, _SET_CHANGED, copies=copy_count), None
    # Text that a collation could merge shows among the distinct rows already: no need to scan them all.
    doubt = _collation_doubt(sql, new_rows, may_collate)
    if doubt is None:
        how = f"{served}; nothing re-executed" if copy_count is None else served
    else:
        # Only the engine knows what its DISTINCT merges here: run the rewrite once, read-only, and serve
        # the de-duplicated rows only if it returns exactly them.
        verified, failure = _run(rerun, rewrite.sql, unique_rows)
        if verified is None:
            return RuleDecision("P1", False, f"{doubt}; {failure or _SET_CHANGED}", copies=copy_count), None
        if len(verified) != unique_rows or count_unique(verified) != unique_rows or not _same_set(verified, rows):
            return RuleDecision("P1", False, f"{doubt}; {_SET_CHANGED}", copies=copy_count), None
        how = f"{served}, checked by one read-only run ({doubt})"
    reason = f"{threshold}{origin}; {len(rows)} -> {len(new_rows)} rows ({how})"
    return RuleDecision("P1", True, reason, copies=copy_count), (rewrite.sql, new_rows, "distinct_injected")


def _find_copies(
    sql: str,
    rows: list[Any],
    identities: tuple[str, ...],
    gap: str,
    dialect: str,
    copies: _CopyCheck,
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
    values = values_of(rows)
    if values is None:
        return "the row factory's rows cannot be read back as values"
    checked, failure = _run(copies.rerun, check.sql, len(rows))
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


def _remove(sql: str, rows: list[Any], policy: GuardPolicy, rerun: Rerun, dialect: str) -> _Result:
    """P2, the paper's rule: it runs only under the ``"paper"`` preset (``GuardPolicy``)."""
    if not policy.remove_distinct:
        return RuleDecision("P2", False, "disabled by policy (remove_distinct=False)"), None
    rewrite = remove_distinct(sql, dialect)
    if rewrite.sql is None:
        return RuleDecision("P2", False, rewrite.reason), None
    can_commit_up_to = removal_row_limit(len(rows), policy.tau_remove)
    new_rows, failure = _run(rerun, rewrite.sql, min(policy.row_cap, can_commit_up_to))
    if new_rows is None:
        if not failure and can_commit_up_to <= policy.row_cap:
            failure = (
                f"without DISTINCT more than {can_commit_up_to} rows, so dup_ratio > tau_remove {policy.tau_remove} "
                "(stopped fetching there)"
            )
        elif not failure:
            failure = "re-execution exceeded row_cap"
        return RuleDecision("P2", False, failure), None
    if len(new_rows) <= len(rows):
        return RuleDecision("P2", False, "removing DISTINCT does not add rows"), None
    ratio = dup_ratio(len(new_rows), count_unique(new_rows))
    if ratio > policy.tau_remove:
        return RuleDecision(
            "P2", False, f"without DISTINCT dup_ratio {ratio:.3f} > tau_remove {policy.tau_remove}"
        ), None
    if not _same_set(new_rows, rows):
        return RuleDecision("P2", False, _SET_CHANGED), None
    reason = (
        f"without DISTINCT dup_ratio {ratio:.3f} <= tau_remove {policy.tau_remove}; {len(rows)} -> {len(new_rows)} rows"
    )
    return RuleDecision("P2", True, reason), (rewrite.sql, new_rows, "distinct_removed")


_SET_CHANGED = "the rewritten query returns a different set of rows (a collation or non-deterministic function?)"


def _run(rerun: Rerun, sql: str, max_rows: int) -> tuple[list[Any] | None, str]:
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


def _same_set(left: Sequence[Any], right: Sequence[Any]) -> bool:
    return row_set(left) == row_set(right)


def _rescue(
    sql: str,
    rows: list[Any] | None,
    unique_rows: int | None,
    trigger: str,
    policy: GuardPolicy,
    dialect: str,
    context: RescueContext,
) -> tuple[RescueReport | None, tuple[str, list[Any]] | None, list[RuleDecision]]:
    """Run the rescuer on the selection; (report, chosen sql and rows or None, refusal decisions)."""
    rescuer = policy.rescue
    if rescuer is None:
        return None, None, [RuleDecision("rescue", False, "candidates were given but the policy has no rescuer")]
    if not context.candidates:
        return None, None, [RuleDecision("rescue", False, "the candidate list is empty")]
    if not is_read_only_query(sql, dialect):
        return None, None, [RuleDecision("rescue", False, "the selected statement is not a read-only query")]
    refusal = context.budget_refusal()
    if refusal is not None:
        return None, None, [RuleDecision("rescue", False, refusal)]
    started = time.perf_counter()
    try:
        schema = context.schema_summary()
    except RerunRefused as refused:  # the engine cannot run anything read-only now: no candidates either
        return None, None, [RuleDecision("rescue", False, f"candidates cannot run: {refused}")]
    except Exception as error:  # the prompt can do without the schema
        schema = f"(schema unavailable: {type(error).__name__})"

    previews: list[CandidatePreview] = []
    # Candidates' rows are kept only while all of them together stay within row_cap; a chosen
    # candidate whose rows were let go runs once more.
    results: list[list[Any] | None] = []
    kept_rows = 0
    locked: str | None = None
    for index, candidate_sql in enumerate(context.candidates):
        if locked is not None:  # each candidate would wait out the busy timeout again
            previews.append(CandidatePreview(index, candidate_sql, None, None, (), f"not run: {locked}", 0.0))
            results.append(None)
            continue
        preview, candidate_rows = _preview(index, candidate_sql, context, dialect)
        previews.append(preview)
        if candidate_rows is not None and kept_rows + len(candidate_rows) > policy.row_cap:
            candidate_rows = None
        kept_rows += len(candidate_rows) if candidate_rows is not None else 0
        results.append(candidate_rows)
        if preview.error is not None and "database is locked" in preview.error:
            locked = "the database is locked"
    selected = CandidatePreview(
        -1,
        sql,
        None if rows is None else len(rows),
        unique_rows,
        tuple(rows[:PREVIEW_ROWS]) if rows else (),
        None if rows is not None else "the selected SQL failed to execute",
        0.0,
    )
    request = RescueRequest(
        selected, trigger, tuple(previews), context.question, context.hint, schema, policy.tau_inject
    )
    candidates_ms = (time.perf_counter() - started) * 1000
    choice, judge_ms = run_rescuer(rescuer, request)
    context.record_rescue(choice.cost_usd)

    chosen: tuple[str, list[Any]] | None = None
    fallback = choice.reason
    if choice.index is not None:
        candidate_rows = results[choice.index]
        if candidate_rows is None and previews[choice.index].error is None:
            _, candidate_rows = _preview(choice.index, context.candidates[choice.index], context, dialect)
        if candidate_rows is None:
            why = previews[choice.index].error or "it failed when run again"
            fallback = f"candidate {choice.index} cannot serve rows: {why}"
        else:
            chosen = (context.candidates[choice.index], candidate_rows)
            fallback = None
    report = RescueReport(
        rescuer=rescuer_name(rescuer),
        trigger=trigger,
        chosen_index=choice.index if chosen is not None else None,
        chosen_sql=chosen[0] if chosen is not None else None,
        fallback_reason=fallback if chosen is None else None,
        answer=choice.answer,
        latency_ms=candidates_ms + judge_ms,
        candidates_ms=candidates_ms,
        judge_ms=judge_ms,
        prompt_tokens=choice.prompt_tokens,
        completion_tokens=choice.completion_tokens,
        cost_usd=choice.cost_usd,
        candidates=tuple(previews),
    )
    return report, chosen, []


def _preview(index: int, sql: str, context: RescueContext, dialect: str) -> tuple[CandidatePreview, list[Any] | None]:
    """Run one candidate read-only; its preview, and its rows when it may serve the cursor."""
    started = time.perf_counter()
    if not is_read_only_query(sql, dialect):
        return CandidatePreview(index, sql, None, None, (), "not a read-only query: never executed", 0.0), None
    try:
        rows = context.run_candidate(sql)
    except TransactionLost:
        raise
    except Exception as error:  # failures and timeouts are part of the preview, not the caller's problem
        elapsed = (time.perf_counter() - started) * 1000
        return CandidatePreview(index, sql, None, None, (), describe_error(error), elapsed), None
    elapsed = (time.perf_counter() - started) * 1000
    if rows is None:
        return CandidatePreview(index, sql, None, None, (), "result exceeds row_cap", elapsed), None
    return CandidatePreview(index, sql, len(rows), count_unique(rows), tuple(rows[:PREVIEW_ROWS]), None, elapsed), rows
