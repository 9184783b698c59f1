"""A throwaway PostgreSQL server for tests: a real server from the machine's packages, on loopback,
with its data directory in a temporary folder.

The server refuses to run as root, so as root it runs as the ``postgres`` system user. Tests skip
with the reason when the binaries are missing, except where ``GUARDED_SQLITE_REQUIRE_POSTGRES=1``
(CI sets it): there a missing server is a failure, not a skip.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def server_binaries() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``, or None."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), reverse=True)
    return candidates[0].parent if candidates else None


_START_ATTEMPTS = 3
"""Tries at starting the server, each on a newly found free port."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def postgres_server() -> Iterator[str]:
    """Start a server; yields a libpq connection string for database ``postgres`` as user ``postgres``."""
    binaries = server_binaries()
    if binaries is None:
        raise FileNotFoundError("PostgreSQL server binaries (pg_ctl, initdb) not found")
    root = Path(tempfile.mkdtemp(prefix="guarded-pg-"))
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    run_as = ["runuser", "-u", "postgres", "--"] if as_root else []
    if as_root:
        shutil.chown(root, "postgres")
    data = root / "data"
    pg_ctl = str(binaries / "pg_ctl")
    try:
        subprocess.run(
            [*run_as, str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"],
            check=True,
            capture_output=True,
        )
        # The free port is found before the server binds it: another process (a second pytest-xdist
        # worker starting its own server, another suite on the machine) can take it in between. Then,
        # and only then, the server is started again on another port.
        for attempt in range(1, _START_ATTEMPTS + 1):
            port = _free_port()
            options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
            started = subprocess.run(
                [*run_as, pg_ctl, "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "start"],
                capture_output=True,
            )
            if started.returncode == 0:
                break
            log = (root / "log").read_text(errors="replace") if (root / "log").exists() else ""
            if attempt == _START_ATTEMPTS or "Address already in use" not in log:
                raise subprocess.CalledProcessError(started.returncode, started.args, started.stdout, started.stderr)
        yield f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    finally:
        subprocess.run([*run_as, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
