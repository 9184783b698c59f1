"""Overhead of the rescue path itself, model latency excluded.

A flagged fan-out query arrives with 12 candidates. We time, in the same process:

- ``floor``: raw sqlite3 executing the selected SQL and all 12 candidates once (work any rescue needs);
- ``DupRatioSelector``: the guarded execute with the zero-cost selector;
- ``LLMRescue (mock)``: the guarded execute with litellm's ``mock_response`` (litellm's own client
  overhead, no network);
- ``LLMRescue (loopback)``: the guarded execute against an OpenAI-compatible server on 127.0.0.1 that
  answers at once (litellm's full HTTP path).

Run: ``.venv/bin/python benchmarks/bench_rescue.py [--repeat N]``. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import platform
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import guarded_sqlite
from guarded_sqlite import DupRatioSelector, GuardPolicy, LLMRescue
from tests.llm_server import Script, chat_server

SELECTED = "SELECT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id"
CANDIDATES = [
    SELECTED,
    "SELECT name FROM customers WHERE id IN (SELECT customer_id FROM orders)",
    "SELECT DISTINCT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id",
    "SELECT name FROM customers",
    "SELECT c.name FROM customers AS c WHERE EXISTS (SELECT 1 FROM orders AS o WHERE o.customer_id = c.id)",
    "SELECT name FROM customers WHERE id < 0",
    "SELECT name FROM missing_table",
    "SELECT c.name, count(*) FROM customers AS c JOIN orders AS o ON o.customer_id = c.id GROUP BY c.name",
    "SELECT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id WHERE o.amount > 100",
    "SELECT name FROM customers ORDER BY name",
    "SELECT c.name FROM customers AS c, orders AS o",
    "SELECT upper(name) FROM customers",
]


def build(con: sqlite3.Connection) -> None:
    con.executescript(
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);"
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, amount INTEGER);"
    )
    con.executemany("INSERT INTO customers VALUES (?, ?)", [(i, f"customer{i}") for i in range(50)])
    con.executemany("INSERT INTO orders VALUES (?, ?, ?)", [(i, i % 50, i % 200) for i in range(1000)])


def time_ms(run: Callable[[], Any], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()

    raw = sqlite3.connect(":memory:")
    build(raw)

    def floor() -> None:
        for sql in [SELECTED, *CANDIDATES]:
            try:
                raw.execute(sql).fetchall()
            except sqlite3.Error:
                pass

    rows: list[tuple[str, float, float, float]] = [
        ("floor: raw sqlite3, selected + 12 candidates", time_ms(floor, args.repeat), 0.0, 0.0)
    ]

    def guarded_case(label: str, rescuer: Any) -> None:
        con = guarded_sqlite.connect(":memory:", guard=GuardPolicy(rescue=rescuer))
        build(con)
        reports = []

        def run() -> None:
            cur = con.execute(SELECTED, candidates=CANDIDATES, question="Which customers have orders?")
            cur.fetchall()
            reports.append(cur.guard_report)

        run()  # warm-up: first parse, first litellm import
        reports.clear()
        total = time_ms(run, args.repeat)
        candidates_ms = statistics.median(r.rescue.candidates_ms for r in reports)
        judge_ms = statistics.median(r.rescue.judge_ms for r in reports)
        assert all(r.rescue.chosen_index is not None for r in reports), "benchmark rescues must choose a candidate"
        rows.append((label, total, candidates_ms, judge_ms))

    guarded_case("DupRatioSelector", DupRatioSelector())
    guarded_case(
        "LLMRescue, litellm mock_response", LLMRescue(model="openai/bench", completion_kwargs={"mock_response": "1"})
    )
    with chat_server(Script(answer="1")) as api_base:
        guarded_case("LLMRescue, loopback HTTP server", LLMRescue(model="openai/bench", api_base=api_base, api_key="x"))

    print(
        f"Machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}; medians of {args.repeat} runs; shared, noisy machine.\n"
    )
    print("| case | whole execute (ms) | candidates (ms) | judge (ms) | overhead over floor (ms) |")
    print("|---|---:|---:|---:|---:|")
    floor_ms = rows[0][1]
    for label, total, candidates_ms, judge_ms in rows:
        overhead = "" if label.startswith("floor") else f"{total - floor_ms:.2f}"
        extra = ("", "") if label.startswith("floor") else (f"{candidates_ms:.2f}", f"{judge_ms:.2f}")
        print(f"| {label} | {total:.2f} | {extra[0]} | {extra[1]} | {overhead} |")


if __name__ == "__main__":
    main()
