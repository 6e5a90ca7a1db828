"""The context window of one agent: how full a request is, what to clear, when and how to compact.

`ContextWindow` holds the policy (`ContextSettings`: the window, the share at which old tool
results are cleared, the share at which the history is compacted, what is kept) and the token
meter, and does the model call of a compaction (`summarise`), chunk by chunk when the dropped
history does not fit one request, halving the chunks when a provider still refuses one as too
long. The loop (`anvild.agent.loop`) asks it before every request and applies what it says; the
session records a compaction before the loop adopts it. No I/O but the summariser's requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import attrs

from anvild.agent.context.clearing import Cleared, clear_tool_results
from anvild.agent.context.compaction import (
    Facts,
    Plan,
    chunks,
    prompt_text,
    render_facts,
    render_history,
    summary_request,
)
from anvild.agent.context.tokens import TokenMeter, request_bytes
from anvild.llm.builder import MessageBuilder
from anvild.llm.errors import ContextOverflow
from anvild.llm.provider import Provider
from anvild.llm.stream import Usage
from anvild.llm.types import ChatRequest, Message, ToolSpec

HALVINGS: Final = 4  # how often a summary request that overflows is retried with half the chunk


def _share(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not 0 <= value < 1:
        raise ValueError(f"{attribute.name} is a share of the window in [0, 1), not {value}")


@attrs.frozen
class ContextSettings:
    """`window` in tokens; `auto_compact` and `clear_at` are shares of it (0: off);
    `keep_tool_results` the most recent results never cleared, while they take at most
    `keep_tool_share` of the window; `keep_user_share` the share of
    the window kept as verbatim user messages after a compaction; `summary_tokens` the
    summary's output limit (0: a sixteenth of the window, within 256..4096)."""

    window: int
    auto_compact: float = attrs.field(default=0.85, validator=_share)
    clear_at: float = attrs.field(default=0.6, validator=_share)
    keep_tool_results: int = 3
    keep_tool_share: float = attrs.field(default=0.15, validator=_share)
    keep_user_share: float = attrs.field(default=0.1, validator=_share)
    summary_tokens: int = 0

    @property
    def summary_limit(self) -> int:
        return self.summary_tokens or max(256, min(4096, self.window // 16))


@attrs.frozen
class Compaction:
    """A compaction to record, then adopt: the new transcript, the summary that heads it, how
    many messages it replaced, the estimated request sizes before and after, the model that
    wrote it, the trigger (auto, overflow, manual), the focus asked for and what it cost."""

    messages: tuple[Message, ...]
    summary: str
    dropped: int
    before: int
    after: int
    model: str
    trigger: str
    focus: str = ""
    usage: Usage = attrs.field(factory=lambda: Usage(0, 0, 0, 0))


class SummaryFailed(Exception):
    """The summariser could not write a summary; the message says why (the history stays)."""


@attrs.define
class ContextWindow:
    settings: ContextSettings
    meter: TokenMeter = attrs.Factory(TokenMeter)

    def size(self, system: str, specs: Sequence[ToolSpec], messages: Sequence[Message]) -> int:
        """The request's estimated size in tokens."""
        return self.meter.tokens(request_bytes(system, specs, messages))

    def share(self, tokens: int) -> float:
        return tokens / self.settings.window

    def for_request(
        self,
        system: str,
        specs: Sequence[ToolSpec],
        messages: Sequence[Message],
        *,
        force: bool = False,
    ) -> Cleared:
        """`messages` as the next request sends them: old tool results cleared once the request
        passes `clear_at` (every one that may be, with `force`)."""
        settings = self.settings
        if not force and not settings.clear_at:
            return Cleared(tuple(messages))
        limit = settings.clear_at * settings.window
        over = self.size(system, specs, messages) - limit
        if not force and over <= 0:
            return Cleared(tuple(messages))
        save = 2**62 if force else int(over / self.meter.per_byte) + 1
        keep = 0 if force else settings.keep_tool_results
        keep_bytes = int(settings.keep_tool_share * settings.window / self.meter.per_byte)
        return clear_tool_results(messages, save=save, keep_recent=keep, keep_bytes=keep_bytes)

    def wants_compaction(self, tokens: int) -> bool:
        share = self.settings.auto_compact
        return bool(share) and tokens >= share * self.settings.window

    def keep_user_bytes(self) -> int:
        return int(self.settings.keep_user_share * self.settings.window / self.meter.per_byte)

    async def summarise(
        self, provider: Provider, model: str, chosen: Plan, found: Facts, focus: str
    ) -> tuple[str, Usage]:
        """The hand-off summary of `chosen.dropped` and what the requests cost."""
        history = render_history(chosen.dropped)
        limit = self.settings.summary_limit
        fixed = self.meter.tokens(len((prompt_text() + render_facts(found) + focus).encode()))
        room = self.settings.window - 2 * limit - fixed - self.settings.window // 20
        size = max(1024, int(room / self.meter.per_byte))
        spent = Usage(0, 0, 0, 0)
        for _ in range(HALVINGS + 1):
            pieces = chunks(history, size)
            summary = ""
            try:
                for index, piece in enumerate(pieces, 1):
                    request = summary_request(
                        model,
                        piece,
                        found,
                        focus=focus,
                        earlier=summary,
                        part=(index, len(pieces)),
                        max_tokens=limit,
                    )
                    summary, usage = await _complete(provider, request)
                    spent = spent.plus(usage)
            except ContextOverflow:
                size //= 2
                continue
            return summary, spent
        raise SummaryFailed(
            f"the summary request did not fit {model}'s context window even in chunks of "
            f"{size * 2} bytes"
        )


async def _complete(provider: Provider, request: ChatRequest) -> tuple[str, Usage]:
    builder = MessageBuilder()
    async with provider.stream(request) as events:
        async for event in events:
            builder.push(event)
    completion = builder.finish()
    return completion.message.text().strip(), completion.usage


__all__ = ["Compaction", "ContextSettings", "ContextWindow", "SummaryFailed"]
