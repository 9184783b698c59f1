"""``guarded-sqlite demo --db PATH``: the demo stamps its database (``PRAGMA application_id``), rebuilds
its own while nobody changed it, and refuses to replace any other existing file, or its own database
changed (exit 2, one line naming the path, the change and ``--force``), unless ``--force``; it says
where the database is and what it did to the file. Its output is in plain words and ends with the
next command to try."""

from __future__ import annotations

import shlex
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


JARGON = ("P1", "tau", "provenance", "amplified", "dup_ratio")
"""Words the demo leaves to ``--verbose``, ``guard_report`` and the docs (issue 38)."""


def test_a_new_database_is_stamped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "shop.db"
    code, out, err = _demo(capsys, "--db", str(path))
    assert (code, err) == (0, "")
    assert out.startswith(f"Database: {path.resolve()} (created)\n")
    assert _application_id(path) == APPLICATION_ID
    assert _tables(path) == ["customers", "order_items", "orders", "products"]


def test_the_output_is_plain_words_and_ends_with_the_next_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "shop.db"
    code, out, _ = _demo(capsys, "--db", str(path))
    assert code == 0
    assert [word for word in JARGON if word in out] == []
    assert max(len(line) for line in out.replace(str(path.resolve()), "shop.db").splitlines()) <= 130
    assert (
        "The joins repeated rows: 90 rows came back but only 6 are different, so the guard served each once "
        "(6 rows).\n" in out
    )
    lines = out.splitlines()
    assert lines[-3].startswith("Next, try a query of your own on it")
    assert (
        lines[-2]
        == f"  guarded-sqlite query {path} 'SELECT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id'"
    )
    # The suggested command works, and explains itself in the same words.
    assert main(shlex.split(lines[-2])[1:]) == 0
    assert "The joins repeated rows: 30 rows came back but only 6 are different" in capsys.readouterr().out


def test_verbose_adds_the_rule_and_its_threshold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _demo(capsys, "--db", str(tmp_path / "shop.db"), "--verbose")
    assert code == 0
    assert "  P1          applied: dup_ratio 0.933 >= tau_inject 0.8" in out
    assert "  trigger     cartesian_explosion  (dup_ratio 0.933 >= tau_inject 0.8)" in out


def test_without_db_it_says_the_file_is_temporary_and_how_to_keep_one(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _demo(capsys)
    assert code == 0
    first = out.splitlines()[0]
    assert first.startswith("Database: ") and first.endswith("/shop.db (a temporary file, deleted when the demo ends)")
    assert not Path(first.split()[1]).exists()
    assert "\n  guarded-sqlite demo --db shop.db\n  guarded-sqlite query shop.db 'SELECT " in out


def test_the_demos_own_database_unchanged_is_rebuilt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "shop.db"
    build_shop(path)
    con = sqlite3.connect(path)
    con.execute("UPDATE customers SET points = points")  # a write that changes nothing
    con.commit()
    con.close()
    code, out, err = _demo(capsys, "--db", str(path))
    assert (code, err) == (0, "")
    assert out.startswith(f"Database: {path.resolve()} (rebuilt: it held the demo's database, unchanged)\n")


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ("CREATE TABLE notes (n TEXT)", "tables added: notes"),
        ("DELETE FROM customers WHERE id = 1", "tables changed: customers"),
        ("DROP TABLE order_items", "tables dropped: order_items"),
    ],
)
def test_the_demos_own_database_changed_is_refused_unless_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: str, said: str
) -> None:
    path = tmp_path / "shop.db"
    build_shop(path)
    con = sqlite3.connect(path)
    con.execute(change)  # what a reader trying things out might do
    con.commit()
    con.close()
    before = path.read_bytes()
    code, out, err = _demo(capsys, "--db", str(path))
    assert (code, out) == (2, "")
    assert err == (
        f"guarded-sqlite demo: error: --db {path}: is the demo's database, changed since the demo made it "
        f"({said}); pass --force to rebuild it\n"
    )
    assert path.read_bytes() == before
    code, out, err = _demo(capsys, "--db", str(path), "--force")
    assert (code, err) == (0, "")
    assert "(replaced, as --force asked: it held another database or a changed demo database)" in out.splitlines()[0]
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
    assert (code, err) == (0, "") and "the guard served each once" in out
    assert _application_id(path) == APPLICATION_ID and "mine" not in _tables(path)


def test_an_empty_file_is_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An empty file is an empty SQLite database (what ``touch shop.db`` or a temporary file leaves)."""
    path = tmp_path / "shop.db"
    path.touch()
    code, out, err = _demo(capsys, "--db", str(path))
    assert (code, err) == (0, "") and _application_id(path) == APPLICATION_ID
    assert out.startswith(f"Database: {path.resolve()} (created in the empty file)\n")


def test_force_does_not_make_a_directory_usable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _demo(capsys, "--db", str(tmp_path), "--force")
    assert (code, out, err) == (2, "", f"guarded-sqlite demo: error: --db {tmp_path}: is a directory\n")
