"""Plain-text tables of an ``EvalReport`` or ``SweepReport``, as the CLI prints them."""

from __future__ import annotations

from collections.abc import Sequence

from .compare import PresetComparison
from .metrics import TRIGGERS, VERDICTS
from .report import EvalReport, FixBreak, RescueStats, Scores
from .sweep_report import CrossValidation, SweepReport, SweepRow


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A left-aligned first column, right-aligned others, padded to the widest cell."""
    cells = [[str(h) for h in headers]] + [[_cell(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        parts = [row[0].ljust(widths[0])] + [cell.rjust(width) for cell, width in zip(row[1:], widths[1:])]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(cells[0]), rule] + [line(row) for row in cells[1:]])


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}%"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _score_row(name: str, scores: Scores, transpiled: bool = False) -> list[object]:
    row: list[object] = [
        name,
        scores.n,
        _pct(scores.set_ex),
        _pct(scores.multiset_ex),
        "-" if scores.gap_pp is None else f"{scores.gap_pp:.2f}",
        scores.set_correct,
        scores.multiset_correct,
        scores.errors,
        scores.timeouts,
    ]
    if transpiled:
        row.append(scores.transpile_errors)
    return row


def _copies_text(report: EvalReport) -> list[str]:
    copied = [c for c in report.copies if c.action == "copied"]
    reused = len(report.copies) - len(copied)
    where = {"duckdb": "DuckDB files", "postgres": "PostgreSQL schemas", "clickhouse": "chDB databases"}.get(
        report.engine, "MySQL/MariaDB databases"
    )
    out = [
        f"Copies in {where}: {len(report.copies)} database(s), {len(copied)} copied "
        f"({sum(c.rows for c in copied)} rows, {sum(c.seconds for c in copied):.2f} s), {reused} up to date; "
        f"copy step {report.timings.copy_s:.2f} s"
    ]
    notes = [(c.db_id, note) for c in report.copies for note in c.notes]
    # A note every copy has (MySQL's collation) is printed once.
    everywhere = [
        note for note in dict.fromkeys(note for _, note in notes) if all(note in c.notes for c in report.copies)
    ]
    if len(report.copies) < 2:
        everywhere = []
    notes = [(db_id, note) for db_id, note in notes if note not in everywhere]
    notes = [("every database", note) for note in everywhere] + notes
    if notes:
        out.append(f"Not copied exactly ({len(notes)}):")
        out += [f"  {db_id}: {note}" for db_id, note in notes]
    return out


def _differences_text(report: EvalReport) -> list[str]:
    differences = report.gold_differences
    counts: dict[str, int] = {}
    for difference in differences:
        counts[difference.category] = counts.get(difference.category, 0) + 1
    summary = ", ".join(f"{name} {count}" for name, count in counts.items())
    out = [
        f"Gold results that differ from SQLite's (their pairs are scored against the {report.engine} result): "
        f"{len(differences)} ({summary})"
    ]
    out += [f"  #{d.index} {d.db_id} [{d.category}] {d.detail}" for d in differences]
    return out


def format_eval(report: EvalReport) -> str:
    """The evaluation as readable tables: scores, flags, rules, detector, difficulty, timings."""
    t = report.timings
    timeout = "none" if report.timeout_s is None else f"{report.timeout_s:g} s"
    transpiled = report.engine != "sqlite"
    engine = f"engine={report.engine}, " if transpiled else ""
    out = [
        f"Evaluated N={report.n} pairs ({engine}guard={report.guard}, tau_inject={report.tau_inject:g}, "
        f"tau_remove={report.tau_remove:g}"
        + ("" if report.tau_amplified is None else f", tau_amplified={report.tau_amplified:g}")
        + f", timeout {timeout}, {t.workers} worker(s))",
    ]
    out += [f"WARNING: {doubt}" for doubt in report.warnings]
    if transpiled:
        out += _copies_text(report)
    if report.excluded_db_ids:
        out.append(f"Excluded databases: {', '.join(report.excluded_db_ids)} ({report.excluded_pairs} pairs)")
    if report.gold_failures:
        failures = report.gold_failures
        detail = ""
        if transpiled:
            untranspiled = sum(1 for f in failures if f.transpile_failed)
            timeouts = sum(1 for f in failures if f.status == "timeout")
            errors = len(failures) - untranspiled - timeouts
            detail = f" ({untranspiled} not transpiled, {errors} errors, {timeouts} timeouts)"
        out.append(f"Gold queries that failed and are excluded from N: {len(failures)}{detail}")
        for failure in failures:
            status = "transpile" if failure.transpile_failed else failure.status
            out.append(f"  #{failure.index} {failure.db_id} [{status}] {failure.reason}")
    if report.gold_differences:
        out += _differences_text(report)
    out.append("")
    headers = ["", "N", "Set-EX", "Multiset-EX", "gap pp", "set ok", "multiset ok", "errors", "timeouts"]
    if transpiled:
        headers.append("of errors: transpile")
    out.append(
        table(
            headers,
            [_score_row("baseline", report.baseline, transpiled), _score_row("guarded", report.guarded, transpiled)],
        )
    )
    f = report.flagged
    out += [
        "",
        f"Flagged: {f.total} ({', '.join(f'{trigger} {getattr(f, trigger)}' for trigger in TRIGGERS)})",
        "",
        table(
            ["rule", "fired", "fix", "break", "net", "set fix", "set break"],
            [[s.rule, s.fired, s.fix, s.break_, f"{s.net:+d}", s.set_fix, s.set_break] for s in report.rules.values()],
        ),
        "",
    ]
    if report.provenance:
        out += [_verdict_table(report), ""]
    d = report.detector
    detector_rows = [["all flagged", d.overall.flagged, d.overall.true_positives, _ratio(d.overall.precision)]]
    detector_rows += [[name, p.flagged, p.true_positives, _ratio(p.precision)] for name, p in d.per_trigger.items()]
    out.append(table(["detector", "flagged", "Multiset-EX failures", "precision"], detector_rows))
    out.append(f"MBS (Set-EX pass, Multiset-EX fail): {d.mbs}; flagged {d.mbs_flagged}; recall {_ratio(d.mbs_recall)}")
    if report.difficulty:
        out.append("")
        rows = []
        for stratum in report.difficulty:
            b, g = stratum.baseline, stratum.guarded
            rows.append(
                [
                    stratum.difficulty,
                    b.n,
                    _pct(b.set_ex),
                    _pct(b.multiset_ex),
                    _pct(g.set_ex),
                    _pct(g.multiset_ex),
                    g.multiset_correct - b.multiset_correct,
                ]
            )
        out.append(
            table(["difficulty", "N", "Set-EX", "Multiset-EX", "guarded Set-EX", "guarded Multiset-EX", "gain"], rows)
        )
    if report.rescue is not None:
        out += ["", *_rescue_text(report.rescue)]
    out += [
        "",
        f"Time: wall {t.wall_s:.2f} s; {t.queries} queries: gold {t.gold_s:.2f} s, predictions (guarded) "
        f"{t.pred_s:.2f} s, raw re-runs {t.rerun_s:.3f} s; probe median {_num(t.detect_us_median)} us; "
        f"patch median {_num(t.patch_ms_median)} ms, p90 {_num(t.patch_ms_p90)} ms"
        + (f"; copies {t.copy_s:.2f} s, transpiling {t.transpile_s:.2f} s" if transpiled else ""),
    ]
    return "\n".join(out)


def _fbn(counts: FixBreak) -> str:
    """``fired/fix/break`` in one cell."""
    return f"{counts.fired}/{counts.fix}/{counts.break_}"


def _verdict_table(report: EvalReport) -> str:
    rows = [
        [v.verdict, v.asked, v.left_alone, _fbn(v.p1), _fbn(v.p2), f"{v.p1.net + v.p2.net:+d}"]
        for v in report.provenance.values()
    ]
    return table(["provenance", "asked", "left alone", "P1 fired/fix/break", "P2 fired/fix/break", "net"], rows)


def _rescue_text(r: RescueStats) -> list[str]:
    cost = f"${r.cost_usd:.6g}" + (f" (+{r.cost_unknown} rescue(s) of unknown cost)" if r.cost_unknown else "")
    lines = [
        f"Rescue ({r.rescuer}, order={r.order}): {r.pairs_with_candidates} pairs with candidates"
        + (f", {r.candidates_dropped} candidate(s) dropped (not transpiled)" if r.candidates_dropped else "")
        + f"; {r.rescues_run} rescues run, candidate chosen {r.candidate_chosen}, fallbacks {r.fallbacks}",
        table(
            ["served from a candidate", "fix", "break", "net", "set fix", "set break"],
            [
                [
                    r.candidate_chosen,
                    r.multiset_fix,
                    r.multiset_break,
                    f"{r.multiset_fix - r.multiset_break:+d}",
                    r.set_fix,
                    r.set_break,
                ]
            ],
        ),
        f"Rescue cost {cost}; tokens {r.prompt_tokens} prompt + {r.completion_tokens} completion; "
        f"median latency {_num(r.latency_ms_median)} ms",
    ]
    for reason, count in r.fallback_reasons.items():
        lines.append(f"  fallback: {reason}: {count}")
    return lines


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _sweep_table(rows: Sequence[SweepRow], name: str) -> str:
    return table(
        [name, "fired", "fix", "break", "net", "set fix", "set break"],
        [[f"{r.tau:.2f}", r.fired, r.fix, r.break_, f"{r.net:+d}", r.set_fix, r.set_break] for r in rows],
    )


def _cv_text(cv: CrossValidation, rule: str) -> str:
    if not cv.folds:
        return f"{rule} leave-one-database-out CV: the rule never fires, no folds"
    folds = table(
        ["held-out db", "chosen tau", "train net", "fix", "break", "net"],
        [[f.db_id, f"{f.tau:.2f}", f"{f.train_net:+d}", f.fix, f.break_, f"{f.net:+d}"] for f in cv.folds],
    )
    return (
        f"{rule} leave-one-database-out CV over {len(cv.folds)} databases: held-out net {cv.held_out_net:+d} "
        f"({cv.nonnegative_folds}/{len(cv.folds)} folds >= 0, worst {cv.worst_fold_net:+d}); "
        f"without a threshold: {cv.no_threshold_net:+d}\n{folds}"
    )


def format_sweep(report: SweepReport) -> str:
    """The sweep tables (fix/break/net per threshold) and the cross-validation summaries."""
    e = report.evaluation
    out = [
        f"Threshold sweep on N={e.n} pairs (base preset {report.guard}): {report.p1_candidates} P1 candidates, "
        f"{report.p2_candidates} P2 candidates"
        + (f", {report.amplified_candidates} tau_amplified candidates" if report.amplified_cv is not None else "")
        + f", {report.replays} guarded replays (wall {e.timings.wall_s:.2f} s)",
        f"Baseline Set-EX {_pct(e.baseline.set_ex)}, Multiset-EX {_pct(e.baseline.multiset_ex)}",
        "",
        "P1 (DISTINCT injection; P2 off)",
        _sweep_table(report.p1, "tau_inject"),
        "",
        _cv_text(report.p1_cv, "P1"),
        "",
        "P2 (DISTINCT removal; P1 off)",
        _sweep_table(report.p2, "tau_remove"),
        "",
        _cv_text(report.p2_cv, "P2"),
    ]
    if report.amplified_cv is not None:
        out += [
            "",
            f"P1 on join amplification below tau_inject={e.tau_inject:g} (text_to_sql; P2 off)",
            _sweep_table(report.amplified, "tau_amplified"),
            "",
            _cv_text(report.amplified_cv, "tau_amplified"),
        ]
    if report.plot:
        out += ["", f"Plot written to {report.plot}"]
    return "\n".join(out)


def format_comparison(comparison: PresetComparison) -> str:
    """One table, a row per preset: scores before and after, net, and fired/fix/break per rule and verdict."""
    reports = list(comparison.reports.values())
    first = reports[0]
    rows = []
    for name, r in comparison.reports.items():
        b, g = r.baseline, r.guarded
        row: list[object] = [
            name,
            _pct(b.set_ex),
            _pct(b.multiset_ex),
            _pct(g.set_ex),
            _pct(g.multiset_ex),
            f"{g.multiset_correct - b.multiset_correct:+d}",
            g.set_correct - b.set_correct,
            _fbn(r.rules["P1"]),
            _fbn(r.rules["P2"]),
            f"{r.flagged.aggregate_fanout}: {_fbn(r.rules['aggregate'])}",
        ]
        for verdict in VERDICTS:
            stats = r.provenance.get(verdict)
            row.append("-" if stats is None else f"{stats.asked}: {_fbn(stats.p1)} {_fbn(stats.p2)}")
        rows.append(row)
    headers = ["preset", "Set-EX", "Multiset-EX", "guarded Set-EX", "guarded Multiset-EX", "net", "set change"]
    headers += ["P1 f/x/b", "P2 f/x/b", "aggregate fanout: f/x/b", *VERDICTS]
    timings = ", ".join(f"{name} {r.timings.wall_s:.2f} s" for name, r in comparison.reports.items())
    doubts = [f"WARNING: {doubt}" for doubt in dict.fromkeys(d for r in reports for d in r.warnings)]
    engine = []
    if first.engine != "sqlite":
        engine = _copies_text(first)
        engine.append(f"Gold queries that failed and are excluded from N: {len(first.gold_failures)}")
        if first.gold_differences:
            engine.append(_differences_text(first)[0] + " (listed in each preset's --json report)")
    return "\n".join(
        [
            f"Presets compared on N={first.n} pairs ("
            + (f"engine={first.engine}, " if first.engine != "sqlite" else "")
            + f"timeout {'none' if first.timeout_s is None else f'{first.timeout_s:g} s'}, "
            f"{first.timings.workers} worker(s))",
            *doubts,
            *engine,
            "",
            table(headers, rows),
            "",
            "f/x/b = fired/fix/break (Multiset-EX pairs); aggregate fanout: 'flagged: corrected values served "
            "f/x/b'; per verdict: 'asked: P1 f/x/b P2 f/x/b'; "
            "'-': the preset never asks the provenance analysis",
            f"Wall time: {timings}",
        ]
    )
