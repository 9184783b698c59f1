"""The pytest plugin (``guarded_sqlite.pytest_plugin``): inner pytest runs through ``pytester`` over a
small app whose join fans out (4 customers, 6 orders each: 24 rows, 4 distinct) through a plain
``sqlite3.connect(":memory:")``.

Runs are in-process (the plugin comes in through the installed ``pytest11`` entry point, as it does
for users), so the outer test can check that ``sqlite3.connect`` is restored afterwards; the run
without the flag is a subprocess, so that what it imports is its own.
"""

from __future__ import annotations

import json
import sqlite3
import sqlite3.dbapi2

import pytest

from guarded_sqlite._api import _sqlite3_connect

pytest_plugins = ["pytester"]

APP = '''
import sqlite3
import threading

SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, amount INTEGER);
"""
JOIN = "SELECT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id WHERE o.amount >= 0"


def _db():
    con = sqlite3.connect(":memory:")
    con.executescript(SCHEMA)
    con.executemany("INSERT INTO customers VALUES (?, ?)", [(i, f"name{i}") for i in range(4)])
    con.executemany("INSERT INTO orders VALUES (?, ?, ?)", [(c * 6 + k, c, k) for c in range(4) for k in range(6)])
    return con


def report():
    """Every customer once per order: the join fans out."""
    return _db().execute(JOIN).fetchall()


def lookup(customer_id):
    return _db().execute("SELECT name FROM customers WHERE id = ?", (customer_id,)).fetchall()


def report_in_thread():
    rows = []
    worker = threading.Thread(target=lambda: rows.extend(report()))
    worker.start()
    worker.join()
    return rows
'''

TESTS = """
import sqlite3

import pytest

import app


def test_report():
    rows = app.report()
    print("rows served:", len(rows))
    assert len(rows) in (4, 24)


def test_lookup():
    assert app.lookup(1) == [("name1",)]
"""

SQL = "SELECT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id WHERE o.amount >= ?"
"""The app's join as the plugin shows it: literals replaced by ``?``."""
SQL_CUT = SQL[:57] + "..."
"""The same, cut to the table's 60 characters."""


QUIET = ("-p", "no:hypothesispytest", "-p", "no:anyio", "-p", "no:cacheprovider")
"""Other installed plugins stay out of the inner runs: re-importing hypothesis for its summary would
take most of each run's time."""


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*QUIET, *args)


@pytest.fixture
def app(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(app=APP, test_app=TESTS)
    return pytester


def _table_rows(output: str) -> list[str]:
    """The lines of the guarded_sqlite section, from its header to its totals line."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if "guarded_sqlite (" in line and line.startswith("="))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("totals:"))
    return lines[start + 1 : end + 1]


# --- off by default --------------------------------------------------------------------------------


def test_without_the_flag_nothing_is_installed_imported_or_printed(app: pytest.Pytester) -> None:
    app.makepyfile(
        test_inert="""
        import sys
        import sqlite3

        import app


        def test_unguarded(request):
            assert len(app.report()) == 24
            assert not getattr(sqlite3.connect, "__guarded_sqlite__", False)
            assert request.config.pluginmanager.get_plugin("guarded_sqlite_run") is None
            # The entry point loaded the plugin module, and it imported nothing heavy.
            assert request.config.pluginmanager.get_plugin("guarded_sqlite") is not None
            assert [m for m in sys.modules if m.split(".")[0] in ("sqlglot", "wrapt")] == []
        """
    )
    result = app.runpytest_subprocess(*QUIET, "test_inert.py")
    result.assert_outcomes(passed=1)
    assert "guarded_sqlite" not in result.stdout.str()


def test_options_that_need_the_flag_are_refused_without_it(app: pytest.Pytester) -> None:
    result = _run(app, "--guarded-sqlite-fail=explosion")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--guarded-sqlite-fail needs --guarded-sqlite*"])


# --- observe and patch -----------------------------------------------------------------------------


def test_observe_serves_rows_unchanged_and_lists_the_explosion(app: pytest.Pytester) -> None:
    # The bare flag before a path: the path must stay a path, not become the preset.
    result = _run(app, "--guarded-sqlite", "test_app.py", "-s")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*rows served: 24"])
    rows = _table_rows(result.stdout.str())
    assert rows[0].split() == ["statement", "test", "trigger", "provenance", "action", "count"]
    assert rows[1].startswith(SQL_CUT)
    assert rows[1][len(SQL_CUT) :].split() == ["test_app.py::test_report", "cartesian_explosion", "-", "none", "1"]
    assert rows[2] == (
        "totals: 1 cartesian_explosion (0 patched), 0 other changed, 0 empty_result, 0 exec_error, in 1 test"
    )
    assert "guarded_sqlite (observe)" in result.stdout.str()


def test_patch_serves_the_distinct_rows_and_says_so(app: pytest.Pytester) -> None:
    result = _run(app, "--guarded-sqlite=patch", "-s")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*rows served: 4"])
    rows = _table_rows(result.stdout.str())
    assert rows[1][len(SQL_CUT) :].split() == [
        "test_app.py::test_report",
        "cartesian_explosion",
        "amplified",
        "distinct_injected",
        "1",
    ]
    assert rows[-1].startswith("totals: 1 cartesian_explosion (1 patched)")


@pytest.mark.parametrize(("preset", "served"), [("text_to_sql", 4), ("paper", 4)])
def test_the_other_presets_are_accepted(app: pytest.Pytester, preset: str, served: int) -> None:
    result = _run(app, f"--guarded-sqlite={preset}", "-s")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"*rows served: {served}", f"*guarded_sqlite ({preset})*"])


def test_no_findings_still_says_the_guard_ran(app: pytest.Pytester) -> None:
    result = _run(app, "--guarded-sqlite", "-k", "lookup")
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(["*guarded_sqlite (observe)*", "no statement was flagged or changed"])


# --- attribution -----------------------------------------------------------------------------------


def test_a_fixtures_findings_go_to_its_test_tagged_with_the_phase(app: pytest.Pytester) -> None:
    app.makepyfile(
        test_fixture="""
        import pytest

        import app


        @pytest.fixture
        def report_rows():
            rows = app.report()
            yield rows
            app.lookup(-1)  # empty, in teardown


        def test_uses_the_fixture(report_rows):
            assert len(report_rows) == 24
        """
    )
    result = _run(app, "--guarded-sqlite", "--guarded-sqlite-verbose", "test_fixture.py")
    result.assert_outcomes(passed=1)
    rows = _table_rows(result.stdout.str())
    assert [row.split("  ")[0] for row in rows[1:3]] == [SQL, "SELECT name FROM customers WHERE id = ?"]
    assert "test_fixture.py::test_uses_the_fixture [setup]" in rows[1]
    assert "test_fixture.py::test_uses_the_fixture [teardown]" in rows[2] and "empty_result" in rows[2]


def test_statements_of_a_thread_the_test_started_go_to_the_test(app: pytest.Pytester) -> None:
    app.makepyfile(
        test_thread="""
        import app


        def test_threaded():
            assert len(app.report_in_thread()) == 24
        """
    )
    result = _run(app, "--guarded-sqlite", "test_thread.py")
    result.assert_outcomes(passed=1)
    assert "test_thread.py::test_threaded " in _table_rows(result.stdout.str())[1]


def test_repeats_are_counted_on_one_row_and_empty_results_collapse_to_a_line(app: pytest.Pytester) -> None:
    app.makepyfile(
        test_repeat="""
        import app


        def test_repeated():
            for _ in range(3):
                assert len(app.report()) == 24
            for missing in (-1, -2):
                assert app.lookup(missing) == []
            con = app._db()
            for amount in (1, 2):  # the same statement once its literal is replaced
                con.execute(f"SELECT o.id FROM orders AS o WHERE o.amount = {amount} AND o.id < 0").fetchall()
        """
    )
    result = _run(app, "--guarded-sqlite", "test_repeat.py")
    rows = _table_rows(result.stdout.str())
    assert len(rows) == 4  # header, the explosion, the empty results' line, totals
    assert rows[1].split()[-1] == "3"
    assert rows[2] == "empty_result: 4 (of 3 statements in 1 test); --guarded-sqlite-verbose lists them"
    assert rows[3].startswith("totals: 3 cartesian_explosion (0 patched), 0 other changed, 4 empty_result,")

    verbose = _table_rows(_run(app, "--guarded-sqlite", "--guarded-sqlite-verbose", "test_repeat.py").stdout.str())
    assert [row.split("  ")[0] for row in verbose[1:4]] == [
        SQL,
        "SELECT name FROM customers WHERE id = ?",
        "SELECT o.id FROM orders AS o WHERE o.amount = ? AND o.id < ?",
    ]
    assert [row.split()[-1] for row in verbose[1:4]] == ["3", "2", "2"]


def test_sqlalchemy_engines_are_guarded(app: pytest.Pytester) -> None:
    pytest.importorskip("sqlalchemy")
    app.makepyfile(
        test_sqlalchemy="""
        import sqlalchemy

        import app


        def test_engine():
            engine = sqlalchemy.create_engine("sqlite://")
            with engine.connect() as connection:
                connection.exec_driver_sql("CREATE TABLE t (x INTEGER)")
                connection.exec_driver_sql("INSERT INTO t VALUES (1), (1), (1), (1), (1)")
                rows = connection.execute(sqlalchemy.text("SELECT x FROM t")).fetchall()
            assert len(rows) == 5
        """
    )
    result = _run(app, "--guarded-sqlite", "test_sqlalchemy.py")
    result.assert_outcomes(passed=1)
    assert _table_rows(result.stdout.str())[1].split() == [
        "SELECT",
        "x",
        "FROM",
        "t",
        "test_sqlalchemy.py::test_engine",
        "cartesian_explosion",
        "-",
        "none",
        "1",
    ]


# --- failing tests ---------------------------------------------------------------------------------


def test_fail_on_explosion_fails_exactly_the_exploding_tests(app: pytest.Pytester) -> None:
    app.makepyfile(
        test_more="""
        import pytest

        import app


        @pytest.fixture
        def report_rows():
            return app.report()


        def test_fixture_explodes(report_rows):
            pass


        @pytest.mark.guarded_sqlite_allow
        def test_allowed():
            app.report()


        def test_empty_is_no_explosion():
            assert app.lookup(-1) == []
        """
    )
    result = _run(app, "--guarded-sqlite", "--guarded-sqlite-fail=explosion")
    result.assert_outcomes(failed=2, passed=3)
    result.stdout.fnmatch_lines(
        [
            "*_ test_report _*",
            "guarded_sqlite: cartesian_explosion during this test (--guarded-sqlite-fail=explosion):",
            f"  {SQL}",
            "    (call) cartesian_explosion: rows=24 unique=4 dup_ratio=0.83 action=none",
            "Exempt a test with @pytest.mark.guarded_sqlite_allow.",
        ]
    )
    result.stdout.fnmatch_lines(["*_ test_fixture_explodes _*", "guarded_sqlite: *", f"  {SQL}", "    (setup) *"])
    failed = {line.split()[1] for line in result.stdout.lines if line.startswith("FAILED ")}
    assert failed == {"test_app.py::test_report", "test_more.py::test_fixture_explodes"}

    flagged = _run(app, "--guarded-sqlite", "--guarded-sqlite-fail=flagged", "test_more.py")
    flagged.assert_outcomes(failed=2, passed=1)
    flagged.stdout.fnmatch_lines(["*(call) empty_result: rows=0 unique=0*"])


def test_fail_keeps_a_tests_own_failure_and_adds_the_finding(app: pytest.Pytester) -> None:
    app.makepyfile(
        test_broken="""
        import app


        def test_broken():
            app.report()
            assert 1 == 2, "the test's own failure"
        """
    )
    result = _run(app, "--guarded-sqlite", "--guarded-sqlite-fail=explosion", "test_broken.py")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the test's own failure*", "*- guarded_sqlite -*", f"  {SQL}"])


# --- the session's install -------------------------------------------------------------------------


def test_the_install_covers_the_run_and_is_undone_after_it(app: pytest.Pytester) -> None:
    assert sqlite3.connect is _sqlite3_connect
    app.makepyfile(
        test_install="""
        import sqlite3
        import sqlite3.dbapi2

        import guarded_sqlite


        def test_guarded_during_the_run():
            assert sqlite3.connect.__guarded_sqlite__ and sqlite3.dbapi2.connect is sqlite3.connect
            assert sqlite3.connect(":memory:").guard_policy.mode == "observe"


        def test_a_test_that_uninstalls():
            guarded_sqlite.uninstall()


        def test_the_next_test_is_guarded_again():
            assert getattr(sqlite3.connect, "__guarded_sqlite__", False)
        """
    )
    result = _run(app, "--guarded-sqlite", "test_install.py")
    result.assert_outcomes(passed=3)
    assert sqlite3.connect is _sqlite3_connect and sqlite3.dbapi2.connect is _sqlite3_connect


def test_a_connect_installed_before_the_session_is_put_back(app: pytest.Pytester) -> None:
    def mine(*args: object, **kwargs: object) -> sqlite3.Connection:
        return _sqlite3_connect(":memory:")

    sqlite3.connect = sqlite3.dbapi2.connect = mine
    try:
        _run(app, "--guarded-sqlite", "test_app.py").assert_outcomes(passed=2)
        assert sqlite3.connect is mine and sqlite3.dbapi2.connect is mine
    finally:
        sqlite3.connect = sqlite3.dbapi2.connect = _sqlite3_connect


# --- JSON ------------------------------------------------------------------------------------------


def test_json_has_every_finding_with_the_reports_fields(app: pytest.Pytester) -> None:
    app.makepyfile(
        test_empty="""
        import app


        def test_missing():
            assert app.lookup(-1) == []
        """
    )
    result = _run(app, "--guarded-sqlite=patch", "--guarded-sqlite-json=findings.json")
    result.assert_outcomes(passed=3)
    written = json.loads((app.path / "findings.json").read_text(encoding="utf-8"))
    assert written["preset"] == "patch"
    by_test = {finding["test"]: finding for finding in written["findings"]}
    assert set(by_test) == {"test_app.py::test_report", "test_empty.py::test_missing"}
    explosion = by_test["test_app.py::test_report"]
    assert (explosion["phase"], explosion["count"], explosion["trigger"], explosion["action"]) == (
        "call",
        1,
        "cartesian_explosion",
        "distinct_injected",
    )
    assert explosion["sql_normalised"] == SQL
    assert (explosion["rows"], explosion["final_rows"], explosion["provenance"]) == (24, 4, "amplified")
    assert by_test["test_empty.py::test_missing"]["trigger"] == "empty_result"


def test_the_help_lists_the_options(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "--help")
    result.stdout.fnmatch_lines(
        ["*--guarded-sqlite *guard every sqlite3.connect*", "*--guarded-sqlite-fail=*", "*--guarded-sqlite-json=PATH*"]
    )
    assert "--guarded-sqlite=patch" not in result.stdout.str()  # the spellings with a preset stay out of the help
