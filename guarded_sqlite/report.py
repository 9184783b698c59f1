"""What the guard decided about one statement: the frozen ``GuardReport`` on ``cursor.guard_report``.

Building a frozen dataclass costs about as much as the whole probe, so cursors keep a plain tuple
(``ReportState``) and build the report only when someone reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Literal, NamedTuple

from ._core.probe import PartialCount

if TYPE_CHECKING:
    from ._analysis.provenance import Provenance
    from .findings import AggregateFinding
    from .rescue import RescueReport

Action = Literal[
    "none",
    "distinct_injected",
    "join_copies_removed",
    "distinct_removed",
    "aggregate_defanned",
    "candidate_selected",
    "candidate_selected+distinct_injected",
    "candidate_selected+join_copies_removed",
    "candidate_selected+distinct_removed",
]
RuleName = Literal["P1", "P2", "rescue", "aggregate"]
_new_object = object.__new__
_MODE_OF_PRESET = {"text_to_sql": "patch", "paper": "patch"}
"""The mode of each preset whose name is not its mode (``GuardReport.mode`` from the state's preset)."""
_UNCOUNTED = (
    "healthy: at least {:,} of {:,} rows are distinct; the exact count was not finished, since every row "
    "was served before this report was read"
)
_set_attribute = object.__setattr__


@dataclass(frozen=True)
class RuleDecision:
    """One patch rule that was considered for a statement, and what came of it."""

    rule: RuleName
    """``"P1"`` (DISTINCT injection), ``"P2"`` (DISTINCT removal), ``"aggregate"`` (a value aggregate a
    join inflates, confirmed on the data), or ``"rescue"`` (recorded only when a rescue was wanted but
    could not run: no rescuer, budget exhausted, a write statement)."""

    applied: bool
    """True when the rule's rewrite now serves the cursor's rows."""

    reason: str
    """Why it fired, or why it did not (a structural exemption, a failed check, an error)."""

    copies: int | None = None
    """P1 under the key-based presets: how many rows the data showed to be *join copies* (rows that
    repeat a combination of the projected tables' rows another row already stands for), 0 when the
    data showed none (the repeats are value repeats); None when P1 did not look (the paper preset, a
    structural exemption, a verdict that rules copies out, or a check that could not run)."""


AGGREGATE_NOT_AT_RISK = "not at risk"
"""The start of an ``aggregate`` decision's reason where the analysis found no value aggregate a join can
inflate (``"not at risk: ..."``, then why)."""

AGGREGATE_CHECKED = "checked: no row counted twice where it changes the answer"
"""An ``aggregate`` decision's reason where the check ran and the join repeated no argument row in a way
that changes a value shown or the rows chosen."""


def routine_aggregate(decision: RuleDecision) -> bool:
    """Whether ``decision`` says an aggregate over a join was found right as written (not at risk, or
    checked): nothing to flag, log or feed back (issue 42 item 2: every aggregate over a join gets one)."""
    return decision.rule == "aggregate" and (
        decision.reason.startswith(AGGREGATE_NOT_AT_RISK) or decision.reason.startswith(AGGREGATE_CHECKED)
    )


class ReportState(NamedTuple):
    """The raw facts a cursor records after each execute; ``GuardReport`` is derived from them.

    Built by name everywhere but on the paths every healthy or unprobed statement takes
    (``_guard.decide``'s fast path and ``unprobed``), which build it by position, 0.8 µs cheaper than by
    name; ``GuardReport.from_state`` unpacks it by position. A test compares those states with the same
    states built by name (``tests/dropin/test_fast_path.py``), so a reordered field fails it."""

    preset: str
    sql: str
    final_sql: str
    trigger: str | None
    action: Action
    rows: int | None
    unique_rows: int | PartialCount | None
    final_rows: int | None
    note: str | None
    error: str | None
    decisions: tuple[RuleDecision, ...]
    detect_ns: int | None
    patch_ns: int | None
    rescue: RescueReport | None = None
    provenance: Provenance | None = None
    aggregates: tuple[AggregateFinding, ...] = ()


@dataclass(frozen=True)
class GuardReport:
    """The guard's account of the last statement a cursor executed."""

    sql: str
    """The SQL the caller passed."""

    final_sql: str
    """The SQL whose rows the cursor now serves: ``sql`` itself unless a patch was applied."""

    mode: str
    """The guard mode in force: ``"patch"`` (under the ``"patch"``, ``"text_to_sql"`` and ``"paper"``
    presets alike), ``"observe"`` or ``"off"``. ``preset`` tells the presets apart."""

    preset: str
    """The preset in force: ``"patch"``, ``"text_to_sql"``, ``"paper"``, ``"observe"`` or ``"off"``
    (``GuardPolicy.preset``: a policy with changed thresholds reads as the preset it was built from;
    ``GuardPolicy(mode="observe")`` under any provenance rule reads ``"observe"``)."""

    trigger: str | None
    """The probe's verdict: None (healthy, or not probed), ``"exec_error"``, ``"empty_result"``,
    ``"cartesian_explosion"`` (``dup_ratio >= tau_inject``), or ``"aggregate_fanout"`` (a value
    aggregate over a join counted some rows several times, confirmed on the data: see ``aggregates``)."""

    flagged: bool
    """``trigger is not None``."""

    action: Action
    """What the guard changed: ``"none"`` (rows served exactly as SQLite returned them),
    ``"distinct_injected"`` (P1: the rows of the statement with DISTINCT added to the outermost SELECT,
    which is ``final_sql``), ``"join_copies_removed"`` (P1 under ``"patch"``: one row per combination of
    the projected tables' rows, in order of first occurrence, where DISTINCT would also merge equal rows
    of distinct table rows; ``final_sql`` is then the check that told them apart: the statement with
    those tables' row identities appended as ``__gs_id0``, ...), ``"distinct_removed"``
    (P2: the outermost DISTINCT removed), ``"aggregate_defanned"`` (the corrected aggregates of
    ``aggregates`` are served, ``"text_to_sql"`` only), ``"candidate_selected"`` (a rescue replaced the statement
    with one of the caller's candidates), or ``"candidate_selected+distinct_injected"`` /
    ``"candidate_selected+join_copies_removed"`` / ``"candidate_selected+distinct_removed"`` (a
    candidate, then patched)."""

    probed: bool
    """Whether the probe measured the result. False for statements that return no rows, for
    ``executemany``/``executescript``, in mode ``"off"``, and past ``row_cap`` (see ``note``)."""

    rows: int | None
    """Rows in the original result; None when not probed."""

    unique_rows: int | None
    """Distinct rows in the original result; None when not probed, and for a large healthy result whose
    rows were all served before the report was read (the probe stops counting once the result is
    certainly not an explosion; ``note`` then gives the lower bound it reached)."""

    dup_ratio: float | None
    """``(rows - unique_rows) / rows``; None when not probed, when the result is empty, and when
    ``unique_rows`` is None."""

    final_rows: int | None
    """Rows the cursor serves after any patch; None when not probed."""

    decisions: tuple[RuleDecision, ...]
    """Each patch rule considered for this statement, applied or not, with its reason."""

    note: str | None
    """Why the statement was not probed or not patched, when that is not obvious from the fields."""

    error: str | None
    """``"ExceptionClass: message"`` of the execution error that was re-raised, else None."""

    detect_us: float | None
    """Time the probe took (one pass over the fetched rows), in microseconds."""

    patch_ms: float | None
    """Time spent deciding, re-executing and verifying patches and any rescue, in milliseconds; None
    when no rule got as far as being considered."""

    rescue: RescueReport | None = None
    """What the candidate rescue did (chosen index and SQL, fallback reason, latency, tokens, cost);
    None when no rescue ran."""

    provenance: str | None = None
    """Why the duplicates repeat, when a patch rule asked (``guarded_sqlite._analysis.provenance``):
    ``"amplified"`` or ``"identified"`` (a join multiplies rows), ``"value_repeats"`` (values of one row
    each repeat: legitimate), or ``"unknown"``. None when no rule needed it: healthy results, the
    ``"paper"`` preset, ``"observe"``/``"off"``, or a rewrite refused on structure first."""

    provenance_evidence: str | None = None
    """The verdict's evidence in one sentence: which table fans out along which join and which keys were
    used, or why the analysis could not tell (at most four tables per list, then "and N more"). None
    with ``provenance``."""

    aggregates: tuple[AggregateFinding, ...] = ()
    """With ``trigger == "aggregate_fanout"``: each value aggregate the join inflated, with the written
    and corrected values and the corrected query. Empty otherwise."""

    @classmethod
    def from_state(cls, state: ReportState) -> GuardReport:
        """Build the report from a ``ReportState`` (or a plain tuple of its fields)."""
        if type(state) is not ReportState:
            state = ReportState(*state)
        (preset, sql, final_sql, trigger, action, rows, unique, final_rows, note, error, decisions, detect_ns,
         patch_ns, rescue, provenance, aggregates) = state  # fmt: skip
        # The frozen dataclass's __init__ sets each field with object.__setattr__, which made reading a report
        # cost more than the whole probe. Instead: a copy of the healthy, unpatched report's fields, then only
        # the fields this statement changes, installed as the instance's __dict__ in one step.
        values = _HEALTHY_FIELDS.copy()
        values["sql"] = sql
        values["final_sql"] = final_sql
        values["mode"] = _MODE_OF_PRESET.get(preset, preset)
        values["preset"] = preset
        values["action"] = action
        if rows is None:
            values["probed"] = False
        else:
            if isinstance(unique, PartialCount):
                partial = unique
                unique = partial.exact()
                if unique is None and note is None:
                    note = _UNCOUNTED.format(partial.lower_bound, rows)
            values["rows"] = rows
            values["unique_rows"] = unique
            values["final_rows"] = final_rows
            if rows and unique is not None:
                values["dup_ratio"] = (rows - unique) / rows
        if trigger is not None:
            values["trigger"] = trigger
            values["flagged"] = True
        if decisions:
            values["decisions"] = decisions
        if note is not None:
            values["note"] = note
        if error is not None:
            values["error"] = error
        if detect_ns is not None:
            values["detect_us"] = detect_ns / 1_000
        if patch_ns is not None:
            values["patch_ms"] = patch_ns / 1_000_000
        if rescue is not None:
            values["rescue"] = rescue
        if provenance is not None:
            values["provenance"] = provenance.verdict
            values["provenance_evidence"] = provenance.evidence
        if aggregates:
            values["aggregates"] = aggregates
        report = _new_object(cls)
        _set_attribute(report, "__dict__", values)
        return report

    @property
    def patched(self) -> bool:
        """True when the cursor serves the rows of a rewritten query."""
        return self.action != "none"

    def summary(self) -> str:
        """One line for logs: verdict, ratio and action."""
        ratio = "n/a" if self.dup_ratio is None else f"{self.dup_ratio:.2f}"
        verdict = self.trigger or ("healthy" if self.probed else "not probed")
        line = f"{verdict}: rows={self.rows} unique={self.unique_rows} dup_ratio={ratio} action={self.action}"
        if self.provenance is not None:
            line += f" provenance={self.provenance} ({self.provenance_evidence})"
        for finding in self.aggregates:
            line += f"; {finding.describe()}"
        return line

    def feedback(self) -> str:
        """What an LLM (or a person) needs to revise the statement, in a few lines of stable wording:
        what was found, rows before and after, the evidence, what the guard did, and a next step. The
        empty string for a statement nothing was found or done about.

        ```pycon
        >>> GuardReport.from_state(("patch", "SELECT 1", "SELECT 1", None, "none", 1, 1, 1, None, None, (),
        ...                         0, None, None, None, ())).feedback()
        ''

        ```
        """
        lines: list[str] = []
        trigger = self.trigger
        if trigger == "exec_error":
            lines.append(f"The query failed: {(self.error or '').rstrip('.')}.")
            lines.append("Next step: fix the SQL; check table and column names against the schema.")
        elif trigger == "empty_result":
            lines.append("The query returned no rows.")
            lines.append(
                "Next step: check the WHERE conditions and literal values (spelling, case, date formats) against "
                "the data; an empty answer may also be right."
            )
        elif trigger == "cartesian_explosion" or self.action in (
            "distinct_injected",
            "join_copies_removed",
            "distinct_removed",
        ):
            ratio = 0.0 if self.dup_ratio is None else self.dup_ratio
            lines.append(
                f"The query returned {self.rows} rows but only {self.unique_rows} distinct ones "
                f"({ratio:.0%} are repeats)."
            )
            if self.provenance is not None:
                lines.append(f"Why ({self.provenance}): {self.provenance_evidence}.")
            copies = next((d.copies for d in self.decisions if d.rule == "P1" and d.copies is not None), None)
            if self.action == "distinct_injected":
                lines.append(f"The guard served the {self.final_rows} distinct rows (as SELECT DISTINCT).")
            elif self.action == "join_copies_removed":
                lines.append(
                    f"The guard removed {copies} join copies and served {self.final_rows} rows: one per "
                    "combination of the joined tables' rows (equal rows of different table rows kept)."
                )
            elif self.action == "distinct_removed":
                lines.append(f"The guard removed DISTINCT and served {self.final_rows} rows.")
            else:
                lines.append(f"The guard served all {self.rows} rows as returned.")
            if copies == 0:
                lines.append("On this data no join repeats a row: each repeated row comes from a different table row.")
            if (self.provenance in ("value_repeats", "identified") or copies == 0) and self.action == "none":
                lines.append("Next step: if each answer should appear once, add DISTINCT; the repeats may be meant.")
            elif self.action == "join_copies_removed":
                lines.append(
                    "Next step: add DISTINCT to the outer SELECT if equal answers of different rows should appear "
                    "once, or test the joined table with EXISTS / IN (SELECT ...) instead of joining it."
                )
            elif self.action != "distinct_removed":
                lines.append(
                    "Next step: add DISTINCT to the outer SELECT, or test the joined table with EXISTS / IN "
                    "(SELECT ...) instead of joining it, so that its rows do not repeat the answer."
                )
        elif trigger == "aggregate_fanout":
            for finding in self.aggregates:
                lines.append(f"An aggregate counts rows several times: {finding.describe()}.")
            tables = tuple(dict.fromkeys(t for f in self.aggregates for t in f.repeating))
            repeating = ", ".join(tables)
            them = "it" if len(tables) == 1 else "them"
            if self.action == "aggregate_defanned":
                lines.append("The guard served the corrected values (each row counted once per group).")
            else:
                lines.append("The guard served the values as computed.")
            if any(d.rule == "aggregate" and "confirmation reused" in d.reason for d in self.decisions):
                lines.append("The guard reused its check of this statement: the data is unchanged since it ran.")
            lines.append(
                f"Next step: aggregate before joining {repeating} (a subquery grouped by the join key), or test "
                f"{repeating} with EXISTS / IN (SELECT ...) instead of joining {them}."
            )
        elif self.action != "none":
            lines.append(f"The guard changed the result ({self.action}): {self.summary()}.")
        elif trigger is None:
            unchecked = next(
                (d.reason for d in self.decisions if d.rule == "aggregate" and not (d.applied or routine_aggregate(d))),
                None,
            )
            if unchecked is not None:
                lines.append(f"An aggregate over a join may count rows several times; {unchecked}.")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        import html

        cells = "".join(
            f"<tr><th style='text-align:left'>{f.name}</th>"
            f"<td style='text-align:left'><code>{html.escape(_render(getattr(self, f.name)))}</code></td></tr>"
            for f in fields(self)
        )
        return f"<table><caption>GuardReport: {html.escape(self.summary())}</caption>{cells}</table>"


_HEALTHY_FIELDS: dict[str, object] = {
    **dict.fromkeys(f.name for f in fields(GuardReport)),
    "flagged": False,
    "probed": True,
    "decisions": (),
    "aggregates": (),
}
"""Every field of ``GuardReport``, in order, at its value for a statement nothing was found or done about."""


def _render(value: object) -> str:
    if isinstance(value, tuple):
        return (
            "; ".join(
                f"{d.rule} {'applied' if d.applied else 'not applied'}: {d.reason}"
                if isinstance(d, RuleDecision)
                else d.describe()
                if hasattr(d, "describe")  # an AggregateFinding (guarded_sqlite.findings, loaded with the rule)
                else str(d)
                for d in value
            )
            or "-"
        )
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
