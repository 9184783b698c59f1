"""The public API's type hints, checked the way a user's CI checks them: ``mypy --strict`` over a
user's script (tests/typing/user_script.py, which ``assert_type``s what connect, wrap, unwrap, cursors,
reports and scopes return, and runs) and over code the hints must reject (tests/typing/misuse.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TYPING = ROOT / "tests" / "typing"

pytest.importorskip("mypy")


def _mypy(path: Path) -> subprocess.CompletedProcess[str]:
    # Run from the repository's root: an editable install's import hook is invisible to mypy (see
    # README, "Typed API"), the working directory is not.
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--hide-error-context",
         "--cache-dir", str(ROOT / ".mypy_cache"), str(path.relative_to(ROOT))],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_a_users_strictly_typed_script_checks_clean_and_runs() -> None:
    checked = _mypy(TYPING / "user_script.py")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    ran = subprocess.run(
        [sys.executable, str(TYPING / "user_script.py")], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0 and ran.stdout == "ok\n", ran.stdout + ran.stderr


def test_the_hints_reject_each_misuse() -> None:
    source = (TYPING / "misuse.py").read_text().splitlines()
    expected = {number for number, line in enumerate(source, 1) if "  # error:" in line}
    checked = _mypy(TYPING / "misuse.py")
    reported = {int(match) for match in re.findall(r"^tests/typing/misuse\.py:(\d+): error:", checked.stdout, re.M)}
    assert len(expected) == 8 and reported == expected, checked.stdout
