"""What the evaluation records per item, as frozen dataclasses: one ``PairRecord`` per evaluated pair,
one ``GoldFailure`` per excluded gold query, one ``SweepOutcome`` per sweep rewrite, one ``DatabaseCopy``
per engine copy. Workers send these back; ``report`` and ``sweep_report`` summarise them.

``as_dict()``/``to_json()`` give plain JSON (field names ending in ``_`` lose it, so ``break_`` is
written ``"break"``).
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


class JsonMixin:
    """``as_dict()`` and ``to_json()`` for the report dataclasses."""

    def as_dict(self) -> dict[str, Any]:
        """The report as plain dicts, lists, numbers and strings."""
        result: dict[str, Any] = plain(self)
        return result

    def to_json(self, indent: int | None = 2) -> str:
        """The report as a JSON document."""
        return json.dumps(self.as_dict(), indent=indent, ensure_ascii=False)


@dataclass(frozen=True)
class PairRecord(JsonMixin):
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

    provenance: str | None = None
    """Why the prediction's duplicates repeat, when a patch rule asked the provenance analysis
    (``GuardReport.provenance``): ``"amplified"``, ``"identified"``, ``"value_repeats"`` or ``"unknown"``;
    None when no rule asked (healthy results, the ``"paper"`` preset, ``"observe"``)."""

    provenance_evidence: str | None = None
    """The verdict's evidence (``GuardReport.provenance_evidence``); None with ``provenance``."""

    @property
    def flagged(self) -> bool:
        """Whether the probe flagged the prediction."""
        return self.trigger is not None

    @property
    def mbs(self) -> bool:
        """A Multiplicity Blind Spot case: baseline passes Set-EX but fails Multiset-EX."""
        return self.baseline_set and not self.baseline_multiset


@dataclass(frozen=True)
class GoldFailure(JsonMixin):
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
class GoldDifference(JsonMixin):
    """A gold query whose result on the engine differs from its result on the SQLite file (as a
    multiset), with the likely cause. Its pair is evaluated against the engine's result, as every
    pair is: the difference is reported, not corrected."""

    index: int
    """0-based position in the gold file."""

    db_id: str
    """The database."""

    category: str
    """The first cause that fits (``gold_differences.CATEGORIES``): ``"sqlite_error"``, ``"numeric"``,
    ``"case_or_spaces"``, ``"limit_ties"``, ``"bare_column"``, ``"division"``, ``"text_comparison"``,
    ``"number_comparison"`` or ``"other"``."""

    detail: str
    """One line on what was compared, e.g. the rows each engine returned."""

    sqlite_rows: int | None
    """Rows the gold query returned on SQLite; None when it failed there."""

    engine_rows: int
    """Rows it returned on the engine."""

    same_set: bool
    """The two results are equal as sets (they differ in multiplicity only)."""

    gold_sql: str
    """The gold SQL, as written for SQLite."""


@dataclass(frozen=True)
class SweepOutcome(JsonMixin):
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
class DatabaseCopy(JsonMixin):
    """A SQLite database's copy on another engine (see ``guarded_sqlite.evaluation.copy``)."""

    db_id: str
    """The database."""

    engine: str
    """``"duckdb"``, ``"postgres"`` or ``"mysql"``."""

    target: str
    """The DuckDB file, the PostgreSQL schema or the MySQL/MariaDB database."""

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
    that was not UTF-8, primary keys or views that could not be created; on MySQL/MariaDB, first, how
    its text compares (the collation)."""
