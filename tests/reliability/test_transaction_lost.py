"""Re-execution safety (issue 9), transactions: one the engine rolls back during a guard statement raises
``TransactionLost``.

Each repro in ../shared/repros/reliability/ named here is a test; the design under test is in
tests/reliability/shared.py's docstring.
"""

from __future__ import annotations

from pathlib import Path

from tests.reliability_helpers import (
    run_child,
)

# --- 3. a transaction the engine rolls back during a guard statement raises TransactionLost --------

_LOST_CHILD = """
path = make_db({path!r})
con = guarded_sqlite.connect(path, guard=GuardPolicy(rescue=DupRatioSelector()))
{prepare}
con.execute("INSERT INTO audit VALUES ('precious uncommitted row')")
BIG = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 400000) "
       "SELECT DISTINCT printf('%.100d', i) FROM n, t WHERE t.id = 1")
lost_class = getattr(guarded_sqlite, "TransactionLost", None)
res = dict(exported=lost_class is not None and getattr(guarded_sqlite.errors, "TransactionLost", None) is lost_class)
# plain sqlite3 under the same fault: the statement fails and SQLite ends the transaction
raw = sqlite3.connect(make_db(path + "-raw.db"))
{prepare_raw}
raw.execute("INSERT INTO audit VALUES (1)")
try:
    raw.execute(BIG).fetchall(); res["raw"] = "ok"
except BaseException as e:
    res["raw"] = type(e).__name__
res["raw_in_tx"] = raw.in_transaction
{arm}
try:
    cur = con.execute("SELECT name FROM t WHERE 0", candidates=[BIG, "SELECT name FROM t"])
    res["outcome"] = "returned %d rows, action %s" % (len(cur.fetchall()), cur.guard_report.action)
except BaseException as e:
    res["outcome"] = type(e).__name__
    res["lost"] = lost_class is not None and isinstance(e, lost_class)
    res["operational"] = isinstance(e, sqlite3.OperationalError)
    res["cause"] = type(e.__cause__).__name__ if e.__cause__ is not None else None
{disarm}
res["in_tx"] = con.in_transaction
res["query_only"] = query_only(con)
con.execute("INSERT INTO audit VALUES ('after')"); con.commit()
res["audit"] = [r[0] for r in sqlite3.connect(path).execute("SELECT x FROM audit")]
report(**res)
"""


def test_r02_nomem_in_a_rescue_candidate_raises_transaction_lost(tmp_path: Path) -> None:
    """r02: a rescue candidate failing with SQLITE_NOMEM (hard_heap_limit) inside the caller's open
    transaction makes SQLite roll it back: execute() raises guarded_sqlite.TransactionLost (an
    OperationalError, the MemoryError as its __cause__) instead of serving rows as if nothing happened."""
    result = run_child(
        _LOST_CHILD.format(
            path=str(tmp_path / "nomem.db"),
            prepare='con.execute("PRAGMA temp_store = MEMORY")',
            prepare_raw='raw.execute("PRAGMA temp_store = MEMORY"); raw.execute("PRAGMA hard_heap_limit = 20000000")',
            arm='con.execute("PRAGMA hard_heap_limit = 20000000")',
            disarm='con.execute("PRAGMA hard_heap_limit = 0")',
        ),
        timeout=60,
    )
    assert (result["raw"], result["raw_in_tx"]) == ("MemoryError", False), result  # the fault is real
    assert result["exported"], "guarded_sqlite.TransactionLost (from guarded_sqlite.errors) is missing"
    assert result.get("lost") and result["operational"], result
    assert result["cause"] == "MemoryError"
    assert result["in_tx"] is False and result["query_only"] == 0
    assert result["audit"] == ["after"]  # the lost write is really gone; the connection still writes


def test_r02b_disk_full_in_a_rescue_candidate_raises_transaction_lost(tmp_path: Path) -> None:
    """r02b: a rescue candidate whose temp b-tree cannot be written (file size limit: SQLite reports an
    I/O error, as it reports SQLITE_FULL for a full SQLITE_TMPDIR) rolls back the caller's transaction:
    execute() raises TransactionLost with the OperationalError as its __cause__."""
    arm = (
        "import resource; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4_000_000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))"
    )
    result = run_child(
        _LOST_CHILD.format(
            path=str(tmp_path / "full.db"),
            prepare='con.execute("PRAGMA temp_store = FILE"); con.execute("PRAGMA cache_size = -200")',
            prepare_raw=('raw.execute("PRAGMA temp_store = FILE"); raw.execute("PRAGMA cache_size = -200"); ' + arm),
            arm="",
            disarm="",
        ),
        timeout=60,
    )
    assert (result["raw"], result["raw_in_tx"]) == ("OperationalError", False), result
    assert result["exported"]
    assert result.get("lost") and result["operational"], result
    assert result["cause"] == "OperationalError"
    assert result["in_tx"] is False and result["query_only"] == 0
    assert result["audit"] == ["after"]
