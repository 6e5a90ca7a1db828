"""todo_write: the model's own task list, kept in session state and announced as an event.

Each call replaces the whole list (`ToolContext.state.todos`, a tuple of `Todo`), after checking
it: every item has non-empty content and a status of pending, in_progress or completed, and at
most one item is in progress. A valid write is announced with a `TodosUpdated` event through
`ToolContext.emit`, which the session publishes (its `todos` file) and records. An invalid write
changes nothing and tells the model what to fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from anvild.agent.events import Todo, TodoStatus, TodosUpdated
from anvild.agent.tools.base import (
    Args,
    Cancellation,
    Effects,
    InvalidArgs,
    ToolContext,
    ToolOutput,
    object_schema,
)

MAX_TODOS: Final = 100
MAX_CONTENT_CHARS: Final = 500
MARKS: Final = {TodoStatus.PENDING: "☐", TodoStatus.IN_PROGRESS: "◐", TodoStatus.COMPLETED: "☑"}

DESCRIPTION: Final = """\
Write your todo list for the current task: the whole list each time (it replaces the previous \
one). Use it for work with several steps, to plan them and show progress; skip it for a single \
simple step.

Each item has `content` (a short imperative description, e.g. "Add tests for the parser") and \
`status`: pending, in_progress or completed. Rules: at most one item is in_progress at a time; \
mark an item in_progress before you start it and completed as soon as it is done (not in \
batches); do not mark an item completed while its tests fail or its work is partial. Add items \
you discover along the way; remove items that are no longer relevant. The user sees this list.
"""

SCHEMA: Final[Mapping[str, Any]] = object_schema(
    {
        "todos": {
            "type": "array",
            "maxItems": MAX_TODOS,
            "description": "The complete, updated todo list.",
            "items": object_schema(
                {
                    "content": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_CONTENT_CHARS,
                        "description": "What to do, as a short imperative sentence.",
                    },
                    "status": {
                        "type": "string",
                        "enum": [s.value for s in TodoStatus],
                        "description": "pending, in_progress (at most one item) or completed.",
                    },
                },
                required=("content", "status"),
            ),
        },
    },
    required=("todos",),
)


def parse_todos(items: Any) -> tuple[Todo, ...]:
    """Validate a todo list (already schema-checked for shape) and build it."""
    todos: list[Todo] = []
    for index, item in enumerate(items):
        content = str(item["content"]).strip()
        if not content:
            raise InvalidArgs(f"Invalid value for `todos.{index}.content`: it is empty.")
        todos.append(Todo(content, TodoStatus(item["status"])))
    active = [i for i, todo in enumerate(todos) if todo.status is TodoStatus.IN_PROGRESS]
    if len(active) > 1:
        raise InvalidArgs(
            f"{len(active)} items are in_progress (items {', '.join(map(str, active))}); at most "
            "one may be. Mark the others pending or completed."
        )
    return tuple(todos)


def render_todos(todos: tuple[Todo, ...]) -> str:
    return "\n".join(f"{MARKS[todo.status]} {todo.content}" for todo in todos)


class TodoWriteTool:
    name: Final = "todo_write"
    description: Final = DESCRIPTION
    summary: Final = (
        "Replace your todo list for a task with several steps: items with `content` and "
        "`status` (pending, in_progress, completed)."
    )
    input_schema: Final = SCHEMA
    cancellation: Final = Cancellation.ATOMIC  # the list is replaced in one step, or not at all

    def effects(self, args: Args) -> Effects:
        return Effects.none()  # session state only: nothing outside the session is touched

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        todos = parse_todos(args["todos"])
        ctx.state.todos = todos
        ctx.emit(TodosUpdated(todos))
        if not todos:
            return ToolOutput("Todo list cleared.")
        counts = {s: sum(1 for t in todos if t.status is s) for s in TodoStatus}
        summary = ", ".join(f"{n} {s.value.replace('_', ' ')}" for s, n in counts.items() if n)
        return ToolOutput(f"Todo list updated ({summary}):\n{render_todos(todos)}")
