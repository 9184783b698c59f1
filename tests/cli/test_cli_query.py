"""``guarded-sqlite query`` and ``--version``: the rows printed are the guarded cursor's (sqlite3's when
nothing is flagged), the JSON matches ``cursor.guard_report``, the database is never written, and bad
paths and failing statements give one-line errors with exit status 2 and 1."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import guarded_sqlite
from guarded_sqlite.cli.commands import main
from guarded_sqlite.cli.demo import GENERATED_SQL, build_shop
from guarded_sqlite.cli.query import DEFAULT_LIMIT, report_dict

TIMINGS = {"detect_us", "patch_ms"}  # differ from run to run


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    path = tmp_path / "shop.db"
    build_shop(path)
    return path


def table_rows(out: str) -> tuple[list[str], list[list[str]]]:
    """The header and the data rows of the table ``query`` printed, cells stripped."""
    lines = out.splitlines()
    header = [cell.strip() for cell in lines[0].split(" | ")]
    assert set(lines[1]) <= {"-", "+"}
    rows = []
    for line in lines[2:]:
        if line.startswith("("):  # the row count ends the table
            break
        rows.append([cell.strip() for cell in line.split(" | ")])
    return header, rows


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["query", *argv, "--json"]) == 0
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return document


def assert_one_line_error(capsys: pytest.CaptureFixture[str], *needles: str) -> None:
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("guarded-sqlite query: error: ")
    for needle in needles:
        assert needle in lines[0]


def test_rows_printed_are_sqlite3s_rows(shop: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sql = "SELECT id, name, city, points FROM customers ORDER BY id"
    assert main(["query", str(shop), sql]) == 0
    out = capsys.readouterr().out
    header, rows = table_rows(out)
    with sqlite3.connect(shop) as con:
        expected = con.execute(sql).fetchall()
    assert header == ["id", "name", "city", "points"]
    assert rows == [[str(value) for value in row] for row in expected]
    assert f"({len(expected)} rows)" in out
    assert out.endswith(f"\nAll {len(expected)} rows are different: the guard changed nothing.\n")
    assert "guard_report" not in out and "trigger" not in out and "--verbose" not in out


JARGON = ("P1", "tau", "provenance", "amplified", "dup_ratio", "cartesian_explosion", "distinct_injected")
"""Words the default output leaves to ``--verbose`` and the docs (issue 38)."""


def test_flagged_explosion_says_what_happened_in_plain_words(shop: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["query", str(shop), GENERATED_SQL, "--param", "books"]) == 0
    out = capsys.readouterr().out
    _, rows = table_rows(out)
    assert len(rows) == 6
    account = out.split("(6 rows)\n\n", 1)[1].splitlines()
    assert account[0] == (
        "The joins repeated rows: 90 rows came back but only 6 are different, so the guard served each once (6 rows)."
    )
    assert account[1].startswith("The rows served are those of: SELECT DISTINCT c.name, c.points")
    assert account[-1].startswith("(--verbose shows the whole report")
    assert [word for word in JARGON if word in out] == []


def test_verbose_shows_trigger_action_decisions_and_patched_rows(
    shop: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["query", str(shop), GENERATED_SQL, "--param", "books", "--verbose"]) == 0
    out = capsys.readouterr().out
    _, rows = table_rows(out)
    con = guarded_sqlite.connect(shop)
    cur = con.execute(GENERATED_SQL, ("books",))
    expected = cur.fetchall()
    report = cur.guard_report
    con.close()
    with sqlite3.connect(shop) as plain:
        raw = plain.execute(GENERATED_SQL, ("books",)).fetchall()
    assert rows == [[str(value) for value in row] for row in expected]
    assert len(rows) == 6 < len(raw) == 90
    assert report is not None and report.action == "distinct_injected"
    assert "\nThe joins repeated rows: 90 rows came back but only 6 are different" in out
    assert f"guard_report: {report.summary()}" in out
    assert "  trigger     cartesian_explosion" in out
    assert "  action      distinct_injected" in out
    assert "  P1          applied: " in out
    assert "provenance=amplified" in out
    assert "  final_sql   SELECT DISTINCT c.name, c.points" in out


def test_observe_flags_without_patching(shop: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["query", str(shop), GENERATED_SQL, "--param", "books", "--guard", "observe", "--limit", "100"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    _, rows = table_rows(out)
    assert len(rows) == 90
    assert "84 of the 90 rows repeat another row (only 6 are different): served as returned, and flagged" in out
    assert "guard='observe' only reports" in out and "rows served are those of" not in out
    assert main([*argv, "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "  trigger     cartesian_explosion" in out and "  action      none" in out
    assert "final_sql" not in out


def test_json_matches_the_cursors_guard_report(shop: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = run_json(capsys, str(shop), GENERATED_SQL, "--param", "books", "--guard", "text_to_sql")
    con = guarded_sqlite.connect(shop, guard="text_to_sql")
    cur = con.execute(GENERATED_SQL, ("books",))
    rows = cur.fetchall()
    columns = [entry[0] for entry in cur.description]
    report = cur.guard_report
    con.close()
    assert report is not None
    assert document["columns"] == columns == ["name", "points"]
    assert document["rows"] == [list(row) for row in rows]
    assert document["row_count"] == len(rows) == 6
    printed = document["report"]
    assert set(printed) == set(report.__dataclass_fields__)
    expected = report_dict(report)
    assert {key: value for key, value in printed.items() if key not in TIMINGS} == {
        key: value for key, value in expected.items() if key not in TIMINGS
    }
    assert printed["trigger"] == report.trigger == "cartesian_explosion"
    assert printed["action"] == "distinct_injected" and printed["final_sql"] == report.final_sql
    assert (
        printed["decisions"]
        == [{"rule": d.rule, "applied": d.applied, "reason": d.reason, "copies": d.copies} for d in report.decisions]
        != []
    )
    assert printed["rescue"] is None and printed["provenance"] == "amplified"


def test_json_is_strict_json_with_blobs_infinities_and_nulls(shop: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def refuse(name: str) -> None:
        raise AssertionError(f"non-standard JSON constant {name}")

    assert main(["query", str(shop), "SELECT x'00ff' AS b, 1e999 AS big, -1e999 AS small, NULL AS n", "--json"]) == 0
    document = json.loads(capsys.readouterr().out, parse_constant=refuse)
    assert document["rows"] == [[{"hex": "00ff"}, "inf", "-inf", None]]
    assert document["columns"] == ["b", "big", "small", "n"]


def test_limit_caps_the_table_and_says_how_many_more(shop: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sql = "SELECT order_id, product_id FROM order_items ORDER BY order_id, product_id"
    assert main(["query", str(shop), sql]) == 0
    out = capsys.readouterr().out
    _, rows = table_rows(out)
    assert len(rows) == DEFAULT_LIMIT
    assert f"(150 rows; {DEFAULT_LIMIT} shown, {150 - DEFAULT_LIMIT} more: --limit N shows more)" in out
    assert main(["query", str(shop), sql, "--limit", "3"]) == 0
    out = capsys.readouterr().out
    assert table_rows(out)[1] == [["1", "1"], ["1", "2"], ["1", "3"]]
    assert "(150 rows; 3 shown, 147 more" in out
    # JSON gives every row unless --limit is given, and always the total.
    assert len(run_json(capsys, str(shop), sql)["rows"]) == 150
    limited = run_json(capsys, str(shop), sql, "--limit", "2")
    assert limited["rows"] == [[1, 1], [1, 2]] and limited["row_count"] == 150


def test_cells_stay_on_one_line(shop: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["query", str(shop), "SELECT 'a' || char(10) || 'b' AS t, NULL AS n, x'0a' AS b"]) == 0
    _, rows = table_rows(capsys.readouterr().out)
    assert rows == [["a\\nb", "NULL", "x'0a'"]]


def test_params_are_bound_positionally_as_text(shop: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sql = "SELECT name FROM customers WHERE points > ? AND city <> ? ORDER BY name"
    document = run_json(capsys, str(shop), sql, "--param", "90", "--param", "Lagos")
    with sqlite3.connect(shop) as con:
        expected = con.execute(sql, (90, "Lagos")).fetchall()
    # The column's INTEGER affinity turns the text '90' into a number, as for an int parameter.
    assert document["rows"] == [list(row) for row in expected] and len(expected) == 3
    assert main(["query", str(shop), sql, "--param", "90"]) == 1
    assert_one_line_error(capsys, "ProgrammingError", "bindings")


def test_missing_database_is_exit_2_and_not_created(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.db"
    assert main(["query", str(missing), "SELECT 1"]) == 2
    assert_one_line_error(capsys, f"{missing}: no such file")
    assert not missing.exists()


@pytest.mark.parametrize("kind", ["directory", "text file"])
def test_unusable_database_paths_are_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    path = tmp_path / "db"
    if kind == "directory":
        path.mkdir()
    else:
        path.write_text("not a database\n")
    assert main(["query", str(path), "SELECT 1"]) == 2
    assert_one_line_error(capsys, str(path), "directory" if kind == "directory" else "not a SQLite database")


def test_sql_error_is_exit_1_on_one_line(shop: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["query", str(shop), "SELECT nope FROM customers"]) == 1
    assert_one_line_error(capsys, "OperationalError: no such column: nope")
    assert main(["query", str(shop), "SELECT 1; SELECT 2"]) == 1
    assert_one_line_error(capsys, "one statement at a time")


def test_writes_fail_and_leave_the_file_unchanged(shop: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = shop.read_bytes()
    assert main(["query", str(shop), "DELETE FROM orders"]) == 1
    assert_one_line_error(capsys, "not authorized", "read-only")
    assert shop.read_bytes() == before
    with sqlite3.connect(shop) as con:
        assert con.execute("SELECT count(*) FROM orders").fetchone() == (30,)


def test_statement_without_rows(shop: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # BEGIN changes nothing (the connection is closed right after); even a TEMP object is refused now.
    assert main(["query", str(shop), "BEGIN"]) == 0
    out = capsys.readouterr().out
    assert "(the statement returns no rows)" in out and "The guard did not check the rows: " in out
    assert main(["query", str(shop), "BEGIN", "--verbose"]) == 0
    assert "not probed" in capsys.readouterr().out
    document = run_json(capsys, str(shop), "BEGIN")
    assert document["columns"] is None and document["rows"] == [] and document["row_count"] == 0
    assert document["report"]["probed"] is False


def test_file_names_with_uri_characters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # '?', '#' and '%' would change a file: URI's meaning if the path were pasted in unquoted.
    path = tmp_path / "odd ?name#%20.db"
    build_shop(path)
    assert run_json(capsys, str(path), "SELECT count(*) FROM customers")["rows"] == [[6]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["odd ?name#%20.db"]


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"guarded-sqlite {guarded_sqlite.__version__}\n"


def test_unknown_guard_preset_is_an_option_error(shop: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["query", str(shop), "SELECT 1", "--guard", "strict"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'strict'" in capsys.readouterr().err


def test_console_script(shop: Path) -> None:
    script = Path(sys.executable).parent / "guarded-sqlite"
    command = [str(script)] if script.exists() else [shutil.which("guarded-sqlite") or "guarded-sqlite"]
    if not Path(command[0]).exists() and shutil.which(command[0]) is None:
        pytest.skip("the guarded-sqlite console script is not installed")
    version = subprocess.run([*command, "--version"], capture_output=True, text=True, check=False, timeout=60)
    assert (version.returncode, version.stdout) == (0, f"guarded-sqlite {guarded_sqlite.__version__}\n")
    done = subprocess.run(
        [*command, "query", str(shop), GENERATED_SQL, "--param", "books", "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["report"]["action"] == "distinct_injected" and document["row_count"] == 6
    failed = subprocess.run(
        [*command, "query", str(shop), "SELEC 1"], capture_output=True, text=True, check=False, timeout=60
    )
    assert failed.returncode == 1 and failed.stdout == ""
    assert failed.stderr.startswith('guarded-sqlite query: error: OperationalError: near "SELEC"')


def test_reader_closing_the_pipe_early_is_not_a_traceback(shop: Path) -> None:
    script = Path(sys.executable).parent / "guarded-sqlite"
    if not script.exists():
        pytest.skip("the guarded-sqlite console script is not installed")
    sql = "SELECT * FROM order_items AS a, order_items AS b"  # 22,500 rows: more than a pipe buffers
    with subprocess.Popen(
        [str(script), "query", str(shop), sql, "--guard", "off", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.read(10).startswith(b"{")
        process.stdout.close()  # what `| head` does
        stderr = process.stderr.read().decode()
        assert process.wait(timeout=60) == 1
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr
