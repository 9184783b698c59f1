"""Running a test once through ``connect()`` and once through ``wrap()`` (ids ``[connect]`` and ``[wrap]``).

``guarded_sqlite.connect`` returns ``sqlite3.Connection`` subclasses (the fast path); the wrapt proxies
that ``wrap()`` puts around connections the library did not open must keep the same drop-in behaviour.
A test that requests the ``connect_or_wrap`` fixture (every test under ``tests/dropin/``, through that
folder's conftest.py, and the modules that ask for it with ``usefixtures``) runs twice: as
``[connect]`` with ``guarded_sqlite.connect`` as it is, and as ``[wrap]`` with ``guarded_sqlite.connect``
replaced by ``connect_wrapped``, which opens a plain connection and returns it wrapped, as ``connect()``
did before the fast path. Tests call ``guarded_sqlite.connect`` at call time, so they need no change.

Marks: ``@pytest.mark.connect_only`` runs a test as ``[connect]`` only (it is about what ``connect()``
itself returns, or differs by design for a proxy), ``@pytest.mark.wrap_only`` as ``[wrap]`` only.
``pytest_generate_tests`` in tests/conftest.py calls ``parametrize`` below.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

import guarded_sqlite
from guarded_sqlite._io.proxy import ConnectionProxy
from guarded_sqlite.policy import resolve_policy

FIXTURE = "connect_or_wrap"
WAYS = ("connect", "wrap")

_real_connect = sqlite3.connect


def connect_wrapped(database: Any, *args: Any, guard: Any = None, **kwargs: Any) -> Any:
    """``connect()`` as a proxy: the real sqlite3.connect, then the proxy (thread mode kept, as wrap()
    cannot know it)."""
    check_same_thread = kwargs.get("check_same_thread", args[3] if len(args) > 3 else True)
    raw = _real_connect(database, *args, **kwargs)
    return ConnectionProxy(raw, resolve_policy(guard), single_thread=bool(check_same_thread))


def ways_for(metafunc: pytest.Metafunc) -> list[str]:
    """The ways a test runs: both, or the one its ``connect_only``/``wrap_only`` mark names."""
    connect_only = metafunc.definition.get_closest_marker("connect_only") is not None
    wrap_only = metafunc.definition.get_closest_marker("wrap_only") is not None
    if connect_only and wrap_only:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: both connect_only and wrap_only")
    return ["connect"] if connect_only else ["wrap"] if wrap_only else list(WAYS)


def parametrize(metafunc: pytest.Metafunc) -> None:
    """Parametrise a test that uses the ``connect_or_wrap`` fixture over the ways it runs."""
    if FIXTURE in metafunc.fixturenames:
        metafunc.parametrize(FIXTURE, ways_for(metafunc), indirect=True)


@pytest.fixture
def connect_or_wrap(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``"connect"`` or ``"wrap"``; under ``"wrap"`` every ``guarded_sqlite.connect`` returns a proxy."""
    way: str = request.param
    if way == "wrap":
        monkeypatch.setattr(guarded_sqlite, "connect", connect_wrapped)
    yield way
