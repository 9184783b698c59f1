"""Candidate-aware rescue: the LLM judge over real HTTP (loopback), the zero-cost selector, orders,
budgets, and every failure path falling back to a correct, unrescued result.

Tests that call the judge through litellm skip when litellm (the ``[llm]`` extra) is not installed."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import guarded_sqlite
from guarded_sqlite import DupRatioSelector, GuardPolicy, LLMRescue, RescueRequest
from guarded_sqlite.rescue import CandidatePreview, RescueChoice, _import_litellm, build_prompt, parse_answer
from tests.helpers import BROKEN, CANDIDATES, DISTINCT_NAMES, EMPTY, EXPLODING_SQL, GOOD, fill_fanout
from tests.llm_server import Script, chat_server, closed_port_url
from tests.pace import within


def guarded_with(rescue: Any, **policy: Any) -> guarded_sqlite.GuardedConnection:
    con = guarded_sqlite.connect(":memory:", guard=GuardPolicy(rescue=rescue, **policy))
    fill_fanout(con)
    return con


def llm(api_base: str, **kwargs: Any) -> LLMRescue:
    return LLMRescue(model="openai/test-model", api_base=api_base, api_key="x", **kwargs)


# --- the LLM judge through litellm's real client path -------------------------------------------


@pytest.mark.usefixtures("needs_litellm")
def test_llm_choice_over_http_replaces_the_selection() -> None:
    script = Script(answer="1")
    with chat_server(script) as api_base:
        con = guarded_with(llm(api_base, timeout=5))
        cur = con.execute(
            EXPLODING_SQL, candidates=CANDIDATES, question="Which customers ordered?", hint="orders.customer_id"
        )
        rows = cur.fetchall()
    report = cur.guard_report
    assert rows == DISTINCT_NAMES
    assert report.action == "candidate_selected" and report.final_sql == GOOD
    rescue = report.rescue
    assert rescue.chosen_index == 1 and rescue.chosen_sql == GOOD and rescue.fallback_reason is None
    assert rescue.answer == "1" and (rescue.prompt_tokens, rescue.completion_tokens) == (321, 2)
    assert rescue.cost_usd is None  # no price known for this model: never guessed
    assert rescue.latency_ms >= rescue.judge_ms > 0
    (request,) = script.requests
    assert request["temperature"] == 0 and request["max_tokens"] == 64
    prompt = request["messages"][0]["content"]
    for expected in [
        "Which customers ordered?",
        "orders.customer_id",
        "customers(id, name, city)",
        "physical issue (cartesian_explosion)",
        "[2] SQL: " + EMPTY + " Result: EMPTY",
        "[3] SQL: " + BROKEN + " Result: ERROR",
        "(0-4)",
    ]:
        assert expected in prompt
    assert "dup_ratio" not in prompt  # the paper's prompt does not show it


@pytest.mark.usefixtures("needs_litellm")
def test_user_prices_give_a_cost() -> None:
    with chat_server(Script(answer="1")) as api_base:
        con = guarded_with(llm(api_base, input_cost_per_token=1e-6, output_cost_per_token=2e-6))
        rescue = con.execute(EXPLODING_SQL, candidates=CANDIDATES).guard_report.rescue
    assert rescue.cost_usd == pytest.approx(321e-6 + 4e-6)


@pytest.mark.usefixtures("needs_litellm")
def test_dup_ratio_prompt_variant_shows_each_candidates_ratio() -> None:
    script = Script(answer="1")
    with chat_server(script) as api_base:
        guarded_with(llm(api_base, show_dup_ratio=True)).execute(EXPLODING_SQL, candidates=CANDIDATES)
    prompt = script.requests[0]["messages"][0]["content"]
    assert "[0] SQL: " + EXPLODING_SQL in prompt and "dup_ratio=0.83" in prompt and "duplication ratio" in prompt


@pytest.mark.parametrize(
    "answer, reason",
    [("I would pick the second one", "no integer"), ("17", "out of range"), ("", "empty answer")],
)
@pytest.mark.usefixtures("needs_litellm")
def test_unusable_answers_keep_the_patched_selection(answer: str, reason: str) -> None:
    with chat_server(Script(answer=answer)) as api_base:
        cur = guarded_with(llm(api_base)).execute(EXPLODING_SQL, candidates=CANDIDATES)
        rows = cur.fetchall()
    report = cur.guard_report
    assert rows == DISTINCT_NAMES and report.action == "distinct_injected"  # P1 still repairs it
    assert report.rescue.chosen_index is None and reason in report.rescue.fallback_reason


@pytest.mark.usefixtures("needs_litellm")
def test_a_slow_server_times_out_and_falls_back() -> None:
    # The server answers after 30 s (its thread is a daemon: leaving the block does not wait for it), far past
    # any allowance for the 0.5 s timeout's overhead even on a busy machine.
    _import_litellm()  # litellm's import (seconds on a busy machine) is not the rescue's time
    with chat_server(Script(answer="1", delay=30.0)) as api_base:
        started = time.perf_counter()
        cur = guarded_with(llm(api_base, timeout=0.5)).execute(EXPLODING_SQL, candidates=CANDIDATES)
        elapsed = time.perf_counter() - started
    rescue = cur.guard_report.rescue
    assert within(elapsed, 0.5, 2.0), elapsed
    assert (
        rescue.chosen_index is None
        and "LLM call failed" in rescue.fallback_reason
        and "Timeout" in rescue.fallback_reason
    )
    assert cur.fetchall() == DISTINCT_NAMES


@pytest.mark.usefixtures("needs_litellm")
def test_a_server_that_is_down_falls_back() -> None:
    cur = guarded_with(llm(closed_port_url(), timeout=5)).execute(EXPLODING_SQL, candidates=CANDIDATES)
    rescue = cur.guard_report.rescue
    assert rescue.chosen_index is None and "LLM call failed" in rescue.fallback_reason
    assert cur.fetchall() == DISTINCT_NAMES


@pytest.mark.usefixtures("needs_litellm")
def test_a_provider_error_falls_back() -> None:
    with chat_server(Script(status=500)) as api_base:
        cur = guarded_with(llm(api_base)).execute(EXPLODING_SQL, candidates=CANDIDATES)
    assert "LLM call failed" in cur.guard_report.rescue.fallback_reason
    assert cur.guard_report.action == "distinct_injected"


@pytest.mark.usefixtures("needs_litellm")
def test_a_write_candidate_chosen_by_the_judge_is_never_executed() -> None:
    with chat_server(Script(answer="4")) as api_base:
        con = guarded_with(llm(api_base))
        cur = con.execute(EXPLODING_SQL, candidates=CANDIDATES)
    rescue = cur.guard_report.rescue
    assert rescue.chosen_index is None and "not a read-only query" in rescue.fallback_reason
    assert rescue.candidates[4].error == "not a read-only query: never executed"
    assert con.execute("SELECT count(*) FROM orders").fetchone() == (24,)


@pytest.mark.usefixtures("needs_litellm")
def test_mock_response_needs_no_server() -> None:
    rescue = LLMRescue(model="openai/x", completion_kwargs={"mock_response": "Answer: 1"})
    report = guarded_with(rescue).execute(EXPLODING_SQL, candidates=CANDIDATES).guard_report
    assert report.rescue.chosen_index == 1 and report.rescue.answer == "Answer: 1"


# --- when the rescue runs at all -----------------------------------------------------------------


def test_no_rescue_without_a_flag_or_without_candidates() -> None:
    script = Script(answer="1")
    with chat_server(script) as api_base:
        con = guarded_with(llm(api_base))
        healthy = con.execute(GOOD, candidates=CANDIDATES)
        no_candidates = con.execute(EXPLODING_SQL)
    assert healthy.guard_report.rescue is None and healthy.guard_report.action == "none"
    assert no_candidates.guard_report.rescue is None and no_candidates.guard_report.action == "distinct_injected"
    assert script.requests == []


def test_observe_mode_never_rescues() -> None:
    con = guarded_sqlite.connect(":memory:", guard=GuardPolicy(mode="observe", rescue=DupRatioSelector()))
    fill_fanout(con)
    cur = con.execute(EXPLODING_SQL, candidates=CANDIDATES)
    assert len(cur.fetchall()) == 24 and cur.guard_report.rescue is None


def test_candidates_without_a_rescuer_are_reported_and_ignored(guarded) -> None:
    report = guarded.execute(EXPLODING_SQL, candidates=CANDIDATES).guard_report
    assert report.rescue is None and report.action == "distinct_injected"
    assert ("rescue", False) in [(d.rule, d.applied) for d in report.decisions]


def test_empty_result_is_rescued() -> None:
    cur = guarded_with(DupRatioSelector()).execute(EMPTY, candidates=CANDIDATES)
    assert cur.guard_report.trigger == "empty_result" and cur.fetchall() == DISTINCT_NAMES


def test_execution_error_is_rescued_instead_of_raised() -> None:
    cur = guarded_with(DupRatioSelector()).execute(BROKEN, candidates=CANDIDATES)
    report = cur.guard_report
    assert cur.fetchall() == DISTINCT_NAMES and report.trigger == "exec_error" and report.action == "candidate_selected"
    assert report.error == "OperationalError: no such table: no_such_table"


def test_execution_error_with_no_usable_candidate_is_raised_unchanged() -> None:
    cur = guarded_with(DupRatioSelector()).cursor()
    with pytest.raises(sqlite3.OperationalError, match="no such table: no_such_table"):
        cur.execute(BROKEN, candidates=[BROKEN, EMPTY])
    assert cur.guard_report.trigger == "exec_error"
    assert cur.guard_report.rescue.fallback_reason.startswith("no healthy candidate")


def test_a_failed_write_is_never_replaced_by_a_candidate() -> None:
    cur = guarded_with(DupRatioSelector()).cursor()
    with pytest.raises(sqlite3.IntegrityError):
        cur.execute("INSERT INTO customers VALUES (0, 'dup', 'x')", candidates=[GOOD])
    assert cur.guard_report.rescue is None
    assert "not a read-only query" in cur.guard_report.decisions[0].reason


# --- the zero-cost selector, orders, budgets, custom rescuers -----------------------------------


def test_dup_ratio_selector_picks_the_healthiest_candidate() -> None:
    cur = guarded_with(DupRatioSelector()).execute(EXPLODING_SQL, candidates=CANDIDATES)
    assert cur.guard_report.rescue.chosen_index == 1 and cur.guard_report.rescue.cost_usd is None


def _preview(index: int, rows: int | None, unique: int | None, error: str | None = None) -> CandidatePreview:
    return CandidatePreview(index, f"SELECT {index}", rows, unique, (), error, 0.0)


@st.composite
def previews(draw: st.DrawFn) -> list[CandidatePreview]:
    out = []
    for index in range(draw(st.integers(0, 8))):
        if draw(st.booleans()) and draw(st.booleans()):
            out.append(_preview(index, None, None, "OperationalError: x"))
        else:
            rows = draw(st.integers(0, 50))
            out.append(_preview(index, rows, draw(st.integers(min(rows, 1), max(rows, 1))) if rows else 0))
    return out


@settings(max_examples=300, deadline=None)
@given(previews(), st.sampled_from([0.5, 0.8, 0.95]))
def test_selector_property(candidates: list[CandidatePreview], tau: float) -> None:
    """The selector returns the earliest healthy candidate of minimal dup_ratio, or None if none is healthy."""
    request = RescueRequest(_preview(-1, 10, 1), "cartesian_explosion", tuple(candidates), None, None, "", tau)
    choice = DupRatioSelector()(request)
    healthy = [c for c in candidates if c.error is None and c.rows and (c.rows - c.unique_rows) / c.rows < tau]
    if not healthy:
        assert choice.index is None and choice.reason
    else:
        best = min(c.dup_ratio for c in healthy)
        assert choice.index == min(c.index for c in healthy if c.dup_ratio == best)


EXPLODING_CANDIDATE = "SELECT c.name FROM orders AS o JOIN customers AS c ON c.id = o.customer_id"


def test_rescue_first_patches_the_chosen_candidate() -> None:
    # The paper's rule: the candidate (orders looking up their customer) only repeats customer names,
    # which the default preset leaves alone.
    cur = guarded_with(lambda request: 0, provenance="off").execute(EMPTY, candidates=[EXPLODING_CANDIDATE])
    report = cur.guard_report
    assert report.action == "candidate_selected+distinct_injected"
    assert report.final_sql == EXPLODING_CANDIDATE.replace("SELECT", "SELECT DISTINCT", 1)
    assert sorted(cur.fetchall()) == DISTINCT_NAMES


def test_patch_first_lets_the_rescue_overwrite_the_patch() -> None:
    cur = guarded_with(lambda request: 0, order="patch_first").execute(EXPLODING_SQL, candidates=[EXPLODING_CANDIDATE])
    report = cur.guard_report
    assert [d.rule for d in report.decisions] == ["P1"] and report.decisions[0].applied
    assert report.action == "candidate_selected" and report.final_sql == EXPLODING_CANDIDATE
    assert len(cur.fetchall()) == 24  # v1's weakness: the candidate's explosion is served unpatched


def test_rescue_call_budget_stops_rescues() -> None:
    calls: list[RescueRequest] = []

    def count(request: RescueRequest) -> int:
        calls.append(request)
        return 1

    con = guarded_with(count, max_rescues=1)
    first = con.execute(EXPLODING_SQL, candidates=CANDIDATES).guard_report
    second = con.execute(EXPLODING_SQL, candidates=CANDIDATES).guard_report
    assert len(calls) == 1 and first.action == "candidate_selected"
    assert second.rescue is None and second.action == "distinct_injected"
    assert any(d.rule == "rescue" and "budget exhausted" in d.reason for d in second.decisions)


@pytest.mark.usefixtures("needs_litellm")
def test_rescue_spend_budget_stops_rescues() -> None:
    rescue = LLMRescue(
        model="openai/x",
        completion_kwargs={"mock_response": "1"},
        input_cost_per_token=0.01,
        output_cost_per_token=0.01,
    )
    con = guarded_with(rescue, max_rescue_cost=0.05)
    assert con.execute(EXPLODING_SQL, candidates=CANDIDATES).guard_report.rescue.cost_usd > 0.05
    report = con.execute(EXPLODING_SQL, candidates=CANDIDATES).guard_report
    assert report.rescue is None and any("max_rescue_cost" in d.reason for d in report.decisions if d.rule == "rescue")


@pytest.mark.parametrize(
    "rescuer, reason",
    [
        (lambda request: None, "kept the selection"),
        (lambda request: 99, "out of range"),
        (lambda request: True, "not an index"),
        (lambda request: "1", "not an index"),
        (lambda request: 1 / 0, "rescuer raised ZeroDivisionError"),
    ],
)
def test_custom_rescuers_failing_in_any_way_keep_the_selection(rescuer: Any, reason: str) -> None:
    cur = guarded_with(rescuer).execute(EXPLODING_SQL, candidates=CANDIDATES)
    assert cur.fetchall() == DISTINCT_NAMES and cur.guard_report.action == "distinct_injected"
    assert reason in cur.guard_report.rescue.fallback_reason


def test_a_rescuer_may_return_a_choice_with_usage() -> None:
    cur = guarded_with(lambda request: RescueChoice(1, answer="1", prompt_tokens=5, cost_usd=0.25)).execute(
        EXPLODING_SQL, candidates=CANDIDATES
    )
    assert cur.guard_report.rescue.cost_usd == 0.25 and cur.guard_report.rescue.prompt_tokens == 5


def test_slow_candidates_are_interrupted_and_the_callers_progress_handler_restored() -> None:
    slow = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
    con = guarded_with(DupRatioSelector(), rerun_timeout=0.2)
    ticks: list[int] = []
    con.set_progress_handler(lambda: ticks.append(1) or 0, 1)
    started = time.perf_counter()
    cur = con.execute(EMPTY, candidates=[slow, GOOD])
    assert within(time.perf_counter() - started, 0.2, 2.8)  # an endless statement unless interrupted
    previews = cur.guard_report.rescue.candidates
    assert previews[0].error == "OperationalError: interrupted" and cur.guard_report.rescue.chosen_index == 1
    ticks.clear()
    con.execute("SELECT count(*) FROM orders").fetchall()
    assert ticks  # the caller's handler is back in place


def test_candidates_must_be_sql_strings(guarded) -> None:
    with pytest.raises(TypeError, match="candidates"):
        guarded.execute(EXPLODING_SQL, candidates="SELECT 1")


# --- pure helpers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer, count, expected",
    [
        ("3", 5, 3),
        (" 0\n", 1, 0),
        ("Candidate 2 is best", 5, 2),
        ("-1", 5, None),
        ("5", 5, None),
        (None, 5, None),
        ("twelve", 12, None),
        ("11", 12, 11),
    ],
)
def test_parse_answer_takes_the_first_integer_in_range(answer: str | None, count: int, expected: int | None) -> None:
    assert parse_answer(answer, count)[0] == expected


def test_prompt_truncates_long_sql_and_schema() -> None:
    long_sql = "SELECT " + "x, " * 400 + "1"
    request = RescueRequest(
        _preview(-1, 0, 0),
        "empty_result",
        (CandidatePreview(0, long_sql, 0, 0, (), None, 0.0),),
        "q",
        None,
        "s" * 5000,
        0.8,
    )
    prompt = build_prompt(request)
    assert f"[0] SQL: {long_sql[:600]} Result: EMPTY" in prompt
    assert "s" * 1500 in prompt and "s" * 1501 not in prompt
    assert "Respond with ONLY the candidate number (0-0)" in prompt


@pytest.mark.usefixtures("needs_litellm")
def test_litellm_is_imported_only_when_an_llm_rescue_runs() -> None:
    script = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parents[2])!r})
import guarded_sqlite
from tests.helpers import fill_fanout, EXPLODING_SQL
con = guarded_sqlite.connect(":memory:", guard=guarded_sqlite.GuardPolicy(
    rescue=guarded_sqlite.LLMRescue(model="openai/x", completion_kwargs={{"mock_response": "0"}})))
fill_fanout(con)
con.execute("SELECT * FROM customers", candidates=["SELECT 1"]).fetchall()
assert "litellm" not in sys.modules
con.execute(EXPLODING_SQL, candidates=["SELECT 1"]).fetchall()
assert "litellm" in sys.modules
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
