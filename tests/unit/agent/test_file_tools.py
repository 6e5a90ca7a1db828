"""read_file, write_file, edit_file (course 10.1, 10.2, 10.B) in temp directories."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from anvild.agent.tools import ToolContext, ToolRegistry
from anvild.agent.tools.files import EditFile, ReadFile, WriteFile
from anvild.llm.types import ToolCall, ToolResult

READ_FIRST = "You must read_file before editing it."
STALE = "File changed on disk since you last read it. Read it again."


class Harness:
    def __init__(self, ws: Path) -> None:
        self.ws = ws
        self.ctx = ToolContext(cwd=ws)
        self.registry = ToolRegistry([ReadFile(), WriteFile(), EditFile()])
        self.n = 0

    async def __call__(self, tool: str, **args: Any) -> ToolResult:
        self.n += 1
        return await self.registry.dispatch(ToolCall(f"c{self.n}", tool, args), self.ctx)

    async def ok(self, tool: str, **args: Any) -> str:
        result = await self(tool, **args)
        assert not result.is_error, result.content
        return result.content

    async def err(self, tool: str, **args: Any) -> str:
        result = await self(tool, **args)
        assert result.is_error, result.content
        return result.content


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    ws = tmp_path / "ws"
    ws.mkdir()
    return Harness(ws.resolve())


async def test_read_numbers_lines(h: Harness) -> None:
    (h.ws / "a.txt").write_text("one\ntwo\n\tthree\n")
    assert await h.ok("read_file", file_path="a.txt") == "     1\tone\n     2\ttwo\n     3\t\tthree"
    assert await h.ok("read_file", file_path=str(h.ws / "a.txt"), offset=2, limit=1) == (
        "     2\ttwo\n[... 1 more lines; read again with offset=3 to continue]"
    )


async def test_read_default_limit_and_footer(h: Harness) -> None:
    (h.ws / "big.txt").write_text("".join(f"{i}\n" for i in range(1, 2501)))
    out = await h.ok("read_file", file_path="big.txt")
    lines = out.split("\n")
    assert lines[0] == "     1\t1"
    assert lines[1999] == "  2000\t2000"
    assert lines[2000] == "[... 500 more lines; read again with offset=2001 to continue]"
    rest = await h.ok("read_file", file_path="big.txt", offset=2001)
    assert rest.endswith("  2500\t2500")
    assert "more lines" not in rest
    assert "past the end" in await h.err("read_file", file_path="big.txt", offset=2501)


async def test_read_cuts_long_lines_refuses_binary_and_reports_missing(h: Harness) -> None:
    (h.ws / "long.txt").write_text("x" * 2500 + "\nshort\n")
    out = await h.ok("read_file", file_path="long.txt")
    first = out.split("\n")[0]
    assert first == "     1\t" + "x" * 2000 + " [... line cut: 500 more characters]"
    (h.ws / "blob.bin").write_bytes(b"abc\x00def" + b"x" * 10)
    assert "binary" in await h.err("read_file", file_path="blob.bin")
    (h.ws / "late-nul.txt").write_bytes(b"a" * 9000 + b"\x00")
    await h.ok("read_file", file_path="late-nul.txt")  # NUL after the first 8 KiB: text
    assert "does not exist" in await h.err("read_file", file_path="nope.txt")
    (h.ws / "dir").mkdir()
    assert "directory" in await h.err("read_file", file_path="dir")
    (h.ws / "empty.txt").write_text("")
    assert "empty" in await h.ok("read_file", file_path="empty.txt")
    assert "`offset`" in await h.err("read_file", file_path="a", offset=0)


async def test_read_crlf_and_invalid_utf8(h: Harness) -> None:
    (h.ws / "w.txt").write_bytes(b"a\r\nb\r\n")
    assert await h.ok("read_file", file_path="w.txt") == "     1\ta\n     2\tb"
    (h.ws / "latin.txt").write_bytes(b"caf\xe9\n")
    assert await h.ok("read_file", file_path="latin.txt") == "     1\tcaf\ufffd"


async def test_edit_requires_read_and_freshness(h: Harness) -> None:
    path = h.ws / "f.py"
    path.write_text("x = 1\n")
    assert await h.err("edit_file", file_path="f.py", old_string="1", new_string="2") == READ_FIRST
    await h.ok("read_file", file_path="f.py")
    path.write_text("x = 10\n")  # the user edits after the agent read
    assert await h.err("edit_file", file_path="f.py", old_string="1", new_string="2") == STALE
    assert path.read_text() == "x = 10\n"
    await h.ok("read_file", file_path="f.py")
    await h.ok("edit_file", file_path="f.py", old_string="10", new_string="20")
    assert path.read_text() == "x = 20\n"


async def test_two_agent_edits_work_an_intervening_user_edit_fails(h: Harness) -> None:
    path = h.ws / "f.py"
    path.write_text("a = 1\nb = 2\n")
    await h.ok("read_file", file_path="f.py")
    await h.ok("edit_file", file_path="f.py", old_string="a = 1", new_string="a = 3")
    await h.ok("edit_file", file_path="f.py", old_string="b = 2", new_string="b = 4")
    assert path.read_text() == "a = 3\nb = 4\n"
    path.write_text("a = 3\nb = 4\nc = 5\n")
    assert await h.err("edit_file", file_path="f.py", old_string="a = 3", new_string="a = 0") == (
        STALE
    )
    assert path.read_text() == "a = 3\nb = 4\nc = 5\n"


async def test_same_content_rewritten_by_user_is_still_fresh(h: Harness) -> None:
    # Freshness is by content, not mtime: touching the file does not invalidate the read.
    path = h.ws / "f.txt"
    path.write_text("same\n")
    await h.ok("read_file", file_path="f.txt")
    os.utime(path, (1, 1))
    await h.ok("edit_file", file_path="f.txt", old_string="same", new_string="new")


async def test_edit_match_rules(h: Harness) -> None:
    path = h.ws / "m.py"
    path.write_text("foo()\nfoo()\nfoo()\n    indented = 1\n")
    await h.ok("read_file", file_path="m.py")
    none = await h.err("edit_file", file_path="m.py", old_string="bar()", new_string="baz()")
    assert "whitespace and indentation" in none
    assert "read_file" in none
    wrong_indent = await h.err(
        "edit_file", file_path="m.py", old_string="\tindented = 1", new_string="x"
    )
    assert "whitespace and indentation" in wrong_indent
    many = await h.err("edit_file", file_path="m.py", old_string="foo()", new_string="bar()")
    assert "3 matches" in many
    assert "replace_all" in many
    assert "surrounding lines" in many
    out = await h.ok(
        "edit_file", file_path="m.py", old_string="foo()", new_string="bar()", replace_all=True
    )
    assert "replaced 3 occurrences" in out
    assert path.read_text() == "bar()\nbar()\nbar()\n    indented = 1\n"
    same = await h.err("edit_file", file_path="m.py", old_string="bar()", new_string="bar()")
    assert "same" in same
    empty = await h.err("edit_file", file_path="m.py", old_string="", new_string="x")
    assert "must not be empty" in empty
    assert "write_file" in empty
    assert "does not exist" in await h.err(
        "edit_file", file_path="missing.py", old_string="a", new_string="b"
    )


async def test_edit_preserves_crlf(h: Harness) -> None:
    path = h.ws / "win.txt"
    path.write_bytes(b"line one\r\nline two\r\nline three\r\n")
    await h.ok("read_file", file_path="win.txt")
    await h.ok(
        "edit_file",
        file_path="win.txt",
        old_string="line one\nline two",
        new_string="first\nsecond\nextra",
    )
    assert path.read_bytes() == b"first\r\nsecond\r\nextra\r\nline three\r\n"


async def test_edit_returns_numbered_context(h: Harness) -> None:
    path = h.ws / "ctx.txt"
    path.write_text("".join(f"line {i}\n" for i in range(1, 21)))
    await h.ok("read_file", file_path="ctx.txt")
    out = await h.ok("edit_file", file_path="ctx.txt", old_string="line 10\n", new_string="TEN\n")
    header, *snippet = out.split("\n")
    assert header == "Edited ctx.txt: replaced 1 occurrence."
    assert snippet[0] == "     6\tline 6"
    assert "    10\tTEN" in snippet
    assert snippet[-1] == "    14\tline 14"


async def test_write_creates_and_overwrites(h: Harness) -> None:
    out = await h.ok("write_file", file_path="new/dir/file.txt", content="hello\nworld\n")
    assert out == "Created new/dir/file.txt (2 lines, 12 bytes)."
    assert (h.ws / "new/dir/file.txt").read_text() == "hello\nworld\n"
    # The agent wrote it, so it may overwrite it without a read.
    await h.ok("write_file", file_path="new/dir/file.txt", content="again\n")
    existing = h.ws / "existing.sh"
    existing.write_text("#!/bin/sh\n")
    existing.chmod(0o750)
    assert await h.err("write_file", file_path="existing.sh", content="x") == READ_FIRST
    await h.ok("read_file", file_path="existing.sh")
    existing.write_text("#!/bin/sh\necho user\n")
    assert await h.err("write_file", file_path="existing.sh", content="x") == STALE
    await h.ok("read_file", file_path="existing.sh")
    assert "Wrote existing.sh" in await h.ok("write_file", file_path="existing.sh", content="y")
    assert existing.read_text() == "y"
    assert stat.S_IMODE(existing.stat().st_mode) == 0o750
    assert sorted(p.name for p in h.ws.iterdir()) == ["existing.sh", "new"]


async def test_escapes_are_refused_with_must_work_twins(h: Harness, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target.txt").write_text("original")
    # A symlink from inside to outside cannot be written through ...
    (h.ws / "evil.txt").symlink_to(outside / "target.txt")
    await h.err("write_file", file_path="evil.txt", content="pwned")
    await h.err("read_file", file_path="evil.txt")
    assert (outside / "target.txt").read_text() == "original"
    # ... while a symlink from inside to inside is writable.
    (h.ws / "real.txt").write_text("v1\n")
    (h.ws / "alias.txt").symlink_to("real.txt")
    await h.ok("read_file", file_path="alias.txt")
    await h.ok("edit_file", file_path="alias.txt", old_string="v1", new_string="v2")
    assert (h.ws / "real.txt").read_text() == "v2\n"

    # A new file under a symlinked parent pointing outside is refused ...
    (h.ws / "outdir").symlink_to(outside)
    await h.err("write_file", file_path="outdir/new.txt", content="x")
    assert sorted(p.name for p in outside.iterdir()) == ["target.txt"]
    # ... while a new file in a real subdirectory is created.
    (h.ws / "sub").mkdir()
    await h.ok("write_file", file_path="sub/new.txt", content="x")
    assert (h.ws / "sub/new.txt").read_text() == "x"

    # .git/config is protected; a normal config file is not.
    (h.ws / ".git").mkdir()
    (h.ws / ".git/config").write_text("[core]\n")
    await h.ok("read_file", file_path=".git/config")  # readable, just not writable
    assert "protected" in await h.err("write_file", file_path=".git/config", content="x")
    assert "protected" in await h.err(
        "edit_file", file_path=".git/config", old_string="[core]", new_string="[alias]"
    )
    assert "protected" in await h.err("write_file", file_path=".anvil/hooks.toml", content="x")
    assert (h.ws / ".git/config").read_text() == "[core]\n"
    await h.ok("write_file", file_path="config", content="x")

    # A hard-linked file is refused; a file with one link is fine.
    os.link(outside / "target.txt", h.ws / "hard.txt")
    await h.ok("read_file", file_path="hard.txt")
    assert "hard links" in await h.err("write_file", file_path="hard.txt", content="pwned")
    assert (outside / "target.txt").read_text() == "original"
    await h.ok("read_file", file_path="real.txt")
    await h.ok("write_file", file_path="real.txt", content="fine")


async def test_credentials_not_readable_dotfiles_are(h: Harness) -> None:
    (h.ws / ".env").write_text("API_KEY=sk-secret\n")
    (h.ws / ".prettierrc").write_text("{}\n")
    message = await h.err("read_file", file_path=".env")
    assert "credential" in message
    assert "sk-secret" not in message
    assert await h.ok("read_file", file_path=".prettierrc") == "     1\t{}"
    assert "outside" in await h.err("read_file", file_path="/etc/hostname")


def test_effects_and_cancellation_are_stated() -> None:
    from anvild.agent.tools.base import Cancellation, Effects

    assert ReadFile().effects({"file_path": "a"}) == Effects.read("a")
    assert ReadFile().cancellation is Cancellation.SAFE_TO_ABANDON
    write: dict[str, Any] = {"file_path": "a", "content": ""}
    assert WriteFile().effects(write) == Effects.write("a")
    assert not WriteFile().effects(write).read_only
    assert EditFile().cancellation is Cancellation.ATOMIC
