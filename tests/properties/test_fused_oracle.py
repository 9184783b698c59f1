"""Property (hypothesis, issue 44): on SQLite, the statement corrected and its SELECTs' checks of every
group fused into one query (``guarded_sqlite._analysis.fusing``) change nothing the guard does: over the
statements and data of ``test_deciding_oracle`` (an aggregate at risk deciding the rows, several SELECTs at
risk, parameters of every style), each preset serves the same rows with the same report (timings aside)
as with the queries run on their own. How often a drawn statement is fused is counted (hypothesis events)."""

from __future__ import annotations

import sqlite3
from typing import Any

from hypothesis import event, given, settings

from tests.properties.test_deciding_oracle import PRESETS, SETTINGS, Case, cases, examples
from tests.rules.test_fused_checks import comparable, run

FUSED = 'WITH "__gs_f0"'


@settings(SETTINGS, max_examples=examples("sqlite", 100))
@given(case=cases("sqlite"))
def test_fusion_changes_no_outcome(case: Case) -> None:
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
            outcome: list[Any] = []
            for fused in (True, False):
                rows, report, checks = run(raw, sql, preset, fused, params)
                outcome.append((rows, comparable(report)))
                if fused:
                    joined = any(check.startswith(FUSED) for check in checks)
                    event(f"{preset}: {'fused' if joined else 'not fused'} ({case.shape})")
            assert outcome[0] == outcome[1], f"[{preset}]\n{sql}\nparams={params}"
    finally:
        raw.close()
