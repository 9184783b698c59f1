"""``wrap()``'s cursors for psycopg 3 (PostgreSQL): context managers, psycopg's ``execute`` keywords,
``rowcount``/``rownumber`` of the rows served, and server-side cursors passed through."""

from __future__ import annotations

import operator
from typing import Any

from .._engines import NO_PARAMETERS
from .._guard.decide import DRIVER, settle, unprobed
from .proxy import ConnectionProxy, CursorProxy

_SERVER_SIDE = "server-side cursor: rows stream from the server unbuffered and unprobed"
_STREAMED = "stream(): rows stream from the server unbuffered and unprobed"


class ContextCursor(CursorProxy):
    """A guarded psycopg cursor: also a context manager (``with conn.cursor() as cur``), as psycopg's;
    ``execute`` takes psycopg's own ``prepare``/``binary`` keywords; ``rowcount`` and ``rownumber``
    describe the rows served (after a patch, the patched result)."""

    def execute(
        self,
        sql: Any,
        parameters: Any = NO_PARAMETERS,
        /,
        *,
        prepare: bool | None = None,
        binary: bool | None = None,
        **rescue_inputs: Any,
    ) -> ContextCursor:
        self._self_driver_options = (
            {"prepare": prepare, "binary": binary} if prepare is not None or binary is not None else None
        )
        return super().execute(query_text(sql, self.__wrapped__), parameters, **rescue_inputs)  # type: ignore[return-value]

    def executemany(self, sql: Any, parameters: Any, /, **kwargs: Any) -> ContextCursor:
        return super().executemany(query_text(sql, self.__wrapped__), parameters, **kwargs)  # type: ignore[return-value]

    @property
    def rowcount(self) -> int:
        raw_count: int = self.__wrapped__.rowcount
        state = self._self_state
        if state is None or state.action == "none" or raw_count < 0:
            return raw_count
        final_rows: int = state.final_rows  # type: ignore[assignment]
        return final_rows

    @property
    def rownumber(self) -> int | None:
        rows, state = self._self_rows, self._self_state
        if state is None or rows is DRIVER or state.final_rows is None:
            number: int | None = self.__wrapped__.rownumber
            return number
        remaining = len(rows) if type(rows) is list else operator.length_hint(rows)
        served: int = state.final_rows - remaining
        return served

    def stream(self, *args: Any, **kwargs: Any) -> Any:
        """psycopg's row-by-row streaming: passed through unbuffered and unprobed, as the report says."""
        sql = args[0] if args else kwargs.get("query")
        self._self_report = None
        self._self_rows = DRIVER
        guard = self._self_guard.in_scope()
        self._self_state = state = unprobed(guard.preset, query_text(sql, self.__wrapped__), _STREAMED)
        settle(guard, state, self)
        return self.__wrapped__.stream(*args, **kwargs)

    def __enter__(self) -> ContextCursor:
        self.__wrapped__.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> Any:
        return self.__wrapped__.__exit__(*exc_info)


class StreamingCursor(ContextCursor):
    """A server-side cursor (psycopg ``conn.cursor(name=...)``): rows stay on the server and stream.

    Buffering would defeat the reason it exists, so statements pass through unprobed and the report
    says so."""

    def execute(self, sql: str, parameters: Any = NO_PARAMETERS, /, **kwargs: Any) -> StreamingCursor:
        raw = self.__wrapped__
        self._self_report = None
        self._self_rows = DRIVER
        guard = self._self_guard.in_scope()
        self._self_state = state = unprobed(guard.preset, query_text(sql, raw), _SERVER_SIDE)
        raw.execute(sql, **kwargs) if parameters is NO_PARAMETERS else raw.execute(sql, parameters, **kwargs)
        settle(guard, state, self)
        return self


def query_text(query: Any, raw_cursor: Any) -> Any:
    """The SQL text of a query psycopg accepts: ``str`` as is; ``bytes`` decoded with the connection's
    encoding; a ``psycopg.sql.Composable`` (``sql.SQL(...).format(...)``) rendered for the connection.
    The guard reads and rewrites SQL text, and psycopg sends the text exactly as it would have sent
    the original. Anything else (bytes that do not decode) goes to psycopg unchanged."""
    if type(query) is str:
        return query
    if isinstance(query, (bytes, bytearray, memoryview)):
        try:
            return bytes(query).decode(raw_cursor.connection.info.encoding)
        except (UnicodeDecodeError, LookupError):
            return query
    as_string = getattr(query, "as_string", None)
    return as_string(raw_cursor.connection) if callable(as_string) else query


def cursor_class(raw_cursor: Any) -> type[CursorProxy]:
    """The proxy class for a psycopg cursor."""
    import psycopg

    return StreamingCursor if isinstance(raw_cursor, psycopg.ServerCursor) else ContextCursor


class PsycopgConnectionProxy(ConnectionProxy):
    """``wrap()``'s guarded psycopg connection: a ``ConnectionProxy`` whose cursors are this module's."""

    def _cursor_proxy(self, raw_cursor: Any) -> type[CursorProxy]:
        return cursor_class(raw_cursor)

    def execute(self, sql: Any, parameters: Any = NO_PARAMETERS, /, **kwargs: Any) -> CursorProxy:
        # psycopg's own keywords (prepare, binary) besides the rescue's: through this module's cursors.
        return self.cursor().execute(sql, parameters, **kwargs)


def probed_server_cursor(connection: Any, name: str) -> ContextCursor:
    """A cursor of the guarded ``connection`` over a new psycopg server-side cursor ``name`` that the
    guard probes like a client-side one (``conn.cursor(name=...)`` streams unprobed instead).

    For a caller that reads a bounded prefix of a query's rows, such as an agent tool: a client-side
    psycopg cursor receives the whole result before ``execute`` returns (ten million rows for a
    ``generate_series`` the model asked for), while here the guard fetches what it probes (its
    ``row_cap`` and ``byte_cap``) and the caller the rows it serves; the rest never leaves the server.
    The statement runs as ``DECLARE ... CURSOR FOR``, so it must be a query, inside a transaction."""
    raw = connection.__wrapped__.cursor(name=name)
    cursor = ContextCursor(raw)
    cursor._self_guard = connection._self_guard
    cursor._self_connection = connection
    return cursor


# Former names.
_ContextCursor = ContextCursor
_StreamingCursor = StreamingCursor
