"""Views in an aggregate over a join, on the four engines: a view whose body the catalog shows is read
as that body (a derived table's keys, or read through when it only joins and filters; PostgreSQL's
``pg_get_viewdef`` and MySQL's ``information_schema.views`` too), and a view whose keys stay unknown
never earns "not at risk": the rows it may repeat are said, not assumed away."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from guarded_sqlite.report import AGGREGATE_NOT_AT_RISK
from tests.engines.test_engines import ENGINES, EngineDB, _make_db, maria_database, pg_schema  # noqa: F401

VIEWS = [
    # Joins: read through (each customer once per order).
    "CREATE VIEW customer_orders AS SELECT c.id, c.city, o.amount FROM customers c "
    "JOIN orders o ON o.customer_id = c.id",
    # Aggregates: not read through; its body's GROUP BY is its key (city, amount), not city alone.
    "CREATE VIEW city_amounts AS SELECT c.city, o.amount FROM customers c JOIN orders o ON o.customer_id = c.id "
    "GROUP BY c.city, o.amount",
    # Renames its columns by position: SQLite and DuckDB keep that text, and its keys stay unknown there;
    # PostgreSQL's and MySQL's catalogs show the body with the names as aliases, which is read.
    "CREATE VIEW renamed_orders (buyer, amt) AS SELECT customer_id, amount FROM orders",
]

TEXT_KEYS_UNTRUSTED = {"mysql"}
"""Engines whose default collation is case-insensitive: ``city_amounts``' text key does not tell rows apart
there (two cities differing in case are one group), so the analysis does not lean on it."""


@pytest.fixture(params=ENGINES)
def views_db(request: pytest.FixtureRequest) -> Iterator[EngineDB]:
    for db in _make_db(request.param, request):
        for view in VIEWS:
            db.raw_run(view)
        db.commit()
        yield db


def aggregate_reason(report: object) -> str:
    decisions = [d for d in report.decisions if d.rule == "aggregate"]  # type: ignore[attr-defined]
    assert len(decisions) == 1, report
    return str(decisions[0].reason)


@pytest.mark.parametrize(
    ("sql", "true_sql"),
    [
        (
            "SELECT SUM(c.id) FROM customers c JOIN customer_orders v ON v.id = c.id",
            "SELECT SUM(id) FROM customers WHERE id IN (SELECT customer_id FROM orders)",
        ),
        (
            "SELECT SUM(c.id) FROM customers c JOIN city_amounts v ON v.city = c.city",
            "SELECT SUM(id) FROM customers WHERE city IN (SELECT c.city FROM customers c JOIN orders o "
            "ON o.customer_id = c.id)",
        ),
    ],
    ids=["joining view", "aggregating view"],
)
def test_an_aggregate_a_view_inflates_is_corrected_as_over_its_body(
    views_db: EngineDB, sql: str, true_sql: str
) -> None:
    inflated = views_db.raw_rows(sql)[0][0]
    truth = views_db.raw_rows(true_sql)[0][0]
    assert inflated > truth  # the shape inflates: the test could fail
    rows, report = views_db.fetch(views_db.guarded("text_to_sql"), sql)
    reason = aggregate_reason(report)
    if views_db.name in TEXT_KEYS_UNTRUSTED and "city_amounts" in sql:
        assert [tuple(row) for row in rows] == [(inflated,)] and reason.startswith("aggregate at risk"), reason
        return
    assert [tuple(row) for row in rows] == [(truth,)], reason
    assert reason.startswith("corrected values served")


def test_a_view_whose_keys_are_unknown_is_never_called_not_at_risk(views_db: EngineDB) -> None:
    """Each customer once per order through ``renamed_orders``: corrected where the catalog shows the
    view's body with its names, said to be at risk where the keys stay unknown; never "not at risk"."""
    sql = "SELECT SUM(c.id) FROM customers c JOIN renamed_orders r ON r.buyer = c.id"
    inflated = views_db.raw_rows(sql)[0][0]
    truth = views_db.raw_rows("SELECT SUM(id) FROM customers WHERE id IN (SELECT customer_id FROM orders)")[0][0]
    assert inflated > truth
    rows, report = views_db.fetch(views_db.guarded("text_to_sql"), sql)
    reason = aggregate_reason(report)
    if views_db.name in ("postgres", "mysql"):
        assert [tuple(row) for row in rows] == [(truth,)] and reason.startswith("corrected values served"), reason
    else:
        assert [tuple(row) for row in rows] == [(inflated,)], reason  # served as the database returned
        assert reason.startswith("aggregate at risk") and "renamed_orders has no known key" in reason


def test_a_view_s_key_from_its_body_makes_a_lookup_not_at_risk(views_db: EngineDB) -> None:
    """``city_amounts`` is grouped by (city, amount): joined on both, it repeats nothing."""
    sql = (
        "SELECT SUM(o.amount) FROM orders o JOIN customers c ON c.id = o.customer_id "
        "JOIN city_amounts v ON v.city = c.city AND v.amount = o.amount"
    )
    rows, report = views_db.fetch(views_db.guarded("text_to_sql"), sql)
    assert rows == views_db.raw_rows(sql)
    reason = aggregate_reason(report)
    assert reason.startswith("aggregate at risk" if views_db.name in TEXT_KEYS_UNTRUSTED else AGGREGATE_NOT_AT_RISK)
