"""The differential corpus of issue 43 (repros a22-a29): texts that two lexers may split differently,
run against the real test servers. For each text, the server's own reading decides what ran (a marker
column, ``7 AS marker``, is in the result or not), and sqlglot's reading is what its tokens say; where
they differ, the agent tools' check must refuse the text, and a call hidden at the marker's place never
runs through the tool.

MariaDB: every comment form with every Unicode space and every control character after it, quotes and
escapes (backslashes, doubled quotes, ``X''``, ``N''``, introducers, quoted user variables), nested
comments, and command words as names; under the ``sql_mode`` the tool pins, and with a handed-in
session carrying ``ANSI,NO_BACKSLASH_ESCAPES``. PostgreSQL: the same comment forms, dollar quotes after
a Unicode space, ``*/*`` in nested comments, ``standard_conforming_strings`` off on the role, and
``begin``/``show``/``execute``/``do``/``explain`` as names; a refused function hidden there, and one
hidden behind a view, the plan check's part.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from guarded_sqlite import wrap
from guarded_sqlite._analysis.lexing import mysql_reading_problem
from guarded_sqlite.agent import GuardedDatabase, QueryRefused, lockdown
from tests.agent_cases import OpenDb, opened_databases
from tests.engines.test_engines import maria_database  # noqa: F401 (the fixture)

UNICODE_SPACES = [chr(c) for c in range(0x80, 0x3001) if chr(c).isspace()]
"""Every non-ASCII character Python (and so sqlglot) takes for white space: U+0085, U+00A0, U+1680,
U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000."""

CONTROLS = [chr(c) for c in range(1, 0x20)] + ["\x7f"]
"""The control characters a text can carry (NUL cannot go through libpq, and is refused by the tools)."""

AFTER = [" ", "x", "-", "+", *UNICODE_SPACES, *CONTROLS]
"""What follows a comment opener in the corpus."""


def test_the_corpus_has_every_unicode_space_and_control_character() -> None:
    assert len(UNICODE_SPACES) == 19 and "\u00a0" in UNICODE_SPACES and "\u3000" in UNICODE_SPACES
    assert len(CONTROLS) == 32


# --- MariaDB ---------------------------------------------------------------------------------------------


def mysql_corpus() -> list[str]:
    """Texts with ``, 7 AS marker`` somewhere a lexer may or may not take for code."""
    texts = []
    for c in AFTER:
        named = f"FROM (SELECT 1 AS `{c}`) AS t"  # `1 --<c>` is `1 - -<c>` to MariaDB: a column named <c>
        texts += [
            f"SELECT 1 --{c}, 7 AS marker {named}",
            f"SELECT 1 --{c}\n, 7 AS marker {named}",
            f"SELECT 1 #{c}, 7 AS marker",
            f"SELECT 1 # c{c}, 7 AS marker",
            f"SELECT 1 -- c{c}, 7 AS marker",
            f"SELECT 1 /*{c}*/, 7 AS marker",
            f"SELECT 1 AS v, 'a{c}' AS w, 7 AS marker",
            f"SELECT 1 AS v{c}, 7 AS marker",
        ]
    texts += [
        "SELECT 1 AS v /* /* */, 7 AS marker -- */",
        "SELECT 1 AS v /* /* */ */, 7 AS marker",
        "SELECT 1 AS v --- , 7 AS marker",
        "SELECT 1 AS v --, 7 AS marker",
        "SELECT 'a\\' AS v, 7 AS marker -- '",
        "SELECT 'a\\', 7 AS marker, '\\' AS v -- '",
        "SELECT 'a''' AS v, 7 AS marker",
        'SELECT "a\\" AS v, 7 AS marker -- "',
        'SELECT "a""" AS v, 7 AS marker',
        "SELECT 1 AS `a\\`, 7 AS marker -- `",
        "SELECT 1 AS `a``b`, 7 AS marker",
        "SELECT X'41' AS v, 7 AS marker",
        "SELECT N'a\\'' AS v, 7 AS marker",
        "SELECT _utf8mb4'a\\' AS v, 7 AS marker -- '",
        "SELECT @'a\\' AS v, 7 AS marker -- '",
        "SELECT 1 AS v, 7 AS marker # 'unterminated",
        "SELECT begin, 7 AS marker FROM (SELECT 1 AS begin) s",
        *(
            f"SELECT begin {word}, 7 AS marker FROM (SELECT 1 AS begin) s"
            for word in ("execute", "show", "lock", "rename", "fetch", "prepare", "call", "do", "explain")
        ),
        "SELECT do, 7 AS marker FROM (SELECT 1 AS do) s",
        "SELECT `explain`, 7 AS marker FROM (SELECT 1 AS `explain`) s",
        "SELECT 1 AS v, 7 AS marker FROM DUAL WHERE 1 = 1 -- ' \\",
    ]
    return texts


def mysql_sees_marker(sql: str) -> bool | None:
    """Whether sqlglot's tokens hold ``marker`` as code, or None when sqlglot cannot read the text."""
    from sqlglot.errors import SqlglotError

    from guarded_sqlite._analysis.trees import dialect_named

    try:
        tokens = dialect_named("mysql").tokenize(sql)
    except SqlglotError:
        return None
    return any(token.text.lower() == "marker" and token.token_type.name == "VAR" for token in tokens)


def server_runs_marker(cursor: Any, sql: str) -> bool | None:
    """Whether the server's result has the column ``marker``, or None when it refused the text."""
    try:
        cursor.execute(sql)
    except Exception:  # a syntax error: nothing ran
        return None
    cursor.fetchall()
    return "marker" in [entry[0] for entry in cursor.description or ()]


@pytest.fixture
def maria_session(maria_database: Any) -> Iterator[Any]:  # noqa: F811 (the fixture imported below)
    """A plain session of the test database under the tool's pinned ``sql_mode``, read-only."""
    connection = maria_database.connect()
    with connection.cursor() as cursor:
        cursor.execute(f"SET SESSION sql_mode = '{lockdown.MYSQL_SQL_MODE}'")
        cursor.execute("SET SESSION TRANSACTION READ ONLY")
    yield connection
    connection.close()


def test_mariadb_where_sqlglot_and_the_server_disagree_the_check_refuses(maria_session: Any) -> None:
    """a22, a24: over the corpus the two readings differ (so sqlglot alone cannot be the judge), and the
    tool's check refuses every text where they do; where it accepts one, both read the marker alike."""
    disagreements = accepted = 0
    with maria_session.cursor() as cursor:
        for sql in mysql_corpus():
            server = server_runs_marker(cursor, sql)
            theirs = mysql_sees_marker(sql)
            refused = lockdown.denied_call_problem(sql, "mysql") is not None
            if server is not None and theirs != server:
                disagreements += 1
                assert refused, f"sqlglot reads the marker as {theirs}, the server as {server}: {sql!r}"
            if not refused:
                accepted += 1
                assert server is None or theirs == server, sql
                assert mysql_reading_problem(sql) is None
    assert disagreements >= len(UNICODE_SPACES)  # `--` + each Unicode space, at least
    assert accepted >= 50  # not a check that refuses everything


@pytest.mark.parametrize("c", [*UNICODE_SPACES, "\x01", "\x1f", "\x7f"])
def test_a22_a_call_after_dash_dash_and_a_unicode_space_never_runs(maria_database: Any, c: str) -> None:  # noqa: F811
    """a22 through the tool: ``1 --<c> + ...`` (``- -`` to the server) with a lock, a file read and a
    write into a file after it is refused before it reaches the server."""
    uri = "mysql://{user}@{host}:{port}/".format(**maria_database.params) + maria_database.name
    db = GuardedDatabase.open(uri, isolated=False, timeout=5, allow_privileged=True)  # root: files too
    try:
        for tail in ("+ GET_LOCK('a22', 0) AS v", "+ 0 AS v INTO OUTFILE '/tmp/a22-never'", "+ 0 AS v, 'secret' AS s"):
            with pytest.raises(QueryRefused) as refused:
                db.query(f"SELECT 1 --{c}{tail} FROM (SELECT 1 AS `{c}`) AS t")
            assert refused.value.kind in ("denied", "write"), (c, tail)
    finally:
        db.close()


def test_a22_the_audit_log_does_not_show_a_text_read_two_ways() -> None:
    """a22's audit line: the literal after ``--<NBSP>`` is code to the server and a comment to sqlglot, so
    the line shows no text at all; a text both read alike keeps its shape, literals hidden."""
    from guarded_sqlite.agent.audit import logged_sql

    hidden = "SELECT 1 --\u00a0+ 0 AS v, (SELECT name FROM customers WHERE email = 'ana@example.com') AS n"
    assert logged_sql(hidden, "mysql") == f"<SQL not shown: {len(hidden)} characters>"
    plain = "SELECT name FROM customers WHERE email = 'ana@example.com' -- a comment"
    assert logged_sql(plain, "mysql") == "SELECT name FROM customers WHERE email = ? -- a comment"


def test_a24_a_handed_in_session_s_sql_mode_is_pinned_per_call_and_given_back(maria_database: Any) -> None:  # noqa: F811
    """a24: a connection carrying ``ANSI,NO_BACKSLASH_ESCAPES`` has the tool's mode during each call
    (``"..."`` a string, ``\\`` an escape, as the check reads them) and its own mode after it."""
    raw = maria_database.connect()
    with raw.cursor() as cursor:
        cursor.execute("SET SESSION sql_mode = 'ANSI,NO_BACKSLASH_ESCAPES'")
        cursor.execute("SELECT @@SESSION.sql_mode")
        before = cursor.fetchone()[0]
    db = GuardedDatabase(wrap(raw))
    assert db.query("SELECT @@SESSION.sql_mode AS m").rows == ((lockdown.MYSQL_SQL_MODE,),)
    # One string to the check and to the server under the pinned mode; under the caller's, a name.
    assert db.query('SELECT "a\\", 7 AS marker -- " AS v').rows == (('a", 7 AS marker -- ',),)
    assert db.query("SELECT 'a\\', 7 AS marker, ' AS v").rows == (("a', 7 AS marker, ",),)
    with raw.cursor() as cursor:
        cursor.execute("SELECT @@SESSION.sql_mode")
        assert cursor.fetchone()[0] == before


# --- PostgreSQL ------------------------------------------------------------------------------------------


def postgres_corpus() -> list[str]:
    """Texts with ``{call}`` where a lexer may or may not take it for code."""
    texts = []
    for c in AFTER:
        texts += [
            f"SELECT 1 AS v --{c}, {{call}}",
            f"SELECT 1 AS v /*{c}*/, {{call}}",
            f"SELECT 1 AS x{c}$$, {{call}}, 1 AS y{c}$$",
            f"SELECT 1 AS x{c}$t$, {{call}}, 1 AS y{c}$t$",
            f"SELECT 1 AS v, 'a{c}' AS w, {{call}}",
        ]
    texts += [
        "SELECT 1 AS one /* /* */* */, {call} -- */",
        "SELECT 1 AS one /* /* */ */, {call}",
        "SELECT begin show, {call} FROM (SELECT 1 AS begin) s",
        "SELECT begin execute, {call} FROM (SELECT 1 AS begin) s",
        "SELECT begin lock, {call} FROM (SELECT 1 AS begin) s",
        "SELECT begin rename, {call} FROM (SELECT 1 AS begin) s",
        "SELECT do, {call} FROM (SELECT 1 AS do) s",
        "SELECT explain, {call} FROM (SELECT 1 AS explain) s",
        "SELECT '\\' AS a -- ', {call}",
        "SELECT E'\\'' AS a, {call}",
        "SELECT $a$ $$ $a$ AS a, {call}",
        "SELECT U&'\\0041' AS a, {call}",
    ]
    return texts


@pytest.fixture
def pg_reader(pg_dsn: str) -> Iterator[Any]:
    from tests.agent.test_agent_postgres_session import Reader

    made = Reader(pg_dsn)
    with made.admin() as admin:
        admin.execute(f"CREATE VIEW {made.name}.locker AS SELECT pg_try_advisory_lock(4343) AS got")
        admin.execute(f"GRANT SELECT ON {made.name}.locker TO {made.name}")
    try:
        yield made
    finally:
        made.drop()


@pytest.fixture
def open_pg(pg_reader: Any) -> Iterator[OpenDb]:
    yield from opened_databases(pg_reader.uri, isolated=False, timeout=5)


def postgres_sees_marker(sql: str) -> bool | None:
    from sqlglot.errors import SqlglotError

    from guarded_sqlite._analysis.trees import dialect_named

    try:
        tokens = dialect_named("postgres").tokenize(sql)
    except SqlglotError:
        return None
    return any(token.text.lower() == "marker" and token.token_type.name == "VAR" for token in tokens)


@pytest.mark.parametrize("standard", ["on", "off"])
def test_postgres_a_refused_call_hidden_by_a_lexer_never_runs(pg_reader: Any, open_pg: OpenDb, standard: str) -> None:
    """a25-a28: over the corpus PostgreSQL and sqlglot read the marker differently (so sqlglot alone
    cannot be the judge); through the tool, ``pg_try_advisory_lock`` at the marker's place, written out
    or behind a view, is refused or does not run (no ``marker`` column served, no lock taken), with
    ``standard_conforming_strings`` on or off on the role."""
    import psycopg

    with pg_reader.admin() as admin:
        admin.execute(f"ALTER ROLE {pg_reader.name} SET standard_conforming_strings = {standard}")
    db = open_pg()
    disagreements = served = 0
    with pg_reader.admin() as plain:
        plain.execute(f"SET search_path = {pg_reader.name}")
        for template in postgres_corpus():
            marked = template.format(call="7 AS marker")
            try:
                with plain.transaction(force_rollback=True):
                    plain.execute("SET LOCAL standard_conforming_strings = on")
                    cursor = plain.execute(marked, prepare=True)
                    server: bool | None = "marker" in [entry.name for entry in cursor.description or ()]
            except psycopg.Error:
                server = None
            if server is not None and postgres_sees_marker(marked) != server:
                disagreements += 1
            for call in ("pg_try_advisory_lock(4242) AS marker", "(SELECT got FROM locker) AS marker"):
                try:
                    result = db.query(template.format(call=call))
                except QueryRefused:
                    continue
                served += 1
                assert "marker" not in result.columns, template.format(call=call)
            assert pg_reader.advisory_locks() == 0
    assert disagreements >= len(UNICODE_SPACES)  # x<space>$$ for each, at least
    assert db.query("SELECT count(*) FROM customers").rows == ((50,),)


NBSP = "\u00a0"


@pytest.mark.parametrize(
    "sql",
    [
        pytest.param("SELECT begin show, {call} FROM (SELECT 1 AS begin) s", id="a25-begin-show"),
        pytest.param(f"SELECT 1 AS x{NBSP}$$, {{call}}, 1 AS y{NBSP}$$", id="a26-nbsp-dollar-quote"),
        pytest.param("SELECT 1 AS one /* /* */* */, {call} -- */", id="a27-nested-comment-star-slash-star"),
        pytest.param("SELECT '\\' AS a -- ', {call}", id="a28-nonstandard-strings"),
    ],
)
def test_a25_to_a28_the_repros_statements_take_no_lock(pg_reader: Any, open_pg: OpenDb, sql: str) -> None:
    """a25-a28 as the repros send them (the role's ``standard_conforming_strings`` off, as a28 sets it on
    the database): refused by the name in the text; hidden behind a view, refused by the plan or (a28,
    where the pinned setting makes the rest a comment to the server as well) not run at all."""
    with pg_reader.admin() as admin:
        admin.execute(f"ALTER ROLE {pg_reader.name} SET standard_conforming_strings = off")
    db = open_pg()
    with pytest.raises(QueryRefused) as refused:
        db.query(sql.format(call="pg_advisory_lock(4242) AS taken, pg_sleep(0.2) AS pause"))
    assert refused.value.kind == "denied"
    try:
        served = db.query(sql.format(call="(SELECT got FROM locker) AS taken"))
    except QueryRefused as hidden:
        assert hidden.kind == "denied"
    else:
        assert "taken" not in served.columns
    assert pg_reader.advisory_locks() == 0
    assert db.query("SELECT count(*) FROM customers").rows == ((50,),)


def test_postgres_a_call_the_plan_does_not_show_is_refused_by_its_name_in_the_text(
    pg_reader: Any, open_pg: OpenDb
) -> None:
    """a25-a28: EXPLAIN's plan does not show a ``LIMIT`` count, so a call written there is refused by its
    name in the text, whatever sqlglot reads around it: another session of the role, which
    ``pg_terminate_backend`` may end, survives every form."""
    import psycopg

    db = open_pg()
    with psycopg.connect(pg_reader.uri, autocommit=True) as victim:
        pid = victim.info.backend_pid
        limit = f"LIMIT CASE WHEN pg_terminate_backend({pid}) THEN 1 ELSE 1 END"
        forms = [f"SELECT 1 AS x{c}$$ {limit} -- $$" for c in UNICODE_SPACES] + [
            f"SELECT begin show FROM (SELECT 1 AS begin) s {limit}",
            f"SELECT 1 AS one /* /* */* */ {limit} -- */",
            f"SELECT '\\' AS a -- ' {limit}",
        ]
        for sql in forms:
            with pytest.raises(QueryRefused) as refused:
                db.query(sql)
            assert refused.value.kind == "denied", sql
        assert victim.execute("SELECT 1").fetchone() == (1,)


def test_a29_with_writes_allowed_do_and_explain_are_judged_too(pg_reader: Any, open_pg: OpenDb) -> None:
    """a29: with writes allowed, a ``DO`` block or ``EXPLAIN ANALYZE`` naming a refused function, a
    ``DO`` that builds the call from text, and a view hiding one are refused; other writes still run."""
    db = open_pg(allow_writes=True)
    for sql in (
        "DO $$BEGIN PERFORM pg_advisory_lock(4242); END$$",
        "EXPLAIN ANALYZE SELECT pg_advisory_lock(4242)",
        "DO $$BEGIN EXECUTE 'SELECT pg_advisory_' || 'lock(77)'; END$$",
        "EXPLAIN ANALYZE SELECT * FROM locker",
        "SELECT * FROM locker",
    ):
        with pytest.raises(QueryRefused) as refused:
            db.query(sql)
        assert refused.value.kind == "denied", sql
        assert pg_reader.advisory_locks() == 0
    # A statement EXPLAIN cannot plan, without DO/EXPLAIN/EXECUTE, still runs.
    assert db.query("CREATE TEMPORARY TABLE scratch (x int)").columns == ()
