"""Old import paths: 0.3 moved them and kept shims that warned; 0.4 removed six of them, 0.5 the last
three (``deadlines``, ``rewrite``, ``langchain_tools``, kept until the published reproduction scripts
stopped importing them). Each is now not found, and its new path is there."""

from __future__ import annotations

import importlib
import importlib.util
import sys

import pytest

REMOVED = {
    # removed in 0.4
    "guarded_sqlite.mcp_server": "guarded_sqlite.agent.mcp_server",
    "guarded_sqlite.llama_index_tools": "guarded_sqlite.agent.llama_index_tools",
    "guarded_sqlite.lockdown": "guarded_sqlite.agent.lockdown",
    "guarded_sqlite.audit": "guarded_sqlite.agent.audit",
    "guarded_sqlite.worker": "guarded_sqlite.agent._worker",
    "guarded_sqlite.provenance": "guarded_sqlite._analysis.provenance",
    # removed in 0.5
    "guarded_sqlite.langchain_tools": "guarded_sqlite.agent.langchain_tools",
    "guarded_sqlite.deadlines": "guarded_sqlite._core.deadlines",
    "guarded_sqlite.rewrite": "guarded_sqlite._analysis.rewrite",
}


@pytest.mark.parametrize(("old", "new"), sorted(REMOVED.items()))
def test_a_removed_path_is_not_found_and_its_new_path_is(old: str, new: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.raises(ModuleNotFoundError, match=old.replace(".", r"\.")):
        importlib.import_module(old)
    assert importlib.util.find_spec(new) is not None
