"""Shared pieces of the reliability tests (issue 9, repros in ../shared/repros/reliability/).

The schema is the repros' ``common.setup``: ``t`` has ``n_t`` distinct names, ``u`` has ``n_u`` rows per
``t`` row, so ``EXPLODE`` returns every name ``n_u`` times (dup_ratio ``1 - 1/n_u``).

Tests that can hang the interpreter (deadlocks between threads holding the GIL and the SQLite mutex)
or that deliver signals or change process-wide SQLite settings (``hard_heap_limit``, file size
limits) run in a child interpreter through ``run_child``: a hang then fails the test after a hard
timeout instead of hanging CI, and a stray KeyboardInterrupt never reaches pytest.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import guarded_sqlite

EXPLODE = "SELECT t.name FROM t JOIN u ON u.t_id = t.id"
DISTINCT_NAMES = "SELECT DISTINCT name FROM t"
LONG = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 100000) SELECT count(*) FROM n"
# Never ends on its own: only an interrupt (the guard's rerun_timeout) stops it.
ENDLESS = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n) SELECT i FROM n, t WHERE i < 0"

SETUP_SQL = """
    CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT);
    CREATE TABLE u (id INTEGER PRIMARY KEY, t_id INTEGER);
    CREATE TABLE audit (x);
    WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < {n_t})
    INSERT INTO t SELECT i, 'name' || i FROM n;
    WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM n WHERE i < {last_u})
    INSERT INTO u (t_id) SELECT i % {n_t} + 1 FROM n;
"""


def setup(con: Any, n_t: int = 20, n_u: int = 10) -> Any:
    """The repros' common schema (committed when the connection is in a transaction afterwards)."""
    con.executescript(SETUP_SQL.format(n_t=n_t, last_u=n_t * n_u - 1))
    return con


def make_db(path: Path | str, n_t: int = 20, n_u: int = 10) -> str:
    """A file database with the common schema, written by plain sqlite3 and closed."""
    con = sqlite3.connect(path)
    setup(con, n_t, n_u)
    con.commit()
    con.close()
    return str(path)


def first_occurrence(rows: list[Any]) -> list[Any]:
    """What P1 serves from the buffer: each distinct row once, in order of first occurrence."""
    return list(dict.fromkeys(rows))


def query_only(con: Any) -> int:
    """``PRAGMA query_only`` as the caller sees it through the guarded connection."""
    return int(con.execute("PRAGMA query_only").fetchone()[0])


def raw_query_only(con: Any) -> int:
    """``PRAGMA query_only`` read on the driver's connection, past the guard."""
    cursor = sqlite3.Cursor(guarded_sqlite.unwrap(con))
    try:
        return int(cursor.execute("PRAGMA query_only").fetchone()[0])
    finally:
        cursor.close()


def package_root() -> str:
    """The directory that holds the ``guarded_sqlite`` package under test (and ``tests``)."""
    return str(Path(guarded_sqlite.__file__).resolve().parent.parent)


CHILD_PREAMBLE = """
import faulthandler, json, os, signal, sqlite3, sys, threading, time
faulthandler.dump_traceback_later({hang}, exit=True)
# Ctrl-C raises KeyboardInterrupt, as in a program started from a terminal, even where the suite runs
# with SIGINT ignored (a shell's background job), which a child would inherit.
signal.signal(signal.SIGINT, signal.default_int_handler)
import guarded_sqlite
from guarded_sqlite import GuardPolicy, DupRatioSelector
from tests.reliability_helpers import *
def report(**values):
    print("RESULT:" + json.dumps(values, default=repr), flush=True)
"""


def run_child(code: str, timeout: float = 30.0, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter (cwd: the package root); return what it passed to
    ``report(...)``. A child that hangs dumps its threads' stacks (faulthandler) and is killed, and
    the test fails with those stacks."""
    hang = max(1.0, timeout - 2.0)
    script = CHILD_PREAMBLE.format(hang=hang) + textwrap.dedent(code)
    root = package_root()
    child_env = dict(os.environ)
    child_env["PYTHONPATH"] = root + os.pathsep + child_env.get("PYTHONPATH", "")
    child_env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    if env:
        child_env.update(env)
    try:
        done = subprocess.run(
            [sys.executable, "-c", script], cwd=root, env=child_env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as expired:
        raise AssertionError(
            f"child interpreter still running after {timeout}s (deadlock?)\nstdout:\n{expired.stdout}\n"
            f"stderr:\n{expired.stderr}"
        ) from None
    results = [line[len("RESULT:") :] for line in done.stdout.splitlines() if line.startswith("RESULT:")]
    if not results:
        raise AssertionError(
            f"child interpreter exited with {done.returncode} without a result (hung or crashed)\n"
            f"stdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-6000:]}"
        )
    result: dict[str, Any] = json.loads(results[-1])
    result["_stderr"] = done.stderr[-4000:]
    return result


@contextmanager
def trickle_server(kind: str) -> Iterator[str]:
    """An OpenAI-compatible endpoint on 127.0.0.1 that never completes an answer: ``"silent"`` reads
    the request and says nothing; ``"trickle"`` sends headers, then one byte of a chunked body per
    second, forever. Yields the ``api_base``."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    stop = threading.Event()

    def handle(connection: socket.socket) -> None:
        try:
            connection.recv(65536)
            if kind == "trickle":
                connection.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                )
            while not stop.is_set():
                if kind == "trickle":
                    connection.sendall(b"1\r\n \r\n")
                stop.wait(1.0)
        except OSError:
            pass
        finally:
            connection.close()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except OSError:
                continue
            threading.Thread(target=handle, args=(connection,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/v1"
    finally:
        stop.set()
        thread.join(2)
        server.close()


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    started = time.monotonic()
    value = fn(*args, **kwargs)
    return value, time.monotonic() - started
