"""The metrics: small pure functions from rows and pair records to verdicts and summaries.

Set-EX is BIRD's official comparison, ``set(pred_rows) == set(gold_rows)``; Multiset-EX keeps
multiplicities with ``collections.Counter`` (order-insensitive). Nothing here touches a database.

>>> set_ex([(1,), (1,)], [(1,)]), multiset_ex([(1,), (1,)], [(1,)])
(True, False)
>>> percent(2, 3)
66.6667
>>> missing_table("OperationalError: no such table: singer"), missing_table("OperationalError: no such column: x")
(True, False)
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from functools import cached_property
from typing import Any

from .records import PairRecord
from .report import (
    DetectorStats,
    DifficultyScores,
    FixBreak,
    FlagCounts,
    RescueStats,
    RuleStats,
    Scores,
    TriggerPrecision,
    VerdictStats,
)
from .sweep_report import SweepRow

TRIGGERS = ("exec_error", "empty_result", "cartesian_explosion", "aggregate_fanout")
VERDICTS = ("amplified", "identified", "value_repeats", "unknown")
"""``guarded_sqlite._analysis.provenance.Verdict``'s values, listed here so that scoring never imports sqlglot."""
ACTIONS = {
    "P1": ("distinct_injected", "join_copies_removed"),
    "P2": ("distinct_removed",),
    "aggregate": ("aggregate_defanned",),
}
"""The actions each rule's rewrite reports."""
RULES = tuple(ACTIONS)
# BIRD's strata in their natural order; other labels follow alphabetically.
_DIFFICULTY_ORDER = {"simple": 0, "moderate": 1, "challenging": 2}


def set_ex(pred_rows: Iterable[Hashable], gold_rows: Iterable[Hashable]) -> bool:
    """Set-EX, exactly as BIRD's evaluator: the rows are equal as sets."""
    return set(pred_rows) == set(gold_rows)


def multiset_ex(pred_rows: Sequence[Hashable], gold_rows: Sequence[Hashable]) -> bool:
    """Multiset-EX: the rows are equal as multisets (order ignored, duplicate counts kept)."""
    return len(pred_rows) == len(gold_rows) and Counter(pred_rows) == Counter(gold_rows)


class GoldRows:
    """A gold result, with its set and Counter built once and reused for every comparison."""

    def __init__(self, rows: Sequence[Hashable]) -> None:
        self.rows = rows

    @cached_property
    def as_set(self) -> set[Hashable]:
        return set(self.rows)

    @cached_property
    def as_counter(self) -> Counter[Hashable]:
        return Counter(self.rows)

    def verdicts(self, pred_rows: Sequence[Hashable]) -> tuple[bool, bool]:
        """``(set_ex, multiset_ex)`` of ``pred_rows`` against this gold result.

        The same comparisons as ``set_ex``/``multiset_ex``; Multiset-EX is only computed when Set-EX
        passes, since equal multisets imply equal sets.
        """
        same_set = set(pred_rows) == self.as_set
        if not same_set or len(pred_rows) != len(self.rows):
            return same_set, False
        return True, Counter(pred_rows) == self.as_counter


def percent(count: int, total: int) -> float | None:
    """``100 * count / total`` rounded to 4 decimals; None when ``total`` is 0."""
    return None if total == 0 else round(100.0 * count / total, 4)


def ratio(part: int, whole: int) -> float | None:
    """``part / whole`` rounded to 4 decimals; None when ``whole`` is 0."""
    return None if whole == 0 else round(part / whole, 4)


def transitions(before: Sequence[bool], after: Sequence[bool]) -> tuple[int, int]:
    """``(fixes, breaks)``: positions going False -> True and True -> False."""
    pairs = list(zip(before, after, strict=True))
    fixes = sum(1 for old, new in pairs if new and not old)
    breaks = sum(1 for old, new in pairs if old and not new)
    return fixes, breaks


def scores(records: Sequence[PairRecord], side: str) -> Scores:
    """Set-EX, Multiset-EX and their gap for ``side`` = ``"baseline"`` or ``"guarded"``."""
    if side not in ("baseline", "guarded"):
        raise ValueError(f"side must be 'baseline' or 'guarded', not {side!r}")
    n = len(records)
    set_ok = sum(1 for r in records if getattr(r, f"{side}_set"))
    multiset_ok = sum(1 for r in records if getattr(r, f"{side}_multiset"))
    set_pct, multiset_pct = percent(set_ok, n), percent(multiset_ok, n)
    gap = None if n == 0 else round(100.0 * (set_ok - multiset_ok) / n, 4)
    return Scores(
        n=n,
        set_ex=set_pct,
        multiset_ex=multiset_pct,
        gap_pp=gap,
        set_correct=set_ok,
        multiset_correct=multiset_ok,
        errors=sum(1 for r in records if r.status == "error"),
        timeouts=sum(1 for r in records if r.status == "timeout"),
        transpile_errors=sum(1 for r in records if r.transpile_failed),
    )


def flag_counts(records: Sequence[PairRecord]) -> FlagCounts:
    """Flagged predictions, by trigger."""
    counts = Counter(r.trigger for r in records if r.trigger is not None)
    return FlagCounts(sum(counts.values()), *(counts.get(trigger, 0) for trigger in TRIGGERS))


def fix_break(outcomes: Iterable[tuple[bool, bool, bool, bool]]) -> FixBreak:
    """The fix/break counts of rewritten predictions.

    Each outcome is ``(baseline_set, baseline_multiset, rewritten_set, rewritten_multiset)``.

    >>> fix_break([(True, False, True, True), (True, True, True, False), (True, True, True, True)]).net
    0
    """
    items = list(outcomes)
    fix, brk = transitions([o[1] for o in items], [o[3] for o in items])
    set_fix, set_brk = transitions([o[0] for o in items], [o[2] for o in items])
    return FixBreak(len(items), fix, brk, fix - brk, set_fix, set_brk)


def rule_stats(records: Sequence[PairRecord], rule: str) -> RuleStats:
    """Fired/fix/break of one patch rule, comparing guarded to baseline verdicts where it fired."""
    fired = [r for r in records if r.action in ACTIONS[rule]]
    counts = fix_break((r.baseline_set, r.baseline_multiset, r.guarded_set, r.guarded_multiset) for r in fired)
    return RuleStats(**vars(counts), rule=rule)


def verdict_stats(records: Sequence[PairRecord], policy: Any) -> dict[str, VerdictStats]:
    """Per provenance verdict: predictions that got it and P1/P2 fired/fix/break among them. Empty for a
    policy that never asks the analysis (``"paper"``, ``"observe"``)."""
    if policy.mode != "patch" or policy.provenance == "off":
        return {}
    out = {}
    for verdict in VERDICTS:
        asked = [r for r in records if r.provenance == verdict]
        p1, p2 = (
            fix_break(
                (r.baseline_set, r.baseline_multiset, r.guarded_set, r.guarded_multiset)
                for r in asked
                if r.action in ACTIONS[rule]
            )
            for rule in ("P1", "P2")
        )
        left_alone = sum(1 for r in asked if r.action == "none")
        out[verdict] = VerdictStats(verdict, len(asked), left_alone, p1, p2)
    return out


def trigger_precision(records: Sequence[PairRecord]) -> TriggerPrecision:
    """Precision of flags among ``records`` (all assumed flagged): Multiset-EX failures / flagged."""
    true_positives = sum(1 for r in records if not r.baseline_multiset)
    return TriggerPrecision(len(records), true_positives, ratio(true_positives, len(records)))


def detector_stats(records: Sequence[PairRecord]) -> DetectorStats:
    """Detector precision (overall and per trigger) and MBS recall, as in the paper's Appendix I."""
    flagged = [r for r in records if r.flagged]
    per_trigger = {trigger: trigger_precision([r for r in flagged if r.trigger == trigger]) for trigger in TRIGGERS}
    mbs = [r for r in records if r.mbs]
    mbs_flagged = sum(1 for r in mbs if r.flagged)
    return DetectorStats(trigger_precision(flagged), per_trigger, len(mbs), mbs_flagged, ratio(mbs_flagged, len(mbs)))


def difficulty_breakdown(records: Sequence[PairRecord]) -> tuple[DifficultyScores, ...]:
    """Scores per difficulty label; empty when no record has one."""
    labels = sorted(
        {r.difficulty for r in records if r.difficulty is not None},
        key=lambda label: (_DIFFICULTY_ORDER.get(label, len(_DIFFICULTY_ORDER)), label),
    )
    rows = []
    for label in labels:
        stratum = [r for r in records if r.difficulty == label]
        rows.append(DifficultyScores(label, scores(stratum, "baseline"), scores(stratum, "guarded")))
    return tuple(rows)


def median(values: Sequence[float]) -> float | None:
    """The median, rounded to 4 decimals; None for no values."""
    return None if not values else round(statistics.median(values), 4)


def quantile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank quantile (``q`` in [0, 1]), rounded to 4 decimals; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return round(ordered[rank - 1], 4)


def sweep_row(tau: float, outcomes: Iterable[tuple[bool, bool, bool, bool]]) -> SweepRow:
    """A sweep table row from the fired outcomes at ``tau`` (as ``fix_break`` takes them)."""
    return SweepRow(**vars(fix_break(outcomes)), tau=tau)


_REASON_CUT = re.compile(r"[:('\"]")
_NUMBER = re.compile(r"\d+")


def fallback_prefix(reason: str) -> str:
    """A rescue fallback reason without its details: cut at ``:``, ``(`` or a quote, numbers as N."""
    head = _REASON_CUT.split(reason, maxsplit=1)[0]
    return _NUMBER.sub("N", head).strip() or reason.strip()[:40]


def rescue_stats(records: Sequence[PairRecord], policy: Any, candidates_dropped: int = 0) -> RescueStats:
    """Candidate rescue over ``records``: runs, choices, fallbacks, fix/break where a candidate served, cost."""
    from ..rescue import rescuer_name

    ran = [r for r in records if r.rescue_ran]
    chosen = [r for r in ran if r.rescue_chosen_index is not None]
    fallbacks = Counter(fallback_prefix(r.rescue_fallback or "") for r in ran if r.rescue_chosen_index is None)
    changed = fix_break((r.baseline_set, r.baseline_multiset, r.guarded_set, r.guarded_multiset) for r in chosen)
    costs = [r.rescue_cost_usd for r in ran if r.rescue_cost_usd is not None]
    latencies = [r.rescue_latency_ms for r in ran if r.rescue_latency_ms is not None]
    return RescueStats(
        rescuer=rescuer_name(policy.rescue) if policy.rescue is not None else "none",
        order=policy.order,
        pairs_with_candidates=sum(1 for r in records if r.candidates),
        candidates_dropped=candidates_dropped,
        rescues_run=len(ran),
        candidate_chosen=len(chosen),
        fallbacks=sum(fallbacks.values()),
        fallback_reasons=dict(sorted(fallbacks.items(), key=lambda item: (-item[1], item[0]))),
        multiset_fix=changed.fix,
        multiset_break=changed.break_,
        set_fix=changed.set_fix,
        set_break=changed.set_break,
        cost_usd=round(float(sum(costs)), 8),
        cost_unknown=len(ran) - len(costs),
        prompt_tokens=sum(r.rescue_prompt_tokens or 0 for r in ran),
        completion_tokens=sum(r.rescue_completion_tokens or 0 for r in ran),
        latency_ms_median=median(latencies),
    )


_MISSING_TABLE = re.compile(
    r"no such table|Table with name \S+ does not exist|relation \S+ does not exist", re.IGNORECASE
)
"""How SQLite, DuckDB and PostgreSQL say that a statement names a table the database lacks."""

MISPAIRED_SHARE = 0.2
"""The share of predictions naming a missing table past which the pairing is called into question.
Measured on Spider dev's 1,034 pairs: the released DAIL-SQL, DAIL-SQL + self-consistency and
Graphix-T5 predictions name a missing table 0 times each; the same files shuffled, 951 to 958 times."""


def missing_table(error: str | None) -> bool:
    """Whether a prediction's error says it names a table its database lacks."""
    return error is not None and _MISSING_TABLE.search(error) is not None


def gold_formatted(record: PairRecord) -> bool:
    r"""Whether a prediction reads as a line of a gold file (``SQL<TAB>db_id``, its own database's name
    after the last tab): a gold file passed as the predictions, whose tab and name then run as SQL.

    >>> from types import SimpleNamespace as Pair
    >>> gold_formatted(Pair(pred_sql="SELECT count(*) FROM singer\tconcert_singer", db_id="concert_singer"))
    True
    >>> gold_formatted(Pair(pred_sql="SELECT 'a\tb'", db_id="b"))
    False
    """
    head, tab, tail = record.pred_sql.rpartition("\t")
    return bool(tab and head.strip()) and tail.strip() == record.db_id


def pairing_warnings(records: Sequence[PairRecord]) -> tuple[str, ...]:
    """Warnings that the predictions are not what the evaluation thinks they are: so many name tables
    their gold database lacks that they are probably paired with the wrong gold order (or the wrong
    gold file), or so many end in a tab and their database's name that they are a gold file's lines.
    Empty otherwise."""
    warnings: list[str] = []
    share = f"of {len(records)} predictions"
    tagged = sum(1 for record in records if gold_formatted(record))
    if tagged >= 5 and tagged >= MISPAIRED_SHARE * len(records):
        warnings.append(
            f"{tagged} {share} ({percent(tagged, len(records)):g}%) end in a tab and their database's name, as "
            "a gold file's lines do (SQL<TAB>db_id): pass the predicted SQL alone, one statement per line"
        )
    missing = sum(1 for record in records if missing_table(record.error))
    if missing >= 5 and missing >= MISPAIRED_SHARE * len(records):
        warnings.append(
            f"{missing} {share} ({percent(missing, len(records)):g}%) name a table their gold database lacks: "
            "are the predictions in the gold file's order, and for this gold file?"
        )
    return tuple(warnings)
