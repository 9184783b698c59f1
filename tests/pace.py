"""Time bounds that hold on a busy machine: a test's allowance for work scales with the machine's pace,
measured in the same run.

A test that bounds how long something takes (a timeout fires, a call is answered within its limit) has
two parts in its bound: the limit itself, which a clock enforces whatever the load (a 2 s statement
timeout ends at 2 s), and the overhead around it (killing and restarting a worker, thread hand-offs, a
round trip through a server), which is CPU work and takes longer when the test shares its cores with
other processes. A fixed second count for the overhead holds on an idle machine and fails on a busy CI
runner (issue 46 item 4: 3.1-5.3 s against 3.0 s at load 8-14).

``slowdown()`` measures how many wall-clock seconds one second of this thread's CPU work takes right now:
about 1 on an idle machine, about (runnable processes / cores) on a busy one. ``within()`` allows the
overhead times that factor, and measures it only when the idle bound is missed (the load that made the
call late is still there a moment later), so a test on an idle machine pays nothing for it and keeps
its idle bound. Where several processes work at once within the bounded time (calls arriving together,
workers killed and restarted), ``PaceMeter`` samples the pace all along instead, in short bursts on a
thread of its own, and its mean is passed to ``within()``.

On a very busy machine a bound grows with the load: it then tells a late answer from one that waited
for the others' limits added up (the defects these tests are about) less sharply, but it does not fail
for the load alone.
"""

from __future__ import annotations

import threading
import time

__all__ = ["PaceMeter", "allowance", "slowdown", "within"]


def slowdown(cpu_seconds: float = 0.05) -> float:
    """Wall-clock seconds per second of this thread's CPU time over ``cpu_seconds`` of pure-Python work,
    never below 1. The thread's own CPU clock (not the process's) so that the test's other threads, busy
    or idle, do not move it."""
    wall_started, cpu_started = time.perf_counter(), time.thread_time()
    while time.thread_time() - cpu_started < cpu_seconds:
        sum(range(2000))
    return max(1.0, (time.perf_counter() - wall_started) / (time.thread_time() - cpu_started))


def allowance(limit: float, overhead: float, pace: float) -> float:
    """The seconds allowed: the clock-enforced ``limit`` plus the CPU-bound ``overhead`` at ``pace``."""
    return limit + overhead * pace


def within(seconds: float, limit: float, overhead: float, pace: float = 1.0) -> bool:
    """``seconds <= limit + overhead x pace`` (``pace`` measured during the work, 1 by default), or, when
    that is missed, with ``overhead`` stretched by the ``slowdown()`` measured now."""
    if seconds <= allowance(limit, overhead, pace):
        return True
    return seconds <= allowance(limit, overhead, max(pace, slowdown()))


class PaceMeter:
    """Samples ``slowdown()`` in 10 ms bursts of CPU work every 100 ms on a daemon thread, from
    ``with`` to its end; ``pace`` is wall over CPU time summed over the bursts (1 at least). The bursts
    add about a tenth of a core of load, which the samples then include."""

    def __init__(self) -> None:
        self._wall = 0.0
        self._cpu = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            wall_started, cpu_started = time.perf_counter(), time.thread_time()
            while time.thread_time() - cpu_started < 0.01:
                sum(range(2000))
            self._wall += time.perf_counter() - wall_started
            self._cpu += time.thread_time() - cpu_started
            self._stop.wait(0.1)

    def __enter__(self) -> PaceMeter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def pace(self) -> float:
        return max(1.0, self._wall / self._cpu) if self._cpu else 1.0
