"""What the join-copy check costs on a flagged statement, as ratios to the statement's own time.

A fanned-out join ``SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id`` (names repeat
across customers, so P1 under ``"patch"`` must run the check and remove only the copies) is timed, in
one process and on one connection, raw (``sqlite3``), under ``"paper"`` (DISTINCT from the fetched
rows, nothing re-executed) and under ``"patch"`` (the check: the statement again with ``c``'s row id,
then the count). Samples rotate the three and the ratios are medians of per-repetition ratios; the
report says what each preset served. The statement projecting the key as well (``identified``: no
check needed) is timed too, as the case that pays nothing for the check.

    .venv/bin/python benchmarks/bench_copies.py [--customers N] [--orders-per-customer K] [--repeat R]
"""

from __future__ import annotations

import argparse
import gc
import platform
import sqlite3
import statistics
import time
from typing import Any

import guarded_sqlite

NAMES = "SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id"
KEYED = "SELECT c.id, c.name FROM customers c JOIN orders o ON o.customer_id = c.id"


def build(raw: sqlite3.Connection, customers: int, per_customer: int) -> None:
    raw.executescript(
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);"
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER);"
    )
    raw.executemany(
        "INSERT INTO customers VALUES (?, ?)", ((i, f"name{i % (customers // 2 or 1)}") for i in range(customers))
    )
    raw.executemany(
        "INSERT INTO orders(customer_id) VALUES (?)", ((c,) for c in range(customers) for _ in range(per_customer))
    )
    raw.commit()


def timed(con: Any, sql: str) -> tuple[int, Any, int]:
    gc.collect()
    time.sleep(0.001)
    started = time.perf_counter_ns()
    cur = con.cursor()
    cur.execute(sql)
    rows = cur.fetchall()
    elapsed = time.perf_counter_ns() - started
    return elapsed, getattr(cur, "guard_report", None), len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--customers", type=int, default=2_000)
    parser.add_argument("--orders-per-customer", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    raw = sqlite3.connect(":memory:")
    build(raw, args.customers, args.orders_per_customer)
    connections = {
        "raw": raw,
        "paper": guarded_sqlite.wrap(raw, guard="paper"),
        "patch": guarded_sqlite.wrap(raw, guard="patch"),
    }
    print(
        f"# Join-copy check cost ({platform.processor() or platform.machine()}, Python {platform.python_version()},"
        f" SQLite {sqlite3.sqlite_version})\n"
    )
    print(
        f"{args.customers:,} customers (each name shared by two), {args.orders_per_customer} orders each; "
        f"median of {args.repeat} rotated repetitions, ratio = median of per-repetition ratios to raw.\n"
    )
    print("| statement | preset | median | ratio to raw | served rows | action | P1 copies |")
    print("|---|---|---:|---:|---:|---|---:|")
    for label, sql in (("names (check runs)", NAMES), ("id, name (identified: no check)", KEYED)):
        for con in connections.values():  # warm: sqlglot import, catalog read, statement caches
            timed(con, sql)
        samples: dict[str, list[int]] = {name: [] for name in connections}
        facts: dict[str, tuple[Any, int]] = {}
        order = list(connections)
        for repetition in range(args.repeat):
            rotation = order[repetition % 3 :] + order[: repetition % 3]
            for name in reversed(rotation) if repetition % 2 else rotation:
                elapsed, report, served = timed(connections[name], sql)
                samples[name].append(elapsed)
                facts[name] = (report, served)
        for name in connections:
            ratios = [g / r for g, r in zip(samples[name], samples["raw"])]
            report, served = facts[name]
            action = "-" if report is None else report.action
            copies = "-" if report is None or not report.decisions else report.decisions[0].copies
            print(
                f"| {label} | {name} | {statistics.median(samples[name]) / 1e6:.2f} ms "
                f"| {statistics.median(ratios):.2f} | {served:,} | {action} | {copies} |"
            )


if __name__ == "__main__":
    main()
