#!/usr/bin/env python
"""What the compiled sqlglot (``sqlglotc``) gains per phase, against pure-Python sqlglot, same venv and machine.

    .venv/bin/python benchmarks/bench_sqlglot_build.py [--rounds 5] [--json OUT]

Each round runs two child interpreters back to back, in alternating order: one on the compiled modules
as installed, one forced onto sqlglot's pure-Python modules (the finder ``guarded_sqlite._analysis.
sqlglot_build`` uses when the versions do not match, so no second venv and no reinstall are needed).
Each child measures, as medians of short batches:

* parse: ``sqlglot.parse_one`` of bench_aggregates.py's at-risk 3-table statement (GROUP BY over two joins);
* SQL generation: ``tree.sql(dialect="sqlite")`` of that tree;
* copy: ``tree.copy()``;
* a statement new to a warm connection, at risk (bench_aggregates.py's ``NEW_STATEMENT``, a new WHERE
  bound each call: planned, checked, corrected) and not at risk (one join on a key, a new literal each
  call), on ``guarded_sqlite.connect()`` against plain sqlite3 on the same data.

Times are this thread's CPU time (``time.thread_time_ns``). Reported: per phase the median over rounds
of each child's figure, and pure / compiled (how many times faster the compiled build is; > 1 is a
gain). Needs sqlglotc installed (it says so otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

NO_RISK_NEW = (
    "SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id "
    "WHERE c.id = {bound} GROUP BY c.id"
)


def _median_batch(run: Callable[[], Any], batch: int, repeats: int) -> float:
    """Median over ``repeats`` batches of the per-call CPU time of this thread in µs (immune to the time a
    busy machine keeps the process waiting, which wall time is not: the two children would differ by it)."""
    samples = []
    for _ in range(repeats):
        started = time.thread_time_ns()
        for _ in range(batch):
            run()
        samples.append((time.thread_time_ns() - started) / batch / 1000)
    return statistics.median(samples)


def child(build: str) -> dict[str, Any]:
    if build == "pure":
        from guarded_sqlite._analysis import sqlglot_build

        # Before sqlglot is imported: the pure-Python modules, as after a version mismatch (no warning).
        sys.meta_path.insert(0, sqlglot_build._SourceOnly())  # type: ignore[arg-type]
    import sqlglot
    import sqlglot.parser

    import guarded_sqlite

    sys.path.insert(0, str(HERE))
    from bench_aggregates import AT_RISK, NEW_STATEMENT, _fill

    compiled = not str(sqlglot.parser.__file__).endswith(".py")
    assert compiled == (build == "compiled"), (build, sqlglot.parser.__file__)
    tree = sqlglot.parse_one(AT_RISK, dialect="sqlite")
    out: dict[str, Any] = {"build": build, "sqlglot": sqlglot.__version__, "parser_module": sqlglot.parser.__file__}
    out["parse_us"] = _median_batch(lambda: sqlglot.parse_one(AT_RISK, dialect="sqlite"), 20, 15)
    out["generate_us"] = _median_batch(lambda: tree.sql(dialect="sqlite"), 20, 15)
    out["copy_us"] = _median_batch(lambda: tree.copy(), 20, 15)
    cons = {"raw": sqlite3.connect(":memory:"), "patch": guarded_sqlite.connect(":memory:")}
    for con in cons.values():
        _fill(con, 300)  # bench_aggregates.py's new-statement data: 300 customers, 1,500 orders, 4,500 items
    report = cons["patch"].execute(NEW_STATEMENT.format(bound=-1)).guard_report
    assert report is not None and report.trigger == "aggregate_fanout", report
    for kind, sql in (("at_risk", NEW_STATEMENT), ("no_risk", NO_RISK_NEW)):
        for name, con in cons.items():
            bounds = iter(range(-2, -(10**9), -1))
            out[f"new_{kind}_{name}_us"] = _median_batch(
                lambda con=con, sql=sql, bounds=bounds: con.execute(sql.format(bound=next(bounds))).fetchall(), 10, 9
            )
    return out


# bench_aggregates.py in a child interpreter, on the pure-Python modules when asked (the finder goes in
# before anything imports sqlglot; importing the analysis package first only settles the build's check).
_AGGREGATES = """
import runpy, sys
if {pure!r}:
    from guarded_sqlite._analysis import sqlglot_build
    sys.meta_path.insert(0, sqlglot_build._SourceOnly())
sys.argv = [{script!r}, *{args!r}]
runpy.run_path({script!r}, run_name="__main__")
"""


def aggregates(args: list[str]) -> int:
    """bench_aggregates.py on the compiled build, then on pure-Python sqlglot, back to back."""
    script = str(HERE / "bench_aggregates.py")
    for build in ("compiled", "pure"):
        code = _AGGREGATES.format(pure=build == "pure", script=script, args=args)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        print(f"### bench_aggregates.py {' '.join(args)}: {build} sqlglot\n\n{done.stdout}")
    return 0


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", metavar="OUT")
    parser.add_argument(
        "--aggregates",
        nargs=argparse.REMAINDER,
        metavar="ARGS",
        help="instead: run bench_aggregates.py (with ARGS) once on each build, back to back, and print both",
    )
    parser.add_argument("--child", choices=("compiled", "pure"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    if args.aggregates is not None:
        return aggregates(args.aggregates)
    from guarded_sqlite._analysis import sqlglot_build

    if sqlglot_build.build() != "compiled":
        print(f"sqlglot build here: {sqlglot_build.build()}; install sqlglotc (matching sqlglot) to compare")
        return 1
    runs: dict[str, list[dict[str, Any]]] = {"compiled": [], "pure": []}
    env = dict(os.environ, PYTHONHASHSEED="0")
    for round_ in range(args.rounds):
        order = ("compiled", "pure") if round_ % 2 == 0 else ("pure", "compiled")
        for build in order:
            done = subprocess.run(
                [sys.executable, __file__, "--child", build], capture_output=True, text=True, env=env, check=True
            )
            runs[build].append(json.loads(done.stdout.splitlines()[-1]))
            print(f"round {round_ + 1}/{args.rounds}: {build} done", file=sys.stderr)
    keys = [key for key in runs["compiled"][0] if key.endswith("_us")]
    median = {build: {key: statistics.median(r[key] for r in runs[build]) for key in keys} for build in runs}
    first = runs["compiled"][0]
    print(
        f"CPU {_cpu()} x{os.cpu_count()}, Python {platform.python_version()},"
        f" sqlglot {first['sqlglot']}, {args.rounds} rounds of two alternating child processes;"
        f" load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end\n"
    )
    labels = {
        "parse_us": "parse (the 3-table at-risk statement)",
        "generate_us": "SQL generation (`tree.sql()`)",
        "copy_us": "copy (`tree.copy()`)",
        "new_at_risk_patch_us": "new statement at risk, guarded (planned, checked, corrected)",
        "new_at_risk_raw_us": "new statement at risk, plain sqlite3",
        "new_no_risk_patch_us": "new statement not at risk, guarded",
        "new_no_risk_raw_us": "new statement not at risk, plain sqlite3",
    }
    print("| phase (CPU time per call) | pure sqlglot µs | sqlglotc µs | pure / compiled |")
    print("|---|---:|---:|---:|")
    for key in keys:
        pure, compiled = median["pure"][key], median["compiled"][key]
        print(f"| {labels.get(key, key)} | {pure:,.1f} | {compiled:,.1f} | {pure / compiled:.2f}× |")
    for kind in ("at_risk", "no_risk"):
        ratios = {
            build: median[build][f"new_{kind}_patch_us"] / median[build][f"new_{kind}_raw_us"] for build in median
        }
        print(
            f"\nnew statement {kind.replace('_', ' ')}, guarded / raw: pure {ratios['pure']:.2f}×,"
            f" compiled {ratios['compiled']:.2f}×",
            end="",
        )
    print()
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "median": median}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
