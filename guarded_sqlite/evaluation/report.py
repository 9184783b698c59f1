"""The evaluation's summary as frozen dataclasses: what ``evaluate`` returns (``sweep_report`` holds
what ``sweep`` adds, ``records`` the per-pair records both are built from).

Every number the CLI prints lives here, and ``as_dict()``/``to_json()`` give the same content as
plain JSON (field names ending in ``_`` lose it, so ``break_`` is written ``"break"``). Percentages are
0-100 and rounded to 4 decimals; ratios (precision, recall) are 0-1. A quantity that is undefined for
the data (precision with nothing flagged) is None, never a made-up 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .records import DatabaseCopy, GoldDifference, GoldFailure, JsonMixin, PairRecord, SweepOutcome, plain

__all__ = [
    "DatabaseCopy",
    "DetectorStats",
    "DifficultyScores",
    "EvalReport",
    "FixBreak",
    "FlagCounts",
    "GoldDifference",
    "GoldFailure",
    "PairRecord",
    "RescueStats",
    "RuleStats",
    "Scores",
    "SweepOutcome",
    "Timings",
    "TriggerPrecision",
    "VerdictStats",
    "plain",
]


@dataclass(frozen=True)
class Scores(JsonMixin):
    """Execution accuracy of one side (baseline or guarded) over the evaluable pairs."""

    n: int
    """Evaluable pairs scored."""

    set_ex: float | None
    """Set-EX, percent: rows equal as sets (BIRD's official evaluator)."""

    multiset_ex: float | None
    """Multiset-EX, percent: rows equal as multisets (order ignored, duplicates counted)."""

    gap_pp: float | None
    """``set_ex - multiset_ex`` in percentage points: the Multiplicity Blind Spot."""

    set_correct: int
    """Pairs passing Set-EX."""

    multiset_correct: int
    """Pairs passing Multiset-EX."""

    errors: int
    """Predictions that raised an error (scored 0)."""

    timeouts: int
    """Predictions interrupted at the timeout (scored 0)."""

    transpile_errors: int = 0
    """Of ``errors``, predictions sqlglot could not transpile for the engine (always 0 on SQLite)."""


@dataclass(frozen=True)
class FlagCounts(JsonMixin):
    """How many predictions the guard's probe flagged, by trigger."""

    total: int
    """All flagged predictions."""

    exec_error: int
    """Execution errors, timeouts included."""

    empty_result: int
    """Empty results."""

    cartesian_explosion: int
    """Results with ``dup_ratio >= tau_inject``."""

    aggregate_fanout: int = 0
    """Results whose value aggregates a join inflated (confirmed on the data; ``"patch"`` and
    ``"text_to_sql"`` only)."""


@dataclass(frozen=True)
class FixBreak(JsonMixin):
    """How a rewrite changed verdicts among the predictions it rewrote."""

    fired: int
    """Predictions whose served rows came from the rewrite."""

    fix: int
    """Of those, Multiset-EX 0 -> 1."""

    break_: int
    """Of those, Multiset-EX 1 -> 0 (JSON key ``"break"``)."""

    net: int
    """``fix - break``."""

    set_fix: int
    """Of those, Set-EX 0 -> 1 (the patches keep the row set, so normally 0)."""

    set_break: int
    """Of those, Set-EX 1 -> 0 (normally 0)."""


@dataclass(frozen=True)
class RuleStats(FixBreak):
    """One patch rule's effect in an evaluation: how often it fired and which verdicts it changed."""

    rule: str
    """``"P1"`` (DISTINCT injection), ``"P2"`` (DISTINCT removal) or ``"aggregate"`` (corrected aggregates served)."""


@dataclass(frozen=True)
class VerdictStats(JsonMixin):
    """What the patch rules did to the predictions with one duplicate-provenance verdict."""

    verdict: str
    """``"amplified"``, ``"identified"``, ``"value_repeats"`` or ``"unknown"`` (``GuardReport.provenance``)."""

    asked: int
    """Predictions a patch rule asked the analysis about that got this verdict."""

    left_alone: int
    """Of those, predictions no rule rewrote (the verdict, a structural check or the runtime checks kept
    the original rows)."""

    p1: FixBreak
    """P1 (DISTINCT injection) among them: fired / fix / break."""

    p2: FixBreak
    """P2 (DISTINCT removal) among them: fired / fix / break."""


@dataclass(frozen=True)
class TriggerPrecision(JsonMixin):
    """Detector precision for one trigger, or for all flagged predictions."""

    flagged: int
    """Predictions flagged."""

    true_positives: int
    """Flagged predictions that fail baseline Multiset-EX."""

    precision: float | None
    """``true_positives / flagged``; None when nothing was flagged."""


@dataclass(frozen=True)
class DetectorStats(JsonMixin):
    """How well the probe's flags line up with real failures (the paper's Appendix I)."""

    overall: TriggerPrecision
    """Precision over every flagged prediction."""

    per_trigger: Mapping[str, TriggerPrecision]
    """Precision for each trigger (``exec_error``, ``empty_result``, ``cartesian_explosion``)."""

    mbs: int
    """Multiplicity Blind Spot cases: baseline Set-EX pass but Multiset-EX fail."""

    mbs_flagged: int
    """MBS cases the probe flagged."""

    mbs_recall: float | None
    """``mbs_flagged / mbs``; None when there is no MBS case."""


@dataclass(frozen=True)
class DifficultyScores(JsonMixin):
    """Scores within one difficulty stratum (BIRD's simple/moderate/challenging)."""

    difficulty: str
    """The stratum's label."""

    baseline: Scores
    """The raw predictions' scores in this stratum."""

    guarded: Scores
    """The guarded scores in this stratum."""


@dataclass(frozen=True)
class Timings(JsonMixin):
    """Where the time went. Query times are summed over workers, so they can exceed ``wall_s``."""

    wall_s: float
    """End to end, loading and pool start-up included, in seconds."""

    workers: int
    """Processes that ran queries (1 means in this process)."""

    queries: int
    """SQL statements executed: gold, guarded predictions and raw re-runs (sweep replays excluded)."""

    gold_s: float
    """Time executing and fetching gold queries, summed."""

    pred_s: float
    """Time executing and fetching predictions through the guard, patches included, summed."""

    rerun_s: float
    """Time re-running patched predictions raw to get their baseline rows, summed."""

    detect_us_median: float | None
    """Median time of the guard's probe per probed prediction, in microseconds."""

    detect_us_total: float
    """Total probe time, in microseconds."""

    patch_ms_median: float | None
    """Median time spent on patch rules, over predictions where a rule was considered, in ms."""

    patch_ms_p90: float | None
    """90th percentile of the same, in ms."""

    patch_ms_total: float
    """Total patch time, in ms."""

    copy_s: float = 0.0
    """Time spent making sure the engine's copies of the databases are up to date (0 on SQLite),
    included in ``wall_s``; see ``EvalReport.copies`` for each database."""

    transpile_s: float = 0.0
    """Time transpiling gold and predictions for the engine, summed over workers (0 on SQLite)."""


@dataclass(frozen=True)
class RescueStats(JsonMixin):
    """What candidate rescue did over the evaluation (``evaluate(candidates=...)``/``--candidates``)."""

    rescuer: str
    """Which rescuer ran, e.g. ``"DupRatioSelector"`` or ``"LLMRescue(openai/x)"``."""

    order: str
    """``"rescue_first"`` or ``"patch_first"``."""

    pairs_with_candidates: int
    """Evaluated pairs with at least one candidate."""

    candidates_dropped: int
    """Candidates left out because they could not be transpiled for the engine (0 on SQLite)."""

    rescues_run: int
    """Pairs where the rescuer ran (flagged predictions with candidates)."""

    candidate_chosen: int
    """Rescues that served a candidate's rows."""

    fallbacks: int
    """Rescues that kept the selection."""

    fallback_reasons: Mapping[str, int]
    """Fallbacks by reason prefix (numbers shown as N, details after ``:`` cut)."""

    multiset_fix: int
    """Among pairs served from a candidate: Multiset-EX fail -> pass, against the raw prediction."""

    multiset_break: int
    """Among pairs served from a candidate: Multiset-EX pass -> fail."""

    set_fix: int
    """Among pairs served from a candidate: Set-EX fail -> pass."""

    set_break: int
    """Among pairs served from a candidate: Set-EX pass -> fail."""

    cost_usd: float
    """Sum of the known rescue costs, in US dollars."""

    cost_unknown: int
    """Rescues whose cost is unknown (None: no price for the model), left out of ``cost_usd``.
    ``DupRatioSelector`` rescues cost 0."""

    prompt_tokens: int
    """Prompt tokens over all rescues (those that reported them)."""

    completion_tokens: int
    """Completion tokens over all rescues (those that reported them)."""

    latency_ms_median: float | None
    """Median rescue latency (candidates plus judge), in ms; None when no rescue ran."""


@dataclass(frozen=True)
class EvalReport(JsonMixin):
    """The result of ``evaluate``: baseline and guarded scores, flags, rule effects and every pair."""

    n: int
    """Evaluable pairs: the pairs in scope whose gold query ran."""

    inputs: Mapping[str, str | None]
    """``db_root``, ``gold`` and ``pred`` as given (None for in-memory sequences), so that two saved
    reports can be told apart."""

    guard: str
    """The guard preset of the guarded replay: ``"patch"``, ``"text_to_sql"``, ``"paper"`` or ``"observe"``
    (``GuardPolicy.preset``)."""

    tau_inject: float
    """The policy's P1/probe threshold."""

    tau_remove: float
    """The policy's P2 threshold."""

    timeout_s: float | None
    """Per-query timeout, in seconds; None for none."""

    baseline: Scores
    """Scores of the predictions as the raw engine runs them (no guard)."""

    guarded: Scores
    """Scores of the rows the guarded connection served."""

    flagged: FlagCounts
    """Predictions the probe flagged, by trigger."""

    rules: Mapping[str, RuleStats]
    """P1 and P2: fired / fix / break."""

    detector: DetectorStats
    """Detector precision and MBS recall."""

    difficulty: tuple[DifficultyScores, ...]
    """Per-difficulty scores; empty when the gold has no difficulty labels."""

    timings: Timings
    """Wall time and where it went."""

    gold_failures: tuple[GoldFailure, ...]
    """Gold queries that failed or timed out, excluded from ``n``."""

    excluded_db_ids: tuple[str, ...]
    """Databases left out on request (``--exclude-db``)."""

    excluded_pairs: int
    """Pairs those databases held."""

    pairs: tuple[PairRecord, ...]
    """Every evaluated pair, in gold order, with both verdicts before and after the guard."""

    engine: str = "sqlite"
    """The engine the queries ran on: ``"sqlite"`` (the files themselves), ``"duckdb"``, ``"postgres"``
    or ``"mysql"`` (copies of them, with every query transpiled from SQLite by sqlglot)."""

    copies: tuple[DatabaseCopy, ...] = ()
    """Off SQLite: each database's copy, whether it was made or reused, and what could not be copied
    faithfully."""

    rescue: RescueStats | None = None
    """Candidate rescue's effect; None when the evaluation was given no candidates."""

    tau_amplified: float | None = None
    """The ``"text_to_sql"`` preset's threshold for P1 on join amplification below ``tau_inject``; None
    under the other presets."""

    provenance: Mapping[str, VerdictStats] = field(default_factory=dict)
    """Per duplicate-provenance verdict (amplified, identified, value_repeats, unknown): how many
    predictions got it and what P1 and P2 did to them. Every verdict is listed (zeros included) under
    ``"patch"`` and ``"text_to_sql"``; empty under ``"paper"`` and ``"observe"``, which never ask."""

    warnings: tuple[str, ...] = ()
    """What makes the scores doubtful, e.g. most predictions naming tables their gold database lacks
    (predictions paired with the wrong gold order); each is also issued as a ``UserWarning``."""

    gold_differences: tuple[GoldDifference, ...] = ()
    """Off SQLite: the evaluated pairs whose gold query returns another result on the engine than on the
    SQLite file (as a multiset), with the likely cause (``gold_differences.CATEGORIES``): the engine's
    own semantics (collation, numeric types, ties under LIMIT, ...). Their pairs are scored against the
    engine's result. Empty on SQLite."""
