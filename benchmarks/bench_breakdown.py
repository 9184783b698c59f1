#!/usr/bin/env python
"""Where the guarded 1-row point query spends its time, raw sqlite3 vs guarded.

    .venv/bin/python benchmarks/bench_breakdown.py [--quick] [--profile] [--json OUT]

Part A times the three calls of the workload (``con.cursor()``, ``cur.execute(sql, params)``,
``cur.fetchall()``), freeing the cursor, and the first read of ``cur.guard_report`` (built lazily),
for raw sqlite3 and for guarded connections in modes patch, observe and off. Every call is bracketed
by ``perf_counter_ns`` calls; the cost of an empty bracket is measured and subtracted. Variants are
interleaved per repetition, and the tables give medians over repetitions of per-call means.

Part B replays the steps the guarded hot path (``sqlite_fast``: ``CursorMethods.execute`` ->
``_statement`` -> ``core.after_fetch``, ``ConnectionMethods.cursor``, ``CursorMethods.fetchall``)
performs on top of the raw calls, one step at a time with ``timeit`` (minimum over many ~0.5 ms
repeats), so their costs can be added up and compared with the overhead measured in part A. The replay
mirrors guarded_sqlite/_io/sqlite_fast.py and core.py as of this writing; if they change, update the steps.
Part A also has a ``wrap()`` proxy variant for comparison.

``--profile`` adds a cProfile listing of the guarded loop (cProfile inflates small functions, so read
it for call counts and relative weight, not absolute times).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sqlite3
import statistics
import sys
import time
import timeit
from pathlib import Path
from typing import Any

import guarded_sqlite
from guarded_sqlite._guard import decide as core
from guarded_sqlite._io import sqlite_fast
from guarded_sqlite.report import GuardReport, ReportState

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_overhead import POINT_SQL, TABLE_ROWS, build_database, machine

perf_ns = time.perf_counter_ns


def segments(con: Any, params: list[tuple[int]], guarded: bool) -> dict[str, float]:
    """Mean ns per call of each segment over ``params``, timer overhead not yet subtracted."""
    t_cursor = t_execute = t_fetch = t_free = t_report = 0
    cur: Any
    for p in params:
        t0 = perf_ns()
        cur = con.cursor()
        t1 = perf_ns()
        cur.execute(POINT_SQL, p)
        t2 = perf_ns()
        cur.fetchall()
        t3 = perf_ns()
        del cur
        t4 = perf_ns()
        t_cursor += t1 - t0
        t_execute += t2 - t1
        t_fetch += t3 - t2
        t_free += t4 - t3
    if guarded:
        # A separate pass: the report's objects must not change the allocation pattern of the workload.
        for p in params:
            cur = con.cursor()
            cur.execute(POINT_SQL, p)
            cur.fetchall()
            t0 = perf_ns()
            cur.guard_report  # noqa: B018  (the attribute access is what is timed)
            t_report += perf_ns() - t0
            del cur
    n = len(params)
    return {
        "con.cursor()": t_cursor / n,
        "cur.execute(sql, params)": t_execute / n,
        "cur.fetchall()": t_fetch / n,
        "free the cursor": t_free / n,
        "first cur.guard_report read": t_report / n if guarded else 0.0,
    }


def empty_bracket(n: int) -> float:
    total = 0
    for _ in range(n):
        t0 = perf_ns()
        t1 = perf_ns()
        total += t1 - t0
    return total / n


def part_a(raw: sqlite3.Connection, reps: int, batch: int) -> dict[str, Any]:
    import random

    rng = random.Random(3)
    params = [(rng.randrange(TABLE_ROWS),) for _ in range(batch)]
    variants: dict[str, tuple[Any, bool]] = {"raw": (raw, False)}
    for mode in ("patch", "observe", "off"):
        con = guarded_sqlite.connect(":memory:", guard=mode)  # a sqlite3.Connection subclass (the fast path)
        raw.backup(target=con)
        variants[mode] = (con, True)
    variants["patch (wrap() proxy)"] = (guarded_sqlite.wrap(raw, guard="patch"), True)
    names = list(variants)
    for name in names:  # warm up
        segments(*[variants[name][0], params, variants[name][1]])
    per_rep: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    bracket: list[float] = []
    for rep in range(reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            con, guarded = variants[name]
            time.sleep(0.001)  # start on a fresh scheduler time slice (see bench_overhead.py)
            per_rep[name].append(segments(con, params, guarded))
        bracket.append(empty_bracket(batch))
    timer = statistics.median(bracket)
    out: dict[str, Any] = {"timer_overhead_ns": timer, "reps": reps, "batch": batch, "variants": {}}
    for name in names:
        keys = per_rep[name][0].keys()
        med = {k: max(0.0, statistics.median(r[k] for r in per_rep[name]) - timer) for k in keys}
        if name == "raw":
            med["first cur.guard_report read"] = 0.0
        out["variants"][name] = med
    return out


# --- Part B ---------------------------------------------------------------------------------------


def part_b(raw: sqlite3.Connection, repeat: int) -> list[dict[str, Any]]:
    patch_con = guarded_sqlite.connect(":memory:", guard="patch")
    raw.backup(target=patch_con)
    proxy_con = guarded_sqlite.wrap(raw, guard="patch")
    gcur = patch_con.cursor()
    gcur.execute(POINT_SQL, (1,))
    rcur = raw.cursor()
    rows = [(1, 2, "x" * 18)]
    guard = patch_con._self_guard
    sql = POINT_SQL
    p = (5,)
    state = gcur._self_state

    env: dict[str, Any] = dict(
        raw=raw,
        patch_con=patch_con,
        proxy_con=proxy_con,
        rcur=rcur,
        gcur=gcur,
        guard=guard,
        sql=sql,
        p=p,
        rows=rows,
        perf_ns=perf_ns,
        state=state,
        GuardReport=GuardReport,
        ReportState=ReportState,
        core=core,
        sqlite_fast=sqlite_fast,
        new_state=tuple.__new__,
        set=set,
        len=len,
        hash=hash,
    )
    # (step, statement, what it stands for in sqlite_fast.py/core.py). "raw" steps are sqlite3's own work.
    steps = [
        ("whole: raw con.cursor()", "raw.cursor()", "baseline"),
        ("whole: guarded con.cursor()", "patch_con.cursor()", "ConnectionMethods.cursor (sqlite3 subclass)"),
        ("whole: wrap() proxy con.cursor()", "proxy_con.cursor()", "proxy.ConnectionProxy.cursor"),
        (
            "whole: raw cur.execute(sql, p) + cur.fetchall() (one reused cursor)",
            "rcur.execute(sql, p); rcur.fetchall()",
            "baseline",
        ),
        (
            "whole: guarded cur.execute(sql, p) + cur.fetchall() (one reused cursor)",
            "gcur.execute(sql, p); gcur.fetchall()",
            "CursorMethods.execute + fetchall, patch mode",
        ),
        (
            "raw: cur.execute(sql, p) + fetchmany(1_000_001)",
            "rcur.execute(sql, p); rcur.fetchmany(1000001)",
            "what sqlite_fast._statement asks of sqlite3 instead",
        ),
        ("read self.connection._self_guard", "gcur.connection._self_guard", "CursorMethods.execute"),
        ("write _self_rows, _self_state", "gcur._self_rows, gcur._self_state = rows, state", "_statement"),
        (
            "core.after_fetch on 1 row (quick lane: hash check, ReportState)",
            "core.after_fetch(gcur, gcur, guard, sql, p, rows, None, sqlite_fast._tail)",
            "_statement -> core.after_fetch",
        ),
        ("hash(rows[0])", "hash(rows[0])", "the probe of a single row"),
        ("two perf_counter_ns() calls (results of 2+ rows)", "perf_ns(); perf_ns()", "detect timing"),
        (
            "ReportState via tuple.__new__ (15 fields)",
            "new_state(ReportState, ('patch', sql, sql, None, 'none', 1, 1, 1, None, None, (), 0, None, None, None))",
            "after_fetch: the state, read by name",
        ),
        (
            "plain 15-tuple (for scale)",
            "('patch', sql, sql, None, 'none', 1, 1, 1, None, None, (), 0, None, None, None)",
            "what a positional state would cost",
        ),
        ("GuardReport.from_state(state)", "GuardReport.from_state(state)", "first guard_report read (lazy)"),
    ]
    results = []
    for name, stmt, where in steps:
        timer = timeit.Timer(stmt, globals=env)
        # Short repeats (about 0.5 ms each), each after a 1 ms sleep, so most run without being
        # descheduled on a busy machine; the minimum is reported.
        estimate = timer.timeit(200) / 200
        number = max(50, int(0.0005 / max(estimate, 1e-9)))
        best = float("inf")
        for _ in range(repeat):
            time.sleep(0.001)
            best = min(best, timer.timeit(number) / number)
        results.append({"step": name, "ns": best * 1e9, "where": where})
    return results


def profile_guarded(raw: sqlite3.Connection, n: int) -> str:
    con = guarded_sqlite.connect(":memory:", guard="patch")
    raw.backup(target=con)
    params = [(i % TABLE_ROWS,) for i in range(n)]

    def loop() -> None:
        for p in params:
            cur = con.cursor()
            cur.execute(POINT_SQL, p)
            cur.fetchall()

    prof = cProfile.Profile()
    prof.runcall(loop)
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(15)
    return buf.getvalue()


def render(res: dict[str, Any]) -> str:
    a = res["part_a"]
    v = a["variants"]
    names = list(v)
    keys = list(v["raw"].keys())
    lines = [
        f"## Part A: the 1-row workload call by call (ns per call, median of {a['reps']} reps x {a['batch']} queries,"
        f" empty-bracket timer cost {a['timer_overhead_ns']:.0f} ns subtracted)",
        "",
        "| segment | " + " | ".join(names) + " | patch - raw |",
        "|---|" + "---:|" * (len(names) + 1),
    ]
    for k in keys:
        lines.append(
            f"| {k} | " + " | ".join(f"{v[n][k]:.0f}" for n in names) + f" | {v['patch'][k] - v['raw'][k]:+.0f} |"
        )
    totals = {n: sum(val for key, val in v[n].items() if key != "first cur.guard_report read") for n in names}
    lines.append(
        "| **workload total** (without guard_report) | "
        + " | ".join(f"**{totals[n]:.0f}**" for n in names)
        + f" | **{totals['patch'] - totals['raw']:+.0f}** |"
    )
    lines += [
        "",
        "## Part B: steps the guarded path adds, replayed one at a time (ns; minimum over short timeit repeats)",
        "",
        "| step | ns | where |",
        "|---|---:|---|",
    ]
    for r in res["part_b"]:
        lines.append(f"| {r['step']} | {r['ns']:.0f} | {r['where']} |")
    if res.get("profile"):
        lines += ["", "## cProfile of the guarded (patch) loop, by tottime", "", "```", res["profile"].strip(), "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--profile", action="store_true", help="add a cProfile listing of the guarded loop")
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args(argv)
    reps, batch, repeat = (31, 400, 30) if args.quick else (201, 400, 200)

    m = machine()
    print(
        f"CPU {m['cpu_model']} x{m['cpu_count']}, Python {m['python']}, SQLite {m['sqlite']},"
        f" git {m['git_commit']}, library source fingerprint {m['library_source_sha256']}; {m['note']}.\n"
    )
    raw = build_database()
    res: dict[str, Any] = {"machine": m, "part_a": part_a(raw, reps, batch), "part_b": part_b(raw, repeat)}
    if args.profile:
        res["profile"] = profile_guarded(raw, 50_000)
    print(render(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
