"""``guarded_sqlite.agent.llama_index_tools`` in LlamaIndex's own agent loop (the workflow ``ReActAgent``), offline:
a scripted ``CustomLLM`` writes ReAct text decided from the prompt the agent built for it.

As for LangChain: the guard's feedback reaches the model as the tool's observation, the model revises
its SQL, and the last result is the right multiset of rows; with the guard off the same model stops at
its first, wrong answer. Refusals reach the model as observations and the loop goes on."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.agent.workflow import ReActAgent, ToolCallResult
from llama_index.core.base.llms.types import CompletionResponse, CompletionResponseGen, LLMMetadata
from llama_index.core.llms import CustomLLM
from llama_index.core.tools import FunctionTool
from pydantic import Field

from guarded_sqlite.agent import GuardedDatabase, QueryResult
from guarded_sqlite.agent.llama_index_tools import guarded_sql_tools, open_guarded_sql_tools
from tests.agent_cases import (
    FAN_OUT_DISTINCT,
    FEEDBACK_MARKS,
    loop_cases,
)

# How the ReAct formatter hands a tool's output back to the model, as CustomLLM's default
# messages_to_prompt writes it ("role: content" lines); the model's own turns start "assistant: ".
OBSERVATION = "\nuser: Observation: "
ASSISTANT = "\nassistant: "


def plain_rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(path)
    try:
        return sorted(con.execute(sql).fetchall())
    finally:
        con.close()


class ScriptedLLM(CustomLLM):
    """An LLM whose completion is ``decide(prompt)``; it records every prompt it receives."""

    decide: Callable[[str], str]
    prompts: list[str] = Field(default_factory=list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="scripted-fake")

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.prompts.append(prompt)
        return CompletionResponse(text=self.decide(prompt))

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        text = self.complete(prompt, formatted, **kwargs).text
        yield CompletionResponse(text=text, delta=text)


def observations(prompt: str) -> list[str]:
    """The tool outputs the ReAct prompt shows, oldest first."""
    return [part.split(ASSISTANT)[0] for part in prompt.split(OBSERVATION)[1:]]


def action(tool: str, arguments: dict[str, str]) -> str:
    return f"Thought: I need to use a tool.\nAction: {tool}\nAction Input: {json.dumps(arguments)}"


def answer(text: str) -> str:
    return f"Thought: I can answer without using any more tools.\nAnswer: {text}"


def reviser(first: str, revised: str) -> Callable[[str], str]:
    """Run ``first``; if the guard's feedback comes back, run ``revised``; answer on a result without it."""

    def decide(prompt: str) -> str:
        seen = observations(prompt)
        if not seen:
            return action("sql_query", {"sql": first})
        if any(mark in seen[-1] for mark in FEEDBACK_MARKS):
            return action("sql_query", {"sql": revised})
        return answer(seen[-1].splitlines()[-1])

    return decide


def run_agent(tools: list[FunctionTool], decide: Callable[[str], str]) -> tuple[ScriptedLLM, list[ToolCallResult], str]:
    llm = ScriptedLLM(decide=decide)
    agent = ReActAgent(tools=[*tools], llm=llm)

    async def run() -> tuple[list[ToolCallResult], str]:
        handler = agent.run(user_msg="Which customers have placed orders?")
        results = [event async for event in handler.stream_events() if isinstance(event, ToolCallResult)]
        return results, str(await handler)

    results, response = asyncio.run(run())
    return llm, results, response


CASES = loop_cases(FAN_OUT_DISTINCT)


@pytest.mark.parametrize(("guard", "first", "revised", "right", "mark"), CASES)
def test_the_feedback_makes_the_model_revise_its_query(
    shop: Path, guard: str, first: str, revised: str, right: str, mark: str
) -> None:
    with GuardedDatabase.open(shop, guard=guard) as db:
        llm, results, response = run_agent(guarded_sql_tools(db), reviser(first, revised))
    assert [r.tool_kwargs["sql"] for r in results] == [first, revised]
    # The prompt of the model's second step showed the first observation, feedback included.
    assert len(llm.prompts) == 3
    shown = observations(llm.prompts[1])
    assert len(shown) == 1 and "Guard feedback:" in shown[0] and mark in shown[0]
    assert first != revised
    final = results[-1].tool_output
    assert isinstance(final.raw_output, QueryResult)
    assert "Guard feedback:" not in final.content
    assert sorted(final.raw_output.rows) == plain_rows(shop, right)
    assert sorted(results[0].tool_output.raw_output.rows) != plain_rows(shop, right)
    assert response.startswith("(6 rows)")


@pytest.mark.parametrize(("guard", "first", "revised", "right", "mark"), CASES)
def test_without_feedback_the_same_model_stops_at_its_wrong_answer(
    shop: Path, guard: str, first: str, revised: str, right: str, mark: str
) -> None:
    with GuardedDatabase.open(shop, guard="off") as db:
        _, results, _ = run_agent(guarded_sql_tools(db), reviser(first, revised))
    assert [r.tool_kwargs["sql"] for r in results] == [first]
    assert "Guard feedback:" not in results[0].tool_output.content
    assert sorted(results[0].tool_output.raw_output.rows) != plain_rows(shop, right)


def test_refusals_reach_the_model_and_the_loop_goes_on(shop: Path) -> None:
    script = [
        ("sql_schema", {}),
        ("sql_query", {"sql": "DELETE FROM orders"}),
        ("sql_query", {"sql": "SELECT nosuch FROM customers"}),
        ("sql_query", {"sql": "SELECT * FROM order_items"}),  # 150 rows, over max_rows=20
        ("sql_query", {"sql": "SELECT COUNT(*) FROM order_items"}),
    ]

    def decide(prompt: str) -> str:
        done = len(observations(prompt))
        return action(*script[done]) if done < len(script) else answer("150 order items")

    db, tools = open_guarded_sql_tools(shop, max_rows=20)
    with db:
        llm, results, response = run_agent(tools, decide)
    schema, write, bad, large, fine = (r.tool_output.content for r in results)
    assert "foreign key: (customer_id) -> customers(id), many-to-one" in schema
    assert write.startswith("Refused: only queries")
    assert bad.startswith("The query failed: OperationalError: no such column: nosuch")
    assert large.startswith("Refused: the query returned more than this tool's limit of 20 rows")
    assert "150" in fine and "(1 row)" in fine
    assert not any(r.tool_output.is_error for r in results)  # returned as text, not raised
    assert large in llm.prompts[-1]  # the model read each refusal
    assert response == "150 order items"
    assert plain_rows(shop, "SELECT COUNT(*) FROM orders") == [(30,)]  # the DELETE never ran


def test_the_schema_tool_shows_keys_and_foreign_key_cardinality(shop: Path) -> None:
    db, (query, schema) = open_guarded_sql_tools(shop, read_only=True)
    with db:
        text = schema.call().content
        assert text == db.schema().text()
        assert "keys: (id)" in text
        assert "foreign key: (customer_id) -> customers(id), many-to-one" in text
        assert "joining orders repeats each customers row" in text
        assert (query.metadata.name, schema.metadata.name) == ("sql_query", "sql_schema")
        assert "Guard feedback:" in query.metadata.description and "Writes are refused" in query.metadata.description
        assert json.loads(query.metadata.fn_schema_str)["required"] == ["sql"]
        assert json.loads(schema.metadata.fn_schema_str)["properties"] == {}


def test_importing_the_package_does_not_import_llama_index() -> None:
    code = (
        "import sys, guarded_sqlite, guarded_sqlite.agent; "
        "assert 'guarded_sqlite.agent.llama_index_tools' not in sys.modules; assert 'llama_index' not in sys.modules"
    )
    subprocess.run([sys.executable, "-W", "error", "-c", code], check=True)


def test_without_llama_index_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "guarded_sqlite.agent.llama_index_tools")
    # None in sys.modules makes an import of that name fail; submodules already loaded count too.
    for name in [name for name in sys.modules if name.partition(".")[0] == "llama_index"]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match=r"pip install 'llama-index-core>=0.14,<0.15' \(the \[llama-index\] extra\)"):
        import guarded_sqlite.agent.llama_index_tools  # noqa: F401
