"""``con.guard_scope(guard)``: another policy for one thread's statements inside a block, restored on exit."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from typing import Any

import pytest

import guarded_sqlite
from guarded_sqlite import GuardPolicy, GuardReport
from tests.helpers import EXPLODING_SQL, fill_fanout

Opener = Callable[..., Any]


def _connect(guard: Any = None) -> Any:
    con = guarded_sqlite.connect(":memory:", guard=guard, check_same_thread=False)
    fill_fanout(con)
    return con


def _wrap(guard: Any = None) -> Any:
    con = guarded_sqlite.wrap(sqlite3.connect(":memory:", check_same_thread=False), guard=guard)
    fill_fanout(con)
    return con


@pytest.fixture(params=[_connect, _wrap], ids=["connect", "wrap"])
def opener(request: pytest.FixtureRequest) -> Opener:
    return request.param  # type: ignore[no-any-return]


def test_a_scope_applies_its_policy_inside_and_the_connections_after(opener: Opener) -> None:
    con = opener()
    cursor = con.cursor()  # made before the block: the scope is the connection's, not the cursor's
    with con.guard_scope("off"):
        inside = cursor.execute(EXPLODING_SQL)
        assert len(inside.fetchall()) == 24 and inside.guard_report.mode == "off"
        with con.guard_scope("observe"):  # nested: the innermost wins
            report = con.execute(EXPLODING_SQL).guard_report
            assert (report.mode, report.trigger, report.action) == ("observe", "cartesian_explosion", "none")
        assert con.execute(EXPLODING_SQL).guard_report.mode == "off"
    after = cursor.execute(EXPLODING_SQL)
    assert len(after.fetchall()) == 4 and after.guard_report.action == "distinct_injected"
    assert con.guard_policy == GuardPolicy()


def test_a_scope_is_restored_when_the_block_raises(opener: Opener) -> None:
    con = opener()
    with pytest.raises(ZeroDivisionError), con.guard_scope("observe"):
        assert con.execute(EXPLODING_SQL).guard_report.mode == "observe"
        1 / 0  # noqa: B018
    assert con.execute(EXPLODING_SQL).guard_report.action == "distinct_injected"


def test_a_scope_takes_a_policy_with_its_own_thresholds(opener: Opener) -> None:
    """Below tau_inject: the default leaves a 50% duplication alone, text_to_sql at a lower threshold
    repairs it (amplification), only inside the block."""
    con = opener()
    sql = "SELECT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id WHERE o.amount < 20"
    assert con.execute(sql).guard_report.action == "none"
    with con.guard_scope(GuardPolicy.text_to_sql(tau_amplified=0.3)):
        report = con.execute(sql).guard_report
        assert report.action == "distinct_injected" and report.dup_ratio == 0.5
    assert con.execute(sql).guard_report.action == "none"


def test_a_scope_with_a_sink_delivers_only_inside(opener: Opener) -> None:
    seen: list[GuardReport] = []
    con = opener()
    con.execute("SELECT 1")
    with con.guard_scope(GuardPolicy(on_report=seen.append)):
        con.execute(EXPLODING_SQL)
        con.executemany("INSERT INTO customers (name) VALUES (?)", [("x",)])
    con.execute("SELECT 2")
    assert [report.sql for report in seen] == [EXPLODING_SQL, "INSERT INTO customers (name) VALUES (?)"]


def test_a_scope_in_one_thread_leaves_other_threads_on_the_connections_policy(opener: Opener) -> None:
    con = opener()
    inside = threading.Event()
    checked = threading.Event()
    modes: dict[str, str] = {}

    def scoped() -> None:
        with con.guard_scope("off"):
            inside.set()
            checked.wait(10)
            modes["scoped"] = con.execute(EXPLODING_SQL).guard_report.mode

    worker = threading.Thread(target=scoped)
    worker.start()
    assert inside.wait(10)
    report = con.execute(EXPLODING_SQL).guard_report  # this thread, while the other is in its block
    modes["other"] = report.mode
    checked.set()
    worker.join(10)
    assert modes == {"scoped": "off", "other": "patch"} and report.action == "distinct_injected"


def test_scopes_of_two_connections_are_independent() -> None:
    first, second = _connect(), _connect()
    with first.guard_scope("observe"):
        assert first.execute(EXPLODING_SQL).guard_report.mode == "observe"
        assert second.execute(EXPLODING_SQL).guard_report.mode == "patch"


def test_a_scope_shares_the_connections_rescue_budget() -> None:
    """Facts of the connection (here: rescues counted against max_rescues) are the same inside a block."""
    from guarded_sqlite import DupRatioSelector

    policy = GuardPolicy(rescue=DupRatioSelector(), max_rescues=1)
    con = _connect(policy)
    candidates = [EXPLODING_SQL, "SELECT name FROM customers"]
    with con.guard_scope(policy):
        assert con.execute(EXPLODING_SQL, candidates=candidates).guard_report.action == "candidate_selected"
    refused = con.execute(EXPLODING_SQL, candidates=candidates).guard_report
    assert refused.action == "distinct_injected"
    assert any("rescue budget exhausted" in d.reason for d in refused.decisions)


def test_guard_scope_refuses_what_connect_refuses() -> None:
    con = _connect()
    with pytest.raises(ValueError, match="guard"), con.guard_scope("loud"):  # type: ignore[arg-type]
        pass
