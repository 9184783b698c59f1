"""What the aggregate fan-out rule costs: a repeated aggregate statement over a join with no risk (the
rule's pre-screen passes, its cached plan says every aggregate is safe) under ``"patch"`` against
``"observe"`` (which never looks), and an at-risk statement's confirmation (the corrected query, run
read-only) as a ratio to the statement's own time. Same process, interleaved rounds, medians.

Issue 24's three targets, as ratios to plain sqlite3: the at-risk statement repeated on unchanged data
under the default preset (its confirmation reused, ``guarded_sqlite._rules.confirmations``) <= 1.3x; its first
execution (nothing kept: the kept confirmations are dropped before each run; the plan stays cached)
<= 3x; c13's paging query (``GROUP BY c.id ORDER BY c.id LIMIT 10`` with a Python function in the sum,
50,000 customers and 300,000 orders, never reused: its confirmation is bounded to the served groups,
``guarded_sqlite._analysis.paging``) <= 3x. Issue 34 adds the shapes where the sum decides the rows
(first execution <= 3x) and a statement new to a warm connection (planning included: what text-to-SQL
pays, since its statements are new). Issue 44 sets the targets printed: the repeated statement <= 1.1x,
its first execution <= 2x, the derived table, c13 and a new statement <= 3x (ranking and HAVING keep 3x).

Issue 44 adds the *text-to-SQL workload*: 100 statement shapes (five heads at risk and five not, each
with ten WHERE predicates) with three literals each, every statement new to a warm connection and run
once, as a pipeline sends them; per class (at risk or not; the first literal of a shape or a later one)
the guarded time per statement and its ratio to raw sqlite3 running the same statements.

    python benchmarks/bench_aggregates.py [--rounds 15] [--batch 300] [--customers 200] [--paging-customers 50000]
        [--workload-rounds 5]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import guarded_sqlite

NO_RISK = (
    "SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id WHERE c.id = ? GROUP BY c.id"
)
AT_RISK = (
    "SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id "
    "JOIN items i ON i.order_id = o.id GROUP BY c.id"
)

# Issue 34: the at-risk sum choosing the rows (the check of every group runs when the corrected query's
# rows differ from the statement's; a subquery is checked on its own, then the statement corrected).
DECIDING = {
    "ranking": AT_RISK + " ORDER BY SUM(o.total) DESC, c.id DESC LIMIT 1",
    "HAVING": AT_RISK + " HAVING SUM(o.total) > 12",
    "derived table": f"SELECT MAX(s) FROM ({AT_RISK.replace('SUM(o.total)', 'SUM(o.total) AS s')})",
}

# Issue 34 item 4: a statement the connection has not seen (text-to-SQL sends new ones): planned, then
# checked. Each call gives it a WHERE bound of its own, so no plan or confirmation is reused.
NEW_STATEMENT = (
    "SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id "
    "JOIN items i ON i.order_id = o.id WHERE c.id > {bound} GROUP BY c.id"
)

PAGING = (
    "SELECT c.id, c.name, SUM(fx(c.points)) FROM customers c JOIN orders o ON o.customer_id = c.id "
    "GROUP BY c.id ORDER BY c.id LIMIT 10"
)


def _fill_paging(con: Any, customers: int) -> None:
    con.executescript(
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, points INTEGER);"
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, total INTEGER);"
        "CREATE INDEX orders_customer ON orders (customer_id);"
    )
    con.executemany("INSERT INTO customers VALUES (?, ?, ?)", [(i, f"c{i}", i % 100) for i in range(1, customers + 1)])
    con.executemany(
        "INSERT INTO orders (customer_id, total) VALUES (?, ?)",
        [(i % customers + 1, i % 997) for i in range(customers * 6)],
    )
    con.commit()
    con.create_function("fx", 1, lambda value: value, deterministic=True)


def _fill(con: Any, customers: int) -> None:
    con.executescript(
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);"
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, total REAL);"
        "CREATE TABLE items (id INTEGER PRIMARY KEY, order_id INTEGER, qty INTEGER);"
    )
    con.executemany("INSERT INTO customers VALUES (?, ?)", [(c, f"c{c}") for c in range(customers)])
    con.executemany(
        "INSERT INTO orders (customer_id, total) VALUES (?, ?)",
        [(c, k * 1.25) for c in range(customers) for k in range(5)],
    )
    con.executemany(
        "INSERT INTO items (order_id, qty) VALUES (?, ?)",
        [(o, q) for o in range(1, customers * 5 + 1) for q in range(3)],
    )
    con.commit()


# Issue 44: the text-to-SQL workload's heads (five at risk: an order's total summed over its items' rows;
# five not: sums at the grain the join keeps, or MAX, which no join inflates) and predicates, over the
# customers/orders/items data of ``_fill``.
_BY_ITEMS = " FROM customers c JOIN orders o ON o.customer_id = c.id JOIN items i ON i.order_id = o.id"
_BY_ORDERS = " FROM customers c JOIN orders o ON o.customer_id = c.id"
WORKLOAD_HEADS = {
    "at risk": (
        "SELECT c.name, SUM(o.total)" + _BY_ITEMS + " WHERE {p} GROUP BY c.id",
        "SELECT c.id, AVG(o.total)" + _BY_ITEMS + " WHERE {p} GROUP BY c.id",
        "SELECT c.name, SUM(o.total), COUNT(*)" + _BY_ITEMS + " WHERE {p} GROUP BY c.name",
        "SELECT c.id, TOTAL(o.total)" + _BY_ITEMS + " WHERE {p} GROUP BY c.id ORDER BY 2 DESC LIMIT 5",
        "SELECT SUM(o.total)" + _BY_ITEMS + " WHERE {p}",
    ),
    "not at risk": (
        "SELECT c.name, SUM(o.total)" + _BY_ORDERS + " WHERE {p} GROUP BY c.id",
        "SELECT c.id, SUM(i.qty)" + _BY_ITEMS + " WHERE {p} GROUP BY c.id",
        "SELECT c.name, AVG(o.total)" + _BY_ORDERS + " WHERE {p} GROUP BY c.name",
        "SELECT c.id, MAX(o.total), COUNT(*)" + _BY_ITEMS + " WHERE {p} GROUP BY c.id",
        "SELECT SUM(i.qty * o.total)" + _BY_ITEMS + " WHERE {p}",
    ),
}
WORKLOAD_PREDICATES = (
    "c.id > {n}",
    "c.id < {m}",
    "o.total > {d}",
    "c.name <> 'c{n}'",
    "o.id % 7 = {k}",
    "c.id BETWEEN {n} AND {m}",
    "c.id IN ({n}, {m}, {k})",
    "o.total >= {d} AND c.id < {m}",
    "c.name LIKE 'c{k}%'",
    "o.customer_id <> {k}",
)
WORKLOAD_LITERALS = (
    {"n": 3, "m": 250, "k": 1, "d": "2.5"},
    {"n": 40, "m": 120, "k": 4, "d": "1.25"},
    {"n": 7, "m": 290, "k": 6, "d": "3.75"},
)


def workload_statements() -> list[tuple[str, bool, str]]:
    """(class, first literal of its shape, SQL) for the 300 statements, shapes interleaved as a
    pipeline's questions come: every shape's first literal, then every shape's second, then third."""
    shapes = [
        (kind, head.replace("{p}", predicate))
        for kind, heads in WORKLOAD_HEADS.items()
        for head in heads
        for predicate in WORKLOAD_PREDICATES
    ]
    return [
        (kind, turn == 0, shape.format(**literals))
        for turn, literals in enumerate(WORKLOAD_LITERALS)
        for kind, shape in shapes
    ]


def text_to_sql_workload(rounds: int, customers: int = 300) -> dict[tuple[str, bool], tuple[float, float]]:
    """Per (class, first of its shape): the median over ``rounds`` of the mean time per statement on a
    warm connection that has never seen any of them, raw and guarded (ns)."""
    statements = workload_statements()
    samples: dict[tuple[str, bool], tuple[list[float], list[float]]] = {}
    for _ in range(rounds):
        for name in ("raw", "patch"):
            con = sqlite3.connect(":memory:") if name == "raw" else guarded_sqlite.connect(":memory:")
            _fill(con, customers)
            con.execute(AT_RISK).fetchall()  # warm: the rule loaded, the catalog read once
            totals: dict[tuple[str, bool], list[int]] = {}
            for kind, first, sql in statements:
                started = time.perf_counter_ns()
                con.execute(sql).fetchall()
                totals.setdefault((kind, first), []).append(time.perf_counter_ns() - started)
            for key, times in totals.items():
                samples.setdefault(key, ([], []))[name == "patch"].append(sum(times) / len(times))
            con.close()
    return {key: (statistics.median(raw), statistics.median(guarded)) for key, (raw, guarded) in samples.items()}


def _timed(run: Callable[[], Any], batch: int) -> float:
    started = time.perf_counter_ns()
    for _ in range(batch):
        run()
    return (time.perf_counter_ns() - started) / batch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batch", type=int, default=300)
    parser.add_argument("--customers", type=int, default=200)
    parser.add_argument("--paging-customers", type=int, default=50_000)
    parser.add_argument("--workload-rounds", type=int, default=5)
    args = parser.parse_args(argv)
    cons = {}
    for name in ("raw", "observe", "patch", "text_to_sql"):
        con = sqlite3.connect(":memory:") if name == "raw" else guarded_sqlite.connect(":memory:", guard=name)
        _fill(con, args.customers)
        cons[name] = con
    report = cons["patch"].execute(AT_RISK).guard_report
    assert report is not None and report.trigger == "aggregate_fanout", report
    assert cons["patch"].execute(NO_RISK, (3,)).guard_report.trigger is None

    def no_risk(con: Any) -> Callable[[], Any]:
        return lambda: con.execute(NO_RISK, (7,)).fetchall()

    def at_risk(con: Any) -> Callable[[], Any]:
        return lambda: con.execute(AT_RISK).fetchall()

    def at_risk_sql(con: Any, sql: str) -> Callable[[], Any]:
        return lambda: con.execute(sql).fetchall()

    workloads = {
        f"no-risk aggregate, {name}": (no_risk(cons[name]), args.batch) for name in ("raw", "observe", "patch")
    }
    workloads.update({f"at-risk aggregate, {name}": (at_risk(cons[name]), max(1, args.batch // 30)) for name in cons})
    kept = cons["patch"]._self_guard.confirmations

    def first_execution() -> Any:
        kept.clear()
        return cons["patch"].execute(AT_RISK).fetchall()

    workloads["at-risk aggregate, patch, first execution"] = (first_execution, max(1, args.batch // 30))

    def deciding_first(sql: str) -> Callable[[], Any]:
        def run() -> Any:
            for key in [key for key in kept if key[0] == sql]:  # its own only: the others measure reuse
                del kept[key]
            return cons["patch"].execute(sql).fetchall()

        return run

    for shape, sql in DECIDING.items():
        report = cons["patch"].execute(sql).guard_report
        assert report is not None and report.trigger == "aggregate_fanout", (shape, report)
        workloads[f"{shape}, raw"] = (at_risk_sql(cons["raw"], sql), max(1, args.batch // 30))
        workloads[f"{shape}, patch, first execution"] = (deciding_first(sql), max(1, args.batch // 30))
        workloads[f"{shape}, patch, repeated"] = (at_risk_sql(cons["patch"], sql), max(1, args.batch // 30))
    fresh = {}
    for name in ("raw", "patch"):
        con = sqlite3.connect(":memory:") if name == "raw" else guarded_sqlite.connect(":memory:")
        _fill(con, 300)  # 300 customers, 1,500 orders, 4,500 items: the measurement
        fresh[name] = con
    report = fresh["patch"].execute(NEW_STATEMENT.format(bound=-1)).guard_report
    assert report is not None and report.trigger == "aggregate_fanout", report

    def new_statement(con: Any) -> Callable[[], Any]:
        bounds = iter(range(-2, -(10**9), -1))
        return lambda: con.execute(NEW_STATEMENT.format(bound=next(bounds))).fetchall()

    for name, con in fresh.items():
        workloads[f"new statement, {name}"] = (new_statement(con), max(1, args.batch // 30))
    paging = {}
    for name in ("raw", "patch"):
        con = sqlite3.connect(":memory:") if name == "raw" else guarded_sqlite.connect(":memory:")
        _fill_paging(con, args.paging_customers)
        paging[name] = con
    report = paging["patch"].execute(PAGING).guard_report
    assert report is not None and report.trigger == "aggregate_fanout", report
    for name, con in paging.items():
        workloads[f"paging (c13), {name}"] = (at_risk_sql(con, PAGING), args.batch)
    samples: dict[str, list[float]] = {name: [] for name in workloads}
    for run, batch in workloads.values():
        _timed(run, batch)
    for _ in range(args.rounds):
        for name, (run, batch) in workloads.items():
            samples[name].append(_timed(run, batch))
    median = {name: statistics.median(values) for name, values in samples.items()}
    print(f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, {args.rounds} rounds")
    print("| workload | median µs | vs raw |")
    print("|---|---:|---:|")
    for name, value in median.items():
        shape = name.split(",")[0]
        base = median[
            "no-risk aggregate, raw"
            if name.startswith("no-risk")
            else "paging (c13), raw"
            if name.startswith("paging")
            else "new statement, raw"
            if name.startswith("new statement")
            else f"{shape}, raw"
            if shape in DECIDING
            else "at-risk aggregate, raw"
        ]
        print(f"| {name} | {value / 1000:.1f} | {value / base:.2f}× |")
    extra = median["no-risk aggregate, patch"] - median["no-risk aggregate, observe"]
    print(f"no-risk aggregate: patch - observe = {extra / 1000:+.1f} µs per statement (target <= +5 µs)")
    own = median["at-risk aggregate, observe"]
    for name in ("patch", "text_to_sql"):
        ratio = median[f"at-risk aggregate, {name}"] / own
        print(f"at-risk aggregate, {name}: {ratio:.2f}× the statement's own time under observe (confirmation included)")
    raw = median["at-risk aggregate, raw"]
    # Issue 44's targets (the repeated statement 1.1x, its first execution 2x, the derived table, c13 and a
    # new statement 3x); ranking and HAVING keep issue 34's 3x.
    targets = (
        ("repeated at-risk statement, unchanged data, patch", median["at-risk aggregate, patch"] / raw, 1.1),
        (
            "first execution of the at-risk statement, patch",
            median["at-risk aggregate, patch, first execution"] / raw,
            2.0,
        ),
        ("c13's paging query, patch", median["paging (c13), patch"] / median["paging (c13), raw"], 3.0),
        (
            "a new statement on a warm connection, patch",
            median["new statement, patch"] / median["new statement, raw"],
            3.0,
        ),
    )
    targets += tuple(
        (f"{shape}, first execution, patch", median[f"{shape}, patch, first execution"] / median[f"{shape}, raw"], 3.0)
        for shape in DECIDING
    )
    for label, ratio, target in targets:
        print(f"target: {label}: {ratio:.2f}× raw (target <= {target:g}×){'' if ratio <= target else '  MISSED'}")
    if args.workload_rounds:
        workload = text_to_sql_workload(args.workload_rounds)
        print()
        print(
            f"text-to-SQL workload: 100 shapes x 3 literals, each statement new to the connection, run once "
            f"({args.workload_rounds} rounds, medians of the mean per statement)"
        )
        print("| statements | raw ms | guarded ms | vs raw |")
        print("|---|---:|---:|---:|")
        for kind in WORKLOAD_HEADS:
            for first in (True, False):
                raw_ns, guarded_ns = workload[(kind, first)]
                label = f"{kind}, {'first literal of its shape' if first else 'a shape seen with other literals'}"
                print(f"| {label} | {raw_ns / 1e6:.3f} | {guarded_ns / 1e6:.3f} | {guarded_ns / raw_ns:.2f}× |")
        for kind in WORKLOAD_HEADS:
            raw_ns = (workload[(kind, True)][0] + 2 * workload[(kind, False)][0]) / 3
            guarded_ns = (workload[(kind, True)][1] + 2 * workload[(kind, False)][1]) / 3
            print(f"| {kind}, all 150 | {raw_ns / 1e6:.3f} | {guarded_ns / 1e6:.3f} | {guarded_ns / raw_ns:.2f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
