"""How many statements a text holds, by sqlglot's tokens (which know each dialect's strings, dollar
quotes and comments): the agent tools' one-statement rule on PostgreSQL and MySQL/MariaDB, whose
drivers have no statement splitter of their own; and the names (functions, MySQL's executable
comments) an agent tool's statement may not hold."""

from __future__ import annotations

import re
from functools import lru_cache

from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType  # type: ignore[attr-defined]  # sqlglot re-exports it

from .lexing import STRING_TOKENS, named_anywhere
from .trees import dialect_named

__all__ = [
    "CLICKHOUSE_DENIED_FUNCTIONS",
    "DUCKDB_PATH_FUNCTIONS",
    "MYSQL_DENIED_FUNCTIONS",
    "MYSQL_PATH_VARIABLES",
    "MYSQL_VARIABLE_TABLES",
    "POSTGRES_DENIED_FUNCTIONS",
    "POSTGRES_DENIED_SETTINGS",
    "clickhouse_denied_call",
    "denied_name",
    "mysql_denied_call",
    "mysql_path_reading",
    "mysql_row_lock",
    "postgres_denied_call",
    "postgres_statements_problem",
    "statements_problem",
]


def postgres_statements_problem(sql: str) -> str | None:
    """Why ``sql`` is not one PostgreSQL statement by sqlglot's tokens, or None. Empty statements
    (``SELECT 1;;``) are not counted: PostgreSQL skips them.

    >>> postgres_statements_problem("SELECT ';' AS a; -- trailing")
    >>> postgres_statements_problem("SELECT 1; COMMIT")
    'it holds 2 statements; send one statement per call'
    >>> postgres_statements_problem("SELECT $$; DELETE FROM t$$")
    """
    return statements_problem(sql, "postgres")


def statements_problem(sql: str, dialect: str) -> str | None:
    """Why ``sql`` is not one statement of ``dialect`` by sqlglot's tokens, or None (empty statements
    not counted).

    >>> statements_problem("SELECT 'it''s'; DELETE FROM t", "mysql")
    'it holds 2 statements; send one statement per call'
    >>> statements_problem("SELECT 1 # a comment; DELETE FROM t", "mysql")
    """
    try:
        tokens = dialect_named(dialect).tokenize(sql)
    except SqlglotError:
        return "it cannot be split into statements (an unterminated string or comment?)"
    statements, open_statement = 0, False
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            open_statement = False
        elif not open_statement:
            open_statement = True
            statements += 1
    if statements > 1:
        return f"it holds {statements} statements; send one statement per call"
    return None


POSTGRES_DENIED_FUNCTIONS = frozenset(
    {
        # Session-level advisory locks outlive the call's ROLLBACK and share one lock table with the whole
        # server; the transaction-level ones still fill it while the call runs.
        *(
            f"pg_{try_}advisory_{xact}lock{shared}"
            for try_ in ("", "try_")
            for xact in ("", "xact_")
            for shared in ("", "_shared")
        ),
        "pg_advisory_unlock",
        "pg_advisory_unlock_shared",
        "pg_advisory_unlock_all",
        # Signals: any role may signal the backends of its own role (the tool's own connection among them).
        "pg_terminate_backend",
        "pg_cancel_backend",
        "pg_reload_conf",
        "pg_rotate_logfile",
        "pg_log_backend_memory_contexts",
        "pg_promote",
        "pg_notify",
        # Functions that run a query given as text, which no reading of the statement sees into.
        "query_to_xml",
        "query_to_xmlschema",
        "query_to_xml_and_xmlschema",
        "cursor_to_xml",
        "cursor_to_xmlschema",
        "ts_stat",
        "ts_rewrite",  # its two-argument form runs the query its second argument gives as text
        "dblink",
        "dblink_exec",
        "dblink_connect",
        "dblink_connect_u",
        "dblink_send_query",
        "dblink_open",
    }
)
"""Functions an agent tool's statement may not name on PostgreSQL, by lower-case name: what a read-only
transaction allows but lets one call reach past its own transaction (locks, other sessions, the
server's configuration) or run SQL this check cannot read. The session is reset after every call as
well (``agent.lockdown.reset_postgres_session``); this refusal keeps a call from harming others while it
runs."""


def postgres_denied_call(sql: str) -> str | None:
    """The first name in ``sql`` that ``POSTGRES_DENIED_FUNCTIONS`` or ``POSTGRES_DENIED_SETTINGS``
    holds, looked for in the whole text (``lexing.named_anywhere``: literals and comments too, so no
    reading of the text can hide one), or why the text may not run; None when it names none. A
    Unicode-escaped identifier (``U&"..."``, whose name only the server decodes) is refused.

    >>> postgres_denied_call("SELECT pg_catalog.\\"PG_TERMINATE_BACKEND\\"(pg_backend_pid())")
    'pg_terminate_backend'
    >>> postgres_denied_call("SELECT begin show, pg_advisory_lock(1) FROM (SELECT 1 AS begin) s")
    'pg_advisory_lock'
    >>> postgres_denied_call("SELECT 'pg_advisory_' || 'lock(1)' AS text")
    """
    if "&" in sql and _UNICODE_IDENTIFIER.search(sql):
        return 'U&"..." (a Unicode-escaped identifier)'
    return named_anywhere(sql, _POSTGRES_DENIED_NAMES)


POSTGRES_DENIED_SETTINGS = frozenset({"standard_conforming_strings", "backslash_quote"})
"""Settings an agent tool's statement may not name on PostgreSQL: they change how the server reads
string literals, so a statement that switched them (``set_config(..., true)``) would have the guard's
later statements of the same call read differently from the text it checked."""

_POSTGRES_DENIED_NAMES = POSTGRES_DENIED_FUNCTIONS | POSTGRES_DENIED_SETTINGS


MYSQL_DENIED_FUNCTIONS = frozenset(
    {
        # Named locks belong to the session, outlive a ROLLBACK and can hold other clients off.
        "get_lock",
        "release_lock",
        "release_all_locks",
        # A file on the database server's machine (with the FILE privilege), and UDFs that run commands.
        "load_file",
        "sys_exec",
        "sys_eval",
        # Waits on replication, which the call's time limit does not always reach.
        "master_pos_wait",
        "master_gtid_wait",
        "source_pos_wait",
        "wait_for_executed_gtid_set",
        "wait_until_sql_thread_after_gtids",
    }
)
"""Functions an agent tool's statement may not name on MySQL/MariaDB, by lower-case name. The session
is reset after every call as well (``agent.lockdown.reset_mysql_session``), which releases named locks."""

_EXECUTABLE_COMMENT = re.compile(r"/\*\s*(?:[mM]?!|\+)")
"""``/*! ... */`` and ``/*M! ... */``, whose text the server runs as SQL that no reading of the
statement sees (they carried writes past keyword checks), and MySQL's optimizer hints ``/*+ ... */``
(``MAX_EXECUTION_TIME(0)`` lifts the call's time limit)."""


def mysql_denied_call(sql: str) -> str | None:
    """What in ``sql`` an agent tool does not run on MySQL/MariaDB, or None: an executable comment or
    an optimizer hint (looked for in the whole text, strings too: refused rather than read wrong), or
    a name in ``MYSQL_DENIED_FUNCTIONS`` anywhere in the text (``lexing.named_anywhere``: literals and
    comments too, so no reading of the text can hide one).

    >>> mysql_denied_call("SELECT 1 /*!50000 , (SELECT 2) */")
    'an executable comment (/*! ... */, /*M! ... */) or an optimizer hint (/*+ ... */)'
    >>> mysql_denied_call("SELECT `GET_LOCK`('x', 0)")
    'get_lock'
    >>> mysql_denied_call("SELECT 1 --\\u00a0+ GET_LOCK('x', 0)")
    'get_lock'
    >>> mysql_denied_call("SELECT 'a plain' AS word /* a plain comment */")
    """
    if "/*" in sql and _EXECUTABLE_COMMENT.search(sql):
        return "an executable comment (/*! ... */, /*M! ... */) or an optimizer hint (/*+ ... */)"
    return named_anywhere(sql, MYSQL_DENIED_FUNCTIONS)


MYSQL_PATH_VARIABLES = frozenset(
    {
        "datadir",
        "tmpdir",
        "basedir",
        "socket",
        "pid_file",
        "log_error",
        "plugin_dir",
        "character_sets_dir",
        "slave_load_tmpdir",
        "aria_log_dir_path",
        "wsrep_data_home_dir",
        "innodb_data_home_dir",
        "innodb_log_group_home_dir",
        "innodb_tmpdir",
        "general_log_file",
        "slow_query_log_file",
        "log_bin_basename",
        "log_bin_index",
        "relay_log_basename",
        "relay_log_index",
        "secure_file_priv",
        "lc_messages_dir",
        # Relative or empty by default, absolute wherever the operator configured them:
        "innodb_undo_directory",
        "innodb_data_file_path",
        "innodb_temp_data_file_path",
        "innodb_buffer_pool_filename",
        "init_file",
        "log_slow_query_file",
        "log_tc",
        "relay_log",
        "relay_log_info_file",
        "master_info_file",
        "ft_stopword_file",
        "ssl_ca",
        "ssl_capath",
        "ssl_cert",
        "ssl_key",
        "ssl_crl",
        "ssl_crlpath",
        "wsrep_provider",
        "file_key_management_filename",
        "server_audit_file_path",
    }
)
"""MySQL/MariaDB system variables that hold absolute paths of the server's machine (any account reads
them as ``@@datadir``, ``@@global . `tmpdir```), which the agent tools hide as they hide SQLite's and
DuckDB's file paths."""

MYSQL_VARIABLE_TABLES = frozenset(
    {
        "global_variables",
        "session_variables",
        "system_variables",  # MariaDB's information_schema table: every variable's global and session value
        "variables_by_thread",
        "persisted_variables",
        "variables_info",
    }
)
"""The ``information_schema``/``performance_schema`` tables that list every system variable, paths too."""


def mysql_path_reading(sql: str) -> str | None:
    """The path variable or variable table ``sql`` reads, or None: a table of ``MYSQL_VARIABLE_TABLES``
    named anywhere, or a name of ``MYSQL_PATH_VARIABLES`` anywhere in a text that reads a system variable
    (``@@``; no other form reads one in a query). Looked for without a lexer, like the refused functions.

    >>> mysql_path_reading("SELECT @@GLOBAL . `DataDir` AS d")
    'datadir'
    >>> mysql_path_reading("SELECT socket FROM connections")  # a column of the database's own
    >>> mysql_path_reading("SELECT @@version AS v")
    """
    table = named_anywhere(sql, MYSQL_VARIABLE_TABLES)
    if table is not None or "@@" not in sql:
        return table
    return named_anywhere(sql, MYSQL_PATH_VARIABLES)


def mysql_row_lock(sql: str) -> str | None:
    """``LOCK IN SHARE MODE`` or ``FOR SHARE`` when ``sql``'s tokens hold it (read once the text has
    passed ``lexing.mysql_reading_problem``, so the tokens are the server's), else None. A shared row
    lock is allowed in a read-only transaction and holds an application's ``UPDATE`` off for the whole
    call, as ``GET_LOCK`` would.

    >>> mysql_row_lock("SELECT * FROM t WHERE id = 1 LOCK IN SHARE MODE")
    'LOCK IN SHARE MODE'
    >>> mysql_row_lock("SELECT `lock`, share FROM t")
    """
    try:
        tokens = dialect_named("mysql").tokenize(sql)
    except SqlglotError:
        return None  # refused by the reading check already
    words = [token.text.upper() if token.token_type not in _LITERALS else "" for token in tokens]
    for index, word in enumerate(words):
        following = words[index + 1 : index + 4]
        if word == "LOCK" and tokens[index].token_type == TokenType.LOCK and following == ["IN", "SHARE", "MODE"]:
            return "LOCK IN SHARE MODE"
        if word == "FOR" and tokens[index].token_type == TokenType.FOR and following[:1] == ["SHARE"]:
            return "FOR SHARE"
    return None


DUCKDB_PATH_FUNCTIONS = frozenset(
    {
        "duckdb_settings",  # temp_directory, home_directory, extension_directory, ...
        "current_setting",
        "duckdb_databases",  # each database's file path
        "pragma_database_list",
        "database_list",
        "duckdb_extensions",  # install paths
        "duckdb_temporary_files",
        "duckdb_secrets",
        "which_secret",
    }
)
"""DuckDB functions an agent tool's statement may not name: they show absolute file paths."""


CLICKHOUSE_DENIED_FUNCTIONS = frozenset(
    {
        # Table functions (and the scalar file()) that read or write files, reach the network or other
        # servers, or run programs; readonly = 1 refuses most of them, the rest fail only on their
        # arguments: refused by name, before the server sees them.
        *("file", "filecluster", "url", "urlcluster", "s3", "s3cluster", "gcs", "oss", "cosn", "hdfs", "hdfscluster"),
        *("azureblobstorage", "azureblobstoragecluster", "remote", "remotesecure", "cluster", "clusterallreplicas"),
        *("mysql", "postgresql", "mongodb", "redis", "sqlite", "jdbc", "odbc", "hive", "executable", "executablepool"),
        *("iceberg", "icebergs3", "icebergazure", "iceberghdfs", "iceberglocal", "icebergs3cluster", "deltalake"),
        *("deltalakes3", "deltalakeazure", "deltalakelocal", "deltalakecluster", "hudi", "hudicluster", "paimon"),
        *("ytsaurus", "arrowflight", "prometheusquery", "input", "merge", "dictionary", "loop", "mergetreeindex"),
        # Dictionaries load their source (a file, a URL, a program) when first read.
        *("dictget", "dictgetordefault", "dictgetornull", "dicthas", "dictgethierarchy", "dictisin"),
        *("dictgetchildren", "dictgetdescendants", "dictgetall"),
    }
)
"""Functions an agent tool's ClickHouse statement may not call (followed by ``(``; a column may bear the
name). Typed ``dictGet*`` variants (``dictGetString``, ...) are refused by their ``dictget`` prefix."""

_CLICKHOUSE_CLAUSES = frozenset({"settings", "format", "outfile"})
"""Words an agent tool's ClickHouse statement may not hold anywhere outside its literals: a ``SETTINGS``
clause (the tool's limits are settings), ``FORMAT`` (chDB's cursor reads one format) and ``INTO OUTFILE``
(which chDB writes even in a read-only session); ``format(...)`` the function is allowed."""

_CLICKHOUSE_DATABASES = frozenset({"system", "information_schema"})
"""Databases an agent tool's ClickHouse statement may not read (as ``db.table``): ``system`` shows paths,
settings, other sessions' queries and the server's configuration; the schema tool describes the tables."""


def clickhouse_denied_call(sql: str) -> str | None:
    """What in ``sql`` an agent tool does not run on ClickHouse, or None: a statement starting with
    ``SET``, a word of ``_CLICKHOUSE_CLAUSES``, a function of ``CLICKHOUSE_DENIED_FUNCTIONS`` (or any
    ``dictGet...``), a table of the ``system`` or ``information_schema`` database; read from sqlglot's
    ``clickhouse`` tokens, outside the literals. A text that does not tokenize is refused.

    >>> clickhouse_denied_call("SELECT * FROM `url`('http://x', 'CSV', 'a String')")
    'url()'
    >>> clickhouse_denied_call("SELECT url, format('{}', x) FROM t")
    >>> clickhouse_denied_call("SELECT name FROM system.tables")
    'the system database'
    >>> clickhouse_denied_call("SELECT 1 SETTINGS readonly = 0")
    'SETTINGS'
    """
    try:
        tokens = dialect_named("clickhouse").tokenize(sql)
    except SqlglotError:
        return "a text that cannot be read (an unterminated string or comment?)"
    if tokens and tokens[0].text.lower() == "set":
        return "SET"
    for position, token in enumerate(tokens):
        if token.token_type in _LITERALS:
            continue
        name = token.text.lower()
        after = tokens[position + 1].token_type if position + 1 < len(tokens) else None
        if name in _CLICKHOUSE_CLAUSES and not (name == "format" and after == TokenType.L_PAREN):
            return "INTO OUTFILE" if name == "outfile" else name.upper()
        if after == TokenType.L_PAREN and (name in CLICKHOUSE_DENIED_FUNCTIONS or name.startswith("dictget")):
            return f"{name}()"
        if after == TokenType.DOT and name in _CLICKHOUSE_DATABASES:
            return f"the {name} database"
    return None


def denied_name(sql: str, dialect: str, names: frozenset[str]) -> str | None:
    """The first token of ``sql`` outside its literals whose lower-cased text ``names`` holds (quoted
    names too), or why the text cannot be tokenized; None when there is none.

    >>> denied_name('SELECT * FROM "DuckDB_Settings"()', "duckdb", DUCKDB_PATH_FUNCTIONS)
    'duckdb_settings'
    """
    if len(sql) > _CACHED_CHARS:  # not kept in the cache: a long text is read once
        return _denied_name.__wrapped__(sql, dialect, names)
    return _denied_name(sql, dialect, names)


_CACHED_CHARS = 20_000


@lru_cache(maxsize=256)
def _denied_name(sql: str, dialect: str, names: frozenset[str]) -> str | None:
    try:
        tokens = dialect_named(dialect).tokenize(sql)
    except SqlglotError:
        return "a text that cannot be read (an unterminated string or comment?)"
    for token in tokens:
        if token.token_type in _LITERALS:
            continue
        name = token.text.lower()
        if name in names:
            return name
    return None


_LITERALS = STRING_TOKENS | {TokenType.NUMBER}

_UNICODE_IDENTIFIER = re.compile(r'[uU]&"')
