"""Old import paths: 0.4 removed those 0.3 deprecated, except the three that published reproduction
scripts import (``deadlines``, ``rewrite``, ``langchain_tools``), kept until 0.5. Each warns and gives the
very module at the new path; a removed one is not found."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

MOVED = {
    "guarded_sqlite.langchain_tools": "guarded_sqlite.agent.langchain_tools",
    "guarded_sqlite.deadlines": "guarded_sqlite._core.deadlines",
    "guarded_sqlite.rewrite": "guarded_sqlite._analysis.rewrite",
}

REMOVED = (
    "guarded_sqlite.mcp_server",
    "guarded_sqlite.llama_index_tools",
    "guarded_sqlite.lockdown",
    "guarded_sqlite.audit",
    "guarded_sqlite.worker",
    "guarded_sqlite.provenance",
)


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_path_warns_and_is_the_new_module(old: str, new: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=rf"{old} moved to {new}; .* removed in guarded-sqlite 0\.5"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert getattr(module, "__all__", None)  # the public names are there
    for name in module.__all__:
        assert hasattr(module, name)


def test_an_old_from_import_names_the_callers_line() -> None:
    # The warning points at the import in the caller's code, which is where the path is to be changed.
    script = "from guarded_sqlite.rewrite import inject_distinct\n"
    done = subprocess.run(
        [sys.executable, "-W", "always::DeprecationWarning", "-c", script], capture_output=True, text=True, check=True
    )
    expected = "<string>:1: DeprecationWarning: guarded_sqlite.rewrite moved to guarded_sqlite._analysis.rewrite"
    assert expected in done.stderr


def test_the_entry_points_and_the_package_never_meet_a_shim() -> None:
    # `-W error` runs: the console script, `python -m guarded_sqlite.agent._worker` and the agent package
    # import only new paths.
    script = (
        "import sys, guarded_sqlite, guarded_sqlite.cli.commands, guarded_sqlite.agent, "
        "guarded_sqlite.agent.mcp_server, "
        "guarded_sqlite.agent.langchain_tools, guarded_sqlite.agent.llama_index_tools, guarded_sqlite.pytest_plugin\n"
        f"print(sorted(set({sorted(MOVED)!r}) & set(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-W", "error", "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stderr


def test_the_doctest_run_skips_exactly_the_shims() -> None:
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    settings = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8"))
    options = settings["tool"]["pytest"]["ini_options"]["addopts"].split()
    ignored = {option.removeprefix("--ignore=") for option in options if option.startswith("--ignore=")}
    assert ignored == {name.replace(".", "/") + ".py" for name in MOVED}


@pytest.mark.parametrize("old", REMOVED)
def test_a_path_removed_in_0_4_is_not_found(old: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.raises(ModuleNotFoundError, match=old.replace(".", r"\.")):
        importlib.import_module(old)
