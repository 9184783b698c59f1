"""An agent tool's database in a worker process, so that a call past its time limit can always be stopped.

SQLite sees ``interrupt()`` only between steps of its virtual machine: a single function call such as
``instr()`` over two long strings (its cost is haystack x needle) runs to its end whatever the time
limit, and holds the tool's lock all along. Bounding value sizes does not bound that time. What always
stops a statement is ending the process that runs it.

``IsolatedDatabase`` is a ``GuardedDatabase`` whose database lives in a child process
(``guarded_sqlite.agent._worker``, imported from the folder this process imported the package from). The
child opens the file with ``GuardedDatabase.open`` and the same options, so everything that object
enforces (the lockdown, the limits while fetching, the in-process deadline) applies there unchanged; it
answers one request at a time. A call's limit counts from its arrival: it waits for the child (other
calls using it, a new child opening) within that limit or is refused as ``busy``, and the parent waits
for an answer until ``timeout + KILL_GRACE`` seconds after the arrival; past that it kills the child,
starts a fresh one and refuses the call as a timeout. In the child the in-process limit (what is left of
the call's) acts first, so a statement that can be interrupted ends with a refusal and the child lives
on; only the rest cost a restart.

A child that dies while running a statement (a crash inside the database library) is restarted the
same way and the call is refused with the reason; one that died between calls is replaced by the next
call, which it then serves. A child that cannot open the database is ended and the call refused as
``unavailable`` with the reason; a later call starts another, once the back-off since the last attempt
has passed (``RETRY_BACKOFF``). The child's ``TMPDIR`` is a folder of its own that the parent removes
when the child ends, so a killed child's temporary files (DuckDB's spill) do not stay behind.

Messages are pickles over two pipes (``multiprocessing.connection.Connection``), written only by this
module on both sides; the child's stdout is not used, so an MCP server's stdio stays its own.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._calls import ENGINE_MEMORY, QueryRefused, QueryResult, busy_refusal, worker_memory_allowance
from ._database import GuardedDatabase
from ._postgres_session import RETRY_BACKOFF
from .schema_info import SchemaInfo

__all__ = ["KILL_GRACE", "READY_TIMEOUT", "SCRATCH_PREFIX", "IsolatedDatabase", "WorkerError"]

KILL_GRACE = 0.5
"""Seconds past the time limit the parent waits before it kills the worker: time for the child's own
interrupt to end the statement and answer with the usual refusal."""

SCRATCH_PREFIX = "guarded-sqlite-worker-"
"""How the name of the folder made for a worker's temporary files (its ``TMPDIR``) starts."""

READY_TIMEOUT = 60.0
"""Seconds a new worker may take to start and open the database before opening fails."""


class WorkerError(RuntimeError):
    """The worker failed in a way that is not a refusal: an unexpected exception in the child (its
    traceback is the message), or a worker that could not be started."""


class _Worker:
    """One child process and its two pipe ends; ``options`` are sent first, the answer comes later."""

    def __init__(self, options: dict[str, Any]) -> None:
        # The child's temporary files (DuckDB's spill) go to a folder of its own, removed when it ends
        # however it ends: a killed process cannot remove its own.
        self.scratch = tempfile.mkdtemp(prefix=SCRATCH_PREFIX)
        environment = {**os.environ, "TMPDIR": self.scratch, "SQLITE_TMPDIR": self.scratch}
        to_child_read, to_child_write = os.pipe()
        from_child_read, from_child_write = os.pipe()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _BOOT, _PACKAGE_ROOT, str(to_child_read), str(from_child_write)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(to_child_read, from_child_write),
                env=environment,
                # Ctrl-C in a terminal reaches the whole process group; the parent decides when the child ends.
                start_new_session=True,
            )
        except BaseException:
            os.close(to_child_write)
            os.close(from_child_read)
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise
        finally:
            os.close(to_child_read)
            os.close(from_child_write)
        from multiprocessing.connection import Connection  # here: the package is imported without it

        self.started = time.monotonic()
        self.requests = Connection(to_child_write, readable=False)
        self.answers = Connection(from_child_read, writable=False)
        self.ready: dict[str, Any] | None = None
        try:
            self.requests.send(options)
        except Exception as failure:  # a guard policy whose rescuer cannot be pickled, say
            self.kill()
            raise ValueError(
                f"these options cannot be sent to a worker process ({failure}); open with isolated=False"
            ) from None

    def wait_ready(self, timeout: float) -> dict[str, Any] | None:
        """The child's description once it has opened the database, or None when it has not within
        ``timeout`` seconds; raises what opening raised (the worker is then ended)."""
        if self.ready is None:
            if not self.answers.poll(_seconds(timeout)):
                return None
            try:
                kind, payload = self.answers.recv()
            except EOFError:
                self.kill()
                raise WorkerError(f"the database worker ended while opening ({self.ended()})") from None
            if kind != "ready":
                self.kill()
                raise _rebuild_error(payload)
            self.ready = payload
        return self.ready

    def alive(self) -> bool:
        return self.process.poll() is None

    def headroom(self) -> int | None:
        """Bytes the child may still map before its ``RLIMIT_DATA``, or None where /proc does not say.
        DuckDB's allocator keeps the address space a large statement used, so after one the child can
        be too close to its cap for the next call's Python objects."""
        try:
            status = Path(f"/proc/{self.process.pid}/status").read_text()
            limits = Path(f"/proc/{self.process.pid}/limits").read_text()
        except OSError:
            return None
        data = next((int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmData:")), None)
        cap = next((line.split()[3] for line in limits.splitlines() if line.startswith("Max data size")), None)
        if data is None or cap is None or not cap.isdigit():
            return None
        return int(cap) - data

    def ended(self) -> str:
        code = self.process.wait()
        if code < 0:
            try:
                return f"signal {signal.Signals(-code).name}"
            except ValueError:
                return f"signal {-code}"
        return f"exit status {code}"

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.requests.close()
        self.answers.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def close(self) -> None:
        try:
            self.requests.send(("close",))
            self.process.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
"""The folder this process imported ``guarded_sqlite`` from."""

_BOOT = (
    "import sys; root = sys.argv.pop(1); del sys.path[0]; "
    "sys.path.insert(0, root) if root not in sys.path else None; "
    "from guarded_sqlite.agent._worker import main; main(sys.argv[1:])"
)
"""The child's program: ``python -m`` would put the working directory first on ``sys.path``, so a
server started inside another checkout of the package ran that checkout's worker. The child drops
that entry and imports the package from where this process did."""


def _seconds(timeout: float) -> float | None:
    """``timeout`` as ``poll`` and ``acquire`` take it: None (no limit) for infinity."""
    return None if timeout == float("inf") else max(0.0, timeout)


def _rebuild_error(payload: tuple[str, str]) -> Exception:
    """The exception the child raised while opening, as the parent raises it."""
    name, message = payload
    if name == "PrivilegedAccount":
        from .privileges import PrivilegedAccount

        return PrivilegedAccount(message)
    if name == "ValueError":
        return ValueError(message)
    if name in ("ImportError", "ModuleNotFoundError"):
        return ImportError(message)
    if name == "TypeError":
        return TypeError(message)
    return WorkerError(message)


class IsolatedDatabase(GuardedDatabase):
    """``GuardedDatabase.open``'s object with the database in a worker process that is killed and
    restarted when a call outlasts ``timeout`` (see the module docstring). Made by
    ``GuardedDatabase.open(..., isolated=True)``, the default; ``query``, ``schema`` and ``close`` behave
    as ``GuardedDatabase``'s. ``connection`` is None: the connection is the child's."""

    # No defaults: ``open`` passes every option, and its defaults are the only ones (the child gets
    # these as they are, to pass them to ``open`` again).
    def __init__(
        self,
        path: str | Path,
        *,
        guard: Any,
        read_only: bool,
        allow_writes: bool,
        allow_privileged: bool,
        **limits: Any,
    ) -> None:
        self._options: dict[str, Any] = {
            "path": str(path),
            "guard": guard,
            "read_only": read_only,
            "allow_writes": allow_writes,
            "allow_privileged": allow_privileged,
            "limits": limits,
        }
        self._lock = threading.Lock()
        self.restarts = 0
        """How many times a worker was killed, died or failed to open, and another was started."""
        self._retry_at = 0.0
        self._backoff = 0.0
        self._failure = ""
        self._closed = False
        self._worker: _Worker | None = _Worker(self._options)
        description = self._worker.wait_ready(READY_TIMEOUT)
        if description is None:
            self._worker.kill()
            raise WorkerError(f"the database worker did not start within {READY_TIMEOUT:g} seconds")
        self.connection = None
        self.dialect = description["dialect"]
        self.allow_writes = allow_writes
        self.max_rows = description["max_rows"]
        self.max_chars = description["max_chars"]
        self.timeout = description["timeout"]
        self.value_limit = description["value_limit"]

    def close(self) -> None:
        """End the worker (which closes its connection)."""
        with self._lock:
            if self._worker is not None:
                self._worker.close()
                self._worker = None
            self._closed = True

    def query(self, sql: str, parameters: Any = (), *, time_limit: float | None = None) -> QueryResult:
        """``GuardedDatabase.query`` in the worker. The call's limit (``timeout``, or ``time_limit`` when
        shorter) counts from now: waiting for the worker (other calls, a worker starting) is part of it,
        and a call that cannot have the worker in time is refused as ``busy``. One still running
        ``KILL_GRACE`` seconds past its limit is refused as a timeout and the worker replaced."""
        limit = self.timeout if time_limit is None else min(self.timeout, time_limit)
        if limit <= 0:  # it waited its whole limit before it got here (the MCP SDK's thread pool)
            raise busy_refusal(self.timeout)
        give_up_at = time.monotonic() + limit + KILL_GRACE
        parameters = tuple(parameters)
        answer = self._call(lambda left: ("query", sql, parameters, left - KILL_GRACE), give_up_at, bounded=True)
        result: QueryResult = answer
        return result

    def schema(self) -> SchemaInfo:
        """``GuardedDatabase.schema`` in the worker: it waits for the worker as a query does, then runs
        without a time limit, as in process."""
        give_up_at = time.monotonic() + self.timeout + KILL_GRACE
        info: SchemaInfo = self._call(lambda left: ("schema",), give_up_at, bounded=False)
        return info

    def _call(self, make_request: Callable[[float], tuple[Any, ...]], give_up_at: float, *, bounded: bool) -> Any:
        if not self._lock.acquire(timeout=_lock_wait(give_up_at)):
            raise busy_refusal(self.timeout)
        try:
            if self._closed:
                raise WorkerError("the database is closed")
            worker = self._ready_worker(give_up_at)
            left = give_up_at - time.monotonic()
            if bounded and left <= KILL_GRACE:
                raise busy_refusal(self.timeout)
            try:
                worker.requests.send(make_request(left))
                answered = worker.answers.poll(_seconds(left) if bounded else None)
                reply = worker.answers.recv() if answered else None
            except (EOFError, OSError):
                reply, answered = None, True
            if reply is None:
                if answered:  # the pipe closed: the child died while running the statement
                    why = worker.ended()
                    self._replace()
                    raise QueryRefused(
                        "sql_error",
                        f"Refused: the database process ended while running this statement ({why}); it was "
                        "restarted. Avoid this statement or function.",
                    )
                self._replace()
                raise _timeout_refusal(self.timeout)
            if bounded and self._spent(worker):
                self._replace()  # before the next call rather than during it
        finally:
            self._lock.release()
        kind = reply[0]
        if kind == "ok":
            return reply[1]
        if kind == "refused":
            raise QueryRefused(reply[1], reply[2], reply[3])
        raise WorkerError(reply[1])

    def _spent(self, worker: _Worker) -> bool:
        """Whether ``worker`` has less room left under its memory cap than a call's own objects need."""
        headroom = worker.headroom()
        share = worker_memory_allowance(self.dialect, self.max_chars, self.max_rows) - ENGINE_MEMORY[self.dialect]
        return headroom is not None and headroom < share

    def _ready_worker(self, give_up_at: float) -> _Worker:
        """A worker that has opened the database, started now if there is none (or it died while idle:
        killed, crashed), or ``QueryRefused``: ``unavailable`` when opening failed (retried after a
        back-off), ``busy`` when a new worker is still opening at the call's limit."""
        for attempt in (1, 2):
            worker = self._worker
            if worker is not None and worker.ready is not None and not worker.alive():
                worker.kill()  # it died between calls: nothing of this call ran, so a new one takes it
                self._worker = worker = None
            if worker is None:
                worker = self._start()
            try:
                ready = worker.wait_ready(min(READY_TIMEOUT, give_up_at - time.monotonic()))
            except Exception as failure:  # opening failed: the database is missing, locked, refusing
                self._worker = None
                self._failed(" ".join(str(failure).split()), worker.started)
                if attempt == 1 and time.monotonic() >= self._retry_at:
                    continue  # that failure is older than the back-off: try once more now
                raise self._unavailable() from None
            if ready is None:
                if time.monotonic() - worker.started >= READY_TIMEOUT:
                    worker.kill()
                    self._worker = None
                    self._failed(f"it did not open within {READY_TIMEOUT:g} seconds", worker.started)
                    raise self._unavailable()
                raise QueryRefused(
                    "busy",
                    "Refused: the database process is still starting (it was replaced after an earlier call), "
                    "and did not answer within this call's time limit; nothing was run. Try again.",
                )
            self._backoff = 0.0
            return worker
        raise AssertionError("not reached")

    def _start(self) -> _Worker:
        now = time.monotonic()
        if now < self._retry_at:
            raise self._unavailable()
        try:
            self._worker = _Worker(self._options)
        except (OSError, ValueError) as failure:
            self._failed(f"no worker process could be started: {failure}", now)
            raise self._unavailable() from None
        return self._worker

    def _failed(self, why: str, since: float) -> None:
        low, high = RETRY_BACKOFF
        self._backoff = min(high, 2 * self._backoff) if self._backoff else low
        self._retry_at = since + self._backoff
        self._failure = why
        self.restarts += 1

    def _unavailable(self) -> QueryRefused:
        wait = max(0.0, self._retry_at - time.monotonic())
        return QueryRefused(
            "unavailable",
            f"Refused: the database could not be opened ({self._failure}); nothing was run. The tool tries "
            f"again on the next call{f' after {wait:.1f} seconds' if wait > 0 else ''}; if it keeps failing, "
            "tell the user the database is unavailable.",
        )

    def _replace(self) -> None:
        # The fresh worker starts now and opens the database while the next call is on its way.
        assert self._worker is not None
        self._worker.kill()
        self.restarts += 1
        self._worker = None
        try:
            self._worker = _Worker(self._options)
        except (OSError, ValueError) as failure:
            self._failed(f"no worker process could be started: {failure}", time.monotonic())


GuardedDatabase._isolated = IsolatedDatabase


def _lock_wait(give_up_at: float) -> float:
    """``Lock.acquire``'s timeout until ``give_up_at``: -1 (no limit) for infinity."""
    return -1 if give_up_at == float("inf") else max(0.0, give_up_at - time.monotonic())


def _timeout_refusal(timeout: float) -> QueryRefused:
    return QueryRefused(
        "timeout",
        f"Refused: the query ran longer than {timeout:g} seconds and was stopped. A join without a condition, "
        "or over many rows, or a function over very long values can run that long; add join conditions or a "
        "LIMIT.",
    )
