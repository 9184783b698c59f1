"""The demo behind ``guarded-sqlite demo``: a small shop database and a join that fans out.

The example is the failure the project exists for: SQL that a set-based evaluator scores as correct
(every customer who bought a book is in the result) but that returns each of them once per book
line, so an application summing over the rows reports several times the true total.

The database is stamped with ``APPLICATION_ID`` (SQLite's ``PRAGMA application_id``), so that ``demo
--db PATH`` can rebuild its own database and refuse to replace anyone else's, or its own once changed
(``replace_refusal``).
"""

from __future__ import annotations

import shlex
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._api import connect
from ..evaluation.sample import database_script


def _from_the_sample() -> tuple[str, list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    # The demo's shop is the evaluation sample's (evaluation/sample_data/shop.sql), written once there:
    # its tables but order_items, its first six customers and five products. Order lines get no key
    # here, so that no key proves the demo's join repeats nothing.
    sample = sqlite3.connect(":memory:")
    try:
        sample.executescript(database_script("shop"))
        tables = sample.execute(
            "SELECT sql FROM sqlite_master WHERE name IN ('customers', 'products', 'orders') ORDER BY rowid"
        ).fetchall()
        customers = sample.execute("SELECT * FROM customers WHERE id <= 6 ORDER BY id").fetchall()
        products = sample.execute("SELECT * FROM products WHERE id <= 5 ORDER BY id").fetchall()
    finally:
        sample.close()
    schema = "".join(f"{sql};\n" for (sql,) in tables) + _ORDER_ITEMS
    return schema, customers, products


_ORDER_ITEMS = """CREATE TABLE order_items (
    order_id INTEGER NOT NULL REFERENCES orders(id),
    product_id INTEGER NOT NULL REFERENCES products(id),
    quantity INTEGER NOT NULL
);
"""

SCHEMA, CUSTOMERS, PRODUCTS = _from_the_sample()
"""The demo database's tables, and its customers and products as rows (id, name, city, points) and
(id, name, category, price)."""

QUESTION = "What is the total loyalty balance of the customers who bought books?"
# What a text-to-SQL model typically writes: correct as a set, wrong as a multiset.
GENERATED_SQL = """SELECT c.name, c.points
FROM customers AS c
JOIN orders AS o ON o.customer_id = c.id
JOIN order_items AS i ON i.order_id = o.id
JOIN products AS p ON p.id = i.product_id
WHERE p.category = ?  -- parameter and comment survive the patch"""
HEALTHY_SQL = "SELECT name, city FROM customers WHERE points > ? ORDER BY name"

APPLICATION_ID = 0x4753514C
"""``PRAGMA application_id`` of the demo's database: "GSQL" in ASCII, a fixed 32-bit number."""

_HEADER = b"SQLite format 3\x00"
_ID_OFFSET = 68  # where a SQLite file's header keeps its application_id (4 bytes, big-endian)


def is_demo_database(header: bytes) -> bool:
    r"""Whether the first 100 bytes of a file are those of a database ``build_shop`` made.

    >>> is_demo_database(b"SQLite format 3\x00" + bytes(52) + APPLICATION_ID.to_bytes(4, "big") + bytes(28))
    True
    >>> is_demo_database(b"SQLite format 3\x00" + bytes(84))
    False
    >>> is_demo_database(b"name,city\n")
    False
    """
    return header.startswith(_HEADER) and int.from_bytes(header[_ID_OFFSET : _ID_OFFSET + 4], "big") == APPLICATION_ID


def replace_refusal(path: Path) -> str | None:
    """Why ``build_shop`` must not replace the file at ``path``, or None: nothing there, an empty file, or
    a database the demo stamped and nobody changed since (``demo_changes``). A file that is not the
    demo's database, and a demo database with a table, a row or a schema changed, are refused."""
    try:
        with path.open("rb") as file:
            header = file.read(100)
    except FileNotFoundError:
        return None
    except OSError as error:
        return (
            f"cannot be read to tell whether it is the demo's database ({error.strerror}); pass --force to overwrite it"
        )
    if not header:
        return None
    if not is_demo_database(header):
        return "exists and is not the demo's database; pass --force to overwrite it"
    changes = demo_changes(path)
    if changes:
        return f"is the demo's database, changed since the demo made it ({changes}); pass --force to rebuild it"
    return None


def _contents(con: sqlite3.Connection) -> dict[str, tuple[str, list[tuple[Any, ...]]]]:
    """Each table's (schema SQL, rows in a fixed order) of a database."""
    tables = con.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    ).fetchall()
    found = {}
    for name, sql in tables:
        quoted = '"' + name.replace('"', '""') + '"'
        rows = con.execute(f"SELECT * FROM {quoted}").fetchall()
        found[name] = (sql, sorted(rows, key=repr))
    return found


def demo_changes(path: Path) -> str | None:
    """How the demo database at ``path`` differs from the one ``build_shop`` makes (tables added or
    dropped, tables whose definition or rows changed, at most three named each), or None when it holds
    exactly the demo's tables and rows. A file SQLite cannot read counts as changed."""
    expected_con = sqlite3.connect(":memory:")
    try:
        _fill(expected_con)
        expected = _contents(expected_con)
    finally:
        expected_con.close()
    try:
        con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            actual = _contents(con)
        finally:
            con.close()
    except sqlite3.Error as error:
        return f"SQLite cannot read it: {error}"
    parts = []
    for label, names in (
        ("tables added", sorted(set(actual) - set(expected))),
        ("tables dropped", sorted(set(expected) - set(actual))),
        ("tables changed", sorted(name for name in expected if name in actual and actual[name] != expected[name])),
    ):
        if names:
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            parts.append(f"{label}: {shown}")
    return "; ".join(parts) or None


def build_shop(path: str | Path) -> None:
    """Create (or recreate) the demo database at ``path``: 6 customers, 30 orders, 150 order lines,
    stamped with ``APPLICATION_ID``. Whatever file is at ``path`` is replaced (the CLI asks
    ``replace_refusal`` first)."""
    path = Path(path)
    if path.exists():
        path.unlink()
    con = sqlite3.connect(path)
    try:
        with con:
            _fill(con)
    finally:
        con.close()


def _fill(con: sqlite3.Connection) -> None:
    """The demo's tables and rows, and its ``application_id`` stamp, in an empty database."""
    con.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    con.executescript(SCHEMA)
    con.executemany("INSERT INTO customers VALUES (?, ?, ?, ?)", CUSTOMERS)
    con.executemany("INSERT INTO products VALUES (?, ?, ?, ?)", PRODUCTS)
    orders = [
        (order_id, 1 + order_id % len(CUSTOMERS), f"2026-{1 + order_id % 12:02d}-15") for order_id in range(1, 31)
    ]
    con.executemany("INSERT INTO orders VALUES (?, ?, ?)", orders)
    # Every order holds each product once: book buyers appear once per order per book.
    lines = [(order_id, product_id, 1) for order_id in range(1, 31) for product_id in range(1, len(PRODUCTS) + 1)]
    con.executemany("INSERT INTO order_items VALUES (?, ?, ?)", lines)


NEXT_SQL = "SELECT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id"
"""The query the demo's closing lines suggest to try with ``guarded-sqlite query``: a join that repeats
each customer once per order."""


def run(
    path: str | Path,
    out: Callable[[str], None] = print,
    *,
    where: str | None = None,
    kept: bool = True,
    verbose: bool = False,
) -> int:
    """Build the shop at ``path``, run the demo, print it with ``out``; returns a process exit code.

    ``where`` says what became of the file (created, rebuilt, replaced), ``kept`` whether it outlives
    the demo (False for the temporary file of a demo run without ``--db``): the closing lines suggest
    the next command from there. ``verbose`` adds the report's fields: rule, thresholds, evidence."""
    from ..agent.presenting import plain_account

    path = Path(path)
    build_shop(path)
    out(f"Database: {path.resolve()} ({where or 'created'})")
    out("")
    out(f"Question: {QUESTION}")
    out("SQL, as a text-to-SQL model wrote it:\n  " + GENERATED_SQL.replace("\n", "\n  "))
    out("")

    plain = sqlite3.connect(path)
    raw_rows = plain.execute(GENERATED_SQL, ("books",)).fetchall()
    plain.close()
    out(f"sqlite3:        {len(raw_rows)} rows, loyalty total = {sum(points for _, points in raw_rows)}")

    con = connect(path)
    cur = con.execute(GENERATED_SQL, ("books",))
    rows = cur.fetchall()
    report = cur.guard_report
    assert report is not None
    out(f"guarded_sqlite: {len(rows)} rows, loyalty total = {sum(points for _, points in rows)}")
    out("")
    out(plain_account(report))
    if report.patched:
        out("The rows served are those of:\n  " + report.final_sql.replace("\n", "\n  "))
    if verbose:
        out("")
        out(f"guard_report: {report.summary()}")
        out(
            f"  trigger     {report.trigger}  (dup_ratio {report.dup_ratio:.3f} >= tau_inject"
            f" {con.guard_policy.tau_inject})"
        )
        out(f"  action      {report.action}")
        for decision in report.decisions:
            out(f"  {decision.rule:<11} {'applied' if decision.applied else 'not applied'}: {decision.reason}")
        out(f"  timings     detection {report.detect_us:.1f} us, patch {report.patch_ms:.2f} ms")
    out("")

    healthy = con.execute(HEALTHY_SQL, (90,))
    healthy_rows = healthy.fetchall()
    healthy_report = healthy.guard_report
    assert healthy_report is not None
    out(f"A query whose rows do not repeat: {HEALTHY_SQL}")
    out(f"  {len(healthy_rows)} rows. {plain_account(healthy_report)}")

    observed = connect(path, guard="observe").execute(GENERATED_SQL, ("books",))
    observed_rows = observed.fetchall()
    observed_report = observed.guard_report
    assert observed_report is not None
    out("")
    out(f"The first query again with guard='observe', which only reports: {len(observed_rows)} rows.")
    out(f"  {plain_account(observed_report)}")
    con.close()

    out("")
    query = f"guarded-sqlite query {shlex.quote(str(path))} {shlex.quote(NEXT_SQL)}"
    if kept:
        out("Next, try a query of your own on it; the guard says what it did to the rows (--verbose: why):")
        out(f"  {query}")
    else:
        out("Next, keep the database (--db) and try a query of your own on it:")
        out("  guarded-sqlite demo --db shop.db")
        out(f"  guarded-sqlite query shop.db {shlex.quote(NEXT_SQL)}")
    # A wheel carries no README: the pointer is to what every install has.
    out(
        "In Python: guarded_sqlite.connect() takes sqlite3.connect()'s arguments; "
        "`python -m pydoc guarded_sqlite` has the rest."
    )
    return 0 if report.action == "distinct_injected" and len(rows) < len(raw_rows) else 1
