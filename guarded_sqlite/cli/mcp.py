"""``guarded-sqlite mcp DB``: the command's options and its run (the server itself is
``agent.mcp_server.build_server``; this module is the command line's side of it)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._extras import install_hint
from ..agent._calls import (
    AGENT_GUARD,
    DEFAULT_MAX_CHARS,
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT,
    QueryRefused,
    QueryResult,
    is_chdb_dsn,
    is_mysql_dsn,
    is_postgres_dsn,
    redact_dsn,
)
from ..agent._database import GuardedDatabase
from ..agent.mcp_server import INSTALL_HINT, build_server
from ..agent.privileges import PrivilegedAccount
from ..agent.schema_info import SchemaInfo

__all__ = ["add_mcp_parser", "run_mcp"]


def add_mcp_parser(commands: Any) -> None:
    """Add the ``mcp`` subcommand to the CLI's subparsers."""
    from ..policy import PRESETS
    from .arguments import non_negative_int, positive_float

    command = commands.add_parser(
        "mcp",
        help="serve a SQLite or DuckDB file, a PostgreSQL or MySQL/MariaDB database, or a ClickHouse (chDB) "
        "folder, to an LLM agent as an MCP server over stdio (tools: query, schema)",
        description="Run an MCP server over stdio with two tools: schema (tables, keys, foreign keys with "
        "their cardinality, row counts) and query (one statement through the guard; rows plus the guard's "
        "feedback on repeated rows and aggregate fan-out). Writes are refused unless --allow-writes is given. "
        f"Needs the mcp extra: {install_hint('mcp')}. Exit status: 0 when the client "
        "disconnects, 2 for an unusable DB path or server, bad options, or the mcp package missing.",
    )
    command.add_argument(
        "db",
        metavar="DB",
        help="a SQLite file, a DuckDB file (.duckdb, .ddb), a PostgreSQL URI (postgresql://user@host/db), a "
        "MySQL/MariaDB URI (mysql://user@host:3306/db or mariadb://...; the password from the URI or MYSQL_PWD), "
        "a chDB folder (chdb:///path/to/folder: ClickHouse embedded, opened by the tool's worker process); "
        "connect as a role or account that may only SELECT (another is refused: see --allow-privileged)",
    )
    command.add_argument(
        "--guard",
        choices=PRESETS,
        default=AGENT_GUARD,
        help=f"guard preset: {AGENT_GUARD} (default: the rows are a model's to read), patch, paper, observe "
        "(probe only) or off",
    )
    access = command.add_mutually_exclusive_group()
    access.add_argument(
        "--read-only",
        action="store_true",
        help="open DB read-only at the file level, so nothing can write to it (writes are refused anyway "
        "unless --allow-writes); PostgreSQL: read-only transactions and default_transaction_read_only, "
        "as without --allow-writes",
    )
    access.add_argument(
        "--allow-writes",
        action="store_true",
        help="let INSERT, UPDATE, DELETE and DDL run (committed as each statement ends); default: refused",
    )
    command.add_argument(
        "--allow-privileged",
        action="store_true",
        help="UNSAFE: serve a PostgreSQL role or MySQL/MariaDB account that may do more than read (server files, "
        "other sessions, administration, or writes without --allow-writes); by default such an account is "
        "refused: its grants are named on stderr and in every tool call's answer, and nothing runs",
    )
    command.add_argument(
        "--max-rows",
        type=non_negative_int,
        default=DEFAULT_MAX_ROWS,
        metavar="N",
        help=f"refuse results of more than N rows, asking for a LIMIT or aggregates (default: {DEFAULT_MAX_ROWS})",
    )
    command.add_argument(
        "--max-chars",
        type=non_negative_int,
        default=DEFAULT_MAX_CHARS,
        metavar="N",
        help=f"refuse results whose rows take more than N characters as JSON (default: {DEFAULT_MAX_CHARS})",
    )
    command.add_argument(
        "--timeout",
        type=positive_float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"stop a statement after this long and tell the model (default: {DEFAULT_TIMEOUT:g}; inf: no limit)",
    )
    command.add_argument(
        "--audit-log",
        type=Path,
        metavar="PATH",
        help="append one JSON line per tool call to PATH: time, tool, SQL with literals replaced by ?, "
        "outcome, rows, the guard's trigger and action; a call whose line cannot be written is refused",
    )
    command.add_argument(
        "--audit-best-effort",
        action="store_true",
        help="with --audit-log: serve a call even when its line cannot be written (the failure goes to "
        "stderr); default: refuse it",
    )


def run_mcp(args: argparse.Namespace, error: Callable[[str], None]) -> int:
    """Carry out ``guarded-sqlite mcp`` for parsed ``args``: serve until the client disconnects.
    ``error`` prints a one-line error."""
    if args.audit_best_effort and args.audit_log is None:
        error("--audit-best-effort needs --audit-log PATH")
        return 2
    try:
        import mcp.server.mcpserver  # noqa: F401  (checked before the database is opened)
    except ImportError as missing:
        error(f"{INSTALL_HINT} ({missing})")
        return 2
    try:
        db = GuardedDatabase.open(
            args.db,
            guard=args.guard,
            read_only=args.read_only,
            allow_writes=args.allow_writes,
            allow_privileged=args.allow_privileged,
            max_rows=args.max_rows,
            max_chars=args.max_chars,
            timeout=args.timeout,
        )
    except PrivilegedAccount as problem:
        # Said on stderr, and to the model on every call: an MCP host often shows a server that would not
        # start as a bare failure, where the model can tell the user which grant to take away.
        error(str(problem))
        db = RefusingDatabase(str(problem), "mysql" if is_mysql_dsn(args.db) else "postgres")
    except ValueError as problem:
        error(str(problem))
        return 2
    except ImportError:  # a .duckdb path without duckdb installed, a URI without psycopg or pymysql
        if is_chdb_dsn(args.db):
            error(f"{args.db}: ClickHouse needs chdb: {install_hint('clickhouse')}")
        elif is_mysql_dsn(args.db):
            error(f"{redact_dsn(args.db)}: MySQL/MariaDB needs PyMySQL: {install_hint('mysql')}")
        elif is_postgres_dsn(args.db):
            error(f"{redact_dsn(args.db)}: PostgreSQL needs psycopg 3: {install_hint('postgres')}")
        else:
            error(f"{args.db}: a DuckDB file needs the duckdb package: {install_hint('duckdb')}")
        return 2
    audit = None
    if args.audit_log is not None:
        from ..agent.audit import AuditLog

        try:
            audit = AuditLog(args.audit_log)
        except OSError as problem:
            db.close()
            error(f"{args.audit_log}: cannot open the audit log ({problem.strerror or problem})")
            return 2
    with db:
        try:
            build_server(db, audit=audit, audit_best_effort=args.audit_best_effort).run("stdio")
        except KeyboardInterrupt:
            pass  # Ctrl-C in a terminal stops the server; not an error
        finally:
            if audit is not None:
                audit.close()
    return 0


class RefusingDatabase(GuardedDatabase):
    """What ``guarded-sqlite mcp`` serves for an account it refuses (``PrivilegedAccount``): no
    connection, and every call of either tool refused ``unavailable`` with the grants named."""

    def __init__(self, problem: str, dialect: str) -> None:  # no connection: nothing of the base is set up
        self.dialect = dialect
        self.allow_writes = False
        self.max_rows, self.max_chars, self.timeout = DEFAULT_MAX_ROWS, DEFAULT_MAX_CHARS, DEFAULT_TIMEOUT
        self._refusal = (
            f"Refused: this tool does not serve its database account, which holds more than reading needs "
            f"({problem}). Nothing was run. Tell the user: the operator should connect with a SELECT-only "
            "account (see the agent tools' docs), or start the server with --allow-privileged (unsafe)."
        )

    def close(self) -> None:
        pass

    def query(self, sql: str, parameters: Any = (), *, time_limit: float | None = None) -> QueryResult:
        raise QueryRefused("unavailable", self._refusal)

    def schema(self) -> SchemaInfo:
        raise QueryRefused("unavailable", self._refusal)
