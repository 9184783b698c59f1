"""Schema churn against the per-connection key cache: stale keys must never change a result.

The default preset ("patch") de-duplicates a flagged result (P1) only when the provenance analysis says
a join multiplies rows, and the analysis reads the schema's keys from SQLite's catalog, cached per
connection. Whatever the cache does, its verdict must be the one a fresh read of the catalog gives *now*:
SQLite reuses ``PRAGMA schema_version`` numbers (rolled-back DDL, DETACH + ATTACH of another file
under the same name, ``deserialize()``, a schema attached after the first read, DDL by another
connection during the read; repros ``/work/shared/repros/provenance/p01``-``p04``, ``p20``), so a cache
keyed by that number alone keeps the keys of a table that no longer exists, calls an N:1 lookup
amplified and drops legitimate rows.

Black-box, through the public API only, so that it holds before and after a rewrite of the cache:

* the oracle is a fresh, uncached full read of the catalog through the same raw connection
  (``schema.read_sqlite_schema(unwrap(g))``, which sees that connection's TEMP tables, attachments and
  uncommitted DDL exactly as the statement does) analysed with ``provenance.analyse``;
* the plain rows are the same SQL on a plain ``sqlite3.Cursor`` over that connection (same data, same
  transaction, none of the guard's code on the path).

Invariants of every flagged query: the report's provenance verdict, when there is one, equals the fresh
one (the cache is never stale; an ``identified`` verdict the rows contradict is reported as
``unknown``); the default preset fails closed, so whenever the fresh verdict is not join amplification
the guarded rows equal the plain rows exactly, same order; and otherwise the guarded rows are the
plain rows or those rows de-duplicated in order (P1's only change).

``SchemaChurn`` is a hypothesis state machine of schema churn (transactions, DDL inside and outside
them, TEMP shadows, ATTACH/DETACH of files whose ``x`` has different keys, ``deserialize()``, DDL by
another connection, and a migration by another connection *during* the guard's catalog read)
interleaved with flagged join queries. The plain tests after it replay the repros' sequences.

These tests fail on a cache keyed by ``PRAGMA schema_version`` alone and pass with the cache disabled
(the guard re-reading the catalog on every ask), which is what shows the oracle and invariants right.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

import guarded_sqlite
from guarded_sqlite._analysis.provenance import Provenance, analyse
from guarded_sqlite._analysis.schema import read_sqlite_schema
from guarded_sqlite.report import GuardReport

HAS_DESERIALIZE = hasattr(sqlite3.Connection, "deserialize") and hasattr(sqlite3.Connection, "serialize")

# --------------------------------------------------------------------------------------------------
# Tables: o (10 rows referencing 2 rows of x) and x in four key shapes
# --------------------------------------------------------------------------------------------------

O_TABLE = "CREATE TABLE o (id INTEGER PRIMARY KEY, xid INTEGER)"
O_ROWS = [(i, 1 + i % 2) for i in range(1, 11)]  # five o rows per x row

# One CREATE TABLE each, so files holding any one of them have the same schema_version (1).
SHAPES = {
    "pk": "CREATE TABLE {x} (id INTEGER PRIMARY KEY, name TEXT)",  # o JOIN x: an N:1 lookup
    "unique_id": "CREATE TABLE {x} (id INTEGER UNIQUE, name TEXT)",  # an N:1 lookup too
    "keyless": "CREATE TABLE {x} (id INTEGER, name TEXT)",  # fans out
    "unique_name": "CREATE TABLE {x} (id INTEGER, name TEXT UNIQUE)",  # fans out (x.id is no key)
}
KEYED_ROWS = [(1, "Ana"), (2, "Ben")]
X_ROWS = {
    "pk": KEYED_ROWS,
    "unique_id": KEYED_ROWS,
    "unique_name": KEYED_ROWS,
    "keyless": KEYED_ROWS * 5,  # every x row five times: the joins repeat them
}
SHAPE_NAMES = sorted(SHAPES)

# Each is flagged (dup_ratio >= 0.8) for some shape of the table it reads: 10 rows over 2 names with a
# keyed x (an N:1 lookup: value_repeats), 50 rows over 2 names (or 10 pairs) with the keyless one.
QUERIES = [
    "SELECT x.name FROM o JOIN x ON x.id = o.xid",
    "SELECT x.name FROM o JOIN main.x AS x ON x.id = o.xid",
    "SELECT x.name FROM o JOIN temp.x AS x ON x.id = o.xid",
    "SELECT x.name FROM o JOIN shard.x AS x ON x.id = o.xid",
    "SELECT x.name FROM o JOIN early.x AS x ON x.id = o.xid",
    "SELECT x.name FROM o, x WHERE x.id = o.xid",
    "SELECT o.id, x.name FROM x JOIN o ON o.xid = x.id",
    "SELECT x.name FROM x JOIN o ON o.xid = x.id",  # reversed: x leads, o fans out (amplified)
    "SELECT o.xid FROM o",  # one table (value_repeats whatever x is): a catalog read that names no x
]
SHARD_FILES = ("keyless", "pk", "unique_name", "unique_id")


def x_statements(shape: str, table: str = "x") -> list[tuple[str, list[tuple[Any, ...]]]]:
    """DROP and re-CREATE ``table`` in ``shape`` ("none": only drop it), with its rows."""
    steps: list[tuple[str, list[tuple[Any, ...]]]] = [(f"DROP TABLE IF EXISTS {table}", [])]
    if shape != "none":
        steps.append((SHAPES[shape].format(x=table), []))
        steps.append((f"INSERT INTO {table} VALUES (?, ?)", list(X_ROWS[shape])))
    return steps


def run_steps(con: Any, steps: list[tuple[str, list[tuple[Any, ...]]]]) -> None:
    for sql, rows in steps:
        if rows:
            con.executemany(sql, rows)
        else:
            con.execute(sql)


def make_file(path: Path, shape: str) -> str:
    """A database file whose only table is ``x`` in ``shape`` (schema_version 1); for "none", a table of
    another name (so that an unqualified x resolves past this schema)."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("PRAGMA synchronous=OFF")  # fewer fsyncs: the tests need no durability
        run_steps(con, [("CREATE TABLE other (v)", [])] if shape == "none" else x_statements(shape)[1:])
    finally:
        con.close()
    return str(path)


def schema_version(con: Any, schema: str = "main") -> int:
    cur = sqlite3.Cursor(guarded_sqlite.unwrap(con))
    try:
        return int(cur.execute(f"PRAGMA {schema}.schema_version").fetchall()[0][0])
    finally:
        cur.close()


def image(shape: str, at_least: int, with_o: bool = True) -> bytes:
    """A serialized database holding o (when ``with_o``) and x in ``shape``, whose schema_version is
    ``at_least`` or the smallest it can be above that, by ordinary DDL (padding tables)."""
    con = sqlite3.connect(":memory:", isolation_level=None)
    try:
        if with_o:
            con.execute(O_TABLE)
            con.executemany("INSERT INTO o VALUES (?, ?)", O_ROWS)
        run_steps(con, x_statements(shape)[1:])
        pad = 0
        while schema_version(con) < at_least:
            con.execute(f"CREATE TABLE pad{pad} (a)")
            pad += 1
        return con.serialize()
    finally:
        con.close()


# --------------------------------------------------------------------------------------------------
# The oracle and the comparison
# --------------------------------------------------------------------------------------------------


def fresh_provenance(con: Any, sql: str) -> Provenance:
    """The verdict from a fresh, uncached full read of the catalog through ``con``'s raw connection."""
    return analyse(sql, read_sqlite_schema(guarded_sqlite.unwrap(con)), "sqlite")


def plain_rows(con: Any, sql: str) -> list[Any]:
    """``sql`` on a plain sqlite3 cursor over the same connection: same data, same transaction. Raises."""
    cur = sqlite3.Cursor(guarded_sqlite.unwrap(con))
    try:
        return cur.execute(sql).fetchall()
    finally:
        cur.close()


def distinct_in_order(rows: list[Any]) -> list[Any]:
    return list(dict.fromkeys(rows))


@dataclass
class Outcome:
    sql: str
    rows: list[Any]
    plain: list[Any]
    report: GuardReport
    fresh: Provenance

    def describe(self) -> str:
        r = self.report
        return (
            f"{self.sql!r}: guarded {len(self.rows)} rows, plain {len(self.plain)}; flagged={r.flagged} "
            f"action={r.action} provenance={r.provenance} ({r.provenance_evidence}); "
            f"fresh={self.fresh.verdict} ({self.fresh.evidence})"
        )


def run_guarded(g: Any, sql: str, trace: Callable[[str], None] | None = None) -> Outcome:
    """``sql`` on a plain cursor, then on the guarded connection (with ``trace`` as its trace callback
    while it runs), then the fresh verdict."""
    plain = plain_rows(g, sql)
    if trace is not None:
        g.set_trace_callback(trace)
    try:
        cur = g.execute(sql)
        rows = cur.fetchall()
    finally:
        if trace is not None:
            g.set_trace_callback(None)
    report = cur.guard_report
    assert report is not None
    return Outcome(sql, rows, plain, report, fresh_provenance(g, sql))


def assert_consistent(out: Outcome) -> None:
    """The invariants (module docstring)."""
    if out.report.provenance is not None:
        evidence = out.report.provenance_evidence or ""
        contradicted = (
            out.fresh.verdict == "identified"
            and not out.fresh.amplification
            and out.report.provenance == "unknown"
            and "the facts and the data disagree" in evidence
        )
        # The keys allow copies, but the join-copy check could not tell: reported as unknown, rows kept.
        unchecked = (
            out.fresh.verdict == "amplified" and out.report.provenance == "unknown" and "not established" in evidence
        )
        assert out.report.provenance == out.fresh.verdict or contradicted or unchecked, (
            f"stale verdict: {out.describe()}"
        )
        if unchecked:
            assert out.rows == out.plain, out.describe()
    if not out.fresh.amplification:
        assert out.rows == out.plain, f"rows changed without established amplification: {out.describe()}"
    else:
        assert_p1_bound(out)


def assert_p1_bound(out: Outcome) -> None:
    """The rows P1 may serve: plain sqlite3's, their distinct rows, or (join copies removed) a
    subsequence of plain's rows that keeps every value and no value more often than plain has it."""
    if out.rows in (out.plain, distinct_in_order(out.plain)):
        return
    assert out.report.action == "join_copies_removed", out.describe()
    assert set(out.rows) == set(out.plain) and Counter(out.rows) <= Counter(out.plain), out.describe()
    remaining = iter(out.plain)
    assert all(row in remaining for row in out.rows), out.describe()  # a subsequence of plain's order


def assert_lookup_left_alone(out: Outcome) -> None:
    """A regression scenario's final query: flagged, an N:1 lookup by the fresh catalog, left alone."""
    assert out.report.flagged, out.describe()  # the scenario really reaches P1
    assert out.fresh.verdict == "value_repeats", out.describe()  # and really is an N:1 lookup now
    assert out.rows == out.plain, out.describe()
    assert out.report.provenance == out.fresh.verdict, out.describe()


# --------------------------------------------------------------------------------------------------
# DDL by another connection during the guard's catalog read (p20's trick, reader-independent)
# --------------------------------------------------------------------------------------------------

_CATALOG = re.compile(r"\bpragma|\bsqlite_(?:master|schema|temp_master|temp_schema)\b", re.IGNORECASE)
_ALL_AT_ONCE = re.compile(r"\bpragma_\w+\s*\(", re.IGNORECASE)


class MigrateDuringCatalogRead:
    """A trace callback that runs ``migrate`` (another connection's committed DDL on ``table``) once the
    guard, after the flagged statement ``sql`` started, has begun reading ``table``'s facts.

    It fires on the statement *after* the first catalog statement (a PRAGMA, or one that reads
    sqlite_master/sqlite_schema) that names ``table``, or that reads table facts for many tables at
    once (``pragma_*()`` table-valued functions), whatever the guard reads before, after or instead:
    part of ``table``'s facts predates the migration, and whatever the guard reads from then on
    (the rest of the facts, the schema version) postdates it. The trace callback runs before the
    statement it reports executes. ``fired``: whether it ran; ``error``: what the migration raised.
    """

    def __init__(self, sql: str, table: str, migrate: Callable[[], None]) -> None:
        self.sql = sql.strip()
        self.name = re.compile(rf"(?<![\w$]){re.escape(table)}(?![\w$])", re.IGNORECASE)
        self.migrate = migrate
        self.started = self.armed = self.fired = False
        self.error: Exception | None = None
        self.statements: list[str] = []

    def __call__(self, statement: str) -> None:
        self.statements.append(statement)
        if self.fired:
            return
        if not self.started:
            self.started = self.sql in statement
            return
        if self.armed:
            self.fired = True
            try:
                self.migrate()
            except Exception as error:  # a trace callback must not raise into SQLite
                self.error = error
            return
        if _CATALOG.search(statement) and (self.name.search(statement) or _ALL_AT_ONCE.search(statement)):
            self.armed = True


def migrate_by_other(path: str, steps: list[tuple[str, list[tuple[Any, ...]]]]) -> None:
    """``steps`` in one committed transaction on a connection of its own."""
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        other.execute("BEGIN")
        run_steps(other, steps)
        other.execute("COMMIT")
    finally:
        if other.in_transaction:
            other.rollback()
        other.close()


# --------------------------------------------------------------------------------------------------
# The state machine
# --------------------------------------------------------------------------------------------------


class SchemaChurn(RuleBasedStateMachine):
    """One guarded connection (default preset) on a WAL file, a plain connection on the same file,
    four files whose only table ``x`` has different keys, attachable as ``shard`` (all at
    schema_version 1), and five more attachable as ``early`` (one without x), so that attached schemas
    change order and an unqualified x can resolve in the second one. Every rule's SQL runs for real; a
    rule whose SQL fails in the current state just leaves it as SQLite left it (the oracle reads the
    catalog, not a model)."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="guarded-churn-"))
        self.path = str(self.directory / "main.db")
        setup = sqlite3.connect(self.path, isolation_level=None)
        try:
            setup.execute("PRAGMA journal_mode=WAL")  # another connection commits while g reads
            setup.execute("PRAGMA synchronous=OFF")
            setup.execute(O_TABLE)
            setup.executemany("INSERT INTO o VALUES (?, ?)", O_ROWS)
            run_steps(setup, x_statements("pk"))
        finally:
            setup.close()
        self.shards = {shape: make_file(self.directory / f"shard_{shape}.db", shape) for shape in SHARD_FILES}
        # A second attachable name, so that the order of attached schemas changes (DETACH + ATTACH puts
        # it last) and an unqualified x can resolve in the second attached schema.
        self.early = {shape: make_file(self.directory / f"early_{shape}.db", shape) for shape in (*SHARD_FILES, "none")}
        self.g = guarded_sqlite.connect(self.path, isolation_level=None)
        self.other = sqlite3.connect(self.path, isolation_level=None, timeout=0)
        for con in (self.g, self.other):
            plain_rows(con, "PRAGMA synchronous=OFF")

    def teardown(self) -> None:
        self.g.set_trace_callback(None)
        self.g.close()
        self.other.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def attached(self) -> bool:
        return any(row[1] == "shard" for row in plain_rows(self.g, "PRAGMA database_list"))

    def on_g(self, steps: list[tuple[str, list[tuple[Any, ...]]]]) -> None:
        try:
            run_steps(self.g, steps)
        except sqlite3.Error as error:
            note(f"# the step below failed: {type(error).__name__}: {error}")

    # --- transactions on g ---

    @precondition(lambda self: not self.g.in_transaction)
    @rule()
    def begin(self) -> None:
        self.on_g([("BEGIN", [])])

    @precondition(lambda self: self.g.in_transaction)
    @rule()
    def commit(self) -> None:
        self.on_g([("COMMIT", [])])

    @precondition(lambda self: self.g.in_transaction)
    @rule()
    def rollback(self) -> None:
        self.on_g([("ROLLBACK", [])])

    # --- DDL on g (inside a transaction when one is open) ---

    @rule(shape=st.sampled_from([*SHAPE_NAMES, "none"]))
    def recreate_x(self, shape: str) -> None:
        self.on_g(x_statements(shape, "main.x"))

    @rule(shape=st.sampled_from([*SHAPE_NAMES, "none"]))
    def temp_x(self, shape: str) -> None:
        """CREATE (or just DROP) TEMP TABLE x, which shadows main.x for unqualified names."""
        self.on_g(x_statements(shape, "temp.x"))

    @rule(shape=st.sampled_from(SHARD_FILES))
    def attach(self, shape: str) -> None:
        """ATTACH a file as shard; if shard is attached, DETACH it first (another file, same name)."""
        steps = [("DETACH shard", [])] if self.attached() else []
        self.on_g([*steps, (f"ATTACH '{self.shards[shape]}' AS shard", [])])

    @rule()
    def detach(self) -> None:
        self.on_g([("DETACH shard", [])])

    @rule(shape=st.sampled_from([*SHARD_FILES, "none"]))
    def attach_early(self, shape: str) -> None:
        """ATTACH a file as early (DETACH it first if attached): early comes before or after shard."""
        attached = any(row[1] == "early" for row in plain_rows(self.g, "PRAGMA database_list"))
        steps = [("DETACH early", [])] if attached else []
        self.on_g([*steps, (f"ATTACH '{self.early[shape]}' AS early", [])])

    @rule()
    def detach_early(self) -> None:
        self.on_g([("DETACH early", [])])

    @precondition(lambda self: HAS_DESERIALIZE and not self.g.in_transaction)
    @rule(shape=st.sampled_from(SHAPE_NAMES), schema=st.sampled_from(["main", "shard"]), offset=st.integers(-1, 1))
    def deserialize(self, shape: str, schema: str, offset: int) -> None:
        """Replace ``schema`` by an image whose x has ``shape``, at the current schema_version + offset."""
        try:
            target = schema_version(self.g, schema) + offset
        except sqlite3.Error as error:  # no such schema
            note(f"# the step below failed: {type(error).__name__}: {error}")
            return
        data = image(shape, target, with_o=schema == "main")
        try:
            guarded_sqlite.unwrap(self.g).deserialize(data, name=schema)
        except sqlite3.Error as error:
            note(f"# the step below failed: {type(error).__name__}: {error}")

    # --- DDL by another connection (committed) ---

    @rule(shape=st.sampled_from([*SHAPE_NAMES, "none"]), rename=st.booleans())
    def other_recreates_x(self, shape: str, rename: bool) -> None:
        """The other connection migrates main.x: ALTER TABLE x RENAME and a new x, or DROP and CREATE."""
        steps = x_statements(shape)
        if rename:
            steps = [("ALTER TABLE x RENAME TO x_old", []), *steps[1:], ("DROP TABLE x_old", [])]
        try:
            self.other.execute("BEGIN")
            run_steps(self.other, steps)
            self.other.execute("COMMIT")
        except sqlite3.Error as error:  # g holds a lock, or there is no x to rename
            note(f"# the step below failed: {type(error).__name__}: {error}")
        finally:
            if self.other.in_transaction:
                self.other.rollback()

    # --- flagged queries ---

    def check(self, sql: str) -> None:
        try:
            plain_rows(self.g, sql)
        except sqlite3.Error as error:  # no such table in this state
            note(f"# the step below: {sql!r} skipped: {type(error).__name__}: {error}")
            return
        out = run_guarded(self.g, sql)
        note(f"# the step below: {out.describe()}")
        event(f"query: flagged={out.report.flagged} fresh={out.fresh.verdict} guard={out.report.provenance}")
        assert_consistent(out)

    @rule(sql=st.sampled_from(QUERIES))
    def query(self, sql: str) -> None:
        self.check(sql)

    @rule()
    def query_each(self) -> None:
        """Every query in turn (the first flagged one reads the catalog if it does at all)."""
        for sql in QUERIES:
            self.check(sql)

    @rule(sql=st.sampled_from(QUERIES[:-1]), shape=st.sampled_from(SHAPE_NAMES))
    def query_during_migration(self, sql: str, shape: str) -> None:
        """The other connection migrates main.x while the guard reads the catalog for ``sql``. That
        query itself ran before the migration, so only P1's bound holds for it; the queries after it
        must see the migration (the ``query`` rule's invariants)."""
        try:
            plain_rows(self.g, sql)
        except sqlite3.Error as error:
            note(f"# the step below: {sql!r} skipped: {type(error).__name__}: {error}")
            return
        race = MigrateDuringCatalogRead(sql, "x", lambda: migrate_by_other(self.path, x_statements(shape)))
        out = run_guarded(self.g, sql, trace=race)
        note(f"# the step below: migration fired={race.fired} error={race.error!r}; {out.describe()}")
        event(f"query during migration: fired={race.fired} failed={race.error is not None}")
        assert_p1_bound(out)


SchemaChurn.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestSchemaChurn = SchemaChurn.TestCase


# --------------------------------------------------------------------------------------------------
# Regression tests: the repros' sequences
# --------------------------------------------------------------------------------------------------

LOOKUP = "SELECT x.name FROM o JOIN x ON x.id = o.xid"


@pytest.fixture
def g(tmp_path: Path) -> Iterator[guarded_sqlite.GuardedConnection]:
    con = guarded_sqlite.connect(str(tmp_path / "main.db"), isolation_level=None)
    con.execute(O_TABLE)
    yield con
    con.close()


def test_p01_rolled_back_ddl_then_other_ddl_at_the_same_schema_version(g: Any) -> None:
    """p01: keys read inside a transaction that is rolled back; the real migration brings
    schema_version back to the same number."""
    g.execute("BEGIN")
    run_steps(g, x_statements("keyless")[1:])
    g.execute("INSERT INTO o (xid) VALUES (1)")
    assert run_guarded(g, LOOKUP).report.flagged  # the guard reads the keyless x's keys here
    version = schema_version(g)
    g.execute("ROLLBACK")
    run_steps(g, x_statements("pk")[1:])
    g.executemany("INSERT INTO o VALUES (?, ?)", O_ROWS)
    assert schema_version(g) == version  # the number SQLite reuses
    assert_lookup_left_alone(run_guarded(g, LOOKUP))


def test_p01_temp_shadow_rolled_back_then_recreated(g: Any) -> None:
    """p01 through TEMP: a keyless TEMP x shadowing main.x, rolled back, then a keyed TEMP x at the
    same temp schema_version."""
    g.executemany("INSERT INTO o VALUES (?, ?)", O_ROWS)
    run_steps(g, x_statements("pk")[1:])
    g.execute("BEGIN")
    run_steps(g, x_statements("keyless", "temp.x")[1:])
    assert run_guarded(g, LOOKUP).report.flagged  # reads temp.x (keyless) as what x means
    version = schema_version(g, "temp")
    g.execute("ROLLBACK")
    run_steps(g, x_statements("unique_id", "temp.x")[1:])
    assert schema_version(g, "temp") == version
    assert_lookup_left_alone(run_guarded(g, LOOKUP))


def test_other_connection_ddl_after_rolled_back_ddl_at_the_same_schema_version(g: Any, tmp_path: Path) -> None:
    """p01 with the real migration committed by another connection."""
    g.executemany("INSERT INTO o VALUES (?, ?)", O_ROWS)
    g.execute("BEGIN")
    run_steps(g, x_statements("keyless")[1:])
    assert run_guarded(g, LOOKUP).report.flagged
    version = schema_version(g)
    g.execute("ROLLBACK")
    migrate_by_other(str(tmp_path / "main.db"), x_statements("pk")[1:])
    assert schema_version(g) == version
    assert_lookup_left_alone(run_guarded(g, LOOKUP))


def test_p02_detach_and_attach_another_file_under_the_same_name(g: Any, tmp_path: Path) -> None:
    """p02: two files at schema_version 1 attached in turn as shard; the first one's x has no key."""
    g.executemany("INSERT INTO o VALUES (?, ?)", O_ROWS)
    keyless, keyed = make_file(tmp_path / "a.db", "keyless"), make_file(tmp_path / "b.db", "pk")
    g.execute("ATTACH ? AS shard", (keyless,))
    assert run_guarded(g, "SELECT x.name FROM shard.x AS x").report.flagged  # reads shard's keys
    g.execute("DETACH shard")
    g.execute("ATTACH ? AS shard", (keyed,))
    assert_lookup_left_alone(run_guarded(g, "SELECT x.name FROM o JOIN shard.x AS x ON x.id = o.xid"))


@pytest.mark.skipif(not HAS_DESERIALIZE, reason="Connection.deserialize needs Python 3.11")
def test_p03_deserialize_an_image_at_the_same_schema_version(g: Any) -> None:
    """p03: deserialize() replaces main by an image whose schema_version equals the old one."""
    run_steps(g, x_statements("keyless")[1:])
    g.execute("INSERT INTO o (xid) VALUES (1)")
    assert run_guarded(g, LOOKUP + " ").report.flagged  # other text: the cached verdict is not this one
    version = schema_version(g)
    data = image("pk", version)
    guarded_sqlite.unwrap(g).deserialize(data)
    assert schema_version(g) == version
    assert_lookup_left_alone(run_guarded(g, LOOKUP))


def test_p04_attach_after_the_first_catalog_read(g: Any, tmp_path: Path) -> None:
    """p04: a schema attached after the first catalog read must be read too."""
    g.executemany("INSERT INTO o VALUES (?, ?)", O_ROWS)
    assert run_guarded(g, "SELECT o.xid FROM o").report.flagged  # any flagged result: the first read
    g.execute("ATTACH ? AS ref", (make_file(tmp_path / "ref.db", "pk"),))
    assert_lookup_left_alone(run_guarded(g, "SELECT x.name FROM o JOIN ref.x AS x ON x.id = o.xid"))


def test_p20_migration_by_another_connection_during_the_catalog_read(tmp_path: Path) -> None:
    """p20: another connection gives c its PRIMARY KEY while the guard re-reads the catalog (after
    c's facts were started, before anything read later, such as the schema version); every later
    execution must see the migration. The re-read is made by the lookup into c itself (p20 uses another
    flagged query), so that a reader that reads only the tables a statement names still reads c."""
    path = str(tmp_path / "app.db")
    setup = sqlite3.connect(path, isolation_level=None)
    setup.execute("PRAGMA journal_mode=WAL")
    setup.executescript(
        """CREATE TABLE c (id INTEGER, name TEXT);  -- before the migration: no key
        CREATE TABLE o (id INTEGER PRIMARY KEY, cid INTEGER);
        CREATE TABLE k (v); INSERT INTO k VALUES (1), (1), (1), (1), (1);
        INSERT INTO c VALUES (1, 'Ana'), (2, 'Ben');"""
    )
    setup.executemany("INSERT INTO o VALUES (?, ?)", O_ROWS)
    setup.close()
    migration = [
        ("ALTER TABLE c RENAME TO c_old", []),
        ("CREATE TABLE c (id INTEGER PRIMARY KEY, name TEXT)", []),
        ("INSERT INTO c SELECT * FROM c_old", []),
        ("DROP TABLE c_old", []),
    ]
    query = "SELECT c.name FROM o JOIN c ON c.id = o.cid"
    g = guarded_sqlite.connect(path, isolation_level=None)
    try:
        assert run_guarded(g, "SELECT v FROM k").report.flagged  # the first catalog read
        g.execute("CREATE TEMP TABLE scratch (a)")  # any schema change: the next flagged result re-reads
        race = MigrateDuringCatalogRead(query, "c", lambda: migrate_by_other(path, migration))
        during = run_guarded(g, query, trace=race)
        assert race.fired and race.error is None, (race.error, race.statements)
        assert during.rows in (during.plain, distinct_in_order(during.plain)), during.describe()
        for _ in range(3):  # later requests, no DDL any more
            assert_lookup_left_alone(run_guarded(g, query))
    finally:
        g.close()
