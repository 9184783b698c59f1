"""The evaluation on ClickHouse through chDB (``eval --engine clickhouse``, issue 45 item 3): the copies
(types, ORDER BY keys, lower-cased names, reuse) and the packaged sample scored as on SQLite.

Each evaluation runs as ``guarded-sqlite eval`` in a process of its own: chDB serves one folder per
process, and this test process may serve the engine tests' (``conftest.chdb_path``). Skipped without
chdb unless ``GUARDED_SQLITE_REQUIRE_CLICKHOUSE=1``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from guarded_sqlite.evaluation.copy_clickhouse import clickhouse_database_name

from .test_evaluation_engines import make_db


def eval_cli(*args: str, cwd: Path) -> dict[str, Any]:
    out = cwd / f"report{len(list(cwd.glob('report*.json')))}.json"
    done = subprocess.run(
        [sys.executable, "-m", "guarded_sqlite", "eval", *args, "--json", str(out)],
        capture_output=True, text=True, cwd=cwd, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def test_the_sample_scores_as_on_sqlite(chdb_path: str, tmp_path: Path) -> None:
    """Gold and predictions of the packaged sample on chDB copies: the same scores and the same repairs
    as on the SQLite files (P1 +4 under patch: the keys proven unique on the copies' data); the copies
    are reused by the next run."""
    on_sqlite = eval_cli("--sample", "--workers", "1", cwd=tmp_path)
    cache = tmp_path / "cache"
    first = eval_cli("--sample", "--engine", "clickhouse", "--cache-dir", str(cache), cwd=tmp_path)
    assert first["engine"] == "clickhouse"
    assert {c["action"] for c in first["copies"]} == {"copied"} and len(first["copies"]) == 3
    scores = ("n", "set_ex", "multiset_ex", "set_correct", "multiset_correct", "errors")
    for key in ("baseline", "guarded"):
        assert {k: first[key][k] for k in scores} == {k: on_sqlite[key][k] for k in scores}, key
    assert first["rules"]["P1"]["fix"] == on_sqlite["rules"]["P1"]["fix"] == 4
    assert (cache / "chdb").is_dir() and sorted(p.name for p in cache.glob("*.json")) == [
        "spider_music.json", "spider_school.json", "spider_shop.json",
    ]  # fmt: skip


def test_copies_are_typed_keyed_and_reused(chdb_path: str, tmp_path: Path) -> None:
    """Lower-cased names; Int64/Float64/String, Nullable but for a primary key without NULLs, which
    orders the table; reused while the SQLite file is unchanged."""
    root = tmp_path / "db"
    make_db(root, "Mixed", "CREATE TABLE T (Id INTEGER PRIMARY KEY, Price REAL, Label TEXT);"
            "INSERT INTO T VALUES (1, 2.5, 'a'), (2, NULL, 'b');")  # fmt: skip
    gold = tmp_path / "gold.sql"
    sql = "SELECT count(*) FROM T"
    gold.write_text(f"{sql}\tMixed\n")
    pred = tmp_path / "pred.sql"
    pred.write_text(sql + "\n")
    args = ("--db-root", str(root), "--gold", str(gold), "--pred", str(pred), "--engine", "clickhouse")
    cache = tmp_path / "cache"
    first = eval_cli(*args, "--cache-dir", str(cache), cwd=tmp_path)
    second = eval_cli(*args, "--cache-dir", str(cache), cwd=tmp_path)
    assert [c["action"] for c in first["copies"]] == ["copied"]
    assert [c["action"] for c in second["copies"]] == ["reused"]
    assert first["baseline"]["set_correct"] == 1
    database = clickhouse_database_name("Mixed")
    script = f"""
from chdb import dbapi
cur = dbapi.connect({str(cache / "chdb")!r}).cursor()
cur.execute("SELECT table, name, type FROM system.columns WHERE database = '{database}' ORDER BY position")
print(list(cur.fetchall()))
cur.execute("SELECT sorting_key FROM system.tables WHERE database = '{database}'")
print(list(cur.fetchall()))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120)
    columns, keys = done.stdout.splitlines()
    assert columns == str(
        [("t", "id", "Int64"), ("t", "price", "Nullable(Float64)"), ("t", "label", "Nullable(String)")]
    )
    assert keys == str([("(id)",)]) or keys == str([("id",)])


def test_clickhouse_needs_chdb_and_takes_cache_dir_only(chdb_path: str) -> None:
    from guarded_sqlite.evaluation import InputError
    from guarded_sqlite.evaluation.options import resolve_engine

    assert resolve_engine("chdb").name == "clickhouse"
    with pytest.raises(InputError, match="only used with engines 'duckdb' and 'clickhouse'"):
        resolve_engine("postgres", pg_dsn="postgresql://x", cache_dir="/tmp")
