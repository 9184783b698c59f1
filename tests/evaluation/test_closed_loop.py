"""The closed-loop benchmark (``benchmarks/closed_loop.py``): the scripted reviser's rules on fixtures, and one run
on the sample shipped in the package (offline: no Spider data)."""

from __future__ import annotations

import doctest
import hashlib
import importlib.util
import json
import sqlite3
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

from guarded_sqlite._analysis.rewrite import is_read_only_query
from guarded_sqlite.evaluation.sample import DB_IDS, sample_inputs

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "closed_loop.py"


def _load() -> ModuleType:
    # benchmarks/ is not a package; register the module before running it so its dataclasses can find it.
    spec = importlib.util.spec_from_file_location("closed_loop", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["closed_loop"] = module
    spec.loader.exec_module(module)
    return module


cl = _load()

# Feedback texts in GuardReport.feedback()'s wording (tests/rules/test_feedback.py pins the library side).
AMPLIFIED = (
    "The query returned 47 rows but only 6 distinct ones (87% are repeats).\n"
    "Why (amplified): o (orders) fans out c (customers) (o.customer_id is not a key); i (order_items) fans out c "
    "(customers) (joined only through o (orders), which fans out); projection has no key of c (customers).\n"
    "The guard served the 6 distinct rows (as SELECT DISTINCT).\n"
    "Next step: add DISTINCT to the outer SELECT, or test the joined table with EXISTS / IN (SELECT ...) instead of "
    "joining it, so that its rows do not repeat the answer."
)
MAYBE_MEANT = (
    "The query returned 87 rows but only 3 distinct ones (97% are repeats).\n"
    "Why (value_repeats): one table (order_items): duplicates repeat its values.\n"
    "The guard served all 87 rows as returned.\n"
    "Next step: if each answer should appear once, add DISTINCT; the repeats may be meant."
)
AGGREGATE = (
    "An aggregate counts rows several times: SUM(c.points) counts c (customers) once per row of o (orders), "
    "i (order_items): 8575 -> 945 (factor 9.07).\n"
    "The guard served the values as computed.\n"
    "Next step: aggregate before joining o (orders), i (order_items) (a subquery grouped by the join key), or test "
    "o (orders), i (order_items) with EXISTS / IN (SELECT ...) instead of joining them."
)
EMPTY = (
    "The query returned no rows.\nNext step: check the WHERE conditions and literal values (spelling, case, date "
    "formats) against the data; an empty answer may also be right."
)
ERROR = "The query failed: OperationalError: no such table: x.\nNext step: fix the SQL; check table and column names."

FAN_OUT_SQL = (
    "SELECT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id "
    "JOIN order_items AS i ON i.order_id = o.id"
)
SUM_SQL = (
    "SELECT sum(c.points) FROM customers AS c JOIN orders AS o ON o.customer_id = c.id "
    "JOIN order_items AS i ON i.order_id = o.id WHERE i.qty > 1"
)


@pytest.fixture
def shop() -> sqlite3.Connection:
    con = sqlite3.connect(":memory:")
    con.executescript(
        """
        CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, points INTEGER);
        CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER);
        CREATE TABLE order_items (id INTEGER PRIMARY KEY, order_id INTEGER, qty INTEGER, product_id INTEGER);
        CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT);
        INSERT INTO customers VALUES (1, 'Ana', 10), (2, 'Ben', 20), (3, 'Ana', 40), (4, 'Dee', 80);
        INSERT INTO orders VALUES (1, 1), (2, 1), (3, 2), (4, 3);
        INSERT INTO order_items VALUES (1, 1, 2, 1), (2, 1, 3, 2), (3, 2, 5, 1), (4, 3, 1, 1), (5, 4, 2, 2);
        INSERT INTO products VALUES (1, 'pen'), (2, 'ink');
        """
    )
    yield con
    con.close()


def test_the_scripts_doctests() -> None:
    # benchmarks/ is outside pytest's doctest paths; the examples in the reviser's docstrings run here.
    assert doctest.testmod(cl).failed == 0


# ---- reading the feedback


def test_fanning_tables_reads_the_evidence_in_order() -> None:
    assert cl.fanning_tables(AMPLIFIED) == ("o", "i")
    assert cl.fanning_tables(AMPLIFIED.replace("o (orders) fans out", "orders fans out")) == ("orders", "i")


def test_fanning_tables_refuses_cut_evidence_and_no_evidence() -> None:
    cut = AMPLIFIED.replace("projection has no key", "and 2 more; projection has no key")
    assert cl.fanning_tables(cut) is None
    assert cl.fanning_tables(MAYBE_MEANT) is None  # a Why line, but nothing fans out
    assert cl.fanning_tables(EMPTY) is None


def test_repeating_tables_reads_aliases_and_bare_names() -> None:
    assert cl.repeating_tables(AGGREGATE) == ("o", "i")
    bare = "Next step: aggregate before joining friend (a subquery grouped by the join key), or test friend ..."
    assert cl.repeating_tables(bare) == ("friend",)
    assert cl.repeating_tables(AMPLIFIED) is None


@pytest.mark.parametrize(
    ("question", "asks"),
    [
        ("List the different countries.", True),
        ("Which DISTINCT cities?", True),
        ("Show unique names.", True),
        ("In which years were cars produced?", False),
        ("List every order line.", False),
        (None, False),
    ],
)
def test_asks_for_distinct(question: str | None, asks: bool) -> None:
    assert cl.asks_for_distinct(question) is asks


# ---- the rules


def test_amplified_explosion_gets_distinct() -> None:
    revision = cl.revise("Which customers ordered?", FAN_OUT_SQL, AMPLIFIED)
    assert revision.rule == "distinct"
    assert revision.sql == FAN_OUT_SQL.replace("SELECT c.name", "SELECT DISTINCT c.name")


def test_distinct_inherits_p1_exemptions() -> None:
    for sql in (FAN_OUT_SQL + " LIMIT 3", "SELECT DISTINCT c.name FROM customers AS c JOIN orders AS o ON 1"):
        revision = cl.revise("Which customers?", sql, AMPLIFIED)
        assert revision.sql is None and revision.rule == "distinct", sql


def test_value_repeats_policy() -> None:
    sql, distinct = "SELECT qty FROM order_items", "SELECT DISTINCT qty FROM order_items"
    assert cl.revise("Which quantities occur?", sql, MAYBE_MEANT).sql is None
    assert cl.revise("Which different quantities occur?", sql, MAYBE_MEANT).sql == distinct
    always, never = cl.ReviserConfig(repeats="always"), cl.ReviserConfig(repeats="never")
    assert cl.revise("Which quantities occur?", sql, MAYBE_MEANT, always).sql == distinct
    assert cl.revise("Which different quantities?", sql, MAYBE_MEANT, never).sql is None


@pytest.mark.parametrize("feedback", ["", EMPTY, ERROR, "The guard removed DISTINCT and served 9 rows."])
def test_feedback_without_an_actionable_next_step_is_a_no_op(feedback: str) -> None:
    revision = cl.revise("Which customers?", FAN_OUT_SQL, feedback)
    assert revision == cl.Revision(None, "none", "the feedback has no next step the reviser acts on")


def test_aggregate_fan_out_becomes_exists_with_the_corrected_value(shop: sqlite3.Connection) -> None:
    revision = cl.revise("Total points of customers who bought more than one?", SUM_SQL, AGGREGATE)
    assert revision.rule == "aggregate_semijoin" and revision.sql is not None
    assert "EXISTS" in revision.sql and " JOIN " not in revision.sql.split("EXISTS")[0]
    # Customers 1 (three qualifying lines), 3 (one) and not 2 (qty 1): 10 + 40, each counted once.
    assert shop.execute(SUM_SQL).fetchall() == [(10 * 3 + 40,)]
    assert shop.execute(revision.sql).fetchall() == [(50,)]


def test_semi_join_when_the_from_table_is_the_one_removed(shop: sqlite3.Connection) -> None:
    sql = "SELECT p.name FROM order_items AS i JOIN products AS p ON p.id = i.product_id WHERE i.qty >= 2"
    revised = cl.semi_join(sql, ["i"]).sql
    assert revised is not None and revised.startswith("SELECT p.name FROM products AS p WHERE EXISTS")
    assert Counter(shop.execute(revised).fetchall()) == Counter(set(shop.execute(sql).fetchall()))


def test_semi_join_of_a_bridge_table_keeps_both_ends(shop: sqlite3.Connection) -> None:
    sql = (
        "SELECT c.name, p.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id "
        "JOIN order_items AS i ON i.order_id = o.id JOIN products AS p ON p.id = i.product_id"
    )
    revised = cl.semi_join(sql, ["o", "i"]).sql
    assert revised is not None
    # One row per (customer, product) pair linked by some order line: customers 1 and 3 share the name Ana.
    expected = shop.execute(
        "SELECT c.name, p.name FROM customers AS c, products AS p WHERE EXISTS (SELECT 1 FROM orders AS o, "
        "order_items AS i WHERE o.customer_id = c.id AND i.order_id = o.id AND p.id = i.product_id)"
    ).fetchall()
    assert Counter(shop.execute(revised).fetchall()) == Counter(expected)


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        (SUM_SQL.replace("sum(c.points)", "sum(c.points), max(i.qty)"), "used outside the join and WHERE"),
        (SUM_SQL.replace("sum(c.points)", "*"), "a * that includes"),
        (SUM_SQL + " GROUP BY o.id", "used outside the join and WHERE"),
        (SUM_SQL.replace("JOIN orders", "LEFT JOIN orders"), "outer, NATURAL or USING"),
        (SUM_SQL.replace("i.qty > 1", "qty > 1"), "unqualified column qty"),
        ("SELECT sum(c.points) FROM customers AS c JOIN orders AS o USING (id)", "outer, NATURAL or USING"),
        ("SELECT sum(c.points) FROM customers AS c JOIN orders AS x ON x.customer_id = c.id", "which the FROM"),
        ("SELECT sum(points) FROM customers UNION SELECT 1", "not a single SELECT"),
        ("SELECT sum(o.id) FROM orders AS o JOIN order_items AS i ON i.order_id = o.id", "every table in FROM"),
        ("SELEC sum(x) FROM", "does not parse"),
    ],
)
def test_unrevisable_aggregate_shapes_are_left_alone(sql: str, reason: str) -> None:
    feedback = AGGREGATE
    if "every table in FROM" in reason:
        feedback = AGGREGATE.replace("joining o (orders), i (order_items)", "joining o (orders), i (items), o")
    revision = cl.revise("What is the total?", sql, feedback)
    assert revision.sql is None and revision.rule == "aggregate_semijoin"
    assert reason in revision.reason, revision.reason


def test_semijoin_explosion_fix_and_its_fallback_to_distinct() -> None:
    config = cl.ReviserConfig(explosion_fix="semijoin")
    revision = cl.revise("Which customers ordered?", FAN_OUT_SQL, AMPLIFIED, config)
    assert revision.rule == "semijoin" and revision.sql is not None and "EXISTS" in revision.sql
    unqualified = FAN_OUT_SQL.replace("SELECT c.name", "SELECT name")
    fallback = cl.revise("Which customers ordered?", unqualified, AMPLIFIED, config)
    assert fallback.rule == "distinct" and fallback.sql == unqualified.replace("SELECT name", "SELECT DISTINCT name")


# ---- the whole loop on the shipped sample


def _digests(db_root: Path) -> dict[str, str]:
    return {db_id: hashlib.sha256((db_root / db_id / f"{db_id}.sqlite").read_bytes()).hexdigest() for db_id in DB_IDS}


def test_main_on_the_sample(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_json, out_md = tmp_path / "loop.json", tmp_path / "loop.md"
    assert cl.main(["--sample", "--gold-as-pred", "--json", str(out_json), "--markdown", str(out_md)]) == 0
    result = json.loads(out_json.read_text(encoding="utf-8"))
    assert out_md.read_text(encoding="utf-8") == capsys.readouterr().out
    pred, gold = result["files"]
    assert (pred["label"], gold["label"]) == ("pred", "gold as prediction")
    for f in result["files"]:
        assert f["n"] == 33 and sum(f["categories"].values()) == f["n"]
        assert f["flagged"]["n"] == f["categories"]["flagged"] == sum(f["flagged_by_trigger"].values())
        assert f["revised"] + sum(f["unrevised_reasons"].values()) == f["flagged"]["n"]
        assert f["revised"] == sum(f["revised_by_rule"].values()) and f["revision_errors"] == 0
        for subset in ("flagged", "all"):
            scores, changes = f[subset]["scores"], f[subset]["changes"]
            for side in ("after", "guard"):
                for metric, key in (("set", "set_correct"), ("multiset", "multiset_correct")):
                    net = changes[side][f"{metric}_fix"] - changes[side][f"{metric}_break"]
                    assert scores[side][key] - scores["before"][key] == net
        for pair in f["pairs"]:
            assert pair["revised_sql"] is None or is_read_only_query(pair["revised_sql"])
    # The sample's flagged predictions: 5 join fan-outs (DISTINCT fixes each), 1 SUM over a fan-out (the EXISTS
    # fixes it) and 2 value repeats the question does not ask to merge (left alone).
    flagged = pred["flagged"]
    assert pred["flagged_by_trigger"] == {"cartesian_explosion": 7, "aggregate_fanout": 1}
    assert pred["revised_by_rule"] == {"distinct": 5, "aggregate_semijoin": 1}
    assert flagged["scores"]["before"]["multiset_correct"] == 1
    assert flagged["scores"]["after"]["multiset_correct"] == 7 >= flagged["scores"]["guard"]["multiset_correct"]
    assert flagged["changes"]["after"]["multiset_break"] == flagged["changes"]["after"]["set_break"] == 0
    assert pred["categories"]["refused"] == 1  # "SELEC title ...": not readable as a query, never run
    # The gold fed back: nothing to fix, and the reviser breaks nothing.
    assert gold["all"]["changes"]["after"] == {"set_fix": 0, "set_break": 0, "multiset_fix": 0, "multiset_break": 0}
    assert gold["all"]["scores"]["after"]["multiset_correct"] == 33


def test_writes_are_never_executed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with sample_inputs(tmp_path / "sample") as sample:
        lines = sample.pred.read_text(encoding="utf-8").splitlines()
        lines[0] = "DELETE FROM customers"
        lines[1] = "INSERT INTO customers (name) VALUES ('x') RETURNING name"
        lines[13] = "WITH s AS (SELECT 1) UPDATE students SET city = 'Porto'"
        pred = tmp_path / "writes.txt"
        pred.write_text("\n".join(lines), encoding="utf-8")
        before = _digests(sample.db_root)
        out = tmp_path / "loop.json"
        argv = ["--db-root", str(sample.db_root), "--gold", str(sample.gold), "--pred", str(pred), "--json", str(out)]
        assert cl.main(argv) == 0
        capsys.readouterr()
        assert _digests(sample.db_root) == before
        (f,) = json.loads(out.read_text(encoding="utf-8"))["files"]
        assert f["categories"]["refused"] == 4  # the three writes and "SELEC ..."
        assert f["all"]["scores"]["before"]["set_correct"] == 26 - 3
