"""The package-root shims of modules that moved (``guarded_sqlite.mcp_server``, ``.lockdown``, ``.rewrite``,
...), deprecated since 0.3, are gone in 0.4: importing an old path fails, and the new paths are the
only ones."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

REMOVED = {
    "guarded_sqlite.mcp_server": "guarded_sqlite.agent.mcp_server",
    "guarded_sqlite.langchain_tools": "guarded_sqlite.agent.langchain_tools",
    "guarded_sqlite.llama_index_tools": "guarded_sqlite.agent.llama_index_tools",
    "guarded_sqlite.lockdown": "guarded_sqlite.agent.lockdown",
    "guarded_sqlite.audit": "guarded_sqlite.agent.audit",
    "guarded_sqlite.worker": "guarded_sqlite.agent.isolation",
    "guarded_sqlite.deadlines": "guarded_sqlite._core.deadlines",
    "guarded_sqlite.rewrite": "guarded_sqlite._analysis.rewrite",
    "guarded_sqlite.provenance": "guarded_sqlite._analysis.provenance",
}


@pytest.mark.parametrize(("old", "new"), sorted(REMOVED.items()))
def test_an_old_path_no_longer_imports(old: str, new: str) -> None:
    assert old not in sys.modules or sys.modules[old] is not importlib.import_module(new)
    with pytest.raises(ModuleNotFoundError, match=rf"No module named '{old}'"):
        importlib.import_module(old)
    assert importlib.import_module(new).__name__ == new


def test_the_entry_points_import_under_warnings_as_errors() -> None:
    # The console script, the agent package and the pytest plugin import with every warning an error.
    script = (
        "import guarded_sqlite, guarded_sqlite.cli.commands, guarded_sqlite.agent, guarded_sqlite.agent.mcp_server, "
        "guarded_sqlite.agent.langchain_tools, guarded_sqlite.agent.llama_index_tools, guarded_sqlite.pytest_plugin\n"
    )
    done = subprocess.run([sys.executable, "-W", "error", "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
