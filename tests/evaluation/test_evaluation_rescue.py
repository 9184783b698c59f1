"""Candidate-aware rescue in the evaluation toolkit: ``--candidates``, ``--order``, ``--rescue``.

Small SQLite databases generated in ``tmp_path``, SQLite engine only, ``workers=1``; the LLM judge is
litellm's ``mock_response``, so nothing touches the network.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from guarded_sqlite import DupRatioSelector, LLMRescue
from guarded_sqlite.cli.commands import main
from guarded_sqlite.evaluation import evaluate
from guarded_sqlite.evaluation.loaders import InputError, load_pairs
from guarded_sqlite.evaluation.metrics import fallback_prefix
from guarded_sqlite.rescue import RescueChoice, RescueRequest

JOIN = "SELECT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id"
"""24 rows, 4 distinct: flagged cartesian_explosion."""

GOOD = "SELECT name FROM customers"
JOIN2 = "SELECT c.name, c.id FROM customers AS c JOIN orders AS o ON o.customer_id = c.id"
COUNT = "SELECT count(*) FROM orders"


def make_shop(root: Path) -> Path:
    path = root / "shop" / "shop.sqlite"
    path.parent.mkdir(parents=True)
    con = sqlite3.connect(path)
    script = [
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);",
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, amount INTEGER);",
    ]
    script += [f"INSERT INTO customers VALUES ({i}, 'name{i}');" for i in range(4)]
    script += [f"INSERT INTO orders VALUES ({c * 6 + k}, {c}, {10 * k});" for c in range(4) for k in range(6)]
    con.executescript("BEGIN;" + "\n".join(script) + "COMMIT;")
    con.close()
    return root


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def bird_gold(path: Path, sqls: list[str]) -> Path:
    return write_json(
        path,
        [
            {"SQL": sql, "db_id": "shop", "question": f"question {i}", "evidence": f"hint {i}", "difficulty": "simple"}
            for i, sql in enumerate(sqls)
        ],
    )


@pytest.fixture()
def shop(tmp_path: Path) -> Path:
    return make_shop(tmp_path / "dbs")


def test_dup_ratio_selector_picks_the_correct_candidate_and_counts_the_fix(shop: Path, tmp_path: Path) -> None:
    gold = bird_gold(tmp_path / "gold.json", [GOOD, COUNT, GOOD])
    pred = write_json(tmp_path / "pred.json", [JOIN, COUNT, JOIN])
    # Pair 0: the right query is among the candidates; pair 1: unflagged; pair 2: no healthy candidate.
    candidates = write_json(tmp_path / "cands.json", {"0": [JOIN, GOOD], "1": [], "2": [JOIN]})
    report = evaluate(shop, gold, pred, workers=1, progress=False, candidates=candidates)

    first, second, third = report.pairs
    assert first.action == "candidate_selected"
    assert first.rescue_chosen_index == 1 and first.rescue_fallback is None
    assert first.final_sql == GOOD
    assert not first.baseline_multiset and first.guarded_multiset
    assert second.candidates == 0 and not second.rescue_ran and second.rescue_chosen_index is None
    assert third.rescue_ran and third.rescue_chosen_index is None
    assert third.rescue_fallback is not None and third.rescue_fallback.startswith("no healthy candidate")

    r = report.rescue
    assert r is not None
    assert (r.rescuer, r.order) == ("DupRatioSelector", "rescue_first")
    assert (r.pairs_with_candidates, r.rescues_run, r.candidate_chosen, r.fallbacks) == (2, 2, 1, 1)
    assert r.fallback_reasons == {"no healthy candidate": 1}
    assert (r.multiset_fix, r.multiset_break, r.set_fix, r.set_break) == (1, 0, 0, 0)
    assert r.cost_usd == 0.0 and r.cost_unknown == 0
    assert r.latency_ms_median is not None and r.latency_ms_median >= 0
    assert report.inputs["candidates"] == str(candidates)


def test_without_candidates_there_is_no_rescue_section(shop: Path, tmp_path: Path) -> None:
    gold = bird_gold(tmp_path / "gold.json", [GOOD])
    report = evaluate(shop, gold, [JOIN], workers=1, progress=False)
    assert report.rescue is None
    assert report.pairs[0].action == "distinct_injected"
    with pytest.raises(InputError, match="only apply with"):
        evaluate(shop, gold, [JOIN], workers=1, progress=False, order="patch_first")


def test_question_and_evidence_reach_the_rescuer(shop: Path, tmp_path: Path) -> None:
    seen: list[tuple[Any, Any, int]] = []

    def rescuer(request: RescueRequest) -> RescueChoice:
        seen.append((request.question, request.hint, len(request.candidates)))
        return RescueChoice(None, reason="declined by test")

    gold = bird_gold(tmp_path / "gold.json", [GOOD, GOOD])
    report = evaluate(
        shop, gold, [COUNT, JOIN], workers=1, progress=False, candidates=[[], [GOOD, JOIN]], rescue=rescuer
    )
    assert seen == [("question 1", "hint 1", 2)]
    assert report.pairs[1].rescue_fallback == "declined by test"
    # The selection was kept, and P1 then patched it (rescue_first).
    assert report.pairs[1].action == "distinct_injected"
    assert report.rescue is not None and report.rescue.fallback_reasons == {"declined by test": 1}


def test_rescue_first_and_patch_first_differ(shop: Path, tmp_path: Path) -> None:
    # The judge picks candidate 0, itself an explosion: rescue_first patches it after choosing it,
    # patch_first patches the selection and then serves the candidate unpatched.
    judge = LLMRescue(model="openai/x", completion_kwargs={"mock_response": "0"})
    gold = bird_gold(
        tmp_path / "gold.json",
        ["SELECT DISTINCT c.name, c.id FROM customers AS c JOIN orders AS o ON o.customer_id = c.id"],
    )
    candidates = {0: [JOIN2, GOOD]}
    first = evaluate(shop, gold, [JOIN], workers=1, progress=False, candidates=candidates, rescue=judge)
    patch = evaluate(
        shop, gold, [JOIN], workers=1, progress=False, candidates=candidates, rescue=judge, order="patch_first"
    )
    assert first.pairs[0].action == "candidate_selected+distinct_injected"
    assert patch.pairs[0].action == "candidate_selected"
    assert first.pairs[0].rescue_chosen_index == patch.pairs[0].rescue_chosen_index == 0
    assert first.pairs[0].guarded_multiset and not patch.pairs[0].guarded_multiset
    assert patch.pairs[0].guarded_set  # same set, 24 rows
    assert first.rescue is not None and patch.rescue is not None
    assert (first.rescue.order, patch.rescue.order) == ("rescue_first", "patch_first")
    assert (first.rescue.multiset_fix, patch.rescue.multiset_fix) == (1, 0)
    assert (first.rescue.set_fix, patch.rescue.set_fix) == (1, 1)


def test_llm_rescue_through_evaluate(shop: Path, tmp_path: Path) -> None:
    judge = LLMRescue(model="openai/x", completion_kwargs={"mock_response": "1"})
    gold = bird_gold(tmp_path / "gold.json", [GOOD])
    report = evaluate(shop, gold, [JOIN], workers=1, progress=False, candidates=[[JOIN2, GOOD]], rescue=judge)
    pair = report.pairs[0]
    assert pair.action == "candidate_selected" and pair.rescue_chosen_index == 1 and pair.guarded_multiset
    r = report.rescue
    assert r is not None and r.rescuer == "LLMRescue(openai/x)"
    assert (r.rescues_run, r.candidate_chosen, r.multiset_fix) == (1, 1, 1)
    assert r.prompt_tokens > 0 and r.completion_tokens > 0
    # openai/x has no price: its cost is unknown, counted and left out of the sum.
    assert pair.rescue_cost_usd is None
    assert (r.cost_usd, r.cost_unknown) == (0.0, 1) and isinstance(r.cost_usd, float)


def test_llm_options_need_a_model(shop: Path, tmp_path: Path) -> None:
    gold = bird_gold(tmp_path / "gold.json", [GOOD])
    with pytest.raises(InputError, match="--llm-model"):
        evaluate(shop, gold, [JOIN], workers=1, progress=False, candidates=[[GOOD]], rescue="llm")
    with pytest.raises(InputError, match="rescue must be"):
        evaluate(shop, gold, [JOIN], workers=1, progress=False, candidates=[[GOOD]], rescue="judge")
    with pytest.raises(InputError, match="order must be"):
        evaluate(shop, gold, [JOIN], workers=1, progress=False, candidates=[[GOOD]], order="sideways")


def test_dropped_candidate_index_maps_back_to_the_file(shop: Path, tmp_path: Path) -> None:
    # An empty candidate is kept (it fails to run, so it is never healthy); indexes are the file's.
    gold = bird_gold(tmp_path / "gold.json", [GOOD])
    report = evaluate(
        shop, gold, [JOIN], workers=1, progress=False, candidates=[["", JOIN, GOOD]], rescue=DupRatioSelector()
    )
    assert report.pairs[0].rescue_chosen_index == 2


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"5": [GOOD]}, "index 5 has no gold query"),
        ({"x": [GOOD]}, "key 'x' is not an index"),
        ({"0": GOOD}, "index 0 is a str, not a list of SQL strings"),
        ({"0": [GOOD, 3]}, "candidate 1 is a int, not an SQL string"),
        ([[GOOD], [GOOD], [GOOD]], "3 candidate lists but the gold has 2"),
        ("SELECT 1", "must be a list or an object"),
    ],
)
def test_bad_candidates_file_exits_2(
    shop: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], data: Any, message: str
) -> None:
    gold = bird_gold(tmp_path / "gold.json", [GOOD, COUNT])
    pred = write_json(tmp_path / "pred.json", [JOIN, COUNT])
    cands = write_json(tmp_path / "cands.json", data)
    code = main(
        [
            "eval",
            "--db-root",
            str(shop),
            "--gold",
            str(gold),
            "--pred",
            str(pred),
            "--workers",
            "1",
            "--candidates",
            str(cands),
        ]
    )
    assert code == 2
    assert message in capsys.readouterr().err


def test_cli_rescue_options_without_candidates_exit_2(
    shop: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gold = bird_gold(tmp_path / "gold.json", [GOOD])
    pred = write_json(tmp_path / "pred.json", [JOIN])
    args = ["eval", "--db-root", str(shop), "--gold", str(gold), "--pred", str(pred), "--workers", "1"]
    assert main([*args, "--order", "patch_first"]) == 2
    assert "only apply with --candidates" in capsys.readouterr().err
    cands = write_json(tmp_path / "cands.json", [[GOOD]])
    assert main([*args, "--candidates", str(cands), "--rescue", "llm"]) == 2
    assert "--llm-model" in capsys.readouterr().err


def test_cli_json_and_table_report_rescue(shop: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gold = bird_gold(tmp_path / "gold.json", [GOOD, COUNT])
    pred = write_json(tmp_path / "pred.json", [JOIN, COUNT])
    cands = write_json(tmp_path / "cands.json", {"0": [JOIN, GOOD]})
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
            "--workers",
            "1",
            "--candidates",
            str(cands),
            "--order",
            "patch_first",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "Rescue (DupRatioSelector, order=patch_first)" in text
    data = json.loads(out.read_text(encoding="utf-8"))
    assert set(data["rescue"]) == {
        "rescuer",
        "order",
        "pairs_with_candidates",
        "candidates_dropped",
        "rescues_run",
        "candidate_chosen",
        "fallbacks",
        "fallback_reasons",
        "multiset_fix",
        "multiset_break",
        "set_fix",
        "set_break",
        "cost_usd",
        "cost_unknown",
        "prompt_tokens",
        "completion_tokens",
        "latency_ms_median",
    }
    assert data["rescue"]["candidate_chosen"] == 1 and data["rescue"]["multiset_fix"] == 1
    assert data["pairs"][0]["rescue_chosen_index"] == 1 and data["pairs"][0]["rescue_fallback"] is None
    assert "rescue_chosen_index" in data["pairs"][1] and data["pairs"][1]["rescue_chosen_index"] is None


def test_load_pairs_and_fallback_prefix() -> None:
    pairs = load_pairs([(GOOD, "shop"), (COUNT, "shop")], [JOIN, COUNT], {1: (GOOD, JOIN)})
    assert [p.candidates for p in pairs] == [(), (GOOD, JOIN)]
    assert fallback_prefix("LLM call failed: Timeout: read timed out") == "LLM call failed"
    assert fallback_prefix("answer 7 is out of range 0-2") == "answer N is out of range N-N"
    assert fallback_prefix("no integer in the answer 'maybe'") == "no integer in the answer"
    assert fallback_prefix("candidate 2 cannot serve rows: OperationalError") == "candidate N cannot serve rows"
