"""What seeing the reports costs: a 1-row point query on raw sqlite3 against ``connect()``'s guarded
connection plain, with a report sink (``GuardPolicy(on_report=...)``), inside a ``guard_scope`` block,
and the log record of a flagged statement. Same process, interleaved rounds, ratios of medians.

    python benchmarks/bench_reach.py [--rounds 15] [--batch 2000]

Run it on two checkouts (``PYTHONPATH=<checkout> python benchmarks/bench_reach.py``) to compare the
plain guarded figure before and after a change: a workload the older checkout lacks is skipped.
"""

from __future__ import annotations

import argparse
import logging
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import guarded_sqlite
from guarded_sqlite import GuardPolicy

SQL = "SELECT id, name, amount FROM items WHERE id = ?"


def _fill(con: Any) -> None:
    con.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, amount REAL)")
    con.executemany("INSERT INTO items VALUES (?, ?, ?)", [(i, f"item{i}", i * 1.5) for i in range(1000)])
    con.commit()


def _point_queries(con: Any, batch: int) -> float:
    """ns per ``cursor(); execute(); fetchall()`` over ``batch`` point queries."""
    started = time.perf_counter_ns()
    for i in range(batch):
        cur = con.cursor()
        cur.execute(SQL, (i % 1000,))
        cur.fetchall()
    return (time.perf_counter_ns() - started) / batch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batch", type=int, default=2000)
    args = parser.parse_args(argv)

    raw = sqlite3.connect(":memory:")
    _fill(raw)
    guarded = guarded_sqlite.connect(":memory:")
    _fill(guarded)
    variants: dict[str, Callable[[], float]] = {
        "raw": lambda: _point_queries(raw, args.batch),
        "guarded": lambda: _point_queries(guarded, args.batch),
    }
    if "on_report" in GuardPolicy.__dataclass_fields__:
        flagged: list[Any] = []
        sunk = guarded_sqlite.connect(
            ":memory:", guard=GuardPolicy(on_report=lambda r: r.flagged and flagged.append(r))
        )
        _fill(sunk)
        variants["guarded, report sink"] = lambda: _point_queries(sunk, args.batch)

        def scoped() -> float:
            with guarded.guard_scope("observe"):
                return _point_queries(guarded, args.batch)

        variants["guarded, inside guard_scope('observe')"] = scoped

    samples: dict[str, list[float]] = {name: [] for name in variants}
    for run in variants.values():  # warm-up
        run()
    for _ in range(args.rounds):
        for name, run in variants.items():
            samples[name].append(run())
    base = statistics.median(samples["raw"])
    print(f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, {args.rounds} rounds x {args.batch}")
    print("| workload | median µs | ratio to raw | over raw µs |")
    print("|---|---:|---:|---:|")
    for name, values in samples.items():
        median = statistics.median(values)
        print(f"| {name} | {median / 1000:.2f} | {median / base:.3f}× | {(median - base) / 1000:+.2f} |")

    if "on_report" in GuardPolicy.__dataclass_fields__:
        # A routine flagged statement (an empty result): nothing kept with the logger at INFO (its record
        # is DEBUG), and its records with a handler that keeps them at DEBUG (normalised SQL is cached per text).
        logger = logging.getLogger("guarded_sqlite")
        kept: list[logging.LogRecord] = []
        handler = logging.Handler()
        handler.emit = kept.append  # type: ignore[method-assign]
        empty = "SELECT id FROM items WHERE id = -1"
        timings = {}
        for level in (logging.INFO, logging.DEBUG):
            logger.setLevel(level)
            logger.addHandler(handler)
            guarded.execute(empty).fetchall()
            started = time.perf_counter_ns()
            for _ in range(args.batch):
                guarded.execute(empty).fetchall()
            timings[level] = (time.perf_counter_ns() - started) / args.batch
            logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
        print(
            f"empty result (flagged): {timings[logging.INFO] / 1000:.2f} µs with the logger at INFO, "
            f"{timings[logging.DEBUG] / 1000:.2f} µs at DEBUG with a handler keeping its records"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
