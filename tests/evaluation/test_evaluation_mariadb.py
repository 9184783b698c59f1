"""The evaluation on MariaDB: the copy (types, keys, collation, reuse), the address it takes, and the
gold results the server answers differently from SQLite, each with its cause.

The tests that run on every engine, MariaDB included, are in ``test_evaluation_engines.py``. These
use the session's throwaway server (``mariadb_params``, ``tests/mariadb_server.py``) with a database
prefix of their own, and skip with the reason without one, unless ``GUARDED_SQLITE_REQUIRE_MARIADB=1``
(CI), where that is a failure.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from guarded_sqlite.cli.commands import main
from guarded_sqlite.evaluation import InputError, evaluate
from guarded_sqlite.evaluation.copy import copy_to_mysql, mysql_database_name, mysql_params

from .test_evaluation_engines import MIXED_ROWS, TYPES, make_db, write_inputs


@pytest.fixture
def maria(mariadb_params: dict[str, Any]) -> dict[str, Any]:
    """``evaluate`` keyword arguments for the session's server, with a database prefix of this test's own."""
    return {
        "engine": "mariadb",
        "mysql_url": f"mysql://{mariadb_params['user']}@{mariadb_params['host']}:{mariadb_params['port']}",
        "mysql_db_prefix": f"t{uuid.uuid4().hex[:8]}_",
    }


def _connect(maria: dict[str, Any], database: str | None = None) -> Any:
    import pymysql

    return pymysql.connect(**mysql_params(maria["mysql_url"]), database=database, autocommit=True)


def _read(con: Any, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
    with con.cursor() as cursor:
        cursor.execute(sql, args)
        return [tuple(row) for row in cursor.fetchall()]


def test_addresses_and_database_names() -> None:
    assert mysql_params("mysql://reader:p%40ss@db.internal:3307") == {
        "host": "db.internal",
        "port": 3307,
        "user": "reader",
        "password": "p@ss",
        "charset": "utf8mb4",
    }
    assert mysql_params("mariadb://127.0.0.1/?unix_socket=/run/mysqld.sock&connect_timeout=3") == {
        "host": "127.0.0.1",
        "charset": "utf8mb4",
        "unix_socket": "/run/mysqld.sock",
        "connect_timeout": 3,
    }
    for url, message in [
        ("postgresql://127.0.0.1", "starts with mysql://"),
        ("mysql://127.0.0.1/spider", "leave the database name out"),
        ("mysql://127.0.0.1:port", "invalid port"),
        ("mysql://127.0.0.1?ssl=1", "unknown option 'ssl'"),
        ("mysql://127.0.0.1?connect_timeout=soon", "must be int"),
    ]:
        with pytest.raises(InputError, match=message):
            mysql_params(url)
    assert mysql_database_name("concert_singer", "spider_") == "spider_concert_singer"
    odd = mysql_database_name("Weird-DB name", "spider_")
    assert odd.startswith("spider_weird_db_name_") and odd != mysql_database_name("weird_db_name", "spider_")
    assert len(mysql_database_name("x" * 200, "spider_")) <= 64
    assert mysql_database_name("mysql", "").startswith("db_mysql")
    # The address is checked before anything runs, and never shown in the engine's repr (a password).
    from guarded_sqlite.evaluation.options import resolve_engine

    spec = resolve_engine("MariaDB", mysql_url="mysql://u:secret@127.0.0.1")
    assert spec.name == "mysql" and "secret" not in repr(spec)
    with pytest.raises(InputError, match="only used with engine 'mysql'"):
        resolve_engine("sqlite", mysql_collation="utf8mb4_bin")


def test_mysql_copy_is_faithful_and_idempotent(tmp_path: Path, maria: dict[str, Any]) -> None:
    path = make_db(tmp_path, "types", TYPES)
    url, prefix = maria["mysql_url"], maria["mysql_db_prefix"]
    database = mysql_database_name("types", prefix)
    first = copy_to_mysql(path, "types", url, prefix)
    assert (first.engine, first.action, first.target, first.tables, first.rows) == ("mysql", "copied", database, 3, 4)
    # First note: how text compares (the server's default collation ignores case and trailing spaces).
    assert first.notes[0].startswith("text compares under utf8mb4_general_ci, ignoring case and ignoring trailing")
    assert any("widened" in note for note in first.notes) and any("mixed storage" in note for note in first.notes)
    con = _connect(maria, database)
    try:
        # Lower-cased names, as the transpiled queries quote them.
        rows = _read(con, "SELECT id, price, amount, label, data, anything, score FROM mixed ORDER BY id")
        assert rows == MIXED_ROWS
        types = dict(
            _read(
                con,
                "SELECT column_name, column_type FROM information_schema.columns "
                "WHERE table_schema = %s AND table_name = 'mixed'",
                (database,),
            )
        )
        assert (types["id"], types["price"], types["amount"], types["label"], types["data"]) == (
            "bigint(20)",
            "double",
            "bigint(20)",
            "longtext",
            "longblob",
        )
        # The primary key the guard reads from the catalog, as it reads SQLite's.
        assert _read(
            con,
            "SELECT column_name FROM information_schema.key_column_usage "
            "WHERE table_schema = %s AND table_name = 'mixed' AND constraint_name = 'PRIMARY'",
            (database,),
        ) == [("id",)]
        assert _read(con, "SELECT `weird col`, `select` FROM `odd name`") == [(1, "x")]
        assert _read(con, "SELECT * FROM labels") == [("a",)]  # the view, with SQLite's "b'c" string
        assert _read(con, "SELECT db_id, `rows` FROM guarded_sqlite.copies WHERE database_name = %s", (database,)) == [
            ("types", 4)
        ]
    finally:
        con.close()

    again = copy_to_mysql(path, "types", url, prefix)
    assert (again.action, again.rows, again.notes) == ("reused", 4, first.notes)
    # Another collation is another copy.
    binary = copy_to_mysql(path, "types", url, prefix, collation="utf8mb4_nopad_bin")
    assert binary.action == "copied"
    assert (
        binary.notes[0]
        == "text compares under utf8mb4_nopad_bin: case and trailing spaces count, as in SQLite's BINARY"
    )
    with sqlite3.connect(path) as source:
        source.execute("INSERT INTO Mixed (ID, Label) VALUES (4, 'new')")
    source.close()
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    third = copy_to_mysql(path, "types", url, prefix, collation="utf8mb4_nopad_bin")
    assert (third.action, third.rows) == ("copied", 5)
    with pytest.raises(InputError, match="not a utf8mb4 collation"):
        copy_to_mysql(path, "types", url, prefix, collation="latin1_swedish_ci")


def test_a_key_the_collation_merges_is_not_created_and_said(tmp_path: Path, maria: dict[str, Any]) -> None:
    path = make_db(
        tmp_path, "codes", "CREATE TABLE codes (code TEXT PRIMARY KEY); INSERT INTO codes VALUES ('a'), ('A');"
    )
    prefix = maria["mysql_db_prefix"]
    merged = copy_to_mysql(path, "codes", maria["mysql_url"], prefix)
    assert any(note.startswith("codes: primary key (code) not created: IntegrityError: (1062") for note in merged.notes)
    kept = copy_to_mysql(path, "codes", maria["mysql_url"], prefix, collation="utf8mb4_nopad_bin")
    assert not any("primary key" in note for note in kept.notes)


DIFFERENT = """
CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, code TEXT, hp TEXT, age INTEGER);
INSERT INTO people VALUES (1, 'bob', 'x ', '95', 30), (2, 'Bob ', 'y', '150', 41), (3, 'Cid', 'z', '210', 50);
"""

# Index -> (gold, the cause MariaDB's default collation gives it); predictions are the gold itself.
CAUSES: list[tuple[str, str | None]] = [
    ("SELECT count(*) FROM people WHERE name = 'BOB'", "text_comparison"),  # case ignored: 2, not 0
    ("SELECT id FROM people WHERE code = 'x'", "text_comparison"),  # trailing space ignored (PAD SPACE)
    ("SELECT avg(age) FROM people", "numeric"),  # 40.333333333333336 on SQLite, DECIMAL 40.3333 on MariaDB
    ("SELECT avg(age) FROM people WHERE id < 3", None),  # 35.5 on both (Decimal('35.5000') == 35.5)
    ("SELECT sum(age) / 3.0 FROM people", "numeric"),
    ("SELECT min(name) FROM people", "case_or_spaces"),  # 'Bob ' on SQLite; 'bob' merged with it on MariaDB
    ("SELECT 7 / 2", "division"),  # 3 on SQLite, 3.5000 on MariaDB
    ("SELECT count(*) FROM people WHERE hp > 150", "number_comparison"),  # as text on SQLite: '95' > '150'
    ("SELECT max(age), name FROM people", "bare_column"),  # SQLite: the max's row ('Cid'); MariaDB: another
    ("SELECT id FROM people WHERE age < ANY (SELECT age FROM people)", "sqlite_error"),
    ("SELECT name FROM people WHERE name LIKE 'cid'", None),  # LIKE ignores case on both
]


def test_mariadb_gold_differences_by_cause(
    tmp_path: Path, maria: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "dbs"
    make_db(root, "shop", DIFFERENT)
    gold, pred = write_inputs(tmp_path, [(sql, sql) for sql, _ in CAUSES])
    report = evaluate(root, gold, pred, workers=1, **maria)
    expected = {i: cause for i, (_, cause) in enumerate(CAUSES) if cause is not None}
    assert {d.index: d.category for d in report.gold_differences} == expected
    by_index = {d.index: d for d in report.gold_differences}
    assert (by_index[0].sqlite_rows, by_index[0].engine_rows, by_index[0].same_set) == (1, 1, False)
    assert by_index[9].detail.startswith("SQLite: OperationalError: ")
    assert by_index[2].detail == (
        "1 row(s) on SQLite, 1 on the engine; only on SQLite: (40.333333333333336,); "
        "only on the engine: (Decimal('40.3333'),)"
    )
    # Every pair is scored against MariaDB's own gold result: gold fed back scores 100%.
    assert (report.n, report.baseline.set_correct, report.baseline.multiset_correct) == (11, 11, 11)
    on_sqlite = evaluate(root, gold, pred, workers=1)
    assert [f.index for f in on_sqlite.gold_failures] == [9] and on_sqlite.n == 10

    # Under a binary, NO PAD collation the two collation causes go, and LIKE becomes case-sensitive.
    binary = evaluate(root, gold, pred, workers=1, mysql_collation="utf8mb4_nopad_bin", **maria)
    assert {d.index: d.category for d in binary.gold_differences} == {
        **{i: c for i, c in expected.items() if i not in (0, 1, 5)},
        10: "text_comparison",
    }

    argv = ["eval", "--db-root", str(root), "--gold", str(gold), "--pred", str(pred), "--workers", "1"]
    argv += ["--engine", "mariadb", "--mysql-url", maria["mysql_url"], "--mysql-db-prefix", maria["mysql_db_prefix"]]
    assert main([*argv, "--guard", "patch,paper"]) == 0
    out = capsys.readouterr().out
    assert "Presets compared on N=11 pairs (engine=mysql, " in out
    assert "every database: text compares under utf8mb4_general_ci" not in out  # one database: listed as its own
    assert "shop: text compares under utf8mb4_general_ci" in out
    assert "Gold results that differ from SQLite's (their pairs are scored against the mysql result): 9 (" in out


def test_mariadb_options_are_checked(tmp_path: Path, maria: dict[str, Any]) -> None:
    root = tmp_path / "dbs"
    make_db(root, "shop", DIFFERENT)
    gold, pred = write_inputs(tmp_path, CAUSES[:1])
    with pytest.raises(InputError, match="needs the server's address"):
        evaluate(root, gold, pred, engine="mysql")
    with pytest.raises(InputError, match="cannot connect to MySQL/MariaDB"):
        evaluate(root, gold, pred, engine="mysql", mysql_url="mysql://root@127.0.0.1:1?connect_timeout=2")
    with pytest.raises(InputError, match="not a utf8mb4 collation"):
        evaluate(root, gold, pred, workers=1, mysql_collation="utf8mb4", **maria)
