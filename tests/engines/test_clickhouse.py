"""The guard on ClickHouse through chDB (``wrap(chdb.dbapi.connect(path))``): observe mode returns what raw
chDB returns, join copies are removed only where the data proves the projected table's declared key
unique (a MergeTree key keeps duplicates) and never merge two rows of it, the aggregate rule is exact
or leaves the values as written, and the guard's own statements are one read-only statement each.

chDB serves one folder per process (``conftest.chdb_path``); each test gets a database of its own.
Without chdb (the ``[clickhouse]`` extra) the tests skip, unless ``GUARDED_SQLITE_REQUIRE_CLICKHOUSE=1``
(CI's ClickHouse step), where that is a failure.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, note, settings
from hypothesis import strategies as st

import guarded_sqlite
from guarded_sqlite import GuardPolicy
from guarded_sqlite._analysis.schema_clickhouse import key_columns
from guarded_sqlite._engines import CLICKHOUSE, NO_PARAMETERS, GuardStatement, RerunRefused

Connect = Callable[[], Any]
EXPLODING = "SELECT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id"
HYPOTHESIS = settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], database=None
)


def run(raw: Any, sql: str) -> list[Any]:
    cur = raw.cursor()
    cur.execute(sql)
    rows = list(cur.fetchall())
    cur.close()
    return rows


def fill_shop(raw: Any, repeated_id: bool = False) -> None:
    """Four customers with six orders each (ORDER BY id: a declared key that ClickHouse does not enforce);
    ``repeated_id``: a fifth customer row repeats customer 3's id (a different person, same id)."""
    # ORDER BY (id): system.tables lists the key with its parentheses
    run(raw, "CREATE TABLE customers (id Int64, name String, city String) ENGINE = MergeTree ORDER BY (id)")
    run(raw, "CREATE TABLE orders (id Int64, customer_id Int64, amount Int64) ENGINE = MergeTree ORDER BY id")
    people = [(i, f"name{i}", f"city{i % 2}") for i in range(4)] + ([(3, "name3", "city9")] if repeated_id else [])
    run(raw, "INSERT INTO customers VALUES " + ", ".join(f"({i}, '{n}', '{c}')" for i, n, c in people))
    run(
        raw,
        "INSERT INTO orders VALUES " + ", ".join(f"({c * 6 + k}, {c}, {10 * k})" for c in range(4) for k in range(6)),
    )


@pytest.fixture
def shop(chdb_database: Connect) -> Any:
    raw = chdb_database()
    fill_shop(raw)
    return raw


# --- the multiplicity cases ------------------------------------------------------------------------------


def test_explosion_over_a_key_the_data_proves_is_patched(shop: Any) -> None:
    cur = guarded_sqlite.wrap(shop).cursor()
    assert cur.execute(EXPLODING) == 4
    rows = cur.fetchall()
    report = cur.guard_report
    assert type(rows) is tuple and Counter(rows) == Counter((f"name{i}",) for i in range(4))
    assert report.trigger == "cartesian_explosion" and report.provenance == "amplified"
    assert report.action in ("join_copies_removed", "distinct_injected") and cur.rowcount == 4
    assert (report.rows, report.final_rows) == (24, 4)


def test_a_repeated_key_gives_no_row_identity_and_the_rows_stay(chdb_database: Connect) -> None:
    """Two customers share id 3 (MergeTree keeps both): the key is not proven, the join copies are
    flagged and left (merging by id would merge two people), the aggregate is not corrected."""
    raw = chdb_database()
    fill_shop(raw, repeated_id=True)
    raw_rows = run(raw, EXPLODING)
    for guard in ("patch", "text_to_sql", GuardPolicy(tau_inject=0.1)):
        cur = guarded_sqlite.wrap(raw, guard=guard).cursor()
        cur.execute(EXPLODING)
        report = cur.guard_report
        assert Counter(cur.fetchall()) == Counter(raw_rows) and report.action == "none" and report.flagged
        assert "no row identity for c (customers)" in report.decisions[0].reason
    cur = guarded_sqlite.wrap(raw, guard="text_to_sql").cursor()
    cur.execute("SELECT sum(c.id) FROM customers c JOIN orders o ON o.customer_id = c.id")
    assert cur.fetchall() == ((6 * (0 + 1 + 2 + 3 + 3),),) and cur.guard_report.action == "none"
    assert "not corrected" in cur.guard_report.decisions[0].reason


def test_an_aggregate_over_a_proven_key_is_corrected_or_reported(shop: Any) -> None:
    sql = "SELECT sum(c.id) FROM customers c JOIN orders o ON o.customer_id = c.id"
    cur = guarded_sqlite.wrap(shop, guard="text_to_sql").cursor()
    cur.execute(sql)
    assert cur.fetchall() == ((6,),) and cur.guard_report.action == "aggregate_defanned"
    cur = guarded_sqlite.wrap(shop, guard="patch").cursor()
    cur.execute(sql)
    assert cur.fetchall() == ((36,),) and cur.guard_report.trigger == "aggregate_fanout"
    assert "36 -> 6" in cur.guard_report.decisions[0].reason


def test_the_proof_is_read_for_the_statement_at_hand(shop: Any) -> None:
    """A duplicate inserted after a statement was patched: the next statement is not patched."""
    con = guarded_sqlite.wrap(shop)
    cur = con.cursor()
    cur.execute(EXPLODING)
    assert cur.guard_report.action != "none"
    run(shop, "INSERT INTO customers VALUES (0, 'name0', 'elsewhere')")
    cur.execute(EXPLODING)
    assert cur.guard_report.action == "none" and len(cur.fetchall()) == 30


def test_a_left_joined_table_has_no_identity(chdb_database: Connect) -> None:
    """ClickHouse fills an unmatched LEFT JOIN row with the columns' defaults: key 0 and name '' of a
    customer that does not exist look like a real customer 0 named ''; they are never merged."""
    raw = chdb_database()
    run(raw, "CREATE TABLE p (k Int64, v String) ENGINE = MergeTree ORDER BY k")
    run(raw, "CREATE TABLE c (k Int64, w String) ENGINE = MergeTree ORDER BY k")
    run(raw, "INSERT INTO p VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd'), (5, 'e')")
    run(raw, "INSERT INTO c VALUES (0, '')")
    sql = "SELECT c.k, c.w FROM p LEFT JOIN c ON c.k = p.k"
    raw_rows = run(raw, sql)
    assert Counter(raw_rows) == Counter({(0, ""): 5})
    cur = guarded_sqlite.wrap(raw, guard=GuardPolicy(tau_inject=0.1)).cursor()
    cur.execute(sql)
    assert Counter(cur.fetchall()) == Counter(raw_rows) and cur.guard_report.action == "none"


def test_healthy_and_empty_results_are_served_as_chdb_serves_them(shop: Any) -> None:
    cur = guarded_sqlite.wrap(shop).cursor()
    raw = shop.cursor()
    for sql in ("SELECT id, name FROM customers ORDER BY id", "SELECT id FROM customers WHERE id > 100"):
        assert cur.execute(sql) == raw.execute(sql)
        assert cur.description == raw.description and cur.rowcount == raw.rowcount
        assert cur.fetchall() == raw.fetchall()
    assert cur.guard_report.trigger == "empty_result"


def test_parameters_are_bound_as_chdb_binds_them(shop: Any) -> None:
    cur = guarded_sqlite.wrap(shop).cursor()
    cur.execute("SELECT name FROM customers WHERE id = %s AND name != %s", (2, "it's"))
    assert cur.fetchall() == (("name2",),)
    assert cur.guard_report.final_sql == "SELECT name FROM customers WHERE id = 2 AND name != 'it''s'"
    cur.execute(EXPLODING + " WHERE o.amount >= ?", (0,))
    assert len(cur.fetchall()) == 4 and cur.guard_report.final_sql.endswith(">= 0")


def test_cursor_api_matches_chdb(shop: Any) -> None:
    """fetchmany() reads one row (chDB ignores arraysize), fetchone/iteration, tuples, context managers,
    executemany unprobed, and the connection has no execute (nor has chDB's)."""
    con = guarded_sqlite.wrap(shop)
    cur, raw = con.cursor(), shop.cursor()
    sql = "SELECT id FROM customers ORDER BY id"
    for c in (cur, raw):
        c.arraysize = 3
        c.execute(sql)
    assert cur.fetchmany() == raw.fetchmany() == ((0,),)
    assert cur.fetchone() == raw.fetchone() == (1,)
    assert cur.fetchmany(5) == raw.fetchmany(5) == ((2,), (3,))
    assert cur.fetchone() is raw.fetchone() is None
    cur.execute(sql)
    assert list(cur) == [(0,), (1,), (2,), (3,)]
    cur.executemany("INSERT INTO customers VALUES (%s, %s, %s)", [(10, "x", "y"), (11, "z", "y")])
    assert cur.guard_report.action == "none" and run(shop, "SELECT count() FROM customers") == [(6,)]
    with pytest.raises(AttributeError):
        con.execute  # noqa: B018
    with guarded_sqlite.wrap(shop) as inner:
        assert isinstance(inner, guarded_sqlite.GuardedCursor)
        inner.execute(EXPLODING)
        assert len(inner.fetchall()) == 4
    assert not shop.open  # chDB's connection closes when its with-block ends


def test_an_execution_error_is_chdbs_own(shop: Any) -> None:
    cur = guarded_sqlite.wrap(shop).cursor()
    with pytest.raises(Exception) as guarded_error:
        cur.execute("SELECT nope FROM customers")
    with pytest.raises(Exception) as raw_error:
        shop.cursor().execute("SELECT nope FROM customers")
    assert type(guarded_error.value) is type(raw_error.value) and "UNKNOWN_IDENTIFIER" in str(guarded_error.value)
    assert cur.guard_report.trigger == "exec_error"


def test_wrap_checks_the_dialect(shop: Any) -> None:
    assert guarded_sqlite.wrap(shop, dialect="clickhouse").guard_policy.mode == "patch"
    with pytest.raises(ValueError, match="does not match a clickhouse connection"):
        guarded_sqlite.wrap(shop, dialect="duckdb")


# --- the guard's own statements --------------------------------------------------------------------------


def fetch(raw: Any, sql: str, time_limit: float | None = 5.0) -> list[Any] | None:
    return CLICKHOUSE.read_only_fetch(raw, GuardStatement(sql, NO_PARAMETERS, None, 1000, time_limit))


def test_guard_statements_are_one_read_only_statement(shop: Any) -> None:
    assert fetch(shop, "SELECT count() FROM customers -- a comment;\n") == [(4,)]
    with pytest.raises(RerunRefused, match="more than one statement"):
        fetch(shop, "SELECT 1; INSERT INTO customers VALUES (9, 'x', 'y')")
    for own in ("SELECT 1 SETTINGS readonly = 0", "SELECT 1 FORMAT CSV", "SELECT 1 INTO OUTFILE '/tmp/gs_chdb.csv'"):
        with pytest.raises(RerunRefused, match="SETTINGS, FORMAT or INTO OUTFILE"):
            fetch(shop, own)
    assert not Path("/tmp/gs_chdb.csv").exists()
    for write in (
        "INSERT INTO customers SELECT 9, 'x', 'y'",
        "SELECT * FROM file('/etc/hostname', 'LineAsString')",
        "INSERT INTO FUNCTION file('/tmp/guarded_sqlite_chdb_out.csv', 'CSV') SELECT 1",
    ):
        with pytest.raises(Exception, match=r"READONLY|readonly"):
            fetch(shop, write)
    assert run(shop, "SELECT count() FROM customers") == [(4,)]
    assert not Path("/tmp/guarded_sqlite_chdb_out.csv").exists()
    # The caller's session is as it was: writable, its own settings.
    assert run(shop, "SELECT getSetting('readonly')") == [(0,)]
    run(shop, "INSERT INTO customers VALUES (9, 'x', 'y')")


def test_guard_statements_in_a_read_only_session(shop: Any) -> None:
    """A session set read-only (as the agent tools set it) refuses every setting: the guard's statements
    run under the session's own readonly and time limit, and still cannot write."""
    run(shop, "SET max_execution_time = 1")
    run(shop, "SET readonly = 1")
    assert fetch(shop, "SELECT count() FROM customers") == [(4,)]
    with pytest.raises(Exception, match=r"READONLY|readonly"):
        fetch(shop, "INSERT INTO customers SELECT 9, 'x', 'y'")
    with pytest.raises(Exception, match=r"TIMEOUT_EXCEEDED|Timeout exceeded"):
        fetch(shop, "SELECT count() FROM numbers(100000000000)", time_limit=30.0)
    cur = guarded_sqlite.wrap(shop).cursor()
    cur.execute(EXPLODING)
    assert len(cur.fetchall()) == 4 and cur.guard_report.action != "none"


def test_guard_statements_stop_at_their_time_limit(shop: Any) -> None:
    with pytest.raises(Exception, match=r"TIMEOUT_EXCEEDED|Timeout exceeded"):
        fetch(shop, "SELECT count() FROM numbers(100000000000)", time_limit=0.3)
    assert run(shop, "SELECT 1") == [(1,)]


def test_a_slow_rescue_candidate_is_stopped(shop: Any) -> None:
    con = guarded_sqlite.wrap(shop, guard=GuardPolicy(rerun_timeout=0.3))
    cur = con.cursor()
    cur.execute(EXPLODING, candidates=["SELECT count() FROM numbers(100000000000)", "SELECT name FROM customers"])
    report = cur.guard_report
    assert report.flagged and run(shop, "SELECT 1") == [(1,)]


def test_catalog_key_expressions() -> None:
    assert key_columns("id") == ("id",) == key_columns("(id)")
    assert key_columns("(a), (b)") is None
    assert key_columns("a, `b c`") == ("a", "b c")
    assert key_columns("toDate(ts), id") is None
    assert key_columns("tuple()") is None


def test_keys_that_are_not_candidates(chdb_database: Connect) -> None:
    """A key over an expression, a Nullable key column, and no key at all give no identity, whatever the data."""
    raw = chdb_database()
    run(raw, "CREATE TABLE o (id Int64, c Int64) ENGINE = MergeTree ORDER BY id")
    run(raw, "INSERT INTO o SELECT number, number % 2 FROM numbers(20)")
    tables = {
        "e": "(id Int64, v String) ENGINE = MergeTree ORDER BY intHash64(id)",
        "n": "(id Nullable(Int64), v String) ENGINE = MergeTree ORDER BY id SETTINGS allow_nullable_key = 1",
        "m": "(id Int64, v String) ENGINE = Memory",
    }
    for name, body in tables.items():
        run(raw, f"CREATE TABLE {name} {body}")
        run(raw, f"INSERT INTO {name} VALUES (0, 'a'), (1, 'a')")
        cur = guarded_sqlite.wrap(raw, guard=GuardPolicy(tau_inject=0.1)).cursor()
        cur.execute(f"SELECT t.v FROM {name} t JOIN o ON o.c = t.id")
        assert len(cur.fetchall()) == 20 and cur.guard_report.action == "none", name


def test_importing_guarded_sqlite_does_not_import_chdb() -> None:
    script = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parents[2])!r})
import guarded_sqlite, sqlite3
guarded_sqlite.wrap(sqlite3.connect(":memory:")).close()
assert "chdb" not in sys.modules
"""
    subprocess.run([sys.executable, "-c", script], check=True)


# --- properties ------------------------------------------------------------------------------------------

NAMES = st.sampled_from(["Ana", "Ben", "ana", ""])


@st.composite
def shops(draw: Any) -> dict[str, Any]:
    """Parents whose declared key may repeat (ClickHouse keeps both rows), children and a second child table."""
    count = draw(st.integers(1, 5))
    keys = list(range(1, count + 1))
    if draw(st.booleans()):
        keys += draw(st.lists(st.sampled_from(keys), min_size=1, max_size=2))  # the key repeats in the data
    parents = [(k, draw(NAMES)) for k in keys]
    refs = st.sampled_from([*range(1, count + 1), 99])
    children = draw(st.lists(st.tuples(refs, st.sampled_from(["x", "y"])), max_size=12))
    others = draw(st.lists(refs, max_size=5))
    shape = draw(st.sampled_from(["parent", "both", "pinned", "constant"]))
    return {"parents": parents, "children": children, "others": others, "shape": shape}


STATEMENTS = {
    # (statement, the undeclared unique uid of each projected table, which the oracle appends)
    "parent": ("SELECT p.v FROM p JOIN c ON c.p_ref = p.k", "p.uid"),
    "both": ("SELECT p.v, c.w FROM p JOIN c ON c.p_ref = p.k JOIN d ON d.p_ref = p.k", "p.uid, c.uid"),
    "pinned": ("SELECT p.v FROM p JOIN c ON c.p_ref = p.k WHERE c.w = 'x'", "p.uid"),
    "constant": ("SELECT 'x' FROM p JOIN c ON c.p_ref = p.k", ""),
}


def build(raw: Any, shop: dict[str, Any]) -> None:
    for table in ("p", "c", "d"):
        run(raw, f"DROP TABLE IF EXISTS {table}")
    run(raw, "CREATE TABLE p (uid Int64, k Int64, v String) ENGINE = MergeTree ORDER BY k")
    run(raw, "CREATE TABLE c (uid Int64, p_ref Int64, w String) ENGINE = MergeTree ORDER BY uid")
    run(raw, "CREATE TABLE d (uid Int64, p_ref Int64) ENGINE = MergeTree ORDER BY uid")
    uid = iter(range(1, 10_000))
    cur = raw.cursor()
    cur.executemany("INSERT INTO p VALUES (%s, %s, %s)", [(next(uid), k, v) for k, v in shop["parents"]])
    if shop["children"]:
        cur.executemany("INSERT INTO c VALUES (%s, %s, %s)", [(next(uid), *child) for child in shop["children"]])
    if shop["others"]:
        cur.executemany("INSERT INTO d VALUES (%s, %s)", [(next(uid), r) for r in shop["others"]])


def without_copies(raw: Any, sql: str, uids: str) -> Counter[tuple[Any, ...]]:
    """The oracle, from the definition: one row per combination of the projected tables' physical rows."""
    if not uids:
        return Counter(run(raw, sql))
    cur = raw.cursor()
    cur.execute(sql)
    width = len(cur.description)
    kept: Counter[tuple[Any, ...]] = Counter()
    for row in set(run(raw, sql.replace(" FROM", f", {uids} FROM", 1))):
        kept[row[:width]] += 1
    return kept


@HYPOTHESIS
@given(shops())
@example(
    {"parents": [(1, "Ana"), (2, "Ana")], "children": [(1, "x")] * 3 + [(2, "x")], "others": [], "shape": "parent"}
)
@example({"parents": [(1, "Ana"), (1, "Ana")], "children": [(1, "x")] * 3, "others": [], "shape": "parent"})
def test_patch_serves_the_rows_or_the_rows_without_join_copies(chdb_database: Connect, shop: dict[str, Any]) -> None:
    """Under ``"patch"`` the guard serves chDB's rows, or chDB's rows minus the join copies; two distinct
    rows of a projected table are never merged, even where they share a declared key."""
    sql, uids = STATEMENTS[shop["shape"]]
    raw = chdb_database()
    build(raw, shop)
    rows = run(raw, sql)
    expected = without_copies(raw, sql, uids)
    cur = guarded_sqlite.wrap(raw, guard=GuardPolicy(tau_inject=0.05)).cursor()
    cur.execute(sql)
    served = cur.fetchall()
    report = cur.guard_report
    note(f"{sql}: {report.action}, {report.provenance}, {[d.reason for d in report.decisions]}")
    event(f"action {report.action}")
    if report.action == "none":
        assert Counter(served) == Counter(rows)
    else:
        assert Counter(served) == expected
    counted = Counter(served)
    assert all(counted[value] >= n for value, n in expected.items())
    if len({k for k, _ in shop["parents"]}) < len(shop["parents"]) and shop["shape"] != "constant":
        assert report.action == "none"  # a repeated key: no row identity, nothing removed


@HYPOTHESIS
@given(shops(), st.sampled_from(["sum(p.k)", "avg(p.k)", "count(p.v)", "max(p.k)", "sum(DISTINCT p.k)"]))
def test_aggregates_are_exact_or_served_as_written(
    chdb_database: Connect, shop: dict[str, Any], aggregate: str
) -> None:
    """Under ``"text_to_sql"`` an aggregate over the fanned-out join is either chDB's value or the value
    over each parent row once (the oracle: computed in Python from the physical rows)."""
    raw = chdb_database()
    build(raw, shop)
    sql = f"SELECT {aggregate} FROM p JOIN c ON c.p_ref = p.k"
    written = run(raw, sql)
    referenced = {r for r, _ in shop["children"]}
    ks = [k for (k,) in run(raw, "SELECT k FROM p") if k in referenced]  # each parent row once
    truth: Any = {
        "sum(p.k)": sum(ks),
        "avg(p.k)": sum(ks) / len(ks) if ks else None,
        "count(p.v)": len(ks),
        "max(p.k)": max(ks, default=None),
        "sum(DISTINCT p.k)": sum(set(ks)),
    }[aggregate]
    cur = guarded_sqlite.wrap(raw, guard="text_to_sql").cursor()
    cur.execute(sql)
    served = cur.fetchall()
    report = cur.guard_report
    note(f"{written} -> {served}: {report.action} {[d.reason for d in report.decisions]}")
    event(f"{aggregate}: {report.action}")
    if report.action == "none":
        assert repr(list(served)) == repr(written)  # avg of no rows is nan, which equals nothing
    else:
        assert report.action == "aggregate_defanned"
        value = served[0][0]
        assert value == pytest.approx(truth) if isinstance(value, float) else value == truth
        assert len(set(ks)) == len(ks)  # corrected only where the key is unique in the data


@HYPOTHESIS
@given(shops(), st.sampled_from(sorted(STATEMENTS)), st.sampled_from(["observe", "off"]))
def test_observe_returns_exactly_what_chdb_returns(
    chdb_database: Connect, shop: dict[str, Any], shape: str, mode: str
) -> None:
    """Rows (in order), description, rowcount and execute's answer are chDB's own."""
    raw = chdb_database()
    build(raw, shop)
    sql = STATEMENTS[shape][0] + " ORDER BY 1"
    plain = raw.cursor()
    answer = plain.execute(sql)
    cur = guarded_sqlite.wrap(raw, guard=mode).cursor()
    assert cur.execute(sql) == answer
    assert cur.description == plain.description and cur.rowcount == plain.rowcount
    assert cur.fetchall() == plain.fetchall()


def test_values_of_clickhouse_types_survive_the_guard(chdb_database: Connect) -> None:
    raw = chdb_database()
    sql = (
        "SELECT toDecimal64(1.5, 2) AS d, [1, 2] AS a, (1, 'x') AS t, NULL AS n, toDate('2020-01-01') AS day, "
        "nan AS f FROM numbers(3)"
    )
    plain = raw.cursor()
    plain.execute(sql)
    expected = plain.fetchall()
    cur = guarded_sqlite.wrap(raw, guard="patch").cursor()
    cur.execute(sql)
    rows = cur.fetchall()
    assert repr(rows) == repr(expected) and rows[0][0] == Decimal("1.5")


def test_the_engines_page_clickhouse_block_runs_as_written(chdb_path: str, tmp_path: Path) -> None:
    """docs/guide/engines.md's ClickHouse block (skipped by tests/docs, whose run has no chdb), on its own."""
    from tests.docs.test_readme import BLOCKS, ROOT, needs_chdb, run_blocks

    blocks = [block for block in BLOCKS if block.page == "docs/guide/engines.md" and needs_chdb(block)]
    assert len(blocks) == 1
    run_blocks(blocks, ROOT / blocks[0].page, tmp_path)
