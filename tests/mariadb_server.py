"""A throwaway MariaDB server for tests: a real server from the machine's packages (Debian's
``mariadb-server``), on loopback, with its data directory in a temporary folder.

As root the server runs as the ``mysql`` system user, which must own the folder. Tests skip with the
reason when ``mariadbd`` is missing, except where ``GUARDED_SQLITE_REQUIRE_MARIADB=1`` (CI sets it):
there a missing server is a failure, not a skip. Root connects over TCP without a password.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def server_binaries() -> Path | None:
    """The folder holding ``mariadbd`` and ``mariadb-install-db``, or None."""
    found = shutil.which("mariadbd") or next(
        (str(p) for p in (Path("/usr/sbin/mariadbd"), Path("/usr/bin/mariadbd")) if p.exists()), None
    )
    return Path(found).parent if found else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


_START_ATTEMPTS = 3
"""Tries at starting the server, each on a newly found free port."""


def _wait_until_listening(server: subprocess.Popen[bytes], port: int, unix_socket: Path) -> bool:
    """Whether ``server`` listens on ``port`` and has made ``unix_socket``; False once it has exited or
    after 60 seconds."""
    deadline = time.monotonic() + 60
    while server.poll() is None and time.monotonic() < deadline:
        if unix_socket.exists():
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    return True
        time.sleep(0.05)
    return False


def _install_db() -> str:
    return shutil.which("mariadb-install-db") or shutil.which("mysql_install_db") or "mariadb-install-db"


@contextmanager
def mariadb_server() -> Iterator[dict[str, Any]]:
    """Start a server; yields PyMySQL's keyword arguments for connecting to it as root."""
    binaries = server_binaries()
    if binaries is None:
        raise FileNotFoundError("MariaDB server binary (mariadbd) not found")
    root = Path(tempfile.mkdtemp(prefix="guarded-mariadb-"))
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    user = ["--user=mysql"] if as_root else []
    if as_root:
        shutil.chown(root, "mysql")
    data = root / "data"
    log = root / "err.log"
    server = None
    try:
        subprocess.run(
            [_install_db(), *user, f"--datadir={data}", "--auth-root-authentication-method=normal", "--skip-test-db"],
            check=True,
            capture_output=True,
        )
        # The free port is found before the server binds it: another process (a second pytest-xdist
        # worker starting its own server, another suite on the machine) can take it in between. The
        # server then exits before it makes its Unix socket (made after the TCP port), so a listener on
        # the port is ours only once the socket is there too; a server that could not bind is started
        # again on another port.
        for attempt in range(1, _START_ATTEMPTS + 1):
            port = _free_port()
            server = subprocess.Popen(
                [
                    str(binaries / "mariadbd"), *user, f"--datadir={data}", f"--socket={root / 'sock'}",
                    f"--port={port}", "--bind-address=127.0.0.1", f"--pid-file={root / 'pid'}", f"--log-error={log}",
                    "--innodb-flush-log-at-trx-commit=0", "--skip-log-bin", "--innodb-buffer-pool-size=32M",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            if _wait_until_listening(server, port, root / "sock"):
                break
            text = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            if server.poll() is None or attempt == _START_ATTEMPTS or "Address already in use" not in text:
                raise RuntimeError(f"mariadbd did not start: {text}")
        yield {"host": "127.0.0.1", "port": port, "user": "root"}
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        shutil.rmtree(root, ignore_errors=True)
