"""Re-execution safety (issue 9): each repro in ../shared/repros/reliability/ as a test, in the
modules of this folder (one per scenario); here, what several of them share.

The design under test: P1 is served from the rows already fetched (no re-execution); P2 and rescue
candidates run on a separate read-only connection when the caller has no open transaction on a file
database, else on the caller's connection under ``PRAGMA query_only`` restored on every path; a
transaction the engine rolls back during a guard statement raises ``TransactionLost``; time limits
are C-level ``interrupt()`` deadlines, never a Python progress handler; KeyboardInterrupt propagates.
Plain sqlite3 is the baseline wherever the repro compares with it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from tests.reliability_helpers import make_db, query_only

ALL_NAMES = {(f"name{i}",) for i in range(1, 21)}
RESCUE_SELECTION = "SELECT name FROM t WHERE 0"


def writable(con: Any, value: Any = "probe") -> None:
    """The connection takes writes: query_only is off and an INSERT goes through."""
    assert query_only(con) == 0
    con.execute("INSERT INTO audit VALUES (?)", (value,))


P2_TABLE = """
    CREATE TABLE p2 (name TEXT);
    INSERT INTO p2 VALUES ('a1'), ('a1'), ('a2'), ('a3'), ('a4'), ('a5'), ('a6'), ('a7'), ('a8'), ('a9'), ('a10'),
        ('a11'), ('a12'), ('a13'), ('a14'), ('a15'), ('a16'), ('a17'), ('a18'), ('a19'), ('a20');
"""
P2_SQL = "SELECT DISTINCT name FROM p2"  # 20 rows; without DISTINCT 21 (dup_ratio 0.048): P2 commits
P2_NAMES = {(f"a{i}",) for i in range(1, 21)}


def _p2_db(tmp_path: Path, name: str = "p2.db") -> str:
    path = make_db(tmp_path / name)
    con = sqlite3.connect(path)
    con.executescript(P2_TABLE)
    con.commit()
    con.close()
    return path


def _p2(cur: Any) -> Any:
    found = [d for d in cur.guard_report.decisions if d.rule == "P2"]
    assert found, cur.guard_report.decisions
    return found[0]
