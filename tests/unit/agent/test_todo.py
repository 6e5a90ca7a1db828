"""todo_write: validation, session state, the announcing event (course 17.2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from anvild.agent.events import AgentEvent, Todo, TodoStatus, TodosUpdated
from anvild.agent.tools.base import InvalidArgs, ToolContext
from anvild.agent.tools.registry import ToolRegistry
from anvild.agent.tools.todo import TodoWriteTool, render_todos
from anvild.llm.types import ToolCall


@pytest.fixture
def ctx(tmp_path: Path) -> tuple[ToolContext, list[AgentEvent]]:
    seen: list[AgentEvent] = []
    return ToolContext(cwd=tmp_path, emit=seen.append), seen


def item(content: str, status: str = "pending") -> dict[str, Any]:
    return {"content": content, "status": status}


async def test_a_valid_list_is_stored_and_announced(
    ctx: tuple[ToolContext, list[AgentEvent]],
) -> None:
    context, seen = ctx
    todos = [item("Write the parser", "completed"), item("Test it", "in_progress"), item("Ship")]
    output = await TodoWriteTool().call({"todos": todos}, context)
    expected = (
        Todo("Write the parser", TodoStatus.COMPLETED),
        Todo("Test it", TodoStatus.IN_PROGRESS),
        Todo("Ship", TodoStatus.PENDING),
    )
    assert context.state.todos == expected
    assert seen == [TodosUpdated(expected)]
    assert output.content == (
        "Todo list updated (1 pending, 1 in progress, 1 completed):\n"
        "☑ Write the parser\n◐ Test it\n☐ Ship"
    )


async def test_each_write_replaces_the_list(ctx: tuple[ToolContext, list[AgentEvent]]) -> None:
    context, seen = ctx
    tool = TodoWriteTool()
    await tool.call({"todos": [item("a"), item("b")]}, context)
    output = await tool.call({"todos": []}, context)
    assert context.state.todos == ()
    assert output.content == "Todo list cleared."
    assert seen[-1] == TodosUpdated(())


@pytest.mark.parametrize(
    ("todos", "message"),
    [
        ([item("a", "in_progress"), item("b", "in_progress")], "2 items are in_progress"),
        ([item("ok"), item("   ")], "`todos.1.content`: it is empty"),
    ],
)
async def test_invalid_lists_change_nothing(
    ctx: tuple[ToolContext, list[AgentEvent]], todos: list[dict[str, Any]], message: str
) -> None:
    context, seen = ctx
    context.state.todos = (Todo("keep me", TodoStatus.PENDING),)
    with pytest.raises(InvalidArgs, match=message):
        await TodoWriteTool().call({"todos": todos}, context)
    assert context.state.todos == (Todo("keep me", TodoStatus.PENDING),)
    assert seen == []


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"todos": [{"content": "x", "status": "done"}]}, "todos.0.status"),
        ({"todos": [{"content": "", "status": "pending"}]}, "todos.0.content"),
        ({"todos": [{"status": "pending"}]}, "todos.0.content"),
        ({}, "todos"),
    ],
)
async def test_schema_errors_name_the_field(
    ctx: tuple[ToolContext, list[AgentEvent]], args: dict[str, Any], field: str
) -> None:
    context, _ = ctx
    result = await ToolRegistry([TodoWriteTool()]).dispatch(
        ToolCall("c", "todo_write", args), context
    )
    assert result.is_error
    assert f"`{field}`" in result.content


def test_effects_stay_in_the_session() -> None:
    effects = TodoWriteTool().effects({"todos": []})
    assert effects.read_only
    assert not effects.reads


def test_render() -> None:
    assert render_todos((Todo("a", "pending"), Todo("b", "completed"))) == "☐ a\n☑ b"
