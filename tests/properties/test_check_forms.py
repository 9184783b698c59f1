"""Properties (hypothesis, issue 44): on SQLite, two ways of running the aggregate rule's queries that
must change nothing it does, over the statements and data of ``test_deciding_oracle`` (an aggregate at
risk deciding the rows, several SELECTs at risk, parameters of every style), under each preset:

1. the statement corrected and its SELECTs' checks of every group fused into one query
   (``guarded_sqlite._analysis.fusing``) serve the same rows with the same report (timings aside) as the
   queries run on their own;
2. a subquery's check of every group in its pre-grouped form (``guarded_sqlite._analysis.pregroup``,
   where the statement scans the repeating table whole) serves the same rows with the same decisions and
   findings as the grouped form (the corrected SQL the report names differs: it is the other form). The
   oracle's totals are dyadic, so every form sums them exactly in any order.

How often a drawn statement is fused or pre-grouped is counted (hypothesis events)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any
from unittest import mock

from hypothesis import event, given, settings

from guarded_sqlite._analysis import deciding, planning
from tests.properties.test_deciding_oracle import PRESETS, SETTINGS, Case, cases, examples
from tests.rules.test_fused_checks import comparable, run

FUSED = 'WITH "__gs_f0"'


@contextmanager
def grouped_subquery_checks() -> Iterator[None]:
    """Plans made meanwhile check every subquery in the grouped form (as before issue 44)."""
    scopes = deciding.inner_scopes
    with mock.patch.object(
        planning, "inner_scopes", lambda tree, facts, dialect, scanned=None: scopes(tree, facts, dialect)
    ):
        yield


def compared(case: Case, outcome: Callable[[sqlite3.Connection, str, Any, str, bool], Any]) -> None:
    """``outcome(raw, sql, params, preset, changed)`` alike with and without the change, per preset."""
    sql, params, _ = case.render("sqlite", truth=False)
    raw = sqlite3.connect(":memory:")
    try:
        for statement in [*case.ddl("sqlite"), *case.inserts()]:
            raw.execute(statement)
        raw.commit()
        try:
            raw.execute(sql) if params is None else raw.execute(sql, params)
        except sqlite3.Error:
            return  # a combination SQLite refuses: nothing to compare
        for preset in PRESETS:
            assert outcome(raw, sql, params, preset, True) == outcome(raw, sql, params, preset, False), (
                f"[{preset}]\n{sql}\nparams={params}"
            )
    finally:
        raw.close()


@settings(SETTINGS, max_examples=examples("sqlite", 100))
@given(case=cases("sqlite"))
def test_fusion_changes_no_outcome(case: Case) -> None:
    def outcome(raw: sqlite3.Connection, sql: str, params: Any, preset: str, fused: bool) -> Any:
        rows, report, checks = run(raw, sql, preset, fused, params)
        if fused:
            joined = any(check.startswith(FUSED) for check in checks)
            event(f"{preset}: {'fused' if joined else 'not fused'} ({case.shape})")
        return rows, comparable(report)

    compared(case, outcome)


@settings(SETTINGS, max_examples=examples("sqlite", 100))
@given(case=cases("sqlite"))
def test_pre_grouped_subquery_checks_change_no_outcome(case: Case) -> None:
    def outcome(raw: sqlite3.Connection, sql: str, params: Any, preset: str, pregrouped: bool) -> Any:
        with nullcontext() if pregrouped else grouped_subquery_checks():
            rows, report, checks = run(raw, sql, preset, True, params)
        if pregrouped:
            event(f"{preset}: {'pre-grouped' if any('__gs_n' in c for c in checks) else 'grouped'} ({case.shape})")
        findings = [(f.function, f.argument, f.written, f.corrected, f.factor, f.chose) for f in report.aggregates]
        decisions = [(d.rule, d.applied, d.reason) for d in report.decisions]
        return rows, report.trigger, report.action, decisions, findings

    compared(case, outcome)
