"""Property-based tests (hypothesis) for guarded_sqlite, on generated tables and generated queries.

The tables and statements come from ``tests/strategies.py`` (see its docstring for the grammar). Each
test compares what the guard serves and reports with what plain ``sqlite3`` returns for the same
statement: the plain ``sqlite3.Connection`` behind the guarded one (``guarded_sqlite.unwrap``), same
in-memory database and SQLite library, none of the guard's code on the path. The write test keeps a
separate plain mirror database instead, so that it can compare whole table states.

The probe's verdict is checked against ``oracle_trigger``, written from the definition and not from
the library: it counts copies with a Counter and compares exact fractions. The patch tests run every
time on cases built so that P1 or P2 must fire (``@example``s and ``strategies.explosion_cases`` /
``removal_cases``), and assert that it did (``assert_required_action``): with a rule disabled they fail.
No health check is suppressed; each test's max_examples keeps the file well under a minute.
"""

from __future__ import annotations

import math
import re
import signal
import sqlite3
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import Phase, event, example, given, note, settings
from hypothesis import strategies as st

import guarded_sqlite
from guarded_sqlite._analysis import rewrite
from guarded_sqlite._core import probe
from guarded_sqlite.policy import GuardPolicy, resolve_policy
from tests.strategies import (
    P1_CASE,
    P1_EQUAL_ROWS_CASE,
    P2_CASE,
    PATCH_CASES,
    PATCH_SPECS,
    TAU_INJECT,
    TAU_REMOVE,
    TINY_TAUS,
    Query,
    Table,
    cases,
    databases,
    explicit_case,
    explosion_cases,
    large_cases,
    near,
    removal_cases,
    row_lists,
    write_statements,
)

# --------------------------------------------------------------------------------------------------
# Running statements
# --------------------------------------------------------------------------------------------------


def open_db(tables: tuple[Table, ...], guard: Any) -> tuple[guarded_sqlite.GuardedConnection, sqlite3.Connection]:
    """A guarded in-memory connection holding ``tables``, and the plain sqlite3 connection behind it."""
    con = guarded_sqlite.connect(":memory:", guard=guard)
    raw = _Plain(con)
    fill(raw, tables)  # type: ignore[arg-type]
    return con, raw  # type: ignore[return-value]


class _Plain:
    """sqlite3's own (unguarded) statements on a guarded connection: connect()'s connections are
    sqlite3.Connection subclasses, so ``unwrap()`` returns them as they are."""

    def __init__(self, con: Any) -> None:
        self._con = con

    def execute(self, *args: Any) -> sqlite3.Cursor:
        return sqlite3.Connection.execute(self._con, *args)

    def executemany(self, *args: Any) -> sqlite3.Cursor:
        return sqlite3.Connection.executemany(self._con, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


def fill(raw: sqlite3.Connection, tables: tuple[Table, ...]) -> None:
    for t in tables:
        raw.execute(f"CREATE TABLE {t.name} (k {t.types[0]}, a {t.types[1]}, b {t.types[2]})")
        raw.executemany(f"INSERT INTO {t.name} VALUES (?, ?, ?)", t.rows)
    raw.commit()


@dataclass
class Outcome:
    raw_rows: list[Any]
    raw_description: Any
    served: list[Any]
    description: Any
    report: guarded_sqlite.GuardReport


def run_both(con: Any, raw: sqlite3.Connection, q: Query) -> Outcome | None:
    """Run ``q`` guarded, then plainly; None when both raised the same kind of error (checked here)."""
    note(f"sql={q.sql!r} params={q.params!r}")
    guarded_error: BaseException | None = None
    cursor = con.cursor()
    try:
        q.run(cursor)
        served = cursor.fetchall()
    except sqlite3.Error as error:
        guarded_error = error
    try:
        raw_cursor = q.run(raw)
        raw_rows = raw_cursor.fetchall()
    except sqlite3.Error as error:
        assert guarded_error is not None and type(guarded_error) is type(error), (guarded_error, error)
        assert str(guarded_error) == str(error)
        report = cursor.guard_report
        if con.guard_policy.mode != "off":
            assert report is not None and report.trigger == probe.EXEC_ERROR
        event("both raised")
        return None
    assert guarded_error is None, f"guarded raised {guarded_error!r}, sqlite3 did not"
    # A patch re-executes with PRAGMA query_only on: it must be off again afterwards.
    assert raw.execute("PRAGMA query_only").fetchone()[0] == 0
    report = cursor.guard_report
    note(f"report={report}")
    note(f"raw_rows={raw_rows!r}\nserved={served!r}")
    event(f"action={report.action} trigger={report.trigger}")
    for decision in report.decisions:
        if not decision.applied:
            event(f"{decision.rule} not applied: {decision.reason.split(';')[0][:70]}")
    return Outcome(raw_rows, raw_cursor.description, served, cursor.description, report)


def run_patch_case(
    case: tuple[tuple[Table, ...], Query], guard: Any, check_required_action: bool = False
) -> Outcome | None:
    tables, q = case
    con, raw = open_db(tables, guard)
    try:
        out = run_both(con, raw, q)
        if out is not None and check_required_action:
            assert_required_action(q, con.guard_policy, raw, out)
        return out
    finally:
        con.close()


# --------------------------------------------------------------------------------------------------
# Oracles, written from the definitions
# --------------------------------------------------------------------------------------------------


def threshold(tau: float) -> Fraction:
    """The number a threshold stands for: the short fraction it was written as (0.8 is 4/5) when tau is
    that fraction's float, else tau's exact binary value (say, for a tau nudged by one ulp)."""
    short = Fraction(tau).limit_denominator()
    return short if float(short) == tau else Fraction(tau)


def redundant_copies(rows: list[Any]) -> int:
    """Rows that repeat an earlier row: each row counted once less than it occurs."""
    return sum(n - 1 for n in Counter(rows).values())


def verdict(rows: int, redundant: int, tau: float) -> str | None:
    """The ordered rule on an executed result: empty, else an explosion when redundant/rows >= tau,
    compared as exact fractions.

    This agrees with comparing floats, as the library must, for results of up to 10^4 rows: a ratio
    (denominator <= 10^4) and a threshold that differ at all (denominator <= 10^6, or a float that is no
    such fraction's nearest) differ by far more than one rounding of a division."""
    if rows == 0:
        return "empty_result"
    return "cartesian_explosion" if Fraction(redundant, rows) >= threshold(tau) else None


def oracle_trigger(rows: list[Any], tau: float) -> str | None:
    """The probe's verdict on the rows sqlite3 returned (rows as hashable tuples or values)."""
    return verdict(len(rows), redundant_copies(rows), tau)


def required_action(q: Query, policy: GuardPolicy, raw: sqlite3.Connection, raw_rows: list[Any]) -> str | None:
    """The action the guard must have taken on a case built for a rule (``q.expect_rule``) when the policy's
    thresholds and row_cap let that rule fire; None where this oracle insists on nothing.

    Both rules are on by default (README, "The policy") and no policy the patch tests draw turns one off, so
    the oracle does not consult the policy's switches: a default that disabled a rule must fail here."""
    if policy.mode != "patch" or q.expect_rule is None or policy.rescue is not None:
        return None
    rows = [tuple(row) for row in raw_rows]
    if q.expect_rule == "P1":
        fires = len(rows) <= policy.row_cap and oracle_trigger(rows, policy.tau_inject) == "cartesian_explosion"
        if not fires:
            return None
        if policy.provenance == "off":
            return "distinct_injected"
        # The key-based presets remove the join's copies and nothing else. Known by construction, not
        # from the library's provenance analysis (a wrong verdict would agree with itself): the generated
        # tables declare no key, so the catalog never rules t1's fan-out out, and the always-true join
        # repeats each t0 row once per t1 row. Either action serves the rows JOIN_COPIES_REMOVED says.
        return JOIN_COPIES_REMOVED
    assert q.expect_rule == "P2"
    if policy.provenance != "off":
        # The key-based presets remove a DISTINCT only where the provenance analysis cannot tell
        # (tests/rules/test_presets.py); the paper's rule, which this oracle states, runs with "off".
        return None
    plain = [tuple(row) for row in q.run_plain(raw).fetchall()]  # the same statement without DISTINCT
    fires = (
        len(plain) <= policy.row_cap
        and len(plain) > len(rows) == len(set(rows))
        and set(plain) == set(rows)
        and Fraction(len(plain) - len(rows), len(plain)) <= threshold(policy.tau_remove)
    )
    return "distinct_removed" if fires else None


JOIN_COPIES_REMOVED = "join copies removed"
"""``required_action``'s answer for an explosion case under a key-based preset: the guard must serve each
row ``count / |t1|`` times (each t0 row once), by ``join_copies_removed`` or, where that is every row
once, ``distinct_injected``."""


def join_copies_removed(raw: sqlite3.Connection, raw_rows: list[Any]) -> Counter[Any]:
    """An explosion case's rows with the join's copies removed: each t0 row's once. Every row of the
    always-true join comes once per t1 row, so each count divides by |t1| (checked: the construction)."""
    fan = sqlite3.Connection.execute(getattr(raw, "_con", raw), "SELECT count(*) FROM t1").fetchone()[0]
    counts = Counter(tuple(row) for row in raw_rows)
    assert fan >= 5 and all(n % fan == 0 for n in counts.values()), (fan, counts)
    return Counter({row: n // fan for row, n in counts.items()})


def assert_required_action(q: Query, policy: GuardPolicy, raw: sqlite3.Connection, out: Outcome) -> None:
    """Where the case was built for a rule and the policy lets it fire, the rule fired."""
    required = required_action(q, policy, raw, out.raw_rows)
    event(f"required action: {required}")
    if required == JOIN_COPIES_REMOVED:
        once = join_copies_removed(raw, out.raw_rows)
        action = "distinct_injected" if all(n == 1 for n in once.values()) else "join_copies_removed"
        assert out.report.action in (action, "join_copies_removed"), (action, out.report)
        assert Counter(tuple(row) for row in out.served) == once, (once, out.served)
    elif required is not None:
        assert out.report.action == required, (required, out.report)


def policy_of(guard: Any) -> GuardPolicy:
    return resolve_policy(guard)


# --------------------------------------------------------------------------------------------------
# 1. observe/off are transparent
# --------------------------------------------------------------------------------------------------

FETCH_PLANS = st.lists(
    st.one_of(
        st.just(("one", None)),
        st.tuples(st.just("many"), st.one_of(st.none(), st.integers(1, 5))),
        st.just(("next", None)),
    ),
    max_size=6,
)
# The same, plus re-executing the cursor mid-stream.
REEXEC_PLANS = st.lists(
    st.sampled_from([("one", None), ("many", 2), ("next", None), ("reexec", None)]), min_size=1, max_size=8
)


def _list_factory(cursor: Any, row: tuple[Any, ...]) -> list[Any]:
    """A row_factory whose rows are unhashable (the probe's slow path)."""
    return list(row)


ROW_FACTORIES = st.sampled_from([None, None, sqlite3.Row, _list_factory])


def _fetch_script(cursor: Any, plan: list[tuple[str, Any]], q: Query) -> list[Any]:
    """Run a fetch plan; ``it`` is taken up front, so "reexec" checks that an outstanding iterator
    follows the cursor to its new result, as it does on sqlite3 (where iter(cursor) is the cursor).

    The documented exception: an iterator that has already run dry stays dry on the guarded cursor,
    so after such a point the plan takes a fresh one (a no-op on sqlite3), as a for-loop would."""
    out: list[Any] = []
    it = iter(cursor)
    ran_dry = False
    for op, arg in plan:
        if op == "reexec":
            q.run(cursor)
            out.append(("reexec",))
            if ran_dry:
                it, ran_dry = iter(cursor), False
            continue
        if op == "one":
            row = cursor.fetchone()
            ran_dry = ran_dry or row is None
            out.append(("one", row))
        elif op == "many":
            size = cursor.arraysize if arg is None else arg
            rows = cursor.fetchmany() if arg is None else cursor.fetchmany(arg)
            ran_dry = ran_dry or len(rows) < size
            out.append(("many", rows))
        else:
            try:
                out.append(("next", next(it)))
            except StopIteration:
                ran_dry = True
                out.append(("next", StopIteration))
    out.append(("all", cursor.fetchall()))
    out.append(("after", cursor.fetchone(), cursor.fetchmany(3), list(it)))
    return out


@settings(max_examples=120, deadline=None)
@given(
    case=cases(),
    mode=st.sampled_from(["observe", "off"])
    | st.builds(GuardPolicy, mode=st.just("observe"), row_cap=st.integers(1, 6)),
    plan=FETCH_PLANS,
    factory=ROW_FACTORIES,
)
def test_observe_and_off_match_sqlite3_row_for_row(case: Any, mode: str, plan: Any, factory: Any) -> None:
    """Invariant 1: in observe and off mode every query serves exactly sqlite3's rows, order and description."""
    tables, q = case
    note(f"sql={q.sql!r} params={q.params!r}")
    con, raw = open_db(tables, mode)
    raw.row_factory = factory  # the guarded connection's cursors are the raw connection's cursors
    traced: list[str] = []
    try:
        try:
            expected = q.run(raw).fetchall()
        except sqlite3.Error as error:
            with pytest.raises(type(error)):
                q.run(con)
            return
        raw.set_trace_callback(traced.append)
        # fetchall
        cursor = q.run(con)
        assert cursor.fetchall() == expected
        # Observe mode never runs anything extra: one statement per execute.
        assert len(traced) == 1, traced
        raw.set_trace_callback(None)
        assert cursor.description == q.run(raw).description
        # iteration
        assert list(q.run(con)) == expected
        # mixed fetchone / fetchmany / next, against the same script on plain sqlite3
        assert _fetch_script(q.run(con), plan, q) == _fetch_script(q.run(raw), plan, q)
        report = q.run(con).guard_report
        assert report is not None and report.action == "none" and report.final_sql == q.sql
        policy = con.guard_policy
        assert report.probed == (policy.mode == "observe" and len(expected) <= policy.row_cap)
    finally:
        raw.set_trace_callback(None)
        con.close()


# Patch mode with both rules disabled: the patch-mode code path, but results that must equal sqlite3's.
_INERT_PATCH = GuardPolicy(mode="patch", inject_distinct=False, remove_distinct=False)


@settings(max_examples=100, deadline=None)
@given(case=cases(), mode=st.sampled_from(["observe", "off", _INERT_PATCH]), plan=REEXEC_PLANS)
def test_reexecuted_cursor_matches_sqlite3(case: Any, mode: Any, plan: Any) -> None:
    """Invariant 1 (re-execute): a cursor executed again mid-stream or after running dry serves what sqlite3's does."""
    tables, q = case
    note(f"sql={q.sql!r} params={q.params!r}")
    con, raw = open_db(tables, mode)
    try:
        try:
            q.run(raw).fetchall()
        except sqlite3.Error:
            return
        assert _fetch_script(q.run(con.cursor()), plan, q) == _fetch_script(q.run(raw.cursor()), plan, q)
    finally:
        con.close()


@settings(max_examples=40, deadline=None)
@given(
    case=cases(), mode=st.sampled_from(["observe", "off", _INERT_PATCH]), size=st.integers(-3, 0), first=st.booleans()
)
def test_fetchmany_non_positive_size_matches_sqlite3(case: Any, mode: Any, size: int, first: bool) -> None:
    """Invariant 1 (edge): fetchmany(size <= 0) returns what sqlite3's fetchmany(size) returns."""
    tables, q = case
    note(f"sql={q.sql!r} params={q.params!r}")
    con, raw = open_db(tables, mode)
    try:
        try:
            raw_cursor = q.run(raw)
        except sqlite3.Error:
            return
        cursor = q.run(con)
        if first:  # also after the buffer has been turned into an iterator
            assert cursor.fetchone() == raw_cursor.fetchone()
        assert cursor.fetchmany(size) == raw_cursor.fetchmany(size)
        assert cursor.fetchall() == raw_cursor.fetchall()
    finally:
        con.close()


# --------------------------------------------------------------------------------------------------
# 2-4, 7: patch mode
# --------------------------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(case=PATCH_CASES, guard=PATCH_SPECS)
@example(case=P1_CASE, guard="patch")
def test_injected_rows_equal_sqlite_select_distinct(case: Any, guard: Any) -> None:
    """Invariant 2: after distinct_injected the served rows equal SQLite's own SELECT DISTINCT of the original."""
    tables, q = case
    con, raw = open_db(tables, guard)
    try:
        out = run_both(con, raw, q)
        if out is None:
            return
        assert_required_action(q, con.guard_policy, raw, out)
        if out.report.action != "distinct_injected":
            return
        # Independent oracle: SQLite itself deduplicates the *original* statement, wrapped as a
        # subquery (body has no trailing ';' or comment, and a newline guards a leading '--' comment).
        # This uses neither the library's rewrite nor Python's notion of row equality. The wrapper
        # keeps every placeholder in the same order, so the same parameters bind the same way.
        wrapped = f"SELECT DISTINCT * FROM (\n{q.body}\n)"
        oracle = raw.execute(wrapped) if q.params is None else raw.execute(wrapped, q.params)
        assert Counter(out.served) == Counter(oracle.fetchall())
        # And the same against Python's own dedup of sqlite3's rows (equal ints/floats count once).
        assert Counter(out.served) == Counter(set(out.raw_rows))
    finally:
        con.close()


@settings(max_examples=400, deadline=None)
@given(case=PATCH_CASES, guard=PATCH_SPECS, factory=ROW_FACTORIES)
@example(case=P1_CASE, guard="patch", factory=sqlite3.Row)
@example(case=P2_CASE, guard="paper", factory=_list_factory)
def test_patched_result_has_same_row_set(case: Any, guard: Any, factory: Any) -> None:
    """Invariant 3: whatever the action, set(served rows) == set(sqlite3 rows), and they are final_sql's rows."""
    tables, q = case
    con, raw = open_db(tables, guard)
    raw.row_factory = factory  # also the guard's re-execution's row factory
    try:
        out = run_both(con, raw, q)
        if out is None:
            return
        assert_required_action(q, con.guard_policy, raw, out)
        served = [tuple(row) for row in out.served]
        assert set(served) == {tuple(row) for row in out.raw_rows}
        final = raw.execute(out.report.final_sql) if q.params is None else raw.execute(out.report.final_sql, q.params)
        final_rows = [tuple(row) for row in final.fetchall()]
        if out.report.action == "distinct_injected":
            # P1 serves the fetched rows de-duplicated in order of first occurrence: the same rows as
            # final_sql's; their order may differ only where the query leaves it open (ties in ORDER BY, or
            # ORDER BY a column that is not selected).
            assert served == list(dict.fromkeys(tuple(row) for row in out.raw_rows))
            assert Counter(served) == Counter(final_rows)
        elif out.report.action == "join_copies_removed":
            # final_sql is the check: the statement's columns, then the projected tables' row identities;
            # one row is served per distinct identity (one NULL throughout is its own row).
            width = len(served[0])
            unidentified = [all(part is None for part in row[width:]) for row in final_rows]
            kept = Counter(row[:width] for row in {r for r, u in zip(final_rows, unidentified) if not u})
            kept.update(row[:width] for row, u in zip(final_rows, unidentified) if u)
            assert Counter(served) == kept
        else:
            assert served == final_rows
        if out.report.probed:
            assert out.report.final_rows == len(out.served)
        else:  # past row_cap: streamed through unprobed and unchanged
            assert out.report.action == "none" and len(out.raw_rows) > con.guard_policy.row_cap
    finally:
        con.close()


@settings(max_examples=400, deadline=None)
@given(case=PATCH_CASES, guard=PATCH_SPECS)
@example(case=P1_CASE, guard="patch")
@example(case=P1_EQUAL_ROWS_CASE, guard="patch")
@example(case=P2_CASE, guard="paper")
def test_patch_changes_only_multiplicity(case: Any, guard: Any) -> None:
    """Invariant 4: distinct_injected serves each row once; join_copies_removed only removes repeats (every
    value stays); distinct_removed adds rows, dup_ratio <= tau_remove."""
    policy = policy_of(guard)
    out = run_patch_case(case, guard, check_required_action=True)
    if out is None:
        return
    counts = Counter(out.served)
    if out.report.action == "distinct_injected":
        assert all(n == 1 for n in counts.values())
        assert len(out.served) == len(set(out.raw_rows)) < len(out.raw_rows)
        assert counts.keys() == set(out.raw_rows)
    elif out.report.action == "join_copies_removed":
        # Only copies go: fewer rows than served raw, every value kept, some value kept more than once
        # (else removing the copies would have been SELECT DISTINCT), never more than raw had.
        assert len(set(out.raw_rows)) < len(out.served) < len(out.raw_rows)
        assert counts.keys() == set(out.raw_rows) and counts <= Counter(out.raw_rows)
    elif out.report.action == "distinct_removed":
        assert len(out.served) > len(out.raw_rows)
        assert len(set(out.raw_rows)) == len(out.raw_rows)  # P2 starts from a DISTINCT result
        assert Fraction(redundant_copies(out.served), len(out.served)) <= threshold(policy.tau_remove)
        assert counts.keys() == set(out.raw_rows)
    else:
        assert out.served == out.raw_rows


@settings(max_examples=400, deadline=None)
@given(case=PATCH_CASES, guard=PATCH_SPECS)
@example(case=P1_CASE, guard="patch")
@example(case=P1_EQUAL_ROWS_CASE, guard="patch")
@example(case=P2_CASE, guard="paper")
def test_unflagged_queries_are_never_changed_except_by_p2(case: Any, guard: Any) -> None:
    """Invariant 7: in patch mode an unflagged query is served exactly as sqlite3 returns it, unless P2 applied."""
    _, q = case
    out = run_patch_case(case, guard, check_required_action=True)
    if out is None:
        return
    report = out.report
    if report.trigger != probe.CARTESIAN_EXPLOSION:
        assert report.action in ("none", "distinct_removed")
    if report.action == "distinct_removed":
        assert report.trigger is None
        assert re.search("distinct", q.sql, re.IGNORECASE)
    if report.action == "none":
        assert out.served == out.raw_rows
        assert report.final_sql == q.sql
    # The description is the original statement's, whatever the guard served.
    assert out.description == out.raw_description


# --------------------------------------------------------------------------------------------------
# 5. the probe's numbers
# --------------------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(case=cases(), data=st.data(), mode=st.sampled_from(["observe", "patch"]))
def test_report_numbers_follow_dup_ratio_definition(case: Any, data: Any, mode: str) -> None:
    """Invariant 5: report.rows/unique_rows/dup_ratio/trigger follow the definition on sqlite3's rows, any tau."""
    tables, q = case
    note(f"sql={q.sql!r} params={q.params!r}")
    raw = sqlite3.connect(":memory:")
    fill(raw, tables)
    try:
        try:
            rows = q.run(raw).fetchall()
        except sqlite3.Error:
            rows = None
        # A random tau, or one at (or one ulp around) this query's own dup_ratio.
        boundary = near((len(rows) - len(set(rows))) / len(rows)).filter(lambda t: 0 < t <= 1) if rows else TAU_INJECT
        tau = data.draw(TAU_INJECT | boundary, label="tau_inject")
        con = guarded_sqlite.wrap(raw, guard=GuardPolicy(mode=mode, tau_inject=tau))
        out = run_both(con, raw, q)
    finally:
        raw.close()
    if out is None:
        return
    report, rows = out.report, out.raw_rows
    assert report.probed
    assert report.rows == len(rows)
    assert report.unique_rows == len(set(rows))
    if rows:
        assert report.dup_ratio == (len(rows) - len(set(rows))) / len(rows)
    else:
        assert report.dup_ratio is None
    if report.trigger == "aggregate_fanout":
        # The probe found the rows healthy; the aggregate rule found an inflated SUM/AVG in them (its own
        # invariants are in test_aggregate_fanout.py): a finding comes with it, and patch mode only.
        assert oracle_trigger(rows, tau) is None and report.aggregates and mode == "patch"
    else:
        assert report.trigger == oracle_trigger(rows, tau), (report.dup_ratio, tau)
    assert report.flagged == (report.trigger is not None)


# 13 rows, 3 keys: a 2197-row cross join of 3 distinct rows, flagged at any tau.
_LARGE_CASE = explicit_case(
    {"t0": [(i % 3, "a", i) for i in range(13)]}, "SELECT x0.k FROM t0 AS x0, t0 AS x1, t0 AS x2"
)


@settings(max_examples=25, deadline=None)
@given(
    case=large_cases(),
    tau=TAU_INJECT,
    mode=st.sampled_from(["observe", "patch"]),
    clear=st.booleans(),
    read_first=st.booleans(),
)
@example(case=_LARGE_CASE, tau=0.8, mode="patch", clear=True, read_first=False)
def test_report_numbers_on_large_results(case: Any, tau: float, mode: str, clear: bool, read_first: bool) -> None:
    """Invariant 5 (large results): the early-stopping probe reports the definition's numbers, and in patch
    mode P1 repairs every explosion (these cross joins have nothing that exempts them). A healthy result
    whose rows were all served before the report was read keeps no rows to finish its distinct count
    with (r40): its ``unique_rows`` is then exact or None, with a lower bound in ``note``."""
    tables, q = case
    note(f"sql={q.sql!r}")
    con, raw = open_db(tables, GuardPolicy.paper(mode=mode, tau_inject=tau))  # keyless cross joins: the paper rule
    try:
        cursor = con.execute(q.sql)
        first = cursor.guard_report if read_first else None
        served = cursor.fetchall()
        kept = list(served)
        if clear:
            served.clear()  # the list fetchall() returned is the caller's: the report must not depend on it
        report = cursor.guard_report
        rows = raw.execute(q.sql).fetchall()
    finally:
        con.close()
    assert len(rows) >= 2048
    assert first is None or first is report
    assert report.rows == len(rows)
    assert report.trigger == oracle_trigger(rows, tau)
    if report.unique_rows is None:  # counted partly, rows released: healthy, and the bound is a true one
        assert not read_first and report.trigger is None and report.dup_ratio is None
        bound = int(re.search(r"at least ([\d,]+) of", report.note or "").group(1).replace(",", ""))
        assert bound <= len(set(rows)) and (len(rows) - bound) / len(rows) < tau
    else:
        assert report.unique_rows == len(set(rows))
    if mode == "patch" and report.trigger == "cartesian_explosion":
        assert report.action == "distinct_injected", report
        assert Counter(kept) == Counter(set(rows))
    else:
        assert report.action == "none" and kept == rows


@settings(max_examples=500, deadline=None)
@given(rows=st.integers(0, 10_000), data=st.data())
def test_classify_agrees_with_definition(rows: int, data: Any) -> None:
    """Invariant 5: probe.classify(rows, unique, tau) is the ordered rule with dup_ratio = (rows-unique)/rows >= tau."""
    unique = data.draw(st.integers(min(rows, 1), rows) | st.sampled_from([rows, max(rows - 1, 0), min(1, rows)]))
    # Random taus, and taus at (or one ulp around) this result's own dup_ratio, where it matters most.
    boundary = TAU_INJECT if rows == 0 else near((rows - unique) / rows).filter(lambda t: 0 < t <= 1)
    tau = data.draw(TAU_INJECT | boundary, label="tau")
    if rows:
        assert probe.dup_ratio(rows, unique) == (rows - unique) / rows
    assert probe.classify(rows, unique, tau) == verdict(rows, rows - unique, tau), (
        f"dup_ratio={(rows - unique) / rows if rows else None!r} tau={tau!r}"
    )


@settings(max_examples=150, deadline=None)
@given(rows=row_lists(), tau=TAU_INJECT)
def test_probe_large_matches_classify(rows: list[Any], tau: float) -> None:
    """Invariant 5: probe_large gives classify's (and the oracle's) verdict, and a count (exact or
    PartialCount) equal to len(set(rows))."""
    found, count = probe.probe_large(rows, tau)
    unique = len(set(rows))
    assert found == probe.classify(len(rows), unique, tau) == oracle_trigger(rows, tau)
    if isinstance(count, probe.PartialCount):
        assert found is None
        assert count.lower_bound <= unique
        assert count.exact() == unique and count.exact() == unique and count.lower_bound == unique
    else:
        assert isinstance(count, int) and count == unique


# --------------------------------------------------------------------------------------------------
# 6. P2's precheck
# --------------------------------------------------------------------------------------------------


def _removal_brute_force(rows: int, tau_remove: float) -> bool:
    """Some m > rows result rows, each distinct row kept, has dup_ratio (m - rows) / m <= tau_remove."""
    return rows > 0 and any((m - rows) / m <= tau_remove for m in range(rows + 1, rows + 40))


@settings(max_examples=400, deadline=None)
@given(rows=st.integers(0, 400), tau=TAU_REMOVE, n=st.integers(1, 400))
def test_removal_can_commit_matches_brute_force(rows: int, tau: float, n: int) -> None:
    """Invariant 6: removal_can_commit(rows, tau) holds exactly when some larger result could pass P2's checks."""
    assert probe.removal_can_commit(rows, tau) == _removal_brute_force(rows, tau)
    # At the boundary: tau at (or one ulp around) 1/n, the smallest dup_ratio a result without DISTINCT
    # can have when the DISTINCT result has n - 1 rows; rows just below, at and above it.
    for boundary in (math.nextafter(1 / n, -1.0), 1 / n, math.nextafter(1 / n, 2.0)):
        if 0 <= boundary < 1:
            for r in (n - 2, n - 1, n):
                if r >= 0:
                    assert probe.removal_can_commit(r, boundary) == _removal_brute_force(r, boundary), (r, boundary)


@settings(max_examples=300, deadline=None)
@given(tau=(TAU_REMOVE | st.integers(2, 250).flatmap(lambda n: near(1 / n))).filter(lambda t: t == 0 or t >= 0.004))
def test_min_rows_for_removal_matches_brute_force(tau: float) -> None:
    """Invariant 6: min_rows_for_removal is the smallest rows P2 could commit on; GuardPolicy caches it."""
    got = probe.min_rows_for_removal(tau)
    assert GuardPolicy.paper(tau_remove=tau)._p2_min_rows == got
    assert GuardPolicy(tau_remove=tau)._p2_min_rows >= 2**62  # the key-based presets never run P2
    if tau == 0:
        assert got == 2**63
        assert not any(_removal_brute_force(r, tau) for r in range(0, 300))
        return
    brute = next(r for r in range(1, 1000) if _removal_brute_force(r, tau))
    assert got == brute
    assert probe.removal_can_commit(got, tau) and not probe.removal_can_commit(got - 1, tau)


class _TimeLimit:
    """Turn a hang into a failure: raise TimeoutError in the main thread after ``seconds`` (SIGALRM)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __enter__(self) -> None:
        def expired(signum: int, frame: Any) -> None:
            raise TimeoutError(f"still running after {self.seconds}s")

        self.previous = signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc_info: object) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.previous)


# No shrink/explain phases: every failing run here costs the whole time limit, and shrinking a float
# towards 0 would re-run the hang dozens of times for no better example.
@settings(max_examples=100, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(tau_remove=TAU_REMOVE | TINY_TAUS, tau_inject=TAU_INJECT)
def test_guard_policy_accepts_every_valid_tau(tau_remove: float, tau_inject: float) -> None:
    """Invariant 6: any tau_remove in [0, 1) builds a policy (promptly) whose _p2_min_rows is
    min_rows_for_removal(tau_remove)."""
    with _TimeLimit(0.5):
        policy = GuardPolicy.paper(tau_inject=tau_inject, tau_remove=tau_remove)
        assert policy._p2_min_rows == probe.min_rows_for_removal(tau_remove)
    if tau_remove > 0:
        assert probe.removal_can_commit(policy._p2_min_rows, tau_remove)


# --------------------------------------------------------------------------------------------------
# 8. the rewrites touch only the DISTINCT keyword
# --------------------------------------------------------------------------------------------------


def _assert_survivors(q: Query, out: str) -> None:
    for comment in q.comments:
        assert out.count(comment) == q.sql.count(comment), comment
    for placeholder in set(q.placeholders):
        assert out.count(placeholder) == q.sql.count(placeholder), placeholder


REWRITE_CASES = st.one_of(cases(), cases(), explosion_cases(), removal_cases())


def _assert_rule_rewrites(q: Query, injected: rewrite.Rewrite, removed: rewrite.Rewrite) -> None:
    """A statement built for P1 (P2) is one the rule rewrites: nothing in it exempts it."""
    if q.expect_rule == "P1":
        assert injected.sql is not None, injected
    if q.expect_rule == "P2":
        assert removed.sql is not None, removed


@settings(max_examples=300, deadline=None)
@given(case=REWRITE_CASES)
@example(case=P1_CASE)
@example(case=P2_CASE)
def test_rewrites_change_only_the_distinct_keyword(case: Any) -> None:
    """Invariant 8: inject/remove_distinct differ from the input only by the outermost DISTINCT keyword."""
    _, q = case
    note(f"sql={q.sql!r}")
    injected = rewrite.inject_distinct(q.sql)
    _assert_rule_rewrites(q, injected, rewrite.remove_distinct(q.sql))
    if injected.sql is not None:
        out = injected.sql
        # Some position j holds the inserted " DISTINCT": cutting it out gives the input back exactly,
        # and the text before it ends with a SELECT keyword.
        cuts = [
            j for j in range(len(out) - 8) if out[j : j + 9].lower() == " distinct" and out[:j] + out[j + 9 :] == q.sql
        ]
        assert cuts, out
        assert any(out[:j].lower().endswith("select") for j in cuts), out
        _assert_survivors(q, out)
    removed = rewrite.remove_distinct(q.sql)
    if removed.sql is not None:
        out = removed.sql
        width = len(q.sql) - len(out)
        # out == sql[:i] + sql[i + width:], where the cut is the DISTINCT keyword plus blanks beside it,
        # right after a SELECT keyword (comments and whitespace may sit in between).
        cuts = [
            i
            for i in range(len(out) + 1)
            if out == q.sql[:i] + q.sql[i + width :]
            and re.fullmatch(r"[ \t]*distinct[ \t]*", q.sql[i : i + width], re.IGNORECASE)
            and re.search(r"select(\s|/\*.*?\*/|--[^\n]*\n)*$", q.sql[:i], re.IGNORECASE | re.DOTALL)
        ]
        assert cuts, out
        _assert_survivors(q, out)


@settings(max_examples=300, deadline=None)
@given(case=REWRITE_CASES)
@example(case=P1_CASE)
@example(case=P2_CASE)
def test_rewrites_respect_exemptions(case: Any) -> None:
    """Invariant 8: P1 never fires on LIMIT/OFFSET, GROUP BY, aggregates, compounds, DISTINCT or ALL; P2
    likewise; and both fire on the statements built for them."""
    _, q = case
    note(f"sql={q.sql!r}")
    injected = rewrite.inject_distinct(q.sql)
    _assert_rule_rewrites(q, injected, rewrite.remove_distinct(q.sql))
    exempt_inject = q.compound or q.outer_limit or q.outer_group or q.outer_aggregate or q.outer_quantifier != ""
    if exempt_inject:
        assert injected.sql is None, injected
    event(f"inject: {'exempt' if exempt_inject else ('applied' if injected.sql else 'refused: ' + injected.reason)}")
    removed = rewrite.remove_distinct(q.sql)
    exempt_remove = (
        q.compound
        or q.outer_limit
        or q.outer_group
        or q.outer_aggregate
        or q.outer_window
        or q.outer_quantifier != "DISTINCT"
    )
    if exempt_remove:
        assert removed.sql is None, removed
    event(f"remove: {'exempt' if exempt_remove else ('applied' if removed.sql else 'refused: ' + removed.reason)}")


# --------------------------------------------------------------------------------------------------
# 9. writes run exactly once
# --------------------------------------------------------------------------------------------------


def _snapshot(con: sqlite3.Connection, tables: tuple[Table, ...]) -> list[Any]:
    return [con.execute(f"SELECT rowid, * FROM {t.name} ORDER BY rowid").fetchall() for t in tables]


@settings(max_examples=100, deadline=None)
@given(data=st.data(), tables=databases(max_rows=6), guard=PATCH_SPECS)
def test_writes_take_effect_exactly_once(data: Any, tables: Any, guard: Any) -> None:
    """Invariant 9: INSERT/UPDATE/DELETE (with or without RETURNING) run once in patch mode and are never patched."""
    statements = data.draw(st.lists(write_statements(tables), min_size=1, max_size=6))
    con, raw = open_db(tables, guard)
    mirror = sqlite3.connect(":memory:")
    fill(mirror, tables)
    traced: list[str] = []
    raw.set_trace_callback(traced.append)
    try:
        for kind, sql, params in statements:
            note(f"{sql!r} {params!r}")
            before, mirror_before = con.total_changes, mirror.total_changes
            if kind == "commit":
                con.commit()
                mirror.commit()
                continue
            traced.clear()
            cursor = con.execute(sql, params)
            served = cursor.fetchall()
            expected = mirror.execute(sql, params).fetchall()
            report = cursor.guard_report
            event(f"{kind}: trigger={report.trigger} action={report.action}")
            if kind == "read":
                assert set(served) == set(expected)
                if report.action == "none":
                    assert served == expected
            else:
                for decision in report.decisions:
                    event(f"write: {decision.rule} considered: {decision.reason[:60]}")
                executed = [s for s in traced if not re.match(r"\s*(BEGIN|COMMIT|PRAGMA)", s, re.I)]
                assert len(executed) == 1, executed
                assert report.action == "none", report
                assert served == expected
            assert con.total_changes - before == mirror.total_changes - mirror_before
            assert raw.execute("SELECT changes()").fetchone() == mirror.execute("SELECT changes()").fetchone()
            assert _snapshot(raw, tables) == _snapshot(mirror, tables)
            assert raw.execute("PRAGMA query_only").fetchone()[0] == 0
    finally:
        raw.set_trace_callback(None)
        con.close()
        mirror.close()


# --------------------------------------------------------------------------------------------------
# Errors (the first step of the ordered rule)
# --------------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    tables=databases(),
    mode=st.sampled_from(["observe", "patch"]),
    sql=st.sampled_from(["SELECT nope FROM t0", "SELECT * FROM missing", "SELECT ? FROM t0", "SELEC 1"]),
)
def test_execution_errors_are_reraised_and_reported(tables: Any, mode: str, sql: str) -> None:
    """Ordered rule, step 1: an execution error is re-raised unchanged and reported as exec_error."""
    con, raw = open_db(tables, mode)
    try:
        with pytest.raises(sqlite3.Error) as expected:
            raw.execute(sql)
        cursor = con.cursor()
        with pytest.raises(type(expected.value), match=re.escape(str(expected.value))):
            cursor.execute(sql)
        assert cursor.guard_report.trigger == probe.EXEC_ERROR
        assert cursor.guard_report.action == "none"
    finally:
        con.close()
