"""``wrap()``'s proxy for DuckDB: a ``duckdb.DuckDBPyConnection`` is its own cursor."""

from __future__ import annotations

import operator
from typing import Any

from .._engines import DUCKDB, NO_PARAMETERS, execute_with
from .._guard.connection_state import note_function
from .._guard.decide import DRIVER, ConnectionState, GuardedConnection, buffer_served, serving
from .._guard.guard_statements import reads_only
from ..policy import GuardPolicy
from .proxy import CursorProxy

_FETCH_ONE = operator.methodcaller("fetchone")


class GuardedDuckDBConnection(CursorProxy, GuardedConnection):
    """A guarded ``duckdb.DuckDBPyConnection``, which is its own cursor: ``con.execute(sql)`` returns
    the connection and ``con.fetchall()`` reads its result.

    The guard's checks and re-runs use the same DuckDB connection, so ``description`` is the one
    recorded when the caller's statement ran. ``df()``/``fetchdf()``/``fetchnumpy()``/Arrow results
    cannot be rebuilt from fetched rows exactly, so they re-run the served SQL read-only (a proven
    read-only query only) and return what the caller has not fetched yet; otherwise (and when join
    copies were removed, which only the buffer holds) ``df()`` builds a DataFrame from the buffered rows.
    """

    _self_parameters: Any = NO_PARAMETERS

    def __init__(self, raw: Any, policy: GuardPolicy) -> None:
        super().__init__(raw)
        self._self_guard = ConnectionState(policy, DUCKDB, self, raw, single_thread=False)
        DUCKDB.scan_callers_frames(raw)

    @property
    def guard_policy(self) -> GuardPolicy:
        return self._self_guard.policy

    @property
    def connection(self) -> GuardedDuckDBConnection:  # type: ignore[override]
        return self

    @property
    def description(self) -> Any:
        rescued = self._self_rescued_description
        if rescued is not None and rescued[0] is self._self_state:
            return rescued[1]
        return self._self_description if self._self_state is not None else self.__wrapped__.description

    def cursor(self) -> GuardedDuckDBConnection:
        """A duplicate connection to the same database (DuckDB's cursor), guarded with the same policy."""
        duplicate = GuardedDuckDBConnection(self.__wrapped__.cursor(), self._self_guard.policy)
        duplicate._self_guard.registered_functions = self._self_guard.registered_functions
        return duplicate

    def create_function(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """DuckDB's ``create_function``; the guard remembers the name (DuckDB lists a Python function
        like a built-in), so that it never re-runs a statement that calls it."""
        result = self.__wrapped__.create_function(name, *args, **kwargs)
        note_function(self._self_guard, name)
        return result

    def __enter__(self) -> GuardedDuckDBConnection:
        self.__wrapped__.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> Any:
        return self.__wrapped__.__exit__(*exc_info)

    def df(self, *args: Any, **kwargs: Any) -> Any:
        return self._native("df", *args, **kwargs)

    def fetchdf(self, *args: Any, **kwargs: Any) -> Any:
        return self._native("fetchdf", *args, **kwargs)

    def fetch_df(self, *args: Any, **kwargs: Any) -> Any:
        return self._native("fetch_df", *args, **kwargs)

    def fetchnumpy(self, *args: Any, **kwargs: Any) -> Any:
        return self._native("fetchnumpy", *args, **kwargs)

    def fetch_arrow_table(self, *args: Any, **kwargs: Any) -> Any:
        return self._native("fetch_arrow_table", *args, **kwargs)

    def to_arrow_table(self, *args: Any, **kwargs: Any) -> Any:
        return self._native("to_arrow_table", *args, **kwargs)

    def arrow(self, *args: Any, **kwargs: Any) -> Any:
        return self._native("arrow", *args, **kwargs)

    def _native(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """A DuckDB-native result for what the caller has not fetched yet (see the class docstring)."""
        raw = self.__wrapped__
        rows = self._self_rows
        current = self._self_state
        if current is None or rows is DRIVER:
            return getattr(raw, method)(*args, **kwargs)  # nothing buffered: DuckDB's own result
        remaining = list(serving(self, raw, _FETCH_ONE))
        buffer_served(self)
        served_sql = current.final_sql
        # Removed join copies are a choice among the rows of final_sql (the check), not its result.
        rerunnable = not current.action.endswith("join_copies_removed")
        if rerunnable and reads_only(served_sql, "duckdb"):
            return _tail(self._rerun_natively(served_sql, method, *args, **kwargs), len(remaining))
        if method in ("df", "fetchdf", "fetch_df"):
            import pandas

            return pandas.DataFrame.from_records(remaining, columns=[d[0] for d in self._self_description])
        what = "whose join copies were removed" if not rerunnable else "that is not a read-only query"
        raise TypeError(f"{method}() cannot be rebuilt from the guarded buffer of a statement {what}")

    def _rerun_natively(self, sql: str, method: str, *args: Any, **kwargs: Any) -> Any:
        raw = self.__wrapped__
        parameters = self._self_parameters
        if DUCKDB.in_explicit_transaction(raw):
            # Only this connection sees the transaction's changes; the query is a proven read-only
            # query that just succeeded on it.
            execute_with(raw, sql, parameters)
            return getattr(raw, method)(*args, **kwargs)
        return DUCKDB.on_read_only_session(
            raw, sql, parameters, None, lambda cursor: getattr(cursor, method)(*args, **kwargs)
        )

    def execute(self, sql: str, parameters: Any = NO_PARAMETERS, /, **kwargs: Any) -> GuardedDuckDBConnection:
        self._self_parameters = parameters
        super().execute(sql, parameters, **kwargs)
        return self


def _tail(result: Any, count: int) -> Any:
    """The last ``count`` rows of a DataFrame, a dict of numpy arrays, or an Arrow table."""
    if hasattr(result, "iloc"):
        return result.iloc[len(result) - count :].reset_index(drop=True)
    if isinstance(result, dict):
        return {name: column[len(column) - count :] for name, column in result.items()}
    if hasattr(result, "slice") and hasattr(result, "num_rows"):
        return result.slice(result.num_rows - count)
    return result
