"""glob and grep (course 10.3, 10.B) in temp directories."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import trio

from anvild.agent.tools import ToolContext, ToolRegistry
from anvild.agent.tools.search import Glob, Grep, matching_lines, translate_glob
from anvild.llm.types import ToolCall

SECRET = "sk-live-0123456789"


class Harness:
    def __init__(self, ws: Path) -> None:
        self.ws = ws
        self.ctx = ToolContext(cwd=ws)
        self.registry = ToolRegistry([Glob(), Grep()])

    async def run(self, tool: str, **args: Any) -> tuple[bool, str]:
        result = await self.registry.dispatch(ToolCall("c", tool, args), self.ctx)
        return result.is_error, result.content

    async def ok(self, tool: str, **args: Any) -> str:
        is_error, content = await self.run(tool, **args)
        assert not is_error, content
        return content


def write(root: Path, files: dict[str, str]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    ws = tmp_path / "ws"
    write(
        ws,
        {
            "src/main.py": "def main():\n    return 1\n",
            "src/util.py": "def helper():\n    pass\n",
            "src/deep/x.ts": "function main() {}\n",
            "README.md": "# main project\n",
            ".gitignore": "build/\n*.log\n!keep.log\n",
            "build/out.py": "def main(): generated\n",
            "debug.log": "main crashed\n",
            "keep.log": "main kept\n",
            "sub/.gitignore": "local.txt\n",
            "sub/local.txt": "main local\n",
            "sub/other.txt": "main other\n",
            ".git/config": "[core] main\n",
            ".git/HEAD": "ref: main\n",
            ".github/ci.yml": "run: main\n",
            ".env": f"MAIN_KEY={SECRET}\n",
            ".env.local": f"main={SECRET}\n",
            "config/.ssh/id_rsa": f"main {SECRET}\n",
            ".aws/credentials": f"main {SECRET}\n",
            "id_ed25519": f"main {SECRET}\n",
            ".netrc": f"main {SECRET}\n",
        },
    )
    (ws / "blob.bin").write_bytes(b"main\x00binary")
    write(ws, {"vendor/lib/.git": "gitdir: ../../.git/modules/lib\n"})
    return Harness(ws.resolve())


async def test_glob_respects_gitignore_git_and_credentials(h: Harness) -> None:
    out = (await h.ok("glob", pattern="**/*")).split("\n")
    assert sorted(out) == sorted(
        [
            "src/main.py",
            "src/util.py",
            "src/deep/x.ts",
            "README.md",
            ".gitignore",
            "keep.log",
            "sub/.gitignore",
            "sub/other.txt",
            ".github/ci.yml",
            "blob.bin",
        ]
    )
    assert not any(SECRET in line for line in out)


async def test_glob_patterns(h: Harness) -> None:
    assert sorted((await h.ok("glob", pattern="*.py")).split("\n")) == [
        "src/main.py",
        "src/util.py",
    ]
    assert await h.ok("glob", pattern="src/*.ts") == "No files match 'src/*.ts' in .."
    assert await h.ok("glob", pattern="src/**/*.ts") == "src/deep/x.ts"
    assert sorted((await h.ok("glob", pattern="*.{md,ts}")).split("\n")) == [
        "README.md",
        "src/deep/x.ts",
    ]
    assert sorted((await h.ok("glob", pattern="*.py", path="src")).split("\n")) == [
        "src/main.py",
        "src/util.py",
    ]
    assert await h.ok("glob", pattern="x.ts", path="src/deep") == "src/deep/x.ts"


async def test_glob_newest_first_and_capped(h: Harness) -> None:
    many = h.ws / "many"
    for i in range(205):
        path = many / f"f{i:03}.txt"
        path.parent.mkdir(exist_ok=True)
        path.write_text("")
        os.utime(path, (1000 + i, 1000 + i))
    lines = (await h.ok("glob", pattern="many/*.txt")).split("\n")
    assert lines[0] == "many/f204.txt"
    assert lines[199] == "many/f005.txt"
    assert lines[200] == (
        "[showing 200 of 205 matches, newest first; narrow the pattern or the path to see the rest]"
    )


async def test_glob_in_subdir_applies_parent_gitignore(h: Harness) -> None:
    write(h.ws, {"build/inner/a.py": "", "sub/deeper/local.txt": "", "sub/deeper/kept.txt": ""})
    out = await h.ok("glob", pattern="*", path="sub/deeper")
    assert out == "sub/deeper/kept.txt"
    assert "No files match" in await h.ok("glob", pattern="*.py", path="build")


async def test_grep_content_mode(h: Harness) -> None:
    out = await h.ok("grep", pattern="main", mode="content")
    lines = sorted(out.split("\n"))
    assert lines == sorted(
        [
            "src/main.py:1:def main():",
            "src/deep/x.ts:1:function main() {}",
            "README.md:1:# main project",
            "keep.log:1:main kept",
            "sub/other.txt:1:main other",
            ".github/ci.yml:1:run: main",
        ]
    )
    assert SECRET not in out


async def test_grep_never_shows_credentials_but_finds_other_dotfiles(h: Harness) -> None:
    # The denied files are never shown, whatever the pattern ...
    for mode in ("files", "content"):
        out = await h.ok("grep", pattern=SECRET, mode=mode)
        assert out == f"No matches for {SECRET!r} in .."
    is_error, out = await h.run("grep", pattern="MAIN_KEY", path=".env")
    assert is_error
    assert SECRET not in out
    assert "credential" in out
    is_error, out = await h.run("grep", pattern="main", path="config/.ssh")
    assert is_error
    assert SECRET not in out
    # ... while a line in a dotfile that is not denied is found.
    assert await h.ok("grep", pattern="run:", mode="content") == ".github/ci.yml:1:run: main"
    assert await h.ok("grep", pattern="build", mode="content") == ".gitignore:1:build/"


async def test_grep_files_mode_glob_case_and_single_file(h: Harness) -> None:
    assert sorted((await h.ok("grep", pattern="def ")).split("\n")) == [
        "src/main.py",
        "src/util.py",
    ]
    assert await h.ok("grep", pattern="main", glob="*.ts") == "src/deep/x.ts"
    assert await h.ok("grep", pattern="MAIN PROJECT", case_insensitive=True) == "README.md"
    assert "No matches" in await h.ok("grep", pattern="MAIN PROJECT")
    out = await h.ok("grep", pattern="return", path="src/main.py", mode="content")
    assert out == "src/main.py:2:    return 1"
    # An ignored file named explicitly is searched.
    assert await h.ok("grep", pattern="crashed", path="debug.log") == "debug.log"


async def test_grep_bad_regex_names_the_error(h: Harness) -> None:
    is_error, out = await h.run("grep", pattern="foo(")
    assert is_error
    assert "missing ), unterminated subpattern" in out
    is_error, out = await h.run("grep", pattern="x", mode="everything")
    assert is_error
    assert "`mode`" in out


async def test_grep_skips_binary_and_caps_lines(h: Harness) -> None:
    assert "blob.bin" not in await h.ok("grep", pattern="binary")
    write(h.ws, {"many.txt": "".join(f"hit {i}\n" for i in range(250))})
    out = (await h.ok("grep", pattern="^hit", mode="content")).split("\n")
    assert len(out) == 201
    assert out[0] == "many.txt:1:hit 0"
    assert out[199] == "many.txt:200:hit 199"
    assert out[200].startswith("[showing 200 of 250 matching lines in 1 files")


async def test_search_outside_roots_is_refused(h: Harness, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (h.ws / "out").symlink_to(tmp_path / "elsewhere")
    for tool, args in [("glob", {"pattern": "*"}), ("grep", {"pattern": "x"})]:
        is_error, out = await h.run(tool, path=str(tmp_path / "elsewhere"), **args)
        assert is_error
        assert "outside" in out
        is_error, _ = await h.run(tool, path="out", **args)
        assert is_error


async def test_cancelled_search_returns_promptly(h: Harness) -> None:
    with trio.move_on_after(0) as scope:
        await h.registry.dispatch(ToolCall("c", "grep", {"pattern": "x"}), h.ctx)
    assert scope.cancelled_caught


def test_matching_lines() -> None:
    import re

    text = "alpha\nbeta\r\ngamma\n\ndelta"
    rx = re.compile("a$", re.MULTILINE)
    # "beta\r" does not end in "a" for `$` (ripgrep without --crlf agrees).
    assert list(matching_lines(rx, text)) == [(1, "alpha"), (3, "gamma"), (5, "delta")]
    assert list(matching_lines(re.compile("^$", re.MULTILINE), "a\n\nb\n")) == [(2, "")]
    assert list(matching_lines(re.compile("a\nb"), "a\nb\n")) == []  # no match spans lines
    assert list(matching_lines(re.compile("x"), "")) == []
    assert list(matching_lines(re.compile("e"), text)) == [(2, "beta"), (5, "delta")]


def test_translate_glob() -> None:
    cases = {
        "*.py": (["a.py", "x/y/a.py"], ["a.pyc", "apy"]),
        "src/*.py": (["src/a.py"], ["src/x/a.py", "a.py"]),
        "src/**/*.py": (["src/a.py", "src/x/y/a.py"], ["lib/a.py"]),
        "test_?.py": (["test_1.py"], ["test_12.py"]),
        "[ab].txt": (["a.txt", "d/b.txt"], ["c.txt"]),
        "[!ab].txt": (["c.txt"], ["a.txt"]),
        "*.{yml,yaml}": (["ci.yml", "x/ci.yaml"], ["ci.json"]),
    }
    for pattern, (good, bad) in cases.items():
        rx = translate_glob(pattern)
        for path in good:
            assert rx.match(path), (pattern, path)
        for path in bad:
            assert not rx.match(path), (pattern, path)


def test_walk_stops_between_files_when_cancelled(tmp_path: Path) -> None:
    from anvild.agent.tools.search import SearchCancelled, walk_files
    from anvild.sandbox.files import FileAccess

    write(tmp_path, {f"d/f{i}.txt": "" for i in range(10)})
    seen: list[str] = []
    with pytest.raises(SearchCancelled):
        for _, _, rel in walk_files(
            FileAccess.workspace(tmp_path), tmp_path.resolve(), lambda: len(seen) >= 3
        ):
            seen.append(rel)
    assert seen == ["d/f0.txt", "d/f1.txt", "d/f2.txt"]
