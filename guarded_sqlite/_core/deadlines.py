"""Time limits for statements, enforced from outside the statement by one watchdog thread.

Both SQLite and DuckDB can stop a running statement from another thread (``interrupt()``, a C call
that needs no lock). A Python progress handler would also work for SQLite, but it runs inside
SQLite with the connection's mutex held and then waits for the GIL: on a connection shared between
threads that can deadlock, and it replaces the caller's own handler. So every time limit, the
library's and the evaluator's, is a ``Deadline`` on one process-wide watchdog thread that calls the
connection's ``interrupt`` once the deadline passes.

Scheduling costs a heap push and, only when the new deadline is the earliest, one notify; a
``threading.Timer`` per statement would start a thread each time. ``Deadline.cancel()`` is final:
once it returns, the watchdog can no longer call that deadline's ``interrupt``.

A deadline can also repeat (``every=``): SQLite drops an ``interrupt()`` that lands while none of the
connection's statements runs (the guard's Python work between two statements), so a limit that must
hold for a whole call re-sends it until the call cancels it.

A call's limit also bounds the statements the guard runs for it (re-runs, copy checks, corrected
queries, candidates): ``call_deadline(seconds)`` marks the block, and ``time_left(limit)`` cuts each
guard statement's own limit to what the call has left.

An infinite time limit means no limit: ``interrupt_after(float("inf"), ...)`` registers nothing. The
thread serves every connection in the process, so no deadline may stop it: a wait longer than the
platform's timeouts allow is cut into shorter ones, and a NaN deadline is refused when scheduled.
"""

from __future__ import annotations

import contextlib
import contextvars
import heapq
import itertools
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

_raw_signal: Any
try:  # signal's functions without the enum conversions, which cost more than the rest of a check's setup
    import _signal as _raw_signal  # type: ignore[import-not-found,no-redef]
except ImportError:  # not CPython
    _raw_signal = signal

__all__ = ["Deadline", "call_deadline", "defer_keyboard_interrupt", "interrupt_after", "time_left"]

_LONGEST_WAIT = 3600.0
"""Most seconds the watchdog sleeps at once. ``Condition.wait`` raises OverflowError for timeouts past
the platform's limit (about 292 years, less on some systems), which would end the thread; waking once an
hour to find that a far deadline is still not due costs nothing."""


class Deadline:
    """One scheduled interrupt; ``fired`` tells whether it ran."""

    __slots__ = ("_at", "_every", "_interrupt", "_pending", "fired")

    def __init__(self, at: float, interrupt: Callable[[], None], every: float | None = None) -> None:
        self._at = at
        self._interrupt = interrupt
        self._every = every
        self._pending = True
        self.fired = False
        """True once the watchdog called ``interrupt``."""

    def cancel(self) -> None:
        """Make sure ``interrupt`` is not called from now on (it may already have been: see ``fired``)."""
        with _WATCHDOG.condition:
            self._pending = False
            # The watchdog's heap keeps a cancelled deadline until its time would have come (up to
            # rerun_timeout later): it must not keep the connection its interrupt belongs to alive.
            self._interrupt = _no_interrupt

    def __enter__(self) -> Deadline:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cancel()


def _no_interrupt() -> None:
    """A cancelled deadline's interrupt."""


class _Watchdog:
    """The thread behind every ``Deadline``: sleeps until the earliest one, fires what is due."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self._heap: list[tuple[float, int, Deadline]] = []
        self._sequence = itertools.count()
        self._wake_at: float | None = None  # when the thread plans to wake; None while it waits for work
        self._thread: threading.Thread | None = None

    def schedule(self, seconds: float, interrupt: Callable[[], None], every: float | None = None) -> Deadline:
        if math.isnan(seconds):
            raise ValueError("a deadline needs a number of seconds, not nan")
        if every is not None and not every > 0:
            raise ValueError(f"a repeating deadline needs a positive interval, not {every!r}")
        at = time.monotonic() + seconds
        deadline = Deadline(at, interrupt, every)
        with self.condition:
            # The thread starts on the first use whatever the deadline, so whether it runs never
            # depends on which kind of limit came first.
            started = self._thread is None
            if started:
                self._thread = threading.Thread(target=self._watch, name="guarded-sqlite-deadlines", daemon=True)
                self._thread.start()
            if at == math.inf:
                # No limit: nothing to schedule (an infinite wait would end the thread). A deadline
                # that is no longer pending behaves like one that never fires.
                deadline._pending = False
                return deadline
            heapq.heappush(self._heap, (at, next(self._sequence), deadline))
            if not started and (self._wake_at is None or at < self._wake_at):
                self.condition.notify()
        return deadline

    def _watch(self) -> None:
        heap = self._heap
        with self.condition:
            while True:
                now = time.monotonic()
                while heap and (not heap[0][2]._pending or heap[0][0] <= now):
                    _, _, deadline = heapq.heappop(heap)
                    if deadline._pending:
                        deadline.fired = True
                        if deadline._every is None:
                            deadline._pending = False
                        else:  # again later, until cancelled: the first may have landed between statements
                            deadline._at = now + deadline._every
                            heapq.heappush(heap, (deadline._at, next(self._sequence), deadline))
                        try:
                            deadline._interrupt()
                        except Exception:  # a closed connection cannot be interrupted; nothing to stop
                            pass
                self._wake_at = heap[0][0] if heap else None
                self.condition.wait(None if self._wake_at is None else wait_seconds(self._wake_at - now))

    def reset_after_fork(self) -> None:
        # The thread does not survive fork(); the child starts its own on first use.
        self.condition = threading.Condition()
        self._heap = []
        self._wake_at = None
        self._thread = None


_WATCHDOG = _Watchdog()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_WATCHDOG.reset_after_fork)


def wait_seconds(remaining: float) -> float:
    """How long the watchdog may sleep before a deadline ``remaining`` seconds away: at most
    ``_LONGEST_WAIT``, so the wait never overflows; it wakes, finds nothing due and sleeps again."""
    return min(remaining, _LONGEST_WAIT)


def interrupt_after(seconds: float, interrupt: Callable[[], None], *, every: float | None = None) -> Deadline:
    """Call ``interrupt()`` (e.g. ``connection.interrupt``) once ``seconds`` have passed, unless the
    returned deadline is cancelled first. Use it as a context manager around the statement. With
    ``every``, call it again every ``every`` seconds after that until cancelled.

    ``float("inf")`` means no limit: the deadline is returned without being scheduled and never fires.
    NaN raises ValueError."""
    return _WATCHDOG.schedule(seconds, interrupt, every)


_CALL_ENDS: contextvars.ContextVar[float | None] = contextvars.ContextVar("guarded_sqlite_call_ends", default=None)
"""When the enclosing ``call_deadline`` ends (``time.monotonic()``), or None outside one."""


@contextlib.contextmanager
def call_deadline(seconds: float) -> Iterator[None]:
    """Within the block, every statement the guard runs for itself is limited to what is left of
    ``seconds`` (see ``time_left``). Nested blocks keep the earlier end. The limit follows the context
    (thread or task) the block runs in, which is where the guard runs its statements."""
    if math.isnan(seconds):
        raise ValueError("a call deadline needs a number of seconds, not nan")
    ends = time.monotonic() + seconds
    outer = _CALL_ENDS.get()
    token = _CALL_ENDS.set(ends if outer is None else min(outer, ends))
    try:
        yield
    finally:
        _CALL_ENDS.reset(token)


def time_left(limit: float | None) -> float | None:
    """``limit`` (seconds, None for none) cut to what the enclosing ``call_deadline`` has left; 0 or less
    once that has passed. Unchanged outside a call deadline."""
    ends = _CALL_ENDS.get()
    if ends is None or ends == math.inf:
        return limit
    left = ends - time.monotonic()
    return left if limit is None else min(limit, left)


_SIGINT = int(signal.SIGINT)


@contextlib.contextmanager
def defer_keyboard_interrupt(interrupt: Callable[[], None]) -> Iterator[None]:
    """Hold Ctrl-C back until the block has undone its state changes, then deliver it.

    A SIGINT that arrives inside the block calls ``interrupt()`` (stopping the guard's statement as
    soon as Python runs again) and is re-delivered to the program's own handler when the block
    exits, so the caller's KeyboardInterrupt is never swallowed and never lands half-way through a
    ``finally`` that restores the connection. Signals reach Python only in the main thread, so
    elsewhere (and when SIGINT is ignored or not handled by Python) this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = _raw_signal.getsignal(_SIGINT)
    if not callable(previous):
        yield
        return
    received: list[FrameType | None] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        received.append(frame)
        try:
            interrupt()
        except Exception:  # a closed connection has nothing left to stop
            pass

    _raw_signal.signal(_SIGINT, hold)
    try:
        yield
    finally:
        _raw_signal.signal(_SIGINT, previous)
        if received:
            previous(signal.SIGINT, received[0])
