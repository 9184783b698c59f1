"""The sqlglot build the analysis runs on: compiled (sqlglotc) when its version is sqlglot's, pure Python
otherwise, including when a mismatched pair is installed (guarded_sqlite._analysis.sqlglot_build).

Runs with and without sqlglotc installed (.ci/run runs the analysis tests both ways)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata

import pytest

# A child interpreter reports the build, where sqlglot's parser came from, any warning, and whether the
# guard still patches an explosion. ``FAKE`` replaces sqlglotc's installed version before anything ran.
CHILD = """
import importlib.metadata, json, sys, warnings
FAKE = {fake!r}
if FAKE is not None:
    real = importlib.metadata.version
    importlib.metadata.version = lambda name: FAKE if name == "sqlglotc" else real(name)
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    import guarded_sqlite
    from guarded_sqlite._analysis import sqlglot_build
    con = guarded_sqlite.connect(":memory:")
    con.executescript(
        "CREATE TABLE a (id INTEGER PRIMARY KEY, g TEXT); CREATE TABLE b (id INTEGER PRIMARY KEY);"
        "INSERT INTO a VALUES (1, 'x'), (2, 'y');"
        "INSERT INTO b VALUES (1), (2), (3), (4), (5), (6), (7), (8), (9), (10);"
    )
    cur = con.execute("SELECT a.g FROM a, b")
    rows = cur.fetchall()
import sqlglot.parser
print(json.dumps({{
    "build": sqlglot_build.build(),
    "parser": sqlglot.parser.__file__,
    "warnings": [str(w.message) for w in caught],
    "rows": len(rows),
    "action": cur.guard_report.action,
}}))
"""


def child(fake: str | None) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD.format(fake=fake)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def test_the_compiled_build_is_used_exactly_when_sqlglotc_matches_sqlglot() -> None:
    compiled = installed("sqlglotc")
    found = child(None)
    if compiled is not None and compiled == installed("sqlglot"):
        assert found["build"] == "compiled"
        assert not str(found["parser"]).endswith(".py")
    else:
        assert found["build"] == "pure"
        assert str(found["parser"]).endswith(".py")
    assert found["warnings"] == []
    assert (found["rows"], found["action"]) == (2, "distinct_injected")


@pytest.mark.skipif(installed("sqlglotc") is None, reason="sqlglotc not installed: no compiled modules to mismatch")
def test_a_mismatched_sqlglotc_is_left_aside_with_a_warning() -> None:
    # The real mismatch (sqlglot 30.31.0 beside sqlglotc 30.30.0) fails in `import sqlglot`; here only the
    # installed version differs, so the test shows the pure modules were chosen, not what they avoid.
    found = child("0.0.1")
    assert found["build"] == "pure (mismatch)"
    assert str(found["parser"]).endswith(".py")
    [warning] = found["warnings"]
    assert "sqlglotc 0.0.1 does not match sqlglot" in str(warning)
    assert (found["rows"], found["action"]) == (2, "distinct_injected")
