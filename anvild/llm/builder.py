"""MessageBuilder: folds a stream of `StreamEvent`s into one assistant `Completion`.

One slot per block index, in order of first appearance. Sequencing is checked, because a broken
stream is a protocol bug and must not be papered over: a delta of another kind on a block, a
`ToolCallDelta` before its `ToolCallStart`, a conflicting second start, or anything after
`Finish` is a `DecodeError`. `UsageReport` is absorbed at any point before `Finish`.
Malformed model output is not a protocol error: arguments that are not valid JSON are kept as a
string and flagged in `Completion.invalid_arguments`, so the loop can correct the model. A
completion whose finish is not clean has `executable == False`: its tool calls must never run.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterable, Mapping
from typing import NoReturn, TypeVar

import attrs

from anvild.llm import stream
from anvild.llm.errors import DecodeError, UnexpectedEof
from anvild.llm.types import (
    ContentBlock,
    Message,
    ProviderMeta,
    Reasoning,
    Role,
    Text,
    ToolCall,
)


@attrs.frozen
class Completion:
    """One finished sample: the assistant message and how it ended."""

    message: Message
    finish: stream.FinishReason
    usage: stream.Usage = attrs.field(factory=stream.Usage)
    finish_detail: str | None = None
    # call id -> why its arguments are not valid JSON (the raw text stays in the call).
    invalid_arguments: Mapping[str, str] = attrs.field(factory=dict)

    @property
    def executable(self) -> bool:
        """Whether the tool calls may run: only after a clean finish."""
        return self.finish.is_clean

    @property
    def tool_calls(self) -> list[ToolCall]:
        return self.message.tool_calls()


@attrs.define
class _TextSlot:
    parts: list[str] = attrs.Factory(list)


@attrs.define
class _ReasoningSlot:
    parts: list[str] = attrs.Factory(list)
    meta: ProviderMeta | None = None


@attrs.define
class _ToolSlot:
    id: str
    name: str
    meta: ProviderMeta | None
    parts: list[str] = attrs.Factory(list)


_Slot = _TextSlot | _ReasoningSlot | _ToolSlot
_S = TypeVar("_S", _TextSlot, _ReasoningSlot)
_KIND = {_TextSlot: "text", _ReasoningSlot: "reasoning", _ToolSlot: "tool_call"}


def _merge_meta(old: ProviderMeta | None, new: ProviderMeta) -> ProviderMeta:
    """Later meta from the same provider adds to earlier meta; anything else replaces it."""
    if (
        old is not None
        and old.provider == new.provider
        and isinstance(old.data, dict)
        and isinstance(new.data, dict)
    ):
        return ProviderMeta(new.provider, {**old.data, **new.data})
    return new


class MessageBuilder:
    def __init__(self) -> None:
        self._slots: dict[int, _Slot] = {}
        self._tool_ids: dict[str, int] = {}
        self._usage = stream.Usage()
        self._finish: stream.Finish | None = None

    @property
    def usage(self) -> stream.Usage:
        return self._usage

    @property
    def finished(self) -> bool:
        return self._finish is not None

    def push(self, event: stream.StreamEvent) -> None:
        if self._finish is not None:
            raise DecodeError(f"event after Finish({self._finish.reason}): {event!r}")
        match event:
            case stream.TextDelta(block, text):
                self._slot(block, _TextSlot, event).parts.append(text)
            case stream.ReasoningDelta(block, text):
                self._slot(block, _ReasoningSlot, event).parts.append(text)
            case stream.BlockMeta(block, meta):
                slot = self._slots.get(block)
                if slot is None:
                    self._slots[block] = _ReasoningSlot(meta=meta)
                elif isinstance(slot, _ReasoningSlot | _ToolSlot):
                    slot.meta = _merge_meta(slot.meta, meta)
                else:
                    raise DecodeError(f"provider meta for block {block}, which is a text block")
            case stream.ToolCallStart(block, call_id, name, meta):
                self._start_tool(block, call_id, name, meta)
            case stream.ToolCallDelta(block, fragment):
                slot = self._slots.get(block)
                if not isinstance(slot, _ToolSlot):
                    what = "before its ToolCallStart" if slot is None else "on a non-tool block"
                    raise DecodeError(f"tool argument delta for block {block} {what}")
                slot.parts.append(fragment)
            case stream.UsageReport(usage):
                self._usage = self._usage.absorb(usage)
            case stream.Finish():
                self._finish = event

    def _slot(self, block: int, kind: type[_S], event: stream.StreamEvent) -> _S:
        slot = self._slots.get(block)
        if slot is None:
            created = kind()
            self._slots[block] = created
            return created
        if not isinstance(slot, kind):
            raise DecodeError(
                f"block {block} is a {_KIND[type(slot)]} block; got {type(event).__name__}"
            )
        return slot

    def _start_tool(self, block: int, call_id: str, name: str, meta: ProviderMeta | None) -> None:
        if not call_id or not name:
            raise DecodeError(f"tool call start for block {block} without an id or a name")
        existing = self._slots.get(block)
        if existing is not None:
            if isinstance(existing, _ToolSlot) and (existing.id, existing.name) == (call_id, name):
                return  # a repeated, identical start carries no new information
            raise DecodeError(
                f"conflicting start for block {block}: already {_KIND[type(existing)]}"
                + (f" {existing.id!r}" if isinstance(existing, _ToolSlot) else "")
                + f", now tool call {call_id!r}"
            )
        if call_id in self._tool_ids:
            raise DecodeError(
                f"tool call id {call_id!r} started twice (blocks {self._tool_ids[call_id]} "
                f"and {block})"
            )
        self._tool_ids[call_id] = block
        self._slots[block] = _ToolSlot(call_id, name, meta)

    def finish(self) -> Completion:
        """The completion, or UnexpectedEof if the stream never finished."""
        if self._finish is None:
            raise UnexpectedEof()
        blocks: list[ContentBlock] = []
        invalid: dict[str, str] = {}
        for slot in self._slots.values():  # dicts keep first-appearance order
            match slot:
                case _TextSlot(parts):
                    if text := "".join(parts):
                        blocks.append(Text(text))
                case _ReasoningSlot(parts, meta):
                    text = "".join(parts)
                    if text or meta is not None:
                        blocks.append(Reasoning(text, meta))
                case _ToolSlot(call_id, name, meta, parts):
                    raw = "".join(parts)
                    arguments: object
                    if not raw.strip():
                        arguments = {}
                    else:
                        try:
                            arguments = json.loads(
                                raw, parse_constant=_not_json, parse_float=_finite
                            )
                        except ValueError as exc:  # JSONDecodeError included
                            arguments = raw
                            invalid[call_id] = f"arguments are not valid JSON ({exc})"
                    blocks.append(ToolCall(call_id, name, arguments, meta))
        return Completion(
            message=Message(Role.ASSISTANT, blocks),
            finish=self._finish.reason,
            usage=self._usage,
            finish_detail=self._finish.detail,
            invalid_arguments=invalid,
        )


def _not_json(name: str) -> NoReturn:
    """NaN and the infinities: Python's reader takes them, JSON has no such values."""
    raise ValueError(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text} is out of range")
    return value


async def collect(events: AsyncIterable[stream.StreamEvent]) -> Completion:
    """Drain a provider stream into a Completion (UnexpectedEof if it ends without Finish)."""
    builder = MessageBuilder()
    async for event in events:
        builder.push(event)
    return builder.finish()
