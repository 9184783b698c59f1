"""The evaluation toolkit: input formats and checks, Set-EX vs Multiset-EX, the guarded replay, timeouts,
detector arithmetic, threshold sweeps with leave-one-database-out CV, the CLI and the plot.

Every database and input file is generated in ``tmp_path``; nothing here needs /work/shared.
"""

from __future__ import annotations

import dataclasses
import io
import json
import sqlite3
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import guarded_sqlite
from guarded_sqlite.cli.commands import main
from guarded_sqlite.evaluation import evaluate, sweep
from guarded_sqlite.evaluation.loaders import InputError, load_gold, load_pairs, load_predictions
from guarded_sqlite.evaluation.metrics import GoldRows, detector_stats, multiset_ex, rule_stats, scores, set_ex
from guarded_sqlite.evaluation.progress import ProgressBar
from guarded_sqlite.evaluation.report import PairRecord, SweepOutcome
from guarded_sqlite.evaluation.thresholds import PlotUnavailable, loo_cv, sweep_table
from tests.pace import within

# --------------------------------------------------------------------------------------------------
# Helpers


def make_db(root: Path, db_id: str, script: str) -> Path:
    """Create ``root/db_id/db_id.sqlite`` (BIRD/Spider layout) from an SQL script."""
    path = root / db_id / f"{db_id}.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.executescript(f"BEGIN; {script}; COMMIT;")  # one transaction: one sync, not one per INSERT
    con.commit()
    con.close()
    return path


def fanout_script(customers: int = 4, orders_per_customer: int = 6) -> str:
    """Customers with several orders each: joining them repeats each customer once per order."""
    lines = [
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);",
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, amount INTEGER);",
    ]
    lines += [f"INSERT INTO customers VALUES ({i}, 'name{i}');" for i in range(customers)]
    lines += [
        f"INSERT INTO orders VALUES ({c * orders_per_customer + k}, {c}, {10 * k});"
        for c in range(customers)
        for k in range(orders_per_customer)
    ]
    lines.append("CREATE TABLE pets (owner TEXT, kind TEXT);")
    lines += [
        "INSERT INTO pets VALUES ('ann', 'cat');",
        "INSERT INTO pets VALUES ('ann', 'cat');",
        "INSERT INTO pets VALUES ('bob', 'dog');",
    ]
    return "\n".join(lines)


JOIN = "SELECT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id"
"""24 rows, 4 distinct: dup_ratio 0.83, so the probe flags it and P1 injects DISTINCT."""

SLOW = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 500000000) SELECT count(*) FROM c"
"""Counts to 5e8 inside SQLite: many seconds unless interrupted."""


def write_lines(path: Path, lines: Sequence[str], trailing_newline: bool = True) -> Path:
    path.write_text("\n".join(lines) + ("\n" if trailing_newline else ""), encoding="utf-8")
    return path


def write_tsv_gold(path: Path, items: Sequence[tuple[str, str]]) -> Path:
    return write_lines(path, [f"{sql}\t{db_id}" for sql, db_id in items])


def record(**changes: Any) -> PairRecord:
    """A passing, healthy record with ``changes`` applied (for the pure metric tests)."""
    fields: dict[str, Any] = dict(
        index=0,
        db_id="db",
        difficulty=None,
        pred_sql="SELECT 1",
        status="ok",
        error=None,
        trigger=None,
        action="none",
        final_sql="SELECT 1",
        rows=1,
        unique_rows=1,
        dup_ratio=0.0,
        gold_rows=1,
        baseline_set=True,
        baseline_multiset=True,
        guarded_set=True,
        guarded_multiset=True,
        exec_ms=0.1,
        detect_us=1.0,
        patch_ms=None,
    )
    fields.update(changes)
    return PairRecord(**fields)


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    """A db root with one fan-out database called ``shop``."""
    root = tmp_path / "dbs"
    make_db(root, "shop", fanout_script())
    return root


# The crafted evaluation: each pair exercises one outcome. Index -> (gold, prediction).
CRAFTED: list[tuple[str, str]] = [
    # 0: exact match
    ("SELECT name FROM customers ORDER BY id", "SELECT name FROM customers"),
    # 1: fan-out: same set, 6x the rows (MBS); flagged, P1 fixes it
    ("SELECT name FROM customers", JOIN),
    # 2: gold wants the duplicates; baseline passes, P1 breaks it
    (JOIN, JOIN),
    # 3: execution error
    ("SELECT name FROM customers", "SELECT nam FROM customers"),
    # 4: empty result, gold is not empty
    ("SELECT name FROM customers", "SELECT name FROM customers WHERE id < 0"),
    # 5: gold itself fails: excluded from N
    ("SELECT missing_column FROM customers", "SELECT name FROM customers"),
    # 6: mild duplicates (dup_ratio 0.33): set pass, multiset fail, not flagged (an unflagged MBS)
    ("SELECT DISTINCT owner FROM pets", "SELECT owner FROM pets"),
]


def write_crafted(tmp_path: Path) -> tuple[Path, Path]:
    gold = write_tsv_gold(tmp_path / "gold.sql", [(g, "shop") for g, _ in CRAFTED])
    pred = write_lines(tmp_path / "pred.txt", [p for _, p in CRAFTED], trailing_newline=False)
    return gold, pred


# --------------------------------------------------------------------------------------------------
# Metrics


@pytest.mark.parametrize(
    ("pred", "gold", "expected"),
    [
        ([(1,), (2,)], [(2,), (1,)], (True, True)),  # order does not matter
        ([(1,), (1,), (2,)], [(1,), (2,)], (True, False)),  # duplicates: set pass, multiset fail
        ([(1,), (2,)], [(1,), (1,), (2,)], (True, False)),  # missing duplicates too
        ([(1,), (1,), (2,)], [(1,), (2,), (2,)], (True, False)),  # same length, other multiplicities
        ([(1,)], [(2,)], (False, False)),
        ([], [], (True, True)),
        ([(1, "a")], [(1.0, "a")], (True, True)),  # Python equality, as BIRD's evaluator
    ],
)
def test_set_and_multiset_verdicts(
    pred: list[tuple[Any, ...]], gold: list[tuple[Any, ...]], expected: tuple[bool, bool]
) -> None:
    assert (set_ex(pred, gold), multiset_ex(pred, gold)) == expected
    # The cached comparison used by the runner must agree with the reference functions.
    assert GoldRows(gold).verdicts(pred) == expected


def test_detector_precision_and_mbs_recall_arithmetic() -> None:
    records = [
        record(trigger="cartesian_explosion", baseline_multiset=False),  # TP, MBS, flagged
        record(trigger="cartesian_explosion"),  # FP
        record(trigger="cartesian_explosion"),  # FP
        record(trigger="exec_error", status="error", baseline_set=False, baseline_multiset=False),  # TP
        record(trigger="empty_result", baseline_set=False, baseline_multiset=False),  # TP
        record(baseline_multiset=False),  # MBS, not flagged
        record(baseline_multiset=False),  # MBS, not flagged
        record(baseline_multiset=False),  # MBS, not flagged
        record(),
    ]
    stats = detector_stats(records)
    assert (stats.overall.flagged, stats.overall.true_positives, stats.overall.precision) == (5, 3, 0.6)
    cart = stats.per_trigger["cartesian_explosion"]
    assert (cart.flagged, cart.true_positives, cart.precision) == (3, 1, 0.3333)
    assert stats.per_trigger["exec_error"].precision == 1.0
    assert (stats.mbs, stats.mbs_flagged, stats.mbs_recall) == (4, 1, 0.25)
    assert detector_stats([record()]).overall.precision is None  # nothing flagged: undefined, not 0
    assert detector_stats([record()]).mbs_recall is None


def test_rule_stats_and_scores_arithmetic() -> None:
    records = [
        record(action="distinct_injected", baseline_multiset=False, guarded_multiset=True),
        record(action="distinct_injected", baseline_multiset=True, guarded_multiset=False),
        record(action="distinct_injected", baseline_multiset=False, guarded_multiset=True),
        record(
            action="distinct_removed",
            baseline_set=False,
            baseline_multiset=False,
            guarded_set=False,
            guarded_multiset=False,
        ),
        record(
            status="timeout", baseline_set=False, baseline_multiset=False, guarded_set=False, guarded_multiset=False
        ),
    ]
    p1 = rule_stats(records, "P1")
    assert (p1.fired, p1.fix, p1.break_, p1.net) == (3, 2, 1, 1)
    assert rule_stats(records, "P2").fired == 1
    base = scores(records, "baseline")
    assert (base.set_correct, base.multiset_correct, base.timeouts) == (3, 1, 1)
    assert base.set_ex == 60.0 and base.multiset_ex == 20.0 and base.gap_pp == 40.0
    assert p1.as_dict()["break"] == 1  # the JSON key loses the trailing underscore


# --------------------------------------------------------------------------------------------------
# Loaders


def test_every_gold_and_prediction_format_gives_the_same_pairs(tmp_path: Path) -> None:
    items = [("SELECT 1", "a"), ("SELECT 2", "b"), ("SELECT 3", "a")]
    preds = ["SELECT 1", "SELECT 20", "select 3"]
    golds = {
        "tsv": write_tsv_gold(tmp_path / "gold.sql", items),
        "spider": tmp_path / "spider.json",
        "bird": tmp_path / "bird.json",
    }
    golds["spider"].write_text(json.dumps([{"query": q, "db_id": d, "question": "?"} for q, d in items]))
    golds["bird"].write_text(json.dumps([{"SQL": q, "db_id": d, "difficulty": "simple"} for q, d in items]))
    predictions = {
        "lines, no trailing newline": write_lines(tmp_path / "p1.txt", preds, trailing_newline=False),
        "lines, trailing newline": write_lines(tmp_path / "p2.txt", preds, trailing_newline=True),
        "bird json": tmp_path / "p3.json",
        "json object": tmp_path / "p4.json",
        "json list": tmp_path / "p5.json",
    }
    predictions["bird json"].write_text(
        json.dumps({str(i): f"{sql}\t----- bird -----\t{db}" for i, (sql, (_, db)) in enumerate(zip(preds, items))})
    )
    # Object keys out of order: pairing is by index, not file order.
    predictions["json object"].write_text(json.dumps({"2": preds[2], "0": preds[0], "1": preds[1]}))
    predictions["json list"].write_text(json.dumps(preds))
    for gold_name, gold in golds.items():
        for pred_name, pred in predictions.items():
            pairs = load_pairs(gold, pred)
            got = [(p.index, p.db_id, p.gold_sql, p.pred_sql) for p in pairs]
            assert got == [(i, d, q, p) for i, ((q, d), p) in enumerate(zip(items, preds))], (gold_name, pred_name)
            assert [p.difficulty for p in pairs] == (["simple"] * 3 if gold_name == "bird" else [None] * 3)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("SELECT 1\nSELECT 2", "2 predictions (lines) but the gold has 3 queries; lines 3..3 are missing"),
        ("SELECT 1\nSELECT 2\nSELECT 3\nSELECT 4\n", "line 4 is past the last gold query"),
        (json.dumps(["SELECT 1"]), "1 predictions (list entries) but the gold has 3"),
        (json.dumps({"0": "SELECT 1", "2": "SELECT 3"}), "missing index 1"),
        (json.dumps({"0": "a", "1": "b", "2": "c", "3": "d"}), "index 3 has no gold query"),
        (json.dumps({"0": "a", "1": "b", "x": "c"}), "key 'x' is not an index"),
        (json.dumps(["a", 2, "c"]), "index 1 is a int"),
    ],
)
def test_prediction_count_mismatches_name_the_place(tmp_path: Path, content: str, message: str) -> None:
    gold = write_tsv_gold(tmp_path / "gold.sql", [("SELECT 1", "a")] * 3)
    pred = tmp_path / "pred.txt"
    pred.write_text(content)
    with pytest.raises(InputError) as caught:
        load_pairs(gold, pred)
    assert message in str(caught.value)


def test_trailing_blank_lines_are_not_predictions_but_inner_blank_lines_are(tmp_path: Path) -> None:
    assert len(load_predictions(write_lines(tmp_path / "p.txt", ["a", "b", "", ""]), 2)) == 2
    # A blank line inside the file is a (blank) prediction, so the count no longer matches.
    with pytest.raises(InputError, match="line 3 is past"):
        load_predictions(write_lines(tmp_path / "q.txt", ["a", "", "b"]), 2)


def test_bird_prediction_naming_another_database_is_refused(tmp_path: Path) -> None:
    gold = write_tsv_gold(tmp_path / "gold.sql", [("SELECT 1", "a"), ("SELECT 2", "b")])
    pred = tmp_path / "pred.json"
    pred.write_text(json.dumps({"0": "SELECT 1\t----- bird -----\ta", "1": "SELECT 2\t----- bird -----\ta"}))
    with pytest.raises(InputError, match=r"prediction index 1 is for db_id 'a' but gold 1 \(line 2\) is for 'b'"):
        load_pairs(gold, pred)


def test_malformed_gold_is_refused(tmp_path: Path) -> None:
    bad_line = write_lines(tmp_path / "gold.sql", ["SELECT 1\ta", "SELECT 2 without a db id"])
    with pytest.raises(InputError, match="line 2 is not 'SQL<TAB>db_id'"):
        load_gold(bad_line)
    bad_json = tmp_path / "gold.json"
    bad_json.write_text(json.dumps([{"query": "SELECT 1", "db_id": "a"}, {"question": "no SQL"}]))
    with pytest.raises(InputError, match="index 1 needs"):
        load_gold(bad_json)
    with pytest.raises(InputError, match="no such file"):
        load_gold(tmp_path / "absent.sql")


# --------------------------------------------------------------------------------------------------
# Evaluation


def test_crafted_pairs_give_the_expected_verdicts_flags_and_rule_effects(tmp_path: Path, shop: Path) -> None:
    gold, pred = write_crafted(tmp_path)
    report = evaluate(shop, gold, pred, workers=1)

    assert report.n == 6
    assert [(f.index, f.status) for f in report.gold_failures] == [(5, "error")]
    assert "missing_column" in report.gold_failures[0].reason
    by_index = {r.index: r for r in report.pairs}
    assert sorted(by_index) == [0, 1, 2, 3, 4, 6]

    verdicts = {
        i: (r.baseline_set, r.baseline_multiset, r.guarded_set, r.guarded_multiset) for i, r in by_index.items()
    }
    assert verdicts == {
        0: (True, True, True, True),
        1: (True, False, True, True),  # fixed by P1
        2: (True, True, True, False),  # broken by P1
        3: (False, False, False, False),
        4: (False, False, False, False),
        6: (True, False, True, False),
    }
    assert by_index[1].action == "distinct_injected"
    assert by_index[1].final_sql.startswith("SELECT DISTINCT c.name")
    assert (by_index[1].rows, by_index[1].unique_rows, by_index[1].gold_rows) == (24, 4, 4)
    assert by_index[3].status == "error" and "no such column" in (by_index[3].error or "")
    assert [by_index[i].trigger for i in (0, 1, 2, 3, 4, 6)] == [
        None,
        "cartesian_explosion",
        "cartesian_explosion",
        "exec_error",
        "empty_result",
        None,
    ]

    assert (report.baseline.set_correct, report.baseline.multiset_correct) == (4, 2)
    assert (report.guarded.set_correct, report.guarded.multiset_correct) == (4, 2)
    assert report.baseline.set_ex == pytest.approx(66.6667) and report.baseline.gap_pp == pytest.approx(33.3333)
    assert report.baseline.errors == 1
    assert (
        report.flagged.total,
        report.flagged.exec_error,
        report.flagged.empty_result,
        report.flagged.cartesian_explosion,
    ) == (4, 1, 1, 2)
    p1 = report.rules["P1"]
    assert (p1.fired, p1.fix, p1.break_, p1.net, p1.set_fix, p1.set_break) == (2, 1, 1, 0, 0, 0)
    assert report.rules["P2"].fired == 0
    # Flagged: 1 (TP), 2 (FP), 3 (TP), 4 (TP). MBS: 1 (flagged) and 6 (not).
    assert (report.detector.overall.true_positives, report.detector.overall.precision) == (3, 0.75)
    assert report.detector.per_trigger["cartesian_explosion"].precision == 0.5
    assert (report.detector.mbs, report.detector.mbs_flagged, report.detector.mbs_recall) == (2, 1, 0.5)
    assert report.difficulty == ()
    # Gold runs once per distinct SQL (5 distinct of 7), each prediction once, the 2 patched ones re-run raw.
    assert report.timings.queries == 5 + 6 + 2


def test_observe_mode_scores_the_guarded_side_as_the_baseline(tmp_path: Path, shop: Path) -> None:
    gold, pred = write_crafted(tmp_path)
    report = evaluate(shop, gold, pred, guard="observe", workers=1)
    assert report.guard == "observe"
    assert report.guarded == report.baseline
    assert report.rules["P1"].fired == 0
    assert report.flagged.cartesian_explosion == 2  # observe still probes


def test_patch_removing_distinct_is_counted_under_p2(tmp_path: Path) -> None:
    # The paper's P2 (the default preset keeps a DISTINCT over one table's values). 11 rows, 10
    # distinct: with DISTINCT the result has no duplicate and 10 rows; without it
    # dup_ratio is 1/11 <= 0.10, so P2 commits. The gold wants all 11 rows: a P2 fix.
    values = [*list(range(10)), 0]
    root = tmp_path / "dbs"
    make_db(root, "d", "CREATE TABLE t (v INTEGER);" + "".join(f"INSERT INTO t VALUES ({v});" for v in values))
    gold = write_tsv_gold(tmp_path / "gold.sql", [("SELECT v FROM t", "d")])
    pred = write_lines(tmp_path / "pred.txt", ["SELECT DISTINCT v FROM t"])
    report = evaluate(root, gold, pred, workers=1, guard="paper")
    p2 = report.rules["P2"]
    assert (p2.fired, p2.fix, p2.break_) == (1, 1, 0)
    assert report.pairs[0].action == "distinct_removed"
    assert (report.baseline.multiset_correct, report.guarded.multiset_correct) == (0, 1)


def test_timeout_interrupts_inside_sqlite_and_gold_timeouts_are_excluded(tmp_path: Path, shop: Path) -> None:
    gold = write_tsv_gold(tmp_path / "gold.sql", [("SELECT count(*) FROM customers", "shop"), (SLOW, "shop")])
    pred = write_lines(tmp_path / "pred.txt", [SLOW, "SELECT 1"])
    started = time.perf_counter()
    report = evaluate(shop, gold, pred, timeout=0.2, workers=1)
    elapsed = time.perf_counter() - started
    assert within(elapsed, 2 * 0.2, 2.6), elapsed  # two 0.2 s timeouts, not two counts to 5e8
    assert report.n == 1
    [slow_pred] = report.pairs
    assert (slow_pred.status, slow_pred.trigger) == ("timeout", "exec_error")
    assert within(slow_pred.exec_ms / 1000, 0.2, 1.8), slow_pred.exec_ms
    assert "0.2 s timeout" in (slow_pred.error or "")
    assert (report.baseline.timeouts, report.baseline.errors, report.baseline.set_correct) == (1, 0, 0)
    assert [(f.index, f.status) for f in report.gold_failures] == [(1, "timeout")]


def test_databases_are_opened_read_only(tmp_path: Path, shop: Path) -> None:
    gold = write_tsv_gold(tmp_path / "gold.sql", [("SELECT count(*) FROM customers", "shop")])
    pred = write_lines(tmp_path / "pred.txt", ["DELETE FROM customers"])
    report = evaluate(shop, gold, pred, workers=1)
    assert report.pairs[0].status == "error"
    assert "readonly" in (report.pairs[0].error or "")
    with sqlite3.connect(shop / "shop" / "shop.sqlite") as con:
        assert con.execute("SELECT count(*) FROM customers").fetchone() == (4,)
    con.close()


def test_exclude_db_missing_databases_and_blank_predictions(tmp_path: Path, shop: Path) -> None:
    make_db(shop, "other", "CREATE TABLE x (a);")
    gold = write_tsv_gold(
        tmp_path / "gold.sql", [("SELECT 1", "shop"), ("SELECT 1", "other"), ("SELECT 1 WHERE 0", "shop")]
    )
    pred = write_lines(tmp_path / "pred.txt", ["SELECT 1", "SELECT 1", "   "])
    report = evaluate(shop, gold, pred, workers=1, exclude_db=["other"])
    assert (report.n, report.excluded_db_ids, report.excluded_pairs) == (2, ("other",), 1)
    # A blank prediction is an error, even though sqlite3 "returns" no rows for it like the empty gold.
    assert (report.pairs[1].status, report.pairs[1].error, report.pairs[1].baseline_set) == (
        "error",
        "empty prediction",
        False,
    )
    with pytest.raises(InputError, match="'typo', which no gold query uses"):
        evaluate(shop, gold, pred, workers=1, exclude_db=["typo"])
    (tmp_path / "empty_root").mkdir()
    with pytest.raises(InputError, match="1 database file"):
        evaluate(tmp_path / "empty_root", gold, pred, workers=1, exclude_db=["shop"])


def test_worker_processes_give_the_same_report(tmp_path: Path, shop: Path) -> None:
    make_db(shop, "second", fanout_script(customers=3, orders_per_customer=5))
    items = [(g, db) for db in ("shop", "second") for g, _ in CRAFTED]
    gold = write_tsv_gold(tmp_path / "gold.sql", items)
    pred = write_lines(tmp_path / "pred.txt", [p for _ in ("shop", "second") for _, p in CRAFTED])
    inline = evaluate(shop, gold, pred, workers=1)
    pooled = evaluate(shop, gold, pred, workers=2)
    assert pooled.timings.workers == 2 and inline.timings.workers == 1

    def verdicts(report: guarded_sqlite.evaluation.EvalReport) -> list[tuple[Any, ...]]:
        return [(r.index, r.status, r.trigger, r.action, r.baseline_multiset, r.guarded_multiset) for r in report.pairs]

    assert verdicts(pooled) == verdicts(inline)
    assert pooled.rules == inline.rules and pooled.n == inline.n == 12


def test_top_level_evaluate_and_json_report(tmp_path: Path, shop: Path) -> None:
    gold, pred = write_crafted(tmp_path)
    report = guarded_sqlite.evaluate(shop, gold, pred, workers=1)
    data = json.loads(report.to_json())
    for key in ("n", "baseline", "guarded", "flagged", "rules", "detector", "timings", "gold_failures", "pairs"):
        assert key in data
    for side in ("baseline", "guarded"):
        assert {"set_ex", "multiset_ex", "gap_pp"} <= set(data[side])
    assert data["rules"]["P1"]["break"] == 1
    assert {"wall_s", "queries", "detect_us_median", "patch_ms_median"} <= set(data["timings"])
    pair = data["pairs"][1]
    assert {
        "baseline_set",
        "baseline_multiset",
        "guarded_set",
        "guarded_multiset",
        "trigger",
        "action",
        "final_sql",
    } <= set(pair)
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.n = 3  # type: ignore[misc]


def test_difficulty_breakdown_from_bird_gold(tmp_path: Path, shop: Path) -> None:
    gold = tmp_path / "dev.json"
    gold.write_text(
        json.dumps(
            [
                {"SQL": "SELECT name FROM customers", "db_id": "shop", "difficulty": "moderate"},
                {"SQL": "SELECT name FROM customers", "db_id": "shop", "difficulty": "simple"},
                {"SQL": "SELECT name FROM customers", "db_id": "shop", "difficulty": "simple"},
            ]
        )
    )
    pred = tmp_path / "pred.json"
    pred.write_text(
        json.dumps({str(i): f"{sql}\t----- bird -----\tshop" for i, sql in enumerate([JOIN, JOIN, "SELECT 1"])})
    )
    report = evaluate(shop, gold, pred, workers=1)
    strata = {s.difficulty: s for s in report.difficulty}
    assert [s.difficulty for s in report.difficulty] == ["simple", "moderate"]
    assert (
        strata["simple"].baseline.n,
        strata["simple"].baseline.multiset_correct,
        strata["simple"].guarded.multiset_correct,
    ) == (2, 0, 1)
    assert (strata["moderate"].baseline.set_correct, strata["moderate"].guarded.multiset_correct) == (1, 1)


# --------------------------------------------------------------------------------------------------
# Sweep and cross-validation


def _sweep_fixture(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Three databases whose P1/P2 outcomes depend on the threshold in a known way.

    Each pair selects ``v`` for one group ``g`` of table ``t``; the group's multiplicities set the
    dup_ratio. 'fix' pairs have DISTINCT gold (P1 fixes them), 'break' pairs have the prediction itself
    as gold (P1 breaks them). Per database, P1 pairs as (dup_ratio, effect):
      A: (0.9, fix) (0.7, fix) (0.5, break)    B: (0.75, fix) (0.5, break)    C: (0.5, fix) (0.9, break)
    and P2 pairs: A: DISTINCT over 11 rows / 10 distinct (ratio 1/11), gold wants all 11 (fix at
    tau_remove >= 0.10); B: DISTINCT over 6 rows / 5 distinct (ratio 1/6), gold DISTINCT (break at >= 0.2).
    """
    groups = {
        "A": {"f90": [1] * 10, "f70": [1] * 8 + [2, 3], "b50": [1, 1], "p2fix": [*list(range(10)), 0]},
        "B": {"f75": [1] * 4, "b50": [5, 5, 6, 6], "p2break": [*list(range(5)), 0]},
        "C": {"f50": [1, 1, 2, 2], "b90": [7] * 10},
    }
    root = tmp_path / "dbs"
    gold_items, preds = [], []
    for db_id, by_group in groups.items():
        inserts = "".join(f"INSERT INTO t VALUES ('{g}', {v});" for g, values in by_group.items() for v in values)
        make_db(root, db_id, "CREATE TABLE t (g TEXT, v INTEGER);" + inserts)
        for g in by_group:
            pred = f"SELECT v FROM t WHERE g = '{g}'"
            if g.startswith("p2"):
                pred = f"SELECT DISTINCT v FROM t WHERE g = '{g}'"
                gold = f"SELECT v FROM t WHERE g = '{g}'" if g == "p2fix" else pred
            else:
                gold = f"SELECT DISTINCT v FROM t WHERE g = '{g}'" if g.startswith("f") else pred
            gold_items.append((gold, db_id))
            preds.append(pred)
    return root, write_tsv_gold(tmp_path / "gold.sql", gold_items), write_lines(tmp_path / "pred.txt", preds)


def test_sweep_tables_and_leave_one_database_out_cv(tmp_path: Path) -> None:
    root, gold, pred = _sweep_fixture(tmp_path)
    report = sweep(root, gold, pred, workers=1, p1_taus=[0.0, 0.6, 0.8, 0.95], p2_taus=[0.05, 0.1, 0.2])

    p1 = {row.tau: (row.fired, row.fix, row.break_, row.net) for row in report.p1}
    assert p1 == {0.0: (7, 4, 3, 1), 0.6: (4, 3, 1, 2), 0.8: (2, 1, 1, 0), 0.95: (0, 0, 0, 0)}
    # Per-database nets at (0, 0.6, 0.8, 0.95): A 1,2,1,0; B 0,1,0,0; C 0,-1,-1,0.
    folds = {f.db_id: (f.tau, f.train_net, f.net) for f in report.p1_cv.folds}
    assert folds == {
        "A": (0.95, 0, 0),  # B+C: 0,0,-1,0 -> ties at 0, 0.6, 0.95 go to the strictest, 0.95
        "B": (0.6, 1, 1),  # A+C: 1,1,0,0 -> tie 0 / 0.6 -> 0.6
        "C": (0.6, 3, -1),  # A+B: 1,3,1,0 -> 0.6
    }
    assert (report.p1_cv.held_out_net, report.p1_cv.nonnegative_folds, report.p1_cv.worst_fold_net) == (0, 2, -1)
    assert report.p1_cv.no_threshold_net == 1

    p2 = {row.tau: (row.fired, row.fix, row.break_) for row in report.p2}
    assert p2 == {0.05: (0, 0, 0), 0.1: (1, 1, 0), 0.2: (2, 1, 1)}
    # P2 is stricter at *lower* tau_remove, so its ties go to the smaller threshold.
    assert {f.db_id: (f.tau, f.net) for f in report.p2_cv.folds} == {"A": (0.05, 0), "B": (0.1, 0)}
    assert report.p2_cv.no_threshold_net == 0

    # The outcomes behind the tables are in the report, one per (rule, threshold, rewritten pair).
    assert sum(1 for o in report.outcomes if (o.rule, o.tau) == ("P1", 0.0)) == 7
    assert {(o.tau, o.index, o.multiset_ex) for o in report.outcomes if o.rule == "P2"} == {
        (0.1, 3, True),
        (0.2, 3, True),
        (0.2, 6, False),
    }
    # Only predictions that could change were replayed: the 7 with duplicates, the 2 with DISTINCT.
    assert (report.p1_candidates, report.p2_candidates) == (7, 2)
    # The embedded evaluation is the default operating point (P1 at 0.8, P2 at 0.1).
    assert report.evaluation.rules["P1"].fired == 2 and report.evaluation.rules["P2"].fired == 1
    assert json.loads(report.to_json())["p1"][0]["break"] == 3


def test_sweep_and_cv_pure_functions_on_outcomes() -> None:
    def outcome(db: str, tau: float, fix: bool) -> SweepOutcome:
        return SweepOutcome("P1", tau, 0, db, True, not fix, True, fix)

    outcomes = [outcome("x", 0.1, True), outcome("x", 0.1, True), outcome("y", 0.1, False), outcome("y", 0.5, True)]
    rows = sweep_table(outcomes, [0.1, 0.5, 0.9])
    assert [(r.tau, r.fired, r.fix, r.break_) for r in rows] == [(0.1, 3, 2, 1), (0.5, 1, 1, 0), (0.9, 0, 0, 0)]
    cv = loo_cv(outcomes, [0.1, 0.5, 0.9], "P1")
    # Hold out x: y's nets 0.1:-1, 0.5:+1 -> 0.5; x at 0.5 = 0. Hold out y: x's best is 0.1 (+2); y at 0.1 = -1.
    assert [(f.db_id, f.tau, f.net) for f in cv.folds] == [("x", 0.5, 0), ("y", 0.1, -1)]
    assert cv.held_out_net == -1
    assert loo_cv([], [0.1], "P1").folds == ()


def test_sweep_rejects_thresholds_outside_the_unit_interval(tmp_path: Path, shop: Path) -> None:
    gold, pred = write_crafted(tmp_path)
    with pytest.raises(InputError, match="P1 thresholds must be in"):
        sweep(shop, gold, pred, workers=1, p1_taus=[0.5, 1.5])


def test_sweep_plot_is_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    root, gold, pred = _sweep_fixture(tmp_path)
    png = tmp_path / "net.png"
    report = sweep(root, gold, pred, workers=1, p1_taus=[0.0, 0.5, 0.8], p2_taus=[0.1, 0.2], plot=png)
    assert report.plot == str(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 5000  # a real figure, not an empty canvas


def test_plot_without_matplotlib_says_how_to_install(
    tmp_path: Path, shop: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes "import matplotlib" raise ImportError
    gold, pred = write_crafted(tmp_path)
    with pytest.raises(PlotUnavailable, match=r"pip install 'matplotlib>=3.8' \(the \[plot\] extra\)"):
        sweep(shop, gold, pred, workers=1, plot=tmp_path / "x.png")
    code = main(
        [
            "sweep",
            "--db-root",
            str(shop),
            "--gold",
            str(gold),
            "--pred",
            str(pred),
            "--workers",
            "1",
            "--plot",
            str(tmp_path / "x.png"),
        ]
    )
    assert code == 1
    assert not (tmp_path / "x.png").exists()


# --------------------------------------------------------------------------------------------------
# CLI and progress bar


def test_cli_eval_end_to_end(tmp_path: Path, shop: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gold, pred = write_crafted(tmp_path)
    out = tmp_path / "report.json"
    code = main(
        [
            "eval",
            "--db-root",
            str(shop),
            "--gold",
            str(gold),
            "--pred",
            str(pred),
            "--json",
            str(out),
            "--workers",
            "1",
            "--timeout",
            "2",
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "baseline" in text and "Multiset-EX" in text and "P1" in text and "MBS" in text
    data = json.loads(out.read_text())
    assert data["n"] == 6 and data["timeout_s"] == 2.0
    assert data["guarded"]["multiset_ex"] == pytest.approx(100 * 2 / 6, abs=1e-3)
    assert data["flagged"] == {
        "total": 4,
        "exec_error": 1,
        "empty_result": 1,
        "cartesian_explosion": 2,
        "aggregate_fanout": 0,
    }
    assert [f["index"] for f in data["gold_failures"]] == [5]

    code = main(
        [
            "eval",
            "--db-root",
            str(shop),
            "--gold",
            str(gold),
            "--pred",
            str(pred),
            "--json",
            "-",
            "--workers",
            "1",
            "--guard",
            "observe",
        ]
    )
    assert code == 0
    assert json.loads(capsys.readouterr().out)["guard"] == "observe"


def test_cli_input_errors_exit_2_with_the_line(tmp_path: Path, shop: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gold, _ = write_crafted(tmp_path)
    short = write_lines(tmp_path / "short.txt", [p for _, p in CRAFTED][:-1])
    code = main(["eval", "--db-root", str(shop), "--gold", str(gold), "--pred", str(short), "--workers", "1"])
    assert code == 2
    assert "6 predictions (lines) but the gold has 7 queries; lines 7..7 are missing" in capsys.readouterr().err
    code = main(
        ["eval", "--db-root", str(tmp_path / "nowhere"), "--gold", str(gold), "--pred", str(short), "--workers", "1"]
    )
    assert code == 2
    with pytest.raises(SystemExit) as usage:
        main(["eval", "--db-root", str(shop), "--gold", str(gold), "--pred", str(short), "--timeout", "0"])
    assert usage.value.code == 2


def test_cli_sweep_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, gold, pred = _sweep_fixture(tmp_path)
    out = tmp_path / "sweep.json"
    code = main(
        [
            "sweep",
            "--db-root",
            str(root),
            "--gold",
            str(gold),
            "--pred",
            str(pred),
            "--workers",
            "1",
            "--p1-taus",
            "0,0.6,0.8,0.95",
            "--p2-taus",
            "0.05,0.1,0.2",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "tau_inject" in text and "leave-one-database-out" in text and "held-out net +0" in text
    data = json.loads(out.read_text())
    assert [row["tau"] for row in data["p1"]] == [0.0, 0.6, 0.8, 0.95]
    assert data["p1_cv"]["held_out_net"] == 0 and data["evaluation"]["n"] == 9


def test_cli_demo_still_works(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--db", str(tmp_path / "shop.db")]) == 0
    out = capsys.readouterr().out
    assert "The joins repeated rows: 90 rows came back but only 6 are different" in out
    assert main(["demo", "--db", str(tmp_path / "shop.db"), "--verbose"]) == 0
    assert "cartesian_explosion" in capsys.readouterr().out


def test_progress_bar_draws_only_when_enabled() -> None:
    stream = io.StringIO()
    bar = ProgressBar(3, label="eval", stream=stream, enabled=True, width=6, min_interval=0.0)
    bar.advance(1)
    bar.advance(2)
    bar.close()
    text = stream.getvalue()
    assert text.startswith("\r") and text.endswith("\n")
    assert "eval [######] 3/3 100%" in text
    assert text.count("3/3") == 1  # close() does not redraw a line already on screen
    assert "eval [##....] 1/3" in text
    quiet = io.StringIO()  # not a terminal: no bar by default
    bar = ProgressBar(3, stream=quiet)
    bar.advance(3)
    bar.close()
    assert quiet.getvalue() == ""


def test_progress_bar_reaches_stderr_during_evaluate(
    tmp_path: Path, shop: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gold, pred = write_crafted(tmp_path)
    evaluate(shop, gold, pred, workers=1, progress=True)
    err = capsys.readouterr().err
    assert "7/7 100%" in err
