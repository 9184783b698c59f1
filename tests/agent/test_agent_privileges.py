"""Least privilege checked, not hoped for (issue 43 item 3): ``GuardedDatabase.open`` reads the grants of
the account it connects as, on the session's real MariaDB and PostgreSQL servers, and refuses one that may
read or write the server's files, see or signal other sessions, administer the server, read beyond its
database, or write while writes are off, naming the grants, unless ``allow_privileged=True``
(``--allow-privileged``). The parsing of ``SHOW GRANTS`` lines is checked without a server first.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import pytest

from guarded_sqlite.agent import GuardedDatabase, QueryRefused
from guarded_sqlite.agent.privileges import mysql_refused_grants
from tests.engines.test_engines import MariaDatabase, maria_database  # noqa: F401 (the fixture)

# --- SHOW GRANTS lines, without a server ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "allow_writes", "refused"),
    [
        ("GRANT USAGE ON *.* TO `r`@`%` IDENTIFIED BY PASSWORD '*0A ON b TO c'", False, []),
        ("GRANT SELECT, SHOW VIEW ON `shop`.* TO `r`@`%`", False, []),
        ("GRANT SELECT ON `a ON b TO c`.* TO `r`@`%`", False, []),  # a name holding the keywords
        ("GRANT SELECT (`id`, `name`) ON `shop`.`customers` TO `r`@`%`", False, []),
        ("SET DEFAULT ROLE `reader` FOR `r`@`%`", False, []),
        ("GRANT `reader` TO `r`@`%`", False, []),  # its grants are read by enabling it
        ("GRANT FILE ON *.* TO `r`@`%`", False, [("FILE", "*.*", "files")]),
        ("GRANT PROCESS ON *.* TO `r`@`%`", True, [("PROCESS", "*.*", "sessions")]),
        ("GRANT CONNECTION ADMIN ON *.* TO `r`@`%`", True, [("CONNECTION ADMIN", "*.*", "sessions")]),
        ("GRANT SUPER, RELOAD ON *.* TO `r`", True, [("SUPER", "*.*", "administer"), ("RELOAD", "*.*", "administer")]),
        ("GRANT SELECT ON *.* TO `r`@`%`", False, [("SELECT", "*.*", "beyond")]),
        ("GRANT SELECT ON `mysql`.`user` TO `r`@`%`", False, [("SELECT", "`mysql`.`user`", "beyond")]),
        ("GRANT INSERT ON `mysql`.* TO `r`@`%`", True, [("INSERT", "`mysql`.*", "administer")]),
        ("GRANT INSERT, UPDATE (`x`) ON `shop`.* TO PUBLIC", False, [
            ("INSERT", "`shop`.*", "writes"), ("UPDATE", "`shop`.*", "writes")
        ]),
        ("GRANT INSERT, UPDATE (`x`) ON `shop`.* TO PUBLIC", True, []),
        ("GRANT EXECUTE ON PROCEDURE `shop`.`p` TO `r`@`%`", False, [("EXECUTE", "PROCEDURE `shop`.`p`", "writes")]),
        ("GRANT SELECT ON `shop`.* TO `r` WITH GRANT OPTION", False, [("WITH GRANT OPTION", "`shop`.*", "administer")]),
        ("GRANT `app` TO `r`@`%` WITH ADMIN OPTION", False, [("WITH ADMIN OPTION", "`app`", "administer")]),
        ("GRANT PROXY ON ``@`%` TO `r`@`%`", False, [("PROXY", "``@`%`", "administer")]),
        ("GRANT BACKUP_ADMIN,SYSTEM_VARIABLES_ADMIN ON *.* TO `r`@`%`", True, [
            ("BACKUP_ADMIN", "*.*", "administer"), ("SYSTEM_VARIABLES_ADMIN", "*.*", "administer")
        ]),  # MySQL's dynamic privileges: unknown ones count as administering
        ("GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost`", True, [
            ("FILE (in ALL PRIVILEGES)", "*.*", "files"),
            ("PROCESS (in ALL PRIVILEGES)", "*.*", "sessions"),
            ("SUPER (in ALL PRIVILEGES)", "*.*", "administer"),
        ]),
    ],
)  # fmt: skip
def test_show_grants_lines_are_judged(line: str, allow_writes: bool, refused: list[tuple[str, str, str]]) -> None:
    found = mysql_refused_grants([line], allow_writes=allow_writes)
    assert [(grant.privilege, grant.on, grant.risk) for grant in found] == refused


# --- MariaDB -----------------------------------------------------------------------------------------------


class Accounts:
    """Accounts on the test's own MariaDB database (``customers``: two rows), each dropped afterwards."""

    def __init__(self, database: MariaDatabase) -> None:
        self.database = database
        self.port = int(database.params["port"])
        self.made: list[str] = []
        with self.admin() as cur:
            cur.execute("CREATE TABLE customers (id INT PRIMARY KEY, points INT NOT NULL)")
            cur.execute("INSERT INTO customers VALUES (1, 10), (2, 20)")

    def admin(self) -> Any:
        return self.database.connect().cursor()

    def make(self, *grants: str) -> str:
        """A new account with SELECT on the database and ``grants`` (``{db}``: the database, ``{me}``: the
        account); its URI."""
        name = f"p_{uuid.uuid4().hex[:10]}"
        me = f"'{name}'@'127.0.0.1'"
        self.made.append(me)
        with self.admin() as cur:
            cur.execute(f"CREATE USER {me} IDENTIFIED BY 'pw' WITH MAX_USER_CONNECTIONS 4")
            cur.execute(f"GRANT SELECT ON `{self.database.name}`.* TO {me}")
            for grant in grants:
                cur.execute(grant.format(db=f"`{self.database.name}`", me=me))
        return f"mysql://{name}:pw@127.0.0.1:{self.port}/{self.database.name}"

    @property
    def root_uri(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/{self.database.name}"

    def drop(self) -> None:
        with self.admin() as cur:
            for me in self.made:
                cur.execute(f"DROP USER IF EXISTS {me}")


@pytest.fixture
def accounts(maria_database: MariaDatabase) -> Iterator[Accounts]:  # noqa: F811 (the fixture imported above)
    made = Accounts(maria_database)
    try:
        yield made
    finally:
        made.drop()


def refused_open(uri: str, **options: Any) -> str:
    with pytest.raises(ValueError) as problem:
        GuardedDatabase.open(uri, isolated=options.pop("isolated", False), **options)
    return str(problem.value)


def test_the_documented_account_is_served(accounts: Accounts) -> None:
    with GuardedDatabase.open(accounts.make(), isolated=False) as db:
        assert db.query("SELECT SUM(points) FROM customers").rows == ((30,),)


@pytest.mark.parametrize("isolated", [False, True], ids=["in-process", "worker"])
def test_root_is_refused_naming_its_grants_and_served_with_the_opt_in(accounts: Accounts, isolated: bool) -> None:
    text = refused_open(accounts.root_uri, isolated=isolated)
    for said in ("root@", "read or write the server's files (FILE (in ALL PRIVILEGES) on *.*",
                 "see or signal other sessions (PROCESS", "administer the server (", "SUPER",
                 "allow_privileged=True", "--allow-privileged", "unsafe"):  # fmt: skip
        assert said in text, (said, text)
    with GuardedDatabase.open(accounts.root_uri, isolated=isolated, allow_privileged=True) as db:
        assert db.query("SELECT COUNT(*) FROM customers").rows == ((2,),)


@pytest.mark.parametrize(
    ("grant", "said"),
    [
        ("GRANT FILE ON *.* TO {me}", "read or write the server's files (FILE on *.*)"),
        ("GRANT PROCESS ON *.* TO {me}", "see or signal other sessions (PROCESS on *.*)"),
        ("GRANT CONNECTION ADMIN ON *.* TO {me}", "see or signal other sessions (CONNECTION ADMIN on *.*)"),
        ("GRANT SUPER ON *.* TO {me}", "administer the server (SUPER on *.*)"),
        ("GRANT SHUTDOWN ON *.* TO {me}", "administer the server (SHUTDOWN on *.*)"),
        ("GRANT SELECT ON *.* TO {me}", "read beyond this database (SELECT on *.*)"),
        ("GRANT SELECT ON mysql.* TO {me}", "read beyond this database (SELECT on `mysql`.*)"),
        ("GRANT SELECT ON {db}.* TO {me} WITH GRANT OPTION", "administer the server (WITH GRANT OPTION on `"),
        ("GRANT INSERT ON {db}.* TO {me}", "write (INSERT on `"),
        ("GRANT UPDATE (points) ON {db}.customers TO {me}", "write (UPDATE on `"),
    ],
)
def test_an_account_that_may_do_more_than_read_is_refused_naming_the_grant(
    accounts: Accounts, grant: str, said: str
) -> None:
    text = refused_open(accounts.make(grant))
    assert said in text and "allow_privileged=True" in text, text
    assert ":pw@" not in text  # the password is not in the error


def test_write_grants_are_expected_with_writes_allowed(accounts: Accounts) -> None:
    uri = accounts.make("GRANT INSERT, UPDATE, DELETE ON {db}.* TO {me}")
    assert "write (INSERT on" in refused_open(uri)
    with GuardedDatabase.open(uri, isolated=False, allow_writes=True) as db:
        assert db.query("UPDATE customers SET points = 11 WHERE id = 1").rows_changed == 1
    assert "read or write the server's files" in refused_open(
        accounts.make("GRANT FILE ON *.* TO {me}"), allow_writes=True
    )


def test_the_grants_of_roles_count_and_the_session_keeps_its_own_role(accounts: Accounts) -> None:
    """A role granted to the account counts whether it is enabled or not (the account may enable it), and
    so do the roles inside it; the check puts the session's role back (the account's default role)."""
    tag = uuid.uuid4().hex[:8]
    outer, inner, plain = f"outer_{tag}", f"inner_{tag}", f"plain_{tag}"
    with accounts.admin() as cur:
        cur.execute(f"CREATE ROLE {inner}")
        cur.execute(f"GRANT PROCESS ON *.* TO {inner}")
        cur.execute(f"CREATE ROLE {outer}")
        cur.execute(f"GRANT {inner} TO {outer}")
        cur.execute(f"CREATE ROLE {plain}")
        cur.execute(f"GRANT SELECT ON {accounts.database.name}.* TO {plain}")
    try:
        text = refused_open(accounts.make(f"GRANT {outer} TO {{me}}"))
        assert "see or signal other sessions (PROCESS on *.*)" in text, text
        uri = accounts.make(
            f"GRANT {plain} TO {{me}}", f"SET DEFAULT ROLE {plain} FOR {{me}}", f"GRANT {outer} TO {{me}}"
        )
        assert "PROCESS on *.*" in refused_open(uri)
        with accounts.admin() as cur:
            cur.execute(f"REVOKE {outer} FROM {accounts.made[-1]}")
        with GuardedDatabase.open(uri, isolated=False) as db:
            assert db.query("SELECT CURRENT_ROLE()").rows == ((plain,),)
    finally:
        with accounts.admin() as cur:
            for role in (outer, inner, plain):
                cur.execute(f"DROP ROLE IF EXISTS {role}")


def test_grants_to_public_count(accounts: Accounts) -> None:
    """MariaDB 10.11's ``PUBLIC``: what it is granted, every account may do."""
    uri = accounts.make()
    with accounts.admin() as cur:
        cur.execute(f"GRANT INSERT ON `{accounts.database.name}`.* TO PUBLIC")
    try:
        assert "write (INSERT on `" in refused_open(uri)
    finally:
        with accounts.admin() as cur:
            cur.execute(f"REVOKE INSERT ON `{accounts.database.name}`.* FROM PUBLIC")


def test_a_grant_added_while_the_tool_runs_refuses_the_next_connection(accounts: Accounts) -> None:
    uri = accounts.make()
    db = GuardedDatabase.open(uri, isolated=False)
    try:
        thread = db.query("SELECT CONNECTION_ID()").rows[0][0]
        with accounts.admin() as cur:
            cur.execute(f"GRANT FILE ON *.* TO {accounts.made[-1]}")
            cur.execute(f"KILL {int(thread)}")
        with pytest.raises(QueryRefused) as refused:
            db.query("SELECT 1")
        assert refused.value.kind == "unavailable" and "FILE on *.*" in str(refused.value), str(refused.value)
        with accounts.admin() as cur:
            cur.execute(f"REVOKE FILE ON *.* FROM {accounts.made[-1]}")
        time.sleep(0.6)  # the back-off after one failed reconnection
        assert db.query("SELECT COUNT(*) FROM customers").rows == ((2,),)
    finally:
        db.close()


def test_the_command_says_in_one_line_that_it_refuses_root_and_naming_the_flag(accounts: Accounts) -> None:
    pytest.importorskip("mcp")
    done = subprocess.run(
        [sys.executable, "-m", "guarded_sqlite", "mcp", accounts.root_uri],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "FILE (in ALL PRIVILEGES) on *.*" in lines[0] and "--allow-privileged" in lines[0]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_the_command_serves_root_only_refusals_that_name_the_grants(accounts: Accounts) -> None:
    """An MCP host often shows a server that would not start as a bare failure: the server starts, runs
    nothing, and every call tells the model which grant to take away and what the flag is."""
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "guarded_sqlite", "mcp", accounts.root_uri])
    with anyio.fail_after(60):
        async with Client(params) as client:
            query = await client.call_tool("query", {"sql": "SELECT COUNT(*) FROM customers"})
            schema = await client.call_tool("schema", {})
    for result in (query, schema):
        text = result.content[0].text  # type: ignore[union-attr]
        assert result.is_error and "FILE (in ALL PRIVILEGES) on *.*" in text and "--allow-privileged" in text
        assert "Nothing was run" in text


# --- PostgreSQL --------------------------------------------------------------------------------------------


class Roles:
    """Roles on the session's PostgreSQL server, with a table in a schema of the test's own."""

    def __init__(self, dsn: str) -> None:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict

        self.dsn = dsn
        self.parts = conninfo_to_dict(dsn)
        self.schema = f"priv_{uuid.uuid4().hex[:10]}"
        self.made: list[str] = []
        self.connect: Callable[[], Any] = lambda: psycopg.connect(dsn, autocommit=True)
        with self.connect() as admin:
            admin.execute(f"CREATE SCHEMA {self.schema}")
            admin.execute(f"CREATE TABLE {self.schema}.customers (id int PRIMARY KEY, points int NOT NULL)")
            admin.execute(f"INSERT INTO {self.schema}.customers VALUES (1, 10), (2, 20)")

    def uri(self, role: str) -> str:
        options = quote(f"-c search_path={self.schema}")
        return f"postgresql://{role}@{self.parts['host']}:{self.parts['port']}/{self.parts['dbname']}?options={options}"

    def make(self, *statements: str, attributes: str = "") -> str:
        """A LOGIN role with USAGE on the schema and SELECT on its table, then ``statements``
        (``{me}``: the role, ``{schema}``); its URI."""
        name = f"p_{uuid.uuid4().hex[:10]}"
        self.made.append(name)
        with self.connect() as admin:
            admin.execute(f"CREATE ROLE {name} LOGIN {attributes}")
            admin.execute(f"GRANT USAGE ON SCHEMA {self.schema} TO {name}")
            admin.execute(f"GRANT SELECT ON {self.schema}.customers TO {name}")
            for statement in statements:
                admin.execute(statement.format(me=name, schema=self.schema))
        return self.uri(name)

    def drop(self) -> None:
        with self.connect() as admin:
            admin.execute(f"DROP SCHEMA {self.schema} CASCADE")
            for name in reversed(self.made):
                admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,))
                admin.execute(f"DROP OWNED BY {name}")
                admin.execute(f"DROP ROLE {name}")


@pytest.fixture
def roles(pg_dsn: str) -> Iterator[Roles]:
    pytest.importorskip("psycopg")
    made = Roles(pg_dsn)
    try:
        yield made
    finally:
        made.drop()


def test_the_documented_role_is_served_and_the_superuser_only_with_the_opt_in(roles: Roles) -> None:
    with GuardedDatabase.open(roles.make(), isolated=False) as db:
        assert db.query("SELECT SUM(points) FROM customers").rows == ((30,),)
    superuser = roles.uri(str(roles.parts["user"]))
    text = refused_open(superuser)
    assert "may administer the server (SUPERUSER)" in text and "--allow-privileged" in text, text
    assert "SUPERUSER" in refused_open(superuser, isolated=True)
    with GuardedDatabase.open(superuser, isolated=False, allow_privileged=True) as db:
        assert db.query("SELECT COUNT(*) FROM customers").rows == ((2,),)


@pytest.mark.parametrize(
    ("statements", "attributes", "said"),
    [
        (["GRANT pg_read_server_files TO {me}"], "", "the server's files (membership in pg_read_server_files)"),
        (["GRANT pg_execute_server_program TO {me}"], "", "files (membership in pg_execute_server_program)"),
        (["GRANT pg_signal_backend TO {me}"], "", "see or signal other sessions (membership in pg_signal_backend)"),
        (["GRANT pg_read_all_stats TO {me}"], "", "see or signal other sessions (membership in pg_read_all_stats)"),
        (["GRANT pg_read_all_settings TO {me}"], "", "read beyond this database (membership in pg_read_all_settings)"),
        (["GRANT pg_checkpoint TO {me}"], "", "administer the server (membership in pg_checkpoint)"),
        ([], "CREATEROLE", "administer the server (CREATEROLE)"),
        ([], "CREATEDB", "administer the server (CREATEDB)"),
        # A member may SET ROLE to a role it does not inherit from: its grants count too.
        (["CREATE ROLE {me}_group NOLOGIN", "GRANT pg_signal_backend TO {me}_group", "GRANT {me}_group TO {me}"],
         "NOINHERIT", "(membership in pg_signal_backend)"),
        (["CREATE ROLE {me}_app LOGIN", "GRANT {me}_app TO {me}"], "", "other sessions (membership in login role"),
        (["GRANT INSERT ON {schema}.customers TO {me}"], "", "write (INSERT on priv_"),
        (["GRANT UPDATE (points) ON {schema}.customers TO {me}"], "", "write (UPDATE on priv_"),
        (["GRANT CREATE ON SCHEMA {schema} TO {me}"], "", "write (CREATE on schema priv_"),
        (["CREATE ROLE {me}_writers NOLOGIN", "GRANT DELETE ON {schema}.customers TO {me}_writers",
          "GRANT {me}_writers TO {me}"], "NOINHERIT", "write (DELETE on priv_"),
    ],
)  # fmt: skip
def test_a_role_that_may_do_more_than_read_is_refused_naming_the_grant(
    roles: Roles, statements: list[str], attributes: str, said: str
) -> None:
    uri = roles.make(*statements, attributes=attributes)
    roles.made += [name.format(me=roles.made[-1]) for name in ("{me}_group", "{me}_app", "{me}_writers")
                   if any(name in statement for statement in statements)]  # fmt: skip
    text = refused_open(uri)
    assert said in text and "allow_privileged=True" in text, text


def test_postgres_write_grants_are_expected_with_writes_allowed(roles: Roles) -> None:
    uri = roles.make("GRANT UPDATE ON {schema}.customers TO {me}")
    assert "write (UPDATE on" in refused_open(uri)
    with GuardedDatabase.open(uri, isolated=False, allow_writes=True) as db:
        assert db.query("UPDATE customers SET points = 11 WHERE id = 1").rows_changed == 1
    signal = roles.make("GRANT pg_signal_backend TO {me}")
    assert "membership in pg_signal_backend" in refused_open(signal, allow_writes=True)
