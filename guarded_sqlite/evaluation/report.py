"""The evaluation's results as frozen dataclasses: what ``evaluate`` and ``sweep`` return.

Every number the CLI prints lives here, and ``as_dict()``/``to_json()`` give the same content as
plain JSON (field names ending in ``_`` lose it, so ``break_`` is written ``"break"``). Percentages are
0-100 and rounded to 4 decimals; ratios (precision, recall) are 0-1. A quantity that is undefined for
the data (precision with nothing flagged) is None, never a made-up 0.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def plain(value: Any) -> Any:
    """``value`` as JSON-ready builtins: dataclasses and mappings become dicts, tuples lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name.rstrip("_"): plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


class _JsonMixin:
    """``as_dict()`` and ``to_json()`` for the report dataclasses."""

    def as_dict(self) -> dict[str, Any]:
        """The report as plain dicts, lists, numbers and strings."""
        result: dict[str, Any] = plain(self)
        return result

    def to_json(self, indent: int | None = 2) -> str:
        """The report as a JSON document."""
        return json.dumps(self.as_dict(), indent=indent, ensure_ascii=False)


@dataclass(frozen=True)
class PairRecord(_JsonMixin):
    """One evaluated (gold, prediction) pair: both verdicts before and after the guard."""

    index: int
    """0-based position in the gold file."""

    db_id: str
    """The database the pair ran on."""

    difficulty: str | None
    """The gold's difficulty label, when it has one."""

    pred_sql: str
    """The prediction as given."""

    status: str
    """How the prediction executed: ``"ok"``, ``"error"`` or ``"timeout"`` (the last two score 0)."""

    error: str | None
    """Why the prediction failed: ``"ExceptionClass: message"`` on one line, or the timeout."""

    trigger: str | None
    """The guard's probe verdict: None, ``"exec_error"``, ``"empty_result"`` or ``"cartesian_explosion"``."""

    action: str
    """What the guard did: ``"none"``, ``"distinct_injected"`` (P1), ``"distinct_removed"`` (P2),
    ``"candidate_selected"`` (a rescue served one of the pair's candidates), or
    ``"candidate_selected+distinct_injected"`` / ``"candidate_selected+distinct_removed"`` (a candidate,
    then patched)."""

    final_sql: str
    """The SQL whose rows the guarded connection served."""

    rows: int | None
    """Rows the prediction returned (before any patch); None when it failed."""

    unique_rows: int | None
    """Distinct rows among them."""

    dup_ratio: float | None
    """``(rows - unique_rows) / rows``; None when failed or empty."""

    gold_rows: int
    """Rows the gold query returned."""

    baseline_set: bool
    """Set-EX of the raw prediction: ``set(pred) == set(gold)``."""

    baseline_multiset: bool
    """Multiset-EX of the raw prediction: ``Counter(pred) == Counter(gold)``."""

    guarded_set: bool
    """Set-EX of the rows the guarded connection served."""

    guarded_multiset: bool
    """Multiset-EX of the rows the guarded connection served."""

    exec_ms: float
    """Wall time of the guarded execution and fetch, patches included, in milliseconds."""

    detect_us: float | None
    """Time the guard's probe took, in microseconds."""

    patch_ms: float | None
    """Time the guard spent on patch rules, in milliseconds; None when none was considered."""

    engine_sql: str | None = None
    """The prediction as sent to a non-SQLite engine (transpiled from SQLite by sqlglot); None on
    SQLite, and when transpiling failed."""

    transpile_failed: bool = False
    """sqlglot could not transpile the prediction for the engine: status ``"error"``, scored 0, and
    counted in ``Scores.transpile_errors`` too."""

    candidates: int = 0
    """Candidate SQLs given for the pair (``--candidates``), after dropping any that failed to transpile."""

    rescue_ran: bool = False
    """Whether the policy's rescuer ran on the pair (it was flagged and had candidates)."""

    rescue_chosen_index: int | None = None
    """Index (in the candidates file's list for this pair) of the candidate whose rows were served;
    None when no rescue ran or it kept the selection."""

    rescue_fallback: str | None = None
    """Why a rescue that ran kept the selection; None otherwise."""

    rescue_latency_ms: float | None = None
    """The rescue's whole time (candidates plus judge), in milliseconds."""

    rescue_prompt_tokens: int | None = None
    rescue_completion_tokens: int | None = None
    rescue_cost_usd: float | None = None
    """The rescue's cost in US dollars (0 for ``DupRatioSelector``); None when unknown or no rescue ran."""

    @property
    def flagged(self) -> bool:
        """Whether the probe flagged the prediction."""
        return self.trigger is not None

    @property
    def mbs(self) -> bool:
        """A Multiplicity Blind Spot case: baseline passes Set-EX but fails Multiset-EX."""
        return self.baseline_set and not self.baseline_multiset


@dataclass(frozen=True)
class GoldFailure(_JsonMixin):
    """A gold query that failed or timed out; its pair is left out of N, as the paper did."""

    index: int
    """0-based position in the gold file."""

    db_id: str
    """The database."""

    status: str
    """``"error"`` or ``"timeout"``."""

    reason: str
    """The error message, or the timeout that was exceeded."""

    gold_sql: str
    """The gold SQL that failed."""

    transpile_failed: bool = False
    """It failed because sqlglot could not transpile it for the engine (status ``"error"``)."""


@dataclass(frozen=True)
class Scores(_JsonMixin):
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
class FlagCounts(_JsonMixin):
    """How many predictions the guard's probe flagged, by trigger."""

    total: int
    """All flagged predictions."""

    exec_error: int
    """Execution errors, timeouts included."""

    empty_result: int
    """Empty results."""

    cartesian_explosion: int
    """Results with ``dup_ratio >= tau_inject``."""


@dataclass(frozen=True)
class FixBreak(_JsonMixin):
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
    """``"P1"`` (DISTINCT injection) or ``"P2"`` (DISTINCT removal)."""


@dataclass(frozen=True)
class TriggerPrecision(_JsonMixin):
    """Detector precision for one trigger, or for all flagged predictions."""

    flagged: int
    """Predictions flagged."""

    true_positives: int
    """Flagged predictions that fail baseline Multiset-EX."""

    precision: float | None
    """``true_positives / flagged``; None when nothing was flagged."""


@dataclass(frozen=True)
class DetectorStats(_JsonMixin):
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
class DifficultyScores(_JsonMixin):
    """Scores within one difficulty stratum (BIRD's simple/moderate/challenging)."""

    difficulty: str
    """The stratum's label."""

    baseline: Scores
    """The raw predictions' scores in this stratum."""

    guarded: Scores
    """The guarded scores in this stratum."""


@dataclass(frozen=True)
class Timings(_JsonMixin):
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
class RescueStats(_JsonMixin):
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
class EvalReport(_JsonMixin):
    """The result of ``evaluate``: baseline and guarded scores, flags, rule effects and every pair."""

    n: int
    """Evaluable pairs: the pairs in scope whose gold query ran."""

    inputs: Mapping[str, str | None]
    """``db_root``, ``gold`` and ``pred`` as given (None for in-memory sequences), so that two saved
    reports can be told apart."""

    guard: str
    """The guard mode used for the guarded replay: ``"patch"`` or ``"observe"``."""

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
    """The engine the queries ran on: ``"sqlite"`` (the files themselves), ``"duckdb"`` or
    ``"postgres"`` (copies of them, with every query transpiled from SQLite by sqlglot)."""

    copies: tuple[DatabaseCopy, ...] = ()
    """For DuckDB and PostgreSQL: each database's copy, whether it was made or reused, and what could
    not be copied faithfully."""

    rescue: RescueStats | None = None
    """Candidate rescue's effect; None when the evaluation was given no candidates."""


@dataclass(frozen=True)
class DatabaseCopy(_JsonMixin):
    """A SQLite database's copy on another engine (see ``guarded_sqlite.evaluation.copy``)."""

    db_id: str
    """The database."""

    engine: str
    """``"duckdb"`` or ``"postgres"``."""

    target: str
    """The DuckDB file, or the PostgreSQL schema."""

    action: str
    """``"copied"`` (made now) or ``"reused"`` (an up-to-date copy existed)."""

    seconds: float
    """Time this run spent on it: the whole copy, or just the up-to-date check."""

    tables: int
    """Tables copied."""

    rows: int
    """Rows copied, over all tables."""

    notes: tuple[str, ...]
    """What is not an exact copy: values that changed type, mixed-type columns stored as text, text
    that was not UTF-8, primary keys or views that could not be created."""


@dataclass(frozen=True)
class SweepRow(FixBreak):
    """One threshold of a patch rule's sweep (a row of the paper's Table 5 or 6)."""

    tau: float
    """The threshold."""


@dataclass(frozen=True)
class SweepOutcome(_JsonMixin):
    """A prediction a rule rewrote at one threshold, with its verdicts before and after."""

    rule: str
    """``"P1"`` or ``"P2"``."""

    tau: float
    """The threshold of the replay."""

    index: int
    """The pair's 0-based index."""

    db_id: str
    """The pair's database."""

    baseline_set: bool
    """Set-EX of the raw prediction."""

    baseline_multiset: bool
    """Multiset-EX of the raw prediction."""

    set_ex: bool
    """Set-EX of the rewritten prediction's rows."""

    multiset_ex: bool
    """Multiset-EX of the rewritten prediction's rows."""


@dataclass(frozen=True)
class Fold(_JsonMixin):
    """One fold of leave-one-database-out cross-validation."""

    db_id: str
    """The held-out database."""

    tau: float
    """The threshold that maximised net gain on the other databases."""

    train_net: int
    """That maximum: net gain on the other databases."""

    fix: int
    """Fixes on the held-out database at ``tau``."""

    break_: int
    """Breaks on the held-out database at ``tau``."""

    net: int
    """Held-out net gain at ``tau``."""


@dataclass(frozen=True)
class CrossValidation(_JsonMixin):
    """Leave-one-database-out cross-validation of a rule's threshold."""

    folds: tuple[Fold, ...]
    """One fold per database where the rule fires at some threshold of the grid."""

    held_out_net: int
    """Sum of the held-out nets: the CV estimate of the rule's gain."""

    nonnegative_folds: int
    """Folds whose held-out net is >= 0."""

    worst_fold_net: int | None
    """Smallest held-out net; None without folds."""

    no_threshold_net: int
    """Net gain at the grid's loosest threshold on every database (the rule without its threshold)."""


@dataclass(frozen=True)
class SweepReport(_JsonMixin):
    """The result of ``sweep``: fix/break per threshold for P1 and P2, and their cross-validation."""

    evaluation: EvalReport
    """The ordinary evaluation at the default operating point, from the same run."""

    p1: tuple[SweepRow, ...]
    """P1 (DISTINCT injection, P2 off) for each ``tau_inject`` of the grid."""

    p2: tuple[SweepRow, ...]
    """P2 (DISTINCT removal, P1 off) for each ``tau_remove`` of the grid."""

    p1_cv: CrossValidation
    """Leave-one-database-out CV of ``tau_inject``."""

    p2_cv: CrossValidation
    """Leave-one-database-out CV of ``tau_remove``."""

    p1_candidates: int
    """Predictions replayed for P1: results with at least the smallest grid threshold of duplicates."""

    p2_candidates: int
    """Predictions replayed for P2: non-empty results of SQL that mentions DISTINCT."""

    replays: int
    """Guarded re-executions the sweep ran."""

    outcomes: tuple[SweepOutcome, ...]
    """Every (threshold, prediction) where a rule rewrote the query, with verdicts before and after:
    the rows behind the sweep tables, for diffing and further analysis."""

    plot: str | None
    """The PNG written, if one was asked for."""
