#!/usr/bin/env python
"""The hot path of issue 44 item 4: what a healthy small result and a flagged explosion cost through
``guarded_sqlite.connect()`` and ``wrap()``, against plain sqlite3 and two references, in one run.

    .venv/bin/python benchmarks/bench_hotpath.py [--quick] [--json OUT] [--guarded-sqlite PATH]
    .venv/bin/python benchmarks/bench_hotpath.py --instructions [--guarded-sqlite PATH]   # callgrind, ~5 min

``bench_overhead.py`` runs the same section (``--hot-path`` runs it alone). ``--guarded-sqlite PATH``
imports the package from another checkout (``git worktree add /tmp/main main``, or ``git archive``), so
two versions run back to back with the same script: that is how the before/after figures are made.

Variants, all on in-memory copies of one database, interleaved per repetition (rotating order):

* ``raw``: plain ``sqlite3``.
* ``inline floor``: the guard's irreducible work written inline in the timed loop (a cursor, execute,
  ``fetchmany(16)``, the length check, ``hash()`` of the one row, a 16-field tuple for the report): what
  a guard with no Python frames of its own would cost.
* ``bare subclass``: a ``sqlite3.Connection`` subclass whose ``execute``/``cursor`` and a
  ``sqlite3.Cursor`` subclass whose ``execute``/``fetchone``/``fetchall`` are Python methods calling
  sqlite3's own, nothing else: the structural price of a drop-in that intercepts those calls.
* ``connect()`` and ``wrap()`` (of a plain ``sqlite3`` connection), default policy (``"patch"``).

Workloads: the point query by primary key as ``con.execute(sql, p).fetchall()`` and as ``cur.execute(sql,
p); cur.fetchone()`` on one reused cursor (batches of 400), 10 rows by ``con.execute().fetchall()``
(batches of 100), and the 1M-row join explosion of bench_overhead.py (``SELECT a.grp FROM a, b``: flagged;
under the default preset the join-copy check runs and 1,000 rows are served) by
``con.execute().fetchall()``. Reported: medians of per-repetition ratios to raw (wall clock, and thread CPU
time as a cross-check), and the micro-steps of the guarded point query, each replayed alone with
``timeit`` (minimum of short repeats).

``--instructions`` counts CPU instructions instead (valgrind's callgrind, which is deterministic and does
not care what else runs on the machine): every variant runs its workload N times and 0 times in child
processes under callgrind (``PYTHONHASHSEED=0``); the difference / N is the count per query. Its database
holds 2,000 rows (the B-tree one level shallower than the timed runs' 100,000), and it skips the explosion.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _import_path(argv: list[str]) -> None:
    """``--guarded-sqlite PATH``: put another checkout first on sys.path, before anything imports the package."""
    if "--guarded-sqlite" in argv:
        sys.path.insert(0, str(Path(argv[argv.index("--guarded-sqlite") + 1]).resolve()))


_import_path(sys.argv)

import guarded_sqlite  # noqa: E402

perf_ns = time.perf_counter_ns
cpu_ns = time.thread_time_ns

POINT_SQL = "SELECT id, n, s FROM t WHERE id = ?"
RANGE10_SQL = "SELECT id, n, s FROM t WHERE id BETWEEN ? AND ?"
JOIN_SQL = "SELECT a.grp FROM a, b"

_execute = sqlite3.Cursor.execute
_fetchall = sqlite3.Cursor.fetchall
_fetchone = sqlite3.Cursor.fetchone
_cursor = sqlite3.Connection.cursor


class BareCursor(sqlite3.Cursor):
    """A drop-in cursor that intercepts execute and the fetches, and does nothing else."""

    def execute(self, sql: str, parameters: Any = (), /) -> BareCursor:  # type: ignore[override]
        _execute(self, sql, parameters)
        return self

    def fetchone(self) -> Any:
        return _fetchone(self)

    def fetchall(self) -> list[Any]:
        return _fetchall(self)


class BareConnection(sqlite3.Connection):
    """Its connection: ``cursor()`` and ``execute()`` in Python, making ``BareCursor`` objects."""

    def cursor(self, factory: Any = BareCursor) -> Any:  # type: ignore[override]
        return _cursor(self, factory)

    def execute(self, sql: str, parameters: Any = (), /) -> BareCursor:  # type: ignore[override]
        return _cursor(self, BareCursor).execute(sql, parameters)


def fill(con: sqlite3.Connection, rows: int, join_side: int) -> None:
    con.executescript(
        "CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER, s TEXT);"
        "CREATE TABLE a (id INTEGER PRIMARY KEY, grp TEXT);"
        "CREATE TABLE b (id INTEGER PRIMARY KEY, x INTEGER);"
    )
    rng = random.Random(1)
    con.executemany(
        "INSERT INTO t VALUES (?, ?, ?)",
        ((i, rng.randrange(1_000_000), f"row-{i:06d}-{rng.randrange(10**6):06d}") for i in range(rows)),
    )
    con.executemany("INSERT INTO a VALUES (?, ?)", ((i, f"group-{i % 10}") for i in range(join_side)))
    con.executemany("INSERT INTO b VALUES (?, ?)", ((i, i * 3) for i in range(join_side)))
    con.commit()


def connections(rows: int, join_side: int) -> dict[str, Any]:
    """The variants' connections, each on its own in-memory copy of one database."""
    source = sqlite3.connect(":memory:")
    fill(source, rows, join_side)
    made: dict[str, Any] = {"raw": source}
    made["bare subclass"] = sqlite3.connect(":memory:", factory=BareConnection)
    made["connect()"] = guarded_sqlite.connect(":memory:")
    plain = sqlite3.connect(":memory:")
    for name in ("bare subclass", "connect()"):
        source.backup(made[name])
    source.backup(plain)
    made["wrap()"] = guarded_sqlite.wrap(plain)
    made["inline floor"] = made["raw"]  # the floor's work is in its loop, on raw's connection
    return made


# --------------------------------------------------------------------------------------------------
# Workloads: each takes the variant's name and connection and returns the loop to time
# --------------------------------------------------------------------------------------------------


def point_fetchall(name: str, con: Any, params: list[tuple[int]]) -> Callable[[], None]:
    if name == "inline floor":

        def floor() -> None:
            for p in params:
                cur = con.cursor()
                cur.execute(POINT_SQL, p)
                rows = cur.fetchmany(16)
                if len(rows) == 1:
                    hash(rows[0])
                    state = ("patch", POINT_SQL, POINT_SQL, None, "none", 1, 1, 1, None, None, (), 0, None, None)
                    del state

        return floor

    def run() -> None:
        for p in params:
            con.execute(POINT_SQL, p).fetchall()

    return run


def point_fetchone(name: str, con: Any, params: list[tuple[int]]) -> Callable[[], None]:
    cur = con.cursor()
    if name == "inline floor":

        def floor() -> None:
            for p in params:
                cur.execute(POINT_SQL, p)
                rows = cur.fetchmany(16)
                if len(rows) == 1:
                    hash(rows[0])
                    state = ("patch", POINT_SQL, POINT_SQL, None, "none", 1, 1, 1, None, None, (), 0, None, None)
                    del state

        return floor

    def run() -> None:
        for p in params:
            cur.execute(POINT_SQL, p)
            cur.fetchone()

    return run


def range10(name: str, con: Any, params: list[tuple[int, int]]) -> Callable[[], None]:
    if name == "inline floor":

        def floor() -> None:
            for p in params:
                cur = con.cursor()
                cur.execute(RANGE10_SQL, p)
                rows = cur.fetchmany(16)
                started = perf_ns()
                if len(set(rows)) == len(rows):
                    state = (
                        "patch",
                        RANGE10_SQL,
                        RANGE10_SQL,
                        None,
                        "none",
                        10,
                        10,
                        10,
                        None,
                        None,
                        (),
                        perf_ns() - started,
                    )
                    del state

        return floor

    def run() -> None:
        for p in params:
            con.execute(RANGE10_SQL, p).fetchall()

    return run


def explosion(name: str, con: Any, _params: Any) -> Callable[[], None]:
    def run() -> None:
        con.execute(JOIN_SQL).fetchall()

    return run


WORKLOADS: dict[str, tuple[str, Callable[..., Callable[[], None]], tuple[str, ...]]] = {
    # key: (label, loop maker, variants)
    "point": (
        "1 row, con.execute().fetchall()",
        point_fetchall,
        ("raw", "inline floor", "bare subclass", "connect()", "wrap()"),
    ),
    "fetchone": (
        "1 row, reused cursor: execute; fetchone()",
        point_fetchone,
        ("raw", "inline floor", "bare subclass", "connect()", "wrap()"),
    ),
    "range10": (
        "10 rows, con.execute().fetchall()",
        range10,
        ("raw", "inline floor", "bare subclass", "connect()", "wrap()"),
    ),
    "explosion": (
        "1M-row join explosion, flagged, con.execute().fetchall()",
        explosion,
        ("raw", "connect()", "wrap()"),
    ),
}
TARGETS = {
    # (workload, variant): (what, bound, relative to); the item 4
    ("point", "connect()"): ("within 0.05x of the bare subclass", 0.05, "bare subclass"),
    ("point", "wrap()"): ("<= 1.8x", 1.8, None),
    ("explosion", "connect()"): ("<= 2.5x", 2.5, None),
}


def params_for(key: str, batch: int, rows: int) -> list[Any]:
    rng = random.Random(7)
    if key in ("point", "fetchone"):
        return [(rng.randrange(rows),) for _ in range(batch)]
    if key == "range10":
        starts = [rng.randrange(rows - 10) for _ in range(batch)]
        return [(lo, lo + 9) for lo in starts]
    return []


def run_timed(cfg: dict[str, Any]) -> dict[str, Any]:
    cons = connections(cfg["rows"], cfg["join_side"])
    out: dict[str, Any] = {"workloads": {}}
    for key, (label, maker, variants) in WORKLOADS.items():
        if key == "explosion" and not cfg["explosion"]:
            continue
        batch = {"point": cfg["point_batch"], "fetchone": cfg["point_batch"], "range10": cfg["range_batch"]}.get(key, 1)
        params = params_for(key, batch, cfg["rows"])
        loops = {name: maker(name, cons[name], params) for name in variants}
        reps = cfg["explosion_reps"] if key == "explosion" else cfg["reps"]
        wall: dict[str, list[float]] = {name: [] for name in variants}
        cpu: dict[str, list[float]] = {name: [] for name in variants}
        for loop in loops.values():
            loop()
        t0 = time.perf_counter()
        names = list(variants)
        for rep in range(reps):
            order = names[rep % len(names) :] + names[: rep % len(names)]
            if (rep // len(names)) % 2:
                order.reverse()
            for name in order:
                if key == "explosion":
                    gc.collect()
                time.sleep(0.001)  # a fresh scheduler time slice (see bench_overhead.py)
                w0, c0 = perf_ns(), cpu_ns()
                loops[name]()
                c1, w1 = cpu_ns(), perf_ns()
                wall[name].append((w1 - w0) / max(batch, 1))
                cpu[name].append((c1 - c0) / max(batch, 1))
        print(f"  hot path, {label}: {reps} reps in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        out["workloads"][key] = {
            "label": label,
            "reps": reps,
            "variants": {
                name: {
                    "wall_ns": statistics.median(wall[name]),
                    "cpu_ns": statistics.median(cpu[name]),
                    "ratio": statistics.median(g / r for g, r in zip(wall[name], wall["raw"])),
                    "cpu_ratio": statistics.median(g / r for g, r in zip(cpu[name], cpu["raw"])),
                }
                for name in variants
            },
        }
        if key == "explosion":
            report = cons["connect()"].execute(JOIN_SQL).guard_report
            out["workloads"][key]["served"] = f"{report.action}, {report.final_rows:,} rows served"
    out["steps"] = micro_steps(cons, cfg["step_repeat"])
    return out


# --------------------------------------------------------------------------------------------------
# Micro-steps of the guarded point query
# --------------------------------------------------------------------------------------------------


def micro_steps(cons: dict[str, Any], repeat: int) -> list[dict[str, Any]]:
    """Each step of the guarded 1-row ``con.execute(sql, p).fetchall()`` replayed alone (ns per call)."""
    from guarded_sqlite._guard import decide
    from guarded_sqlite._io import sqlite_fast

    raw, gcon, wcon = cons["raw"], cons["connect()"], cons["wrap()"]
    gcur = gcon.execute(POINT_SQL, (5,))
    gcur.fetchall()
    wcur = wcon.execute(POINT_SQL, (5,))
    wcur.fetchall()
    rcur = raw.cursor()
    env: dict[str, Any] = {
        "raw": raw,
        "gcon": gcon,
        "wcon": wcon,
        "gcur": gcur,
        "wcur": wcur,
        "rcur": rcur,
        "sql": POINT_SQL,
        "p": (5,),
        "rows": [(5, 1, "row-000005-123456")],
        "guard": gcon._self_guard,
        "decide": decide,
        "sqlite_fast": sqlite_fast,
        "cursor_of": sqlite3.Connection.cursor,
        "G": sqlite_fast.GuardedSQLiteCursor,
        "perf_ns": perf_ns,
        "tail": getattr(sqlite_fast, "_tail", None),
        "state_fields": ("patch", POINT_SQL, POINT_SQL, None, "none", 1, 1, 1, None, None, (), 0, None, None, None, ()),
        "new_state": tuple.__new__,
        "ReportState": __import__("guarded_sqlite.report", fromlist=["ReportState"]).ReportState,
    }
    steps = [
        ("raw: con.execute(sql, p).fetchall()", "raw.execute(sql, p).fetchall()"),
        ("raw: con.cursor()", "raw.cursor()"),
        (
            "raw: cur.execute(sql, p); cur.fetchmany(16) (the guard's one fetch)",
            "rcur.execute(sql, p); rcur.fetchmany(16)",
        ),
        ("connect(): con.execute(sql, p).fetchall()", "gcon.execute(sql, p).fetchall()"),
        ("connect(): a GuardedSQLiteCursor (sqlite3 makes it)", "cursor_of(gcon, G)"),
        ("connect(): cur.execute(sql, p) on a reused cursor", "gcur.execute(sql, p)"),
        ("connect(): cur.fetchall() of the buffered row", "gcur._self_rows = rows; gcur.fetchall()"),
        ("decide.after_fetch, 1 row (quick lane)", "decide.after_fetch(gcur, gcur, guard, sql, p, rows, None, tail)"),
        ("hash() of the row", "hash(rows[0])"),
        ("perf_counter_ns() (the statement's start, for a check's budget)", "perf_ns()"),
        ("a ReportState by position (16 fields)", "new_state(ReportState, state_fields)"),
        ("wrap(): con.execute(sql, p).fetchall()", "wcon.execute(sql, p).fetchall()"),
        ("wrap(): cur.execute(sql, p) on a reused cursor proxy", "wcur.execute(sql, p)"),
        ("wrap(): read of a proxy attribute (wcur._self_guard)", "wcur._self_guard"),
        ("wrap(): read of __wrapped__", "wcur.__wrapped__"),
        ("wrap(): write of a proxy attribute", "wcur._self_rows = rows"),
        ("first guard_report read (built lazily)", "gcur._self_report = None; gcur.guard_report"),
    ]
    results = []
    for step, stmt in steps:
        timer = timeit.Timer(stmt, globals=env)
        estimate = timer.timeit(200) / 200
        number = max(50, int(0.0005 / max(estimate, 1e-9)))
        best = float("inf")
        for _ in range(repeat):
            time.sleep(0.001)
            best = min(best, timer.timeit(number) / number)
        results.append({"step": step, "ns": best * 1e9})
    return results


# --------------------------------------------------------------------------------------------------
# Instruction counts (callgrind)
# --------------------------------------------------------------------------------------------------


def child(variant: str, key: str, n: int) -> None:
    """Run one workload ``n`` times for one variant (under callgrind, started by ``instructions``)."""
    cons = connections(2_000, 10)
    params = params_for(key, n, 2_000)
    loop = WORKLOADS[key][1](variant, cons[variant], params)
    loop()


def _count(args: list[str]) -> int:
    """Instructions of one child run under callgrind (``PYTHONHASHSEED=0``: the same run every time)."""
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "cg.out"
        subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={target}", sys.executable, __file__, *args],
            env=dict(os.environ, PYTHONHASHSEED="0"), capture_output=True, check=True,
        )  # fmt: skip
        found = re.search(r"summary: (\d+)", target.read_text())
        assert found is not None, "no callgrind summary"
        return int(found.group(1))


def instructions(extra: list[str]) -> dict[str, Any]:
    """Per query: (instructions of N queries - of none) / N, N = 4,000; the run of none is the same for
    every variant of a workload (each child builds every connection), so it runs once per workload."""
    from concurrent.futures import ThreadPoolExecutor

    n = 4000
    out: dict[str, Any] = {"n": n, "workloads": {}}
    with ThreadPoolExecutor(2) as pool:  # two valgrinds at once: the machine's two cores
        for key in ("point", "fetchone", "range10"):
            label, _maker, variants = WORKLOADS[key]
            base = pool.submit(_count, ["--child", "raw", key, "0", *extra])
            runs = {name: pool.submit(_count, ["--child", name, key, str(n), *extra]) for name in variants}
            counts = {name: (run.result() - base.result()) / n for name, run in runs.items()}
            for name, count in counts.items():
                print(f"  instructions, {label}, {name}: {count:,.0f}", file=sys.stderr)
            out["workloads"][key] = {
                "label": label,
                "variants": {name: {"instructions": c, "ratio": c / counts["raw"]} for name, c in counts.items()},
            }
    return out


# --------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------


def render(result: dict[str, Any]) -> str:
    lines = [f"## Hot path (issue 44 item 4): {result['version']}", ""]
    if "timed" in result:
        timed = result["timed"]
        lines += [
            f"Wall clock, medians of per-repetition ratios to raw (thread CPU time in brackets); load average"
            f" {result['loadavg_start']} at the start, {result['loadavg_end']} at the end.",
            "",
            "| workload | raw | inline floor | bare subclass | connect() | wrap() |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for key, w in timed["workloads"].items():
            v = w["variants"]
            unit_ms = key == "explosion"
            raw = v["raw"]["wall_ns"]
            cells = [f"{raw / 1e6:.1f} ms" if unit_ms else f"{raw / 1e3:.2f} µs"]
            for name in ("inline floor", "bare subclass", "connect()", "wrap()"):
                cells.append(f"{v[name]['ratio']:.2f}x ({v[name]['cpu_ratio']:.2f}x)" if name in v else "-")
            lines.append(
                f"| {w['label']}{' (' + w['served'] + ')' if 'served' in w else ''} | " + " | ".join(cells) + " |"
            )
        lines += [
            "",
            "Targets, on wall-clock ratios and on CPU-time ratios of this run (on a busy machine a batch that"
            " is preempted inflates the wall-clock figure; CPU time does not count the wait):",
            "",
        ]
        for (key, name), (what, bound, relative) in TARGETS.items():
            if key not in timed["workloads"]:
                continue
            v = timed["workloads"][key]["variants"]
            label = timed["workloads"][key]["label"]
            for clock, field in (("wall", "ratio"), ("CPU", "cpu_ratio")):
                ratio = v[name][field]
                if relative is None:
                    verdict = "met" if ratio <= bound else "NOT met"
                    lines.append(f"- {label}, {name}, {clock}: {ratio:.2f}x raw, target {what}: {verdict}")
                else:
                    gap = ratio - v[relative][field]
                    verdict = "met" if gap <= bound else "NOT met"
                    lines.append(
                        f"- {label}, {name}, {clock}: {ratio:.2f}x raw, {relative} {v[relative][field]:.2f}x"
                        f" (gap {gap:+.2f}x), target {what}: {verdict}"
                    )
        lines += [
            "",
            "Micro-steps of the guarded point query, each replayed alone (ns per call, minimum of short repeats):",
            "",
        ]
        lines += ["| step | ns |", "|---|---:|"]
        lines += [f"| {s['step']} | {s['ns']:.0f} |" for s in timed["steps"]]
    if "instructions" in result:
        ins = result["instructions"]
        lines += [
            "",
            f"CPU instructions per query (callgrind, {ins['n']:,} queries minus none; ratio to raw in brackets):",
            "",
            "| workload | raw | inline floor | bare subclass | connect() | wrap() |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for w in ins["workloads"].values():
            v = w["variants"]
            cells = [f"{v['raw']['instructions']:,.0f}"]
            for name in ("inline floor", "bare subclass", "connect()", "wrap()"):
                cells.append(f"{v[name]['instructions']:,.0f} ({v[name]['ratio']:.2f}x)")
            lines.append(f"| {w['label']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


CONFIGS = {
    "full": {"rows": 100_000, "join_side": 1000, "point_batch": 400, "range_batch": 100, "reps": 301,
             "explosion": True, "explosion_reps": 11, "step_repeat": 100},
    "quick": {"rows": 100_000, "join_side": 1000, "point_batch": 400, "range_batch": 100, "reps": 61,
              "explosion": True, "explosion_reps": 3, "step_repeat": 20},
}  # fmt: skip


def version() -> str:
    where = Path(guarded_sqlite.__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "no git"
    return f"guarded_sqlite from {where} ({commit})"


def run(quick: bool, count_instructions: bool, extra: list[str]) -> dict[str, Any]:
    result: dict[str, Any] = {"version": version(), "loadavg_start": _loadavg()}
    if count_instructions:
        result["instructions"] = instructions(extra)
    else:
        result["timed"] = run_timed(CONFIGS["quick" if quick else "full"])
    result["loadavg_end"] = _loadavg()
    return result


def _loadavg() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (~30 s)")
    parser.add_argument("--instructions", action="store_true", help="count instructions under callgrind instead")
    parser.add_argument("--json", metavar="OUT")
    parser.add_argument("--guarded-sqlite", metavar="PATH", help="import guarded_sqlite from this checkout")
    parser.add_argument("--render", metavar="JSON", help="print the report of an earlier run's --json output")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.render:
        print(render(json.loads(Path(args.render).read_text())))
        return 0
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return 0
    extra = ["--guarded-sqlite", args.guarded_sqlite] if args.guarded_sqlite else []
    result = run(args.quick, args.instructions, extra)
    print(render(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
