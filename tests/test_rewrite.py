"""Fixture tests for the pure DISTINCT rewrites (P1 inject, P2 remove), including no-op cases."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest

from guarded_sqlite.rewrite import inject_distinct, remove_distinct

FIXTURES = Path(__file__).parent / "fixtures"


class Case(NamedTuple):
    sql: str
    expected: str | None  # rewritten SQL, or None for a no-op case
    reason_fragment: str | None
    line: int


def load_cases(name: str) -> list[Case]:
    """Parse a fixture file: input lines, then '=> expected' or '=! reason fragment'."""
    cases: list[Case] = []
    block: list[str] = []
    start = 0
    lines = (FIXTURES / name).read_text().splitlines()
    for number, line in enumerate([*lines, ""], start=1):
        if line.strip() == "":
            if block:
                cases.append(_case(block, start))
                block = []
            continue
        if not block and line.startswith("-- "):
            continue
        if not block:
            start = number
        block.append(line)
    return cases


def _case(block: list[str], line: int) -> Case:
    for index, text in enumerate(block):
        if text.startswith("=> "):
            expected = "\n".join([text[3:], *block[index + 1 :]])
            return Case("\n".join(block[:index]), expected, None, line)
        if text.startswith("=! "):
            return Case("\n".join(block[:index]), None, text[3:], line)
    raise ValueError(f"fixture case at line {line} has no '=>' or '=!' line")


def _ids(cases: list[Case]) -> list[str]:
    return [f"line{case.line}" for case in cases]


INJECT = load_cases("inject_distinct.sql")
REMOVE = load_cases("remove_distinct.sql")


def test_fixture_files_hold_both_kinds_of_case() -> None:
    for cases in (INJECT, REMOVE):
        assert any(c.expected for c in cases) and any(c.expected is None for c in cases)


@pytest.mark.parametrize("case", INJECT, ids=_ids(INJECT))
def test_inject_distinct(case: Case) -> None:
    result = inject_distinct(case.sql)
    if case.expected is not None:
        assert result.sql == case.expected
    else:
        assert result.sql is None
        assert case.reason_fragment is not None and case.reason_fragment in result.reason


@pytest.mark.parametrize("case", REMOVE, ids=_ids(REMOVE))
def test_remove_distinct(case: Case) -> None:
    result = remove_distinct(case.sql)
    if case.expected is not None:
        assert result.sql == case.expected
    else:
        assert result.sql is None
        assert case.reason_fragment is not None and case.reason_fragment in result.reason


@pytest.mark.parametrize("case", [c for c in INJECT if c.expected], ids=_ids([c for c in INJECT if c.expected]))
def test_removal_undoes_injection(case: Case) -> None:
    """Only the keyword moves: where P2 applies to P1's output, it gives back the input byte for byte."""
    injected = inject_distinct(case.sql).sql
    assert injected is not None
    removed = remove_distinct(injected)
    if "OVER" in case.sql:  # a window aggregate: P2's no-aggregate safeguard keeps the DISTINCT
        assert removed.sql is None and "aggregate" in removed.reason
    else:
        assert removed.sql == case.sql


def test_postgres_parenthesised_statement_is_patched_inside_the_brackets() -> None:
    assert inject_distinct("(SELECT a FROM t JOIN u ON 1)", "postgres").sql == "(SELECT DISTINCT a FROM t JOIN u ON 1)"
    assert "LIMIT" in inject_distinct("((SELECT a FROM t) LIMIT 1)", "postgres").reason


def test_writes_hidden_in_a_postgres_cte_are_refused() -> None:
    result = inject_distinct("WITH d AS (DELETE FROM t RETURNING *) SELECT a FROM d JOIN u ON 1", "postgres")
    assert result.sql is None and "write" in result.reason


def test_select_into_and_row_locks_are_refused() -> None:
    assert "write" in inject_distinct("SELECT a INTO x FROM t JOIN u ON 1", "postgres").reason
    assert "write" in inject_distinct("SELECT a FROM t JOIN u ON 1 FOR UPDATE", "postgres").reason


def test_keyword_case_follows_the_callers_select() -> None:
    assert inject_distinct("select a from t join u on 1").sql == "select distinct a from t join u on 1"
    assert inject_distinct("Select a from t join u on 1").sql == "Select DISTINCT a from t join u on 1"
