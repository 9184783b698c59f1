"""The evaluation under the guard presets: ``evaluate(guard=...)``, the per-verdict report, the side-by-side
comparison, the sweep's base preset and its ``tau_amplified`` grid with leave-one-database-out CV.

Every database is generated in ``tmp_path``; the expected numbers follow from the fixture's row counts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guarded_sqlite import GuardPolicy
from guarded_sqlite.cli.commands import main
from guarded_sqlite.evaluation import evaluate, sweep
from guarded_sqlite.evaluation.compare import compare
from guarded_sqlite.evaluation.loaders import InputError
from guarded_sqlite.evaluation.options import SweepGrid
from guarded_sqlite.evaluation.replay import AMPLIFIED_RULE, sweep_policies
from tests.evaluation.test_evaluation import make_db, write_lines, write_tsv_gold

JOIN = "SELECT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id WHERE c.name = '{}'"
"""One customer's name once per order: join amplification, dup_ratio = 1 - 1/orders."""

PETS = "SELECT kind FROM pets"
"""Ten equal values of one table: value repeats at dup_ratio 0.9."""


def _preset_fixture(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Two databases; per pair (dup_ratio, verdict, what DISTINCT does to Multiset-EX):

    A: a (0.5, amplified, fix)  b (0.9, amplified, fix)  c (0.75, amplified, break)  pets (0.9, value_repeats, break)
    B: d (0.667, amplified, fix)  e (0.5, amplified, break)
    'fix' pairs have the DISTINCT query as gold, 'break' pairs the prediction itself.
    """
    orders = {"A": {"a": 2, "b": 10, "c": 4}, "B": {"d": 3, "e": 2}}
    fixes = {"a", "b", "d"}
    root = tmp_path / "dbs"
    gold_items, preds = [], []
    for db_id, per_customer in orders.items():
        script = [
            "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);",
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER);",
            "CREATE TABLE pets (kind TEXT);",
            *(["INSERT INTO pets VALUES ('cat');"] * 10),
        ]
        for number, (name, count) in enumerate(per_customer.items()):
            script.append(f"INSERT INTO customers VALUES ({number}, '{name}');")
            script += [f"INSERT INTO orders (customer_id) VALUES ({number});"] * count
        make_db(root, db_id, "\n".join(script))
        for name in per_customer:
            pred = JOIN.format(name)
            gold = pred.replace("SELECT", "SELECT DISTINCT", 1) if name in fixes else pred
            gold_items.append((gold, db_id))
            preds.append(pred)
        if db_id == "A":
            gold_items.append((PETS, db_id))
            preds.append(PETS)
    return root, write_tsv_gold(tmp_path / "gold.sql", gold_items), write_lines(tmp_path / "pred.txt", preds)


def _fbn(stats: object) -> tuple[int, int, int]:
    return (stats.fired, stats.fix, stats.break_)  # type: ignore[attr-defined]


def test_evaluate_takes_each_preset_and_reports_fires_per_verdict(tmp_path: Path) -> None:
    root, gold, pred = _preset_fixture(tmp_path)
    paper = evaluate(root, gold, pred, guard="paper", workers=1)
    patch = evaluate(root, gold, pred, guard="patch", workers=1)
    text = evaluate(root, gold, pred, guard="text_to_sql", workers=1)

    assert (paper.guard, patch.guard, text.guard) == ("paper", "patch", "text_to_sql")
    assert (paper.tau_amplified, patch.tau_amplified, text.tau_amplified) == (None, None, 0.3)
    # paper: P1 on every result at >= 0.8 (b fixed, pets broken); patch: pets are value repeats.
    assert _fbn(paper.rules["P1"]) == (2, 1, 1)
    assert _fbn(patch.rules["P1"]) == (1, 1, 0)
    # text_to_sql: also every amplified result at >= 0.3 (a, d fixed; c, e broken).
    assert _fbn(text.rules["P1"]) == (5, 3, 2)
    assert paper.baseline == patch.baseline == text.baseline
    assert text.guarded.multiset_correct - text.baseline.multiset_correct == 1
    assert text.guarded.set_correct == text.baseline.set_correct

    # Per verdict: paper never asks; patch asks only at >= 0.8; text_to_sql from 0.3.
    assert paper.provenance == {}
    assert set(patch.provenance) == {"amplified", "identified", "value_repeats", "unknown"}
    assert (patch.provenance["amplified"].asked, _fbn(patch.provenance["amplified"].p1)) == (1, (1, 1, 0))
    assert (patch.provenance["value_repeats"].asked, patch.provenance["value_repeats"].left_alone) == (1, 1)
    assert _fbn(patch.provenance["value_repeats"].p1) == (0, 0, 0)
    assert (text.provenance["amplified"].asked, _fbn(text.provenance["amplified"].p1)) == (5, (5, 3, 2))
    assert text.provenance["identified"].asked == text.provenance["unknown"].asked == 0

    # Each pair records the verdict and its evidence (JSON included).
    by_sql = {p.pred_sql: p for p in text.pairs}
    assert by_sql[PETS].provenance == "value_repeats" and by_sql[PETS].action == "none"
    assert by_sql[JOIN.format("a")].provenance == "amplified"
    assert "fans out" in (by_sql[JOIN.format("a")].provenance_evidence or "")
    assert all(p.provenance is None and p.provenance_evidence is None for p in paper.pairs)
    document = json.loads(text.to_json())
    assert document["provenance"]["amplified"]["p1"]["break"] == 2
    assert {p["provenance"] for p in document["pairs"]} == {"amplified", "value_repeats"}


def test_evaluate_refuses_off_and_unknown_presets(tmp_path: Path) -> None:
    root, gold, pred = _preset_fixture(tmp_path)
    with pytest.raises(ValueError, match="does not probe"):
        evaluate(root, gold, pred, guard="off", workers=1)
    with pytest.raises(ValueError, match="guard mode must be one of"):
        evaluate(root, gold, pred, guard="strict", workers=1)  # type: ignore[arg-type]


def test_compare_runs_each_preset_on_the_same_inputs(tmp_path: Path) -> None:
    root, gold, pred = _preset_fixture(tmp_path)
    comparison = compare(root, gold, pred, guards=["paper", "text_to_sql", "paper"], workers=1)
    assert list(comparison.reports) == ["paper", "text_to_sql"]  # order kept, repeats dropped
    assert _fbn(comparison.reports["text_to_sql"].rules["P1"]) == (5, 3, 2)
    with pytest.raises(ValueError, match="guard presets must be among"):
        compare(root, gold, pred, guards=["patch", "off"], workers=1)
    with pytest.raises(TypeError, match="guards="):
        compare(root, gold, pred, guards=["patch"], guard="patch", workers=1)


def test_cli_eval_compares_presets_in_one_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, gold, pred = _preset_fixture(tmp_path)
    base = ["eval", "--db-root", str(root), "--gold", str(gold), "--pred", str(pred), "--workers", "1"]
    out_json = tmp_path / "cmp.json"
    assert main([*base, "--guard", "patch,text_to_sql,paper", "--json", str(out_json)]) == 0
    text = capsys.readouterr().out
    rows = {
        line.split()[0]: line
        for line in text.splitlines()
        if line.split()[:1] in (["patch"], ["text_to_sql"], ["paper"])
    }
    assert set(rows) == {"patch", "text_to_sql", "paper"}
    assert "5/3/2" in rows["text_to_sql"] and "2/1/1" in rows["paper"] and "1/1/0" in rows["patch"]
    reports = json.loads(out_json.read_text())["reports"]
    assert list(reports) == ["patch", "text_to_sql", "paper"]
    assert reports["text_to_sql"]["rules"]["P1"]["fired"] == 5

    assert main([*base, "--guard", "text_to_sql"]) == 0
    single = capsys.readouterr().out
    assert "guard=text_to_sql" in single and "tau_amplified=0.3" in single
    assert "provenance" in single and "value_repeats" in single

    with pytest.raises(SystemExit) as exit_info:
        main([*base, "--guard", "patch,strict"])
    assert exit_info.value.code == 2
    assert "expected one or more of" in capsys.readouterr().err


def test_sweep_base_preset_is_paper_unless_asked(tmp_path: Path) -> None:
    root, gold, pred = _preset_fixture(tmp_path)
    paper = sweep(root, gold, pred, workers=1, p1_taus=[0.8], p2_taus=[0.1])
    assert paper.guard == paper.evaluation.guard == "paper"
    assert [(r.fired, r.fix, r.break_) for r in paper.p1] == [(2, 1, 1)]
    assert paper.amplified == () and paper.amplified_cv is None
    patch = sweep(root, gold, pred, workers=1, p1_taus=[0.8], p2_taus=[0.1], guard="patch")
    assert [(r.fired, r.fix, r.break_) for r in patch.p1] == [(1, 1, 0)]  # the value repeats are left alone
    with pytest.raises(ValueError, match="a sweep replays patches"):
        sweep(root, gold, pred, workers=1, guard="observe")
    with pytest.raises(InputError, match="needs guard 'text_to_sql'"):
        sweep(root, gold, pred, workers=1, amplified_taus=[0.3])


def test_sweep_text_to_sql_grid_over_tau_amplified_with_cv(tmp_path: Path) -> None:
    root, gold, pred = _preset_fixture(tmp_path)
    report = sweep(
        root,
        gold,
        pred,
        workers=1,
        p1_taus=[0.8],
        p2_taus=[0.1],
        guard="text_to_sql",
        amplified_taus=[0.3, 0.6, 0.7, 0.8],
    )
    assert report.guard == "text_to_sql"
    table = {row.tau: (row.fired, row.fix, row.break_, row.net) for row in report.amplified}
    # Fires at tau: a .5, b .9, c .75, d .67, e .5 (pets are value repeats: never).
    assert table == {0.3: (5, 3, 2, 1), 0.6: (3, 2, 1, 1), 0.7: (2, 1, 1, 0), 0.8: (1, 1, 0, 1)}
    cv = report.amplified_cv
    assert cv is not None
    # Nets per db at (.3, .6, .7, .8): A +1, 0, 0, +1; B 0, +1, 0, 0.
    # Hold out A: B's best is .6 -> A gets 0. Hold out B: A ties .3/.8 -> the stricter .8 -> B gets 0.
    assert {f.db_id: (f.tau, f.train_net, f.net) for f in cv.folds} == {"A": (0.6, 1, 0), "B": (0.8, 1, 0)}
    assert (cv.held_out_net, cv.nonnegative_folds, cv.no_threshold_net) == (0, 2, 1)
    assert report.amplified_candidates == 6  # the five joins and the pets, replayed; the pets never rewritten
    assert {o.rule for o in report.outcomes} == {"P1", AMPLIFIED_RULE}
    document = json.loads(report.to_json())
    assert document["amplified"][0]["tau"] == 0.3 and document["amplified_cv"]["held_out_net"] == 0


def test_sweep_policies_keep_the_base_preset() -> None:
    base = GuardPolicy.text_to_sql()
    policies = sweep_policies(SweepGrid((0.0, 0.5), (0.1,), (0.3,)), base)
    assert policies["P1"][0.5].provenance == "text_to_sql" and not policies["P1"][0.5].remove_distinct
    assert policies["P2"][0.1].tau_remove == 0.1 and not policies["P2"][0.1].inject_distinct
    assert policies[AMPLIFIED_RULE][0.3].tau_amplified == 0.3
    assert AMPLIFIED_RULE not in sweep_policies(SweepGrid((0.8,), (0.1,)), GuardPolicy.paper())


def test_cli_sweep_guard_text_to_sql(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, gold, pred = _preset_fixture(tmp_path)
    base = ["sweep", "--db-root", str(root), "--gold", str(gold), "--pred", str(pred), "--workers", "1"]
    assert main([*base, "--guard", "text_to_sql", "--amplified-taus", "0.3,0.8", "--p1-taus", "0.8"]) == 0
    out = capsys.readouterr().out
    assert "base preset text_to_sql" in out and "tau_amplified leave-one-database-out CV" in out
    assert main([*base, "--amplified-taus", "0.3"]) == 2
    assert "needs guard 'text_to_sql'" in capsys.readouterr().err
