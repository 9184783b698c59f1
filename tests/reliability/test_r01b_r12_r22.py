"""Re-execution safety (issue 9), repros r01b, r12 and r22: user functions in P2 and rescue candidates,
the rows a rescue keeps, deeply nested or odd exploding queries.

Each repro in ../shared/repros/reliability/ named here is a test; the design under test is in
tests/reliability/shared.py's docstring.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

import guarded_sqlite
from guarded_sqlite import DupRatioSelector, GuardPolicy
from tests.reliability_helpers import (
    EXPLODE,
    first_occurrence,
    setup,
)

# --- repros r01b, r12, r22 ----------------------------------------------------------------------------


def _counting(con: Any) -> list[Any]:
    """A ``log(tag, x)`` user function on ``con`` that records each call's tag and returns ``x``."""
    calls: list[Any] = []
    con.create_function("log", 2, lambda tag, x: calls.append(tag) or x)
    return calls


def test_r01b_p2_and_rescue_candidates_run_user_functions_as_documented() -> None:
    """r01b (documented difference): P2's re-execution runs a user function once more per row (the
    paper preset), the default preset keeps every DISTINCT as written and runs nothing again, and each
    rescue candidate runs exactly once."""
    sql = "SELECT DISTINCT log('q', name) FROM t"
    raw = setup(sqlite3.connect(":memory:"))
    plain = _counting(raw)
    expected = raw.execute(sql).fetchall()
    for guard, runs in (("paper", 2), ("patch", 1)):
        con = setup(guarded_sqlite.connect(":memory:", guard=guard))
        calls = _counting(con)
        cur = con.execute(sql)
        assert cur.fetchall() == expected and len(calls) == runs * len(plain), (guard, cur.guard_report)
        assert [d.rule for d in cur.guard_report.decisions] == (["P2"] if guard == "paper" else [])
    candidates = [f"SELECT log('c{k}', name) FROM t WHERE id <= {k}" for k in (3, 5, 8)]
    con = setup(guarded_sqlite.connect(":memory:", guard=GuardPolicy(rescue=DupRatioSelector())))
    calls = _counting(con)
    cur = con.execute("SELECT log('s', name) FROM t WHERE 0", candidates=candidates)
    assert cur.guard_report.rescue is not None and cur.guard_report.rescue.chosen_index is not None
    plain.clear()
    for candidate in candidates:
        raw.execute(candidate).fetchall()
    assert sorted(calls) == sorted(plain)  # every candidate once, the chosen one's rows kept


def test_r12_rescue_keeps_candidates_rows_only_within_row_cap() -> None:
    """r12: candidates' rows are kept only while all of them together fit in ``row_cap``; a chosen
    candidate whose rows were let go runs once more, and serves the same rows as sqlite3."""
    setup_sql = "CREATE TABLE n (i INTEGER);" + "".join(f"INSERT INTO n VALUES ({i});" for i in range(40))
    candidates = [
        "SELECT log('a', i / 2) FROM n",  # 40 rows, 20 distinct: kept (40 <= 50)
        "SELECT log('b', i / 2 + 100) FROM n",  # would make 80 > 50: let go
        "SELECT log('c', i) FROM n",  # let go, and the lowest dup_ratio: chosen
    ]
    con = guarded_sqlite.connect(":memory:", guard=GuardPolicy(rescue=DupRatioSelector(), row_cap=50))
    con.executescript(setup_sql)
    calls = _counting(con)
    cur = con.execute("SELECT i FROM n WHERE 0", candidates=candidates)
    rows = cur.fetchall()
    raw = sqlite3.connect(":memory:")
    raw.executescript(setup_sql)
    _counting(raw)
    assert cur.guard_report.rescue.chosen_index == 2 and rows == raw.execute(candidates[2]).fetchall()
    assert (calls.count("a"), calls.count("b"), calls.count("c")) == (40, 40, 80)


R22_CASES = {
    **{f"parens {d}": EXPLODE + " WHERE " + "(" * d + "t.id > 0" + ")" * d for d in (50, 200, 900)},
    **{
        f"subqueries {d}": "SELECT name FROM "
        + "(SELECT * FROM " * d
        + "(SELECT t.name FROM t JOIN u ON u.t_id = t.id)"
        + ")" * d
        for d in (50, 200)
    },
    "CASE chain 900": EXPLODE.replace(
        "SELECT t.name", "SELECT " + "CASE WHEN 0 THEN 0 ELSE " * 900 + "t.name" + " END" * 900
    ),
    "1 MB literal": EXPLODE.replace("SELECT t.name", "SELECT t.name, '" + "x" * 1_000_000 + "'"),
    "unicode identifier": 'SELECT t."naïme😀" FROM (SELECT name AS "naïme😀", id FROM t) t JOIN u ON u.t_id = t.id',
    "NUL in a value": EXPLODE.replace("SELECT t.name", "SELECT t.name || char(0) || 'x'"),
}


@pytest.mark.parametrize("case", sorted(R22_CASES))
def test_r22_deeply_nested_or_odd_exploding_queries_behave_as_sqlite3(case: str) -> None:
    """r22: deep nesting, long CASE chains, huge literals and odd identifiers in an exploding query:
    the guard raises what sqlite3 raises, or serves sqlite3's rows (de-duplicated where P1 applied),
    and every decision gives a reason that is not an internal error."""
    sql = R22_CASES[case]
    raw = setup(sqlite3.connect(":memory:"))
    con = setup(guarded_sqlite.connect(":memory:", guard="paper"))
    try:
        expected = raw.execute(sql).fetchall()
    except sqlite3.Error as error:
        with pytest.raises(type(error)):
            con.execute(sql).fetchall()
        return
    cur = con.execute(sql)
    rows = cur.fetchall()
    report = cur.guard_report
    assert rows == (first_occurrence(expected) if report.action == "distinct_injected" else expected)
    assert all(d.reason and "internal error" not in d.reason for d in report.decisions), report.decisions
