"""The mail tools bound to a session (`anvild.mail.tools`), through the tool registry."""

from __future__ import annotations

import json
from pathlib import Path

from anvild.agent.tools.base import ToolContext
from anvild.agent.tools.registry import ToolRegistry
from anvild.llm.types import ToolCall, ToolResult
from anvild.mail import Box, MailStore, Peer, PostOffice, mail_tools
from anvild.sandbox import ReadOnly
from anvild.sandbox.roles import Role as SandboxRole
from anvild.session.session import ToolSetup
from tests.unit.mail.test_post import DEV, REV, FakePeers


class FakeGate:
    def __init__(self) -> None:
        self.asked: list[tuple[str, str, str]] = []

    def request_result_approval(self, session_id: str, summary: str, asked_by: str) -> str:
        if summary == "again":
            raise ValueError("session a1 already asked for approval of its result")
        self.asked.append((session_id, summary, asked_by))
        return "Approval requested."


def registry(post: PostOffice, gate: FakeGate, me: str = "a1") -> ToolRegistry:
    setup = ToolSetup(Path("/"), "developer", ReadOnly(), SandboxRole("developer"), session_id=me)
    return ToolRegistry(mail_tools(post, gate)(setup))


async def call(reg: ToolRegistry, name: str, args: dict[str, object], tmp: Path) -> ToolResult:
    return await reg.dispatch(ToolCall("c1", name, args), ToolContext(cwd=tmp))


def office(tmp_path: Path) -> PostOffice:
    return PostOffice(
        MailStore(tmp_path / "mail"), FakePeers(DEV, REV, Peer("c3", None, "tester", "running"))
    )


async def test_list_sessions_shows_peers_and_marks_the_caller(tmp_path: Path) -> None:
    reg = registry(office(tmp_path), FakeGate())
    result = await call(reg, "list_sessions", {}, tmp_path)
    assert result.content.splitlines() == [
        "id\talias\trole\tstate",
        "a1\tdev\tdeveloper\tidle\t(you)",
        "b2\trev\treviewer\tidle",
        "c3\t-\ttester\trunning",
        '(the human: "user")',
    ]


async def test_send_message_is_always_from_this_session(tmp_path: Path) -> None:
    post = office(tmp_path)
    reg = registry(post, FakeGate())
    args = {"to": "rev", "type": "REVIEW_RESPONSE", "body": "LGTM", "metadata": {"verdict": "lgtm"}}
    result = await call(reg, "send_message", args, tmp_path)
    assert not result.is_error, result.content
    [got] = await post.unread("b2")
    assert (got.sender, got.metadata["verdict"]) == ("a1", "lgtm")
    assert result.content == f"Sent REVIEW_RESPONSE {got.id} to b2."
    spoof = await call(reg, "send_message", {**args, "from": "b2"}, tmp_path)
    assert spoof.is_error
    assert "from" in spoof.content


async def test_send_message_errors_tell_the_model_what_to_fix(tmp_path: Path) -> None:
    post = office(tmp_path)
    reg = registry(post, FakeGate())
    no_verdict = await call(
        reg, "send_message", {"to": "rev", "type": "REVIEW_RESPONSE", "body": "ok"}, tmp_path
    )
    assert no_verdict.is_error
    assert 'Not sent: a REVIEW_RESPONSE must carry "metadata": {"verdict": "lgtm"}' in (
        no_verdict.content
    )
    bad_type = await call(reg, "send_message", {"to": "rev", "type": "X", "body": "?"}, tmp_path)
    assert bad_type.is_error
    assert "type" in bad_type.content
    ghost = await call(
        reg, "send_message", {"to": "ghost", "type": "QUESTION", "body": "?"}, tmp_path
    )
    assert ghost.is_error
    assert "Not delivered" in ghost.content
    assert "'ghost'" in ghost.content
    assert await post.unread("b2") == []


async def test_read_inbox_returns_unread_once_and_archives(tmp_path: Path) -> None:
    post = office(tmp_path)
    await post.send_args("b2", {"to": "a1", "type": "QUESTION", "body": "why?"})
    reg = registry(post, FakeGate())
    result = await call(reg, "read_inbox", {}, tmp_path)
    [message] = json.loads(result.content)
    assert (message["from"], message["body"]) == ("b2", "why?")
    again = await call(reg, "read_inbox", {}, tmp_path)
    assert again.content == "No unread messages."
    assert [m.id for m in await post.archived("a1", Box.RECEIVED)] == [message["id"]]


async def test_request_approval_asks_the_gate_for_this_session(tmp_path: Path) -> None:
    gate = FakeGate()
    reg = registry(office(tmp_path), gate)
    result = await call(reg, "request_approval", {"summary": "Done; tests pass."}, tmp_path)
    assert result.content == "Approval requested."
    assert gate.asked == [("a1", "Done; tests pass.", "model")]
    refused = await call(reg, "request_approval", {"summary": "again"}, tmp_path)
    assert refused.is_error
    assert "Approval not requested: session a1 already asked" in refused.content
