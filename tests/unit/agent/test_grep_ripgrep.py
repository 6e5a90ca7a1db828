"""grep with ripgrep as its prefilter: the same answers as the pure search, on a tree that has
every kind of file the walk refuses (symlinks out and in, credentials, `.git`, ignored files)
and the files where rg and Python read bytes differently (a NUL after the binary probe, a
UTF-16 byte-order mark, invalid UTF-8); a ripgrep that lists too much changes nothing; without
rg, or when it fails, the pure search answers. Also the shortcuts both paths use: the literal a
pattern needs, and the .gitignore check that skips patterns that cannot match."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pathspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from anvild.agent.tools import ToolContext, ToolRegistry
from anvild.agent.tools.search import Grep, _AnyPattern, required_bytes
from anvild.llm.types import ToolCall

RG = shutil.which("rg")
needs_rg = pytest.mark.skipif(RG is None, reason="ripgrep is not installed (make setup)")
NEEDLE = "needle_x"


def write(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    write(outside, {"secret.txt": f"{NEEDLE} outside\n", "dir/in.txt": f"{NEEDLE} in dir\n"})
    root = tmp_path / "top"
    write(
        root,
        {
            # A file cannot be taken back from an ignored directory (git's rule).
            "ws/.gitignore": "build/\n!build/keep.py\n*.log\n!keep.log\ngenerated/\n",
            "ws/build/keep.py": f"{NEEDLE} kept from an ignored directory\n",
            "ws/src/a.py": f"import os\nx = {NEEDLE}()\n",
            "ws/src/b.txt": f"one {NEEDLE}\ntwo\nthree {NEEDLE} again\n",
            "ws/.github/ci.yml": f"run: {NEEDLE}\n",
            "ws/build/out.py": f"{NEEDLE} built\n",
            "ws/generated/g.py": f"{NEEDLE} generated\n",
            "ws/debug.log": f"{NEEDLE} logged\n",
            "ws/keep.log": f"{NEEDLE} kept\n",
            "ws/sub/.gitignore": "local.txt\n",
            "ws/sub/local.txt": f"{NEEDLE} local\n",
            "ws/sub/other.txt": f"{NEEDLE} other\n",
            "ws/.env": f"KEY={NEEDLE}\n",
            "ws/.env.local": f"KEY={NEEDLE}\n",
            "ws/.ssh/id_rsa": f"{NEEDLE}\n",
            "ws/.aws/notes.txt": f"{NEEDLE}\n",  # an ordinary name in a credential directory
            "ws/.env.d/x.txt": f"{NEEDLE}\n",
            "ws/id_ed25519": f"{NEEDLE}\n",
            "ws/.git/config": f"[core] {NEEDLE}\n",
            "ws/vendor/lib/.git": f"gitdir: {NEEDLE}\n",
            "ws/late_nul.txt": b"x" * 9000 + b"\x00" + NEEDLE.encode(),
            "ws/early_nul.bin": b"\x00" + NEEDLE.encode(),
            "ws/bom.txt": b"\xff\xfe" + NEEDLE.encode() + b"\n",
            "ws/latin1.txt": b"caf\xe9 " + NEEDLE.encode() + b"\n",
            "ws/na\xefve.txt": f"{NEEDLE} named\n",
        },
    )
    (root / "ws/link_out.txt").symlink_to(outside / "secret.txt")
    (root / "ws/dir_out").symlink_to(outside / "dir")
    (root / "ws/alias.py").symlink_to(root / "ws/src/a.py")
    (root / "ws/src/link_dir").symlink_to(root / "ws/src")
    return (root / "ws").resolve()


async def grep(ws: Path, ripgrep: str | None, **args: Any) -> str:
    ctx = ToolContext(cwd=ws)
    registry = ToolRegistry([Grep(ripgrep=ripgrep)])
    result = await registry.dispatch(ToolCall("c", "grep", args), ctx)
    assert not result.is_error, result.content
    return result.content


@needs_rg
async def test_the_rg_path_lists_what_the_walk_allows_and_nothing_else(
    ws: Path, tmp_path: Path
) -> None:
    ran = tmp_path / "ran"
    spy = fake_rg(tmp_path, f'echo ran >> {ran}; exec {RG} "$@"')  # the real rg, counted
    found = set((await grep(ws, spy, pattern=NEEDLE)).split("\n"))
    assert ran.read_text() == "ran\n"  # the answer came through ripgrep, not the fallback
    assert found == {
        "src/a.py",
        "src/b.txt",
        ".github/ci.yml",
        "keep.log",
        "sub/other.txt",
        "late_nul.txt",  # a NUL after the 8 KiB probe: text, as the pure search reads it
        "bom.txt",  # raw bytes: rg would transcode a UTF-16 mark and miss it
        "latin1.txt",
        "na\xefve.txt",
    }
    assert found == set((await grep(ws, None, pattern=NEEDLE)).split("\n"))


ARGS: list[dict[str, Any]] = [
    {"pattern": NEEDLE},
    {"pattern": NEEDLE, "mode": "content"},
    {"pattern": r"needle_\w\b", "mode": "content"},
    {"pattern": r"ne+dle_x", "glob": "*.py"},
    {"pattern": f"^{NEEDLE}", "mode": "content"},
    {"pattern": NEEDLE, "path": "sub"},  # the workspace's .gitignore applies from above
    {"pattern": NEEDLE, "path": "build"},  # an ignored directory, named: searched
    {"pattern": NEEDLE, "path": "src", "mode": "content"},
    {"pattern": NEEDLE, "path": "sub/local.txt"},  # one file, named: searched though ignored
    {"pattern": "NEEDLE_X", "case_insensitive": True},  # no literal: the pure search
    {"pattern": "absent_literal_zz"},
    {"pattern": "café", "mode": "content"},
]


@needs_rg
@pytest.mark.parametrize("args", ARGS, ids=[str(sorted(a.items())) for a in ARGS])
async def test_the_rg_path_answers_as_the_pure_search(ws: Path, args: dict[str, Any]) -> None:
    assert await grep(ws, RG, **args) == await grep(ws, None, **args)


def fake_rg(tmp_path: Path, body: str) -> str:
    script = tmp_path / "fake-rg"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(script)


async def test_a_ripgrep_that_lists_every_file_reveals_nothing_the_walk_refuses(
    ws: Path, tmp_path: Path
) -> None:
    # Everything under the top, symlinks, credentials, .git and ignored files included, and
    # paths through the symlinked directories.
    through = r"printf 'src/link_dir/a.py\0./dir_out/in.txt\0'"
    everything = fake_rg(tmp_path, rf"find . \( -type f -o -type l \) -print0; {through}")
    for args in ARGS:
        assert await grep(ws, everything, **args) == await grep(ws, None, **args), args


async def test_a_failing_or_missing_ripgrep_leaves_the_pure_search(
    ws: Path, tmp_path: Path
) -> None:
    failing = fake_rg(tmp_path, "printf 'src/a.py\\0'; exit 2")
    expected = await grep(ws, None, pattern=NEEDLE)
    assert await grep(ws, failing, pattern=NEEDLE) == expected
    assert await grep(ws, str(tmp_path / "no-such-rg"), pattern=NEEDLE) == expected
    broken = tmp_path / "broken-rg"
    broken.write_bytes(b"\x7fELF not really")
    broken.chmod(0o755)
    assert await grep(ws, str(broken), pattern=NEEDLE) == expected


@needs_rg
async def test_a_literal_no_command_line_can_carry_leaves_the_pure_search(ws: Path) -> None:
    write(ws, {"nul.txt": b"x" * 9000 + b"\x00a\x00b\n"})  # text: the NUL is past the probe
    args = {"pattern": "\\x00a\\x00b"}
    assert required_bytes(re.compile(args["pattern"])) == b"\x00a\x00b"
    assert await grep(ws, RG, **args) == await grep(ws, None, **args) == "nul.txt"


def test_required_bytes() -> None:
    cases = {
        NEEDLE: NEEDLE.encode(),
        r"def \w+\(": b"def ",
        r"foo.*barbaz": b"barbaz",
        r"x(abc)yz": b"yz",
        "ab+c": b"a",
        "abc|abd": b"ab",  # the parser factors out a common prefix: still needed
        "naïve": "naïve".encode(),
        "a|bcd": None,
        r"\d+": None,
        "(?i)abc": None,
        "\ufffd": None,  # a replacement character may stand for invalid bytes
    }
    for pattern, needed in cases.items():
        assert required_bytes(re.compile(pattern, re.MULTILINE)) == needed, pattern
    assert required_bytes(re.compile("abc", re.IGNORECASE)) is None


PARTS = st.sampled_from(["a", "b", "build", "x.log", "keep.log", "d0001", ".env", "src"])
LINES = st.sampled_from(
    ["build/", "*.log", "!keep.log", "/a", "a/**/b", "d000?/", "[ab]", "src/*", "**/x.log", "#c"]
)


@given(st.lists(LINES, max_size=6), st.lists(PARTS, min_size=1, max_size=4), st.booleans())
def test_a_gitignore_skipped_by_the_shortcut_would_decide_nothing(
    lines: list[str], parts: list[str], is_dir: bool
) -> None:
    spec = pathspec.GitIgnoreSpec.from_lines(lines)
    path = "/".join(parts) + ("/" if is_dir else "")
    if not _AnyPattern(spec).may_match(path):
        assert spec.check_file(path).include is None, (lines, path)


async def test_ripgrep_is_spared_the_directories_the_walk_prunes(ws: Path, tmp_path: Path) -> None:
    argv = tmp_path / "argv"
    recording = fake_rg(tmp_path, f'printf "%s\\n" "$@" > {argv}; exit 1')
    assert await grep(ws, recording, pattern=NEEDLE) == f"No matches for {NEEDLE!r} in .."
    args = argv.read_text().splitlines()
    excluded = {a.removeprefix("--glob=!/") for a in args if a.startswith("--glob=!/")}
    assert excluded == {"build", "generated", ".git"}
    assert "--no-ignore" in args
    assert args[-3:] == ["--", NEEDLE, "."]
