"""Shared fixtures: in-memory databases with a join that fans out, the items table in each guard mode,
optional extras, and one PostgreSQL and one MariaDB server per session (under pytest-xdist, per worker:
each worker is a session of its own). Plain constants and helpers are in helpers.py."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sqlite3
import uuid
import warnings
from collections.abc import Callable, Iterator

import pytest

import guarded_sqlite

from .connect_or_wrap import connect_or_wrap, parametrize  # noqa: F401 (the fixture, for the whole suite)
from .helpers import EXPLODING_SQL, FANOUT_SCHEMA, MODES, fill_fanout, fill_items, guarded_connect

__all__ = ["EXPLODING_SQL", "FANOUT_SCHEMA", "fill_fanout"]  # still importable from here, as they used to be

# Scripts that tests/package/test_typing.py type-checks and runs; misuse.py is wrong on purpose, so the doctest
# collector must not import them. Nor the repro scripts tests run in a child process (they run on import).
collect_ignore = ["typing", "reliability/scripts"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests that use the ``connect_or_wrap`` fixture run as ``[connect]`` and ``[wrap]``."""
    parametrize(metafunc)


@pytest.fixture
def guarded() -> Iterator[guarded_sqlite.GuardedConnection]:
    con = guarded_sqlite.connect(":memory:")
    fill_fanout(con)
    yield con
    con.close()


@pytest.fixture
def raw() -> Iterator[sqlite3.Connection]:
    con = sqlite3.connect(":memory:")
    fill_fanout(con)
    yield con
    con.close()


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    """Each guard mode that must give sqlite3's results on queries that are not flagged."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def raw_items() -> Iterator[sqlite3.Connection]:
    """A plain sqlite3 connection holding the items table."""
    con = sqlite3.connect(":memory:")
    fill_items(con)
    yield con
    con.close()


@pytest.fixture
def guarded_items(mode: str) -> Iterator[guarded_sqlite.GuardedConnection]:
    """A guarded connection holding the items table, in each of ``mode``'s modes."""
    con = guarded_connect(mode)
    yield con
    con.close()


@pytest.fixture
def observe_items() -> Iterator[guarded_sqlite.GuardedConnection]:
    """A guarded connection in observe mode holding the items table."""
    con = guarded_connect("observe")
    yield con
    con.close()


@pytest.fixture
def generous_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """For tests about what a confirmation serves or keeps, not its budget (``tests/rules/test_paging.py``
    tests that): the budget's floor is raised so that a loaded machine (other pytest-xdist workers, other
    jobs) cannot stop a check and leave the rows as written."""
    from guarded_sqlite._rules import confirmations

    monkeypatch.setattr(confirmations, "BUDGET_FLOOR", 60.0)
    monkeypatch.setattr(confirmations, "MODEL_BUDGET_FLOOR", 60.0)


@pytest.fixture
def needs_litellm() -> None:
    """Skip unless litellm (the ``[llm]`` extra) is installed.

    Looked up without importing it: imported here, before the library sets LITELLM_LOCAL_MODEL_COST_MAP,
    litellm would fetch its price map from the network.
    """
    if importlib.util.find_spec("litellm") is None:
        pytest.skip("litellm is not installed (extra [llm])")


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """A libpq DSN of one throwaway PostgreSQL server shared by the whole test session (one per pytest-xdist
    worker: a server starts in about a second, and tests that make roles, schemas or tables never meet
    another worker's).

    Skips with the reason when psycopg or the server binaries are missing, unless
    GUARDED_SQLITE_REQUIRE_POSTGRES=1 (CI), where that is a failure.
    """
    from .pg_server import postgres_server, server_binaries

    _server_or_skip("psycopg", server_binaries, "PostgreSQL server binaries (pg_ctl, initdb)", "POSTGRES")
    with postgres_server() as dsn:
        yield dsn


@pytest.fixture
def pg_schema_prefix(pg_dsn: str) -> Iterator[str]:
    """A schema prefix of the test's own for the evaluation's PostgreSQL copies; its schemas, their rows
    in the copies' record and the record itself once empty are dropped after the test. The server is
    shared by the session and the agent tools describe every schema they can see: a copy left behind
    showed up in a later test's schema text."""
    import psycopg

    from guarded_sqlite.evaluation.copy_postgres import PG_META_SCHEMA, PG_META_TABLE

    prefix = f"t{uuid.uuid4().hex[:8]}_"
    yield prefix
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        found = admin.execute("SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)", (prefix,)).fetchall()
        for (name,) in found:
            admin.execute(f'DROP SCHEMA "{name}" CASCADE')
        if admin.execute("SELECT to_regclass(%s)", (f"{PG_META_SCHEMA}.{PG_META_TABLE}",)).fetchone()[0] is not None:
            admin.execute(f"DELETE FROM {PG_META_SCHEMA}.{PG_META_TABLE} WHERE starts_with(schema_name, %s)", (prefix,))
            if admin.execute(f"SELECT NOT EXISTS (SELECT 1 FROM {PG_META_SCHEMA}.{PG_META_TABLE})").fetchone()[0]:
                admin.execute(f"DROP SCHEMA {PG_META_SCHEMA} CASCADE")


@pytest.fixture
def no_warnings() -> Iterator[list[warnings.WarningMessage]]:
    """Record every warning raised in the test (even ones filtered elsewhere) and fail on any."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught
    assert [str(w.message) for w in caught] == []


@pytest.fixture(scope="session")
def mariadb_params() -> Iterator[dict[str, object]]:
    """PyMySQL's connection arguments for one throwaway MariaDB server shared by the whole test session (one
    per pytest-xdist worker, as ``pg_dsn``).

    Skips with the reason when pymysql or the server binary is missing, unless
    GUARDED_SQLITE_REQUIRE_MARIADB=1 (CI), where that is a failure.
    """
    from .mariadb_server import mariadb_server, server_binaries

    _server_or_skip("pymysql", server_binaries, "MariaDB server binary (mariadbd)", "MARIADB")
    with mariadb_server() as params:
        yield params


def _server_or_skip(driver: str, binaries: Callable[[], object], what: str, engine: str) -> None:
    """Skip the test with the reason when ``driver`` cannot be imported or ``binaries()`` finds no
    server, unless ``GUARDED_SQLITE_REQUIRE_<engine>=1`` (CI), where that is a failure."""
    flag = f"GUARDED_SQLITE_REQUIRE_{engine}"
    missing = None
    try:
        importlib.import_module(driver)
    except ImportError:
        missing = f"{driver} is not installed"
    if missing is None and binaries() is None:
        missing = f"{what} not found"
    if missing is not None:
        if os.environ.get(flag) == "1":
            pytest.fail(f"{missing}, and {flag}=1 requires it")
        pytest.skip(f"{missing}; set {flag}=1 to make this a failure")


@pytest.fixture(scope="session")
def chdb_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The one folder chDB serves in this process (chDB refuses a second path in the same process: every
    chDB test of a worker shares it, each in a database of its own, ``chdb_database``).

    Skips with the reason when chdb is not installed (it is the ``[clickhouse]`` extra, not in ``[test]``),
    unless GUARDED_SQLITE_REQUIRE_CLICKHOUSE=1 (CI's ClickHouse step), where that is a failure."""
    _server_or_skip("chdb.dbapi", lambda: True, "chDB", "CLICKHOUSE")
    return str(tmp_path_factory.mktemp("chdb"))


@pytest.fixture
def chdb_database(chdb_path: str) -> Iterator[Callable[[], object]]:
    """Opens chDB connections whose session's current database is a fresh one, dropped afterwards."""
    from chdb import dbapi

    name = f"t_{uuid.uuid4().hex[:16]}"
    opened: list[object] = []

    def connect() -> object:
        con = dbapi.connect(chdb_path)
        cur = con.cursor()
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {name}")
        cur.execute(f"USE {name}")
        cur.close()
        opened.append(con)
        return con

    yield connect
    admin = dbapi.connect(chdb_path)
    admin.cursor().execute(f"DROP DATABASE IF EXISTS {name}")
    for con in (*opened, admin):
        if con.open:  # type: ignore[attr-defined]
            con.close()  # type: ignore[attr-defined]
