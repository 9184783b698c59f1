"""The join-copy count as pure functions (``guarded_sqlite._rules.copies``) and the check's SQL
(``rewrite.append_columns``): fixtures with their no-op cases."""

from __future__ import annotations

import sqlite3
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guarded_sqlite._analysis.rewrite import append_columns
from guarded_sqlite._rules.copies import CopyCount, count_copies, plain_values, same_multiset, without_copies

# (statement's rows, check's rows: values then identity, copies, kept per value)
COUNTS: list[tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], int, dict[tuple[Any, ...], int]]] = [
    # one customer repeated by three orders: two copies
    ([("Ana",)] * 3, [("Ana", 1)] * 3, 2, {("Ana",): 1}),
    # two customers of the same name, one order each: value repeats, no copy (no-op)
    ([("Ana",)] * 2, [("Ana", 1), ("Ana", 2)], 0, {("Ana",): 2}),
    # both at once: three rows, two customers
    ([("Ana",)] * 3, [("Ana", 1), ("Ana", 2), ("Ana", 1)], 1, {("Ana",): 2}),
    # identities of two projected tables: (c, p) combinations
    ([("x", "y")] * 3, [("x", "y", 1, 7), ("x", "y", 1, 8), ("x", "y", 1, 7)], 1, {("x", "y"): 2}),
    # an identity NULL throughout (only a NULL-extended table projected) never counts as a copy
    ([(None,)] * 3, [(None, None)] * 3, 0, {(None,): 3}),
    # a partly NULL identity is compared whole: the same customer, no order, repeated twice
    ([("Ana",)] * 3, [("Ana", 1, None), ("Ana", 1, None), ("Ana", 2, None)], 1, {("Ana",): 2}),
    # no repeated row at all (no-op)
    ([("a",), ("b",)], [("b", 2), ("a", 1)], 0, {("a",): 1, ("b",): 1}),
]


@pytest.mark.parametrize(("values", "checked", "copies", "kept"), COUNTS)
def test_count_copies(
    values: list[tuple[Any, ...]], checked: list[tuple[Any, ...]], copies: int, kept: dict[tuple[Any, ...], int]
) -> None:
    count = count_copies(values, checked, width=len(values[0]))
    assert isinstance(count, CopyCount) and (count.kept, count.copies) == (kept, copies)


@pytest.mark.parametrize(
    ("values", "checked", "why"),
    [
        ([("a",)], [("a", 1), ("a", 2)], "returned 2 rows where the statement returned 1"),
        ([("a",), ("a",)], [("a", 1), ("b", 2)], "other rows"),
        ([("a",)], [("a",)], "fewer columns"),
    ],
)
def test_count_copies_refuses_a_check_that_does_not_match(
    values: list[tuple[Any, ...]], checked: list[tuple[Any, ...]], why: str
) -> None:
    result = count_copies(values, checked, width=1)
    assert isinstance(result, str) and why in result


def test_without_copies_keeps_the_first_row_of_each_combination_in_order() -> None:
    rows = ["a1", "b1", "a2", "a3", "b2"]
    values = [("a",), ("b",), ("a",), ("a",), ("b",)]
    checked = [("a", 1), ("b", 7), ("a", 1), ("a", 2), ("b", 7)]
    count = count_copies(values, checked, width=1)
    assert isinstance(count, CopyCount) and count.aligned
    assert count.firsts == [0, 1, 3]  # the first row of each combination, found in the count's one pass
    assert without_copies(rows, values, count, checked, 1) == ["a1", "b1", "a3"]
    # the check in another order (another plan): the same rows by value, first occurrences kept
    count = count_copies(values, list(reversed(checked)), width=1)
    assert isinstance(count, CopyCount) and not count.aligned and count.firsts is None
    assert without_copies(rows, values, count, list(reversed(checked)), 1) == ["a1", "b1", "a2"]
    # nothing to remove: no-op
    distinct = [("a", 1), ("b", 7), ("a", 2), ("a", 3), ("b", 8)]
    count = count_copies(values, distinct, width=1)
    assert isinstance(count, CopyCount) and without_copies(rows, values, count, distinct, 1) == rows
    # a NULL identity is its own row, in either path
    nulls = [("a", None)] * 3 + [("b", 7), ("b", 7)]
    count = count_copies([("a",)] * 3 + [("b",)] * 2, nulls, width=1)
    assert isinstance(count, CopyCount) and count.kept == {("a",): 3, ("b",): 1}
    assert without_copies(["x", "y", "z", "u", "v"], [("a",)] * 3 + [("b",)] * 2, count, nulls, 1) == [
        "x",
        "y",
        "z",
        "u",
    ]


def test_plain_values_reads_tuples_rows_and_mappings_back() -> None:
    con = sqlite3.connect(":memory:")
    con.row_factory = sqlite3.Row
    row = con.execute("SELECT 1 AS a, 'x' AS b").fetchone()
    assert plain_values(row) == (1, "x")
    assert plain_values((1, 2)) == (1, 2)
    assert plain_values({"a": 1, "b": None}) == (1, None)
    assert plain_values(object()) is None  # a factory's object: cannot be read back


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        (
            "SELECT c.city FROM customers c JOIN orders o ON o.customer_id = c.id",
            'SELECT c.city, "c"."rowid" AS "__gs_id0" FROM customers c JOIN orders o ON o.customer_id = c.id',
        ),
        # a comment before FROM stays a comment: the columns go after the last item
        ("SELECT a -- note\nFROM t, u", 'SELECT a, "c"."rowid" AS "__gs_id0" -- note\nFROM t, u'),
        # the outermost FROM, not a subquery's
        (
            "WITH w AS (SELECT 1 AS a FROM z) SELECT (SELECT b FROM q) AS b FROM w, t",
            'WITH w AS (SELECT 1 AS a FROM z) SELECT (SELECT b FROM q) AS b, "c"."rowid" AS "__gs_id0" FROM w, t',
        ),
        ("select * from t join u on 1", 'select *, "c"."rowid" AS "__gs_id0" from t join u on 1'),
    ],
)
def test_append_columns(sql: str, expected: str) -> None:
    assert append_columns(sql, ('"c"."rowid"',)).sql == expected


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("SELECT DISTINCT a FROM t", "already DISTINCT"),
        ("SELECT 1", "FROM"),
        ("INSERT INTO t SELECT a FROM u", "not a SELECT"),
        ("SELECT a FROM t; SELECT b FROM u", "more than one statement"),
    ],
)
def test_append_columns_refuses(sql: str, why: str) -> None:
    result = append_columns(sql, ('"c"."rowid"',))
    assert result.sql is None and why in result.reason


@pytest.mark.parametrize(
    ("rows", "others", "same"),
    [
        ([("a",), ("b",), ("a",)], [("b",), ("a",), ("a",)], True),  # order never counts
        ([("a",), ("b",)], [("a",), ("b",), ("b",)], False),  # one more copy of b
        ([("a",), ("a",)], [("a",), ("b",)], False),  # as many rows, other values
        ([], [], True),  # no-op: nothing on either side
        ([(1,), (None,)], [(None,), (1.0,)], True),  # 1 and 1.0 are one value, as Python compares rows
    ],
)
def test_same_multiset(rows: list[tuple[Any, ...]], others: list[tuple[Any, ...]], same: bool) -> None:
    assert same_multiset(rows, others) is same
    assert same_multiset(others, rows) is same


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["a", "b", None])), max_size=8),
    st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["a", "b", None])), max_size=8),
)
def test_same_multiset_agrees_with_counter_equality(rows: list[Any], others: list[Any]) -> None:
    assert same_multiset(rows, others) is (Counter(rows) == Counter(others))
    assert same_multiset(rows, list(reversed(rows))) is True


def test_same_multiset_refuses_unhashable_values() -> None:
    with pytest.raises(TypeError):
        same_multiset([([1],)], [([1],)])
