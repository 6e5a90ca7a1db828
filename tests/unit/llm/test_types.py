"""Canonical conversation types: constructors, accessors and a lossless JSON round trip."""

from __future__ import annotations

import json

import attrs
import cattrs
import pytest

from anvild.llm.types import (
    ChatRequest,
    Image,
    Message,
    ProviderMeta,
    Reasoning,
    Role,
    Text,
    ToolCall,
    ToolResult,
    ToolSpec,
    converter,
)

EVERY_BLOCK = Message(
    Role.ASSISTANT,
    [
        Text("hello"),
        Image("image/png", "iVBORw0KGgo="),
        Reasoning("thinking...", ProviderMeta("anthropic", {"signature": "sig=="})),
        Reasoning("unsigned"),
        ToolCall("call_1", "read_file", {"file_path": "a.txt", "n": [1, 2.5, None]}),
        ToolCall("call_2", "grep", {}, ProviderMeta("gemini", {"thoughtSignature": "abc"})),
        ToolResult("call_0", "ok"),
        ToolResult("call_9", "boom", is_error=True),
    ],
)


def test_message_with_every_block_kind_round_trips_losslessly() -> None:
    wire = json.dumps(converter.unstructure(EVERY_BLOCK))
    back = converter.structure(json.loads(wire), Message)
    assert back == EVERY_BLOCK
    assert [type(b) for b in back.content] == [type(b) for b in EVERY_BLOCK.content]


def test_json_uses_stable_tags_and_omits_absent_meta() -> None:
    data = converter.unstructure(EVERY_BLOCK)
    assert data["role"] == "assistant"
    assert [b["type"] for b in data["content"]] == [
        "text",
        "image",
        "reasoning",
        "reasoning",
        "tool_call",
        "tool_call",
        "tool_result",
        "tool_result",
    ]
    assert data["content"][2]["meta"] == {"provider": "anthropic", "data": {"signature": "sig=="}}
    assert "meta" not in data["content"][3]
    assert "meta" not in data["content"][4]
    assert data["content"][6] == {
        "type": "tool_result",
        "call_id": "call_0",
        "content": "ok",
        "is_error": False,
    }


def test_tool_result_is_error_defaults_to_false_when_absent_from_json() -> None:
    block = converter.structure(
        {"role": "user", "content": [{"type": "tool_result", "call_id": "c", "content": "x"}]},
        Message,
    ).content[0]
    assert block == ToolResult("c", "x", is_error=False)


def test_unknown_block_tag_is_rejected() -> None:
    with pytest.raises(cattrs.ClassValidationError) as info:
        converter.structure({"role": "user", "content": [{"type": "video"}]}, Message)
    assert "video" in repr(info.value.exceptions)


def test_accessors() -> None:
    msg = Message(
        Role.ASSISTANT,
        [Text("a"), ToolCall("1", "t", {"x": 1}), Text("b"), ToolCall("2", "u", {})],
    )
    assert msg.text() == "ab"
    assert [(c.id, c.name, c.arguments) for c in msg.tool_calls()] == [
        ("1", "t", {"x": 1}),
        ("2", "u", {}),
    ]
    assert Message.user_text("hi") == Message(Role.USER, (Text("hi"),))
    assert Message.assistant_text("yo").role is Role.ASSISTANT
    assert Message(Role.USER, [ToolResult("1", "r")]).tool_results() == [ToolResult("1", "r")]


def test_role_has_only_user_and_assistant() -> None:
    assert {r.value for r in Role} == {"user", "assistant"}


def test_values_are_frozen() -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        EVERY_BLOCK.role = Role.USER  # type: ignore[misc]
    changed = attrs.evolve(EVERY_BLOCK, role=Role.USER)
    assert changed.role is Role.USER
    assert EVERY_BLOCK.role is Role.ASSISTANT


def test_chat_request_round_trips_with_cache_hint() -> None:
    request = ChatRequest(
        model="m",
        system="be brief",
        messages=[Message.user_text("hi")],
        tools=[ToolSpec("t", "does t", {"type": "object", "properties": {}})],
        max_tokens=100,
        temperature=0.2,
        cache=True,
        stable_prefix=1,
        cache_key="session-1",
    )
    back = converter.structure(json.loads(json.dumps(converter.unstructure(request))), ChatRequest)
    assert back == request
    plain = ChatRequest(model="m")
    assert (plain.cache, plain.stable_prefix, plain.cache_key) == (False, 0, "")
