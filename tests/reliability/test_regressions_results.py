"""Re-execution safety (issue 9), regressions, what already held (1/2): explosions past row_cap, comments,
write and smuggling candidates, factories and converters, transaction modes.

Each repro in ../shared/repros/reliability/ named here is a test; the design under test is in
tests/reliability/shared.py's docstring.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

import guarded_sqlite
from guarded_sqlite import GuardPolicy
from tests.pace import within
from tests.reliability.shared import RESCUE_SELECTION
from tests.reliability_helpers import (
    ENDLESS,
    EXPLODE,
    make_db,
    query_only,
    setup,
)

# --- 8. regressions: what already held ------------------------------------------------------------


def test_r14_explosion_past_row_cap_streams_every_row() -> None:
    """r14 (scaled down from 10M rows): an explosion larger than row_cap streams through unchanged:
    the same number of rows as sqlite3, not probed, with a note."""
    counts = {}
    for label, con in [
        ("raw", sqlite3.connect(":memory:")),
        ("guarded", guarded_sqlite.connect(":memory:", guard=GuardPolicy(row_cap=1000))),
    ]:
        con.execute("CREATE TABLE t(x)")
        con.executemany("INSERT INTO t VALUES (?)", [(i % 10,) for i in range(300)])
        cur = con.execute("SELECT a.x FROM t a, t b")
        counts[label] = (sum(1 for _ in cur), getattr(cur, "guard_report", None))
    assert counts["guarded"][0] == counts["raw"][0] == 90000
    report = counts["guarded"][1]
    assert not report.probed and "row_cap" in report.note and report.action == "none"


def test_r17_carriage_return_comment_hides_no_group_by() -> None:
    """r17: a "--" comment ended by a lone CR (sqlglot) but not by SQLite: the GROUP BY SQLite sees
    keeps P1 away; 40 rows as with sqlite3."""
    sql = "SELECT dept FROM emp -- dept per employee\r/*\nGROUP BY dept, id -- */"
    seen = {}
    for label, connect in [("raw", sqlite3.connect), ("guarded", guarded_sqlite.connect)]:
        con = connect(":memory:")
        con.execute("CREATE TABLE emp(id INTEGER PRIMARY KEY, dept TEXT)")
        con.executemany("INSERT INTO emp(dept) VALUES (?)", [(f"d{i % 4}",) for i in range(40)])
        cur = con.execute(sql)
        seen[label] = (cur.fetchall(), cur)
    assert seen["guarded"][0] == seen["raw"][0] and len(seen["raw"][0]) == 40
    assert seen["guarded"][1].guard_report.action == "none"


def test_r18_write_and_smuggling_candidates_never_change_anything(tmp_path: Path) -> None:
    """r18: rescue candidates that write, attach, vacuum, change pragmas or smuggle a second
    statement: whichever the rescuer picks, no write lands, no file appears, a write is never served."""
    directory = tmp_path / "r18"
    directory.mkdir()
    evil = [
        "SELECT 1; DROP TABLE t",
        "SELECT 1; SELECT 2",
        "WITH x AS (SELECT 1) DELETE FROM t",
        "WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x",
        "INSERT INTO t VALUES (99) RETURNING *",
        "REPLACE INTO t VALUES (1)",
        f"VACUUM INTO '{directory}/copy.db'",
        f"ATTACH '{directory}/att.db' AS a",
        "PRAGMA writable_schema = 1",
        "CREATE TEMP TABLE tt AS SELECT 1",
        "select 1 /* ; delete from t */",
        "SELECT x FROM t RETURNING x",
        "SELECT load_extension('/nonexistent/evil')",
        "SELECT * FROM pragma_query_only",
    ]
    writes = {0, 2, 3, 4, 5, 6, 7, 8, 9, 11}
    path = directory / "db.sqlite"
    for pick in range(len(evil)):
        if path.exists():
            path.unlink()
        con = guarded_sqlite.connect(str(path), guard=GuardPolicy(rescue=lambda req, p=pick: p, rerun_timeout=0.5))
        con.execute("CREATE TABLE t(x)")
        con.execute("INSERT INTO t VALUES (1)")
        con.commit()
        cur = con.execute("SELECT x FROM t WHERE 0", candidates=evil)
        cur.fetchall()
        rescue = cur.guard_report.rescue
        if pick in writes:
            assert rescue.chosen_index is None, evil[pick]
        assert con.execute("SELECT count(*), group_concat(x) FROM t").fetchone() == (1, "1"), evil[pick]
        assert con.execute("SELECT count(*) FROM sqlite_temp_master").fetchone()[0] == 0
        assert query_only(con) == 0
        con.close()
        assert sorted(p.name for p in directory.iterdir()) == ["db.sqlite"], evil[pick]


def test_r18_endless_candidate_is_stopped_by_rerun_timeout() -> None:
    """r18: an endless recursive candidate is interrupted after rerun_timeout and never served."""
    con = setup(guarded_sqlite.connect(":memory:", guard=GuardPolicy(rescue=lambda r: 0, rerun_timeout=0.2)))
    started = time.monotonic()
    cur = con.execute(RESCUE_SELECTION, candidates=[ENDLESS])
    assert cur.fetchall() == [] and within(time.monotonic() - started, 0.2, 1.3)
    assert cur.guard_report.rescue.chosen_index is None


_CONVERTERS = {"UPPER": lambda b: b.decode().upper()}


def _norm(row: Any) -> Any:
    if isinstance(row, sqlite3.Row):
        return tuple(row)
    if isinstance(row, dict):
        return tuple(row.values())
    if isinstance(row, (list, tuple)):
        return tuple(bytes(x) if isinstance(x, bytearray) else x for x in row)
    return row


def _boom(b: bytes) -> Any:
    raise ValueError("converter failed")


def _bad_text(b: bytes) -> Any:
    raise UnicodeError("bad text")


R20_CONFIGS: dict[str, dict[str, Any]] = {
    "Row": {"row_factory": sqlite3.Row},
    "dict": {"row_factory": lambda c, r: {d[0]: v for d, v in zip(c.description, r)}},
    "list": {"row_factory": lambda c, r: list(r)},
    "text=bytearray": {"text_factory": bytearray},
    "text=bytes": {"text_factory": bytes},
    "text raises": {"text_factory": _bad_text},
    "row_factory raises": {"row_factory": lambda c, r: 1 / 0},
    "converter UPPER": {"sql": EXPLODE.replace("SELECT t.name", 'SELECT t.name AS "n [R20UPPER]"')},
    "converter raises": {"sql": EXPLODE.replace("SELECT t.name", 'SELECT t.name AS "n [R20BOOM]"')},
}


@pytest.mark.parametrize("config", list(R20_CONFIGS))
def test_r20_row_and_text_factories_and_converters_behave_as_sqlite3(config: str) -> None:
    """r20: row/text factories and converters on an exploding join: the same set of rows, or the same
    error, as sqlite3."""
    sqlite3.register_converter("R20UPPER", lambda b: b.decode().upper())
    sqlite3.register_converter("R20BOOM", _boom)
    cfg = R20_CONFIGS[config]
    out = {}
    for label, connect in [("raw", sqlite3.connect), ("guarded", guarded_sqlite.connect)]:
        con = setup(connect(":memory:", detect_types=sqlite3.PARSE_COLNAMES))
        if "row_factory" in cfg:
            con.row_factory = cfg["row_factory"]
        if "text_factory" in cfg:
            con.text_factory = cfg["text_factory"]
        try:
            rows = con.execute(cfg.get("sql", EXPLODE)).fetchall()
            out[label] = ("ok", sorted(set(map(_norm, rows)), key=repr))
        except Exception as error:
            out[label] = ("raise", type(error).__name__, str(error))
    assert out["guarded"] == out["raw"]


@pytest.mark.parametrize(
    ("isolation", "begin"),
    [
        ("", None),
        ("DEFERRED", None),
        ("IMMEDIATE", None),
        ("EXCLUSIVE", None),
        (None, "BEGIN"),
        (None, "BEGIN IMMEDIATE"),
        (None, "SAVEPOINT sp"),
    ],
)
def test_r24_patched_select_in_every_transaction_mode(tmp_path: Path, isolation: Any, begin: Any) -> None:
    """r24: a P1-patched SELECT in each transaction mode sees uncommitted rows, commits nothing, rolls
    back nothing, leaves in_transaction and query_only as they were."""
    path = make_db(tmp_path / "r24.db")
    con = guarded_sqlite.connect(path, isolation_level=isolation)
    if begin:
        con.execute(begin)
    con.execute("INSERT INTO t VALUES (100, 'uncommitted')")
    con.execute("INSERT INTO u (t_id) SELECT 100 FROM u LIMIT 10")
    cur = con.execute(EXPLODE)
    rows = cur.fetchall()
    assert cur.guard_report.action == "distinct_injected" and ("uncommitted",) in rows
    assert con.in_transaction and query_only(con) == 0
    con.execute("ROLLBACK TO sp") if begin and begin.startswith("SAVEPOINT") else con.rollback()
    assert sqlite3.connect(path).execute("SELECT count(*) FROM t WHERE id = 100").fetchone()[0] == 0


def test_r24_with_block_rolls_back_as_sqlite3(tmp_path: Path) -> None:
    """r24: ``with con:`` around a patched SELECT commits and rolls back exactly as with sqlite3."""
    seen = []
    for connect in (sqlite3.connect, guarded_sqlite.connect):
        path = make_db(tmp_path / f"with{len(seen)}.db")
        con = connect(path)
        with pytest.raises(RuntimeError), con:
            con.execute("INSERT INTO audit VALUES (1)")
            con.execute(EXPLODE).fetchall()
            raise RuntimeError
        with con:
            con.execute("INSERT INTO audit VALUES (2)")
            con.execute(EXPLODE).fetchall()
        seen.append(sqlite3.connect(path).execute("SELECT group_concat(x) FROM audit").fetchone())
    assert seen[0] == seen[1] == ("2",)
