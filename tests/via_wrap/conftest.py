"""Every ``guarded_sqlite.connect`` in these tests returns a ``wrap()`` proxy over a plain connection."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

import guarded_sqlite
from guarded_sqlite.policy import resolve_policy
from guarded_sqlite.proxy import ConnectionProxy

_real_connect = sqlite3.connect


def connect_wrapped(database: Any, *args: Any, guard: Any = None, **kwargs: Any) -> Any:
    """``connect()`` as a proxy: the real sqlite3.connect, then the proxy (thread mode kept, as wrap()
    cannot know it)."""
    check_same_thread = kwargs.get("check_same_thread", args[3] if len(args) > 3 else True)
    raw = _real_connect(database, *args, **kwargs)
    return ConnectionProxy(raw, resolve_policy(guard), single_thread=bool(check_same_thread))


@pytest.fixture(autouse=True)
def _through_wrap(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(guarded_sqlite, "connect", connect_wrapped)
    yield
