"""The cost of running an agent tool's statements in a worker process (``guarded_sqlite.agent.isolation``).

``GuardedDatabase.open`` runs the database in a child process by default (``isolated=True``), so that a
statement past the time limit can be stopped even inside one SQLite function call. This measures what
that costs per call against the same tool in process (``isolated=False``), on the demo shop, same
process, calls interleaved: the median of per-pair ratios and the median extra time per call, for

1. a 1-row query (``SELECT count(*) FROM orders``);
2. 30 rows the guard flags (a join fan-out, feedback on);
3. the aggregate fan-out the guard corrects (``text_to_sql``: a corrected query runs);
4. a 200-row result (``max_rows``' default);

plus the time to open (start the worker and open the file) and the time to replace a killed worker.
Run from the repository root: ``.venv/bin/python benchmarks/bench_isolation.py [--quick]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from guarded_sqlite.agent import GuardedDatabase  # noqa: E402  (found through the sys.path entry above)
from guarded_sqlite.cli.demo import build_shop  # noqa: E402

WORKLOADS = {
    "1 row": "SELECT count(*) FROM orders",
    "30 rows, fan-out flagged": "SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id",
    "aggregate corrected": (
        "SELECT c.name, SUM(c.points) FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.name"
    ),
    "200 rows": "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 200) SELECT i, 'x' || i FROM n",
}


def timed(db: GuardedDatabase, sql: str) -> float:
    started = time.perf_counter()
    db.query(sql)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer pairs (a smoke run)")
    args = parser.parse_args()
    pairs = 30 if args.quick else 300
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "shop.db"
        build_shop(path)
        started = time.perf_counter()
        isolated = GuardedDatabase.open(path)
        opened = time.perf_counter() - started
        local = GuardedDatabase.open(path, isolated=False)
        print(f"{pairs} interleaved pairs per workload; open with a worker: {opened * 1000:.0f} ms\n")
        print("| workload | in process | worker | ratio | extra per call |")
        print("|---|---|---|---|---|")
        for name, sql in WORKLOADS.items():
            timed(isolated, sql), timed(local, sql)  # warm both
            ratios, extra, here, there = [], [], [], []
            for _ in range(pairs):
                far, near = timed(isolated, sql), timed(local, sql)
                ratios.append(far / near)
                extra.append(far - near)
                here.append(near)
                there.append(far)
            print(
                f"| {name} | {statistics.median(here) * 1e3:.2f} ms | {statistics.median(there) * 1e3:.2f} ms | "
                f"{statistics.median(ratios):.2f}x | {statistics.median(extra) * 1e3:.2f} ms |"
            )
        restarts = []
        worker = isolated._worker  # replaced below the way a timeout does
        for _ in range(3 if args.quick else 10):
            started = time.perf_counter()
            with isolated._lock:
                isolated._restart()
            isolated.query("SELECT 1")
            restarts.append(time.perf_counter() - started)
        assert isolated._worker is not worker
        print(f"\nreplacing a killed worker, until its first answer: median {statistics.median(restarts) * 1e3:.0f} ms")
        isolated.close()
        local.close()


if __name__ == "__main__":
    main()
