"""Repros p08, p21, p16 and p18 (``/work/shared/repros/provenance/``): the guard judges, de-duplicates and
dumps the database's rows, not what a row factory made of them, and never its own statements' rows.

- p08, p21: the probe and P1 see the values sqlite3 returned before any ``row_factory``; a factory
  other than None and ``sqlite3.Row`` is applied to the rows served, once per row, with the cursor.
- p16: a ``row_factory`` changed between fetches applies to the rows fetched after it, as in sqlite3;
  ``text_factory`` (and converters) in force at execute() apply to the whole result (documented).
- p18: ``iterdump()`` runs sqlite3's dump on plain cursors, never through the guard.

One test per repro (its docstring names the script), then the properties behind them. Every
connection comes from ``guarded_sqlite.connect`` looked up at call time, so each test runs as
``[connect]`` and again as ``[wrap]``, against ``wrap()``'s proxies (tests/connect_or_wrap.py).
"""

from __future__ import annotations

import itertools
import sqlite3
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import example, given, note, settings
from hypothesis import strategies as st

import guarded_sqlite
from guarded_sqlite import DupRatioSelector, GuardPolicy
from guarded_sqlite._io.proxy import ConnectionProxy
from tests.reliability_helpers import run_child
from tests.strategies import P1_CASE, P2_CASE, PATCH_CASES, PATCH_SPECS, Table

PRESETS = ["patch", "text_to_sql", "paper", "observe"]

pytestmark = pytest.mark.usefixtures("connect_or_wrap")

# --- p08/p21's database: 2 customers, 10 orders; every (customer, order) row distinct ---------------

SHOP = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, total REAL);
INSERT INTO customers VALUES (1, 'Ana'), (2, 'Ben');
"""
ORDER_LINES = "SELECT c.id, c.name, o.id AS order_id, o.total FROM customers c JOIN orders o ON o.customer_id = c.id"
# A fan-out with real duplicates: every customer name once per order (10 rows, 2 distinct).
NAMES_PER_ORDER = "SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id"


def shop(connect: Callable[..., Any], **kwargs: Any) -> Any:
    con = connect(":memory:", **kwargs)
    con.executescript(SHOP)
    con.executemany("INSERT INTO orders (customer_id, total) VALUES (?, ?)", [(1 + i % 2, 10.0 * i) for i in range(10)])
    con.commit()
    return con


def both(**kwargs: Any) -> tuple[sqlite3.Connection, Any]:
    """The shop database on plain sqlite3 and on a guarded connection (``guard=`` etc. in kwargs)."""
    guard = kwargs.pop("guard", None)
    return shop(sqlite3.connect, **kwargs), shop(guarded_sqlite.connect, guard=guard, **kwargs)


class Entity:
    """Equality and hash by primary key (the first column), like an ORM model instance; iterable."""

    def __init__(self, columns: list[str], row: tuple[Any, ...]) -> None:
        self.columns, self.row = columns, row

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Entity) and self.row[0] == other.row[0]

    def __hash__(self) -> int:
        return hash(self.row[0])

    def __iter__(self) -> Iterator[Any]:
        return iter(self.row)

    def __len__(self) -> int:
        return len(self.row)

    def __repr__(self) -> str:
        return f"Entity{self.row}"


def entity(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> Entity:
    return Entity([d[0] for d in cursor.description], row)


def scalar(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> Any:
    return row[0]


def set_factory(con: Any, factory: Any, where: str) -> Any:
    """A cursor whose row factory is ``factory``, set on the connection or on the cursor."""
    if where == "connection":
        con.row_factory = factory
        return con.cursor()
    cursor = con.cursor()
    cursor.row_factory = factory
    return cursor


class Recorder:
    """A row factory that records every call: the cursor it got, its description, the row."""

    def __init__(self, make: Callable[[Any, tuple[Any, ...]], Any] = lambda cursor, row: list(row)) -> None:
        self.calls: list[tuple[Any, Any, tuple[Any, ...]]] = []
        self.make = make

    def __call__(self, cursor: Any, row: tuple[Any, ...]) -> Any:
        self.calls.append((cursor, cursor.description, row))
        return self.make(cursor, row)


# --------------------------------------------------------------------------------------------------
# p08, p21: the probe and P1 judge the database's rows
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["connection", "cursor"])
@pytest.mark.parametrize("guard", PRESETS)
def test_p08_entities_equal_by_key_keep_every_row(guard: str, where: str) -> None:
    """p08_row_factory_equality_drops_rows.py: a row factory whose objects are equal by primary key
    (two customers, ten order lines) made the duplicate-free result look like an explosion, and P1
    served 2 of the 10 rows. The probe now counts the rows sqlite3 returned: nothing is flagged and all
    ten entities are served, as sqlite3 serves them."""
    raw, con = both(guard=guard)
    expected = [e.row for e in set_factory(raw, entity, where).execute(ORDER_LINES).fetchall()]
    cursor = set_factory(con, entity, where)
    rows = cursor.execute(ORDER_LINES).fetchall()
    assert all(type(e) is Entity for e in rows)
    assert [e.row for e in rows] == expected and len(expected) == 10
    assert rows[0].columns == ["id", "name", "order_id", "total"]
    report = cursor.guard_report
    assert (report.trigger, report.action, report.rows, report.unique_rows) == (None, "none", 10, 10)
    assert report.final_sql == ORDER_LINES


@pytest.mark.parametrize("where", ["connection", "cursor"])
@pytest.mark.parametrize("guard", PRESETS)
def test_p21_scalar_row_factory_is_not_flagged_and_no_internal_error(guard: str, where: str) -> None:
    """p21_scalar_row_factory_internal_error.py: with ``row_factory = lambda cur, row: row[0]`` the
    duplicate-free (customer id, order id) result was probed on its first column only: flagged
    cartesian_explosion at dup_ratio 0.8, with P1's decision reading "internal error". Now it is healthy."""
    raw, con = both(guard=guard)
    sql = "SELECT c.id, o.id FROM customers c JOIN orders o ON o.customer_id = c.id"
    expected = set_factory(raw, scalar, where).execute(sql).fetchall()
    cursor = set_factory(con, scalar, where)
    assert cursor.execute(sql).fetchall() == expected == [1 + i % 2 for i in range(10)]
    report = cursor.guard_report
    assert (report.trigger, report.dup_ratio, report.unique_rows, report.action) == (None, 0.0, 10, "none")
    assert not any("internal error" in d.reason for d in report.decisions)


@pytest.mark.parametrize("guard", ["patch", "paper"])
def test_real_duplicates_under_a_scalar_factory_are_patched_on_the_rows(guard: str) -> None:
    """The other side of p21: a real explosion under a scalar factory is flagged and P1 serves the
    distinct rows through the factory (no "internal error": P1's checks read tuples)."""
    _, con = both(guard=guard)
    con.row_factory = scalar
    cursor = con.execute(NAMES_PER_ORDER)
    assert cursor.fetchall() == ["Ana", "Ben"]
    report = cursor.guard_report
    assert (report.trigger, report.action, report.rows, report.unique_rows) == (
        "cartesian_explosion",
        "distinct_injected",
        10,
        2,
    )
    assert report.final_sql == NAMES_PER_ORDER.replace("SELECT", "SELECT DISTINCT", 1)


def test_sqlite3_row_compares_as_its_values_within_one_result() -> None:
    """The claim that keeps sqlite3.Row on the C fetch path: within one result, two Rows are equal
    exactly when their values are, and equal Rows hash alike, so the probe and P1 count Rows as the
    tuples they hold (the property below checks generated rows too)."""
    con = sqlite3.connect(":memory:")
    con.row_factory = sqlite3.Row
    rows = con.execute(
        "SELECT 1, 'a' UNION ALL SELECT 1, 'a' UNION ALL SELECT 1.0, 'a' UNION ALL SELECT 2, NULL"
    ).fetchall()
    _assert_rows_compare_as_values(rows)
    assert len(set(rows)) == 2  # 1 and 1.0 are equal values, as in SQL's DISTINCT


def _assert_rows_compare_as_values(rows: list[sqlite3.Row]) -> None:
    for a, b in itertools.product(rows, repeat=2):
        assert (a == b) == (tuple(a) == tuple(b)), (tuple(a), tuple(b))
        if a == b:
            assert hash(a) == hash(b)
    assert len(set(rows)) == len({tuple(r) for r in rows})
    assert [tuple(r) for r in dict.fromkeys(rows)] == list(dict.fromkeys(tuple(r) for r in rows))


VALUES = st.one_of(
    st.none(),
    st.integers(-3, 3),
    st.sampled_from([0.0, -0.0, 1.0, 2.5, float("inf")]),
    st.sampled_from(["", "a", "A", "a "]),
    st.sampled_from([b"", b"a", b"\x00"]),
)


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(VALUES, VALUES), max_size=12), copies=st.integers(1, 3))
def test_property_sqlite3_rows_of_one_result_compare_as_tuples(rows: list[tuple[Any, Any]], copies: int) -> None:
    """Property: for any rows of one result (repeated ``copies`` times), Row equality and hashing are
    tuple equality and hashing."""
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE t (a, b)")
    con.executemany("INSERT INTO t VALUES (?, ?)", rows * copies)
    con.row_factory = sqlite3.Row
    _assert_rows_compare_as_values(con.execute("SELECT a, b FROM t").fetchall())


@pytest.mark.parametrize("guard", ["patch", "observe"])
def test_factory_runs_once_per_row_served_with_the_cursor_as_sqlite3_calls_it(guard: str) -> None:
    """sqlite3 calls the row factory when a row is fetched, with the cursor and its description; the
    guard fetches plain tuples at execute() and calls the factory the same way when it serves a row:
    nothing at execute(), one call per row handed out."""
    sql = "SELECT o.id, o.total FROM orders o ORDER BY o.id"
    seen = {}
    for label, con in zip(("raw", "guarded"), both(guard=guard)):
        factory = Recorder()
        cursor = set_factory(con, factory, "cursor")
        cursor.execute(sql)
        steps = [len(factory.calls)]
        fetched = [cursor.fetchone(), cursor.fetchmany(2), next(cursor)]
        steps.append(len(factory.calls))
        fetched.append(cursor.fetchall())
        steps.append(len(factory.calls))
        assert all(c is cursor for c, _, _ in factory.calls)
        seen[label] = (steps, fetched, [(d, row) for _, d, row in factory.calls])
    assert seen["guarded"] == seen["raw"]
    assert seen["raw"][0] == [0, 4, 10]


def test_p1_calls_the_factory_for_the_rows_it_serves_only() -> None:
    """P1 serves the distinct rows of the fetched result: the factory runs for those 2 rows, not 10."""
    _, con = both(guard="patch")
    factory = Recorder(lambda cursor, row: {d[0]: v for d, v in zip(cursor.description, row)})
    cursor = set_factory(con, factory, "connection")
    assert cursor.execute(NAMES_PER_ORDER).fetchall() == [{"name": "Ana"}, {"name": "Ben"}]
    assert cursor.guard_report.action == "distinct_injected"
    assert [row for _, _, row in factory.calls] == [("Ana",), ("Ben",)]
    assert all(c is cursor for c, _, _ in factory.calls)


def test_p2_compares_plain_rows_and_serves_them_through_the_factory() -> None:
    """P2 (paper preset) re-runs a DISTINCT query without it and compares rows: plain tuples, not the
    factory's objects. With entities equal by their second column (the same for every row) the DISTINCT
    result looked like an explosion and P2 never ran; now P2 removes the DISTINCT, and the factory runs
    once per served row, for the 11 rows served only."""
    (table,) = P2_CASE[0]
    raw, con = (sqlite3.connect(":memory:"), guarded_sqlite.connect(":memory:", guard="paper"))
    for c in (raw, con):
        c.execute("CREATE TABLE t0 (k INTEGER, a, b)")
        c.executemany("INSERT INTO t0 VALUES (?, ?, ?)", table.rows)
    by_second = Recorder(lambda cursor, row: Entity(["a", "k"], (row[1], row[0])))
    cursor = set_factory(con, by_second, "cursor")
    rows = cursor.execute(P2_CASE[1].sql).fetchall()
    report = cursor.guard_report
    assert (report.trigger, report.action) == (None, "distinct_removed")
    expected = raw.execute(report.final_sql).fetchall()
    assert [(e.row[1], e.row[0]) for e in rows] == expected and len(expected) == 11
    assert [row for _, _, row in by_second.calls] == expected


def test_rescued_candidate_rows_go_through_the_factory_with_the_candidates_description() -> None:
    """A rescue runs candidates read-only and compares their plain rows; the chosen candidate's rows
    are served through the factory, which sees the candidate's description, once per served row (the
    candidates that were not chosen never reach it)."""
    con = shop(guarded_sqlite.connect, guard=GuardPolicy(rescue=DupRatioSelector()))
    factory = Recorder(lambda cursor, row: {d[0]: v for d, v in zip(cursor.description, row)})
    cursor = set_factory(con, factory, "cursor")
    candidates = [NAMES_PER_ORDER, "SELECT id, name FROM customers ORDER BY id"]
    rows = cursor.execute(NAMES_PER_ORDER, candidates=candidates).fetchall()
    assert cursor.guard_report.action == "candidate_selected"
    assert rows == [{"id": 1, "name": "Ana"}, {"id": 2, "name": "Ben"}]
    assert [row for _, _, row in factory.calls] == [(1, "Ana"), (2, "Ben")]
    assert [d[0] for d in factory.calls[0][1]] == ["id", "name"]


def test_a_failing_factory_raises_at_the_fetch_as_in_sqlite3() -> None:
    """The factory now runs when rows are served, so its error surfaces at the fetch, as in sqlite3."""
    outcomes = []
    for con in both(guard="patch"):
        cursor = set_factory(con, lambda cursor, row: 1 / 0, "cursor")
        cursor.execute(ORDER_LINES)
        with pytest.raises(ZeroDivisionError):
            cursor.fetchone()
        outcomes.append(cursor.row_factory is not None)
    assert outcomes == [True, True]


@pytest.fixture
def interrupting_converter() -> Iterator[None]:
    def convert(value: bytes) -> Any:
        if value == b"stop":
            raise KeyboardInterrupt
        return value.decode()

    sqlite3.register_converter("GS_STOP", convert)
    yield
    sqlite3.converters.pop("GS_STOP", None)


@pytest.mark.usefixtures("interrupting_converter")
def test_the_factory_is_restored_when_the_statement_fails() -> None:
    """Execute and fetch run with the cursor's factory set to None; it is back on every path: a
    failing statement, a converter raising KeyboardInterrupt mid-fetch, and then a statement that works."""
    con = shop(guarded_sqlite.connect, detect_types=sqlite3.PARSE_COLNAMES)
    factory = Recorder()
    cursor = set_factory(con, factory, "cursor")
    with pytest.raises(sqlite3.OperationalError):
        cursor.execute("SELECT * FROM no_such_table")
    assert cursor.row_factory is factory
    with pytest.raises(KeyboardInterrupt):
        cursor.execute("SELECT 'go' AS \"x [GS_STOP]\" UNION ALL SELECT 'stop'")
    assert cursor.row_factory is factory
    assert cursor.execute("SELECT 1, 2").fetchall() == [[1, 2]]


_SIGINT_CHILD = """
from tests.repros.test_repros_rows import P2_CASE, NAMES_PER_ORDER, Recorder, shop
pkg = os.path.dirname(guarded_sqlite.__file__)
opener = guarded_sqlite.connect if {opener!r} == "connect" else (
    lambda db, guard=None, **kw: guarded_sqlite.wrap(sqlite3.connect(db, **kw), guard=guard))


def run_with_tracer(cursor, sql, fire_at):
    seen = [0]

    def local(frame, event, arg):
        if event == "line":
            seen[0] += 1
            if seen[0] == fire_at:
                signal.raise_signal(signal.SIGINT)
        return local

    def global_(frame, event, arg):
        return local if frame.f_code.co_filename.startswith(pkg) else None

    outcome = "returned"
    sys.settrace(global_)
    try:
        try:
            cursor.execute(sql)
        finally:
            sys.settrace(None)
    except KeyboardInterrupt:
        outcome = "KeyboardInterrupt"
    except sqlite3.OperationalError as error:
        outcome = str(error)
    return seen[0], outcome


problems, points = [], 0
for guard, setup, sql in [("patch", None, NAMES_PER_ORDER), ("paper", P2_CASE, P2_CASE[1].sql)]:
    con = shop(opener, guard=guard)
    if setup is not None:
        con.execute("CREATE TABLE t0 (k INTEGER, a, b)")
        con.executemany("INSERT INTO t0 VALUES (?, ?, ?)", setup[0][0].rows)
    factory = Recorder()
    cursor = con.cursor()
    cursor.row_factory = factory
    cursor.execute(sql).fetchall()
    total, _ = run_with_tracer(cursor, sql, 0)
    for k in range(1, total + 1, max(1, total // 150)):
        _, outcome = run_with_tracer(cursor, sql, k)
        points += 1
        if cursor.row_factory is not factory:
            problems.append((guard, k, outcome, repr(cursor.row_factory)))
    if cursor.execute("SELECT 1, 2").fetchall() != [[1, 2]]:
        problems.append((guard, "next statement", repr(cursor.row_factory)))
report(points=points, problems=problems[:10], n_problems=len(problems))
"""


def test_the_factory_is_restored_wherever_a_keyboard_interrupt_strikes() -> None:
    """SIGINT raised (from a line tracer, in a child interpreter) at every line the guard runs during a
    patched execute, P1 and P2 with its re-execution: afterwards the cursor's factory is the caller's,
    and the next statement is shaped by it."""
    opener = "wrap" if isinstance(guarded_sqlite.connect(":memory:"), ConnectionProxy) else "connect"
    result = run_child(_SIGINT_CHILD.format(opener=opener), timeout=120)
    assert result["points"] > 40, result
    assert result["n_problems"] == 0, result["problems"]


@pytest.mark.parametrize("text_factory", [bytearray, str])
def test_unhashable_values_under_a_factory_are_still_probed(text_factory: Any) -> None:
    """Values sqlite3 returns unhashable (text_factory=bytearray) still take the probe's slow path:
    the fan-out is flagged and patched, and the factory shapes the 2 rows served."""
    raw, con = both(guard="patch")
    for c in (raw, con):
        c.text_factory = text_factory
        c.row_factory = lambda cursor, row: list(row)
    cursor = con.execute(NAMES_PER_ORDER)
    rows = cursor.fetchall()
    expected = raw.execute(NAMES_PER_ORDER.replace("SELECT", "SELECT DISTINCT", 1)).fetchall()
    assert rows == expected and len(rows) == 2 and type(rows[0][0]) is text_factory
    assert (cursor.guard_report.trigger, cursor.guard_report.action) == ("cartesian_explosion", "distinct_injected")


def test_rows_past_row_cap_are_shaped_by_sqlite3_itself() -> None:
    """Past row_cap the rows stream from sqlite3, which applies the (restored) factory; the buffered
    head goes through it at serve time: every row is shaped exactly once, as sqlite3 shapes them."""
    seen = {}
    for label, con in zip(("raw", "guarded"), both(guard=GuardPolicy(row_cap=3))):
        factory = Recorder()
        cursor = set_factory(con, factory, "cursor")
        cursor.execute("SELECT id, total FROM orders ORDER BY id")
        first = cursor.fetchmany(5)
        seen[label] = (first, list(cursor), [row for _, _, row in factory.calls])
    assert seen["guarded"] == seen["raw"]


# --------------------------------------------------------------------------------------------------
# Property: a row factory changes nothing the guard decides
# --------------------------------------------------------------------------------------------------


class _ByFirst:
    """Equal by the first value only (an entity keyed by its first column)."""

    __slots__ = ("row",)

    def __init__(self, row: tuple[Any, ...]) -> None:
        self.row = row

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _ByFirst) and self.row[:1] == other.row[:1]

    def __hash__(self) -> int:
        return hash(self.row[:1])


FACTORIES: dict[str, tuple[Callable[[Any, tuple[Any, ...]], Any], Callable[[Any], Any]]] = {
    # name: (row factory, how to get the values back from what it made)
    "by_first": (lambda cursor, row: _ByFirst(row), lambda made: made.row),
    "scalar": (lambda cursor, row: row[0], lambda made: made),
    "first": (lambda cursor, row: row[:1], lambda made: made),  # the first value only, as a 1-tuple
    "list": (lambda cursor, row: list(row), tuple),
    "reversed": (lambda cursor, row: row[::-1], lambda made: made[::-1]),
}


def _fill(con: Any, tables: tuple[Table, ...]) -> None:
    for t in tables:
        con.execute(f"CREATE TABLE {t.name} (k {t.types[0]}, a {t.types[1]}, b {t.types[2]})")
        con.executemany(f"INSERT INTO {t.name} VALUES (?, ?, ?)", t.rows)
    con.commit()


def _outcome(con: Any, q: Any, factory: Any) -> tuple[Any, ...]:
    cursor = con.cursor()
    cursor.row_factory = factory
    try:
        rows = q.run(cursor).fetchall()
    except sqlite3.Error as error:
        return ("raised", type(error), str(error))
    r = cursor.guard_report
    return ("ok", rows, (r.trigger, r.action, r.rows, r.unique_rows, r.final_rows, r.final_sql, r.decisions))


@settings(max_examples=150, deadline=None)
@given(case=PATCH_CASES, guard=PATCH_SPECS, name=st.sampled_from(sorted(FACTORIES)))
@example(case=P1_CASE, guard="patch", name="by_first")
@example(case=P2_CASE, guard="paper", name="by_first")
@example(case=P1_CASE, guard="paper", name="scalar")
def test_property_a_row_factory_changes_no_decision_and_shapes_the_same_rows(case: Any, guard: Any, name: str) -> None:
    """Property: for any generated query and policy, a cursor with a row factory gets exactly the
    decisions, counts and final SQL of a cursor without one, and its rows are the factory applied to
    that cursor's rows (``value_of`` undoes what the factory made, for the comparison)."""
    tables, q = case
    factory, value_of = FACTORIES[name]
    note(f"sql={q.sql!r} params={q.params!r}")
    plain_con, shaped_con = (
        guarded_sqlite.connect(":memory:", guard=guard),
        guarded_sqlite.connect(":memory:", guard=guard),
    )
    _fill(plain_con, tables)
    _fill(shaped_con, tables)
    plain = _outcome(plain_con, q, None)
    shaped = _outcome(shaped_con, q, factory)
    if plain[0] == "raised":
        assert shaped == plain
        return
    assert shaped[0] == "ok" and shaped[2] == plain[2]
    assert [value_of(made) for made in shaped[1]] == [
        value_of(factory(None, row)) for row in plain[1]
    ]  # the factory applied to the plain rows


# --------------------------------------------------------------------------------------------------
# p16: a row factory changed between fetches applies to the rows after it
# --------------------------------------------------------------------------------------------------


def dict_row(cursor: Any, row: tuple[Any, ...]) -> dict[str, Any]:
    return {d[0]: v for d, v in zip(cursor.description, row)}


def comparable(rows: Any) -> Any:
    """Rows with sqlite3.Row objects as (type, keys, values), comparable across connections."""
    if isinstance(rows, list):
        return [comparable(row) for row in rows]
    if isinstance(rows, sqlite3.Row):
        return ("Row", tuple(rows.keys()), tuple(rows))
    return rows


SHAPES: dict[str, Any] = {"none": None, "Row": sqlite3.Row, "dict": dict_row, "scalar": scalar}
CONTINUE: dict[str, Callable[[Any], Any]] = {
    "fetchall": lambda cursor: cursor.fetchall(),
    "fetchmany": lambda cursor: cursor.fetchmany(2),
    "fetchone": lambda cursor: cursor.fetchone(),
    "next": next,
}


@pytest.mark.parametrize("then", sorted(CONTINUE))
@pytest.mark.parametrize(("before", "after"), [("none", "dict"), ("Row", "none"), ("dict", "Row"), ("scalar", "none")])
@pytest.mark.parametrize("guard", ["patch", "observe"])
def test_p16_factory_changed_between_fetches_applies_to_the_rest(
    guard: str, before: str, after: str, then: str
) -> None:
    """p16_factory_change_mid_iteration.py: sqlite3 applies the row factory in force at each fetch; the
    guard had shaped every row at execute(), so a factory set after the first fetchone() was ignored.
    Now the rows served after the change get the new factory, whatever the factories and the fetch.
    The text_factory half of the repro is the documented difference: the text_factory (and converters)
    in force at execute() apply to the whole result, and a later statement gets the new one."""
    sql = "SELECT id, name FROM customers ORDER BY id"
    seen = {}
    for label, con in zip(("raw", "guarded"), both(guard=guard)):
        con.execute("INSERT INTO customers VALUES (3, 'Cy'), (4, 'Di')")
        cursor = set_factory(con, SHAPES[before], "cursor")
        cursor.execute(sql)
        first = cursor.fetchone()
        cursor.row_factory = SHAPES[after]
        seen[label] = comparable([first, CONTINUE[then](cursor), cursor.fetchall()])
    assert seen["guarded"] == seen["raw"]
    # The text_factory half: documented, see README "Where it differs from sqlite3".
    raw, con = both(guard=guard)
    text = {}
    for label, c in (("raw", raw), ("guarded", con)):
        cursor = c.execute("SELECT name FROM customers ORDER BY id")
        first = cursor.fetchone()
        c.text_factory = bytes
        text[label] = (first, cursor.fetchall(), c.execute("SELECT name FROM customers ORDER BY id").fetchall())
    assert text["guarded"] == (("Ana",), [("Ben",)], [(b"Ana",), (b"Ben",)])
    if sys.version_info >= (3, 11):  # 3.10's sqlite3 converts one row ahead, as fetch-once converts all
        assert text["raw"] == (("Ana",), [(b"Ben",)], [(b"Ana",), (b"Ben",)])


def test_p16_past_row_cap_the_buffered_head_and_the_streamed_tail_take_the_new_factory() -> None:
    """Past row_cap the first rows are buffered and the rest streams from sqlite3: a factory changed
    in the buffered part applies to the rest of it and to the streamed rows, as in sqlite3."""
    sql = "SELECT id, total FROM orders ORDER BY id"
    seen = {}
    for label, con in zip(("raw", "guarded"), both(guard=GuardPolicy(row_cap=4))):
        cursor = con.execute(sql)
        first = cursor.fetchmany(2)
        cursor.row_factory = dict_row
        middle = cursor.fetchmany(4)
        cursor.row_factory = sqlite3.Row
        seen[label] = comparable([first, middle, cursor.fetchall()])
    assert seen["guarded"] == seen["raw"]


def test_p16_inside_a_for_loop_as_documented() -> None:
    """Documented (README, "Where it differs from sqlite3"): the iterator ``iter(cur)`` hands out over rows
    fetched with no factory (or sqlite3.Row) keeps serving them in that shape when the factory changes
    mid-loop; the cursor's fetch methods apply the new one, from the same position. Over rows fetched
    with another factory, the loop sees the change too, as sqlite3's does."""
    _, con = both(guard="patch")
    cursor = con.execute("SELECT id FROM orders ORDER BY id")
    looped, fetched = [], []
    for row in cursor:
        looped.append(row)
        cursor.row_factory = scalar
        fetched.append(cursor.fetchone())
    assert looped == [(i,) for i in range(1, 11, 2)] and fetched == list(range(2, 11, 2))
    cursor = set_factory(con, dict_row, "cursor")
    looped = []
    for row in cursor.execute("SELECT id FROM orders ORDER BY id"):
        looped.append(row)
        cursor.row_factory = scalar
    assert looped == [{"id": 1}, *range(2, 11)]


def test_p16_reexecuting_inside_a_loop_with_a_factory_continues_with_the_new_rows() -> None:
    """As sqlite3's cursor (its own iterator) does: re-executing the cursor inside ``for row in cur``
    continues the loop with the new statement's rows, shaped by the factory, a changed one included."""
    seen = {}
    for label, con in zip(("raw", "guarded"), both(guard="patch")):
        cursor = set_factory(con, dict_row, "cursor")
        looped = []
        for row in cursor.execute("SELECT id FROM customers ORDER BY id"):
            looped.append(row)
            if len(looped) == 1:
                cursor.row_factory = scalar
                cursor.execute("SELECT total FROM orders WHERE id < 4 ORDER BY id")
        seen[label] = looped
    assert seen["guarded"] == seen["raw"] == [{"id": 1}, 0.0, 10.0, 20.0]


FETCH_PLAN = st.lists(
    st.one_of(
        st.tuples(st.just("one"), st.none()),
        st.tuples(st.just("many"), st.integers(0, 4)),
        st.tuples(st.just("next"), st.none()),
        st.tuples(st.just("factory"), st.sampled_from(sorted(SHAPES))),
        st.tuples(st.just("reexec"), st.sampled_from([0, 3, 7])),
    ),
    max_size=10,
)


def _run_plan(con: Any, plan: list[tuple[str, Any]], initial: str) -> list[Any]:
    cursor = set_factory(con, SHAPES[initial], "cursor")
    sql = "SELECT id, total FROM orders WHERE id > ? ORDER BY id"
    cursor.execute(sql, (0,))
    out: list[Any] = []
    for op, arg in plan:
        if op == "one":
            out.append(("one", comparable(cursor.fetchone())))
        elif op == "many":
            out.append(("many", comparable(cursor.fetchmany(arg))))
        elif op == "next":
            out.append(("next", comparable(next(cursor, "done"))))
        elif op == "factory":
            cursor.row_factory = SHAPES[arg]
        else:
            cursor.execute(sql, (arg,))
    out.append(("all", comparable(cursor.fetchall())))
    return out


@settings(max_examples=150, deadline=None)
@given(
    plan=FETCH_PLAN,
    initial=st.sampled_from(sorted(SHAPES)),
    guard=st.sampled_from(["patch", "observe", "off"]) | st.builds(GuardPolicy, row_cap=st.integers(1, 6)),
)
def test_property_fetches_and_factory_changes_in_any_order_serve_sqlite3s_rows(
    plan: list[tuple[str, Any]], initial: str, guard: Any
) -> None:
    """Property: any sequence of fetchone/fetchmany/next, row factory changes and re-executions serves
    exactly the rows sqlite3 serves (values, shapes and order), buffered or past row_cap."""
    raw, con = both(guard=guard)
    assert _run_plan(con, plan, initial) == _run_plan(raw, plan, initial)


# --------------------------------------------------------------------------------------------------
# p18: iterdump() never goes through the guard
# --------------------------------------------------------------------------------------------------

DUMPED = """
CREATE TABLE clicks (page TEXT, n INTEGER);
CREATE TABLE links (a INTEGER, b INTEGER, note BLOB);
CREATE TABLE people (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT);
CREATE INDEX links_a ON links (a);
CREATE VIEW pages AS SELECT DISTINCT page FROM clicks;
INSERT INTO people (name) VALUES ('Ana'), ('Ben');
"""


def dumped_db(connect: Callable[..., Any], **kwargs: Any) -> Any:
    """Tables whose rows repeat (keyless log and link tables), a keyed one, an index and a view."""
    con = connect(":memory:", **kwargs)
    con.executescript(DUMPED)
    con.executemany("INSERT INTO clicks VALUES (?, ?)", [("home", 1)] * 8 + [("about", 1)] * 2)
    con.executemany("INSERT INTO links VALUES (?, ?, ?)", [(1, 2, b"x")] * 6 + [(2, 1, None)] * 3)
    con.commit()
    return con


def contents(con: Any) -> dict[str, Counter[tuple[Any, ...]]]:
    """Every table's rows as a multiset, read on a plain cursor."""
    cursor = sqlite3.Cursor(guarded_sqlite.unwrap(con))
    tables = [t for (t,) in cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    return {t: Counter(cursor.execute(f'SELECT * FROM "{t}"').fetchall()) for t in tables}


def restored(lines: list[str]) -> sqlite3.Connection:
    con = sqlite3.connect(":memory:")
    con.executescript("\n".join(lines))
    return con


@pytest.mark.parametrize("guard", [*PRESETS, "off"])
def test_p18_iterdump_dumps_every_row_under_every_preset(guard: str) -> None:
    """p18_iterdump_loses_rows.py: iterdump() ran its per-table SELECTs through the guarded cursor, and
    under guard="paper" P1 de-duplicated a table with repeated rows: 10 clicks dumped as 2. The dump now
    runs on plain cursors: it is line for line sqlite3's dump of the same database, and restoring it
    gives the same multiset of rows in every table."""
    con = dumped_db(guarded_sqlite.connect, guard=guard)
    lines = list(con.iterdump())
    assert lines == list(dumped_db(sqlite3.connect).iterdump())
    assert contents(restored(lines)) == contents(con)
    assert sum(contents(con)["clicks"].values()) == 10


def test_iterdump_behaves_like_sqlite3s() -> None:
    """Lazy (nothing runs before the first line), sqlite3's errors for a closed connection and for
    arguments, and the connection's row_factory reaching the dump's cursors as in sqlite3 (3.13's dump
    resets it; earlier ones use it)."""
    con, raw = dumped_db(guarded_sqlite.connect, guard="paper"), dumped_db(sqlite3.connect)
    lines = con.iterdump()
    assert next(lines) == "BEGIN TRANSACTION;"
    for c in (con, raw):
        c.row_factory = sqlite3.Row
    assert list(con.iterdump()) == list(raw.iterdump())
    errors = []
    for c in (con, raw):
        with pytest.raises(TypeError) as positional:
            c.iterdump(1)
        c.close()
        with pytest.raises(sqlite3.ProgrammingError) as closed:
            c.iterdump()
        errors.append((str(positional.value), str(closed.value)))
    assert errors[0] == errors[1]


def test_iterdump_filter_keyword_as_sqlite3_takes_it() -> None:
    """``filter=`` (new in 3.13) reaches sqlite3's dump: the same lines as sqlite3's from 3.13 on, the same
    TypeError before. Run on every version (a skip below 3.13 hid it wherever the suite runs on 3.11)."""
    con = dumped_db(guarded_sqlite.connect, guard="paper")
    plain = dumped_db(sqlite3.connect)
    if sys.version_info >= (3, 13):
        lines = list(con.iterdump(filter="clicks"))
        assert lines == list(plain.iterdump(filter="clicks"))
        assert any("clicks" in line for line in lines) and lines != list(plain.iterdump())  # it filtered
        return
    with pytest.raises(TypeError) as expected:
        plain.iterdump(filter="clicks")
    with pytest.raises(TypeError) as got:
        con.iterdump(filter="clicks")
    assert str(got.value) == str(expected.value)


def test_iterdump_switches_nothing_connection_wide() -> None:
    """The dump's cursors are its own: while a dump is half read, the connection's statements (here
    from another thread too) are still guarded, and the dump still gets every row."""

    con = dumped_db(guarded_sqlite.connect, guard="paper", check_same_thread=False)
    lines = con.iterdump()
    head = list(itertools.islice(lines, 4))
    actions = []

    def explode() -> None:
        cursor = con.execute("SELECT page FROM clicks")
        actions.append((cursor.fetchall(), cursor.guard_report.action))

    worker = threading.Thread(target=explode)
    worker.start()
    worker.join()
    explode()
    assert actions == [([("home",), ("about",)], "distinct_injected")] * 2
    assert contents(restored(head + list(lines))) == contents(con)


@pytest.mark.parametrize("guard", PRESETS)
def test_backup_copies_every_row_under_every_preset(guard: str) -> None:
    """backup() copies pages in C (no statement through a cursor): the copy holds every repeated row."""
    con = dumped_db(guarded_sqlite.connect, guard=guard)
    target = sqlite3.connect(":memory:")
    con.backup(target)
    assert contents(target) == contents(con)


ROWS = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(-2, 2), st.sampled_from([1.5, -0.0])),
        st.one_of(st.none(), st.sampled_from(["a", "a'b", 'q"', ""]), st.sampled_from([b"", b"\x00'"])),
    ),
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(rows=ROWS, copies=st.integers(1, 6), guard=st.sampled_from([*PRESETS, "off"]))
def test_property_iterdump_round_trips_repeated_rows(rows: list[tuple[Any, Any]], copies: int, guard: str) -> None:
    """Property: for any table whose rows repeat, under any preset, restoring the dump gives the same
    multiset of rows, and the dump is sqlite3's."""
    con = guarded_sqlite.connect(":memory:", guard=guard)
    con.execute("CREATE TABLE t (x, y)")
    con.execute("CREATE TABLE u (x, y)")
    con.executemany("INSERT INTO t VALUES (?, ?)", rows * copies)
    con.execute("INSERT INTO u SELECT t.x, t.y FROM t, (SELECT 1 UNION ALL SELECT 2)")  # every row twice more
    con.commit()  # sqlite3's backup() of a connection inside a write transaction waits forever
    lines = list(con.iterdump())
    assert contents(restored(lines)) == contents(con)
    plain = sqlite3.connect(":memory:")
    guarded_sqlite.unwrap(con).backup(plain)
    assert lines == list(plain.iterdump())
