"""``wrap()``'s base classes for the drivers that bind parameters on the client (``mogrify``: PyMySQL in
``proxy_pymysql``, chDB in ``proxy_clickhouse``): what their guarded cursors and connections do alike.

The cursors bind a statement before the guard reads it; ``executemany`` passes through unprobed;
``rowcount`` counts the rows served; a cursor is its own context manager. The connections, like the
drivers' own, have no ``execute``, ``executemany`` or ``executescript``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from .._engines import NO_PARAMETERS
from .._guard.decide import run_unprobed
from .proxy import ConnectionProxy, CursorProxy

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["ClientBoundConnection", "ClientBoundCursor"]


class ClientBoundCursor(CursorProxy):
    """A guarded cursor of a driver that binds parameters on the client (``mogrify``: PyMySQL, chDB):
    the server receives exactly the bound text, which is the one the guard reads, rewrites and runs
    again (sqlglot's mysql and clickhouse dialects have no ``%s`` placeholder). Rescue candidates are
    bound the same way where the parameters fit them (``CANDIDATE_ERRORS``: what a misfit raises)."""

    CANDIDATE_ERRORS: tuple[type[Exception], ...] = (TypeError, ValueError, KeyError)
    EMPTY_ROWCOUNT = 0
    """``rowcount`` after a patch that served no row (chDB's cursor: -1)."""

    def execute(self, query: str, args: Any = None, /, **rescue_inputs: Any) -> int:  # type: ignore[override]
        if args is not None:
            raw = self.__wrapped__
            query = raw.mogrify(query, args)
            candidates = rescue_inputs.get("candidates")
            if candidates is not None:
                rescue_inputs["candidates"] = [self._bound(candidate, args) for candidate in candidates]
        super().execute(query, NO_PARAMETERS, **rescue_inputs)
        result: int = self.rowcount
        return result

    def _bound(self, candidate: str, args: Any) -> str:
        """A rescue candidate with the statement's parameters bound, or as written when they do not fit it
        (then it fails, or runs, as a candidate on its own: never the caller's statement)."""
        try:
            bound: str = self.__wrapped__.mogrify(candidate, args)
        except self.CANDIDATE_ERRORS:
            return candidate
        return bound

    def executemany(self, query: str, args: Any, /, **kwargs: Any) -> Any:
        done: list[Any] = []
        raw = self.__wrapped__
        run_unprobed(self, self._self_guard.in_scope(), query, True, lambda: done.append(raw.executemany(query, args)))
        return done[0]

    @property
    def rowcount(self) -> int:
        raw_count: int = self.__wrapped__.rowcount
        state = self._self_state
        if state is None or state.action == "none" or state.final_rows is None:
            return raw_count
        final_rows: int = state.final_rows
        return final_rows if final_rows else self.EMPTY_ROWCOUNT

    def __enter__(self) -> Self:
        self.__wrapped__.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> Any:
        return self.__wrapped__.__exit__(*exc_info)


class ClientBoundConnection(ConnectionProxy):
    """A guarded connection of a client-binding driver: like the driver's own, it has no ``execute``,
    ``executemany`` or ``executescript`` (``ConnectionProxy``'s SQLite shortcuts would run them)."""

    @property
    def execute(self) -> NoReturn:
        raise AttributeError("'Connection' object has no attribute 'execute'")

    @property
    def executemany(self) -> NoReturn:
        raise AttributeError("'Connection' object has no attribute 'executemany'")

    @property
    def executescript(self) -> NoReturn:
        raise AttributeError("'Connection' object has no attribute 'executescript'")
