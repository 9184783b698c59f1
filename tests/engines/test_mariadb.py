"""What is specific to MySQL/MariaDB through PyMySQL: the driver's behaviour through the proxy (cursor
classes, unbuffered cursors, parameter styles, return values, errors), re-execution inside and outside
the caller's transaction, the catalog's key facts and collations, and schema changes.

The multiplicity cases shared with the other engines are in ``test_engines.py`` (its ``mysql``
parameter); both run on the session's throwaway MariaDB (``tests/mariadb_server.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import guarded_sqlite
from guarded_sqlite import DupRatioSelector, GuardPolicy
from tests.engines.test_engines import EngineDB, MariaDatabase, _make_db, maria_database  # noqa: F401 (the fixture)
from tests.helpers import DISTINCT_NAMES, EMPTY, EXPLODING_SQL, GOOD

pytest.importorskip("pymysql")


@pytest.fixture
def my_db(request: pytest.FixtureRequest) -> Iterator[EngineDB]:
    """The fan-out database on MariaDB (autocommit connection)."""
    yield from _make_db("mysql", request)


def _maria(db: EngineDB) -> MariaDatabase:
    assert db.maria is not None
    return db.maria


def _in_transaction(conn: Any) -> bool:
    """MariaDB's own answer (PyMySQL's ``server_status`` is the last OK reply's, stale after a SELECT)."""
    cur = conn.cursor()
    cur.execute("SELECT @@in_transaction")
    return bool(cur.fetchone()[0])


# --- the driver's behaviour -------------------------------------------------------------------------


def test_observe_mode_returns_exactly_what_pymysql_returns(my_db: EngineDB) -> None:
    """The differential test: for each cursor class and fetch method, observe mode returns the same
    values in the same containers as PyMySQL (tuples of tuples, a list of dicts, ``()`` at the end of
    fetchmany), with the same ``execute`` return value, ``rowcount``, ``rownumber`` and description."""
    import pymysql.cursors

    observe = my_db.guarded("observe")
    statements = [
        (EXPLODING_SQL, None),
        ("SELECT id, name, city FROM customers WHERE id >= %s ORDER BY id", (1,)),
        ("SELECT c.id, o.id FROM customers c JOIN orders o ON o.customer_id = c.id WHERE c.id = %(c)s", {"c": 2}),
        (EMPTY, None),
        ("SELECT 1 AS a, 2 AS a", None),
    ]
    for cursor_class in (pymysql.cursors.Cursor, pymysql.cursors.DictCursor):
        for sql, args in statements:
            for method in ("fetchall", "fetchmany", "fetchone", "iterate"):
                raw_cur, cur = my_db.raw.cursor(cursor_class), observe.cursor(cursor_class)
                assert cur.execute(sql, args) == raw_cur.execute(sql, args), sql
                assert cur.description == raw_cur.description and cur.rowcount == raw_cur.rowcount
                if method == "fetchmany":
                    for size in (None, 0, 5, 100):
                        got, expected = cur.fetchmany(size), raw_cur.fetchmany(size)
                        assert type(got) is type(expected) and got == expected, (sql, size)
                elif method == "fetchone":
                    while (expected := raw_cur.fetchone()) is not None:
                        assert cur.fetchone() == expected
                    assert cur.fetchone() is None
                elif method == "iterate":
                    assert list(cur) == list(raw_cur)
                got, expected = cur.fetchall(), raw_cur.fetchall()
                assert type(got) is type(expected) and got == expected, (sql, method)
                assert cur.rownumber == raw_cur.rownumber, (sql, method)
                assert cur.guard_report.mode == "observe"


def test_dict_cursor_rows_are_dicts_and_p1_serves_distinct_dicts(my_db: EngineDB) -> None:
    """``DictCursor`` rows: a healthy result as PyMySQL's; a fan-out flagged and P1's re-execution
    gives dicts too (the guard's statements use the caller's cursor class)."""
    import pymysql.cursors

    con = my_db.guarded("paper")
    healthy = "SELECT name, city FROM customers ORDER BY id"
    cur = con.cursor(pymysql.cursors.DictCursor)
    cur.execute(healthy)
    raw = my_db.raw.cursor(pymysql.cursors.DictCursor)
    raw.execute(healthy)
    assert cur.fetchall() == raw.fetchall() and cur.guard_report.trigger is None
    cur.execute(EXPLODING_SQL + " ORDER BY c.name")
    rows = cur.fetchall()
    assert rows == [{"name": name} for (name,) in DISTINCT_NAMES]
    assert (cur.guard_report.trigger, cur.guard_report.action) == ("cartesian_explosion", "distinct_injected")
    assert cur.rowcount == 4


def test_a_connection_made_with_a_dict_cursorclass_serves_dicts(my_db: EngineDB) -> None:
    """``pymysql.connect(cursorclass=DictCursor)``: ``conn.cursor()`` is a guarded DictCursor, and the
    join-copy check's rows (dicts) are kept as dicts."""
    import pymysql.cursors

    conn = _maria(my_db).connect(cursorclass=pymysql.cursors.DictCursor)
    cur = guarded_sqlite.wrap(conn).cursor()
    assert cur.execute(EXPLODING_SQL) == 4
    assert sorted(row["name"] for row in cur.fetchall()) == [name for (name,) in DISTINCT_NAMES]
    assert cur.guard_report.action == "distinct_injected"


def test_an_unbuffered_cursor_streams_every_row_unprobed(my_db: EngineDB) -> None:
    """``SSCursor`` streams all rows, unbuffered and unpatched, and says it was not probed."""
    import pymysql.cursors

    con = my_db.guarded(GuardPolicy(rescue=DupRatioSelector()))
    streaming = con.cursor(pymysql.cursors.SSCursor)
    streaming.execute(EXPLODING_SQL)
    report = streaming.guard_report
    assert not report.probed and report.trigger is None and "unbuffered" in report.note
    first = streaming.fetchmany(5)
    assert len(first) == 5
    rest = list(streaming.fetchall())
    assert Counter(first + rest) == Counter(my_db.raw_rows(EXPLODING_SQL)) and len(first + rest) == 24
    streaming.close()


def test_named_and_positional_parameters_bind_as_pymysql_binds_them(my_db: EngineDB) -> None:
    """``%s`` and ``%(name)s``: the rows are PyMySQL's, a patch keeps the values, and ``%%`` is a percent
    sign, as PyMySQL reads it when parameters are given."""
    sql = EXPLODING_SQL + " WHERE o.amount >= %(low)s AND c.id <> %(skip)s AND c.name LIKE %(like)s"
    params = {"low": 0, "skip": 3, "like": "name%"}
    rows, report = my_db.fetch(my_db.con, sql, params)
    assert sorted(rows) == DISTINCT_NAMES[:3] and report.action == "distinct_injected"
    assert report.final_sql.startswith("SELECT DISTINCT") and "o.amount >= 0" in report.final_sql
    assert "c.name LIKE 'name%'" in report.final_sql
    rows, _ = my_db.fetch(my_db.con, "SELECT 7 %% %s", (4,))
    assert rows == my_db.raw_rows("SELECT 7 %% %s", (4,)) == [(3,)]


def test_executemany_and_execute_return_pymysqls_counts(my_db: EngineDB) -> None:
    """``executemany`` and a write's ``execute`` return PyMySQL's affected-row counts, unprobed."""
    cur = my_db.con.cursor()
    assert cur.executemany("INSERT INTO customers VALUES (%s, %s, %s)", [(50, "x", "y"), (51, "z", "w")]) == 2
    assert not cur.guard_report.probed
    assert cur.execute("UPDATE customers SET city = 'q' WHERE id >= %s", (50,)) == 2
    assert cur.rowcount == 2 and not cur.guard_report.probed
    assert my_db.count("customers") == 6


def test_errors_are_pymysqls_own_with_its_arguments(my_db: EngineDB) -> None:
    """A failing statement raises PyMySQL's class with the server's error code and message."""
    import pymysql

    with pytest.raises(pymysql.err.ProgrammingError) as raw_error:
        my_db.raw.cursor().execute("SELECT * FROM missing")
    with pytest.raises(pymysql.err.ProgrammingError) as guarded_error:
        my_db.con.cursor().execute("SELECT * FROM missing")
    assert guarded_error.value.args == raw_error.value.args and raw_error.value.args[0] == 1146


def test_the_connection_has_no_execute_as_pymysqls_has_none(my_db: EngineDB) -> None:
    with pytest.raises(AttributeError):
        my_db.con.execute  # noqa: B018
    with my_db.con.cursor() as cur:
        assert isinstance(cur, guarded_sqlite.GuardedCursor)
        cur.execute(EXPLODING_SQL)
    assert cur.guard_report.action == "distinct_injected"


def test_dialect_must_match_the_driver(my_db: EngineDB) -> None:
    with pytest.raises(ValueError, match="does not match"):
        guarded_sqlite.wrap(my_db.raw, dialect="postgres")
    assert guarded_sqlite.unwrap(guarded_sqlite.wrap(my_db.raw, dialect="mariadb")) is my_db.raw


# --- re-execution and transactions ------------------------------------------------------------------


def test_patch_inside_a_transaction_sees_uncommitted_rows_and_leaves_it_open(my_db: EngineDB) -> None:
    """With autocommit off (PyMySQL's default) the patch's re-execution sees the transaction's rows; the
    transaction stays open and writable, the session's settings as they were, and commits."""
    conn = _maria(my_db).connect(autocommit=False)
    con = guarded_sqlite.wrap(conn)
    cur = con.cursor()
    cur.execute("INSERT INTO customers VALUES (99, 'late', 'x')")
    cur.executemany("INSERT INTO orders VALUES (%s, 99, 1)", [(1000 + i,) for i in range(6)])
    assert _in_transaction(conn) and my_db.count("customers") == 4
    rows, report = my_db.fetch(con, EXPLODING_SQL)
    assert report.action == "distinct_injected" and sorted(rows) == sorted([*DISTINCT_NAMES, ("late",)])
    assert _in_transaction(conn)
    cur.execute("SELECT @@session.tx_read_only, @@session.max_statement_time")
    assert cur.fetchall() == ((0, 0.0),)
    cur.execute("INSERT INTO customers VALUES (100, 'later', 'y')")
    conn.commit()
    assert my_db.count("customers") == 6 and my_db.count("orders") == 30


@pytest.mark.parametrize("autocommit", [True, False], ids=["autocommit", "in-transaction"])
def test_a_writing_function_never_writes_through_the_guard(my_db: EngineDB, autocommit: bool) -> None:
    """A stored function that INSERTs: the join-copy check never re-runs a statement calling it, and a
    rescue candidate calling it writes nothing (refused by the read-only transaction, or rolled back to
    the savepoint inside the caller's)."""
    my_db.raw_run("CREATE TABLE audit (n INTEGER)")
    my_db.raw_run(
        "CREATE FUNCTION audited(v TEXT) RETURNS TEXT MODIFIES SQL DATA BEGIN INSERT INTO audit VALUES (1); "
        "RETURN v; END"
    )
    conn = _maria(my_db).connect(autocommit=autocommit)
    con = guarded_sqlite.wrap(conn, guard=GuardPolicy(rescue=DupRatioSelector()))
    sql = "SELECT audited(c.name) FROM customers AS c JOIN orders AS o ON o.customer_id = c.id"
    rows, report = my_db.fetch(con, sql)
    assert len(rows) == 24 and report.trigger == "cartesian_explosion" and report.action == "none"
    assert "audited()" in report.decisions[0].reason
    rows, report = my_db.fetch(con, EMPTY, candidates=["SELECT audited(name) FROM customers", GOOD])
    assert rows == DISTINCT_NAMES
    if autocommit:
        assert "1792" in (report.rescue.candidates[0].error or "")  # the server refused the write
        assert report.rescue.chosen_index == 1
    else:
        # It ran, and its write was rolled back to the savepoint: its rows are the names too.
        assert report.rescue.candidates[0].error is None and report.rescue.chosen_index in (0, 1)
        assert _in_transaction(conn)
        conn.commit()
    assert my_db.count("audit") == 24


def test_a_slow_candidate_inside_a_transaction_keeps_the_transaction(my_db: EngineDB) -> None:
    """A candidate stopped by max_statement_time inside the caller's transaction: the transaction stays
    open with its changes, the session's max_statement_time unchanged."""
    conn = _maria(my_db).connect(autocommit=False)
    con = guarded_sqlite.wrap(conn, guard=GuardPolicy(rescue=DupRatioSelector(), rerun_timeout=0.3))
    cur = con.cursor()
    cur.execute("INSERT INTO customers VALUES (99, 'late', 'x')")
    rows, report = my_db.fetch(con, EMPTY, candidates=["SELECT SLEEP(5)", GOOD])
    assert rows == DISTINCT_NAMES and "max_statement_time" in report.rescue.candidates[0].error
    assert _in_transaction(conn)
    cur.execute("SELECT @@session.max_statement_time")
    assert cur.fetchall() == ((0.0,),)
    cur.execute("SELECT name FROM customers WHERE id = 99")
    assert cur.fetchall() == (("late",),)
    conn.commit()
    assert my_db.count("customers") == 5


def test_an_executable_comment_is_never_run_again(my_db: EngineDB) -> None:
    """``/*! ... */`` is SQL to the server and a comment to every parser: a statement holding one is
    served as it ran, never re-executed (its hidden call would run again)."""
    sql = "SELECT c.name /*!, SLEEP(0) */ FROM customers AS c JOIN orders AS o ON o.customer_id = c.id"
    rows, report = my_db.fetch(my_db.con, sql)
    assert len(rows) == 24 and len(rows[0]) == 2 and report.action == "none"
    assert "executable comment" in report.decisions[0].reason


def test_distinct_with_order_by_outside_the_select_list_is_left_alone(my_db: EngineDB) -> None:
    sql = EXPLODING_SQL + " ORDER BY o.amount"
    rows, report = my_db.fetch(my_db.con, sql)
    assert rows == my_db.raw_rows(sql) and len(rows) == 24 and report.action == "none"
    assert "ORDER BY o.amount is not in the select list" in report.decisions[0].reason


# --- catalog facts ----------------------------------------------------------------------------------


def test_catalog_facts_from_information_schema(my_db: EngineDB) -> None:
    """Primary keys, unique indexes over whole columns (NOT NULL or not), no key from a prefix index,
    foreign keys, views, and each text column's collation."""
    from guarded_sqlite._analysis.schema_mysql import read_mysql_schema

    my_db.raw_run(
        "CREATE TABLE accounts (id INT PRIMARY KEY, code VARCHAR(10) NOT NULL UNIQUE, email VARCHAR(50) UNIQUE, "
        "note VARCHAR(50), tag VARCHAR(20) COLLATE utf8mb4_bin, UNIQUE (note(5)), UNIQUE (tag, id))"
    )
    my_db.raw_run("CREATE TABLE posts (id INT PRIMARY KEY, account INT, FOREIGN KEY (account) REFERENCES accounts(id))")
    my_db.raw_run("CREATE VIEW names AS SELECT code FROM accounts")
    facts = read_mysql_schema(my_db.raw)
    accounts = facts.table("accounts")
    assert accounts is not None and accounts.columns == ("id", "code", "email", "note", "tag")
    keys = {frozenset({"id"}), frozenset({"code"}), frozenset({"email"}), frozenset({"tag", "id"})}
    assert set(accounts.keys) == keys  # not note: its unique index holds its first five characters
    assert set(accounts.identity_keys) == {frozenset({"id"}), frozenset({"code"})}
    collations = dict(accounts.collations)
    assert collations["tag"] == "utf8mb4_bin" and collations["code"].endswith("_ci") and "id" not in collations
    posts = facts.table("posts")
    assert posts is not None and [(fk.columns, fk.table, fk.ref_columns) for fk in posts.foreign_keys] == [
        (("account",), "accounts", ("id",))
    ]
    view = facts.table("names")
    assert view is not None and view.is_view and view.keys == ()
    assert facts.table("customers", _maria(my_db).name) is not None
    assert facts.table("missing") is None


def test_a_schema_change_through_the_connection_is_seen(my_db: EngineDB) -> None:
    """The catalog is read once and again after DDL through the guarded connection: customers losing its
    primary key loses the row identity the join-copy check needs."""
    con = my_db.guarded()
    _, before = my_db.fetch(con, EXPLODING_SQL)
    assert before.provenance == "amplified" and before.action == "distinct_injected"
    con.cursor().execute("ALTER TABLE customers DROP PRIMARY KEY")
    rows, after = my_db.fetch(con, EXPLODING_SQL)
    assert len(rows) == 24 and after.provenance == "unknown" and after.action == "none"
    assert "no row identity for c (customers)" in after.decisions[0].reason


def test_a_key_matched_under_another_collation_is_not_taken_for_a_lookup(my_db: EngineDB) -> None:
    """``codes.code`` is unique byte for byte (latin1_bin: 'a' and 'A' are two codes), but equal to a
    utf8mb4_general_ci column it compares under that column's collation, case-insensitively: each order
    matches both codes. The key does not bound the join, and the guard says so instead of calling the
    orders' repeats a lookup's."""
    my_db.raw_run("CREATE TABLE codes (code VARCHAR(5) CHARACTER SET latin1 COLLATE latin1_bin NOT NULL UNIQUE)")
    my_db.raw_run("CREATE TABLE tickets (id INT PRIMARY KEY, code VARCHAR(5) COLLATE utf8mb4_general_ci)")
    my_db.raw_many("INSERT INTO codes VALUES (%s)", [("a",), ("A",)])
    my_db.raw_many("INSERT INTO tickets VALUES (%s, %s)", [(1, "a"), (2, "a"), (3, "A")])
    sql = "SELECT t.id FROM tickets AS t JOIN codes AS k ON t.code = k.code"
    assert sorted(my_db.raw_rows(sql)) == [(1,), (1,), (2,), (2,), (3,), (3,)]
    rows, report = my_db.fetch(my_db.guarded(GuardPolicy(tau_inject=0.1)), sql)
    assert len(rows) == 6 and report.trigger == "cartesian_explosion" and report.action == "none"
    assert report.provenance == "unknown"
    assert "matched under another collation (utf8mb4_general_ci = latin1_bin)" in report.provenance_evidence


def test_the_catalog_is_never_read_past_an_open_stream(my_db: EngineDB) -> None:
    """While an ``SSCursor``'s rows are still being read, running anything else on the connection would
    make PyMySQL read (and drop) the rest: the guard's catalog read is refused instead (no table known,
    and nothing kept, so it is read when next needed), and the stream delivers every row."""
    import pymysql.cursors

    from guarded_sqlite._analysis.schema_mysql import read_mysql_schema

    conn = _maria(my_db).connect()
    streaming = guarded_sqlite.wrap(conn).cursor(pymysql.cursors.SSCursor)
    streaming.execute("SELECT id FROM customers ORDER BY id")
    assert streaming.fetchone() == (0,)
    assert read_mysql_schema(conn).tables == ()
    assert list(streaming.fetchall()) == [(1,), (2,), (3,)]
    assert read_mysql_schema(conn).table("customers") is not None


def test_candidates_take_the_statements_parameters(my_db: EngineDB) -> None:
    """Rescue candidates are bound with the statement's parameters, as PyMySQL binds the statement; one
    they do not fit (a literal %) runs as written."""
    con = my_db.guarded(GuardPolicy(rescue=DupRatioSelector()))
    cur = con.cursor()
    cur.execute(
        EXPLODING_SQL + " WHERE o.amount >= %s",
        (0,),
        candidates=["SELECT name FROM customers WHERE id >= %s ORDER BY name", "SELECT 'x%'"],
    )
    assert list(cur.fetchall()) == DISTINCT_NAMES and cur.guard_report.action == "candidate_selected"
    assert cur.guard_report.rescue.candidates[0].sql.endswith("id >= 0 ORDER BY name")
    assert cur.guard_report.rescue.candidates[1].sql == "SELECT 'x%'"


def test_scroll_callproc_and_the_schema_summary(my_db: EngineDB) -> None:
    """``scroll`` moves over rows served as PyMySQL returned them and refuses patched ones; ``callproc``
    passes the procedure's result through unprobed; the rescue prompt's schema lists this database."""
    import pymysql

    from guarded_sqlite._engines import MYSQL

    cur = my_db.guarded("observe").cursor()
    cur.execute("SELECT id FROM customers ORDER BY id")
    assert cur.fetchone() == (0,)
    cur.scroll(2, "absolute")
    assert cur.fetchone() == (2,) and cur.rownumber == 3
    patched = my_db.con.cursor()
    patched.execute(EXPLODING_SQL)
    with pytest.raises(pymysql.err.NotSupportedError):
        patched.scroll(1)
    my_db.raw_run("CREATE PROCEDURE two() SELECT 1 UNION ALL SELECT 1")
    cur = my_db.con.cursor()
    assert cur.callproc("two") == ()
    assert cur.fetchall() == ((1,), (1,)) and not cur.guard_report.probed
    assert "callproc()" in cur.guard_report.note
    summary = MYSQL.schema_summary(my_db.raw).splitlines()
    assert "customers(id, name, city)" in summary and "orders(id, customer_id, amount)" in summary


def test_mysqls_own_time_limit_is_set_and_restored() -> None:
    """On MySQL's server (not MariaDB's) the guard's statement runs under the session's
    ``max_execution_time`` in milliseconds, restored after, also when the statement fails."""
    from guarded_sqlite._engines.mysql import _SessionTimeLimit

    class Recorder:
        def __init__(self) -> None:
            self.sent: list[str] = []

        def execute(self, sql: str) -> None:
            self.sent.append(sql)

        def fetchone(self) -> tuple[int]:
            return (2500,)

    cursor = Recorder()
    with pytest.raises(RuntimeError), _SessionTimeLimit(cursor, 0.3, mariadb=False):
        raise RuntimeError("the statement failed")
    assert cursor.sent == [
        "SELECT @@SESSION.max_execution_time",
        "SET SESSION max_execution_time = 300",
        "SET SESSION max_execution_time = 2500",
    ]
    quiet = Recorder()
    with _SessionTimeLimit(quiet, 0.3, mariadb=True), _SessionTimeLimit(quiet, None, mariadb=False):
        pass
    assert quiet.sent == []  # MariaDB limits the statement itself; no limit, nothing set


def test_the_agent_tools_take_a_mariadb_connection(my_db: EngineDB) -> None:
    """``GuardedDatabase`` takes a guarded PyMySQL connection in autocommit mode (the agent tools' own
    tests, on a ``mysql://`` URI too, are ``tests/agent/test_agent_mariadb.py``)."""
    from guarded_sqlite.agent import GuardedDatabase

    db = GuardedDatabase(my_db.con)
    assert db.dialect == "mysql"
    assert db.query(EXPLODING_SQL).report.trigger is not None


def test_the_guards_own_statements_are_buffered_and_shaped_as_the_callers_rows(my_db: EngineDB) -> None:
    """The guard's statements use the caller's dict shape but never an unbuffered cursor class."""
    import pymysql.cursors

    from guarded_sqlite._engines import MYSQL

    for kind, expected in [
        (pymysql.cursors.Cursor, None),
        (pymysql.cursors.DictCursor, pymysql.cursors.DictCursor),
        (pymysql.cursors.SSDictCursor, pymysql.cursors.DictCursor),
    ]:
        assert MYSQL.row_factory(my_db.raw.cursor(kind)) is expected
