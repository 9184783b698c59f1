"""Gold results that differ between SQLite and the engine: the categories on rows alone, the query
shapes they read, and the report's list on DuckDB (no server needed). MariaDB's own differences are
in ``test_evaluation_mariadb.py``."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from guarded_sqlite._analysis.transpile import query_shape
from guarded_sqlite.cli.commands import main
from guarded_sqlite.evaluation import evaluate
from guarded_sqlite.evaluation.gold_differences import CATEGORIES, classify, describe, differs

from .test_evaluation_engines import make_db, write_inputs


def test_each_category_on_rows_and_shapes() -> None:
    plain = query_shape("SELECT a FROM t", ["t", "a"])
    assert classify(None, [(1,)], plain) == "sqlite_error"
    assert classify([(2.6666666666666665, 1)], [(Decimal("2.6667"), 1)], plain) == "numeric"
    assert classify([("Korea ",)], [("korea",)], plain) == "case_or_spaces"
    # Text that differs beyond case and trailing spaces is not that category.
    assert classify([("Korea",)], [(" Korea",)], plain) == "other"
    limited = query_shape("SELECT a FROM t ORDER BY b DESC LIMIT 1", ["t", "a", "b"])
    assert limited is not None and limited.unlimited_sql == "SELECT a FROM t ORDER BY b DESC"
    assert classify([("x",)], [("y",)], limited, unlimited_rows=[("x",), ("y",), ("z",)]) == "limit_ties"
    # A row the query without LIMIT never returns is no tie.
    assert classify([("x",)], [("w",)], limited, unlimited_rows=[("x",), ("y",)]) == "other"
    bare = query_shape("SELECT max(v), label FROM t", ["t", "v", "label"])
    assert classify([(9, "b")], [(9, "a")], bare) == "bare_column"
    assert classify([(3,)], [(Decimal("3.5000"),)], query_shape("SELECT 7 / 2")) == "division"
    compares = query_shape('SELECT a FROM t WHERE name = "ann"', ["t", "a", "name"])
    assert classify([], [(1,)], compares) == "text_comparison"
    assert classify([(281,)], [(49,)], query_shape("SELECT count(*) FROM t WHERE hp > 150", ["t", "hp"])) == (
        "number_comparison"
    )
    assert classify([(1,)], [(2,)], None) == "other"
    assert set(CATEGORIES) == {
        "sqlite_error",
        "numeric",
        "case_or_spaces",
        "limit_ties",
        "bare_column",
        "division",
        "text_comparison",
        "number_comparison",
        "other",
    }


def test_shapes_read_the_query_as_sqlite_does() -> None:
    # A double-quoted name that is a column stays a column: no text comparison.
    assert not query_shape('SELECT a FROM t WHERE "name" = a', ["t", "a", "name"]).compares_text  # type: ignore[union-attr]
    assert query_shape("SELECT a FROM t WHERE name LIKE 'x%'", ["t", "a", "name"]).compares_text  # type: ignore[union-attr]
    assert query_shape("SELECT a FROM t WHERE name IN ('x', 'y')", ["t", "a", "name"]).compares_text  # type: ignore[union-attr]
    # Grouped columns and a column under the aggregate are not bare.
    assert not query_shape("SELECT g, count(*) FROM t GROUP BY g").bare_columns  # type: ignore[union-attr]
    assert query_shape("SELECT g, h, count(*) FROM t GROUP BY g").bare_columns  # type: ignore[union-attr]
    assert not query_shape("SELECT count(*) FROM t WHERE a = b").compares_number  # type: ignore[union-attr]
    assert query_shape("SELECT a FROM t WHERE a BETWEEN 1 AND 2").compares_number  # type: ignore[union-attr]
    assert query_shape("SELECT a FROM t; SELECT 2") is None
    assert query_shape("SELECT a FROM t WHERE") is None


def test_describe_and_differs() -> None:
    assert not differs([(1,), (2,)], [(2,), (1,)])
    assert differs([(1,), (1,)], [(1,)])
    assert describe(None, [(1,)], "OperationalError: near 'ANY'") == "SQLite: OperationalError: near 'ANY'"
    assert describe([(1,), (2,)], [(1,), (3,), (4,)], None) == (
        "2 row(s) on SQLite, 3 on the engine; only on SQLite: (2,); only on the engine: (3,) (+1)"
    )


SCRIPT = """
CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, age INTEGER);
INSERT INTO people VALUES (1, 'Ann', 30), (2, 'bob', 41), (3, 'Cid', 25);
"""


def test_duckdb_lists_the_gold_results_that_differ(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("duckdb")
    root = tmp_path / "dbs"
    make_db(root, "shop", SCRIPT)
    pairs = [
        ("SELECT name FROM people WHERE name LIKE 'ann'", "SELECT name FROM people WHERE name LIKE 'Ann'"),
        ("SELECT 7 / 2", "SELECT 3"),
        ("SELECT name FROM people ORDER BY id", "SELECT name FROM people"),
    ]
    gold, pred = write_inputs(tmp_path, pairs)
    options = {"workers": 1, "engine": "duckdb", "cache_dir": tmp_path / "cache"}
    report = evaluate(root, gold, pred, **options)  # type: ignore[arg-type]
    # DuckDB's LIKE is case-sensitive and its '/' divides integers to a float: both reported, and the
    # pairs are scored against DuckDB's own gold result (the LIKE 'Ann' prediction passes there).
    found = {d.index: (d.category, d.sqlite_rows, d.engine_rows, d.same_set) for d in report.gold_differences}
    assert found == {0: ("text_comparison", 1, 0, False), 1: ("division", 1, 1, False)}
    assert [r.baseline_multiset for r in report.pairs] == [False, False, True]
    assert report.as_dict()["gold_differences"][1]["detail"] == (
        "1 row(s) on SQLite, 1 on the engine; only on SQLite: (3,); only on the engine: (3.5,)"
    )
    on_sqlite = evaluate(root, gold, pred, workers=1)
    assert on_sqlite.gold_differences == ()
    argv = ["eval", "--db-root", str(root), "--gold", str(gold), "--pred", str(pred), "--workers", "1"]
    assert main([*argv, "--engine", "duckdb", "--cache-dir", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    assert "Gold results that differ from SQLite's (their pairs are scored against the duckdb result): 2 " in out
    assert "  #1 shop [division] 1 row(s) on SQLite" in out
