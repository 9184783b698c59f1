"""The package's own exceptions and the one way it turns an exception into a line of text."""

from __future__ import annotations

import re
import sqlite3

__all__ = ["TransactionLost", "describe_error"]


class TransactionLost(sqlite3.OperationalError):
    """The database rolled back the caller's open transaction while the guard ran a statement of its
    own (a re-execution or a rescue candidate failed with an error such as SQLITE_FULL or SQLITE_NOMEM).

    Raised instead of serving rows, so that the loss of uncommitted writes cannot go unnoticed; the
    original error is the ``__cause__``.
    """


_TERMINAL_STYLE = re.compile(r"\x1b\[[0-9;]*m")  # sqlglot underlines the offending token for terminals


def describe_error(error: BaseException) -> str:
    """``"ExceptionClass: message"`` on one line, for reports, logs and tables (DuckDB and PostgreSQL
    messages carry context lines; their white space is folded into single spaces; sqlglot's terminal
    highlighting codes are dropped).

    >>> describe_error(ValueError("bad\\n  value"))
    'ValueError: bad value'
    >>> describe_error(KeyboardInterrupt())
    'KeyboardInterrupt'
    """
    message = " ".join(_TERMINAL_STYLE.sub("", str(error)).split())
    return f"{type(error).__name__}: {message}" if message else type(error).__name__
