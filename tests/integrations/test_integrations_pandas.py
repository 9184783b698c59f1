"""pandas on top of a guarded connection: read_sql/read_sql_query (parameters, options, chunks),
to_sql, errors, and an exploding query served patched.

Each test runs pandas' calls against a guarded connection and against a plain sqlite3 one on the same
data and compares the DataFrames. Any warning fails the run (pytest is configured with
``filterwarnings = error``); the tests also record warnings explicitly (``no_warnings``) so that a
library silencing its own warnings cannot hide one. Skipped when pandas is not installed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

import guarded_sqlite
from guarded_sqlite import GuardedConnection
from tests.helpers import EXPLODING_SQL, fill_fanout

pd = pytest.importorskip("pandas", reason="pandas is not installed")

EXPLODING_DISTINCT_SQL = EXPLODING_SQL.replace("SELECT", "SELECT DISTINCT", 1)


@pytest.fixture
def raw_fanout() -> Iterator[sqlite3.Connection]:
    con = sqlite3.connect(":memory:")
    fill_fanout(con)
    yield con
    con.close()


@pytest.fixture
def guarded_fanout(mode: str) -> Iterator[GuardedConnection]:
    con = guarded_sqlite.connect(":memory:", guard=mode)
    fill_fanout(con)
    yield con
    con.close()


# --------------------------------------------------------------------------------------------------
# pandas
# --------------------------------------------------------------------------------------------------

PANDAS_QUERIES = [
    pytest.param("SELECT * FROM orders ORDER BY id", None, id="plain"),
    pytest.param("SELECT id, amount FROM orders WHERE amount > ? AND customer_id = ?", (10, 2), id="qmark-tuple"),
    pytest.param("SELECT id, amount FROM orders WHERE amount > ? ORDER BY id", [30], id="qmark-list"),
    pytest.param("SELECT name, city FROM customers WHERE id >= :lo ORDER BY id", {"lo": 1}, id="named-dict"),
    pytest.param(
        "SELECT customer_id, count(*) AS n, sum(amount) AS total FROM orders GROUP BY customer_id", None, id="group-by"
    ),
    pytest.param("SELECT * FROM orders WHERE amount < 0", None, id="empty"),
    pytest.param(
        "SELECT c.name, o.amount FROM customers AS c JOIN orders AS o ON o.customer_id = c.id ORDER BY o.id",
        None,
        id="join-healthy",
    ),
]


@pytest.mark.parametrize("reader", [pd.read_sql, pd.read_sql_query], ids=["read_sql", "read_sql_query"])
@pytest.mark.parametrize(("sql", "params"), PANDAS_QUERIES)
def test_pandas_read_sql_matches_sqlite3(
    raw_fanout: sqlite3.Connection,
    guarded_fanout: GuardedConnection,
    no_warnings: list[Any],
    reader: Any,
    sql: str,
    params: Any,
) -> None:
    """read_sql/read_sql_query on a guarded connection give the same DataFrame as on sqlite3, warning-free."""
    expected = reader(sql, raw_fanout, params=params)
    got = reader(sql, guarded_fanout, params=params)
    pd.testing.assert_frame_equal(got, expected)
    assert len(expected.columns) >= 2


def test_pandas_read_sql_options_match_sqlite3(
    raw_fanout: sqlite3.Connection, guarded_fanout: GuardedConnection, no_warnings: list[Any]
) -> None:
    """index_col, coerce_float, dtype and parse_dates behave the same through the guard."""
    sql = "SELECT id, customer_id, amount, '2024-01-0' || (id % 9 + 1) AS day FROM orders"
    kwargs = {"index_col": "id", "dtype": {"amount": "float64"}, "parse_dates": ["day"]}
    expected = pd.read_sql_query(sql, raw_fanout, **kwargs)
    got = pd.read_sql_query(sql, guarded_fanout, **kwargs)
    pd.testing.assert_frame_equal(got, expected)
    assert str(got["day"].dtype).startswith("datetime64")


@pytest.mark.parametrize("chunksize", [1, 5, 100])
def test_pandas_chunked_read_matches_sqlite3(
    raw_fanout: sqlite3.Connection, guarded_fanout: GuardedConnection, no_warnings: list[Any], chunksize: int
) -> None:
    """chunksize= reads through fetchmany(); the chunks are the same frames as with sqlite3."""
    sql = "SELECT * FROM orders ORDER BY id"
    expected = list(pd.read_sql_query(sql, raw_fanout, chunksize=chunksize))
    got = list(pd.read_sql_query(sql, guarded_fanout, chunksize=chunksize))
    assert len(got) == len(expected) == -(-24 // chunksize)
    for got_chunk, expected_chunk in zip(got, expected):
        pd.testing.assert_frame_equal(got_chunk, expected_chunk)


def test_pandas_exploding_query(
    raw_fanout: sqlite3.Connection, guarded_fanout: GuardedConnection, mode: str, no_warnings: list[Any]
) -> None:
    """A fan-out read through pandas: observe returns sqlite3's frame, patch the frame of SELECT DISTINCT."""
    got = pd.read_sql(EXPLODING_SQL, guarded_fanout)
    expected_sql = EXPLODING_SQL if mode == "observe" else EXPLODING_DISTINCT_SQL
    pd.testing.assert_frame_equal(got, pd.read_sql(expected_sql, raw_fanout))
    assert len(got) == (24 if mode == "observe" else 4)


@pytest.mark.parametrize("method", [None, "multi"])
def test_pandas_to_sql_into_guarded_connection(
    raw_fanout: sqlite3.Connection, guarded_fanout: GuardedConnection, no_warnings: list[Any], method: Any
) -> None:
    """DataFrame.to_sql writes the same table (and returns the same count) as with sqlite3, for
    create, append and replace."""
    frame = pd.DataFrame(
        {
            "k": range(12),
            "label": [f"l{i}" for i in range(12)],
            "x": [i / 4 for i in range(12)],
            "flag": [i % 2 == 0 for i in range(12)],
        }
    )
    outcomes = []
    for con in (raw_fanout, guarded_fanout):
        counts = [
            frame.to_sql("frame", con, index=False, method=method),
            frame.head(5).to_sql("frame", con, index=False, if_exists="append", method=method, chunksize=2),
        ]
        appended = pd.read_sql("SELECT * FROM frame ORDER BY rowid", con)
        counts.append(frame.tail(3).to_sql("frame", con, index=True, if_exists="replace", method=method))
        replaced = pd.read_sql("SELECT * FROM frame", con)
        schema = con.execute("SELECT sql FROM sqlite_master WHERE name = 'frame'").fetchall()
        outcomes.append((counts, appended, replaced, schema))
    (raw_counts, raw_appended, raw_replaced, raw_schema), (counts, appended, replaced, schema) = outcomes
    assert counts == raw_counts
    assert len(appended) == 17 and len(replaced) == 3
    pd.testing.assert_frame_equal(appended, raw_appended)
    pd.testing.assert_frame_equal(replaced, raw_replaced)
    assert schema == raw_schema


def test_pandas_to_sql_if_exists_fail_raises_like_sqlite3(
    raw_fanout: sqlite3.Connection, guarded_fanout: GuardedConnection, no_warnings: list[Any]
) -> None:
    """Writing over an existing table with if_exists='fail' raises the same ValueError."""
    frame = pd.DataFrame({"a": [1]})
    messages = []
    for con in (raw_fanout, guarded_fanout):
        with pytest.raises(ValueError) as info:
            frame.to_sql("orders", con)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


def test_pandas_read_sql_error_matches_sqlite3(
    raw_fanout: sqlite3.Connection, guarded_fanout: GuardedConnection, no_warnings: list[Any]
) -> None:
    """A bad query raises pandas' DatabaseError with the same message."""
    messages = []
    for con in (raw_fanout, guarded_fanout):
        with pytest.raises(pd.errors.DatabaseError) as info:
            pd.read_sql("SELECT * FROM nope", con)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    assert "no such table" in messages[0]
