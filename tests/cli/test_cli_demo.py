"""``guarded-sqlite demo --db PATH``: the demo stamps its database (``PRAGMA application_id``), rebuilds
its own, and refuses to replace any other existing file (exit 2, one line naming the path and
``--force``) unless ``--force``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from guarded_sqlite.cli.commands import main
from guarded_sqlite.cli.demo import APPLICATION_ID, build_shop


def _demo(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["demo", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _application_id(path: Path) -> int:
    con = sqlite3.connect(path)
    try:
        (stamp,) = con.execute("PRAGMA application_id").fetchone()
    finally:
        con.close()
    return int(stamp)


def _tables(path: Path) -> list[str]:
    con = sqlite3.connect(path)
    try:
        return [name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    finally:
        con.close()


def _assert_refused(code: int, out: str, err: str, path: Path) -> None:
    assert (code, out) == (2, "")
    assert err == (
        f"guarded-sqlite demo: error: --db {path}: exists and is not the demo's database; "
        "pass --force to overwrite it\n"
    )


def test_a_new_database_is_stamped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "shop.db"
    code, out, err = _demo(capsys, "--db", str(path))
    assert (code, err) == (0, "") and "distinct_injected" in out
    assert _application_id(path) == APPLICATION_ID
    assert _tables(path) == ["customers", "order_items", "orders", "products"]


def test_the_demos_own_database_is_rebuilt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "shop.db"
    build_shop(path)
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE notes (n TEXT)")  # what a reader trying things out might add
    con.execute("DELETE FROM customers")
    con.commit()
    con.close()
    code, _, err = _demo(capsys, "--db", str(path))
    assert (code, err) == (0, "")
    assert _tables(path) == ["customers", "order_items", "orders", "products"]
    con = sqlite3.connect(path)
    assert con.execute("SELECT count(*) FROM customers").fetchone() == (6,)
    con.close()


def test_another_database_is_refused_and_left_as_it_was(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "app.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, secret TEXT)")
    con.execute("INSERT INTO customers VALUES (1, 'keep me')")
    con.commit()
    con.close()
    before = path.read_bytes()
    _assert_refused(*_demo(capsys, "--db", str(path)), path)
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    "content",
    [b"id,name\n1,Ana\n", b"SQLite format 3\x00" + bytes(10)],
    ids=["text file", "truncated database header"],
)
def test_a_file_that_is_not_a_database_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes
) -> None:
    path = tmp_path / "shop.db"
    path.write_bytes(content)
    _assert_refused(*_demo(capsys, "--db", str(path)), path)
    assert path.read_bytes() == content


def test_force_overwrites_another_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "app.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE mine (x)")
    con.commit()
    con.close()
    code, out, err = _demo(capsys, "--db", str(path), "--force")
    assert (code, err) == (0, "") and "distinct_injected" in out
    assert _application_id(path) == APPLICATION_ID and "mine" not in _tables(path)


def test_an_empty_file_is_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An empty file is an empty SQLite database (what ``touch shop.db`` or a temporary file leaves)."""
    path = tmp_path / "shop.db"
    path.touch()
    code, _, err = _demo(capsys, "--db", str(path))
    assert (code, err) == (0, "") and _application_id(path) == APPLICATION_ID


def test_force_does_not_make_a_directory_usable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _demo(capsys, "--db", str(tmp_path), "--force")
    assert (code, out, err) == (2, "", f"guarded-sqlite demo: error: --db {tmp_path}: is a directory\n")
