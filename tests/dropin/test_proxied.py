"""The ``[wrap]`` runs really run against proxies (see tests/connect_or_wrap.py)."""

import sqlite3

import pytest

import guarded_sqlite
from guarded_sqlite._io.proxy import ConnectionProxy, CursorProxy


@pytest.mark.wrap_only
def test_connect_gives_a_proxy_here() -> None:
    con = guarded_sqlite.connect(":memory:")
    assert type(con) is ConnectionProxy and isinstance(con, sqlite3.Connection)
    assert type(con.cursor()) is CursorProxy and type(guarded_sqlite.unwrap(con)) is sqlite3.Connection
