"""The guard presets over the duplicate-provenance analysis: "patch" (default), "text_to_sql", "paper".

Every application shape from issue 11 is flagged (>= 5 copies of a row) and must be left alone by the
default preset, with the reason in the report; P1 still fires on a join that multiplies rows; the
catalog is read only when a rule needs a verdict, cached per connection and re-read after DDL.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import guarded_sqlite
import guarded_sqlite._analysis.catalog
import guarded_sqlite._analysis.schema
from guarded_sqlite import GuardPolicy
from guarded_sqlite.policy import resolve_policy
from tests.engines.test_engines import EngineDB, _make_db, pg_schema  # noqa: F401  # pg_schema: a fixture _make_db asks for
from tests.helpers import EXPLODING_SQL, fill_fanout

COPIES = 10  # rows per shape, all equal: dup_ratio 0.9, flagged at the default tau_inject 0.8

APP_SCHEMA = """
CREATE TABLE sample (id INTEGER PRIMARY KEY, value INTEGER);
CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER);
CREATE TABLE note (id INTEGER PRIMARY KEY, note TEXT);
CREATE TABLE item (id INTEGER PRIMARY KEY, note_id INTEGER REFERENCES note (id));
"""


def _fill_app(con: Any) -> None:
    con.executescript(APP_SCHEMA)
    con.executemany("INSERT INTO sample VALUES (?, 7)", [(i,) for i in range(COPIES)])
    con.executemany("INSERT INTO t VALUES (?, 3)", [(i,) for i in range(COPIES)])
    con.executemany("INSERT INTO note VALUES (?, 'test')", [(i,) for i in range(COPIES)])
    con.executemany("INSERT INTO item VALUES (?, ?)", [(i, i) for i in range(COPIES)])  # one note per item
    try:
        con.execute("CREATE VIRTUAL TABLE post USING fts4(title, body)")
        con.executemany("INSERT INTO post (title, body) VALUES ('t', 'hello world')", [()] * COPIES)
    except sqlite3.OperationalError:  # no FTS4 in this SQLite: an ordinary table, the score computed all the same
        con.execute("CREATE TABLE post (id INTEGER PRIMARY KEY, title TEXT, body TEXT)")
        con.executemany("INSERT INTO post (title, body) VALUES ('t', 'hello world')", [()] * COPIES)
    con.commit()


def _fts_sql(con: Any) -> tuple[str, tuple[Any, ...]]:
    fts = "VIRTUAL" in (con.execute("SELECT sql FROM sqlite_master WHERE name = 'post'").fetchone()[0] or "")
    if fts:
        return "SELECT fts_rank(matchinfo(post, ?)) FROM post WHERE post MATCH ?", ("pcx", "hello")
    return "SELECT fts_rank(body) FROM post WHERE body LIKE ?", ("%hello%",)


def _app(guard: Any = None) -> guarded_sqlite.GuardedConnection:
    con = guarded_sqlite.connect(":memory:", guard=guard)
    _fill_app(con)
    con.create_function("fts_rank", 1, lambda _: 0.5, deterministic=True)
    return con


# The shapes that legitimately repeat a row; each returns COPIES equal rows.
APP_SHAPES = [
    pytest.param("SELECT SUM(value) OVER () FROM sample", id="window-sum"),
    pytest.param("SELECT count(*) OVER () FROM t", id="window-count"),
    pytest.param("SELECT max(v) OVER (PARTITION BY 1) FROM t", id="window-max-partition"),
    pytest.param("SELECT 'x' FROM t", id="constant"),
    pytest.param("SELECT abs(1) FROM t", id="computed-constant"),
    pytest.param("FTS", id="fts-score"),
    pytest.param('SELECT "note"."note" AS "note" FROM "note" ORDER BY 1', id="django-values-list"),
    pytest.param("SELECT note.note FROM item LEFT JOIN note ON item.note_id = note.id", id="django-values-lookup"),
]


def _run(con: Any, sql: str) -> tuple[list[Any], Any]:
    if sql == "FTS":
        sql, params = _fts_sql(con)
        cur = con.execute(sql, params)
    else:
        cur = con.execute(sql)
    return cur.fetchall(), cur.guard_report


@pytest.fixture
def catalog_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every catalog read of facts the guard makes: SQLite, one entry per table whose PRAGMAs are
    read (``sqlite:<table>``); DuckDB and PostgreSQL, one per whole-catalog read (the reader's name)."""
    reads: list[str] = []
    real_table = guarded_sqlite._analysis.catalog.sqlite_table_facts

    def table_read(cur: Any, schema: str, name: str, kind: str, sql: str) -> Any:
        reads.append(f"sqlite:{name}")
        return real_table(cur, schema, name, kind, sql)

    monkeypatch.setattr(guarded_sqlite._analysis.catalog, "sqlite_table_facts", table_read)
    for name in ("read_duckdb_schema", "read_postgres_schema"):
        real = getattr(guarded_sqlite._analysis.catalog, name)

        def counting(con: Any, real: Any = real, name: str = name) -> Any:
            reads.append(name)
            return real(con)

        monkeypatch.setattr(guarded_sqlite._analysis.catalog, name, counting)
    return reads


# --- the API ---------------------------------------------------------------------------------------------


def test_presets_resolve_to_policies() -> None:
    assert resolve_policy(None) == resolve_policy("patch") == GuardPolicy() == GuardPolicy(provenance="keys")
    assert resolve_policy("text_to_sql") == GuardPolicy.text_to_sql() == GuardPolicy(provenance="text_to_sql")
    assert resolve_policy("paper") == GuardPolicy.paper() == GuardPolicy(provenance="off")
    assert resolve_policy("observe").mode == "observe" and resolve_policy("off").mode == "off"
    assert GuardPolicy.text_to_sql(tau_amplified=0.4).tau_amplified == 0.4
    assert [resolve_policy(p).preset for p in ("patch", "text_to_sql", "paper", "observe", "off")] == [
        "patch",
        "text_to_sql",
        "paper",
        "observe",
        "off",
    ]
    with pytest.raises(ValueError, match="text_to_sql"):
        resolve_policy("bogus")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="provenance"):
        GuardPolicy(provenance="maybe")  # type: ignore[arg-type]
    for bad in (0.0, 1.5, True):
        with pytest.raises(ValueError, match="tau_amplified"):
            GuardPolicy(tau_amplified=bad)


@pytest.mark.parametrize("guard", ["text_to_sql", "paper"])
def test_every_entry_point_takes_the_preset_names(guard: str) -> None:
    con = guarded_sqlite.connect(":memory:", guard=guard)  # type: ignore[arg-type]
    assert con.guard_policy == resolve_policy(guard)  # type: ignore[arg-type]
    raw = sqlite3.connect(":memory:")
    assert guarded_sqlite.wrap(raw, guard=guard).guard_policy == resolve_policy(guard)  # type: ignore[arg-type]
    guarded_sqlite.install(guard=guard)  # type: ignore[arg-type]
    try:
        assert sqlite3.connect(":memory:").guard_policy == resolve_policy(guard)  # type: ignore[attr-defined]
    finally:
        guarded_sqlite.uninstall()


# --- "patch": application shapes left alone, join fan-out repaired -------------------------------------


@pytest.mark.parametrize("sql", APP_SHAPES)
def test_patch_leaves_flagged_application_shapes_alone_and_says_why(sql: str) -> None:
    con = _app()
    rows, report = _run(con, sql)
    assert len(rows) == COPIES and len(set(rows)) == 1
    assert report.flagged and report.trigger == "cartesian_explosion"  # still flagged
    assert report.action == "none" and report.final_sql == report.sql
    assert report.provenance == "value_repeats" and report.provenance_evidence
    (decision,) = report.decisions
    assert decision.rule == "P1" and not decision.applied and "value repeats" in decision.reason
    assert "provenance=value_repeats" in report.summary()
    assert "value_repeats" in report._repr_html_()


@pytest.mark.parametrize("sql", APP_SHAPES)
def test_paper_patches_the_same_shapes(sql: str) -> None:
    """The paper's literal P1 de-duplicates every one of them (the four wrong patches of the issue)."""
    con = _app("paper")
    rows, report = _run(con, sql)
    assert len(rows) == 1 and report.action == "distinct_injected"
    assert report.provenance is None
    (decision,) = report.decisions
    assert decision.applied and "provenance" not in decision.reason


@pytest.mark.parametrize("sql", APP_SHAPES)
def test_observe_serves_sqlite3s_rows_and_reads_no_catalog(sql: str, catalog_reads: list[str]) -> None:
    con = _app("observe")
    raw = sqlite3.connect(":memory:")
    _fill_app(raw)
    raw.create_function("fts_rank", 1, lambda _: 0.5, deterministic=True)
    rows, report = _run(con, sql)
    expected = raw.execute(*_fts_sql(raw)).fetchall() if sql == "FTS" else raw.execute(sql).fetchall()
    assert rows == expected and report.flagged and report.action == "none" and report.decisions == ()
    assert report.provenance is None and catalog_reads == []


def test_patch_repairs_a_join_fan_out_and_logs_the_evidence(caplog: pytest.LogCaptureFixture) -> None:
    con = guarded_sqlite.connect(":memory:")
    fill_fanout(con)
    with caplog.at_level(logging.INFO, logger="guarded_sqlite"):
        rows, report = _run(con, EXPLODING_SQL)
    assert sorted(rows) == [(f"name{i}",) for i in range(4)]
    assert report.action == "distinct_injected" and report.provenance == "amplified"
    assert "o (orders) fans out c (customers)" in (report.provenance_evidence or "")
    assert "join amplification" in report.decisions[0].reason
    (record,) = [r for r in caplog.records if r.name == "guarded_sqlite"]
    assert "distinct_injected" in record.getMessage() and "provenance amplified" in record.getMessage()


def test_orm_filter_across_a_multi_valued_relation_below_tau() -> None:
    """Django's ``Customer.objects.filter(orders__amount__gte=0)``: one row per matching order, by
    contract. Below tau_inject the default leaves it alone without analysing it; text_to_sql (answers
    are sets) de-duplicates it, which is why that preset is not the default."""
    orm_sql = 'SELECT "c"."id", "c"."name" FROM customers c JOIN orders o ON o.customer_id = c.id WHERE o.amount >= ?'
    patch = guarded_sqlite.connect(":memory:")
    fill_fanout(patch, orders_per_customer=2)  # dup_ratio 0.5
    cur = patch.execute(orm_sql, (0,))
    assert len(cur.fetchall()) == 8
    report = cur.guard_report
    assert not report.flagged and report.action == "none" and report.decisions == () and report.provenance is None

    text = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    fill_fanout(text, orders_per_customer=2)
    cur = text.execute(orm_sql, (0,))
    assert len(cur.fetchall()) == 4 and cur.guard_report.provenance == "identified"


# --- "text_to_sql": below tau on amplification only -------------------------------------------------------


def test_text_to_sql_fires_below_tau_on_amplification_only() -> None:
    con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    fill_fanout(con, orders_per_customer=2)  # the join repeats each customer twice: dup_ratio 0.5
    rows, report = _run(con, EXPLODING_SQL)
    assert len(rows) == 4 and report.trigger is None and not report.flagged
    assert report.action == "distinct_injected" and report.provenance == "amplified"
    assert "tau_amplified 0.3" in report.decisions[0].reason

    # One column of one table, 8 rows, 2 cities: the same ratio, but value repeats.
    con.executemany("INSERT INTO customers VALUES (?, ?, ?)", [(i, f"name{i}", f"city{i % 2}") for i in range(4, 8)])
    rows, report = _run(con, "SELECT city FROM customers")
    assert len(rows) == 8 and report.action == "none" and report.provenance == "value_repeats"
    assert "only on join amplification" in report.decisions[0].reason

    # The patch preset does not look at either.
    patch = guarded_sqlite.wrap(guarded_sqlite.unwrap(con), guard="patch")
    for sql in (EXPLODING_SQL, "SELECT city FROM customers"):
        _, report = _run(patch, sql)
        assert report.action == "none" and report.decisions == () and report.provenance is None


def test_text_to_sql_leaves_duplicates_below_tau_amplified_unanalysed(catalog_reads: list[str]) -> None:
    con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    fill_fanout(con, customers=10, orders_per_customer=1)
    con.execute("INSERT INTO orders VALUES (100, 0, 5)")  # one customer twice: dup_ratio 1/11
    rows, report = _run(con, EXPLODING_SQL)
    assert len(rows) == 11 and report.action == "none" and report.decisions == () and catalog_reads == []


def test_text_to_sql_on_a_large_result_counts_exactly_down_to_tau_amplified() -> None:
    """Past the small-result size the probe stops early; text_to_sql still sees a 0.5 ratio."""
    con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    fill_fanout(con, customers=3000, orders_per_customer=2)
    rows, report = _run(con, EXPLODING_SQL)
    assert len(rows) == 3000 and report.action == "distinct_injected" and report.trigger is None


# --- P2 refusal -----------------------------------------------------------------------------------------


def _country_city(guard: str) -> Any:
    con = guarded_sqlite.connect(":memory:", guard=guard)  # type: ignore[arg-type]
    con.executescript(
        "CREATE TABLE country (Code TEXT PRIMARY KEY, Name TEXT);"
        "CREATE TABLE city (ID INTEGER PRIMARY KEY, Name TEXT, CountryCode TEXT REFERENCES country (Code));"
    )
    con.executemany("INSERT INTO country VALUES (?, ?)", [("A", "Aland"), ("B", "Bland")])
    cities = [(i, f"city{i}", "AB"[i % 2]) for i in range(20)] + [(20, "city0", "B")]  # one name twice
    con.executemany("INSERT INTO city VALUES (?, ?, ?)", cities)
    return con


P2_SQL = "SELECT DISTINCT T2.Name FROM country T1 JOIN city T2 ON T2.CountryCode = T1.Code"


VIEW_SQL = "SELECT DISTINCT c.Name FROM city c JOIN capital k ON k.Name = c.Name AND k.CountryCode = c.CountryCode"


@pytest.mark.parametrize("guard", ["patch", "text_to_sql"])
@pytest.mark.parametrize(
    ("sql", "paper_rows"),
    [
        (P2_SQL, 21),  # hides the countries' multiplication by their cities (a city name twice)
        ("SELECT DISTINCT Name FROM city", 21),  # one table's repeated values: what the DISTINCT says
        (VIEW_SQL, 21),  # a view: the analysis cannot tell (unknown), c16's shape
    ],
    ids=["hides-amplification", "value-repeats", "unknown"],
)
def test_the_key_presets_keep_every_distinct_and_run_nothing(guard: str, sql: str, paper_rows: int) -> None:
    """P2 is the paper preset's rule: the key-based presets keep a DISTINCT as written, read no catalog
    and re-execute nothing for it; the paper's P2 removes each of these (21 rows, dup_ratio 1/21)."""
    con = _country_city(guard)
    con.execute("CREATE VIEW capital AS SELECT CountryCode, Name FROM city")
    seen: list[str] = []
    guarded_sqlite.unwrap(con).set_trace_callback(seen.append)
    rows, report = _run(con, sql)
    assert len(rows) == 20 and report.action == "none" and report.decisions == () and report.provenance is None
    assert seen == [sql], seen  # the statement itself, nothing else
    paper = _country_city("paper")
    paper.execute("CREATE VIEW capital AS SELECT CountryCode, Name FROM city")
    rows, report = _run(paper, sql)
    assert len(rows) == paper_rows and report.action == "distinct_removed"


def test_paper_p2_removes_that_distinct() -> None:
    rows, report = _run(_country_city("paper"), P2_SQL)
    assert len(rows) == 21 and report.action == "distinct_removed" and report.provenance is None


# --- cost: no catalog on the healthy path, one read per schema version -------------------------------------


@pytest.mark.parametrize("guard", ["patch", "text_to_sql"])
def test_the_catalog_is_never_read_for_a_duplicate_free_result(guard: str) -> None:
    con = guarded_sqlite.connect(":memory:", guard=guard)  # type: ignore[arg-type]
    fill_fanout(con)
    seen: list[str] = []
    guarded_sqlite.unwrap(con).set_trace_callback(seen.append)
    rows, report = _run(con, "SELECT c.name, o.id FROM customers c JOIN orders o ON o.customer_id = c.id")
    assert len(rows) == 24 and report.dup_ratio == 0 and report.decisions == ()
    assert not any("PRAGMA" in s.upper() or "SQLITE_MASTER" in s.upper() for s in seen), seen
    # The same connection does read it once a rule needs a verdict: the check above could fail.
    _run(con, EXPLODING_SQL)
    assert any("table_info" in s or "sqlite_master" in s for s in seen)


def test_verdicts_and_facts_are_cached_per_connection(catalog_reads: list[str]) -> None:
    con = _app()
    for _ in range(3):
        _, report = _run(con, "SELECT 'x' FROM t")
        assert report.provenance == "value_repeats"
    _, report = _run(con, "SELECT abs(1) FROM t")
    assert catalog_reads == ["sqlite:t"]  # the one table named, read once for both statements
    assert len(con._self_guard.catalog.verdicts) == 2


def test_a_repeated_statement_checks_its_tables_by_lookups_only() -> None:
    """A verdict is served again after lookups: the schema list, the TEMP names, the tables'
    ``sqlite_master`` rows by rowid and their index lists; no scan of the catalog, no table PRAGMA."""
    con = _app()
    _run(con, "SELECT 'x' FROM t")
    seen: list[str] = []
    guarded_sqlite.unwrap(con).set_trace_callback(seen.append)
    _, report = _run(con, "SELECT 'x' FROM t")
    assert report.provenance == "value_repeats"
    catalog = [s for s in seen if s != "SELECT 'x' FROM t"]
    assert catalog[0] == "PRAGMA database_list", seen
    assert "sqlite_temp_master" in catalog[1] and "WHERE rowid = " in catalog[1], seen  # one statement
    assert catalog[2] == 'PRAGMA "main".index_list("t")' and len(catalog) == 3, seen


def _cust_db(con: Any) -> None:
    con.executescript(
        "CREATE TABLE cust (id INTEGER, name TEXT);"  # no key on id: a join on it can fan out
        "CREATE TABLE ord (id INTEGER PRIMARY KEY, cust_id INTEGER);"
    )
    con.executemany("INSERT INTO cust VALUES (?, ?)", [(i, f"n{i}") for i in range(2)])
    con.executemany("INSERT INTO ord VALUES (?, ?)", [(i, i % 2) for i in range(12)])
    con.commit()


LOOKUP_SQL = "SELECT c.name FROM ord o JOIN cust c ON o.cust_id = c.id"


def test_ddl_through_the_connection_invalidates_the_schema_cache(catalog_reads: list[str]) -> None:
    con = guarded_sqlite.connect(":memory:")
    _cust_db(con)
    rows, report = _run(con, LOOKUP_SQL)
    assert report.provenance == "amplified" and len(rows) == 2  # cust.id is no key: cust may fan out
    con.execute("CREATE UNIQUE INDEX cust_id ON cust (id)")
    rows, report = _run(con, LOOKUP_SQL)
    assert report.provenance == "value_repeats" and len(rows) == 12  # now an N:1 lookup: left alone
    assert sorted(catalog_reads) == ["sqlite:cust", "sqlite:cust", "sqlite:ord"]  # only cust changed


def test_ddl_by_another_connection_invalidates_it_too(tmp_path: Path, catalog_reads: list[str]) -> None:
    path = tmp_path / "shared.db"
    con = guarded_sqlite.connect(path)
    _cust_db(con)
    assert _run(con, LOOKUP_SQL)[1].provenance == "amplified"
    other = sqlite3.connect(path)
    other.execute("CREATE UNIQUE INDEX cust_id ON cust (id)")
    other.commit()
    assert _run(con, LOOKUP_SQL)[1].provenance == "value_repeats"
    assert sorted(catalog_reads) == ["sqlite:cust", "sqlite:cust", "sqlite:ord"]


def test_a_temp_table_shadowing_a_main_table_invalidates_the_cache() -> None:
    con = guarded_sqlite.connect(":memory:")
    _cust_db(con)
    assert _run(con, LOOKUP_SQL)[1].provenance == "amplified"
    con.execute("CREATE TEMP TABLE cust (id INTEGER PRIMARY KEY, name TEXT)")
    con.executemany("INSERT INTO temp.cust VALUES (?, ?)", [(0, "n0"), (1, "n1")])
    assert _run(con, LOOKUP_SQL)[1].provenance == "value_repeats"


@pytest.mark.parametrize("guard", ["patch", "text_to_sql"])
def test_an_unreadable_catalog_is_unknown_and_changes_no_row(guard: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail closed: a catalog that cannot be read gives ``unknown``, and the key-based presets leave the
    rows alone (the explosion stays flagged); the paper's preset reads no catalog and de-duplicates."""

    def broken(*args: Any) -> Any:
        raise guarded_sqlite._analysis.schema.CatalogUnreadable("catalog gone")

    monkeypatch.setattr(guarded_sqlite._analysis.catalog, "sqlite_declarations", broken)
    con = _app(guard)
    rows, report = _run(con, "SELECT 'x' FROM t")
    assert len(rows) == COPIES and report.flagged and report.action == "none" and report.provenance == "unknown"
    assert "catalog gone" in (report.provenance_evidence or "")
    assert "acts only on established join amplification" in report.decisions[0].reason
    rows, report = _run(_app("paper"), "SELECT 'x' FROM t")
    assert len(rows) == 1 and report.action == "distinct_injected"


# --- other engines ----------------------------------------------------------------------------------------


def _engine_verdicts(db: EngineDB, reads: list[str]) -> None:
    db.raw_run("CREATE TABLE notes (id INTEGER PRIMARY KEY, note TEXT)")
    db.raw_many(f"INSERT INTO notes VALUES ({db.param}, 'test')", [(i,) for i in range(COPIES)])
    con = db.guarded("patch")
    rows, report = db.fetch(con, EXPLODING_SQL)
    assert len(rows) == 4 and report.action == "distinct_injected" and report.provenance == "amplified"
    rows, report = db.fetch(con, "SELECT notes.note FROM notes ORDER BY 1")
    assert len(rows) == COPIES and report.flagged and report.action == "none"
    assert report.provenance == "value_repeats" and "value repeats" in report.decisions[0].reason
    assert len(reads) == 1  # one read serves both statements

    # DDL seen through the connection drops the facts: a keyless lookup becomes a keyed one.
    db.raw_run("CREATE TABLE cust (id INTEGER, name TEXT)")
    db.raw_run("CREATE TABLE ord (id INTEGER PRIMARY KEY, cust_id INTEGER)")
    db.raw_many(f"INSERT INTO cust VALUES ({db.param}, {db.param})", [(i, f"n{i}") for i in range(2)])
    db.raw_many(f"INSERT INTO ord VALUES ({db.param}, {db.param})", [(i, i % 2) for i in range(12)])
    db.cursor(con).execute("CREATE TABLE scratch (x INTEGER)")  # DDL through the guarded connection
    _, report = db.fetch(con, LOOKUP_SQL)
    assert report.provenance == "amplified" and len(reads) == 2
    db.cursor(con).execute("CREATE UNIQUE INDEX cust_id ON cust (id)")
    rows, report = db.fetch(con, LOOKUP_SQL)
    assert report.provenance == "value_repeats" and len(rows) == 12 and len(reads) == 3


@pytest.fixture
def duck(request: pytest.FixtureRequest) -> Iterator[EngineDB]:
    """The fan-out database on DuckDB (skipped without duckdb), as test_engines builds it."""
    yield from _make_db("duckdb", request)


@pytest.fixture
def pg(request: pytest.FixtureRequest) -> Iterator[EngineDB]:
    """The fan-out database on PostgreSQL (skipped without a server), as test_engines builds it."""
    yield from _make_db("postgres", request)


def test_duckdb_gives_the_same_verdicts(duck: EngineDB, catalog_reads: list[str]) -> None:
    _engine_verdicts(duck, catalog_reads)


def test_postgres_gives_the_same_verdicts(pg: EngineDB, catalog_reads: list[str]) -> None:
    _engine_verdicts(pg, catalog_reads)


@pytest.fixture(autouse=True)
def _no_install_leak() -> Iterator[None]:
    yield
    guarded_sqlite.uninstall()


def test_p1_threshold_is_where_p1_may_first_fire() -> None:
    """The public threshold the evaluator's replay reads: tau_amplified only for text_to_sql in patch mode."""
    assert GuardPolicy().p1_threshold == 0.8
    assert GuardPolicy.paper(tau_inject=0.6).p1_threshold == 0.6
    assert GuardPolicy.text_to_sql().p1_threshold == 0.30
    assert GuardPolicy.text_to_sql(mode="observe").p1_threshold == 0.8
    assert GuardPolicy.text_to_sql(tau_amplified=0.9).p1_threshold == 0.8  # never above tau_inject


@pytest.mark.parametrize("preset", ["patch", "text_to_sql", "paper", "observe", "off"])
@pytest.mark.parametrize("opener", ["connect", "wrap"])
def test_the_report_names_the_preset_on_every_path(preset: str, opener: str) -> None:
    # issue 38: `mode` reads "patch" under three presets; `preset` tells them apart, on the fast path (one
    # healthy row), a flagged result, a statement without rows, executemany and a failed statement.
    if opener == "connect":
        con: Any = guarded_sqlite.connect(":memory:", guard=preset)
    else:
        con = guarded_sqlite.wrap(sqlite3.connect(":memory:"), guard=preset)
    fill_fanout(con)
    mode = "patch" if preset in ("patch", "text_to_sql", "paper") else preset
    reports = [
        con.execute("SELECT name FROM customers WHERE id = 1").guard_report,
        con.execute(EXPLODING_SQL).guard_report,
        con.execute("UPDATE customers SET name = name").guard_report,
        con.cursor().executemany("UPDATE customers SET name = ? WHERE id = 1", [("x",)]).guard_report,
    ]
    cur = con.cursor()
    with pytest.raises(sqlite3.OperationalError):
        cur.execute("SELECT nope FROM customers")
    reports.append(cur.guard_report)
    assert [(r.preset, r.mode) for r in reports if r is not None] == [(preset, mode)] * 5
    if preset == "observe":
        assert reports[1] is not None and reports[1].flagged and not reports[1].patched


def test_a_policy_scope_reports_its_own_preset() -> None:
    con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    fill_fanout(con)
    with con.guard_scope("paper"):
        inside = con.execute(EXPLODING_SQL).guard_report
    outside = con.execute(EXPLODING_SQL).guard_report
    assert inside is not None and outside is not None
    assert (inside.preset, outside.preset) == ("paper", "text_to_sql")
    assert GuardPolicy.text_to_sql(tau_inject=0.5).preset == "text_to_sql"
