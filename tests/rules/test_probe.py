"""Edge cases of the pure probe functions, found by the property tests and pinned here."""

from __future__ import annotations

import math

import pytest

from guarded_sqlite._core import probe


def test_classify_uses_the_ratio_as_defined_at_a_float_boundary() -> None:
    # (3 - 1) / 3 rounds below this tau, while 3 * tau rounds to exactly 2.0.
    tau = math.nextafter(2 / 3, 1.0)
    assert (3 - 1) / 3 < tau and 3 * tau == 2.0
    assert probe.classify(3, 1, tau) is None
    assert probe.classify(3, 1, 2 / 3) == probe.CARTESIAN_EXPLOSION


@pytest.mark.parametrize("tau", [0.1, 0.05, 0.3333, 0.5, 0.99, 1e-6, 1e-26, 5e-324])
def test_min_rows_for_removal_is_the_first_row_count_removal_can_commit(tau: float) -> None:
    rows = probe.min_rows_for_removal(tau)
    assert probe.removal_can_commit(rows, tau)
    assert rows == 1 or not probe.removal_can_commit(rows - 1, tau)


def test_min_rows_for_removal_at_the_papers_threshold() -> None:
    assert probe.min_rows_for_removal(0.10) == 9
    assert probe.min_rows_for_removal(0.0) > 10**18


def test_probe_large_stops_early_but_counts_exactly_on_demand() -> None:
    rows = [(i,) for i in range(10_000)]
    trigger, count = probe.probe_large(rows, 0.8)
    assert trigger is None and isinstance(count, probe.PartialCount)
    assert count.lower_bound < 10_000 and count.exact() == 10_000


def test_probe_large_scans_everything_for_an_explosion() -> None:
    rows = [(i % 7,) for i in range(10_000)]
    assert probe.probe_large(rows, 0.8) == (probe.CARTESIAN_EXPLOSION, 7)


@pytest.mark.parametrize(
    ("sql", "mentions"),
    [
        ("SELECT DISTINCT a FROM t", True),
        ("select distinct a from t", True),
        ("SeLeCt DiStInCt a FROM t", True),
        ("SELECT a FROM t WHERE note = 'distinctive'", True),  # a pre-screen: the parser decides later
        ("SELECT a FROM t", False),
        ("SELECT DISTINC a FROM t", False),
        ("", False),
    ],
)
def test_distinct_pre_screen(sql: str, mentions: bool) -> None:
    assert probe.mentions_distinct(sql) is mentions


@pytest.mark.parametrize(
    ("sql", "joins"),
    [
        # a comment's or a string's characters inside a quoted name start nothing: the join after it counts
        ('SELECT SUM(o.total) FROM "or--ders" o JOIN items i ON i.order_id = o.id', True),
        ("SELECT SUM(o.total) FROM [it's] o JOIN items i ON i.order_id = o.id WHERE i.sku = 'a'", True),
        ("SELECT SUM(o.total) FROM `x/*y` o, items i WHERE i.order_id = o.id", True),
        ('SELECT SUM(o.total) FROM orders o JOIN "it\'s ""/*""" i ON i.order_id = o.id', True),
        # no-op cases: what comments and strings hold is still not SQL
        ("SELECT SUM(o.total) FROM orders o -- JOIN items i ON i.order_id = o.id", False),
        ("SELECT SUM(o.total) FROM orders o WHERE o.note = ' JOIN items i'", False),
        ('SELECT SUM(o.total) FROM orders o /* "a", JOIN b */ WHERE o.id > 1', False),
    ],
)
def test_the_aggregate_screen_reads_quoted_names_whole(sql: str, joins: bool) -> None:
    probe.AGGREGATE_SCREEN.pop(sql, None)
    assert (probe.mentions_value_aggregate_over_join(sql) is True) is joins
    assert probe.view_joins(sql.replace("SUM(o.total)", "o.total")) is joins


def test_a_fan_out_through_a_quoted_name_with_dashes_is_checked() -> None:
    """End to end: the join of a table whose name holds ``--`` was not seen by the screen, so the SUM the
    join repeats went unchecked; it is now corrected under ``text_to_sql``."""
    import guarded_sqlite

    con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    con.executescript(
        'CREATE TABLE "or--ders" (id INTEGER PRIMARY KEY, total INTEGER);'
        "CREATE TABLE items (id INTEGER PRIMARY KEY, order_id INTEGER);"
        'INSERT INTO "or--ders" VALUES (1, 10), (2, 5);'
        "INSERT INTO items VALUES (1, 1), (2, 1), (3, 1), (4, 2);"
    )
    cur = con.execute('SELECT SUM(o.total) FROM "or--ders" o JOIN items i ON i.order_id = o.id')
    assert cur.fetchall() == [(15,)]  # each order once (as written: 35)
    assert cur.guard_report is not None and cur.guard_report.trigger == "aggregate_fanout"


@pytest.mark.parametrize(
    ("sql", "name"),
    [
        ('SELECT SUM(total) FROM "order lines"', "order lines"),
        ("SELECT SUM(total) FROM [Order Lines]", "order lines"),
        ("SELECT SUM(total) FROM `order-lines`", "order-lines"),
        ('SELECT SUM(total) FROM "say ""hi"""', 'say "hi"'),
        ("SELECT SUM(total) FROM order_lines", "order_lines"),  # no-op: a bare name is a word already
    ],
)
def test_an_aggregate_without_a_join_is_screened_with_its_quoted_names(sql: str, name: str) -> None:
    probe.AGGREGATE_SCREEN.pop(sql, None)
    words = probe.mentions_value_aggregate_over_join(sql)
    assert isinstance(words, frozenset) and name in words


@pytest.mark.parametrize("quoted", ['"order lines"', "[order lines]", '"Order Lines"'])
def test_a_joining_view_with_a_space_in_its_name_is_checked(quoted: str) -> None:
    """End to end (c35's view through a name with a space): the screen's words split the name, no view
    was found to join, and the SUM the view's join repeats went unchecked."""
    import guarded_sqlite

    con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    con.executescript(
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER);"
        "CREATE TABLE items (id INTEGER PRIMARY KEY, order_id INTEGER);"
        "INSERT INTO orders VALUES (1, 10), (2, 5);"
        "INSERT INTO items VALUES (1, 1), (2, 1), (3, 1), (4, 2);"
        'CREATE VIEW "order lines" AS SELECT o.id, o.total FROM orders o JOIN items i ON i.order_id = o.id;'
    )
    cur = con.execute(f"SELECT SUM(total) FROM {quoted}")
    assert cur.fetchall() == [(15,)]  # each order once (as written: 35)
    assert cur.guard_report is not None and cur.guard_report.trigger == "aggregate_fanout"


def test_a_view_over_a_joining_view_joins() -> None:
    views = [
        ("V1", "CREATE VIEW v1 AS SELECT o.id, o.total FROM orders o JOIN items i ON i.order_id = o.id"),
        ("v2", "CREATE VIEW v2 AS SELECT * FROM v1 WHERE total > 0"),
        ("v3", 'CREATE VIEW v3 AS SELECT id FROM "V2"'),
        ("solo", "CREATE VIEW solo AS SELECT * FROM orders -- v1"),  # a comment names v1: no read of it
        ("named", "CREATE VIEW named AS SELECT 'v1' AS t FROM orders"),  # nor does a string
        ("empty", ""),
    ]
    assert probe.joining_view_names(views) == {"v1", "v2", "v3"}
