"""The guarded ``sqlite3.Connection`` methods that change the data, or what a statement reads, with no
statement the guard sees and no number SQLite keeps moving: each moves the connection's epoch, so that
no confirmation kept before holds (``guarded_sqlite._rules.confirmations``). A base of
``sqlite_fast.ConnectionMethods``; ``proxy.ConnectionProxy`` does the same for ``wrap()``.
"""

from __future__ import annotations

import sqlite3
import sys
from typing import Any

from .._guard.connection_state import note_blob, note_change
from .._guard.decide import ConnectionState, settle_query_only

__all__ = ["UnseenChanges"]


class UnseenChanges(sqlite3.Connection):
    """sqlite3's methods, each followed by what it tells the guard (no instance layout of its own)."""

    __slots__ = ()
    _self_guard: ConnectionState

    def set_authorizer(self, *args: Any, **kwargs: Any) -> None:
        sqlite3.Connection.set_authorizer(self, *args, **kwargs)
        note_change(self._self_guard)  # an authorizer's SQLITE_IGNORE reads a column as NULL

    if hasattr(sqlite3.Connection, "load_extension"):  # absent where Python was built without it

        def load_extension(self, *args: Any, **kwargs: Any) -> None:
            sqlite3.Connection.load_extension(self, *args, **kwargs)
            note_change(self._self_guard)  # its functions and collations (ICU's LIKE, say) replace ones read

    if sys.version_info >= (3, 11):

        def deserialize(self, data: Any, /, **kwargs: Any) -> None:
            # A schema's content replaced: neither data_version nor total_changes moves.
            sqlite3.Connection.deserialize(self, data, **kwargs)
            note_change(self._self_guard)

        def blobopen(self, *args: Any, **kwargs: Any) -> sqlite3.Blob:
            # A blob opened from a function a guard check calls is as read-only as the check's SQL.
            if self._self_guard.query_only_due:
                settle_query_only(self._self_guard)
            blob = sqlite3.Connection.blobopen(self, *args, **kwargs)
            note_blob(self._self_guard, blob, bool(kwargs.get("readonly")))
            return blob
