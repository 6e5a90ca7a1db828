"""Prompt-cache hints in the request bodies: Anthropic's breakpoints (tools, system, the stable
prefix, the tail; never more than four, never on a thinking block), OpenAI's `prompt_cache_key`
(OpenAI's own endpoints only) and nothing at all for Gemini.

The byte-level tests compare the exact bytes the adapter's HTTP request carries.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from anvild.llm.capabilities import (
    ANTHROPIC,
    GEMINI,
    OPENAI_CHAT,
    OPENAI_CHAT_COMPAT,
    OPENAI_RESPONSES,
    Capabilities,
    for_target,
)
from anvild.llm.providers import anthropic, gemini, openai_chat, openai_responses
from anvild.llm.types import (
    ChatRequest,
    Message,
    ProviderMeta,
    Reasoning,
    Role,
    Text,
    ToolCall,
    ToolResult,
    ToolSpec,
)

EPHEMERAL = {"type": "ephemeral"}
TOOL = ToolSpec("t", "d", {"type": "object"})
SUMMARY = Message.user_text("summary")


def cache_controls(value: Any, path: str = "") -> list[str]:
    """The JSON paths of every cache_control in a request body, in document order."""
    if isinstance(value, dict):
        found = [path for key in value if key == "cache_control"]
        for key, item in value.items():
            found += cache_controls(item, f"{path}.{key}")
        return found
    if isinstance(value, list):
        return [hit for i, item in enumerate(value) for hit in cache_controls(item, f"{path}[{i}]")]
    return []


def body_bytes(wire: dict[str, Any]) -> bytes:
    """The bytes httpx sends for a JSON body (what every adapter's build_request uses)."""
    with httpx.Client() as client:
        return client.build_request("POST", "https://x.test", json=wire).content


def signed(text: str) -> Reasoning:
    return Reasoning(text, ProviderMeta("anthropic", {"signature": "sig"}))


# -- Anthropic -------------------------------------------------------------------------------


def test_anthropic_four_breakpoints_are_sent_byte_for_byte() -> None:
    request = ChatRequest(
        model="m",
        system="sys",
        messages=(SUMMARY, Message.assistant_text("ok"), Message.user_text("q")),
        tools=(TOOL,),
        max_tokens=16,
        cache=True,
        stable_prefix=1,
    )
    sent = body_bytes(anthropic.to_wire(request))
    assert sent == (
        b'{"model":"m",'
        b'"system":[{"type":"text","text":"sys","cache_control":{"type":"ephemeral"}}],'
        b'"messages":['
        b'{"role":"user","content":[{"type":"text","text":"summary",'
        b'"cache_control":{"type":"ephemeral"}}]},'
        b'{"role":"assistant","content":[{"type":"text","text":"ok"}]},'
        b'{"role":"user","content":[{"type":"text","text":"q",'
        b'"cache_control":{"type":"ephemeral"}}]}],'
        b'"tools":[{"name":"t","description":"d","input_schema":{"type":"object"},'
        b'"cache_control":{"type":"ephemeral"}}],'
        b'"max_tokens":16,"stream":true}'
    )


async def test_anthropic_provider_request_carries_the_breakpoints() -> None:
    request = ChatRequest(
        model="m",
        system="sys",
        messages=(SUMMARY, Message.assistant_text("ok"), Message.user_text("q")),
        tools=(TOOL,),
        cache=True,
        stable_prefix=1,
    )
    async with httpx.AsyncClient() as client:
        provider = anthropic.AnthropicProvider(client, "https://api.test", "k")
        sent = provider.build_request(request)
    assert sent.content.count(b'"cache_control":{"type":"ephemeral"}') == 4
    assert json.loads(sent.content) == anthropic.to_wire(request, ANTHROPIC)


def test_anthropic_stable_prefix_inside_a_merged_message_marks_its_own_last_block() -> None:
    # Two user messages in a row are one wire message; the breakpoint ends the summary's part.
    request = ChatRequest(
        model="m", messages=(SUMMARY, Message.user_text("q")), cache=True, stable_prefix=1
    )
    body = anthropic.to_wire(request)
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "summary", "cache_control": EPHEMERAL},
                {"type": "text", "text": "q", "cache_control": EPHEMERAL},
            ],
        }
    ]


def test_anthropic_no_stable_breakpoint_when_reordering_puts_later_blocks_first() -> None:
    # The tool result of message 1 is rendered before the summary (tool results come first in
    # a user message), so no rendered prefix holds only stable blocks.
    request = ChatRequest(
        model="m",
        messages=(
            Message.user_text("go"),
            Message(Role.ASSISTANT, [ToolCall("c1", "t", {})]),
            SUMMARY,
            Message(Role.USER, [ToolResult("c1", "done")]),
        ),
        cache=True,
        stable_prefix=3,
    )
    body = anthropic.to_wire(request)
    assert cache_controls(body) == [".messages[1].content[0]", ".messages[2].content[1]"]
    assert body["messages"][2]["content"][0]["type"] == "tool_result"


def test_anthropic_stable_breakpoint_skips_a_thinking_block() -> None:
    request = ChatRequest(
        model="m",
        messages=(
            SUMMARY,
            Message(Role.ASSISTANT, [Text("a"), signed("thinking")]),
            Message.user_text("q"),
        ),
        cache=True,
        stable_prefix=2,
    )
    body = anthropic.to_wire(request)
    assert cache_controls(body) == [".messages[1].content[0]", ".messages[2].content[0]"]
    assert body["messages"][1]["content"][1] == {
        "type": "thinking",
        "thinking": "thinking",
        "signature": "sig",
    }


@pytest.mark.parametrize("stable_prefix", [3, 4, 100])
def test_anthropic_a_prefix_covering_everything_is_the_tail_breakpoint(stable_prefix: int) -> None:
    request = ChatRequest(
        model="m",
        system="sys",
        messages=(SUMMARY, Message.assistant_text("ok"), Message.user_text("q")),
        tools=(TOOL,),
        cache=True,
        stable_prefix=stable_prefix,
    )
    assert cache_controls(anthropic.to_wire(request)) == [
        ".system[0]",
        ".messages[2].content[0]",
        ".tools[0]",
    ]


def test_anthropic_never_more_than_four_breakpoints() -> None:
    tools = tuple(ToolSpec(f"t{i}", "d", {"type": "object"}) for i in range(3))
    messages = tuple(
        Message.user_text(f"u{i}") if i % 2 == 0 else Message.assistant_text(f"a{i}")
        for i in range(9)
    )
    for stable_prefix in range(len(messages) + 2):
        request = ChatRequest(
            model="m",
            system="sys",
            messages=messages,
            tools=tools,
            cache=True,
            stable_prefix=stable_prefix,
        )
        found = cache_controls(anthropic.to_wire(request))
        assert len(found) == (3 if stable_prefix in (0, 9, 10) else 4)
        assert ".tools[2]" in found
        assert ".messages[8].content[0]" in found
        if 0 < stable_prefix < 9:
            assert f".messages[{stable_prefix - 1}].content[0]" in found


def test_anthropic_hints_without_cache_place_nothing() -> None:
    request = ChatRequest(
        model="m",
        system="sys",
        messages=(SUMMARY, Message.user_text("q")),
        tools=(TOOL,),
        stable_prefix=1,
        cache_key="session-1",
    )
    body = anthropic.to_wire(request)
    assert cache_controls(body) == []
    assert body["system"] == "sys"
    assert "session-1" not in json.dumps(body)


def test_stable_prefix_cannot_be_negative() -> None:
    with pytest.raises(ValueError, match="stable_prefix"):
        ChatRequest(model="m", stable_prefix=-1)


# -- OpenAI ----------------------------------------------------------------------------------

HI = ChatRequest(model="gpt-5", messages=(Message.user_text("hi"),), max_tokens=16)


def test_chat_sends_prompt_cache_key_to_openai_byte_for_byte() -> None:
    request = ChatRequest(
        model="gpt-5", messages=(Message.user_text("hi"),), max_tokens=16, cache_key="session-1"
    )
    assert body_bytes(openai_chat.to_wire(request, OPENAI_CHAT)) == (
        b'{"model":"gpt-5","messages":[{"role":"user","content":"hi"}],'
        b'"max_completion_tokens":16,"prompt_cache_key":"session-1",'
        b'"stream":true,"stream_options":{"include_usage":true}}'
    )


def test_responses_sends_prompt_cache_key_to_openai_byte_for_byte() -> None:
    request = ChatRequest(
        model="gpt-5", messages=(Message.user_text("hi"),), max_tokens=16, cache_key="session-1"
    )
    caps = for_target("openai-responses", "https://api.openai.com/v1")
    assert body_bytes(openai_responses.to_wire(request, caps)) == (
        b'{"model":"gpt-5","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}],'
        b'"store":false,"include":["reasoning.encrypted_content"],"max_output_tokens":16,'
        b'"prompt_cache_key":"session-1","stream":true}'
    )


@pytest.mark.parametrize(
    ("kind", "caps"),
    [
        ("chat", OPENAI_CHAT_COMPAT),  # llama-server, Ollama, vLLM, ...
        ("chat", for_target("openai-chat", "http://127.0.0.1:8080/v1")),
        ("responses", OPENAI_RESPONSES),
        ("responses", for_target("openai-responses", "http://127.0.0.1:8080/v1")),
    ],
)
def test_compatible_servers_get_no_prompt_cache_key(kind: str, caps: Capabilities) -> None:
    request = ChatRequest(model="m", messages=(Message.user_text("hi"),), cache_key="session-1")
    to_wire = openai_chat.to_wire if kind == "chat" else openai_responses.to_wire
    sent = body_bytes(to_wire(request, caps))
    assert b"prompt_cache_key" not in sent
    assert b"session-1" not in sent


@pytest.mark.parametrize("kind", ["chat", "responses"])
def test_no_cache_key_no_prompt_cache_key(kind: str) -> None:
    if kind == "chat":
        body = openai_chat.to_wire(HI, OPENAI_CHAT)
    else:
        body = openai_responses.to_wire(
            HI, for_target("openai-responses", "https://api.openai.com")
        )
    assert "prompt_cache_key" not in body


def test_only_openai_endpoints_take_prompt_cache_key() -> None:
    assert for_target("openai-chat", "https://api.openai.com/v1").prompt_cache_key
    assert for_target("openai-responses", "https://api.openai.com/v1").prompt_cache_key
    assert not for_target("openai-chat", "http://localhost:8080/v1").prompt_cache_key
    assert not for_target("openai-responses").prompt_cache_key
    assert not for_target("anthropic", "https://api.anthropic.com").prompt_cache_key
    assert not for_target("gemini").prompt_cache_key


# -- Gemini ----------------------------------------------------------------------------------


def test_gemini_sends_no_cache_hints() -> None:
    plain = ChatRequest(
        model="gemini-2.5-pro",
        system="sys",
        messages=(SUMMARY, Message.assistant_text("ok"), Message.user_text("q")),
        tools=(TOOL,),
    )
    hinted = ChatRequest(
        model="gemini-2.5-pro",
        system="sys",
        messages=plain.messages,
        tools=(TOOL,),
        cache=True,
        stable_prefix=1,
        cache_key="session-1",
    )
    sent = body_bytes(gemini.to_wire(hinted, GEMINI))
    assert sent == body_bytes(gemini.to_wire(plain, GEMINI))
    assert b"cache" not in sent.lower()
    assert b"session-1" not in sent
