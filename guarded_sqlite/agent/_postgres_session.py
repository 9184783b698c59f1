"""The PostgreSQL connection behind an agent tool, between and around calls: opening it from a URI,
opening it again when it was lost (a ``pg_terminate_backend``, a server restart or failover), with a
back-off while the server refuses, and the cancel request a call's deadline sends. What one call does
inside its transaction is ``_database``'s; what the session is reset to after it is
``lockdown.reset_postgres_session``'s."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ._calls import QueryRefused, redact_dsn

__all__ = [
    "CANCEL_TIMEOUT",
    "RECANCEL_EVERY",
    "RETRY_BACKOFF",
    "Canceller",
    "Reconnector",
    "connection_lost",
    "open_postgres",
]

RECANCEL_EVERY = 0.1
"""Seconds between cancel requests once a call's time limit has passed. A request that reaches the
server between two statements is dropped, like SQLite's interrupt; each one costs a connection to the
server, hence the longer interval than SQLite's re-sent interrupt."""

CANCEL_TIMEOUT = 5.0
"""Seconds a cancel request may take to reach the server before it is given up."""

RETRY_BACKOFF = (0.5, 8.0)
"""Seconds, first and largest: after a failed reconnection no other is tried for the first, and the
wait doubles with each failure in a row up to the largest. Calls in between are refused at once as
``unavailable`` instead of each waiting on a server that is down."""


def open_postgres(dsn: str, policy: Any, *, allow_writes: bool, connect_timeout: float) -> Any:
    """A guarded psycopg connection to ``dsn`` as an agent tool uses it: autocommit (each call's
    transaction is the tool's own, nothing is left open between calls) and, without writes, the
    session's ``default_transaction_read_only`` on. Raises ``ValueError`` (without the password) when
    the server refuses or cannot be reached within ``connect_timeout`` seconds."""
    import psycopg

    from .._api import wrap
    from .lockdown import reset_postgres_session

    try:
        # libpq takes whole seconds, and reads 1 as 2.
        raw = psycopg.connect(dsn, autocommit=True, connect_timeout=max(2, int(connect_timeout + 0.999)))
    except psycopg.Error as failure:
        raise ValueError(f"{redact_dsn(dsn)}: cannot connect ({' '.join(str(failure).split())})") from None
    try:
        reset_postgres_session(raw, owned=True, allow_writes=allow_writes)
        return wrap(raw, guard=policy, dialect="postgres")
    except BaseException:
        raw.close()
        raise


def connection_lost(raw: Any) -> bool:
    """Whether a psycopg connection can no longer run anything (closed, or broken by the server)."""
    return bool(raw.closed or raw.broken)


class Reconnector:
    """Opens the tool's PostgreSQL connection again after it was lost, at most once per back-off
    period: a call that finds the connection gone gets a new one, or a refusal saying when the next
    attempt will be. ``opener`` (``open_postgres`` by default; ``_mysql_session.open_mysql`` for a
    MySQL/MariaDB URI) takes ``open_postgres``'s arguments and raises ``ValueError`` when it fails."""

    def __init__(self, dsn: str, policy: Any, *, allow_writes: bool, opener: Callable[..., Any] | None = None) -> None:
        self._opener = open_postgres if opener is None else opener
        self._dsn = dsn
        self._policy = policy
        self._allow_writes = allow_writes
        self._retry_at = 0.0
        self._backoff = 0.0
        self._last_failure = ""
        self.reconnections = 0
        """How many times a lost connection was replaced."""

    def reopen(self, why: str, time_limit: float) -> Any:
        """A new guarded connection, or ``QueryRefused("unavailable")`` with ``why`` (what happened to
        the old one) and the server's answer."""
        now = time.monotonic()
        if now < self._retry_at:
            raise QueryRefused(
                "unavailable",
                f"Refused: the database connection was lost ({why}) and could not be opened again "
                f"({self._last_failure}); the next attempt is in {self._retry_at - now:.1f} seconds. Try again "
                "then, or tell the user the database is unavailable.",
            )
        try:
            connection = self._opener(
                self._dsn, self._policy, allow_writes=self._allow_writes, connect_timeout=time_limit
            )
        except ValueError as failure:
            low, high = RETRY_BACKOFF
            self._backoff = min(high, 2 * self._backoff) if self._backoff else low
            self._retry_at = time.monotonic() + self._backoff
            self._last_failure = str(failure).removeprefix(f"{redact_dsn(self._dsn)}: ")
            raise QueryRefused(
                "unavailable",
                f"Refused: the database connection was lost ({why}) and could not be opened again "
                f"({self._last_failure}); the next attempt is in {self._backoff:g} seconds. Try again then, "
                "or tell the user the database is unavailable.",
            ) from None
        self._backoff, self._retry_at = 0.0, 0.0
        self.reconnections += 1
        return connection


class Canceller:
    """Sends psycopg's cancel request for ``raw`` on a thread of its own, one at a time. The watchdog
    thread serves every deadline in the process and must not wait on a round trip to a server; ``wait``
    lets the call finish only once no request is on its way, so none can cancel a later statement."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self._thread: threading.Thread | None = None

    def __call__(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return  # the previous request is still on its way
        self._thread = threading.Thread(target=self._send, name="guarded-sqlite-pg-cancel", daemon=True)
        self._thread.start()

    def _send(self) -> None:
        try:
            self._raw.cancel_safe(timeout=CANCEL_TIMEOUT)
        except Exception:  # a closed connection, an unreachable server: the statement timeout remains
            pass

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join(CANCEL_TIMEOUT)
