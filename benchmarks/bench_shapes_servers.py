"""Planning a statement new in its literals on PostgreSQL and MariaDB (issue 44 item 2): a warm guarded
connection runs each of five aggregate shapes once, then 50 statements new to it only in their literals
(ten per shape, in turn), under ``guard="text_to_sql"``; reported: the time in the rule's plan function
(``plan_cache.plan``) and in the whole ``execute`` + ``fetchall``, the same 50 statements raw, and the plan
time of each shape's first statement. Throwaway servers from ``tests/pg_server.py`` and
``tests/mariadb_server.py`` (skipped, with a message, where the binaries are missing).

Before/after: ``--before PATH`` runs another checkout's ``guarded_sqlite`` (e.g. ``git archive <commit>
guarded_sqlite | tar -x -C PATH``) in a child process alternately with this checkout's, on the same
servers, each in a schema or database of its own. Run from the repository root:

    .venv/bin/python benchmarks/bench_shapes_servers.py [--pairs 3] [--before PATH] [--engine postgres|mysql]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

SCHEMA = [
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name VARCHAR(20), region VARCHAR(5))",
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, total DECIMAL(10,2), status VARCHAR(5))",
    "CREATE TABLE items (id INTEGER PRIMARY KEY, order_id INTEGER, qty INTEGER)",
]
AT_RISK = (
    "SELECT c.id, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id JOIN items i ON i.order_id = o.id"
)
SHAPES = [
    AT_RISK + " WHERE c.id > {i} AND o.status = '{s}' GROUP BY c.id ORDER BY c.id",
    AT_RISK + " WHERE o.total < {d} GROUP BY c.id HAVING SUM(o.total) > {i} ORDER BY c.id",
    "SELECT c.region, AVG(o.total), SUM(i.qty) FROM customers c JOIN orders o ON o.customer_id = c.id "
    "JOIN items i ON i.order_id = o.id WHERE c.region <> '{s}' AND c.id BETWEEN {i} AND {j} GROUP BY c.region "
    "ORDER BY 1",
    "SELECT c.id, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id WHERE c.id >= {i} "
    "GROUP BY c.id ORDER BY c.id",
    "SELECT MAX(s) FROM (SELECT c.id, SUM(o.total) AS s FROM customers c JOIN orders o ON o.customer_id = c.id "
    "JOIN items i ON i.order_id = o.id WHERE c.id > {i} AND o.status <> '{s}' GROUP BY c.id) AS t",
]


def _literals(k: int) -> dict[str, Any]:
    return {"i": k // 5 % 8, "j": 9 + k // 5, "d": f"{2 + k // 5}.25", "s": f"x{k}"}


def _connect(engine: str, servers: dict[str, Any]) -> Any:
    """A new schema (PostgreSQL) or database (MariaDB) with the tables filled; its raw connection."""
    name = "b_" + uuid.uuid4().hex[:8]
    if engine == "postgres":
        import psycopg

        with psycopg.connect(servers["postgres"], autocommit=True) as admin:
            admin.execute(f"CREATE SCHEMA {name}")
        raw = psycopg.connect(servers["postgres"], autocommit=True, options=f"-c search_path={name}")
    else:
        import pymysql

        admin = pymysql.connect(**servers["mysql"], autocommit=True)
        admin.cursor().execute(f"CREATE DATABASE {name}")
        admin.close()
        raw = pymysql.connect(**servers["mysql"], database=name, autocommit=True)
    cur = raw.cursor()
    for statement in SCHEMA:
        cur.execute(statement)
    customers = [(c, f"c{c % 7}", "nsew"[c % 4]) for c in range(1, 13)]
    cur.executemany("INSERT INTO customers VALUES (%s, %s, %s)", customers)
    cur.executemany(
        "INSERT INTO orders VALUES (%s, %s, %s, %s)",
        [(o, o % 12 + 1, (o % 9) * 1.25 - 2, "ab"[o % 2]) for o in range(1, 41)],
    )
    cur.executemany("INSERT INTO items VALUES (%s, %s, %s)", [(i, i % 43 + 1, i % 5) for i in range(1, 101)])
    return raw


def measure(engine: str, servers: dict[str, Any], statements: int) -> dict[str, float]:
    """One run on a new connection: ms in ``plan_cache.plan`` and in ``execute`` + ``fetchall``."""
    import guarded_sqlite
    from guarded_sqlite._guard import aggregate_check

    raw = _connect(engine, servers)
    con = guarded_sqlite.wrap(raw, guard="text_to_sql", dialect=engine)

    def run(connection: Any, sql: str) -> None:
        cur = connection.cursor()
        cur.execute(sql)
        cur.fetchall()

    run(con, "SELECT c.id, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.id")
    real = aggregate_check._AGGREGATE_RULE[0]  # filled by the first check
    spent: list[float] = []

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)

    aggregate_check._AGGREGATE_RULE[0] = timed
    for shape in SHAPES:
        run(con, shape.format(i=1, j=9, d="3.5", s="z"))
    first = sum(spent)
    spent.clear()
    texts = [SHAPES[k % len(SHAPES)].format(**_literals(k)) for k in range(statements)]
    totals = []
    for sql in texts:
        start = time.perf_counter()
        run(con, sql)
        totals.append(time.perf_counter() - start)
    aggregate_check._AGGREGATE_RULE[0] = real
    raws = []
    for sql in texts:
        start = time.perf_counter()
        run(raw, sql)
        raws.append(time.perf_counter() - start)
    raw.close()
    return {
        "plan": sum(spent) * 1e3,
        "plan_median": statistics.median(spent) * 1e3,
        "execute": sum(totals) * 1e3,
        "raw": sum(raws) * 1e3,
        "first": first * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--statements", type=int, default=50)
    parser.add_argument("--before", help="a folder holding another checkout's guarded_sqlite")
    parser.add_argument("--engine", action="append", choices=["postgres", "mysql"])
    parser.add_argument("--child", help=argparse.SUPPRESS)  # engine:servers JSON, run one measurement
    args = parser.parse_args()
    if args.child:
        engine, servers = args.child.split(":", 1)
        print(json.dumps(measure(engine, json.loads(servers), args.statements)))
        return
    sys.path.insert(0, str(ROOT / "tests"))
    from mariadb_server import mariadb_server
    from mariadb_server import server_binaries as maria_binaries
    from pg_server import postgres_server
    from pg_server import server_binaries as pg_binaries

    engines = args.engine or ["postgres", "mysql"]
    with ExitStack() as stack:
        servers: dict[str, Any] = {}
        if "postgres" in engines:
            if pg_binaries() is None:
                print("PostgreSQL server binaries not found: skipping PostgreSQL", file=sys.stderr)
            else:
                servers["postgres"] = stack.enter_context(postgres_server())
        if "mysql" in engines:
            if maria_binaries() is None:
                print("MariaDB server binary (mariadbd) not found: skipping MariaDB", file=sys.stderr)
            else:
                servers["mysql"] = stack.enter_context(mariadb_server())
        checkouts = [("before", args.before), ("this", str(ROOT))] if args.before else [("this", str(ROOT))]
        print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
        for pair in range(1, args.pairs + 1):
            for engine in servers:
                for label, path in checkouts:
                    child = [sys.executable, __file__, "--statements", str(args.statements)]
                    child += ["--child", f"{engine}:{json.dumps(servers, default=str)}"]
                    out = subprocess.run(
                        child, env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, check=True
                    )
                    r = json.loads(out.stdout)
                    print(
                        f"pair {pair} {engine:8} {label:6}: plan {r['plan']:6.1f} ms (median {r['plan_median']:.2f})"
                        f"  execute {r['execute']:6.1f} ms  raw {r['raw']:5.1f} ms  first of each shape"
                        f" {r['first']:5.1f} ms  ({args.statements} statements, {len(SHAPES)} shapes)"
                    )
        print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


if __name__ == "__main__":
    main()
