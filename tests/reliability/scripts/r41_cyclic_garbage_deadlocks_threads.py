"""sqlite3 frees a cursor by reference counting, in the thread that drops it. The guard leaves reference
cycles behind on its error path (every failing statement: "database is locked", a typo) and on every
statement a rule looked at (flagged joins, aggregate checks), so those objects wait for Python's cyclic
garbage collector, which runs in whichever thread allocates next. When it finalises a cursor of another
thread's connection, `sqlite3_reset` waits for that connection's mutex, held by a thread sleeping in
SQLite's busy handler for the write lock that the collecting thread holds: threads that write through
their own connections (a web app, diskcache's FanoutCache) stall, spin on "database is locked" and hold
memory. Seen: diskcache's own test_add_concurrent (16 threads, 1,000 adds, timeout 10 ms) hung for more
than 14 minutes at 2 GB under `install(guard="patch")`; raw sqlite3 finishes it in 0.4-0.7 s.

Part 1 (deterministic): cyclic garbage per 100 statements must be 0, as with sqlite3.
Part 2 (when diskcache is installed): that workload, up to 4 tries of at most 20 s each.
Exit 1 with a DEFECT line while either part fails."""

import gc
import os
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time

import guarded_sqlite

bad = []
gc.disable()
d = tempfile.mkdtemp()
path = os.path.join(d, "r41.db")
setup = sqlite3.connect(path, isolation_level=None)
setup.execute("PRAGMA journal_mode=wal")
setup.executescript("CREATE TABLE a(id INTEGER PRIMARY KEY, n TEXT); CREATE TABLE b(id INTEGER PRIMARY KEY, a_id INT);")
setup.executemany("INSERT INTO a VALUES (?, ?)", [(i, f"n{i % 3}") for i in range(10)])
setup.executemany("INSERT INTO b(a_id) VALUES (?)", [(i % 10,) for i in range(50)])
holder = sqlite3.connect(path, isolation_level=None)
cases = [
    ("a failing BEGIN IMMEDIATE (database is locked)", "BEGIN IMMEDIATE", True),
    ("a typo (no such column)", "SELECT nosuch FROM a", False),
    ("a flagged join", "SELECT a.n FROM a JOIN b ON b.a_id = a.id", False),
    ("an aggregate over a join", "SELECT a.n, SUM(b.id) FROM a JOIN b ON b.a_id = a.id GROUP BY a.id", False),
]
for label, connect in (
    ("raw", lambda: sqlite3.connect(path, timeout=0, isolation_level=None)),
    ("guarded", lambda: guarded_sqlite.connect(path, timeout=0, isolation_level=None)),
):
    con = connect()
    for what, sql, locked in cases:
        if locked:
            holder.execute("BEGIN IMMEDIATE")
        gc.collect()
        for _ in range(100):
            try:
                con.execute(sql).fetchall()
            except sqlite3.OperationalError:
                pass
        n = gc.collect()
        if locked:
            holder.execute("ROLLBACK")
        print(f"{label:8s} {what:48s} cyclic garbage per 100 statements: {n}")
        if label == "guarded" and n:
            bad.append(f"{n} cyclic objects per 100 x {what}")
    con.close()
gc.enable()

try:
    import diskcache  # noqa: F401
except ImportError:
    print("part 2 skipped: diskcache is not installed (pip install diskcache)")
else:
    run = textwrap.dedent("""
        import sys, tempfile, threading, time, collections
        if sys.argv[1] != "raw":
            import guarded_sqlite; guarded_sqlite.install(guard=sys.argv[1])
        import diskcache
        def add(cache, results):
            total = 0
            for num in range(1000):
                if cache.add(num, num, retry=True):
                    total += 1; time.sleep(0.001)
            results.append(total)
        with diskcache.FanoutCache(directory=tempfile.mkdtemp(), shards=1) as cache:
            results = collections.deque()
            threads = [threading.Thread(target=add, args=(cache, results)) for _ in range(16)]
            [t.start() for t in threads]; [t.join() for t in threads]
            assert sum(results) == 1000
    """)
    for mode in ("raw", "patch"):
        worst = 0.0
        for _attempt in range(4 if mode == "patch" else 1):
            t = time.time()
            try:
                subprocess.run([sys.executable, "-c", run, mode], timeout=20, check=True, capture_output=True)
                took = time.time() - t
            except subprocess.TimeoutExpired:
                took = float("inf")
            worst = max(worst, took)
        print(f"{mode:8s} diskcache FanoutCache, 16 threads x 1,000 adds: slowest of the tries {worst:.2f} s")
        if mode == "patch" and worst > 5:
            bad.append(f"diskcache's concurrent adds took {worst:.1f} s under the guard (raw: under 1 s)")

print(f"DEFECT: {'; '.join(bad)}" if bad else "held")
sys.exit(1 if bad else 0)
