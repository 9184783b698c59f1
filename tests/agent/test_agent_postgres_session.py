"""PostgreSQL session state and a connection that heals (issue 36 items 1 and 2; repros a18, a19).

Every test connects as the role docs/agents.md asks for (``reader``: LOGIN, USAGE on the schema, SELECT
on its tables, nothing else; no pg_signal_backend), made per test. The statement check refuses advisory
locks and signals by name; the tests also switch that check off (``no_name_check``) to show that what
the server enforces holds alone: after every call the session is reset (``DISCARD ALL``), and a
connection ended by the server is replaced. After each hostile call another plain connection to the
server still opens and the next benign call answers within its bound.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg")

from psycopg.conninfo import conninfo_to_dict  # noqa: E402

from guarded_sqlite._core.deadlines import _WATCHDOG  # noqa: E402
from guarded_sqlite.agent import GuardedDatabase, QueryRefused, _postgres_plan, lockdown  # noqa: E402
from tests.agent_cases import OpenDb, opened_databases  # noqa: E402
from tests.pace import within  # noqa: E402

SETUP = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, email TEXT NOT NULL);
INSERT INTO customers SELECT i, 'u' || i || '@example.com' FROM generate_series(1, 50) i;
"""

TIMEOUT = 2.0
BENIGN = "SELECT count(*) FROM customers"


class Reader:
    """A schema with one table and the documented read-only role; ``uri`` connects as that role."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.name = f"reader_{uuid.uuid4().hex[:10]}"
        parts = conninfo_to_dict(dsn)
        self.uri = (
            f"postgresql://{self.name}@{parts['host']}:{parts['port']}/{parts['dbname']}"
            f"?options=-c%20search_path%3D{self.name}"
        )
        with self.admin() as admin:
            admin.execute(f"CREATE SCHEMA {self.name}")
            admin.execute(f"SET search_path = {self.name}")
            admin.execute(SETUP)
            admin.execute(
                f"CREATE ROLE {self.name} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS "
                "NOINHERIT CONNECTION LIMIT 4"
            )
            admin.execute(f"GRANT USAGE ON SCHEMA {self.name} TO {self.name}")
            admin.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {self.name} TO {self.name}")

    def admin(self) -> Any:
        return psycopg.connect(self.dsn, autocommit=True)

    def value(self, sql: str, *parameters: Any) -> Any:
        with self.admin() as admin:
            return admin.execute(sql, parameters).fetchone()[0]

    def advisory_locks(self) -> int:
        return int(self.value("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"))

    def terminate_sessions(self) -> int:
        """End every backend of the role, as a server restart or another client would."""
        return int(
            self.value("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = %s", self.name)
        )

    def drop(self) -> None:
        with self.admin() as admin:
            admin.execute(f"ALTER ROLE {self.name} LOGIN")
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (self.name,))
            admin.execute(f"DROP SCHEMA {self.name} CASCADE")
            admin.execute(f"DROP OWNED BY {self.name}")
            admin.execute(f"DROP ROLE {self.name}")


@pytest.fixture
def reader(pg_dsn: str) -> Iterator[Reader]:
    made = Reader(pg_dsn)
    try:
        yield made
    finally:
        made.drop()


@pytest.fixture
def open_reader(reader: Reader) -> Iterator[OpenDb]:
    yield from opened_databases(reader.uri, timeout=TIMEOUT)


@pytest.fixture
def no_name_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Switch the statement check off (the names in the text and in the plan), so that only what the
    server enforces stands."""
    monkeypatch.setattr(lockdown, "denied_call_problem", lambda sql, dialect: None, raising=False)
    monkeypatch.setattr(_postgres_plan, "postgres_plan_problem", lambda raw, sql, parameters, allow_writes: None)


def refusal(db: GuardedDatabase, sql: str) -> QueryRefused:
    with pytest.raises(QueryRefused) as refused:
        db.query(sql)
    return refused.value


def assert_healthy(db: GuardedDatabase, reader: Reader) -> None:
    """After a hostile call: a plain connection to the server opens, and the next benign call answers
    with the right rows within the call's bound."""
    assert reader.value("SELECT 1") == 1
    started = time.monotonic()
    assert db.query(BENIGN).rows == ((50,),)
    assert within(time.monotonic() - started, TIMEOUT, 0.5)
    # No call left a time limit behind, to interrupt whatever this process runs next (a call on a
    # connection the server had ended never began its transaction, and kept its deadline scheduled).
    assert not [deadline for _, _, deadline in _WATCHDOG._heap if deadline._pending]


ISOLATION = [pytest.param(False, id="in-process"), pytest.param(True, id="worker")]


@pytest.mark.parametrize("isolated", ISOLATION)
def test_a19_advisory_locks_are_refused_by_name(open_reader: OpenDb, reader: Reader, isolated: bool) -> None:
    """a19: pg_advisory_lock (and its kin, quoted or schema-qualified) is refused before it runs."""
    db = open_reader(isolated=isolated)
    for sql in (
        "SELECT count(pg_advisory_lock(i)) FROM generate_series(1, 100000) i",
        'SELECT pg_catalog."pg_advisory_lock"(1)',
        "SELECT pg_try_advisory_xact_lock(1)",
        "SELECT query_to_xml('SELECT pg_advisory_lock(1)', true, true, '')",
        'SELECT U&"pg_advisory_lock"(1)',
    ):
        assert refusal(db, sql).kind == "denied", sql
        assert reader.advisory_locks() == 0
        assert_healthy(db, reader)
    # The name is looked for in the whole text, literals too (no lexer can then hide one: a25-a28);
    # a literal built from parts is still served.
    assert refusal(db, "SELECT 'pg_advisory_lock(1)' AS text").kind == "denied"
    assert db.query("SELECT 'pg_advisory_' || 'lock(1)' AS text").rows == (("pg_advisory_lock(1)",),)


def test_a19_advisory_locks_never_outlive_their_call_even_past_the_name_check(
    open_reader: OpenDb, reader: Reader, no_name_check: None
) -> None:
    """a19: the session is reset after every call, so a session lock taken by a read-only SELECT is gone
    before the next call; the server keeps accepting connections. (In process: the monkeypatch that
    switches the name check off does not reach a worker.)"""
    db = open_reader(isolated=False)
    assert db.query("SELECT pg_advisory_lock(4242)").rows == (("",),)
    assert reader.advisory_locks() == 0
    mine = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
    assert db.query(mine).rows == ((0,),)
    db.query("SELECT count(pg_advisory_lock(i)) FROM generate_series(1, 2000) i")
    assert reader.advisory_locks() == 0
    assert_healthy(db, reader)


def test_session_state_is_reset_after_every_call(open_reader: OpenDb, reader: Reader, no_name_check: None) -> None:
    """setseed, a committed set_config(..., false), LISTEN, PREPARE, WITH HOLD cursors and temporary
    tables (with writes allowed, where they commit) are gone by the next call."""
    with reader.admin() as admin:
        admin.execute(f"GRANT TEMPORARY ON DATABASE {conninfo_to_dict(reader.dsn)['dbname']} TO {reader.name}")
        admin.execute("SELECT setseed(0.3)")
        seeded = admin.execute("SELECT random()").fetchone()[0]
    db = open_reader(isolated=False, allow_writes=True)
    db.query("SELECT setseed(0.3)")
    assert db.query("SELECT random()").rows != ((seeded,),)
    db.query("SELECT set_config('work_mem', '1234kB', false)")
    assert db.query("SELECT current_setting('work_mem')").rows != (("1234kB",),)
    db.query("CREATE TEMP TABLE scratch AS SELECT 1 AS a")
    assert refusal(db, "SELECT * FROM scratch").kind == "sql_error"
    db.query("LISTEN channel")
    assert db.query("SELECT count(*) FROM pg_listening_channels()").rows == ((0,),)
    db.query("PREPARE mine AS SELECT 1")
    assert db.query("SELECT count(*) FROM pg_prepared_statements WHERE name = 'mine'").rows == ((0,),)
    db.query("DECLARE held CURSOR WITH HOLD FOR SELECT 1")
    assert db.query("SELECT count(*) FROM pg_cursors WHERE name = 'held'").rows == ((0,),)
    assert_healthy(db, reader)


def test_with_writes_off_the_session_stays_read_only_after_the_reset(open_reader: OpenDb, reader: Reader) -> None:
    db = open_reader(isolated=False)
    for _ in range(3):
        assert db.query("SELECT current_setting('default_transaction_read_only')").rows == (("on",),)
    assert refusal(db, "SELECT setseed(0.5), nextval('x')").kind in ("sql_error", "write")
    assert_healthy(db, reader)


@pytest.mark.parametrize("isolated", ISOLATION)
def test_a18_terminating_backends_is_refused_by_name(open_reader: OpenDb, reader: Reader, isolated: bool) -> None:
    """a18: pg_terminate_backend and pg_cancel_backend never reach the server, on this tool's session
    or another of its role."""
    db = open_reader(isolated=isolated)
    other = open_reader(isolated=isolated)
    for sql in (
        "SELECT pg_terminate_backend(pg_backend_pid())",
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = current_user",
        "SELECT pg_cancel_backend(pg_backend_pid())",
        "SELECT pg_reload_conf()",
    ):
        assert refusal(db, sql).kind == "denied", sql
        assert_healthy(db, reader)
        assert_healthy(other, reader)


@pytest.mark.parametrize("isolated", ISOLATION)
def test_a18_a_connection_the_server_ended_between_calls_is_replaced(
    open_reader: OpenDb, reader: Reader, isolated: bool
) -> None:
    """a18: the server ends the tool's session between two calls (another client, a restart): the next
    call runs on a new connection, and so does schema(). (The server is the session's: tables other tests
    left in its ``public`` schema, which every role may look into, are listed too, on either connection.)"""
    db = open_reader(isolated=isolated)
    first = [(table.schema, table.name) for table in db.schema().tables]
    assert (reader.name, "customers") in first
    assert db.query(BENIGN).rows == ((50,),)
    assert reader.terminate_sessions() == 1
    assert_healthy(db, reader)
    assert reader.terminate_sessions() == 1
    tables = [(table.schema, table.name) for table in db.schema().tables]
    assert tables == first and [name for schema, name in tables if schema == reader.name] == ["customers"]
    assert_healthy(db, reader)


def test_a18_a_connection_ended_during_a_call_is_refused_then_replaced(
    open_reader: OpenDb, reader: Reader, no_name_check: None
) -> None:
    """a18: past the name check, the statement ends its own session: that call is refused saying so,
    and the next one is served on a new connection."""
    db = open_reader(isolated=False)
    refused = refusal(db, "SELECT pg_terminate_backend(pg_backend_pid())")
    assert refused.kind == "connection_lost" and "new one is opened for the next call" in str(refused)
    assert_healthy(db, reader)


def test_a_server_that_refuses_the_new_connection_is_retried_after_a_backoff(
    open_reader: OpenDb, reader: Reader
) -> None:
    db = open_reader(isolated=False)
    with reader.admin() as admin:
        admin.execute(f"ALTER ROLE {reader.name} NOLOGIN")
    reader.terminate_sessions()
    first = refusal(db, BENIGN)
    assert first.kind == "unavailable" and "could not be opened again" in str(first), str(first)
    second = refusal(db, BENIGN)  # within the back-off: refused at once, without a connection attempt
    assert second.kind == "unavailable" and "next attempt is in" in str(second)
    with reader.admin() as admin:
        admin.execute(f"ALTER ROLE {reader.name} LOGIN")
    time.sleep(0.6)
    assert_healthy(db, reader)


def test_the_server_s_paths_are_hidden_from_the_documented_role(open_reader: OpenDb) -> None:
    """Issue 43 item 3's paths: PostgreSQL itself hides ``data_directory`` and the other path settings
    from a role without ``pg_read_all_settings`` or superuser (which the tool refuses at open, unless
    ``allow_privileged``), and the file functions and views from one without their grants."""
    db = open_reader()
    for name in ("data_directory", "config_file", "hba_file", "ident_file", "unix_socket_directories", "log_directory"):
        refused = refusal(db, f"SELECT current_setting('{name}')")
        assert refused.kind == "write" and "pg_read_all_settings" in str(refused), (name, str(refused))
    assert db.query("SELECT name FROM pg_settings WHERE setting LIKE '/%'").rows == ()  # no absolute path
    for sql in ("SELECT pg_ls_dir('.')", "SELECT pg_current_logfile()", "SELECT count(*) FROM pg_file_settings"):
        assert "permission denied" in str(refusal(db, sql)), sql
