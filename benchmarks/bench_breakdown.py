#!/usr/bin/env python
"""Where the guarded 1-row point query spends its time, raw sqlite3 vs guarded.

    .venv/bin/python benchmarks/bench_breakdown.py [--quick] [--profile] [--json OUT]

Part A times the three calls of the workload (``con.cursor()``, ``cur.execute(sql, params)``,
``cur.fetchall()``), freeing the cursor, and the first read of ``cur.guard_report`` (built lazily),
for raw sqlite3 and for guarded connections in modes patch, observe and off. Every call is bracketed
by ``perf_counter_ns`` calls; the cost of an empty bracket is measured and subtracted. Variants are
interleaved per repetition, and the tables give medians over repetitions of per-call means.

Part B replays the steps the guarded hot path (``GuardedCursor.execute`` -> ``_execute_and_probe``,
``GuardedConnection.cursor``, ``GuardedCursor.fetchall``) performs on top of the raw calls, one step
at a time with ``timeit`` (minimum over many ~0.5 ms repeats), so their costs can be added up and compared
with the overhead measured in part A. The replay mirrors guarded_sqlite/proxy.py as of this writing; if
proxy.py changes, update ``STEPS`` below.

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
import threading
import time
import timeit
from pathlib import Path
from typing import Any

import guarded_sqlite
from guarded_sqlite.probe import classify
from guarded_sqlite.proxy import GuardedCursor
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
    variants = {
        "raw": (raw, False),
        "patch": (guarded_sqlite.wrap(raw, guard="patch"), True),
        "observe": (guarded_sqlite.wrap(raw, guard="observe"), True),
        "off": (guarded_sqlite.wrap(raw, guard="off"), True),
    }
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
    patch_con = guarded_sqlite.wrap(raw, guard="patch")
    gcur = patch_con.cursor()
    gcur.execute(POINT_SQL, (1,))
    rcur = raw.cursor()
    rows = [(1, 2, "x" * 18)]
    guard = gcur._self_guard
    lock = threading.RLock()
    sql = POINT_SQL
    p = (5,)
    state = ("patch", sql, sql, None, "none", 1, 1, 1, None, None, (), 123, None)

    env: dict[str, Any] = dict(
        raw=raw,
        patch_con=patch_con,
        rcur=rcur,
        gcur=gcur,
        guard=guard,
        lock=lock,
        sql=sql,
        p=p,
        rows=rows,
        classify=classify,
        perf_ns=perf_ns,
        GuardedCursor=GuardedCursor,
        state=state,
        GuardReport=GuardReport,
        ReportState=ReportState,
        set=set,
        len=len,
        type=type,
        list=list,
    )
    # (step, statement, what it stands for in proxy.py). "raw" steps are the sqlite3 work itself.
    steps = [
        ("whole: raw con.cursor()", "raw.cursor()", "baseline"),
        ("whole: guarded con.cursor()", "patch_con.cursor()", "GuardedConnection.cursor"),
        (
            "whole: raw cur.execute(sql, p) + cur.fetchall() (one reused cursor)",
            "rcur.execute(sql, p); rcur.fetchall()",
            "baseline",
        ),
        (
            "whole: guarded cur.execute(sql, p) + cur.fetchall() (one reused cursor)",
            "gcur.execute(sql, p); gcur.fetchall()",
            "GuardedCursor.execute + fetchall, patch mode",
        ),
        (
            "raw: cur.execute(sql, p) + description + fetchmany(1_000_001)",
            "rcur.execute(sql, p); rcur.description; rcur.fetchmany(1000001)",
            "what _execute_and_probe asks of sqlite3 instead",
        ),
        (
            "GuardedCursor(raw_cursor) + set _self_guard",
            "c = GuardedCursor(raw.cursor()); c._self_guard = guard",
            "GuardedConnection.cursor (includes raw.cursor())",
        ),
        ("proxy method lookup: gcur.execute (bound method)", "gcur.execute", "every call into the proxy"),
        ("plain Python method call with 2 args (for scale)", "obj.m(sql, p)", "every call into the proxy"),
        ("proxy read self._self_guard", "gcur._self_guard", "execute, fetchall (x2 per query)"),
        ("proxy read self.__wrapped__", "gcur.__wrapped__", "execute"),
        ("proxy write self._self_report = None", "gcur._self_report = None", "execute"),
        ("guard.policy.mode == 'patch'", "guard.policy.mode == 'patch'", "execute, _execute_and_probe"),
        ("with guard.lock: (RLock)", "with lock: pass", "execute, patch mode only"),
        (
            "policy attribute reads (mode, row_cap, _p2_min_rows, tau_inject)",
            "pol = guard.policy; pol.mode; pol.row_cap; pol._p2_min_rows; pol.tau_inject",
            "_execute_and_probe",
        ),
        ("two perf_counter_ns() calls", "perf_ns(); perf_ns()", "_execute_and_probe: detect timing"),
        ("len(set(rows)) + classify()", "u = len(set(rows)); classify(1, u, 0.8)", "_execute_and_probe: the probe"),
        (
            "build the 13-field state tuple",
            "('patch', sql, sql, None, 'none', 1, 1, 1, None, None, (), 123, None)",
            "_execute_and_probe",
        ),
        ("proxy write _self_rows, _self_state", "gcur._self_rows, gcur._self_state = rows, state", "execute"),
        ("rescue_inputs = None if candidates is None else ...", "ri = None if c is None else 1", "execute"),
        (
            "call overhead: execute -> _execute_and_probe (Python frames)",
            "f(gcur, rcur, sql, p, guard, None)",
            "execute",
        ),
        (
            "fetchall body: type check + closed read + write _self_rows",
            "r = gcur._self_rows; type(r) is list and not gcur._self_guard.closed; gcur._self_rows = r",
            "GuardedCursor.fetchall",
        ),
        (
            "GuardReport.from_state(ReportState(*state))",
            "GuardReport.from_state(ReportState(*state))",
            "first guard_report read (lazy, not in the workload)",
        ),
    ]
    env["f"] = lambda a, b, c, d, e, g: None
    env["c"] = None

    class Plain:
        def m(self, a: Any, b: Any) -> None:
            return None

    env["obj"] = Plain()
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
    con = guarded_sqlite.wrap(raw, guard="patch")
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
        "| step | ns | where in proxy.py |",
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
