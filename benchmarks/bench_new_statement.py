"""Where a statement new to a warm connection spends its time, phase by phase (issue 44): the at-risk
statement of ``bench_aggregates.py``'s "new statement" workload (300 customers, 1,500 orders, 4,500 items,
a ``WHERE c.id > <bound>`` of its own each time), raw sqlite3 against the guard under the default preset.

The guard's phases are timed by wrapping, after warm-up, the functions that do them (whichever of them
the checked-out code has, so the same file measures the code before issue 44 and after it):

* planning: the rule's plan function (``catalog.plan`` before, ``plan_cache.plan`` after), and inside it
  the parse (``parse_statement``), the analysis and the writing of the corrected and check queries
  (``planning.aggregate_plan``), the shape's token scan and substitution (``shapes``);
* the check query: ``read_only_fetch`` (with its budget set-up and ``busy_timeout`` around it);
* the rest: the statement itself, the probe, the catalog lookups, ``EXPLAIN``, the data token, the
  decision and the report (the total minus the above).

With ``--new-shapes`` each statement is also of a shape the connection has not seen (its sum named
``AS s<n>``, a name of its own: what a text-to-SQL pipeline's first question of a kind costs), so the
whole analysis runs for each.

    PYTHONPATH=<checkout> python benchmarks/bench_new_statement.py [--statements 200] [--rounds 5] [--new-shapes]
"""

from __future__ import annotations

import argparse
import functools
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from bench_aggregates import NEW_STATEMENT, _fill

import guarded_sqlite

PHASES = ("parse", "analysis", "shape", "planning", "check query")


def _timed(phase: str, spent: dict[str, int], function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter_ns()
        try:
            return function(*args, **kwargs)
        finally:
            spent[phase] += time.perf_counter_ns() - started

    return run


def _instrument(spent: dict[str, int]) -> None:
    """Wrap the phases' functions where the code has them (module attributes read at call time)."""
    from guarded_sqlite._analysis import catalog
    from guarded_sqlite._guard import aggregate_check

    modules: list[Any] = [catalog]
    try:
        from guarded_sqlite._analysis import plan_cache, shapes  # after issue 44 item 2

        modules.append(plan_cache)
        for name in ("read_shape", "substituted"):
            setattr(plan_cache, name, _timed("shape", spent, getattr(shapes, name)))
    except ImportError:
        pass
    for module in modules:
        for name, phase in (("parse_statement", "parse"), ("aggregate_plan", "analysis")):
            if hasattr(module, name):
                setattr(module, name, _timed(phase, spent, getattr(module, name)))
    rule = aggregate_check._AGGREGATE_RULE
    rule[0] = _timed("planning", spent, rule[0])
    aggregate_check.read_only_fetch = _timed("check query", spent, aggregate_check.read_only_fetch)  # type: ignore[attr-defined]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--statements", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--new-shapes", action="store_true", help="every statement of a shape of its own too")
    args = parser.parse_args(argv)
    template = NEW_STATEMENT.replace("SUM(o.total)", "SUM(o.total) AS s{name}") if args.new_shapes else NEW_STATEMENT
    raw = sqlite3.connect(":memory:")
    guarded = guarded_sqlite.connect(":memory:")
    for con in (raw, guarded):
        _fill(con, 300)
    guarded.execute(NEW_STATEMENT.format(bound=-1)).fetchall()  # the rule loaded, the catalog read
    spent = dict.fromkeys(PHASES, 0)
    _instrument(spent)
    bounds = iter(range(-2, -(10**9), -1))
    samples: dict[str, list[float]] = {name: [] for name in ("raw", "guarded", *PHASES)}
    for _ in range(args.rounds):
        for name, con in (("raw", raw), ("guarded", guarded)):
            for phase in PHASES:
                spent[phase] = 0
            started = time.perf_counter_ns()
            for _ in range(args.statements):
                bound = next(bounds)
                con.execute(template.format(bound=bound, name=-bound)).fetchall()
            samples[name].append((time.perf_counter_ns() - started) / args.statements)
            if name == "guarded":
                for phase in PHASES:
                    samples[phase].append(spent[phase] / args.statements)
    median = {name: statistics.median(values) for name, values in samples.items()}
    print(f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, {guarded_sqlite.__file__}")
    kind = "new statements, each of a new shape" if args.new_shapes else "new statements"
    print(f"{args.rounds} rounds of {args.statements} {kind}; medians of the mean per statement")
    print("| phase | ms |")
    print("|---|---:|")
    print(f"| raw sqlite3, the statement | {median['raw'] / 1e6:.3f} |")
    print(f"| guarded, total | {median['guarded'] / 1e6:.3f} ({median['guarded'] / median['raw']:.2f}× raw) |")
    planning = median["planning"]
    print(f"| planning | {planning / 1e6:.3f} |")
    for phase in ("parse", "analysis", "shape"):
        print(f"| - {phase} | {median[phase] / 1e6:.3f} |")
    inner = median["parse"] + median["analysis"] + median["shape"]
    print(f"| - the rest of planning (catalog lookups, EXPLAIN QUERY PLAN) | {(planning - inner) / 1e6:.3f} |")
    print(f"| the check query (read-only, budget) | {median['check query'] / 1e6:.3f} |")
    rest = median["guarded"] - planning - median["check query"]
    print(f"| the rest (the statement, probe, data token, decision, report) | {rest / 1e6:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
