#!/usr/bin/env python
"""What the duplicate-provenance presets add per statement, against ``guard="paper"`` (today's rules).

Run from the repository root:

    .venv/bin/python benchmarks/bench_provenance.py            # about 20 s
    .venv/bin/python benchmarks/bench_provenance.py --quick    # about 5 s

Workloads (SQLite, in memory; a join of customers and orders, 200 result rows, ``execute`` + ``fetchall``):

* ``10% dup``: 200 rows, 180 distinct (dup_ratio 0.10). Below every acting threshold of ``patch`` and
  ``text_to_sql``, so neither parses nor reads the catalog: the added cost should be nil. Also run
  with ``GuardPolicy.text_to_sql(tau_amplified=0.05)``, which makes this result need a verdict (and,
  being join amplification, P1 then fires: that row includes serving the de-duplicated rows).
* ``90% dup``: 200 rows, 20 distinct; flagged, so P1 fires under both ``paper`` and ``patch``. Warm:
  the same statement repeated, so the verdict comes from the connection's cache; what ``patch`` adds is
  the check that the verdict's catalog rows are unchanged (lookups: ``guarded_sqlite._analysis.catalog``) and one
  dict lookup.
* Cold: the first execution of a new statement text on a new connection (the rewrite's and the
  verdict's caches both miss): parse for the analysis plus one catalog read, over ``paper``'s own
  first execution (which parses for the rewrite).

Warm variants are interleaved per repetition (order rotated); each figure is the median of the
repetitions, each repetition a batch of statements timed together. ``added`` = preset median - paper
median; ``ratio`` = the median of per-repetition ratios.
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import statistics
import sys
import time
from typing import Any

import guarded_sqlite
from guarded_sqlite import GuardPolicy

SQL = "SELECT c.name, c.city FROM customers AS c JOIN orders AS o ON o.customer_id = c.id"


def _database(distinct: int, rows: int = 200) -> sqlite3.Connection:
    """``rows`` join rows over ``distinct`` customers (each customer's order count as even as possible)."""
    con = sqlite3.connect(":memory:", check_same_thread=False)
    con.executescript(
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT);"
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, amount INTEGER);"
    )
    con.executemany(
        "INSERT INTO customers VALUES (?, ?, ?)", [(i, f"name{i}", f"city{i % 7}") for i in range(distinct)]
    )
    con.executemany("INSERT INTO orders VALUES (?, ?, 1)", [(k, k % distinct) for k in range(rows)])
    con.commit()
    return con


def _timed(con: Any, sql: str, batch: int) -> float:
    started = time.perf_counter_ns()
    for _ in range(batch):
        con.execute(sql).fetchall()
    return (time.perf_counter_ns() - started) / batch / 1000


def _warm(distinct: int, variants: dict[str, Any], reps: int, batch: int) -> dict[str, list[float]]:
    raw = _database(distinct)
    cons = {name: guarded_sqlite.wrap(raw, guard=guard) for name, guard in variants.items()}
    for con in cons.values():  # warm every cache, check the rows
        rows = con.execute(SQL).fetchall()
        assert len(rows) in (200, distinct), len(rows)
    samples: dict[str, list[float]] = {name: [] for name in cons}
    names = list(cons)
    for rep in range(reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order if rep % 2 else reversed(order):
            time.sleep(0.001)
            samples[name].append(_timed(cons[name], SQL, batch))
    return samples


def _cold(guard: Any, reps: int) -> list[float]:
    """First execution of a fresh statement text on a fresh connection, µs."""
    out = []
    for rep in range(reps):
        raw = _database(20)
        con = guarded_sqlite.wrap(raw, guard=guard)
        sql = f"{SQL} -- cold {guard if isinstance(guard, str) else 'policy'} {rep} {time.perf_counter_ns()}"
        time.sleep(0.001)
        started = time.perf_counter_ns()
        rows = con.execute(sql).fetchall()
        out.append((time.perf_counter_ns() - started) / 1000)
        assert len(rows) == 20
        raw.close()
    return out


def _lookup(number: int) -> list[str]:
    """The warm verdict lookup alone (``catalog.explain``: lookups of the tables' catalog rows and one
    dict lookup), timed directly: the whole of what ``patch`` adds to a flagged statement whose verdict
    is cached."""
    import timeit

    from guarded_sqlite._analysis.catalog import explain

    con = guarded_sqlite.wrap(_database(20), guard="patch")
    con.execute(SQL).fetchall()
    guard = con._self_guard
    assert SQL in guard.catalog.verdicts
    seconds = min(timeit.repeat(lambda: explain(guard, SQL), number=number // 5, repeat=5))
    return [
        "### The warm verdict lookup alone",
        "",
        f"`catalog.explain` with the verdict cached (the schema list, TEMP names, the tables' catalog rows by "
        f"rowid and their index lists, then a dict lookup): "
        f"{seconds / (number // 5) * 1e6:.1f} µs (best of 5 x {number // 5}).",
        "",
    ]


def _report(title: str, samples: dict[str, list[float]], base: str = "paper") -> list[str]:
    lines = [f"### {title}", "", "| variant | median µs/query | added vs paper µs | ratio |", "|---|---:|---:|---:|"]
    base_median = statistics.median(samples[base])
    for name, values in samples.items():
        median = statistics.median(values)
        ratio = statistics.median(v / b for v, b in zip(values, samples[base]))
        lines.append(f"| {name} | {median:.1f} | {median - base_median:+.1f} | {ratio:.3f} |")
    return [*lines, ""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (smoke run)")
    args = parser.parse_args(argv)
    reps, batch, cold_reps = (15, 20, 15) if args.quick else (60, 50, 60)

    out = [
        "## Provenance presets: cost per statement",
        "",
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs, {platform.platform()}; {reps} repetitions x {batch} statements.",
        "",
    ]
    ten = _warm(
        180,
        {
            "paper": "paper",
            "patch": "patch",
            "text_to_sql": "text_to_sql",
            "text_to_sql, tau_amplified=0.05 (analysed; P1 fires)": GuardPolicy.text_to_sql(tau_amplified=0.05),
        },
        reps,
        batch,
    )
    out += _report("200 rows, 10% duplicate rows (warm)", ten)
    ninety = _warm(20, {"paper": "paper", "patch": "patch"}, reps, batch)
    out += _report("200 rows, 90% duplicate rows: flagged, P1 fires in both (warm: verdict cached)", ninety)
    out += _lookup(reps * batch * 10)
    cold = {"paper": _cold("paper", cold_reps), "patch": _cold("patch", cold_reps)}
    paper_cold, patch_cold = statistics.median(cold["paper"]), statistics.median(cold["patch"])
    out += [
        "### First execution (cold: new connection, new statement text; 90% duplicates)",
        "",
        "| variant | median µs |",
        "|---|---:|",
        f"| paper (parse for the rewrite) | {paper_cold:.0f} |",
        f"| patch (+ parse for the analysis, catalog read) | {patch_cold:.0f} |",
        f"| added | {patch_cold - paper_cold:+.0f} |",
        "",
    ]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
