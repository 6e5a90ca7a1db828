"""The identity of a model request: digests of its canonical form, and the form itself.

The canonical form of a `ChatRequest` is its JSON by the llm converter (what every adapter maps
from), keys sorted, no spaces, ASCII. It has two parts: the head (every field but `messages`:
model, system prompt, tool definitions, parameters) and the messages, one JSON text each. The
request's digest is a sha256 over `IDENTITY_VERSION`, the head's sha256 and the sha256 of the
list of each message's sha256: two requests have the same digest exactly when their canonical
forms are byte-identical (an adapter's body is a function of it). `RequestHasher` keeps the
last request's message hashes, so a step hashes only the messages new since the one before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Final

import attrs

from anvild.llm.types import ChatRequest, Message, converter

IDENTITY_VERSION: Final = "anvil-request/1"


def canonical(value: Any) -> bytes:
    """`value` (plain JSON data) as canonical bytes: keys sorted, no spaces, ASCII."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("ascii")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def head_of(request: ChatRequest) -> dict[str, Any]:
    """The request's head: its canonical JSON without the messages."""
    body: dict[str, Any] = converter.unstructure(request)
    body.pop("messages", None)
    return body


def message_json(message: Message) -> Any:
    return converter.unstructure(message, Message)


def message_digest(message: Message) -> str:
    return _sha(canonical(message_json(message)))


def _chained(messages: Sequence[str]) -> str:
    return _sha("".join(f"{digest}\n" for digest in messages).encode("ascii"))


def _final(head: str, chain: str) -> str:
    return _sha(f"{IDENTITY_VERSION}\n{head}\n{chain}".encode("ascii"))


def digest_of(head: str, messages: Sequence[str]) -> str:
    """The request digest from its head's digest and its messages' digests."""
    return _final(head, _chained(messages))


@attrs.frozen
class RequestIdentity:
    digest: str  # the whole request
    head: str  # its head
    head_body: dict[str, Any]  # the head itself (plain JSON)


def identity(request: ChatRequest) -> RequestIdentity:
    """The identity of one request, hashing everything."""
    return RequestHasher().identify(request)


class RequestHasher:
    """Identities of a conversation's successive requests: the head and the messages that did
    not change (the same objects) since the last request are not hashed again."""

    def __init__(self) -> None:
        self._key: tuple[Any, ...] | None = None
        self._head: tuple[str, dict[str, Any]] = ("", {})
        self._messages: tuple[Message, ...] = ()
        # The running hash of the message digests' lines after each message (index 0: none).
        self._chain: list[Any] = [hashlib.sha256()]

    def identify(self, request: ChatRequest) -> RequestIdentity:
        key = (
            request.model,
            request.system,
            request.tools,
            request.max_tokens,
            request.temperature,
            request.cache,
            request.stable_prefix,
            request.cache_key,
        )
        if key != self._key:
            body = head_of(request)
            self._key, self._head = key, (_sha(canonical(body)), body)
        messages, known = request.messages, self._messages
        same = 0
        for old, new in zip(known, messages, strict=False):
            if old is not new:
                break
            same += 1
        chain = self._chain
        del chain[same + 1 :]
        running = chain[same].copy()
        for message in messages[same:]:
            running.update(f"{message_digest(message)}\n".encode("ascii"))
            chain.append(running.copy())
        self._messages = messages
        head, body = self._head
        return RequestIdentity(_final(head, running.hexdigest()), head, body)


__all__ = [
    "IDENTITY_VERSION",
    "RequestHasher",
    "RequestIdentity",
    "canonical",
    "digest_of",
    "head_of",
    "identity",
    "message_digest",
    "message_json",
]
