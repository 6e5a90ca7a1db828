"""`model NAME`: can the history be replayed to another model, or does it need a handoff? Pure.

Adapters send reasoning and provider meta back only to the provider that produced them.
`replayable` builds the transcript a new model would see (foreign reasoning dropped, images
dropped when the target takes none) and keeps it only if it is still valid and nothing but
foreign reasoning was lost. Otherwise the switch records a text handoff (`handoff_text`) as the
first user message of a fresh context (`ContextReplaced`, reason handoff): nothing is silently
dropped.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

from anvild.llm.capabilities import Capabilities
from anvild.llm.integrity import TranscriptError, validate_transcript
from anvild.llm.types import ContentBlock, Image, Message, Reasoning, Text, ToolCall, ToolResult

HANDOFF_LIMIT: Final = 60_000
"""Characters of the rendered conversation kept in a handoff (the most recent ones)."""


def _keeps(block: ContentBlock, provider_kind: str, capabilities: Capabilities) -> bool:
    if isinstance(block, Reasoning):
        return block.meta is not None and block.meta.provider == provider_kind
    if isinstance(block, Image):
        return capabilities.images
    return True


def replayable(
    messages: Sequence[Message], provider_kind: str, capabilities: Capabilities
) -> str | None:
    """None if `messages` can be replayed to the target; else why not (for the log)."""
    view: list[Message] = []
    for message in messages:
        kept = tuple(b for b in message.content if _keeps(b, provider_kind, capabilities))
        if any(isinstance(b, Image) for b in message.content) and not capabilities.images:
            return "the history holds images, which the new model does not take"
        if not kept:
            return "a message would be left empty once foreign reasoning is dropped"
        view.append(Message(message.role, kept))
    try:
        validate_transcript(view)
    except TranscriptError as exc:
        return f"the history would not be a valid transcript for it ({exc})"
    return None


def _render(block: ContentBlock) -> str | None:
    match block:
        case Text(text=text):
            return text
        case ToolCall(name=name, arguments=arguments):
            return f"[called {name} {json.dumps(arguments, ensure_ascii=False)[:500]}]"
        case ToolResult(content=content, is_error=is_error):
            label = "error" if is_error else "result"
            return f"[{label}: {content[:1000]}]"
        case Image(media_type=media_type):
            return f"[an image ({media_type}) was here]"
    return None  # reasoning is the model's own scratch work: not handed over


def handoff_text(messages: Sequence[Message], old_model: str, new_model: str) -> str:
    """The conversation so far as one user message for the new model."""
    lines: list[str] = []
    for message in messages:
        parts = [p for p in map(_render, message.content) if p]
        if parts:
            lines.append(f"{message.role.value.upper()}: " + "\n".join(parts))
    body = "\n\n".join(lines)
    if len(body) > HANDOFF_LIMIT:
        body = "[... earlier conversation cut ...]\n" + body[-HANDOFF_LIMIT:]
    return (
        f"[Handoff: this session moved from model {old_model} to {new_model}. The history "
        "could not be replayed to the new model as it was, so here it is as text. Continue "
        "from it; the next message is the user's.]\n\n" + (body or "(no conversation yet)")
    )


__all__ = ["HANDOFF_LIMIT", "handoff_text", "replayable"]
