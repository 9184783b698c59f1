"""``guarded_sqlite.agent.langchain_tools`` in LangChain's own agent loop (``langchain.agents.create_agent``, on
langgraph), offline: a scripted chat model decides each message from the messages it receives.

The point of the tools is the closed loop: the guard's feedback reaches the model as the tool's
observation, the model revises its SQL, and the last result is the right multiset of rows. The control
runs the same model with the guard off: without feedback it stops at its first, wrong answer. Refusals
(a write, bad SQL, too many rows) must reach the model as observations without ending the run."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from pydantic import Field

from guarded_sqlite.agent import GuardedDatabase
from guarded_sqlite.agent.langchain_tools import (
    GuardedSQLQueryTool,
    GuardedSQLSchemaTool,
    guarded_sql_tools,
    open_guarded_sql_tools,
)
from tests.agent_cases import (
    FAN_OUT_EXISTS,
    FEEDBACK_MARKS,
    loop_cases,
)


def plain_rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(path)
    try:
        return sorted(con.execute(sql).fetchall())
    finally:
        con.close()


class ScriptedChatModel(BaseChatModel):
    """A chat model whose next message is ``decide(messages)``; it records every list it receives.
    ``bind_tools`` returns the model itself: the script already knows the tools' names."""

    decide: Callable[[list[BaseMessage]], AIMessage]
    seen: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted-fake"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.seen.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=self.decide(list(messages)))])

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        return self


def call(sql: str, number: int) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[{"name": "sql_query", "args": {"sql": sql}, "id": f"call_{number}", "type": "tool_call"}],
    )


def reviser(first: str, revised: str) -> Callable[[list[BaseMessage]], AIMessage]:
    """The model under test: run ``first``; if the guard's feedback comes back, run ``revised``;
    answer once a result comes back without feedback."""

    def decide(messages: list[BaseMessage]) -> AIMessage:
        tool_messages = [m for m in messages if isinstance(m, ToolMessage)]
        if not tool_messages:
            return call(first, 1)
        last = str(tool_messages[-1].content)
        if any(mark in last for mark in FEEDBACK_MARKS):
            return call(revised, len(tool_messages) + 1)
        return AIMessage(content="Done: " + last.splitlines()[-1])

    return decide


def run_agent(
    db: GuardedDatabase, decide: Callable[[list[BaseMessage]], AIMessage]
) -> tuple[ScriptedChatModel, list[BaseMessage]]:
    model = ScriptedChatModel(decide=decide)
    agent = create_agent(model, guarded_sql_tools(db))
    state = agent.invoke({"messages": [HumanMessage("Which customers have placed orders?")]})
    return model, list(state["messages"])


def sql_of_calls(messages: list[BaseMessage]) -> list[str]:
    return [tc["args"]["sql"] for m in messages if isinstance(m, AIMessage) for tc in m.tool_calls]


CASES = loop_cases(FAN_OUT_EXISTS)


@pytest.mark.parametrize(("guard", "first", "revised", "right", "mark"), CASES)
def test_the_feedback_makes_the_model_revise_its_query(
    shop: Path, guard: str, first: str, revised: str, right: str, mark: str
) -> None:
    with GuardedDatabase.open(shop, guard=guard) as db:
        model, messages = run_agent(db, reviser(first, revised))
    tool_messages = [m for m in messages if isinstance(m, ToolMessage)]
    assert sql_of_calls(messages) == [first, revised]
    # The model's second call saw the first observation, with the guard's feedback in it.
    second_prompt = model.seen[1]
    assert isinstance(second_prompt[-1], ToolMessage)
    assert "Guard feedback:" in str(second_prompt[-1].content) and mark in str(second_prompt[-1].content)
    assert first != revised
    # The final tool result is the right multiset, and carries no feedback.
    final = tool_messages[-1]
    assert "Guard feedback:" not in str(final.content)
    assert sorted(tuple(row) for row in final.artifact["rows"]) == plain_rows(shop, right)
    assert sorted(tuple(row) for row in tool_messages[0].artifact["rows"]) != plain_rows(shop, right)
    assert isinstance(messages[-1], AIMessage) and str(messages[-1].content).startswith("Done:")


@pytest.mark.parametrize(("guard", "first", "revised", "right", "mark"), CASES)
def test_without_feedback_the_same_model_stops_at_its_wrong_answer(
    shop: Path, guard: str, first: str, revised: str, right: str, mark: str
) -> None:
    with GuardedDatabase.open(shop, guard="off") as db:
        _, messages = run_agent(db, reviser(first, revised))
    tool_messages = [m for m in messages if isinstance(m, ToolMessage)]
    assert sql_of_calls(messages) == [first]
    assert "Guard feedback:" not in str(tool_messages[0].content)
    assert sorted(tuple(row) for row in tool_messages[0].artifact["rows"]) != plain_rows(shop, right)


def test_refusals_reach_the_model_and_the_loop_goes_on(shop: Path) -> None:
    script = [
        "DELETE FROM orders",
        "SELECT nosuch FROM customers",
        "SELECT * FROM order_items",  # 150 rows, over max_rows=20
        "SELECT COUNT(*) FROM order_items",
    ]

    def decide(messages: list[BaseMessage]) -> AIMessage:
        done = sum(isinstance(m, ToolMessage) for m in messages)
        return call(script[done], done + 1) if done < len(script) else AIMessage(content="150 order items")

    with GuardedDatabase.open(shop, max_rows=20) as db:
        _, messages = run_agent(db, decide)
    tool_messages = [m for m in messages if isinstance(m, ToolMessage)]
    assert [m.status for m in tool_messages] == ["error", "error", "error", "success"]
    write, bad, large, fine = (str(m.content) for m in tool_messages)
    assert write.startswith("Refused: only queries")
    assert bad.startswith("The query failed: OperationalError: no such column: nosuch")
    assert large.startswith("Refused: the query returned more than this tool's limit of 20 rows")
    assert "150" in fine and "(1 row)" in fine
    assert messages[-1].content == "150 order items"
    assert plain_rows(shop, "SELECT COUNT(*) FROM orders") == [(30,)]  # the DELETE never ran


def test_the_schema_tool_shows_keys_and_foreign_key_cardinality(shop: Path) -> None:
    db, (query, schema) = open_guarded_sql_tools(shop, read_only=True)
    with db:
        assert isinstance(query, GuardedSQLQueryTool) and isinstance(schema, GuardedSQLSchemaTool)
        assert query.db is schema.db is db
        text = schema.invoke({})
        assert text == db.schema().text()
        assert "keys: (id)" in text
        assert "foreign key: (customer_id) -> customers(id), many-to-one" in text
        assert "joining orders repeats each customers row" in text


def test_the_tools_describe_themselves_for_the_model(shop: Path) -> None:
    with GuardedDatabase.open(shop, max_rows=50) as db:
        query, schema = guarded_sql_tools(db)
        assert (query.name, schema.name) == ("sql_query", "sql_schema")
        assert "sqlite" in query.description and "50 rows" in query.description
        assert "Guard feedback:" in query.description and "Writes are refused" in query.description
        assert list(query.tool_call_schema.model_json_schema()["properties"]) == ["sql"]  # type: ignore[union-attr]
        assert schema.tool_call_schema.model_json_schema()["properties"] == {}  # type: ignore[union-attr]
        # Called without a tool call id (a plain invoke), the observation is the text alone.
        assert query.invoke({"sql": "SELECT COUNT(*) FROM customers"}).endswith("(1 row)")
        assert query.invoke({"sql": "DROP TABLE orders"}).startswith("Refused:")


def test_importing_the_package_does_not_import_langchain() -> None:
    code = (
        "import sys, guarded_sqlite, guarded_sqlite.agent; "
        "assert 'guarded_sqlite.agent.langchain_tools' not in sys.modules; assert 'langchain_core' not in sys.modules"
    )
    subprocess.run([sys.executable, "-W", "error", "-c", code], check=True)


def test_without_langchain_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "guarded_sqlite.agent.langchain_tools")
    # None in sys.modules makes an import of that name fail; submodules already loaded count too.
    for name in [name for name in sys.modules if name.partition(".")[0] == "langchain_core"]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match=r"pip install 'langchain-core>=1.0,<2' \(the \[langchain\] extra\)"):
        import guarded_sqlite.agent.langchain_tools  # noqa: F401
