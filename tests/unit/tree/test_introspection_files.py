"""A session's `systemprompt`, `history` and `env` files (`anvild.tree.introspection`)
over a real 9P connection: what the model and the commands are given, with no secret in them."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from anvild.agent.context.clearing import STUB_PREFIX
from anvild.agent.context.compaction import SUMMARY_MARK
from anvild.llm.testing import script
from anvild.llm.types import Message, Role, ToolResult, converter
from anvild.ninep import messages as m
from anvild.sandbox.bwrap import SandboxSettings, sandbox_env
from anvild.sandbox.secrets import Redactor
from anvild.session import roles
from anvild.session.compaction import ContextPolicy
from anvild.tree.introspection import introspection_files
from tests.unit.session.support import settings, workspace
from tests.unit.tree.test_sessions_tree import Client, new_session, served

API_KEY = "sk-test-0123456789abcdef"
TOKEN = "ghp_passedthroughtoken42"
HIDDEN = "opaque-value-the-tools-never-see"


@pytest.fixture
def environ(monkeypatch: pytest.MonkeyPatch) -> Redactor:
    """The daemon's environment: a provider key, a token passed through, a plain variable
    passed through (its value holds the key), one that is not; the redactor the daemon builds
    from it."""
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("GH_TOKEN", TOKEN)
    monkeypatch.setenv("PASSED_PLAIN", "plain value")
    monkeypatch.setenv("PASSED_URL", f"https://user:{API_KEY}@example.com/")
    monkeypatch.setenv("NOT_PASSED", HIDDEN)
    return Redactor.from_environ(os.environ, passthrough=PASSTHROUGH)


PASSTHROUGH = ("GH_TOKEN", "PASSED_PLAIN", "PASSED_URL")


def changes(redactor: Redactor, **more: Any) -> dict[str, Any]:
    sandbox = SandboxSettings(passthrough=PASSTHROUGH)
    return {"redact": redactor.redact, "sandbox_settings": sandbox, **more}


def assert_no_secret(text: str) -> None:
    for secret in (API_KEY, TOKEN, HIDDEN):
        assert secret not in text
        assert secret[:12] not in text  # nor a piece of it


def parse(history: str) -> list[dict[str, Any]]:
    assert history.endswith("\n")
    return [json.loads(line) for line in history.splitlines()]


async def turn(c: Client, sid: str, prompt: bytes) -> None:
    assert await c.put(f"{sid}/in", prompt) == m.Rclunk(0)
    assert await c.get(f"{sid}/wait") == "await\n"


async def test_systemprompt_has_every_layer_in_order_and_no_secret(
    tmp_path: Path, environ: Redactor
) -> None:
    agents = "Run `make check` before you say done.\n"
    (workspace(tmp_path) / "AGENTS.md").write_text(f"{agents}The key is {API_KEY}.\n")
    more = changes(environ)
    async with served(tmp_path, [], [introspection_files(settings(tmp_path, **more))], **more) as (
        manager,
        con,
        _,
    ):
        c = await con()
        sid = await new_session(c, b"role=reviewer")
        assert await c.put(f"{sid}/context", b"Focus on the parser.") == m.Rclunk(0)
        text = await c.get(f"{sid}/systemprompt")
        assert_no_secret(text)
        assert text == environ.redact(manager.get(sid).system_prompt)
        role = roles.role_text("reviewer", user_dir=tmp_path / "config" / "roles")
        parts = [
            "You are a coding agent run by anvild",
            agents.strip(),
            "The key is [redacted:OPENAI_API_KEY].",
            f"# Your role: reviewer\n\n{role}",
            "# Session context\n\nFocus on the parser.",
        ]
        at = [text.index(part) for part in parts]
        assert at == sorted(at)


async def test_history_is_the_request_as_jsonl_and_grows_by_each_turn(
    tmp_path: Path, environ: Redactor
) -> None:
    (workspace(tmp_path) / "notes.txt").write_text("the notes\n")
    scripts = [
        script.tool_call("c1", "read_file", {"file_path": "notes.txt"}),
        script.text(f"Read it; the key was {API_KEY}."),
        script.text("second answer"),
    ]
    more = changes(environ)
    extension = introspection_files(settings(tmp_path, **more))
    async with served(tmp_path, scripts, [extension], **more) as (manager, con, _):
        c = await con()
        sid = await new_session(c)
        assert await c.get(f"{sid}/history") == ""
        await turn(c, sid, b"read notes.txt")
        first = await c.get(f"{sid}/history")
        assert_no_secret(first)
        lines = parse(first)
        assert [line["role"] for line in lines] == ["user", "assistant", "user", "assistant"]
        assert lines[0]["content"] == [{"type": "text", "text": "read notes.txt"}]
        call = lines[1]["content"][0]
        assert (call["type"], call["id"], call["name"]) == ("tool_call", "c1", "read_file")
        assert lines[2]["content"][0]["type"] == "tool_result"
        assert "the notes" in lines[2]["content"][0]["content"]
        assert lines[3]["content"][0]["text"] == "Read it; the key was [redacted:OPENAI_API_KEY]."
        # The canonical form: each line structures back into the transcript's message.
        transcript = manager.get(sid).agent.messages
        assert [converter.structure(line, Message) for line in lines[:3]] == list(transcript[:3])

        await turn(c, sid, f"and now {API_KEY}".encode())
        second = parse(await c.get(f"{sid}/history"))
        assert second[:4] == lines
        assert len(second) == 6
        assert second[4]["content"][0]["text"] == "and now [redacted:OPENAI_API_KEY]"
        assert second[5] == {
            "role": "assistant",
            "content": [{"type": "text", "text": "second answer"}],
        }


async def test_history_shows_cleared_results_as_the_request_sends_them(tmp_path: Path) -> None:
    (workspace(tmp_path) / "big.txt").write_text("a long line of the file\n" * 400)
    scripts = [
        script.tool_call("c1", "read_file", {"file_path": "big.txt"}),
        script.text("read"),
    ]
    policy = ContextPolicy(clear_at=1.0, keep_tool_results=0)  # clear past 1% of the window
    extension = introspection_files(settings(tmp_path, context=policy))
    async with served(tmp_path, scripts, [extension], context=policy) as (manager, con, _):
        c = await con()
        sid = await new_session(c)
        await turn(c, sid, b"read big.txt")
        lines = parse(await c.get(f"{sid}/history"))
        result = lines[2]["content"][0]
        assert result["type"] == "tool_result"
        assert result["content"].startswith(STUB_PREFIX)
        # The transcript (and the records) keep the whole result.
        kept = manager.get(sid).agent.messages[2].content[0]
        assert isinstance(kept, ToolResult)
        assert "a long line of the file" in kept.content


async def test_a_compacted_history_starts_with_a_marker_line_then_the_summary(
    tmp_path: Path,
) -> None:
    scripts = [script.text("one"), script.text("two"), script.text("The summary.")]
    async with served(tmp_path, scripts, [introspection_files(settings(tmp_path))]) as (
        manager,
        con,
        _,
    ):
        c = await con()
        sid = await new_session(c)
        await turn(c, sid, b"first")
        await turn(c, sid, b"second")
        assert manager.get(sid).agent.messages[0].role is Role.USER
        assert "marker" not in await c.get(f"{sid}/history")
        assert await manager.get(sid).compaction.compact() == "compacted"
        lines = parse(await c.get(f"{sid}/history"))
        marker, summary, *rest = lines
        assert marker["marker"] == "compacted"
        assert (marker["trigger"], marker["model"]) == ("manual", "fake-model")
        assert marker["dropped"] == manager.get(sid).record.compactions[-1].dropped > 0
        assert marker["at"].endswith("Z")
        assert "role" not in marker
        assert summary["role"] == "user"
        assert summary["content"][0]["text"].startswith(SUMMARY_MARK)
        assert "The summary." in summary["content"][0]["text"]
        assert all("role" in line for line in rest)


async def test_env_is_what_a_sandboxed_command_gets_with_secrets_masked(
    tmp_path: Path, environ: Redactor
) -> None:
    more = changes(environ)
    async with served(tmp_path, [], [introspection_files(settings(tmp_path, **more))], **more) as (
        _,
        con,
        _root,
    ):
        c = await con()
        sid = await new_session(c)
        text = await c.get(f"{sid}/env")
    assert_no_secret(text)
    lines = text.splitlines()
    assert lines == sorted(lines)
    env = dict(line.split("=", 1) for line in lines)
    assert set(env) == set(sandbox_env(Path.home(), passthrough=PASSTHROUGH))
    assert env["GH_TOKEN"] == "***"
    assert env["PASSED_PLAIN"] == "plain value"
    assert env["PASSED_URL"] == "https://user:[redacted:OPENAI_API_KEY]@example.com/"
    assert env["TMPDIR"] == "/tmp"
    assert "OPENAI_API_KEY" not in env
    assert "NOT_PASSED" not in env


async def test_env_of_a_full_access_session_is_the_daemons_masked(
    tmp_path: Path, environ: Redactor
) -> None:
    more = changes(environ, full_access_granted_by="the test")
    async with served(tmp_path, [], [introspection_files(settings(tmp_path, **more))], **more) as (
        _,
        con,
        _root,
    ):
        c = await con()
        sid = await new_session(c, b"sandbox=full-access")
        text = await c.get(f"{sid}/env")
    assert_no_secret(text)
    env = dict(line.split("=", 1) for line in text.splitlines())
    assert set(env) == set(os.environ)  # it inherits everything
    assert env["OPENAI_API_KEY"] == "***"
    assert env["NOT_PASSED"] == "[redacted:NOT_PASSED]"
    assert env["PASSED_PLAIN"] == "plain value"
