"""The package's public namespace: sqlite3's names, ``__all__`` and the package's own submodules, nothing
that an import of the package's own code left behind (``guarded_sqlite.Any`` was one, issue 46 item 3)."""

from __future__ import annotations

import sqlite3
import types

import guarded_sqlite


def test_every_public_name_is_sqlite3_s_exported_or_a_submodule() -> None:
    stray = [
        name
        for name in dir(guarded_sqlite)
        if not name.startswith("_")
        and name not in dir(sqlite3)
        and name not in guarded_sqlite.__all__
        and name not in guarded_sqlite._LAZY
        and not isinstance(getattr(guarded_sqlite, name), types.ModuleType)
    ]
    assert stray == []
