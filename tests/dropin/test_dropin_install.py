"""Drop-in entry points: ``install()``/``uninstall()`` of a guarded ``sqlite3.connect``, ``wrap()``/
``unwrap()``, and validation of ``guard=`` values and policies.

Each test runs the same operations on a raw ``sqlite3`` connection and on a guarded one holding the
same data wherever it can, and compares what comes back (values, exception class and message):
``guard="observe"`` must match sqlite3 exactly, ``guard="patch"`` must match on queries the probe does
not flag. Fixtures (``mode``, ``raw_items``, ``guarded_items``, ``observe_items``) are in conftest.py,
the items table and helpers in helpers.py.
"""

from __future__ import annotations

import sqlite3
import sqlite3.dbapi2
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import guarded_sqlite
from guarded_sqlite import GuardedConnection, GuardedCursor, GuardPolicy
from tests.helpers import CountingConnection


@pytest.fixture
def real_connect() -> Iterator[Callable[..., sqlite3.Connection]]:
    """The real sqlite3.connect; whatever a test installs is uninstalled afterwards."""
    original = sqlite3.connect
    assert not getattr(original, "__guarded_sqlite__", False)
    yield original
    guarded_sqlite.uninstall()
    assert sqlite3.connect is original and sqlite3.dbapi2.connect is original


def test_install_makes_sqlite3_connect_guarded(real_connect: Any) -> None:
    """After install(), sqlite3.connect (and sqlite3.dbapi2.connect) return guarded connections."""
    guarded_sqlite.install(guard="observe")
    for connect in (sqlite3.connect, sqlite3.dbapi2.connect):
        con = connect(":memory:")
        assert isinstance(con, GuardedConnection)
        assert con.guard_policy.mode == "observe"
        assert guarded_sqlite.unwrap(con) is con and isinstance(con, sqlite3.Connection)  # not guarded twice
        assert isinstance(con.execute("SELECT 1"), GuardedCursor)
    assert sqlite3.connect(":memory:", guard="off").guard_policy.mode == "off"
    assert isinstance(sqlite3.connect(":memory:", factory=CountingConnection), CountingConnection)


def test_uninstall_restores_the_real_connect(real_connect: Any) -> None:
    """uninstall() gives back the original function; sqlite3.connect returns plain connections again."""
    guarded_sqlite.install()
    guarded_sqlite.uninstall()
    assert sqlite3.connect is real_connect
    assert type(sqlite3.connect(":memory:")) is sqlite3.Connection


def test_install_twice_then_uninstall_restores_the_original(real_connect: Any) -> None:
    """A second install() replaces the policy; one uninstall() still restores the original."""
    guarded_sqlite.install("patch")
    guarded_sqlite.install("observe")
    assert sqlite3.connect(":memory:").guard_policy.mode == "observe"
    guarded_sqlite.uninstall()
    assert sqlite3.connect is real_connect and sqlite3.dbapi2.connect is real_connect
    guarded_sqlite.uninstall()  # safe when not installed
    assert sqlite3.connect is real_connect


def test_install_with_bad_guard_leaves_sqlite3_alone(real_connect: Any) -> None:
    """A bad policy is rejected before anything is replaced."""
    with pytest.raises(ValueError):
        guarded_sqlite.install("nope")  # type: ignore[arg-type]
    assert sqlite3.connect is real_connect


def test_wrap_and_unwrap() -> None:
    """wrap is idempotent, re-wraps for a new policy, refuses non-connections; unwrap returns the raw objects."""
    raw = sqlite3.connect(":memory:")
    con = guarded_sqlite.wrap(raw)
    assert isinstance(con, GuardedConnection) and guarded_sqlite.unwrap(con) is raw
    assert guarded_sqlite.wrap(con) is con
    assert guarded_sqlite.wrap(guarded_sqlite.wrap(raw)) is not con  # each wrap of a raw connection is a new proxy
    assert guarded_sqlite.wrap(con, guard="patch") is con  # same policy as it has
    observed = guarded_sqlite.wrap(con, guard="observe")
    assert observed is not con and observed.guard_policy.mode == "observe" and con.guard_policy.mode == "patch"
    assert guarded_sqlite.unwrap(observed) is raw
    assert guarded_sqlite.wrap(observed) is observed
    cur = con.execute("SELECT 1")
    assert type(guarded_sqlite.unwrap(cur)) is sqlite3.Cursor
    for other in (raw, raw.cursor(), 42, None):
        assert guarded_sqlite.unwrap(other) is other
    for not_a_connection in (raw.cursor(), cur, "x.db", None, 42):
        with pytest.raises(TypeError):
            guarded_sqlite.wrap(not_a_connection)  # type: ignore[arg-type]


def test_wrap_idempotent_for_connect_result() -> None:
    """``wrap(wrap(c)) is wrap(c)`` for a connection from connect()."""
    con = guarded_sqlite.connect(":memory:")
    assert guarded_sqlite.wrap(guarded_sqlite.wrap(con)) is guarded_sqlite.wrap(con) is con


@pytest.mark.parametrize(
    ("guard", "error"),
    [
        ("nope", ValueError),
        ("PATCH", ValueError),
        ("", ValueError),
        (1, TypeError),
        (True, TypeError),
        (["patch"], TypeError),
    ],
)
def test_bad_guard_values_are_rejected(guard: Any, error: type[Exception]) -> None:
    """connect/wrap/install reject an unknown mode with ValueError and a wrong type with TypeError."""
    with pytest.raises(error):
        guarded_sqlite.connect(":memory:", guard=guard)
    with pytest.raises(error):
        guarded_sqlite.wrap(sqlite3.connect(":memory:"), guard=guard)


@pytest.mark.parametrize(
    "kwargs",
    [{"mode": "nope"}, {"row_cap": 0}, {"row_cap": 1.5}, {"row_cap": True}, {"tau_inject": 0}, {"tau_remove": 1.0}],
)
def test_bad_policies_are_rejected(kwargs: dict[str, Any]) -> None:
    """GuardPolicy validates its fields."""
    with pytest.raises(ValueError):
        GuardPolicy(**kwargs)
