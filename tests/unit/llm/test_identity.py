"""Request identity: the digest follows the canonical form exactly, and the incremental hasher
agrees with hashing everything."""

from __future__ import annotations

import hashlib

from anvild.llm.identity import RequestHasher, canonical, digest_of, head_of, identity
from anvild.llm.types import ChatRequest, Message, Role, Text, ToolSpec, converter

SPEC = ToolSpec("bash", "Run a command.", {"type": "object", "properties": {}})


def request(
    *texts: str, system: str = "be brief", tools: tuple[ToolSpec, ...] = (SPEC,)
) -> ChatRequest:
    roles = (Role.USER, Role.ASSISTANT)
    messages = tuple(Message(roles[i % 2], (Text(t),)) for i, t in enumerate(texts))
    return ChatRequest(model="m", messages=messages, system=system, tools=tools, cache_key="s1")


def test_the_digest_is_over_the_canonical_head_and_each_canonical_message() -> None:
    req = request("hi", "hello")
    found = identity(req)
    head = hashlib.sha256(canonical(head_of(req))).hexdigest()
    messages = [
        hashlib.sha256(canonical(converter.unstructure(m, Message))).hexdigest()
        for m in req.messages
    ]
    assert found.head == head
    assert found.digest == digest_of(head, messages)
    assert found.head_body["system"] == "be brief"
    assert "messages" not in found.head_body


def test_any_difference_changes_the_digest_and_only_the_head_when_it_is_the_head() -> None:
    base = identity(request("hi", "hello"))
    assert identity(request("hi", "hello")) == base
    changed_text = identity(request("hi", "hello!"))
    assert changed_text.digest != base.digest
    assert changed_text.head == base.head
    changed_system = identity(request("hi", "hello", system="be brief."))
    assert changed_system.head != base.head
    assert identity(request("hi", "hello", tools=())).head != base.head


def test_the_incremental_hasher_agrees_with_hashing_everything() -> None:
    hasher = RequestHasher()
    first = request("hi", "hello", "more")
    assert hasher.identify(first) == identity(first)
    # The next step: the same message objects plus new ones, and a changed last message.
    grown = ChatRequest(
        model="m",
        messages=(*first.messages, Message(Role.ASSISTANT, (Text("ok"),))),
        system="be brief",
        tools=(SPEC,),
        cache_key="s1",
    )
    assert hasher.identify(grown) == identity(grown)
    cut = request("hi", "bye")
    assert hasher.identify(cut) == identity(cut)


def test_text_outside_ascii_and_lone_surrogates_have_a_canonical_form() -> None:
    found = identity(request("héllo \ud800"))
    assert found == identity(request("héllo \ud800"))
    assert found != identity(request("hello \ud800"))
