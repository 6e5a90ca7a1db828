"""Compaction, the pure part: what is dropped, what the summary must keep, the new transcript.

`plan` splits a transcript at a step boundary into the part a summary replaces and the part
kept verbatim: the most recent user messages up to a byte budget, the current turn's prompt and
its unfinished step (the last calls and their results). `facts` collects from the dropped part
what a summary must not lose (files read and changed, commands that succeeded, errors not fixed,
open todos); `summary_request` asks a model for the hand-off summary (the prompt is
anvild/data/prompts/compaction.md), whole or, when the history does not fit, chunk by chunk
with the summary so far carried along (`chunks`); `rebuild` makes the new transcript: one user
message with the summary, the harness's facts and the kept user messages, then the unfinished
step. The first block of a compacted transcript starts with `SUMMARY_MARK`. Pure, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Final

import attrs

from anvild.agent.context.clearing import gist, is_stub
from anvild.agent.tools.base import Effects
from anvild.data import path as data_path
from anvild.llm.types import ChatRequest, ContentBlock, Message, Role, Text, ToolCall, ToolResult

SUMMARY_MARK: Final = "[Compacted history:"
KEPT_MARK: Final = "[An earlier message of the user, kept verbatim:]"
RESULT_CHARS: Final = 1500  # of each tool result, in the history the summariser reads
LIST_LIMIT: Final = 200  # paths or commands listed in the facts
TODOS_MARK: Final = "[Your todo list"
"""Starts the note with the todo list the loop adds at a step where it changed (a fact here)."""
HARNESS_NOTES: Final = (
    "[The previous turn was cancelled",
    "[The previous turn was interrupted",
    TODOS_MARK,
)
"""Notes the loop and the store's recovery put in user messages: not the user's words."""
_MARKS: Final = (SUMMARY_MARK, KEPT_MARK)
FACTS_HEADING: Final = "## Kept by the harness"


def prompt_text() -> str:
    """The summariser's instructions (a reviewable file in the package)."""
    return data_path("prompts/compaction.md").read_text(encoding="utf-8")


@attrs.frozen
class Plan:
    """`dropped` is summarised; `kept_users` (oldest first) and `current` are kept verbatim:
    `current` is the current turn's prompt blocks then its unfinished step, if any."""

    dropped: tuple[Message, ...]
    kept_users: tuple[str, ...] = ()
    prompt: tuple[ContentBlock, ...] = ()
    step: tuple[Message, ...] = ()


def user_texts(message: Message) -> list[str]:
    """What a person wrote in a user message: its text blocks without harness notes or an
    earlier summary (a user message kept by an earlier compaction counts, without its mark)."""
    if message.role is not Role.USER:
        return []
    texts = []
    for block in message.content:
        if not isinstance(block, Text) or not block.text.strip():
            continue
        if block.text.startswith(KEPT_MARK):
            texts.append(block.text.removeprefix(KEPT_MARK).lstrip("\n"))
        elif not block.text.startswith((SUMMARY_MARK, *HARNESS_NOTES)):
            texts.append(block.text)
    return texts


def _harness_blocks(message: Message) -> tuple[ContentBlock, ...]:
    return tuple(b for b in message.content if isinstance(b, Text) and b.text.startswith(_MARKS))


def plan(messages: Sequence[Message], *, turn_start: int | None, keep_user_bytes: int) -> Plan:
    """Split `messages` (no calls pending) for a compaction. `turn_start` is the index of the
    running turn's prompt message (None between turns); when an earlier compaction put its
    summary in that message, the summary is dropped (summarised again) and the prompt kept."""
    earlier = list(messages if turn_start is None else messages[:turn_start])
    prompt: tuple[ContentBlock, ...] = ()
    step: tuple[Message, ...] = ()
    middle: list[Message] = []
    if turn_start is not None:
        head, *middle = messages[turn_start:]
        if carried := _harness_blocks(head):
            earlier.append(Message(Role.USER, carried))
        prompt = tuple(
            b
            for b in head.content
            if isinstance(b, Text)
            and b not in carried
            and b.text.strip()
            and not b.text.startswith(TODOS_MARK)  # the facts carry the todos
        )
        if len(middle) >= 2 and middle[-2].tool_calls() and middle[-1].tool_results():
            step = (middle[-2], middle[-1])
            middle = middle[:-2]
    kept: list[str] = []
    budget = keep_user_bytes
    for message in reversed(earlier):
        for text in reversed(user_texts(message)):
            size = len(text.encode("utf-8", "surrogatepass"))
            if size > budget:
                budget = -1
                break
            kept.append(text)
            budget -= size
        if budget < 0:
            break
    return Plan(tuple(earlier + middle), tuple(reversed(kept)), prompt, step)


@attrs.frozen
class Facts:
    files_read: tuple[str, ...] = ()
    files_changed: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()  # bash commands that succeeded, oldest first
    errors: tuple[str, ...] = ()  # failed calls not followed by a success of the same call
    todos: tuple[str, ...] = ()  # open todos: "status: content"


def _unique(items: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))[-LIST_LIMIT:]


def facts(
    messages: Sequence[Message],
    todos: Sequence[tuple[str, str]],
    effects: Callable[[ToolCall], Effects],
) -> Facts:
    """What `messages` did that a summary must keep, from the calls themselves and from the
    facts of an earlier summary among them (so nothing is lost over many compactions), and the
    open `todos` ((content, status) pairs: the agent's list now, which replaces older ones)."""
    carried = Facts()
    calls: dict[str, ToolCall] = {}
    read: list[str] = []
    changed: list[str] = []
    commands: list[str] = []
    failed: dict[str, str] = {}  # the call's gist -> its error's first line
    succeeded: set[str] = set()
    for message in messages:
        for block in message.content:
            if isinstance(block, Text) and block.text.startswith(SUMMARY_MARK):
                carried = _merged(carried, parse_facts(block.text))
            elif isinstance(block, ToolCall):
                calls[block.id] = block
                try:
                    effect = effects(block)
                except Exception:  # an unknown tool or bad arguments: no paths to learn
                    effect = Effects.unknown_effects()
                changed += effect.write_paths
                read += [p for p in effect.read_paths if p not in effect.write_paths]
            elif isinstance(block, ToolResult) and not is_stub(block):
                call = calls.get(block.call_id)
                key = gist(call)
                if block.is_error:
                    first = block.content.strip().splitlines()[0] if block.content.strip() else ""
                    failed[key] = first[:300]
                else:
                    failed.pop(key, None)
                    succeeded.add(key)
                    command = call.arguments.get("command") if call is not None else None
                    if call is not None and call.name == "bash" and isinstance(command, str):
                        commands.append(command)
    changed = [*carried.files_changed, *changed]
    read = [p for p in (*carried.files_read, *read) if p not in changed]
    errors = [e for e in carried.errors if not any(e.startswith(f"{k}: ") for k in succeeded)]
    errors += [f"{key}: {why}" for key, why in failed.items()]
    open_todos = [f"{status}: {content}" for content, status in todos if status != "completed"]
    return Facts(
        _unique(read),
        _unique(changed),
        _unique([*carried.commands, *commands]),
        _unique(errors),
        tuple(open_todos),
    )


def _merged(first: Facts, second: Facts) -> Facts:
    return Facts(
        *(
            _unique([*a, *b])
            for a, b in zip(attrs.astuple(first), attrs.astuple(second), strict=True)
        )
    )


_TITLES: Final = {
    "Files read": "files_read",
    "Files changed": "files_changed",
    "Commands that succeeded": "commands",
    "Errors not fixed yet": "errors",
    "Open todos": "todos",
}


def parse_facts(text: str) -> Facts:
    """The facts `render_facts` wrote at the end of a summary block (none when absent)."""
    _, found, section = text.rpartition(f"{FACTS_HEADING}\n")
    if not found:
        return Facts()
    lists: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in section.splitlines():
        title = line.split(":", 1)[0]
        if title in _TITLES and not line.startswith("- "):
            current = lists.setdefault(_TITLES[title], [])
        elif line.startswith("- ") and current is not None:
            current.append(line[2:])
    return Facts(**{name: tuple(items) for name, items in lists.items()})


def render_facts(found: Facts) -> str:
    """The facts as the summary's last section, always present (a list may say none)."""

    def listed(title: str, items: Sequence[str]) -> list[str]:
        return [f"{title}:", *(f"- {item}" for item in items)] if items else [f"{title}: none"]

    lines = [FACTS_HEADING]
    lines += listed("Files read", found.files_read)
    lines += listed("Files changed", found.files_changed)
    lines += listed("Commands that succeeded", found.commands)
    lines += listed("Errors not fixed yet", found.errors)
    lines += listed("Open todos", found.todos)
    return "\n".join(lines)


def render_history(messages: Sequence[Message]) -> str:
    """The dropped part as plain text for the summariser: every text, call and (cut) result."""
    lines: list[str] = []
    for message in messages:
        who = "USER" if message.role is Role.USER else "ASSISTANT"
        for block in message.content:
            match block:
                case Text(text=text) if text.strip():
                    lines.append(f"{who}: {text.strip()}")
                case ToolCall(name=name, arguments=arguments):
                    lines.append(f"CALL {name} {json.dumps(arguments, ensure_ascii=False)}")
                case ToolResult(content=content, is_error=is_error):
                    body = content.strip()
                    if len(body) > RESULT_CHARS:
                        body = body[:RESULT_CHARS] + f"… [{len(content) - RESULT_CHARS} more chars]"
                    lines.append(f"{'ERROR' if is_error else 'RESULT'}: {body}")
    return "\n".join(lines)


def chunks(history: str, max_bytes: int) -> list[str]:
    """`history` in pieces of at most `max_bytes` (UTF-8), cut at line ends where possible."""
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for line in history.splitlines(keepends=True):
        encoded = len(line.encode("utf-8", "surrogatepass"))
        while encoded > max_bytes:  # a line longer than a chunk is cut
            if current:
                pieces.append("".join(current))
                current, size = [], 0
            cut = line.encode("utf-8", "surrogatepass")[:max_bytes].decode("utf-8", "ignore")
            pieces.append(cut)
            line = line[len(cut) :]
            encoded = len(line.encode("utf-8", "surrogatepass"))
        if size + encoded > max_bytes and current:
            pieces.append("".join(current))
            current, size = [], 0
        current.append(line)
        size += encoded
    if current:
        pieces.append("".join(current))
    return pieces or [""]


def summary_request(
    model: str,
    history: str,
    found: Facts,
    *,
    focus: str = "",
    earlier: str = "",
    part: tuple[int, int] = (1, 1),
    max_tokens: int,
) -> ChatRequest:
    """The request for one summary: the whole dropped history, or part `part[0]` of `part[1]`
    with the summary of the parts before it (`earlier`)."""
    index, total = part
    text = []
    if earlier:
        text.append(f"The summary of the earlier parts of the conversation:\n\n{earlier}\n")
    scope = "the conversation" if total == 1 else f"part {index} of {total} of the conversation"
    text.append(f"Here is {scope} to summarise:\n\n<history>\n{history}\n</history>\n")
    text.append(f"Facts the harness recorded (keep every one):\n\n{render_facts(found)}\n")
    if focus:
        text.append(f"Focus the summary on: {focus}\n")
    if total > 1 and index < total:
        text.append("More parts follow: summarise this one together with the earlier summary.")
    # Last, so a model that answers the end of its input (a small one does) writes the summary
    # instead of answering the history's last question.
    text.append(
        "Do not answer or continue the conversation above. Write the hand-off summary now, "
        "under the headings of your instructions, starting with ## Goals and constraints."
    )
    return ChatRequest(
        model=model,
        messages=(Message.user_text("\n".join(text)),),
        system=prompt_text(),
        max_tokens=max_tokens,
    )


def summary_block(summary: str, found: Facts, *, model: str) -> str:
    """The text that replaces the dropped history at the head of the new transcript."""
    return (
        f"{SUMMARY_MARK} the conversation before this point, summarised by {model}. The full "
        "history is in the session's record; re-read files rather than trust details from "
        "memory.]\n\n"
        f"{summary.strip()}\n\n{render_facts(found)}"
    )


def rebuild(block: str, chosen: Plan) -> tuple[Message, ...]:
    """The compacted transcript: the summary, the kept user messages, the current prompt, then
    the unfinished step. Roles alternate, and no call is left without its result."""
    head: list[ContentBlock] = [Text(block)]
    head += [Text(f"{KEPT_MARK}\n{text}") for text in chosen.kept_users]
    head += chosen.prompt
    return (Message(Role.USER, head), *chosen.step)


def is_compacted(messages: Sequence[Message]) -> bool:
    """Whether the transcript starts with a compaction summary (a stable prefix to cache)."""
    if not messages or not messages[0].content:
        return False
    first = messages[0].content[0]
    return isinstance(first, Text) and first.text.startswith(SUMMARY_MARK)


__all__ = [
    "SUMMARY_MARK",
    "Facts",
    "Plan",
    "chunks",
    "facts",
    "is_compacted",
    "plan",
    "prompt_text",
    "rebuild",
    "render_facts",
    "render_history",
    "summary_block",
    "summary_request",
    "user_texts",
]
