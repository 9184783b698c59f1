"""Re-execution safety (issue 9), threads: shared connections never deadlock and lose nothing.

Each repro in ../shared/repros/reliability/ named here is a test; the design under test is in
tests/reliability/shared.py's docstring.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability_helpers import (
    EXPLODE,
    run_child,
)

# --- 5. shared connections never deadlock (each run in a child with a hard timeout) ---------------

_THREADS_CHILD = """
con = guarded_sqlite.connect(":memory:", check_same_thread=False, isolation_level=None{policy})
setup(con, 50, 10)
con.execute("CREATE TABLE b (data BLOB)"); con.execute("INSERT INTO b VALUES (zeroblob(16))")
stop = threading.Event(); reads = [0]; wrong = [0]
def reader():
    while not stop.is_set():
        rows = con.execute({read_sql!r}).fetchall()
        reads[0] += 1
        if len(set(rows)) != 50: wrong[0] += 1
th = threading.Thread(target=reader, daemon=True); th.start()
failures = []; n = 0; end = time.monotonic() + {seconds}
while time.monotonic() < end:
    n += 1
    try:
        {writer}
    except Exception as e:  # CPython raises SystemError when blobopen meets a read-only window
        failures.append("%s: %s" % (type(e).__name__, e))
stop.set(); th.join(10)
report(writes=n, failures=len(failures), first=failures[:1], reads=reads[0], wrong=wrong[0], alive=th.is_alive())
"""

_BLOB_WRITE = """with con.blobopen("b", "data", 1) as blob:
            blob.write(n.to_bytes(16, "little"))"""


@pytest.mark.parametrize(
    ("label", "policy", "read_sql", "writer"),
    [
        ("r06 blob writes vs P1", "", EXPLODE, _BLOB_WRITE),
        ("r06 blob writes vs P2 on :memory:", "", "SELECT DISTINCT name FROM t", _BLOB_WRITE),
        (
            "r37 second proxy writes vs P1",
            "",
            EXPLODE,
            'other.execute("INSERT INTO audit VALUES (?)", (n,))',
        ),
    ],
    ids=["r06-blob-vs-P1", "r06-blob-vs-P2-memory", "r37-second-proxy-vs-P1"],
)
def test_r06_r37_shared_connection_threads_never_deadlock(label: str, policy: str, read_sql: str, writer: str) -> None:
    """r06/r37: one check_same_thread=False connection, a thread doing patched reads and the main thread
    writing through blobopen() or through a second proxy (wrap(con, guard=...)): no deadlock (the child
    is killed after 30 s and its stacks dumped), every read correct; with P1 (nothing re-run) every
    write succeeds, as with plain sqlite3."""
    code = _THREADS_CHILD.format(policy=policy, read_sql=read_sql, writer=writer, seconds=1.5)
    code = code.replace(
        "setup(con, 50, 10)", "setup(con, 50, 10)\nother = guarded_sqlite.wrap(con, guard=GuardPolicy(tau_inject=0.95))"
    )
    result = run_child(code, timeout=30)
    assert not result["alive"] and result["wrong"] == 0 and result["reads"] > 0 and result["writes"] > 100, result
    if read_sql == EXPLODE:
        assert result["failures"] == 0, result["first"]


def test_r38_streaming_past_row_cap_while_another_thread_patches_never_deadlocks() -> None:
    """r38: the main thread iterates results that stream past row_cap (fetches outside the guard's
    lock) while another thread runs patched reads on the same connection: no deadlock, every row
    streamed, in order."""
    code = """
    con = guarded_sqlite.connect(":memory:", check_same_thread=False, guard=GuardPolicy(row_cap=1000))
    setup(con, 50, 10)
    stop = threading.Event(); wrong = [0]; reads = [0]
    def reader():
        while not stop.is_set():
            rows = con.execute(EXPLODE).fetchall(); reads[0] += 1
            if len(rows) != 50: wrong[0] += 1
    th = threading.Thread(target=reader, daemon=True); th.start()
    BIG = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 20000) SELECT i, 'row' FROM n"
    ordered = True; total = 0; end = time.monotonic() + 1.5
    while time.monotonic() < end:
        got = [r[0] for r in con.cursor().execute(BIG)]
        ordered &= got == list(range(1, 20001)); total += 1
    stop.set(); th.join(10)
    report(total=total, ordered=ordered, wrong=wrong[0], reads=reads[0], alive=th.is_alive())
    """
    result = run_child(code, timeout=30)
    assert result["ordered"] and result["total"] > 0 and result["wrong"] == 0 and not result["alive"], result


def test_r07_threads_mixed_reads_and_writes_lose_nothing(tmp_path: Path) -> None:
    """r07: 4 threads of patched reads, 4 writing through execute/executemany/cursor().execute and one
    committing, on one shared connection: no lost write, no error, no wrong read (as sqlite3)."""
    code = f"""
    import random
    path = make_db({str(tmp_path / "r07.db")!r}, 30, 10)
    con = guarded_sqlite.connect(path, check_same_thread=False)
    con.execute("CREATE TABLE w (k INTEGER PRIMARY KEY, v)"); con.commit()
    expected = sorted(("name%d" % i,) for i in range(1, 31))
    errors, wrong, written = [], [0], []
    lock = threading.Lock()
    def reader(seed):
        rnd = random.Random(seed)
        for _ in range(60):
            try:
                q = rnd.choice([EXPLODE, "SELECT DISTINCT t.name FROM t JOIN u ON u.t_id = t.id"])
                if sorted(set(con.execute(q).fetchall())) != expected: wrong[0] += 1
            except Exception as e: errors.append(("read", repr(e)))
    def writer(base):
        for i in range(60):
            k = base + i
            try:
                kind = i % 3
                if kind == 0: con.execute("INSERT INTO w VALUES (?, ?)", (k, "x"))
                elif kind == 1: con.executemany("INSERT INTO w VALUES (?, ?)", [(k, "y")])
                else: con.cursor().execute("INSERT INTO w VALUES (%d, 'z')" % k)
                with lock: written.append(k)
            except Exception as e: errors.append(("write", repr(e)))
    def committer():
        for _ in range(40):
            try: con.commit()
            except Exception as e: errors.append(("commit", repr(e)))
    ths = [threading.Thread(target=reader, args=(s,)) for s in range(4)] + \\
          [threading.Thread(target=writer, args=(b * 100000,)) for b in range(1, 5)] + \\
          [threading.Thread(target=committer)]
    [t.start() for t in ths]; [t.join(20) for t in ths]
    con.commit()
    stored = {{r[0] for r in sqlite3.connect(path).execute("SELECT k FROM w")}}
    report(written=len(written), lost=len(set(written) - stored), errors=errors[:3], wrong=wrong[0],
           alive=any(t.is_alive() for t in ths))
    """
    result = run_child(code, timeout=40)
    assert result == {**result, "written": 240, "lost": 0, "errors": [], "wrong": 0, "alive": False}
