"""The worker process of ``isolation.IsolatedDatabase``: opens the database with ``GuardedDatabase.open``
(in process, with the parent's options), caps its own memory (``RLIMIT_DATA``) and answers one request
at a time over the two pipes the parent passed, until told to close. Started by ``isolation`` as
``main([READ_FD, WRITE_FD])`` (``python -m guarded_sqlite.agent._worker READ_FD WRITE_FD`` does the
same), never imported by the library."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import traceback
from multiprocessing.connection import Connection

from ._calls import ENGINE_MEMORY, QueryRefused, worker_memory_allowance
from ._database import GuardedDatabase
from .isolation import SCRATCH_PREFIX
from .lockdown import cap_sqlite_heap

__all__ = ["main"]


def _refused_parts(refused: QueryRefused) -> tuple[str, str, str]:
    """``(kind, message, feedback)`` of a refusal, as its constructor took them."""
    text = str(refused)
    suffix = f"\n{refused.feedback}" if refused.feedback else ""
    message = text[: -len(suffix)] if suffix and text.endswith(suffix) else text
    return refused.kind, message, refused.feedback


def _serve(requests: Connection, answers: Connection) -> None:
    """The child's loop: open the database as told, then answer requests until ``close`` or EOF."""
    options = requests.recv()
    try:
        db = GuardedDatabase.open(
            options["path"],
            guard=options["guard"],
            read_only=options["read_only"],
            allow_writes=options["allow_writes"],
            allow_privileged=options["allow_privileged"],
            isolated=False,
            **options["limits"],
        )
    except Exception as failure:
        answers.send(("error", (type(failure).__name__, str(failure))))
        return
    answers.send(
        (
            "ready",
            {
                "dialect": db.dialect,
                "max_rows": db.max_rows,
                "max_chars": db.max_chars,
                "timeout": db.timeout,
                "value_limit": db.value_limit,
            },
        )
    )
    with db:
        allowance = worker_memory_allowance(db.dialect, db.max_chars, db.max_rows)
        if db.dialect == "sqlite":  # this process is the worker's alone: SQLite's heap, spills included
            cap_sqlite_heap(ENGINE_MEMORY["sqlite"])
        _limit_memory(allowance)
        while True:
            try:
                request = requests.recv()
            except EOFError:
                return
            if request[0] == "close":
                return
            out_of_memory = False
            try:
                if request[0] == "query":
                    answers.send(("ok", db.query(request[1], request[2], time_limit=request[3])))
                else:
                    answers.send(("ok", db.schema()))
            except QueryRefused as refused:
                answers.send(("refused", *_refused_parts(refused)))
            except MemoryError:
                out_of_memory = True  # answered below, once the traceback's frames (and their rows) are gone
            except Exception:  # the parent reports it as the tool's own fault, with this traceback
                answers.send(("error", traceback.format_exc()))
            if out_of_memory:
                answers.send(("refused", "too_large", _memory_refusal(allowance), ""))


def _memory_refusal(allowance: int) -> str:
    return (
        f"Refused: the statement needed more memory than this tool allows a call ({allowance // 2**20} MiB "
        "in the database process), and was stopped. Select fewer or smaller values (substr, length, "
        "aggregates), or add a LIMIT."
    )


def _limit_memory(allowance: int) -> None:
    """Cap this process's data (``RLIMIT_DATA``: heap and private writable mappings) at what it holds
    now plus ``allowance`` bytes, so that one call cannot take more: past it an allocation fails
    (``MemoryError``, or the engine's own out-of-memory error) and the call is refused."""
    try:
        import resource
    except ImportError:  # not on this platform: no cap
        return
    held = _data_bytes()
    if held is None:
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    limit = held + allowance
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if soft == resource.RLIM_INFINITY or limit < soft:
        resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))


def _data_bytes() -> int | None:
    """This process's data segment in bytes (``VmData``), or None where /proc does not say."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def main(argv: list[str]) -> None:
    """Entry point of the worker: ``argv`` is ``[READ_FD, WRITE_FD]``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends the child; Ctrl-C is the parent's
    try:
        _serve(Connection(int(argv[0]), writable=False), Connection(int(argv[1]), readable=False))
    finally:
        # The folder the parent made for this process's temporary files: removed here too, for a parent
        # that ended without closing the database (the pipes' end is this process's signal to stop).
        scratch = os.environ.get("TMPDIR", "")
        if os.path.basename(scratch).startswith(SCRATCH_PREFIX):
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
