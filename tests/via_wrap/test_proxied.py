"""The modules here really run against proxies."""

import sqlite3

import guarded_sqlite
from guarded_sqlite.proxy import ConnectionProxy, CursorProxy


def test_connect_gives_a_proxy_here() -> None:
    con = guarded_sqlite.connect(":memory:")
    assert type(con) is ConnectionProxy and isinstance(con, sqlite3.Connection)
    assert type(con.cursor()) is CursorProxy and type(guarded_sqlite.unwrap(con)) is sqlite3.Connection
