"""Least privilege checked, not hoped for (issue 43 item 3): what the account an agent tool connects as
may do beyond reading, as the server itself says, read when the tool opens a PostgreSQL or MySQL/MariaDB
URI (``GuardedDatabase.open``, ``guarded-sqlite mcp``, the frameworks' ``open_guarded_sql_tools``).

An account that may read or write the server's files, see or signal other sessions, administer the
server, read beyond its database, or (with writes off) write, is refused with a ``ValueError`` naming
the grants, unless the operator opts in with ``allow_privileged=True`` (``--allow-privileged``), which
is unsafe: the tool's statement checks and its read-only transaction are then all that stands between
the model and those grants. The check runs on every connection the tool opens, a replacement for a
lost one included, so a grant added while the tool runs refuses the next reconnection.

- MySQL/MariaDB: ``SHOW GRANTS`` of the current account, and of every role granted to it (MariaDB: each
  enabled in turn with ``SET ROLE``, which shows the roles inside it and ``PUBLIC``'s grants too; MySQL:
  ``SHOW GRANTS ... USING``), read by ``mysql_grant_lines`` and judged by ``mysql_refused_grants``.
- PostgreSQL: the attributes of the role and of every role it is a member of (``SUPERUSER``,
  ``CREATEROLE``, ...; a member may ``SET ROLE`` to any of them), membership in the predefined roles
  (``pg_read_server_files``, ``pg_signal_backend``, ``pg_read_all_settings``, ...) and in roles that log
  in (whose sessions a member may signal), and with writes off any INSERT, UPDATE, DELETE or TRUNCATE
  on a relation of the database, a sequence it may advance, or CREATE on a schema or on the database
  (``postgres_refused_grants``).

Connections handed to ``GuardedDatabase`` are the caller's and are not checked; ``account_problem``
runs the same check on one. SQLite, DuckDB and chDB have no accounts: nothing to check.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "RISKS",
    "Grant",
    "PrivilegedAccount",
    "account_problem",
    "mysql_grant_lines",
    "mysql_refused_grants",
    "postgres_refused_grants",
    "server_opener",
]

RISKS = {
    "files": "read or write the server's files",
    "sessions": "see or signal other sessions",
    "administer": "administer the server",
    "beyond": "read beyond this database",
    "writes": "write",
}
"""What a refused grant lets the account do, by its ``Grant.risk``, in the order the error lists them."""


@dataclass(frozen=True)
class Grant:
    """One grant the tool refuses: ``privilege`` as the server names it (``FILE``, ``INSERT``,
    ``SUPERUSER``, ``membership in pg_signal_backend``), ``on`` what (``*.*``, ``public.orders``; empty
    for a role's attribute or membership), and its ``risk`` (a key of ``RISKS``)."""

    privilege: str
    on: str
    risk: str

    def __str__(self) -> str:
        return f"{self.privilege} on {self.on}" if self.on else self.privilege


class PrivilegedAccount(ValueError):
    """The account a URI names holds a grant an agent tool refuses (the message names each), and the
    operator did not opt in with ``allow_privileged=True`` / ``--allow-privileged``."""


def account_problem(raw: Any, dialect: str, *, allow_writes: bool) -> str | None:
    """Why the account of ``raw`` (a psycopg or PyMySQL connection, not wrapped) may not serve an agent
    tool, naming the grants, or None. ``allow_writes``: write grants are expected, and not refused."""
    if dialect == "mysql":
        account, lines = mysql_grant_lines(raw)
        grants = mysql_refused_grants(lines, allow_writes=allow_writes)
        how = "an account with SELECT on this database only (docs/agents.md, The MySQL/MariaDB account)"
    elif dialect == "postgres":
        account, grants = postgres_refused_grants(raw, allow_writes=allow_writes)
        how = "a role with SELECT on the tables it should read only (docs/agents.md, The PostgreSQL role)"
    else:
        return None
    if not grants:
        return None
    said = []
    for risk, what in RISKS.items():
        named = list(dict.fromkeys(str(grant) for grant in grants if grant.risk == risk))
        if named:
            more = f", and {len(named) - 4} more" if len(named) > 4 else ""
            said.append(f"{what} ({', '.join(named[:4])}{more})")
    return (
        f"the account {account} may {'; '.join(said)}. An agent tool connects as {how}; to serve this one "
        "anyway, pass allow_privileged=True (guarded-sqlite mcp --allow-privileged), which is unsafe: the "
        "tool's statement checks are then all that keeps the model from these grants"
    )


def server_opener(dsn: str, *, allow_privileged: bool) -> Callable[..., Any]:
    """What opens the tool's connection to a PostgreSQL or MySQL/MariaDB ``dsn`` (``open_postgres`` or
    ``open_mysql``, and ``Reconnector``'s opener after it), followed by ``account_problem`` on what it
    opened: a ``ValueError`` naming the grants when the account is refused (the connection closed), or
    when its grants cannot be read. ``allow_privileged`` leaves the check out."""
    from ._calls import is_mysql_dsn
    from ._mysql_session import open_mysql
    from ._postgres_session import open_postgres

    dialect = "mysql" if is_mysql_dsn(dsn) else "postgres"
    opener: Callable[..., Any] = open_mysql if dialect == "mysql" else open_postgres
    if allow_privileged:
        return opener

    def open_checked(dsn: str, policy: Any, *, allow_writes: bool, connect_timeout: float) -> Any:
        from ._calls import redact_dsn
        from ._refusals import is_database_error

        connection = opener(dsn, policy, allow_writes=allow_writes, connect_timeout=connect_timeout)
        try:
            problem = account_problem(connection.__wrapped__, dialect, allow_writes=allow_writes)
        except Exception as failure:
            connection.close()
            if not is_database_error(failure):
                raise
            raise ValueError(
                f"{redact_dsn(dsn)}: cannot read the account's grants ({' '.join(str(failure).split())}); an "
                "agent tool serves only an account whose grants it has read (allow_privileged=True skips that, "
                "unsafe)"
            ) from None
        except BaseException:
            connection.close()
            raise
        if problem is not None:
            connection.close()
            raise PrivilegedAccount(f"{redact_dsn(dsn)}: {problem}")
        return connection

    return open_checked


# --- MySQL/MariaDB -------------------------------------------------------------------------------------

_TOKEN = re.compile(r"`(?:[^`]|``)*`|'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.)*\"|[(),]|[^\s(),`'\"]+")
"""A ``SHOW GRANTS`` line's tokens: quoted names and strings whole (a password hash, a name holding
`` ON ``), parentheses and commas, and words."""

_ROUTINE_WORDS = frozenset({"PROCEDURE", "FUNCTION", "PACKAGE", "BODY", "TABLE"})

_MYSQL_READ = frozenset({"SELECT", "SHOW VIEW"})
_MYSQL_WRITE = frozenset(
    {
        "INSERT",
        "UPDATE",
        "DELETE",
        "CREATE",
        "DROP",
        "ALTER",
        "INDEX",
        "CREATE TEMPORARY TABLES",
        "CREATE VIEW",
        "TRIGGER",
        "REFERENCES",
        "LOCK TABLES",
        "EXECUTE",  # a routine runs as its definer, who may write
        "CREATE ROUTINE",
        "ALTER ROUTINE",
        "EVENT",
        "DELETE HISTORY",
        "ALL",
        "ALL PRIVILEGES",
    }
)
"""Privileges that write (or run what may) in the database they are granted on: refused with writes off."""

_MYSQL_FILES = frozenset({"FILE"})
_MYSQL_SESSIONS = frozenset(
    {
        "PROCESS",  # every session's statements in the process list
        "CONNECTION ADMIN",  # ends other accounts' sessions (MariaDB)
        "CONNECTION_ADMIN",  # MySQL's
        "BINLOG MONITOR",  # SHOW BINLOG EVENTS: every session's writes
        "REPLICATION SLAVE",
        "REPLICATION CLIENT",
        "SLAVE MONITOR",
        "REPLICA MONITOR",
    }
)
_MYSQL_SYSTEM_SCHEMAS = frozenset({"mysql", "performance_schema", "sys"})
"""Schemas a grant on reads or writes the server's accounts or other sessions' statements."""


@dataclass(frozen=True)
class _GrantLine:
    privileges: tuple[str, ...]  # empty for a role grant
    on: str  # the object as written; empty for a role grant
    roles: tuple[str, ...]  # the roles a role grant names, quoted as written
    option: bool  # WITH GRANT OPTION, or a role's WITH ADMIN OPTION


def _parse_grant(line: str) -> _GrantLine | None:
    """One ``SHOW GRANTS`` line, or None for a line that is not a GRANT (MariaDB's ``SET DEFAULT ROLE``)."""
    found = list(_TOKEN.finditer(line))
    tokens = [match.group(0) for match in found]
    if not tokens or tokens[0].upper() != "GRANT":
        return None
    depth, on, to = 0, None, None
    for index, token in enumerate(tokens[1:], 1):
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
        elif depth == 0 and on is None and token.upper() == "ON":
            on = index
        elif depth == 0 and token.upper() == "TO":
            to = index
            break
    if to is None:
        return None
    tail = [token.upper() for token in tokens[to + 1 :]]
    option = any(tail[i : i + 2] in (["GRANT", "OPTION"], ["ADMIN", "OPTION"]) for i in range(len(tail)))
    items: list[list[str]] = [[]]
    depth = 0
    for token in tokens[1 : to if on is None else on]:
        depth += token == "("
        depth -= token == ")"
        if token == "," and depth == 0:
            items.append([])
        else:
            items[-1].append(token)
    if on is None:  # GRANT `role`, ... TO ...
        return _GrantLine((), "", tuple("".join(item) for item in items if item), option)
    names = tuple(" ".join(word.upper() for word in _until_paren(item)) for item in items if item)
    return _GrantLine(names, line[found[on + 1].start() : found[to - 1].end()], (), option)


def _until_paren(item: Sequence[str]) -> list[str]:
    return list(item[: item.index("(")] if "(" in item else item)


def _schema_of(on: str) -> str | None:
    """The schema a grant's object is in, None for ``*.*`` (every schema)."""
    words: list[str] = _TOKEN.findall(on)
    while words and words[0].upper() in _ROUTINE_WORDS:
        words = words[1:]
    if not words or "".join(words) in ("*.*", "*"):
        return None
    first = words[0]
    if first.startswith("`"):
        return first[1:-1].replace("``", "`")
    return first.split(".", 1)[0]


def mysql_refused_grants(lines: Sequence[str], *, allow_writes: bool) -> list[Grant]:
    """The grants of ``SHOW GRANTS`` ``lines`` an agent tool refuses. Allowed: ``USAGE`` (no privilege),
    ``SELECT`` and ``SHOW VIEW`` on a database other than the server's own (``mysql``,
    ``performance_schema``, ``sys``), and with ``allow_writes`` the privileges that write there. Any
    other privilege on ``*.*`` is refused (``FILE``, ``PROCESS``, ``SUPER``, ``SELECT`` on every
    database, the accounts' password hashes included), and so are ``PROXY``, ``WITH GRANT OPTION`` and
    a role's ``WITH ADMIN OPTION``; an unknown privilege counts as administering the server.

    >>> lines = ["GRANT USAGE ON *.* TO `r`@`%` IDENTIFIED BY PASSWORD '*ABC'", "GRANT SELECT ON `shop`.* TO `r`@`%`"]
    >>> mysql_refused_grants(lines, allow_writes=False)
    []
    >>> [str(g) for g in mysql_refused_grants(["GRANT SELECT, FILE ON *.* TO `r`@`%`"], allow_writes=False)]
    ['SELECT on *.*', 'FILE on *.*']
    >>> mysql_refused_grants(["GRANT INSERT (`id`) ON `shop`.`t` TO `r`@`%`"], allow_writes=False)
    [Grant(privilege='INSERT', on='`shop`.`t`', risk='writes')]
    >>> mysql_refused_grants(["GRANT INSERT (`id`) ON `shop`.`t` TO `r`@`%`"], allow_writes=True)
    []
    """
    refused: list[Grant] = []
    for line in lines:
        grant = _parse_grant(line)
        if grant is None:
            continue
        if grant.option:
            what = "WITH ADMIN OPTION" if not grant.privileges else "WITH GRANT OPTION"
            refused.append(Grant(what, grant.on or ", ".join(grant.roles), "administer"))
        schema = _schema_of(grant.on)
        for privilege in grant.privileges:
            if schema is None and privilege in ("ALL", "ALL PRIVILEGES"):  # every one below, named by what it does
                for within, kind in (("FILE", "files"), ("PROCESS", "sessions"), ("SUPER", "administer")):
                    refused.append(Grant(f"{within} (in {privilege})", grant.on, kind))
                continue
            risk = _mysql_risk(privilege, schema, allow_writes=allow_writes)
            if risk is not None:
                refused.append(Grant(privilege, grant.on, risk))
    return refused


def _mysql_risk(privilege: str, schema: str | None, *, allow_writes: bool) -> str | None:
    if privilege == "USAGE":
        return None
    if privilege in _MYSQL_FILES:
        return "files"
    if privilege in _MYSQL_SESSIONS:
        return "sessions"
    system = schema is None or schema.lower() in _MYSQL_SYSTEM_SCHEMAS
    if privilege in _MYSQL_READ:
        return "beyond" if system else None
    if privilege in _MYSQL_WRITE:
        if system:  # every database's tables, or the server's own: its accounts
            return "administer"
        return None if allow_writes else "writes"
    return "administer"  # SUPER, RELOAD, SHUTDOWN, CREATE USER, PROXY, MySQL's dynamic privileges, ...


def mysql_grant_lines(raw: Any) -> tuple[str, list[str]]:
    """The current account (``CURRENT_USER()``) and the ``SHOW GRANTS`` lines of it and of every role
    granted to it. MariaDB's ``SHOW GRANTS`` shows the current role's (and the roles inside it, and
    ``PUBLIC``'s) grants; each role granted to the account is enabled in turn with ``SET ROLE`` for its
    own, and the session's role put back after. MySQL's roles are read with ``SHOW GRANTS ... USING``."""
    import pymysql

    from .._engines.mysql import is_mariadb

    mariadb = is_mariadb(raw)
    with raw.cursor(pymysql.cursors.Cursor) as cursor:
        cursor.execute("SELECT CURRENT_USER(), CURRENT_ROLE()" if mariadb else "SELECT CURRENT_USER(), NULL")
        account, role = cursor.fetchone()
        cursor.execute("SHOW GRANTS")
        lines = [str(row[0]) for row in cursor.fetchall()]
        roles = [name for line in lines for name in getattr(_parse_grant(line), "roles", ())]
        if roles and not mariadb:
            cursor.execute("SHOW GRANTS FOR CURRENT_USER() USING " + ", ".join(roles))
            return str(account), lines + [str(row[0]) for row in cursor.fetchall()]
        try:
            for name in roles:
                try:
                    cursor.execute(f"SET ROLE {name}")
                except pymysql.err.OperationalError as failure:
                    if failure.args and failure.args[0] == 1959:  # a role inside another: shown with it
                        continue
                    raise
                cursor.execute("SHOW GRANTS")
                lines += [str(row[0]) for row in cursor.fetchall()]
        finally:
            if roles:
                back = "NONE" if role is None else "`" + str(role).replace("`", "``") + "`"
                cursor.execute(f"SET ROLE {back}")
    return str(account), lines


# --- PostgreSQL ----------------------------------------------------------------------------------------

_PG_ROLE_RISKS = {
    "pg_read_server_files": "files",
    "pg_write_server_files": "files",
    "pg_execute_server_program": "files",
    "pg_signal_backend": "sessions",
    "pg_signal_autovacuum_worker": "sessions",
    "pg_read_all_stats": "sessions",  # every session's statement in pg_stat_activity
    "pg_stat_scan_tables": "sessions",
    "pg_monitor": "sessions",
    "pg_read_all_settings": "beyond",  # data_directory, config_file, ...
    "pg_read_all_data": "beyond",
    "pg_write_all_data": "writes",
    "pg_database_owner": "writes",  # owns this database (and, from PostgreSQL 15, its public schema)
}
"""What membership in a predefined role lets a member do; any other ``pg_`` role administers."""

_PG_ATTRIBUTES = ("rolsuper", "rolcreaterole", "rolcreatedb", "rolreplication", "rolbypassrls")
_PG_ATTRIBUTE_NAMES = ("SUPERUSER", "CREATEROLE", "CREATEDB", "REPLICATION", "BYPASSRLS")

_PG_ROLES = f"""
SELECT r.rolname, r.rolname = current_user, r.rolcanlogin, {", ".join(f"r.{name}" for name in _PG_ATTRIBUTES)}
FROM pg_roles r WHERE pg_has_role(current_user, r.oid, 'MEMBER') ORDER BY r.rolname
"""
"""The current role and every role it is a member of (``MEMBER``: also where it does not inherit,
since it may ``SET ROLE``, or ``set_config('role', ...)`` inside a SELECT, to any of them)."""

_PG_WRITES = """
WITH m AS (SELECT oid FROM pg_roles WHERE pg_has_role(current_user, oid, 'MEMBER')),
rel AS (
    SELECT c.oid, c.relkind, format('%I.%I', n.nspname, c.relname) AS name FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
        AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
)
(SELECT p.privilege, rel.name
    FROM m, rel, (VALUES ('INSERT'), ('UPDATE'), ('DELETE'), ('TRUNCATE')) p(privilege)
    WHERE rel.relkind <> 'S' AND CASE WHEN p.privilege IN ('INSERT', 'UPDATE')
        THEN has_any_column_privilege(m.oid, rel.oid, p.privilege)
        ELSE has_table_privilege(m.oid, rel.oid, p.privilege) END
    LIMIT 20)
UNION ALL
(SELECT 'USAGE or UPDATE', 'sequence ' || rel.name FROM m, rel
    WHERE rel.relkind = 'S' AND has_sequence_privilege(m.oid, rel.oid, 'USAGE, UPDATE') LIMIT 5)
UNION ALL
(SELECT 'CREATE', 'schema ' || quote_ident(n.nspname) FROM m, pg_namespace n
    WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
        AND has_schema_privilege(m.oid, n.oid, 'CREATE') LIMIT 5)
UNION ALL
(SELECT 'CREATE', 'database ' || quote_ident(current_database()) FROM m
    WHERE has_database_privilege(m.oid, current_database(), 'CREATE'))
"""
"""With writes off: what the role, or a role it may become, may write in this database (bounded: a
few names of each kind are enough to refuse it and name them, and without DISTINCT the scan stops at
the limit; ``account_problem`` names each grant once)."""


def postgres_refused_grants(raw: Any, *, allow_writes: bool) -> tuple[str, list[Grant]]:
    """The current role and the grants an agent tool refuses it (see the module docstring), read in a
    transaction of its own that is rolled back. ``TEMPORARY`` on the database (``PUBLIC``'s by default)
    is not refused: the read-only transaction refuses ``CREATE TEMP TABLE`` and the reset after each
    call drops what a writing call made."""
    refused: list[Grant] = []
    with raw.transaction(force_rollback=True), raw.cursor() as cursor:
        rows = cursor.execute(_PG_ROLES).fetchall()
        account = next((str(row[0]) for row in rows if row[1]), "?")
        if any(row[3] for row in rows):  # a superuser is a member of every role: say that alone
            return account, [Grant("SUPERUSER", "", "administer")]
        for name, own, login, *attributes in rows:
            via = "" if own else f" (through {name})"
            refused += [
                Grant(label + via, "", "administer") for label, held in zip(_PG_ATTRIBUTE_NAMES, attributes) if held
            ]
            if own:
                continue
            if name in _PG_ROLE_RISKS or name.startswith("pg_"):
                refused.append(Grant(f"membership in {name}", "", _PG_ROLE_RISKS.get(name, "administer")))
            elif login:  # a member may signal (pg_terminate_backend) the sessions of the roles it has
                refused.append(Grant(f"membership in login role {name}", "", "sessions"))
        if not allow_writes:
            refused += [Grant(str(privilege), str(on), "writes") for privilege, on in cursor.execute(_PG_WRITES)]
    return account, refused
