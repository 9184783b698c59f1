"""The agent tools on ClickHouse through chDB: opening a ``chdb://`` folder for ``GuardedDatabase.open``
and running one call on the tool's session. The session's lockdown (its limits as settings, then
``readonly = 1``) is ``lockdown.lock_down_clickhouse``'s; the statements it would still let through are
refused by reading them (``lockdown.denied_call_problem``). chdb is imported only here, when a folder
is opened."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._calls import chdb_folder

if TYPE_CHECKING:
    from ..report import GuardReport

__all__ = ["open_chdb", "run_call"]


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
