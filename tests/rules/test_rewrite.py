"""Fixture tests for the pure DISTINCT rewrites (P1 inject, P2 remove), including no-op cases."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest

from guarded_sqlite._analysis.rewrite import inject_distinct, normalise_literals, remove_distinct

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
NORMALISE = load_cases("normalise_literals.sql")


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


# --------------------------------------------------------------------------------------------------
# normalise_literals: what a patch's INFO log record shows of the SQL (p15)


@pytest.mark.parametrize("case", NORMALISE, ids=_ids(NORMALISE))
def test_normalise_literals(case: Case) -> None:
    """p15: each fixture's literals become ``?``; parameters, names, comments and layout stay."""
    assert normalise_literals(case.sql) == case.expected


def test_normalise_literals_fixtures_hold_no_ops_and_fallbacks() -> None:
    """p15: the fixture file covers unchanged texts and the fallback for text that does not tokenize."""
    assert any(case.sql == case.expected for case in NORMALISE)
    assert any((case.expected or "").startswith("<SQL not shown: ") for case in NORMALISE)


OTHER_DIALECTS = [
    # Prefixed, dollar-quoted, bit and unicode strings; $1 stays.
    (
        "postgres",
        "SELECT a FROM t WHERE s = E'it\\'s' OR d = $$x$$ OR b = B'101' OR u = U&'d' OR n = N'nat' OR p = $1",
        "SELECT a FROM t WHERE s = ? OR d = ? OR b = ? OR u = ? OR n = ? OR p = $1",
    ),
    # psycopg's %s and %(name)s parameters stay; a cast keeps its type.
    (
        "postgres",
        "SELECT a FROM t WHERE x = %s AND y = %(name)s AND day = '2020-01-01'::date",
        "SELECT a FROM t WHERE x = %s AND y = %(name)s AND day = ?::date",
    ),
    # In MySQL double quotes make a string, not a name; a charset introducer stays.
    (
        "mysql",
        "SELECT a FROM t WHERE s = \"secret\" AND b = b'01' AND c = _utf8mb4'abc'",
        "SELECT a FROM t WHERE s = ? AND b = ? AND c = _utf8mb4?",
    ),
    (
        "duckdb",
        "SELECT a FROM t WHERE x = ? AND y = $1 AND n = 1_000 AND s = 'x'",
        "SELECT a FROM t WHERE x = ? AND y = $1 AND n = ? AND s = ?",
    ),
]


@pytest.mark.parametrize(("dialect", "sql", "expected"), OTHER_DIALECTS)
def test_normalise_literals_in_other_dialects(dialect: str, sql: str, expected: str) -> None:
    """p15: literals are what the dialect's own tokenizer calls literals."""
    assert normalise_literals(sql, dialect) == expected


def test_normalise_literals_never_shows_text_it_cannot_read() -> None:
    """p15: an unknown dialect falls back like a tokenizer error, without the text or an excerpt of it."""
    assert normalise_literals("SELECT 'secret'", "no such dialect") == "<SQL not shown: 15 characters>"
