"""The agent tools on ClickHouse through chDB: opening a ``chdb://`` folder for ``GuardedDatabase.open``
and running one call on the tool's session. The session's lockdown (``lock_down_clickhouse``): the session's limits
set first (``max_execution_time``, ``max_result_rows``/``max_result_bytes`` with ``result_overflow_mode =
'throw'``, ``max_memory_usage``), then ``readonly = 1`` unless writes are allowed: from then on the server
refuses every write, most table functions and any change of a setting, ``readonly`` itself included, by
``SET`` or by a query's ``SETTINGS``. What reaches outside the database regardless (``INTO OUTFILE``, which
chDB writes even so; ``s3()`` and its kin; dictionaries, which load their source) is refused by reading
the statement (``lockdown.denied_call_problem``, ``_analysis.statements.clickhouse_denied_call``), and so
are the ``system`` tables and, with writes allowed, ``SET`` and ``SETTINGS``. chdb is imported only
here, when a folder is opened."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._calls import chdb_folder

if TYPE_CHECKING:
    from ..report import GuardReport

__all__ = ["CLICKHOUSE_MEMORY", "lock_down_clickhouse", "open_chdb", "run_call"]


def open_chdb(dsn: str, policy: Any) -> Any:
    """A guarded chDB connection to the folder ``dsn`` names (``chdb:///path``), with ``policy``. The
    folder must exist (it is never created here). chDB serves one folder per process and locks it, so
    ``GuardedDatabase.open`` opens it in its worker by default. Raises ``ValueError`` with the reason."""
    from .._api import wrap

    folder = Path(chdb_folder(dsn))
    if not folder.is_dir():
        raise ValueError(f"{dsn}: no such folder (a chDB database is a folder; it is never created here)")
    from chdb import dbapi

    try:
        connect: Any = dbapi.connect  # untyped in chdb; typed Any whether chdb is installed or not
        raw = connect(str(folder))
    except Exception as failure:  # another process has the folder, or this one serves another folder
        raise ValueError(f"{dsn}: cannot be opened ({' '.join(str(failure).split())[:300]})") from None
    return wrap(raw, guard=policy)


def run_call(
    db: Any, sql: str, parameters: tuple[Any, ...], limit: float
) -> tuple[Any, list[Any], str, GuardReport | None, int]:
    """One statement of ``db``'s model (a ``GuardedDatabase``: its connection, fetch and refusals) on its
    chDB session: ``(description, rows, over, report, count)``,
    as ``GuardedDatabase.query`` takes them. chDB cannot be interrupted: the session's
    ``max_execution_time`` (the tool's timeout) stops the statement, and a call that ends past its own
    ``limit`` (it waited for the lock) is refused as a timeout all the same."""
    from .._core.deadlines import call_deadline, interrupt_after

    deadline = interrupt_after(limit, lambda: None)
    cur = db.connection.cursor()
    try:
        with deadline, call_deadline(limit):
            cur.execute(sql, parameters if parameters else None)
            description = cur.description
            rows, over = db._fetch_within_limits(cur, deadline)
    except Exception as failure:
        db._refuse_failure(failure, deadline.fired or "TIMEOUT_EXCEEDED" in str(failure))
        raise  # not reached: _refuse_failure raises
    if deadline.fired and description is not None:
        db._refuse_failure(TimeoutError("time limit passed"), True)
    report = cur.guard_report
    cur.close()
    return description, rows, over, report, -1


CLICKHOUSE_MEMORY = 256 * 2**20
"""Bytes of memory one ClickHouse statement of an agent tool may take (the session's ``max_memory_usage``)."""


def lock_down_clickhouse(connection: Any, *, allow_writes: bool, timeout: float) -> str:
    """Set the agent session's limits on a guarded chDB connection, then (unless ``allow_writes``) make
    the session read-only, which no later statement can undo; returns the value limit the refusals
    quote. A result may have one row more than the guard buffers (``row_cap``; the tool refuses past
    ``max_rows``, which is smaller). Raises ``ValueError`` for a session already read-only, whose limits
    can no longer be set."""
    max_result_rows = connection.guard_policy.row_cap + 1
    cur = connection.__wrapped__.cursor()
    try:
        cur.execute("SELECT getSetting('readonly')")
        if int(cur.fetchall()[0][0]):
            raise ValueError(
                "the chDB session is read-only already, so the tool's limits cannot be set on it; "
                "hand the tool a connection of its own"
            )
        cur.execute(
            f"SET max_execution_time = {max(timeout, 0.001):.3f}, timeout_overflow_mode = 'throw', "
            f"max_result_rows = {max_result_rows}, max_result_bytes = {4 * CLICKHOUSE_MEMORY}, "
            f"result_overflow_mode = 'throw', max_memory_usage = {CLICKHOUSE_MEMORY}"
        )
        if not allow_writes:
            cur.execute("SET readonly = 1")
    finally:
        cur.close()
    return f"the session's max_memory_usage ({CLICKHOUSE_MEMORY // 2**20} MiB)"
