"""Reusing an aggregate confirmation (``guarded_sqlite._rules.confirmations``): reused on unchanged data, and
never after anything that can change what the check query reads, nor for a statement that calls a user
or non-deterministic function."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

import guarded_sqlite
from guarded_sqlite._rules.confirmations import REUSED, names_function, parameters_key

AT_RISK = (
    "SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id "
    "JOIN items i ON i.order_id = o.id GROUP BY c.id ORDER BY c.id"
)
SCHEMA = (
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);"
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, total INTEGER);"
    "CREATE TABLE items (id INTEGER PRIMARY KEY, order_id INTEGER, qty INTEGER);"
    "INSERT INTO customers VALUES (1, 'ann'), (2, 'bob');"
    "INSERT INTO orders VALUES (1, 1, 10), (2, 1, 5), (3, 2, 7);"
    "INSERT INTO items VALUES (1, 1, 1), (2, 1, 2), (3, 2, 1), (4, 3, 1), (5, 3, 1), (6, 3, 1);"
)
TRUTH = [("ann", 15), ("bob", 7)]


# These tests are about reuse, not the budget: a loaded machine must not stop a first check.
pytestmark = pytest.mark.usefixtures("generous_budget")


def _fill(path: Path) -> None:
    raw = sqlite3.connect(path)
    raw.executescript(SCHEMA)
    raw.commit()
    raw.close()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    db = tmp_path / "shop.db"
    _fill(db)
    return db


def run(con: Any, sql: str = AT_RISK, parameters: Any = ()) -> tuple[list[Any], bool]:
    """The served rows and whether the confirmation was reused."""
    cur = con.execute(sql, parameters)
    rows = cur.fetchall()
    report = cur.guard_report
    return rows, any(REUSED in d.reason for d in report.decisions)


def warmed(con: Any, sql: str = AT_RISK) -> None:
    """Run until reused (the first statement of a connection may make the TEMP schema appear)."""
    for _ in range(3):
        if run(con, sql)[1]:
            return
    raise AssertionError("never reused")


def test_reused_on_unchanged_data_with_the_same_decision(path: Path) -> None:
    con = guarded_sqlite.connect(path, guard="text_to_sql")
    first = con.execute(AT_RISK)
    assert first.fetchall() == TRUTH
    first_reason = first.guard_report.decisions[0].reason
    warmed(con)
    cur = con.execute(AT_RISK)
    assert cur.fetchall() == TRUTH
    report = cur.guard_report
    assert report.trigger == "aggregate_fanout" and report.action == "aggregate_defanned"
    assert report.decisions[0].reason == f"{first_reason}; {REUSED}"


def test_default_preset_reuses_and_leaves_rows_as_written(path: Path) -> None:
    con = guarded_sqlite.connect(path)
    warmed(con)
    rows, reused = run(con)
    assert reused and rows == [("ann", 25), ("bob", 21)]
    assert con.execute(AT_RISK).guard_report.trigger == "aggregate_fanout"


def test_parameters_are_part_of_the_key(path: Path) -> None:
    con = guarded_sqlite.connect(path, guard="text_to_sql")
    sql = AT_RISK.replace("GROUP BY", "WHERE c.id >= ? GROUP BY")
    for _ in range(3):
        run(con, sql, (1,))
    rows, reused = run(con, sql, (2,))
    assert rows == TRUTH[1:] and not reused
    assert run(con, sql, (2,)) == (TRUTH[1:], True)
    assert run(con, sql, (1.0,))[1] is False  # 1.0 is not 1 to the key


def test_another_connections_commit(path: Path) -> None:
    con = guarded_sqlite.connect(path, guard="text_to_sql")
    warmed(con)
    other = sqlite3.connect(path)
    other.execute("UPDATE orders SET total = 100 WHERE id = 3")
    other.commit()
    assert run(con) == ([("ann", 15), ("bob", 100)], False)
    other.close()


def test_own_write(path: Path) -> None:
    con = guarded_sqlite.connect(path, guard="text_to_sql")
    warmed(con)
    con.execute("UPDATE orders SET total = 100 WHERE id = 3")
    con.commit()
    assert run(con) == ([("ann", 15), ("bob", 100)], False)


def test_rollback_and_open_transaction(path: Path) -> None:
    con = guarded_sqlite.connect(path, guard="text_to_sql")
    warmed(con)
    con.execute("UPDATE orders SET total = 100 WHERE id = 3")
    # Inside the transaction: checked on what the transaction sees, never reused nor kept.
    assert run(con) == ([("ann", 15), ("bob", 100)], False)
    assert run(con) == ([("ann", 15), ("bob", 100)], False)
    con.rollback()
    assert run(con) == (TRUTH, False)


def test_ddl(path: Path) -> None:
    con = guarded_sqlite.connect(path, guard="text_to_sql")
    sql = AT_RISK.replace("FROM customers c", "FROM people c")
    con.execute("CREATE VIEW people AS SELECT * FROM customers")
    warmed(con, sql)
    con.execute("DROP VIEW people")
    con.execute("CREATE VIEW people AS SELECT * FROM customers WHERE id = 2")
    assert run(con, sql) == (TRUTH[1:], False)


def test_ddl_by_another_connection(path: Path) -> None:
    con = guarded_sqlite.connect(path, guard="text_to_sql")
    sql = AT_RISK.replace("FROM customers c", "FROM people c")
    con.execute("CREATE VIEW people AS SELECT * FROM customers")
    warmed(con, sql)
    other = sqlite3.connect(path)
    other.executescript("DROP VIEW people; CREATE VIEW people AS SELECT * FROM customers WHERE id = 2;")
    other.close()
    assert run(con, sql) == (TRUTH[1:], False)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="sqlite3 has deserialize() from Python 3.11")
def test_deserialize() -> None:
    con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    con.executescript(SCHEMA)
    con.commit()
    image = con.serialize()
    con.execute("UPDATE orders SET total = 100 WHERE id = 3")
    con.commit()
    warmed(con)
    assert run(con) == ([("ann", 15), ("bob", 100)], True)
    con.deserialize(image)
    assert run(con) == (TRUTH, False)


def test_backup_into_the_connection(path: Path) -> None:
    con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    con.executescript(SCHEMA.replace("(3, 2, 7)", "(3, 2, 100)"))
    con.commit()
    warmed(con)
    source = sqlite3.connect(path)
    source.backup(con)  # type: ignore[arg-type]  # sqlite3 takes the guarded connection's class
    source.close()
    assert run(con) == (TRUTH, False)


def _guarded(kind: str, path: Path | str, **kwargs: Any) -> Any:
    if kind == "connect":
        return guarded_sqlite.connect(path, guard="text_to_sql", **kwargs)
    return guarded_sqlite.wrap(sqlite3.connect(path, **kwargs), guard="text_to_sql")


RENAMED = [("amy", 15), ("bob", 7)]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="sqlite3 has blobopen() from Python 3.11")
@pytest.mark.parametrize("kind", ["connect", "wrap"])
def test_blob_write(path: Path, kind: str) -> None:
    """c21: a write through the connection's blob I/O moves no version number; opening the blob for
    writing invalidates, and nothing is kept or reused while it is open."""
    con = _guarded(kind, path)
    warmed(con)
    with con.blobopen("customers", "name", 1) as blob:
        assert run(con) == (TRUTH, False)
        blob.write(b"amy")
        assert run(con) == (RENAMED, False)
        assert run(con) == (RENAMED, False)  # kept by none of the runs while the blob is open
    con.commit()
    assert run(con) == (RENAMED, False)
    assert run(con) == (RENAMED, True)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="sqlite3 has blobopen() from Python 3.11")
def test_a_blob_read_only_or_closed_keeps_the_confirmation(path: Path) -> None:
    con = guarded_sqlite.connect(path, guard="text_to_sql")
    warmed(con)
    with con.blobopen("customers", "name", 1, readonly=True) as blob:
        assert blob.read() == b"ann"
        assert run(con) == (TRUTH, True)
    blob = con.blobopen("customers", "name", 1)
    assert run(con) == (TRUTH, False)
    del blob  # collected, so closed
    assert run(con) == (TRUTH, False)
    assert run(con) == (TRUTH, True)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="sqlite3 has blobopen() from Python 3.11")
def test_closed_blobs_are_not_remembered(path: Path) -> None:
    con = guarded_sqlite.connect(path, guard="text_to_sql")
    kept = []
    for _ in range(50):
        with con.blobopen("customers", "name", 1) as blob:
            blob.write(b"ann")
        kept.append(con.blobopen("customers", "name", 2))
        kept.pop().close()
    assert len(con._self_guard.blobs) <= 1


def test_shared_cache_read_uncommitted(tmp_path: Path) -> None:
    """c23: a shared cache's other connection's commit moves data_version, its uncommitted write locks
    the table; under ``read_uncommitted`` the statement reads that write, which moves nothing: not kept."""
    uri = f"file:{tmp_path / 'shared.db'}?cache=shared"
    other = sqlite3.connect(uri, uri=True, isolation_level=None)
    other.executescript(SCHEMA)
    con = guarded_sqlite.connect(uri, uri=True, guard="text_to_sql", isolation_level=None)
    warmed(con)
    other.execute("UPDATE orders SET total = 100 WHERE id = 3")
    assert run(con) == ([("ann", 15), ("bob", 100)], False)
    assert run(con) == ([("ann", 15), ("bob", 100)], True)
    other.execute("BEGIN")
    other.execute("UPDATE orders SET total = 7 WHERE id = 3")
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        run(con)
    sqlite3.Cursor(con).execute("PRAGMA read_uncommitted = 1")  # unseen by the guard
    assert run(con) == (TRUTH, False)
    assert run(con) == (TRUTH, False)
    other.execute("ROLLBACK")
    assert run(con) == ([("ann", 15), ("bob", 100)], False)
    other.close()


def test_case_sensitive_like_through_a_plain_cursor(path: Path) -> None:
    con = guarded_sqlite.connect(path, guard="text_to_sql")
    con.execute("UPDATE customers SET name = 'Abby' WHERE id = 2")
    con.commit()
    sql = AT_RISK.replace("GROUP BY", "WHERE c.name LIKE 'a%' GROUP BY")
    warmed(con, sql)
    assert run(con, sql) == ([("ann", 15), ("Abby", 7)], True)
    sqlite3.Cursor(con).execute("PRAGMA case_sensitive_like = 1")  # unseen by the guard
    assert run(con, sql) == ([("ann", 15)], False)


@pytest.mark.parametrize("kind", ["connect", "wrap"])
def test_an_authorizer_that_reads_a_column_as_null(path: Path, kind: str) -> None:
    con = _guarded(kind, path)
    warmed(con)

    def no_totals(action: int, table: str | None, column: str | None, *_: Any) -> int:
        hidden = action == sqlite3.SQLITE_READ and (table, column) == ("orders", "total")
        return sqlite3.SQLITE_IGNORE if hidden else sqlite3.SQLITE_OK

    con.set_authorizer(no_totals)
    assert run(con) == ([("ann", None), ("bob", None)], False)


def test_attached_file_changed(path: Path, tmp_path: Path) -> None:
    aux = tmp_path / "aux.db"
    _fill(aux)
    con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    con.execute("ATTACH DATABASE ? AS aux", (str(aux),))
    sql = AT_RISK.replace("FROM customers", "FROM aux.customers").replace("JOIN orders", "JOIN aux.orders")
    sql = sql.replace("JOIN items", "JOIN aux.items")
    warmed(con, sql)
    other = sqlite3.connect(aux)
    other.execute("UPDATE orders SET total = 100 WHERE id = 3")
    other.commit()
    other.close()
    assert run(con, sql) == ([("ann", 15), ("bob", 100)], False)


def test_reattached_under_the_same_name(path: Path, tmp_path: Path) -> None:
    aux, other = tmp_path / "aux.db", tmp_path / "other.db"
    _fill(aux)
    _fill(other)
    changed = sqlite3.connect(other)
    changed.execute("UPDATE orders SET total = 100 WHERE id = 3")
    changed.commit()
    changed.close()
    con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    con.execute("ATTACH DATABASE ? AS aux", (str(aux),))
    sql = AT_RISK.replace("FROM customers", "FROM aux.customers").replace("JOIN orders", "JOIN aux.orders")
    sql = sql.replace("JOIN items", "JOIN aux.items")
    warmed(con, sql)
    con.execute("DETACH DATABASE aux")
    con.execute("ATTACH DATABASE ? AS aux", (str(other),))
    assert run(con, sql) == ([("ann", 15), ("bob", 100)], False)


def test_never_kept_with_a_user_function(path: Path) -> None:
    calls = [0]

    def fx(value: Any) -> Any:
        calls[0] += 1
        return value

    con = guarded_sqlite.connect(path, guard="text_to_sql")
    con.create_function("fx", 1, fx, deterministic=True)
    sql = AT_RISK.replace("SUM(o.total)", "SUM(fx(o.total))")
    for _ in range(4):
        calls[0] = 0
        assert run(con, sql)[1] is False
        assert calls[0] > 6  # the statement's own calls (6 join rows) and the check's
    assert not con._self_guard.confirmations


def test_never_kept_with_a_user_function_named_as_a_builtin(path: Path) -> None:
    con = guarded_sqlite.connect(path, guard="text_to_sql")
    con.create_function("abs", 1, lambda value: value, deterministic=True)
    sql = AT_RISK.replace("SUM(o.total)", "SUM(abs(o.total))")
    for _ in range(3):
        assert run(con, sql)[1] is False
    assert not con._self_guard.confirmations


@pytest.mark.parametrize("name", ["fx", "a_function_named_past_sixteen_bytes"])
def test_never_kept_with_a_user_function_a_generated_column_calls(path: Path, name: str) -> None:
    """c19: the text names no function, the generated column calls the application's: checked every
    time, never kept (EXPLAIN cuts names at 16 bytes: a longer one is still found). The same
    connection's statements that reach no such function are kept as before."""
    calls = [0]

    def fx(value: Any) -> Any:
        calls[0] += 1
        return value

    con = guarded_sqlite.connect(path, guard="text_to_sql")
    con.create_function(name, 1, fx, deterministic=True)
    warmed(con)
    con.execute(f"ALTER TABLE orders ADD COLUMN t2 INTEGER GENERATED ALWAYS AS ({name}(total)) VIRTUAL")
    sql = AT_RISK.replace("o.total", "o.t2")
    for _ in range(3):
        calls[0] = 0
        assert run(con, sql) == (TRUTH, False)
        assert calls[0] > 6  # the statement's own calls (6 join rows) and the check's, fenced
    assert all(key[0] != sql for key in con._self_guard.confirmations)
    assert run(con) == (TRUTH, False)  # the ALTER moved the schema version
    assert run(con) == (TRUTH, True)


def test_never_kept_with_an_application_like_the_operator_calls(path: Path) -> None:
    con = guarded_sqlite.connect(path, guard="text_to_sql")
    con.create_function("like", 2, lambda pattern, value: value.startswith(pattern[:-1]), deterministic=True)
    sql = AT_RISK.replace("GROUP BY", "WHERE c.name LIKE 'a%' GROUP BY")
    for _ in range(3):
        assert run(con, sql) == (TRUTH[:1], False)
    assert not con._self_guard.confirmations


def test_never_kept_when_not_deterministic(path: Path) -> None:
    con = guarded_sqlite.connect(path)
    sql = AT_RISK.replace("SUM(o.total)", "SUM(o.total + (random() % 1))")
    for _ in range(3):
        assert run(con, sql)[1] is False
    assert not con._self_guard.confirmations


def test_registering_a_function_invalidates(path: Path) -> None:
    con = guarded_sqlite.connect(path, guard="text_to_sql")
    warmed(con)
    con.create_collation("reverse", lambda a, b: (a < b) - (a > b))
    assert run(con)[1] is False


def test_duckdb_keeps_nothing() -> None:
    duckdb = pytest.importorskip("duckdb")
    con = guarded_sqlite.wrap(duckdb.connect(), guard="text_to_sql")
    con.execute(
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);"
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, total INTEGER);"
        "CREATE TABLE items (id INTEGER PRIMARY KEY, order_id INTEGER, qty INTEGER);"
        "INSERT INTO customers VALUES (1, 'ann'), (2, 'bob');"
        "INSERT INTO orders VALUES (1, 1, 10), (2, 1, 5), (3, 2, 7);"
        "INSERT INTO items VALUES (1, 1, 1), (2, 1, 2), (3, 2, 1), (4, 3, 1), (5, 3, 1), (6, 3, 1);"
    )
    sql = AT_RISK.replace("GROUP BY c.id", "GROUP BY c.id, c.name")
    for _ in range(3):
        assert con.execute(sql).fetchall() == TRUTH
    assert not con._self_guard.confirmations


def test_parameters_key() -> None:
    assert parameters_key(()) == ()
    assert parameters_key((1,)) != parameters_key((1.0,)) != parameters_key((True,))
    assert parameters_key((0.0,)) != parameters_key((-0.0,))
    assert parameters_key({"b": 1, "a": "x"}) == parameters_key({"a": "x", "b": 1})
    assert parameters_key((memoryview(b"x"),)) is None
    assert parameters_key(iter([1])) is None


def test_names_function() -> None:
    assert names_function("SELECT FX (a) FROM t", frozenset({"fx"}))
    assert not names_function("SELECT myfx(a), fx FROM t", frozenset({"fx"}))
    assert not names_function("SELECT fx(a)", frozenset())
    for quoted in ('SELECT "fx"(a)', "SELECT [fx] (a)", "SELECT `FX`(a)", "SELECT 'fx(' AS text"):
        assert names_function(quoted, frozenset({"fx"})), quoted
    assert names_function("SELECT grüße(a)", frozenset({"grüße"}))
    assert not names_function("SELECT 1fx(a), x_fx(b), $fx(c)", frozenset({"fx"}))
    assert names_function("SELECT abs(a), fx(b)", frozenset({"fx", "other"}))


def test_sqlites_own_extension_functions_are_not_the_applications() -> None:
    """FTS's ``match`` and ``bm25`` or R-tree's ``rtreenode``, which SQLite lists without the built-in
    flag on every connection, are the library's: a connection without functions of the application's
    has none, so no statement pays for reading its program (p17). One registered through the guarded
    connection counts, whatever its name."""
    from guarded_sqlite._guard.aggregate_check import user_functions

    con = guarded_sqlite.connect(":memory:")
    assert user_functions(con._self_guard) == frozenset()
    con.create_function("audit", 1, lambda value: value)
    con.create_function("match", 2, lambda pattern, value: 0)
    assert user_functions(con._self_guard) == {"audit", "match"}
