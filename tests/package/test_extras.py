"""The install hints name the packages each extra adds, as pyproject.toml declares them (issue 46 item 3:
``pip install 'guarded-sqlite[mcp]'`` fails, the package is on no index)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from guarded_sqlite._extras import EXTRAS, install_hint

ROOT = Path(__file__).resolve().parents[2]


def test_extras_follow_pyproject() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    extras = {name: tuple(requirements) for name, requirements in declared.items() if name not in ("test", "docs")}
    assert extras == EXTRAS


def test_no_hint_names_the_package_itself() -> None:
    """No message of the package tells a user to install guarded-sqlite from an index."""
    sources = [path for path in (ROOT / "guarded_sqlite").rglob("*.py")]
    offending = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sources
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if re.search(r"pip install '?guarded-sqlite\[", line)
        and not line.lstrip().startswith(('"""', "#"))
        and '"""' not in line
        and "``" not in line
    ]
    assert offending == []
    assert all(install_hint(extra).startswith("pip install '") for extra in EXTRAS)


def test_the_cli_s_hint_installs_from_the_index(tmp_path: Path) -> None:
    """The hint the MCP command prints names the mcp package, and the demo's last line points at what a
    wheel carries (pydoc), not at README."""
    done = subprocess.run(
        [sys.executable, "-m", "guarded_sqlite", "mcp", "--help"], capture_output=True, text=True, timeout=120
    )
    assert "pip install 'mcp>=2.0,<3' (the [mcp] extra)" in " ".join(done.stdout.split())
    demo = subprocess.run(
        [sys.executable, "-m", "guarded_sqlite", "demo", "--db", str(tmp_path / "shop.db")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    last = demo.stdout.strip().splitlines()[-1]
    assert "README" not in last and "python -m pydoc guarded_sqlite" in last
