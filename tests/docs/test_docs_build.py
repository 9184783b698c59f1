"""The docs site (``mkdocs.yml``, ``docs/``) builds with warnings as errors, and README.md stays the
short front page the pages link out from (issue 26 item 3). The pages' code runs in ``test_readme``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_docs_build_with_warnings_as_errors(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    # The reference is generated from the docstrings, not left empty.
    assert "guarded_sqlite.connect" in api and "Open a SQLite database" in api
    # No private type names (connect's overloads named _ConnectionT), one connect signature, and doctests
    # shown as highlighted code, not as nested quotes (issue 46 item 2).
    text = re.sub(r"<[^>]+>", "", api)
    assert not re.findall(r"\b_[A-Z]\w*", text), sorted(set(re.findall(r"\b_[A-Z]\w*", text)))
    assert text.count("connect(database") == 1
    assert "<blockquote>" not in api
    assert '<span class="gp">&gt;&gt;&gt; </span><span class="n">GuardReport</span>' in api


def test_readme_is_short_and_its_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode("utf-8")) <= 12 * 1024
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), target
