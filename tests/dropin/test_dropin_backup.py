"""Drop-in parity, ``backup()``: from a guarded connection into a raw or guarded one, keyword
arguments, and a raw connection backing up into a guarded one (which needs ``unwrap``).

Each test runs the same operations on a raw ``sqlite3`` connection and on a guarded one holding the
same data wherever it can, and compares what comes back (values, exception class and message):
``guard="observe"`` must match sqlite3 exactly, ``guard="patch"`` must match on queries the probe does
not flag. Fixtures (``mode``, ``raw_items``, ``guarded_items``, ``observe_items``) are in conftest.py,
the items table and helpers in helpers.py.
"""

from __future__ import annotations

import sqlite3
import sqlite3.dbapi2

import pytest

import guarded_sqlite
from guarded_sqlite import GuardedConnection


def test_backup_from_guarded_into_raw(guarded_items: GuardedConnection, raw_items: sqlite3.Connection) -> None:
    """A guarded connection backs up into a plain sqlite3 connection."""
    target = sqlite3.connect(":memory:")
    assert guarded_items.backup(target) is None
    assert list(target.iterdump()) == list(raw_items.iterdump())


def test_backup_from_guarded_into_guarded(guarded_items: GuardedConnection, raw_items: sqlite3.Connection) -> None:
    """The target may itself be guarded (``backup`` hands sqlite3 the real connection behind it)."""
    target = guarded_sqlite.connect(":memory:", guard="observe")
    guarded_items.backup(target)
    sql = "SELECT * FROM items ORDER BY id"
    assert target.execute(sql).fetchall() == raw_items.execute(sql).fetchall()


def test_backup_keyword_arguments_behave_like_sqlite3() -> None:
    """pages=, progress= and name= work as in sqlite3: same progress calls, same copy."""
    calls: dict[str, list[tuple[int, int, int]]] = {"raw": [], "guarded": []}
    copies = {}
    for side, opener in {"raw": sqlite3.connect, "guarded": guarded_sqlite.connect}.items():
        source = opener(":memory:")
        source.execute("CREATE TABLE big (x TEXT)")
        source.executemany("INSERT INTO big VALUES (?)", [("x" * 500,) for _ in range(200)])
        source.commit()
        target = opener(":memory:")
        source.backup(target, pages=5, progress=lambda *args, side=side: calls[side].append(args), name="main")
        copies[side] = list(guarded_sqlite.unwrap(target).iterdump())
    assert calls["guarded"] == calls["raw"] and len(calls["raw"]) > 1
    assert copies["guarded"] == copies["raw"]


# Differs by design: sqlite3's own backup() refuses a proxy as its target (connect()'s connections,
# being sqlite3.Connection objects, are accepted); this test covers both, so it runs as [connect] only.
@pytest.mark.connect_only
def test_raw_backup_into_guarded_needs_unwrap(raw_items: sqlite3.Connection, observe_items: GuardedConnection) -> None:
    """connect()'s connections are sqlite3.Connection objects: sqlite3's own ``backup`` (which
    type-checks its target in C) takes them as they are. It refuses a ``wrap()`` proxy, for which
    ``guarded_sqlite.unwrap(target)`` is the way to back up from a raw connection into a guarded one."""
    target = guarded_sqlite.connect(":memory:")
    raw_items.backup(target)
    sql = "SELECT * FROM items ORDER BY id"
    assert target.execute(sql).fetchall() == observe_items.execute(sql).fetchall()
    proxy = guarded_sqlite.wrap(sqlite3.connect(":memory:"))
    with pytest.raises(TypeError):
        raw_items.backup(proxy)
    raw_items.backup(guarded_sqlite.unwrap(proxy))
    assert proxy.execute(sql).fetchall() == observe_items.execute(sql).fetchall()
