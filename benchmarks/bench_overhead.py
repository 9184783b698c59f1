#!/usr/bin/env python
"""Overhead of guarded_sqlite over plain sqlite3, measured in one process.

Run from the repository root:

    .venv/bin/python benchmarks/bench_overhead.py            # full run, about 1.5-2.5 minutes
    .venv/bin/python benchmarks/bench_overhead.py --quick    # smoke run, about 15-30 seconds
    .venv/bin/python benchmarks/bench_overhead.py --json out.json

Method (the machine this was written on is shared and noisy):

* guarded connections are what ``guarded_sqlite.connect`` opens (``sqlite3.Connection`` subclasses,
  the fast path), once with ``guard="patch"`` and once with ``guard="observe"``; each is an in-memory
  copy of the raw connection's database (``raw.backup(target=guarded)``), so all three hold the same
  data in memory and only the Python layer differs.
* Variants are interleaved: every repetition runs raw, patch and observe back to back, in an order
  that rotates (and reverses every other cycle) so no variant always runs first or last. A sample's
  partner is the raw sample of the same repetition.
* Reported: the median of each variant's samples, ``overhead`` = guarded median - raw median (per
  query), and ``ratio`` = the median of the per-repetition ratios guarded / raw. The per-pair ratio
  cancels most of the slow drifts (another tenant starting a job) that shift both halves of a pair.
* Every timed block is exactly the workload: ``cur = con.cursor(); cur.execute(sql, params);
  cur.fetchall()`` (result discarded, so freeing it is timed too), or ``for row in cur: pass``; the
  point query also as ``con.execute(sql, params).fetchall()`` and as ``cur.execute(sql, params);
  cur.fetchone()`` on one reused cursor. Small workloads are timed in batches of about a millisecond
  (400 point queries, 100 10-row and 20 100-row queries) and reported per query.
* Also measured: the first read of ``cur.guard_report`` after a point query (the report is built
  lazily), and ``import guarded_sqlite`` against ``import sqlite3`` in fresh interpreters.
* Each sample is preceded by a 1 ms sleep so it starts on a fresh scheduler time slice: on a busy
  2-core machine a 5-10 ms sample is almost always preempted (wall time doubles), a 1-2 ms one that
  starts right after a sleep usually is not. The garbage collector stays enabled, as in real
  programs; ``gc.collect()`` runs before each large-result sample, outside the timed region.
* Each sample records wall time (``time.perf_counter_ns``, the primary figure) and this thread's CPU
  time (``time.thread_time_ns``, a cross-check that ignores time spent descheduled).
* Results are checked (untimed) before timing: guarded rows equal raw rows, or, for the patched
  explosion, the raw rows without their join copies (one row per row of ``a``).
* Peak memory runs in a fresh subprocess per case: peak RSS (VmHWM, reset after setup through
  /proc/self/clear_refs when the kernel allows it, else the growth of ru_maxrss) while iterating a
  10M-row result row by row; every row is counted and summed.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import platform
import random
import resource
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_hotpath, beside this file
if "--guarded-sqlite" in sys.argv:  # another checkout's package (before/after runs): before the import below
    sys.path.insert(0, str(Path(sys.argv[sys.argv.index("--guarded-sqlite") + 1]).resolve()))

import guarded_sqlite
from guarded_sqlite import GuardPolicy

perf_ns = time.perf_counter_ns
cpu_ns = time.thread_time_ns  # CPU time of this thread: does not advance while the process is descheduled
Sample = tuple[float, float]  # (wall ns, CPU ns), per query
HERE = Path(__file__).resolve().parent

# --------------------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------------------

TABLE_ROWS = 100_000
POINT_SQL = "SELECT id, n, s FROM t WHERE id = ?"
RANGE_SQL = "SELECT id, n, s FROM t WHERE id BETWEEN ? AND ?"  # 100 rows
SCAN_SQL = "SELECT id, n, s FROM t WHERE id < ?"  # 100,000 rows
JOIN_SQL = "SELECT a.grp FROM a, b"  # 1000 x 1000 = 1,000,000 rows, 10 distinct
JOIN_SIDE = 1000
JOIN_GROUPS = 10


def build_database() -> sqlite3.Connection:
    con = sqlite3.connect(":memory:")
    con.executescript(
        """
        CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER, s TEXT);
        CREATE TABLE a (id INTEGER PRIMARY KEY, grp TEXT);
        CREATE TABLE b (id INTEGER PRIMARY KEY, x INTEGER);
        """
    )
    rng = random.Random(1)
    con.executemany(
        "INSERT INTO t VALUES (?, ?, ?)",
        ((i, rng.randrange(1_000_000), f"row-{i:06d}-{rng.randrange(10**6):06d}") for i in range(TABLE_ROWS)),
    )
    con.executemany("INSERT INTO a VALUES (?, ?)", ((i, f"group-{i % JOIN_GROUPS}") for i in range(JOIN_SIDE)))
    con.executemany("INSERT INTO b VALUES (?, ?)", ((i, i * 3) for i in range(JOIN_SIDE)))
    con.commit()
    return con


def timed_fetchall_batch(con: Any, sql: str, params_list: list[tuple[Any, ...]]) -> Sample:
    """(wall, CPU) ns per query for ``len(params_list)`` executions of the workload."""
    w0 = perf_ns()
    c0 = cpu_ns()
    for params in params_list:
        cur = con.cursor()
        cur.execute(sql, params)
        cur.fetchall()
    c1 = cpu_ns()
    w1 = perf_ns()
    n = len(params_list)
    return (w1 - w0) / n, (c1 - c0) / n


def timed_execute_batch(con: Any, sql: str, params_list: list[tuple[Any, ...]]) -> Sample:
    """``con.execute(sql, params).fetchall()``, per query."""
    w0 = perf_ns()
    c0 = cpu_ns()
    for params in params_list:
        con.execute(sql, params).fetchall()
    c1 = cpu_ns()
    w1 = perf_ns()
    n = len(params_list)
    return (w1 - w0) / n, (c1 - c0) / n


_REUSED: dict[int, Any] = {}


def timed_reuse_fetchone_batch(con: Any, sql: str, params_list: list[tuple[Any, ...]]) -> Sample:
    """``cur.execute(sql, params); cur.fetchone()`` on one cursor kept per connection, per query."""
    cur = _REUSED.get(id(con))
    if cur is None:
        cur = _REUSED[id(con)] = con.cursor()
    w0 = perf_ns()
    c0 = cpu_ns()
    for params in params_list:
        cur.execute(sql, params)
        cur.fetchone()
    c1 = cpu_ns()
    w1 = perf_ns()
    n = len(params_list)
    return (w1 - w0) / n, (c1 - c0) / n


def timed_fetchall_once(con: Any, sql: str, params: tuple[Any, ...]) -> Sample:
    w0 = perf_ns()
    c0 = cpu_ns()
    cur = con.cursor()
    cur.execute(sql, params)
    cur.fetchall()
    del cur  # the guarded cursor may keep the buffer (and a partial probe set): free it inside the timing
    c1 = cpu_ns()
    w1 = perf_ns()
    return w1 - w0, c1 - c0


def timed_iterate_once(con: Any, sql: str, params: tuple[Any, ...]) -> Sample:
    w0 = perf_ns()
    c0 = cpu_ns()
    cur = con.cursor()
    cur.execute(sql, params)
    for _row in cur:
        pass
    del cur, _row
    c1 = cpu_ns()
    w1 = perf_ns()
    return w1 - w0, c1 - c0


# --------------------------------------------------------------------------------------------------
# Statistics and interleaving
# --------------------------------------------------------------------------------------------------


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def interleave(
    variants: list[tuple[str, Callable[[], Sample]]], reps: int, warmup: int, collect: bool
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Run every variant once per repetition, rotating the order; returns each variant's wall and CPU samples.

    Before each sample: ``gc.collect()`` if ``collect`` (large results only: a collection evicts the
    caches a short sample depends on), then a 1 ms sleep, so that on a busy machine the sample starts
    on a fresh scheduler time slice; short samples then usually run without being descheduled.
    """
    for _ in range(warmup):
        for _name, fn in variants:
            fn()
    wall: dict[str, list[float]] = {name: [] for name, _ in variants}
    cpu: dict[str, list[float]] = {name: [] for name, _ in variants}
    k = len(variants)
    for rep in range(reps):
        shift = rep % k
        order = variants[shift:] + variants[:shift]
        if (rep // k) % 2:
            order = order[::-1]
        for name, fn in order:
            if collect:
                gc.collect()
            time.sleep(0.001)
            w, c = fn()
            wall[name].append(w)
            cpu[name].append(c)
    return wall, cpu


def compare(raw: list[float], guarded: list[float]) -> dict[str, float]:
    ratios = [g / r for g, r in zip(guarded, raw)]
    raw_med, g_med = statistics.median(raw), statistics.median(guarded)
    return {
        "raw_median_ns": raw_med,
        "guarded_median_ns": g_med,
        "ratio_median": statistics.median(ratios),
        "ratio_p25": quantile(ratios, 0.25),
        "ratio_p75": quantile(ratios, 0.75),
        "raw_p25_ns": quantile(raw, 0.25),
        "raw_p75_ns": quantile(raw, 0.75),
        "guarded_p25_ns": quantile(guarded, 0.25),
        "guarded_p75_ns": quantile(guarded, 0.75),
        "overhead_us": (g_med - raw_med) / 1_000,
    }


# --------------------------------------------------------------------------------------------------
# Correctness checks (untimed)
# --------------------------------------------------------------------------------------------------


def fetch(con: Any, sql: str, params: tuple[Any, ...], iterate: bool = False) -> tuple[list[Any], Any]:
    cur = con.cursor()
    cur.execute(sql, params)
    rows = list(cur) if iterate else cur.fetchall()
    return rows, getattr(cur, "guard_report", None)


def check_same(raw: sqlite3.Connection, guarded: Any, sql: str, params: tuple[Any, ...], label: str) -> None:
    for iterate in (False, True):
        want, _ = fetch(raw, sql, params, iterate)
        got, report = fetch(guarded, sql, params, iterate)
        if got != want:
            raise SystemExit(f"{label}: guarded rows differ from raw rows ({len(got)} vs {len(want)})")
        if report is None or report.action != "none" or report.flagged:
            raise SystemExit(f"{label}: unexpected guard report {report!r}")


# --------------------------------------------------------------------------------------------------
# Workloads 1-3: small and large healthy results
# --------------------------------------------------------------------------------------------------

TARGETS = {
    "point": ("ratio_median", 1.60, "ratio <= 1.60"),
    "range10": ("ratio_median", 1.35, "ratio <= 1.35"),
    "range100": ("ratio_median", 1.20, "ratio <= 1.20"),
    "scan100k": ("ratio_median", 1.10, "ratio <= 1.10"),
}
RANGE10_SQL = "SELECT id, n, s FROM t WHERE id BETWEEN ? AND ?"  # 10 rows with (lo, lo + 9)


def run_healthy(raw: sqlite3.Connection, patch: Any, observe: Any, cfg: dict[str, Any]) -> list[dict[str, Any]]:
    rng = random.Random(7)
    point_params = [(rng.randrange(TABLE_ROWS),) for _ in range(cfg["point_batch"])]
    range10_params = []
    for _ in range(cfg["range10_batch"]):
        lo = rng.randrange(TABLE_ROWS - 10)
        range10_params.append((lo, lo + 9))
    range_params = []
    for _ in range(cfg["range_batch"]):
        lo = rng.randrange(TABLE_ROWS - 100)
        range_params.append((lo, lo + 99))
    scan_params = (TABLE_ROWS,)

    # Sanity: the SQL returns what the labels say.
    assert len(fetch(raw, POINT_SQL, point_params[0])[0]) == 1
    assert len(fetch(raw, RANGE_SQL, range_params[0])[0]) == 100
    assert len(fetch(raw, RANGE10_SQL, range10_params[0])[0]) == 10
    assert len(fetch(raw, SCAN_SQL, scan_params)[0]) == TABLE_ROWS
    for con, mode in ((patch, "patch"), (observe, "observe")):
        check_same(raw, con, POINT_SQL, point_params[0], f"point/{mode}")
        check_same(raw, con, RANGE_SQL, range_params[0], f"range100/{mode}")
        check_same(raw, con, RANGE10_SQL, range10_params[0], f"range10/{mode}")
        check_same(raw, con, SCAN_SQL, scan_params, f"scan100k/{mode}")

    cases: list[tuple[str, str, str, str, Callable[[Any], Sample], int, int, int]] = [
        # key, label, access, unit, timed fn, reps, warmup, queries per sample
        (
            "point",
            "1. point query by PK (1 row)",
            "fetchall",
            "µs",
            lambda con: timed_fetchall_batch(con, POINT_SQL, point_params),
            cfg["point_reps"],
            5,
            len(point_params),
        ),
        (
            "point",
            "1. point query by PK (1 row)",
            "con.execute().fetchall()",
            "µs",
            lambda con: timed_execute_batch(con, POINT_SQL, point_params),
            cfg["point_reps"],
            5,
            len(point_params),
        ),
        (
            "point",
            "1. point query by PK (1 row)",
            "reused cursor: execute; fetchone",
            "µs",
            lambda con: timed_reuse_fetchone_batch(con, POINT_SQL, point_params),
            cfg["point_reps"],
            5,
            len(point_params),
        ),
        (
            "range10",
            "2a. 10 rows",
            "fetchall",
            "µs",
            lambda con: timed_fetchall_batch(con, RANGE10_SQL, range10_params),
            cfg["range_reps"],
            5,
            len(range10_params),
        ),
        (
            "range100",
            "2b. 100 rows",
            "fetchall",
            "µs",
            lambda con: timed_fetchall_batch(con, RANGE_SQL, range_params),
            cfg["range_reps"],
            5,
            len(range_params),
        ),
        (
            "scan100k",
            "3. 100,000 rows",
            "fetchall",
            "ms",
            lambda con: timed_fetchall_once(con, SCAN_SQL, scan_params),
            cfg["scan_reps"],
            cfg["large_warmup"],
            1,
        ),
        (
            "scan100k",
            "3. 100,000 rows",
            "iterate",
            "ms",
            lambda con: timed_iterate_once(con, SCAN_SQL, scan_params),
            cfg["scan_reps"],
            cfg["large_warmup"],
            1,
        ),
    ]
    results = []
    for key, label, access, unit, fn, reps, warmup, per_sample in cases:
        t0 = time.perf_counter()
        samples, cpu = interleave(
            [
                ("raw", lambda fn=fn: fn(raw)),
                ("patch", lambda fn=fn: fn(patch)),
                ("observe", lambda fn=fn: fn(observe)),
            ],
            reps,
            warmup,
            collect=per_sample == 1,
        )
        took = time.perf_counter() - t0
        for mode in ("patch", "observe"):
            stats = compare(samples["raw"], samples[mode])
            cpu_stats = compare(cpu["raw"], cpu[mode])
            metric, limit, target_text = TARGETS[key]
            results.append(
                {
                    "workload": key,
                    "label": label,
                    "access": access,
                    "mode": mode,
                    "unit": unit,
                    "reps": reps,
                    "queries_per_sample": per_sample,
                    **stats,
                    "target": target_text,
                    "target_metric": metric,
                    "target_limit": limit,
                    "met": stats[metric] <= limit,
                    "cpu": {**cpu_stats, "met": cpu_stats[metric] <= limit},
                    "samples_raw_ns": samples["raw"],
                    "samples_guarded_ns": samples[mode],
                    "cpu_samples_raw_ns": cpu["raw"],
                    "cpu_samples_guarded_ns": cpu[mode],
                }
            )
        print(f"  {label} ({access}): {reps} reps x 3 variants in {took:.1f}s", file=sys.stderr)
    return results


# --------------------------------------------------------------------------------------------------
# The first read of guard_report, and the import
# --------------------------------------------------------------------------------------------------


def run_report_read(guarded: Any, cfg: dict[str, Any]) -> dict[str, Any]:
    """Per point query: execute + fetchall, with and without reading ``cur.guard_report`` once.

    Twice: the same statement each time (one row, so the same facts: the report built for the first is
    reused), and two statement texts in turn (new facts every time: every read builds a report)."""
    rng = random.Random(11)
    params = [(rng.randrange(TABLE_ROWS),) for _ in range(cfg["point_batch"])]
    cur = guarded.cursor()
    out: dict[str, Any] = {"target": "<= 1 µs"}
    for label, texts in (("repeated", (POINT_SQL, POINT_SQL)), ("alternating", (POINT_SQL, POINT_SQL + " "))):
        batch = [(texts[i % 2], p) for i, p in enumerate(params)]

        def plain(batch: list[tuple[str, Any]] = batch) -> Sample:
            w0, c0 = perf_ns(), cpu_ns()
            for sql, p in batch:
                cur.execute(sql, p)
                cur.fetchall()
            return (perf_ns() - w0) / len(batch), (cpu_ns() - c0) / len(batch)

        def read(batch: list[tuple[str, Any]] = batch) -> Sample:
            w0, c0 = perf_ns(), cpu_ns()
            for sql, p in batch:
                cur.execute(sql, p)
                cur.fetchall()
                cur.guard_report  # noqa: B018  (the first read builds the report, or reuses an equal one)
            return (perf_ns() - w0) / len(batch), (cpu_ns() - c0) / len(batch)

        wall, cpu = interleave([("plain", plain), ("read", read)], cfg["point_reps"], 5, collect=False)
        extra = (statistics.median(wall["read"]) - statistics.median(wall["plain"])) / 1_000
        extra_cpu = (statistics.median(cpu["read"]) - statistics.median(cpu["plain"])) / 1_000
        out[label] = {"extra_us": extra, "extra_cpu_us": extra_cpu, "met": extra <= 1.0}
    return out


def run_import_time(cfg: dict[str, Any]) -> dict[str, Any]:
    """Wall time of ``python -c "import sqlite3"`` and ``... "import guarded_sqlite"`` in fresh
    interpreters, alternating; plus ``-X importtime``'s cumulative figures of one run each."""
    import tempfile

    times: dict[str, list[float]] = {"sqlite3": [], "guarded_sqlite": []}
    runs = cfg["import_runs"]
    # As installed: from cached bytecode (kept out of the source tree), even where the environment
    # sets PYTHONDONTWRITEBYTECODE (the standard library has its bytecode cached either way).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="guarded_sqlite_pycache_")
    for module in ("sqlite3", "guarded_sqlite"):  # warm-up: writes the bytecode cache
        subprocess.run([sys.executable, "-c", f"import {module}"], check=True, cwd=HERE.parent, env=env)
    for rep in range(runs):
        for module in ("sqlite3", "guarded_sqlite") if rep % 2 == 0 else ("guarded_sqlite", "sqlite3"):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", f"import {module}"], check=True, cwd=HERE.parent, env=env)
            times[module].append((time.perf_counter() - t0) * 1000)

    def cumulative(module: str) -> float | None:
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", f"import {module}"],
            capture_output=True,
            text=True,
            check=True,
            cwd=HERE.parent,
            env=env,
        )
        for line in proc.stderr.splitlines():
            parts = [part.strip() for part in line.split("|")]
            if len(parts) == 3 and parts[2] == module:
                return int(parts[1]) / 1000
        return None

    extra = statistics.median(times["guarded_sqlite"]) - statistics.median(times["sqlite3"])
    return {
        "runs": runs,
        "sqlite3_ms": statistics.median(times["sqlite3"]),
        "guarded_sqlite_ms": statistics.median(times["guarded_sqlite"]),
        "extra_ms": extra,
        "importtime_sqlite3_ms": cumulative("sqlite3"),
        "importtime_guarded_sqlite_ms": cumulative("guarded_sqlite"),
        "target": "<= 40 ms over import sqlite3",
        "met": extra <= 40,
    }


# --------------------------------------------------------------------------------------------------
# Workload 4: the 1M-row join explosion
# --------------------------------------------------------------------------------------------------


def timed_join(con: Any, iterate: bool, reports: list[Any] | None) -> Sample:
    w0 = perf_ns()
    c0 = cpu_ns()
    cur = con.cursor()
    cur.execute(JOIN_SQL, ())
    if iterate:
        for _row in cur:
            pass
    else:
        cur.fetchall()
    c1 = cpu_ns()
    w1 = perf_ns()
    # After fetchall/iteration the cursor holds no rows (the buffer was handed over or the iterator
    # is exhausted), so reading the lazily built report outside the timing hides nothing large.
    if reports is not None:
        reports.append(cur.guard_report)
    return w1 - w0, c1 - c0


def run_join(raw: sqlite3.Connection, patch: Any, observe: Any, cfg: dict[str, Any]) -> dict[str, Any]:
    expected_rows = JOIN_SIDE * JOIN_SIDE
    want, _ = fetch(raw, JOIN_SQL, ())
    assert len(want) == expected_rows, len(want)
    distinct = sorted(set(want))
    assert len(distinct) == JOIN_GROUPS

    # The first patch in the process imports sqlglot (kept out of ``import guarded_sqlite``): time it once.
    sqlglot_loaded_before = "sqlglot" in sys.modules
    gc.collect()
    cold_ns, _ = timed_join(patch, False, cold_reports := [])
    cold = cold_reports[0]

    # The patch preset removes the join copies: one row per row of a (b repeats each 1000 times), so the
    # 10 group values stay 1000 rows, as many as a holds; the join-copy check ran the statement again.
    per_a_row = sorted(row for (row,) in raw.execute("SELECT grp FROM a"))
    got, report = fetch(patch, JOIN_SQL, ())
    if sorted(r for (r,) in got) != per_a_row or report.action != "join_copies_removed":
        raise SystemExit(f"join/patch: unexpected result {len(got)} rows, report {report!r}")
    if report.trigger != "cartesian_explosion":
        raise SystemExit(f"join/patch: unexpected trigger, report {report!r}")
    got, report = fetch(patch, JOIN_SQL, (), iterate=True)
    if sorted(r for (r,) in got) != per_a_row or report.action != "join_copies_removed":
        raise SystemExit(f"join/patch iterate: unexpected result {len(got)} rows, report {report!r}")
    for iterate in (False, True):
        got, report = fetch(observe, JOIN_SQL, (), iterate)
        if got != want or report.trigger != "cartesian_explosion" or report.action != "none":
            raise SystemExit(f"join/observe: unexpected result {len(got)} rows, report {report!r}")
    del want, got

    out: dict[str, Any] = {
        "sql": JOIN_SQL,
        "rows_raw": expected_rows,
        "distinct_rows": len(distinct),
        "cold_first_patch": {
            "sqlglot_imported_before": sqlglot_loaded_before,
            "total_ns": cold_ns,
            "detect_us": cold.detect_us,
            "patch_ms": cold.patch_ms,
        },
        "variants": [],
    }
    for access in ("fetchall", "iterate"):
        iterate = access == "iterate"
        patch_reports: list[Any] = []
        observe_reports: list[Any] = []
        t0 = time.perf_counter()
        samples, cpu = interleave(
            [
                ("raw", lambda: timed_join(raw, iterate, None)),
                ("patch", lambda: timed_join(patch, iterate, patch_reports)),
                ("observe", lambda: timed_join(observe, iterate, observe_reports)),
            ],
            cfg["join_reps"],
            cfg["large_warmup"] and 1,  # the correctness checks above already ran every variant once
            collect=True,
        )
        print(
            f"  4. join explosion ({access}): {cfg['join_reps']} reps x 3 variants in {time.perf_counter() - t0:.1f}s",
            file=sys.stderr,
        )
        for mode, reports in (("patch", patch_reports), ("observe", observe_reports)):
            reports = reports[-len(samples[mode]) :]  # drop the warm-up runs
            stats = compare(samples["raw"], samples[mode])
            last = reports[-1]
            out["variants"].append(
                {
                    "access": access,
                    "mode": mode,
                    "reps": cfg["join_reps"],
                    **stats,
                    "cpu": compare(cpu["raw"], cpu[mode]),
                    "detect_us_median": statistics.median(r.detect_us for r in reports),
                    "patch_ms_median": None
                    if last.patch_ms is None
                    else statistics.median(r.patch_ms for r in reports),
                    "trigger": last.trigger,
                    "action": last.action,
                    "rows_served": last.final_rows,
                    "samples_raw_ns": samples["raw"],
                    "samples_guarded_ns": samples[mode],
                    "cpu_samples_raw_ns": cpu["raw"],
                    "cpu_samples_guarded_ns": cpu[mode],
                }
            )
    return out


# --------------------------------------------------------------------------------------------------
# Workload 5: peak memory while streaming a 10M-row result (one subprocess per case)
# --------------------------------------------------------------------------------------------------


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def memory_child(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs in a fresh interpreter: stream ``rows`` rows through raw or guarded sqlite3, report peak RSS."""
    rows, cap, use_tracemalloc = spec["rows"], spec["row_cap"], spec.get("tracemalloc", False)
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE k (i INTEGER PRIMARY KEY)")
    con.executemany("INSERT INTO k VALUES (?)", ((i,) for i in range(max(1000, rows // 1000))))
    con.commit()
    # Distinct integers 0 .. rows-1, produced by a cross join (faster than a recursive CTE).
    sql = "SELECT a.i * 1000 + b.i FROM k AS a, k AS b WHERE a.i < ? AND b.i < 1000"
    params = (rows // 1000,)
    if cap is not None:
        guarded = guarded_sqlite.connect(":memory:", guard=GuardPolicy(mode=spec.get("mode", "patch"), row_cap=cap))
        con.backup(target=guarded)
        con.close()
        con = guarded
    gc.collect()
    baseline_kb = _status_kb("VmRSS")
    hwm_reset = False
    try:
        with open("/proc/self/clear_refs", "w") as f:  # resets VmHWM to the current RSS
            f.write("5")
        hwm_reset = _status_kb("VmHWM") is not None
    except OSError:
        pass
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if use_tracemalloc:
        import tracemalloc

        tracemalloc.start()
    started = time.perf_counter()
    cur = con.cursor()
    cur.execute(sql, params)
    count = total = 0
    for row in cur:
        count += 1
        total += row[0]
    elapsed = time.perf_counter() - started
    traced_peak = None
    if use_tracemalloc:
        import tracemalloc

        traced_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    if hwm_reset:
        peak_kb = _status_kb("VmHWM")
        method = "VmHWM after clear_refs"
    else:
        peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        method = "ru_maxrss (growth over pre-query high-water mark; underestimates)"
        baseline_kb = max(baseline_kb or 0, maxrss_before)
    report = getattr(cur, "guard_report", None)
    return {
        **spec,
        "rows_counted": count,
        "sum_ok": total == rows * (rows - 1) // 2,
        "all_rows": count == rows,
        "seconds": elapsed,
        "baseline_rss_kb": baseline_kb,
        "peak_rss_kb": peak_kb,
        "peak_above_baseline_kb": None if peak_kb is None or baseline_kb is None else peak_kb - baseline_kb,
        "method": method,
        "tracemalloc_peak_bytes": traced_peak,
        "guard_note": None if report is None else report.note,
        "guard_probed": None if report is None else report.probed,
    }


def run_memory(cfg: dict[str, Any], use_tracemalloc: bool) -> list[dict[str, Any]]:
    big = cfg["mem_rows"]
    cases: list[dict[str, Any]] = [
        {"name": "raw sqlite3", "rows": big, "row_cap": None},
        {"name": "guarded patch, row_cap=100,000", "rows": big, "row_cap": 100_000},
        {"name": "guarded patch, row_cap=10,000", "rows": big, "row_cap": 10_000},
        {"name": "guarded patch, row_cap=100,000, 10x fewer rows", "rows": big // 10, "row_cap": 100_000},
    ]
    if cfg["mem_default_cap"]:
        cases.append({"name": "guarded patch, default row_cap=1,000,000", "rows": big, "row_cap": 1_000_000})
    results = []
    for case in cases:
        for traced in (False, True) if use_tracemalloc else (False,):
            spec = {**case, "tracemalloc": traced}
            t0 = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--memory-child", json.dumps(spec)],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                raise SystemExit(f"memory case {case['name']} failed:\n{proc.stderr}")
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            if not (result["all_rows"] and result["sum_ok"]):
                raise SystemExit(f"memory case {case['name']}: rows lost: {result}")
            results.append(result)
            print(
                f"  5. memory: {case['name']}{' (tracemalloc)' if traced else ''}: {time.perf_counter() - t0:.1f}s",
                file=sys.stderr,
            )
    return results


def memory_verdict(mem: list[dict[str, Any]]) -> dict[str, Any]:
    """Is the guarded peak bounded by the cap (flat in result size, growing with the cap)?"""
    plain = [m for m in mem if not m["tracemalloc"]]
    by = {(m["rows"], m["row_cap"]): m["peak_above_baseline_kb"] for m in plain}
    big = max(m["rows"] for m in plain)
    raw_kb = by[(big, None)]
    cap100k_big, cap100k_small = by[(big, 100_000)], by[(big // 10, 100_000)]
    cap10k = by[(big, 10_000)]
    extra_100k = cap100k_big - raw_kb
    extra_10k = cap10k - raw_kb
    flat = abs(cap100k_big - cap100k_small) <= max(2048, 0.2 * cap100k_big)
    scales = extra_10k < extra_100k
    return {
        "guarded_extra_kb_cap100k": extra_100k,
        "guarded_extra_kb_cap10k": extra_10k,
        "bytes_per_buffered_row_cap100k": extra_100k * 1024 / 100_000,
        "flat_in_result_size": flat,
        "grows_with_cap": scales,
        "met": flat and scales,
    }


# --------------------------------------------------------------------------------------------------
# Machine description and output
# --------------------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "?"

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=HERE.parent, capture_output=True, text=True, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    dirty = git("status", "--porcelain", "--", "guarded_sqlite")
    # The library may be edited between runs: fingerprint the source that was actually measured.
    digest = hashlib.sha256()
    package = Path(guarded_sqlite.__file__).resolve().parent
    for source in sorted(package.rglob("*.py")):
        digest.update(str(source.relative_to(package)).encode() + b"\0" + source.read_bytes())
    return {
        "cpu_model": cpu,
        "cpu_count": os.cpu_count(),
        "cpus_usable": affinity,
        "python": sys.version.split()[0],
        "python_impl": platform.python_implementation(),
        "platform": platform.platform(),
        "sqlite": sqlite3.sqlite_version,
        "guarded_sqlite": guarded_sqlite.__version__,
        "wrapt": version("wrapt"),
        "sqlglot": version("sqlglot"),
        "git_commit": git("rev-parse", "--short", "HEAD"),
        "library_has_uncommitted_changes": bool(dirty),
        "library_source_sha256": digest.hexdigest()[:12],
        "note": "shared, noisy machine: other tenants' jobs run concurrently; trust the per-pair ratios "
        "more than absolute times, and compare runs to see the noise",
    }


def loadavg() -> str | None:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return None


def fmt_time(ns: float, unit: str) -> str:
    if unit == "µs":
        return f"{ns / 1_000:.2f} µs"
    return f"{ns / 1_000_000:.1f} ms"


def fmt_us(us: float) -> str:
    return f"{us:,.0f}" if abs(us) >= 1000 else f"{us:.2f}"


def render(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [
        "## Machine",
        "",
        f"- CPU: {m['cpu_model']}, {m['cpu_count']} cores ({m['cpus_usable']} usable by this process)",
        f"- Python {m['python']} ({m['python_impl']}), SQLite {m['sqlite']}, {m['platform']}",
        f"- guarded_sqlite {m['guarded_sqlite']} (git {m['git_commit']}"
        f"{', library files modified in the working tree' if m['library_has_uncommitted_changes'] else ''};"
        f" source fingerprint {m['library_source_sha256']}),"
        f" wrapt {m['wrapt']}, sqlglot {m['sqlglot']}",
        f"- Load average at start / end: {result['loadavg_start']} / {result['loadavg_end']}",
        f"- Note: {m['note']}.",
        f"- Run: {'--quick' if result['quick'] else 'full'}, {result['runtime_s']:.0f} s in total.",
        "",
        "## Overhead (raw sqlite3 vs guarded, same connection, interleaved)",
        "",
        "Wall-clock times (`perf_counter_ns`), medians per query; ratio is the median of per-repetition"
        " guarded/raw ratios; overhead is guarded median - raw median, per query.",
        "",
        "| workload | raw | guarded | ratio | overhead µs | target | met? |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for w in result["workloads"]:
        name = f"{w['label']}, {w['access']}, {w['mode']}"
        lines.append(
            f"| {name} | {fmt_time(w['raw_median_ns'], w['unit'])} | {fmt_time(w['guarded_median_ns'], w['unit'])} "
            f"| {w['ratio_median']:.3f} | {fmt_us(w['overhead_us'])} | {w['target']} |"
            f" {'yes' if w['met'] else '**NO**'} |"
        )
    j = result["join"]
    for v in j["variants"]:
        extra = f"{v['action']}, {v['rows_served']:,} rows served"
        lines.append(
            f"| 4. 1M-row join explosion, {v['access']}, {v['mode']} ({extra}) | {fmt_time(v['raw_median_ns'], 'ms')} "
            f"| {fmt_time(v['guarded_median_ns'], 'ms')} | {v['ratio_median']:.3f} | {fmt_us(v['overhead_us'])} |"
            " (report only) | - |"
        )
    scan = {(w["access"], w["mode"]): w for w in result["workloads"] if w["workload"] == "scan100k"}
    if ("fetchall", "patch") in scan and ("iterate", "patch") in scan:
        raw_fetchall = scan[("fetchall", "patch")]["cpu"]["raw_median_ns"]
        raw_iterate = scan[("iterate", "patch")]["cpu"]["raw_median_ns"]
        guarded_iterate = scan[("iterate", "patch")]["cpu"]["guarded_median_ns"]
        lines += [
            "",
            "Fetch-once floor for workload 3 (CPU-time medians): raw fetchall / raw iterate ="
            f" {raw_fetchall / raw_iterate:.3f};"
            f" guarded iterate (patch) / raw fetchall = {guarded_iterate / raw_fetchall:.3f}. The guard materialises"
            " every row before serving the first, so guarded iteration cannot be cheaper than raw fetchall.",
        ]
    rr, imp = result.get("report_read"), result.get("import")
    if rr:
        rep, alt = rr["repeated"], rr["alternating"]
        lines += [
            "",
            f"First read of `cur.guard_report` after a point query: +{rep['extra_us']:.2f} µs"
            f" (CPU +{rep['extra_cpu_us']:.2f} µs; target {rr['target']}: {'yes' if rep['met'] else '**NO**'}) when"
            " the statement repeats with the same facts (the report is reused); with new facts every time (two"
            f" statement texts in turn, every read builds a report) +{alt['extra_us']:.2f} µs"
            f" (CPU +{alt['extra_cpu_us']:.2f} µs; {'yes' if alt['met'] else '**NO**'}).",
        ]
    if imp:
        lines += [
            "",
            f"`import guarded_sqlite` in a fresh interpreter: {imp['guarded_sqlite_ms']:.1f} ms against"
            f" {imp['sqlite3_ms']:.1f} ms for `import sqlite3` (medians of {imp['runs']} alternating runs):"
            f" +{imp['extra_ms']:.1f} ms (target {imp['target']}: {'yes' if imp['met'] else '**NO**'});"
            f" `-X importtime` cumulative: {imp['importtime_guarded_sqlite_ms']} ms"
            f" vs {imp['importtime_sqlite3_ms']} ms.",
        ]
    lines += [
        "",
        "### Spread (interquartile ranges, to judge the noise)",
        "",
        "| workload | reps | raw p25-p75 | guarded p25-p75 | ratio p25-p75 |",
        "|---|---:|---:|---:|---:|",
    ]
    for w in result["workloads"] + [dict(v, label="4. 1M-row join explosion", unit="ms") for v in j["variants"]]:
        u = w["unit"]
        lines.append(
            f"| {w['label']}, {w['access']}, {w['mode']} | {w['reps']} "
            f"| {fmt_time(w['raw_p25_ns'], u)} - {fmt_time(w['raw_p75_ns'], u)} "
            f"| {fmt_time(w['guarded_p25_ns'], u)} - {fmt_time(w['guarded_p75_ns'], u)} "
            f"| {w['ratio_p25']:.3f} - {w['ratio_p75']:.3f} |"
        )
    lines += [
        "",
        "### Cross-check in CPU time (`time.thread_time_ns`, same samples)",
        "",
        "Thread CPU time does not advance while the process waits for a CPU, so it is immune to other"
        " tenants' jobs preempting this one (not to their cache and memory-bandwidth pressure). Where wall"
        " and CPU figures disagree, the machine was contended during the wall-clock samples.",
        "",
        "| workload | raw CPU | guarded CPU | ratio | overhead µs | target | met? |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for w in result["workloads"]:
        c = w["cpu"]
        lines.append(
            f"| {w['label']}, {w['access']}, {w['mode']} | {fmt_time(c['raw_median_ns'], w['unit'])} "
            f"| {fmt_time(c['guarded_median_ns'], w['unit'])} | {c['ratio_median']:.3f} | {fmt_us(c['overhead_us'])} "
            f"| {w['target']} | {'yes' if c['met'] else '**NO**'} |"
        )
    for v in j["variants"]:
        c = v["cpu"]
        lines.append(
            f"| 4. 1M-row join explosion, {v['access']}, {v['mode']} | {fmt_time(c['raw_median_ns'], 'ms')} "
            f"| {fmt_time(c['guarded_median_ns'], 'ms')} | {c['ratio_median']:.3f} | {fmt_us(c['overhead_us'])} |"
            " (report only) | - |"
        )
    cold = j["cold_first_patch"]
    lines += [
        "",
        f"## 4. Join explosion detail (`{j['sql']}`: {j['rows_raw']:,} rows, {j['distinct_rows']} distinct)",
        "",
        "| access | mode | raw | guarded total | detect (`detect_us`) | patch (`patch_ms`) | rest: buffering 1M rows,"
        " freeing them, proxy | action | rows served |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for v in j["variants"]:
        detect_ms = v["detect_us_median"] / 1_000
        patch_ms = v["patch_ms_median"] or 0.0
        rest = v["guarded_median_ns"] / 1e6 - detect_ms - patch_ms
        lines.append(
            f"| {v['access']} | {v['mode']} | {fmt_time(v['raw_median_ns'], 'ms')} |"
            f" {fmt_time(v['guarded_median_ns'], 'ms')} "
            f"| {detect_ms:.1f} ms | {'-' if v['patch_ms_median'] is None else f'{patch_ms:.1f} ms'} | {rest:.1f} ms "
            f"| {v['action']} | {v['rows_served']:,} |"
        )
    lines += [
        "",
        "First patch in the process"
        f" (cold{', sqlglot not yet imported' if not cold['sqlglot_imported_before'] else ''}):"
        f" {cold['total_ns'] / 1e6:.1f} ms total, of which patch {cold['patch_ms']:.1f} ms and detect"
        f" {cold['detect_us'] / 1000:.1f} ms (`patch_ms` does not include the sqlglot import, which happens before its"
        " clock starts).",
        "",
    ]
    mem = result["memory"]
    if not mem:
        return "\n".join(lines) + "\n"
    lines += [
        "## 5. Peak memory while streaming row by row (fresh subprocess per case)",
        "",
        "| case | result rows | rows counted (sum ok) | peak RSS above baseline | peak RSS | tracemalloc peak | time |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    by_case: dict[str, dict[str, Any]] = {}
    for r in mem:
        entry = by_case.setdefault(r["name"], {})
        entry["traced" if r["tracemalloc"] else "plain"] = r
    for name, entry in by_case.items():
        r = entry["plain"]
        traced = entry.get("traced")
        tm = "-" if traced is None else f"{traced['tracemalloc_peak_bytes'] / 2**20:.2f} MiB"
        lines.append(
            f"| {name} | {r['rows']:,} | {r['rows_counted']:,} ({'yes' if r['sum_ok'] else 'NO'}) "
            f"| {r['peak_above_baseline_kb'] / 1024:.1f} MiB | {r['peak_rss_kb'] / 1024:.1f} MiB | {tm} |"
            f" {r['seconds']:.2f} s |"
        )
    v = result["memory_verdict"]
    lines += [
        "",
        f"Peak measured as {mem[0]['method']}. Guarded extra peak over raw: {v['guarded_extra_kb_cap100k'] / 1024:.1f}"
        " MiB at"
        f" row_cap=100,000 (~{v['bytes_per_buffered_row_cap100k']:.0f} bytes per buffered row),"
        f" {v['guarded_extra_kb_cap10k'] / 1024:.1f} MiB at row_cap=10,000."
        f" Flat in result size: {'yes' if v['flat_in_result_size'] else 'NO'};"
        f" grows with the cap: {'yes' if v['grows_with_cap'] else 'NO'};"
        f" bounded by the cap: {'yes' if v['met'] else '**NO**'}.",
    ]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------


CONFIGS = {
    "full": {
        "point_batch": 400,
        "point_reps": 401,
        "range10_batch": 100,
        "range_batch": 20,
        "range_reps": 301,
        "import_runs": 21,
        "scan_reps": 41,
        "join_reps": 11,
        "large_warmup": 2,
        "mem_rows": 10_000_000,
        "mem_default_cap": True,
    },
    "quick": {
        "point_batch": 400,
        "point_reps": 61,
        "range10_batch": 100,
        "range_batch": 20,
        "range_reps": 61,
        "import_runs": 7,
        "scan_reps": 7,
        "join_reps": 3,
        "large_warmup": 0,
        "mem_rows": 2_000_000,
        "mem_default_cap": False,
    },
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and a 2M-row memory case (~25 s)")
    parser.add_argument("--json", metavar="OUT", help="also write every number (and the raw samples) to OUT")
    parser.add_argument(
        "--tracemalloc",
        action="store_true",
        help="also run each memory case under tracemalloc (exact Python-heap peak; ~10x slower)",
    )
    parser.add_argument("--skip-memory", action="store_true", help="skip workload 5")
    parser.add_argument(
        "--hot-path",
        action="store_true",
        help="only the hot-path section (bench_hotpath.py: raw, inline floor, bare subclass, connect(), wrap())",
    )
    parser.add_argument(
        "--guarded-sqlite", metavar="PATH", help="import guarded_sqlite from this checkout (before/after runs)"
    )
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.memory_child:
        print(json.dumps(memory_child(json.loads(args.memory_child))))
        return 0

    if args.hot_path:  # issue 44 item 4's figures alone: one run, before/after-able ratios
        import bench_hotpath

        hot = bench_hotpath.run(args.quick, False, [])
        print(bench_hotpath.render(hot))
        if args.json:
            Path(args.json).write_text(json.dumps(hot, indent=1, default=str) + "\n")
        return 0
    cfg = CONFIGS["quick" if args.quick else "full"]
    started = time.perf_counter()
    result: dict[str, Any] = {"machine": machine(), "quick": args.quick, "config": cfg, "loadavg_start": loadavg()}

    print("building the database ...", file=sys.stderr)
    raw = build_database()
    patch = guarded_sqlite.connect(":memory:", guard="patch")
    observe = guarded_sqlite.connect(":memory:", guard="observe")
    raw.backup(target=patch)  # connect()'s connections are sqlite3.Connection objects: no unwrap()
    raw.backup(target=observe)
    result["report_read"] = run_report_read(patch, cfg)
    result["import"] = run_import_time(cfg)

    result["workloads"] = run_healthy(raw, patch, observe, cfg)
    result["join"] = run_join(raw, patch, observe, cfg)
    raw.close()
    if args.skip_memory:
        result["memory"], result["memory_verdict"] = [], None
    else:
        result["memory"] = run_memory(cfg, args.tracemalloc)
        result["memory_verdict"] = memory_verdict(result["memory"])
    import bench_hotpath

    result["hot_path"] = bench_hotpath.run(args.quick, False, [])
    result["loadavg_end"] = loadavg()
    result["runtime_s"] = time.perf_counter() - started

    print(render(result))
    print(bench_hotpath.render(result["hot_path"]))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
