"""``GuardedDatabase``, the MCP server and the framework tools on a real MariaDB server (issue 37 item 4).

The server is the session's throwaway one (``tests/mariadb_server.py``; CI sets
GUARDED_SQLITE_REQUIRE_MARIADB=1, so there a missing server fails). Each test gets the demo shop in a
database of its own, reached through a ``mysql://`` URI as ``GuardedDatabase.open`` and
``guarded-sqlite mcp`` are given it. The account is the one docs/agents.md asks for (``MyShop.reader``:
SELECT on the shop's database, nothing else), which the tool's check of its grants lets through; where a
test needs an account that may write, to show that the read-only transaction refuses the write by
itself, it connects as root with ``allow_privileged=True``. ``no_checks`` switches the statement check
off to show what the server enforces alone.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pymysql = pytest.importorskip("pymysql")

from guarded_sqlite import wrap  # noqa: E402
from guarded_sqlite.agent import GuardedDatabase, QueryRefused, lockdown  # noqa: E402
from guarded_sqlite.cli.commands import main  # noqa: E402
from guarded_sqlite.cli.demo import CUSTOMERS, PRODUCTS, build_shop  # noqa: E402
from tests.agent_cases import AGGREGATE, FAN_OUT, OpenDb, opened_databases  # noqa: E402
from tests.engines.test_engines import MariaDatabase, maria_database  # noqa: E402, F401 (the fixture)
from tests.pace import within  # noqa: E402

MY_SHOP = [
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name VARCHAR(40) NOT NULL, city VARCHAR(40) NOT NULL, "
    "points INTEGER NOT NULL)",
    "CREATE TABLE products (id INTEGER PRIMARY KEY, name VARCHAR(40) NOT NULL, category VARCHAR(40) NOT NULL, "
    "price DOUBLE NOT NULL)",
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL, ordered_on VARCHAR(10) NOT NULL, "
    "FOREIGN KEY (customer_id) REFERENCES customers(id))",
    "CREATE TABLE order_items (order_id INTEGER NOT NULL, product_id INTEGER NOT NULL, quantity INTEGER NOT NULL, "
    "FOREIGN KEY (order_id) REFERENCES orders(id), FOREIGN KEY (product_id) REFERENCES products(id))",
]

CHECKSUM = (
    "SELECT MD5(CONCAT_WS('|', "
    "(SELECT GROUP_CONCAT(CONCAT_WS(',', id, name, city, points) ORDER BY id) FROM customers), "
    "(SELECT GROUP_CONCAT(CONCAT_WS(',', id, customer_id) ORDER BY id) FROM orders), "
    "(SELECT COUNT(*) FROM order_items), "
    "(SELECT GROUP_CONCAT(table_name ORDER BY table_name) FROM information_schema.tables "
    "WHERE table_schema = DATABASE())))"
)
"""A checksum of the shop's rows and tables: equal before and after means nothing was written."""

TIMEOUT = 2.0


class MyShop:
    """The demo shop in a fresh database; ``uri`` reaches it as the account docs/agents.md asks for
    (``reader``), ``root_uri`` as root (which the tool refuses unless ``allow_privileged``)."""

    def __init__(self, database: MariaDatabase) -> None:
        self.database = database
        params = database.params
        self.port = int(params["port"])
        self.root_uri = f"mysql://root@{params['host']}:{self.port}/{database.name}"
        with self.admin() as cur:
            for statement in MY_SHOP:
                cur.execute(statement)
            cur.executemany("INSERT INTO customers VALUES (%s, %s, %s, %s)", CUSTOMERS)
            cur.executemany("INSERT INTO products VALUES (%s, %s, %s, %s)", PRODUCTS)
            # The same orders and lines as guarded_sqlite.cli.demo.build_shop.
            orders = [(i, 1 + i % len(CUSTOMERS), f"2026-{1 + i % 12:02d}-15") for i in range(1, 31)]
            cur.executemany("INSERT INTO orders VALUES (%s, %s, %s)", orders)
            lines = [(o, p, 1) for o in range(1, 31) for p in range(1, len(PRODUCTS) + 1)]
            cur.executemany("INSERT INTO order_items VALUES (%s, %s, %s)", lines)
        self.uri = self.reader()

    def admin(self) -> Any:
        """A cursor of a new plain autocommit connection on the shop (the connection is the fixture's)."""
        return self.database.connect().cursor()

    def value(self, sql: str, *args: Any) -> Any:
        with self.admin() as cur:
            cur.execute(sql, args or None)
            return cur.fetchone()[0]

    def checksum(self) -> Any:
        return self.value(CHECKSUM)

    def reader(self) -> str:
        """The account docs/agents.md asks for (SELECT on this database, nothing else); its URI."""
        name = f"r_{uuid.uuid4().hex[:10]}"
        with self.admin() as cur:
            cur.execute(f"CREATE USER '{name}'@'127.0.0.1' IDENTIFIED BY 'pw' WITH MAX_USER_CONNECTIONS 4")
            cur.execute(f"GRANT SELECT ON `{self.database.name}`.* TO '{name}'@'127.0.0.1'")
        return f"mysql://{name}:pw@127.0.0.1:{self.port}/{self.database.name}"


@pytest.fixture
def my_shop(maria_database: MariaDatabase) -> MyShop:  # noqa: F811 (the fixture imported above)
    return MyShop(maria_database)


@pytest.fixture
def open_my(my_shop: MyShop) -> Iterator[OpenDb]:
    """``GuardedDatabase.open(uri, ...)`` on the shop, in process unless told otherwise, closed after."""
    yield from opened_databases(my_shop.uri, isolated=False, timeout=TIMEOUT)


@pytest.fixture
def no_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Switch the statement checks off (the write check and the denied names), so that only what the
    server enforces stands: the read-only transaction, the time limit, the session reset."""
    import guarded_sqlite._analysis.rewrite as rewrite

    monkeypatch.setattr(lockdown, "denied_call_problem", lambda sql, dialect: None)
    monkeypatch.setattr(rewrite, "is_read_only_query", lambda sql, dialect="sqlite": True)


def refusal(db: GuardedDatabase, sql: str, time_limit: float | None = None) -> QueryRefused:
    with pytest.raises(QueryRefused) as refused:
        db.query(sql, time_limit=time_limit)
    return refused.value


# --- schema and feedback -----------------------------------------------------------------------------


def test_schema_has_typed_columns_keys_foreign_keys_cardinality_and_row_counts(
    open_my: OpenDb, my_shop: MyShop
) -> None:
    info = open_my().schema()
    assert info.dialect == "mysql" and info.default_schema == my_shop.database.name
    tables = {table.name: table for table in info.tables}
    assert {name: table.row_count for name, table in tables.items()} == {
        "customers": 6,
        "orders": 30,
        "order_items": 150,
        "products": 5,
    }  # only this database's tables, though root sees the other tests' databases too
    assert tables["customers"].keys == (("id",),)
    assert tables["customers"].columns[:2] == (("id", "int(11)"), ("name", "varchar(40)"))
    text = info.text()
    assert "foreign key: (customer_id) -> customers(id), many-to-one" in text
    assert "joining orders repeats each customers row once per matching orders row" in text
    assert "Table order_items, 150 rows\n" in text and "keys: none declared (rows may repeat)" in text


@pytest.mark.parametrize(("guard", "sql"), [("observe", FAN_OUT), ("text_to_sql", AGGREGATE)])
def test_feedback_and_rows_are_the_same_as_on_sqlite(open_my: OpenDb, tmp_path: Path, guard: str, sql: str) -> None:
    path = tmp_path / "shop.db"
    build_shop(path)
    mine = open_my(guard=guard).query(sql)
    with GuardedDatabase.open(path, guard=guard, isolated=False) as lite:
        sqlite = lite.query(sql)
    assert mine.report.trigger == sqlite.report.trigger and mine.report.action == sqlite.report.action
    assert sorted(tuple(float(v) if not isinstance(v, str) else v for v in row) for row in mine.rows) == sorted(
        sqlite.rows
    )
    assert mine.feedback and "Guard feedback:\n" in mine.observation()


def test_percent_signs_are_text_and_parameters_are_bound(open_my: OpenDb) -> None:
    db = open_my()
    assert db.query("SELECT name FROM customers WHERE name LIKE 'A%' ORDER BY id").rows == (("Ana Lima",),)
    assert db.query("SELECT name FROM customers WHERE id = %s", [3]).rows == (("Chen Wei",),)


# --- what the server enforces ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "kind"),
    [
        ("DELETE FROM orders", "write"),
        ("SELECT 1; DELETE FROM orders", "write"),
        ("SELECT 1; SELECT 2", "multiple_statements"),
        ("SELECT 'it''s'; SELECT 2", "multiple_statements"),
        ("/*!50000 DELETE FROM orders */", "not_a_query"),
        ("SELECT 1 /*!50000 , (SELECT 2) */", "denied"),
        ("SELECT /*M! 1, */ 2", "denied"),
        ("SELECT /*+ MAX_EXECUTION_TIME(0) */ SLEEP(5)", "denied"),
        ("SELECT * FROM customers INTO OUTFILE '/tmp/guarded-never'", "write"),
        ("SELECT LOAD_FILE('/etc/hostname')", "denied"),
        ("SELECT GET_LOCK('agent', 0)", "denied"),
        ("SET SESSION max_statement_time = 0", "write"),
        ("HANDLER customers OPEN", "write"),
        ("DO SLEEP(5)", "write"),
        ("LOCK TABLES customers WRITE", "write"),
        ("CALL nothing()", "write"),
        ("KILL CONNECTION_ID()", "write"),
    ],
)
def test_statements_the_tool_refuses_by_reading_them(open_my: OpenDb, my_shop: MyShop, sql: str, kind: str) -> None:
    before = my_shop.checksum()
    db = open_my(my_shop.root_uri, allow_privileged=True)  # root may write files: the reading refuses it
    assert refusal(db, sql).kind == kind
    assert db.query("SELECT count(*) FROM orders").rows == ((30,),)
    assert my_shop.checksum() == before


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM orders",
        "INSERT INTO customers VALUES (9, 'x', 'y', 1)",
        "CREATE TEMPORARY TABLE t (x INT)",
        "SELECT wipe()",  # a stored function that deletes: a SELECT by every reading of its text
        "SELECT * FROM customers FOR UPDATE",  # row locks for writing: refused in a read-only transaction
    ],
)
def test_with_the_checks_off_the_read_only_transaction_refuses_writes(
    open_my: OpenDb, my_shop: MyShop, no_checks: None, sql: str
) -> None:
    with my_shop.admin() as cur:
        cur.execute("CREATE FUNCTION wipe() RETURNS INT MODIFIES SQL DATA BEGIN DELETE FROM order_items; RETURN 1; END")
    before = my_shop.checksum()
    db = open_my(my_shop.root_uri, allow_privileged=True)  # an account that may write: the transaction stops it
    refused = refusal(db, sql)
    assert refused.kind == "write" and "READ ONLY" in str(refused), str(refused)
    assert my_shop.checksum() == before
    assert db.query("SELECT count(*) FROM order_items").rows == ((150,),)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM customers LOCK IN SHARE MODE",
        "SELECT * FROM customers FOR SHARE",
        "SELECT 1 FOR SHARE",
        # sqlglot reads the rest after `begin execute` as one string; the server, a column and its alias.
        "SELECT begin execute FROM (SELECT id AS begin FROM customers) AS s LOCK IN SHARE MODE",
    ],
)
def test_a23_shared_row_locks_are_refused_like_named_locks(open_my: OpenDb, my_shop: MyShop, sql: str) -> None:
    """a23's row lock (issue 43 item 4): a shared row lock is allowed in a read-only transaction and holds an
    application's ``UPDATE`` off for the whole call, as ``GET_LOCK`` would: refused before it runs."""
    db = open_my()
    assert refusal(db, sql).kind == "denied"
    assert db.query("SELECT `lock`, share FROM (SELECT 1 AS `lock`, 2 AS share) AS t").rows == ((1, 2),)


def test_shared_row_locks_end_with_the_call(open_my: OpenDb, my_shop: MyShop, no_checks: None) -> None:
    """Past the check, ``LOCK IN SHARE MODE`` reads in a read-only transaction; its locks end with the
    call's ROLLBACK."""
    db = open_my()
    assert len(db.query("SELECT * FROM customers LOCK IN SHARE MODE").rows) == 6
    with my_shop.admin() as cur:
        cur.execute("SET SESSION innodb_lock_wait_timeout = 1")
        cur.execute("UPDATE customers SET points = points WHERE id = 1")  # no lock wait: none is held


def test_with_the_checks_off_a_second_statement_is_the_server_s_syntax_error(open_my: OpenDb, no_checks: None) -> None:
    """The driver's multi-statement capability is off: the server reads one statement per call."""
    db = open_my()
    monkey = pytest.MonkeyPatch()
    monkey.setattr(lockdown, "single_statement_problem", lambda *args, **kwargs: None)
    try:
        refused = refusal(db, "SELECT 1; DELETE FROM orders")
    finally:
        monkey.undo()
    assert refused.kind == "sql_error" and "syntax" in str(refused)
    assert db.query("SELECT count(*) FROM orders").rows == ((30,),)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT SLEEP(30)",
        "SELECT BENCHMARK(2000000000, MD5('x'))",
        "SELECT seq FROM seq_1_to_1000000000 ORDER BY RAND()",
    ],
)
def test_a_statement_past_the_time_limit_is_stopped_and_the_next_call_answers(open_my: OpenDb, sql: str) -> None:
    db = open_my(timeout=30)  # generous for the next, benign call; the slow one's own time_limit is 1 s
    started = time.monotonic()
    assert refusal(db, sql, time_limit=1.0).kind == "timeout"
    assert within(time.monotonic() - started, 1.0, 1.0)
    assert db.query("SELECT count(*) FROM orders").rows == ((30,),)


def test_a_statement_the_server_s_own_time_limit_ends_is_a_timeout_not_an_answer(
    open_my: OpenDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MariaDB ends ``BENCHMARK`` at ``max_statement_time`` and answers 0, without an error or a warning:
    when the server's limit comes before the tool's own watchdog (a busy machine), that answer was
    served. With the watchdog held back 5 s the server's limit always comes first."""
    from guarded_sqlite._core import deadlines

    late = deadlines.interrupt_after
    monkeypatch.setattr(deadlines, "interrupt_after", lambda seconds, *a, **k: late(seconds + 5, *a, **k))
    db = open_my(timeout=30)
    assert refusal(db, "SELECT BENCHMARK(2000000000, MD5('x'))", time_limit=1.0).kind == "timeout"
    assert db.query("SELECT count(*) FROM orders").rows == ((30,),)


def test_the_server_s_paths_are_hidden_from_the_select_only_account(open_my: OpenDb, my_shop: MyShop) -> None:
    """Issue 43 item 3's paths: any account reads ``@@datadir``, ``@@tmpdir``, ``@@socket`` and the
    variable tables; the tool refuses them as it hides SQLite's and DuckDB's file paths."""
    db = open_my(my_shop.reader())
    for sql in (
        "SELECT @@datadir AS d",
        "SELECT @@GLOBAL . `TmpDir` AS t",
        "SELECT @@global./**/socket AS s",
        "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_VARIABLES WHERE VARIABLE_NAME = 'BASEDIR'",
        "SELECT GLOBAL_VALUE FROM information_schema.SYSTEM_VARIABLES WHERE VARIABLE_NAME = 'DATADIR'",
        "SELECT @@innodb_undo_directory AS u",
        "SHOW VARIABLES LIKE 'datadir'",
    ):
        assert refusal(db, sql).kind in ("denied", "write"), sql
    assert db.query("SELECT @@version LIKE '%MariaDB%' AS m").rows == ((1,),)


def test_every_variable_that_holds_a_path_on_this_server_is_refused(open_my: OpenDb, my_shop: MyShop) -> None:
    """The list of path variables is checked against the server itself: every system variable whose
    value (or default) names a folder or file here is one the tool refuses to read."""
    from guarded_sqlite._analysis.statements import MYSQL_PATH_VARIABLES

    with my_shop.admin() as cur:
        cur.execute(
            "SELECT LOWER(VARIABLE_NAME) FROM information_schema.SYSTEM_VARIABLES WHERE "
            "(GLOBAL_VALUE LIKE '%/%' OR DEFAULT_VALUE LIKE '%/%') AND VARIABLE_NAME <> 'SERVER_UID'"
        )
        paths = {row[0] for row in cur.fetchall()}
    assert {"datadir", "tmpdir", "basedir", "plugin_dir", "socket"} <= paths  # the query finds them
    assert paths <= MYSQL_PATH_VARIABLES, paths - MYSQL_PATH_VARIABLES
    db = open_my(my_shop.reader())
    for name in sorted(paths):
        assert refusal(db, f"SELECT @@{name}").kind == "denied", name


A23_BUILT = [
    "SELECT LOCATE(CONCAT(REPEAT('a', 100000), 'b'), CONCAT(REPEAT('a', 1000000), '')) AS p",
    "SELECT id, INSTR(CONCAT(REPEAT('a', 1000000), name), CONCAT(REPEAT('a', 99999), 'b')) AS p FROM customers",
    "SELECT REPLACE(REPEAT('a', 1000000), 'a', 'bb') AS p",
    "SELECT x LIKE '%ab%' FROM (SELECT CONCAT(name, name) AS x FROM customers) AS d",
    "WITH RECURSIVE r (s, n) AS (SELECT 'a', 1 UNION ALL SELECT CONCAT(s, s), n + 1 FROM r WHERE n < 24) "
    "SELECT REGEXP_REPLACE(s, 'a', 'bb') FROM r",
]
"""a23's statements and their kin: a search function over a value the statement builds, minutes of one
evaluation the server cannot interrupt (``REPLACE`` of a million matches: over two minutes measured)."""


@pytest.mark.parametrize("sql", A23_BUILT)
def test_a23_search_functions_over_values_the_statement_builds_are_refused_before_they_run(
    open_my: OpenDb, my_shop: MyShop, sql: str
) -> None:
    """a23 (issue 43 item 4): refused ``denied`` at once, nothing sent to the server; the same
    functions over stored columns and short literals are served."""
    db = open_my(timeout=1.0)
    started = time.monotonic()
    refused = refusal(db, sql)
    assert refused.kind == "denied" and "cannot stop" in str(refused)
    assert time.monotonic() - started < 1.0
    served = db.query(
        "SELECT id, LOCATE('a', name) > 0, REPLACE(LOWER(name), ' ', '') LIKE '%a%' FROM customers "
        "WHERE CONCAT(name, '!') REGEXP '!$' ORDER BY id"
    )
    assert len(served.rows) == 6


STORED_RUNAWAY = "SELECT LOCATE(needle, haystack) AS p FROM long_values"
"""a23's search over stored values (4,001 and 1,000,000 characters, the operator's data, which the rule
above leaves alone): ~4·10^9 comparisons inside one function call, which neither ``max_statement_time``
nor ``KILL QUERY`` nor ``KILL CONNECTION`` interrupts (seconds of a core here)."""


@pytest.mark.parametrize("isolated", [False, True], ids=["in-process", "worker"])
def test_a23_a_statement_the_server_cannot_interrupt_holds_new_work_off_until_it_ends(
    open_my: OpenDb, my_shop: MyShop, isolated: bool
) -> None:
    """a23: at the deadline the call's connection is killed (``KILL QUERY``, then ``KILL CONNECTION``) and
    the call answered, saying the server still runs the statement; while it does every new call is
    refused ``busy``, so stopped statements never pile up past one; once the server has ended it, calls
    are served."""
    with my_shop.admin() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS long_values (needle LONGTEXT, haystack LONGTEXT)")
        cur.execute("DELETE FROM long_values")
        cur.execute("INSERT INTO long_values VALUES (CONCAT(REPEAT('a', 4000), 'b'), REPEAT('a', 1000000))")
    db = open_my(timeout=1.0, isolated=isolated)

    def running() -> int:
        return int(
            my_shop.value(
                "SELECT COUNT(*) FROM information_schema.processlist WHERE db = %s AND info LIKE 'SELECT LOCATE%%'",
                my_shop.database.name,
            )
        )

    started = time.monotonic()
    stopped = refusal(db, STORED_RUNAWAY)
    assert stopped.kind == "timeout"
    assert time.monotonic() - started < 2.5
    if running() == 0:
        pytest.skip("the server ended the statement before the next call could see it (a fast machine)")
    assert "still runs it" in str(stopped) and "was stopped" not in str(stopped)
    assert refusal(db, "SELECT count(*) FROM orders").kind == "busy"
    assert refusal(db, STORED_RUNAWAY + " WHERE 1 = 1").kind == "busy"
    assert running() <= 1  # the second runaway never started (the first may just have ended)
    until = time.monotonic() + 120
    while time.monotonic() < until:
        try:
            assert db.query("SELECT count(*) FROM orders").rows == ((30,),)
            break
        except QueryRefused as refused:
            assert refused.kind == "busy"
            assert running() <= 1
            time.sleep(0.25)
    else:
        pytest.fail("the stopped statement did not end within 120 seconds")
    assert running() == 0


def test_session_state_does_not_outlive_a_call(open_my: OpenDb, my_shop: MyShop, no_checks: None) -> None:
    """User variables, named locks and HANDLERs end with the call (COM_RESET_CONNECTION), with the
    statement check off: nothing but the reset stands between one call and the next."""
    db = open_my()
    assert db.query("SELECT @x := 41 + 1").rows == ((42,),)
    assert db.query("SELECT @x").rows == ((None,),)
    assert db.query("SELECT GET_LOCK('agent_lock', 0)").rows == ((1,),)
    assert my_shop.value("SELECT IS_FREE_LOCK('agent_lock')") == 1
    assert db.query("SELECT @@SESSION.tx_read_only, @@SESSION.max_statement_time").rows == ((1, TIMEOUT),)
    assert db.query("SELECT @@SESSION.character_set_client, @@autocommit").rows == (("utf8mb4", 1),)


DISTINCT_ON_DISK = "SELECT COUNT(*) FROM (SELECT DISTINCT CONCAT(seq, REPEAT('x', 200)) AS v FROM seq_1_to_{n}) AS t"
"""A DISTINCT whose temporary table holds ~200 bytes a row: past 16 MiB of the server's memory it goes to disk."""


def test_a_temporary_table_past_the_disk_cap_is_refused(
    open_my: OpenDb, my_shop: MyShop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 43 item 4: a call's temporary tables write at most ``tmp_disk_table_size`` of rows to the
    server's disk (512 MiB; 8 MiB here, so the test writes little), set for the call only: the session
    reset returns it to the server's value between calls."""
    monkeypatch.setattr(lockdown, "MARIADB_TMP_DISK_TABLE_SIZE", 8 * 1024 * 1024)
    db = open_my(timeout=30)
    assert db.query("SELECT @@SESSION.tmp_disk_table_size").rows == ((8 * 1024 * 1024,),)
    refused = refusal(db, DISTINCT_ON_DISK.format(n=200_000))
    assert refused.kind == "too_large" and "temporary disk space" in str(refused), str(refused)
    assert "/" not in str(refused).split("(", 1)[1]  # the server names no path: "The table '(temporary)'"
    assert db.query(DISTINCT_ON_DISK.format(n=20_000)).rows == ((20_000,),)  # 4 MB: within the cap
    with db._mysql.raw.cursor() as cursor:  # between calls: the server's own value again
        cursor.execute("SELECT @@SESSION.tmp_disk_table_size = @@GLOBAL.tmp_disk_table_size")
        assert cursor.fetchone() == (1,)


def test_row_and_character_limits_hold(open_my: OpenDb) -> None:
    db = open_my(max_rows=5, max_chars=2_000)
    assert refusal(db, "SELECT seq FROM seq_1_to_1000").kind == "too_large"
    assert refusal(db, "SELECT REPEAT('x', 5000)").kind == "too_large"
    assert db.query("SELECT seq FROM seq_1_to_5").rows == tuple((i,) for i in range(1, 6))


# --- a connection that heals -------------------------------------------------------------------------


def test_a_connection_killed_between_calls_is_replaced(open_my: OpenDb, my_shop: MyShop) -> None:
    db = open_my()
    assert db.query("SELECT CONNECTION_ID()").rows
    thread_id = db.query("SELECT CONNECTION_ID()").rows[0][0]
    with my_shop.admin() as cur:
        cur.execute(f"KILL {int(thread_id)}")
    result = db.query("SELECT count(*) FROM orders")  # found lost at the call's start, run on a new one
    assert result.rows == ((30,),)
    assert db.query("SELECT CONNECTION_ID()").rows[0][0] != thread_id


def test_a_connection_killed_during_a_call_refuses_it_and_the_next_is_served(open_my: OpenDb, my_shop: MyShop) -> None:
    db = open_my(timeout=10)
    thread_id = db.query("SELECT CONNECTION_ID()").rows[0][0]

    def kill() -> None:
        time.sleep(0.5)
        with my_shop.admin() as cur:
            cur.execute(f"KILL {int(thread_id)}")

    killer = threading.Thread(target=kill)
    killer.start()
    refused = refusal(db, "SELECT SLEEP(5)")
    killer.join()
    assert refused.kind == "connection_lost", str(refused)
    assert db.query("SELECT count(*) FROM orders").rows == ((30,),)


def test_a_server_that_refuses_the_connection_is_a_value_error(my_shop: MyShop) -> None:
    uri = f"mysql://root:s3cret@127.0.0.1:{my_shop.port}/no_such_database"
    with pytest.raises(ValueError, match="cannot connect") as problem:
        GuardedDatabase.open(uri, isolated=False)
    assert "s3cret" not in str(problem.value) and "root:***@" in str(problem.value)
    with pytest.raises(ValueError, match="name a user and one database"):
        GuardedDatabase.open(f"mariadb://127.0.0.1:{my_shop.port}", isolated=False)


def test_in_a_worker_process_a_timeout_and_the_next_call(open_my: OpenDb) -> None:
    db = open_my(isolated=True, timeout=1.0)
    assert refusal(db, "SELECT SLEEP(30)").kind == "timeout"
    assert db.query("SELECT count(*) FROM customers").rows == ((6,),)
    assert db.schema().dialect == "mysql"


# --- a connection handed in --------------------------------------------------------------------------


def test_a_handed_in_connection_keeps_its_settings_and_is_checked(my_shop: MyShop) -> None:
    raw = my_shop.database.connect(autocommit=True)
    with raw.cursor() as cur:
        cur.execute("SET SESSION max_statement_time = 7, tmp_disk_table_size = 12345678")
    db = GuardedDatabase(wrap(raw), timeout=1.0)
    assert db.query(FAN_OUT).report.trigger is not None
    assert db.query("SELECT @@SESSION.tmp_disk_table_size").rows == ((lockdown.MARIADB_TMP_DISK_TABLE_SIZE,),)
    assert refusal(db, "SELECT SLEEP(10)").kind == "timeout"
    with raw.cursor() as cur:
        cur.execute("SELECT @@SESSION.max_statement_time, @@in_transaction, @@SESSION.tmp_disk_table_size")
        assert cur.fetchone() == (7.0, 0, 12345678)  # its own settings put back, no transaction left open

    multi = my_shop.database.connect(client_flag=pymysql.constants.CLIENT.MULTI_STATEMENTS)
    with pytest.raises(ValueError, match="MULTI_STATEMENTS"):
        GuardedDatabase(wrap(multi))
    manual = my_shop.database.connect(autocommit=False)
    with pytest.raises(ValueError, match="autocommit"):
        GuardedDatabase(wrap(manual))


# --- the account docs/agents.md asks for --------------------------------------------------------------


def test_the_read_only_account_alone_refuses_files_and_writes(
    open_my: OpenDb, my_shop: MyShop, no_checks: None
) -> None:
    """With the statement checks off, the account docs/agents.md asks for is what stops files and
    settings: no FILE privilege (LOAD_FILE reads NULL, INTO OUTFILE is denied), no SUPER."""
    marker = f"/tmp/guarded-reader-{uuid.uuid4().hex}"
    db = open_my(my_shop.reader())
    before = my_shop.checksum()
    for sql in (f"SELECT * FROM customers INTO OUTFILE '{marker}'", "DELETE FROM orders"):
        refused = refusal(db, sql)
        assert refused.kind == "write" and "denied" in str(refused), (sql, str(refused))
    monkey = pytest.MonkeyPatch()
    monkey.setattr(lockdown, "single_statement_problem", lambda *args, **kwargs: None)
    try:
        assert refusal(db, "SET GLOBAL max_connections = 1").kind == "write"
    finally:
        monkey.undo()
    assert db.query("SELECT LOAD_FILE('/etc/hostname')").rows == ((None,),)
    assert not Path(marker).exists()
    assert my_shop.checksum() == before
    assert db.query("SELECT count(*) FROM orders").rows == ((30,),)


def test_on_mysql_s_own_server_the_limit_is_max_execution_time() -> None:
    """MySQL (told apart from MariaDB by the version string) limits a call with ``max_execution_time``
    in milliseconds; MariaDB with ``max_statement_time`` in seconds; no limit is 0."""

    class Recorder:
        def __init__(self, version: str) -> None:
            self.server_version, self.sent = version, []

        def cursor(self) -> Any:
            return self

        def __enter__(self) -> Any:
            return self

        def __exit__(self, *exc_info: Any) -> None:
            pass

        def execute(self, sql: str) -> None:
            self.sent.append(sql)

    mysql, maria = Recorder("8.0.36"), Recorder("10.11.6-MariaDB-0+deb12u1")
    lockdown.start_mysql_call(mysql, allow_writes=False, time_limit=1.5)
    lockdown.start_mysql_call(maria, allow_writes=True, time_limit=float("inf"))
    mode = f"sql_mode = '{lockdown.MYSQL_SQL_MODE}'"
    disk = f"tmp_disk_table_size = {lockdown.MARIADB_TMP_DISK_TABLE_SIZE}"  # MySQL has no such session setting
    assert mysql.sent == [f"SET SESSION max_execution_time = 1500, {mode}", "START TRANSACTION READ ONLY"]
    assert maria.sent == [f"SET SESSION max_statement_time = 0.000, {mode}, {disk}", "START TRANSACTION"]


# --- the surfaces --------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_mcp_server_lists_describes_and_queries(open_my: OpenDb) -> None:
    pytest.importorskip("mcp")
    from mcp import Client

    from guarded_sqlite.agent.mcp_server import build_server

    db = open_my(isolated=True)
    async with Client(build_server(db)) as client:
        schema = await client.call_tool("schema", {})
        result = await client.call_tool("query", {"sql": AGGREGATE})
        refused = await client.call_tool("query", {"sql": "DELETE FROM orders"})
    assert schema.structured_content is not None and schema.structured_content["dialect"] == "mysql"
    assert result.structured_content is not None and result.structured_content["feedback"]
    assert refused.is_error


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_the_command_serves_a_mysql_uri_over_stdio(my_shop: MyShop) -> None:
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client, StdioServerParameters

    uri = my_shop.uri.replace("mysql://", "mariadb://")
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "guarded_sqlite", "mcp", uri, "--guard", "observe"]
    )
    with anyio.fail_after(60):
        async with Client(params) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            result = await client.call_tool("query", {"sql": FAN_OUT})
            schema = await client.call_tool("schema", {})
            refused = await client.call_tool("query", {"sql": "SELECT 1 /*!50000 , (SELECT 2) */"})
    assert tools == {"query", "schema"}
    assert not result.is_error and result.structured_content is not None
    assert result.structured_content["row_count"] == 30
    assert "Guard feedback:\nThe query returned 30 rows but only 6 distinct ones" in result.content[0].text  # type: ignore[union-attr]
    assert "many-to-one" in schema.content[0].text  # type: ignore[union-attr]
    assert refused.is_error and "executable comment" in refused.content[0].text  # type: ignore[union-attr]


def test_the_command_names_an_unreachable_server_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("mcp")
    assert main(["mcp", "mysql://reader:s3cret@127.0.0.1:1/shop"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("guarded-sqlite mcp: error: mysql://reader:***@")


def test_langchain_and_llama_index_tools_on_mariadb(open_my: OpenDb) -> None:
    db = open_my()
    pytest.importorskip("langchain_core")
    from guarded_sqlite.agent.langchain_tools import guarded_sql_tools as langchain_tools

    query, schema = langchain_tools(db)
    assert "An aggregate counts rows several times" in query.invoke({"sql": AGGREGATE})
    assert query.invoke({"sql": "DELETE FROM orders"}).startswith("Refused:")
    assert "many-to-one" in schema.invoke({})
    pytest.importorskip("llama_index.core")
    from guarded_sqlite.agent.llama_index_tools import guarded_sql_tools as llama_tools

    llama_query, _ = llama_tools(db)
    output = llama_query.call(sql="SELECT name, points FROM customers WHERE id IN (SELECT customer_id FROM orders)")
    assert output.raw_output.rows[0] == ("Ana Lima", 120)
