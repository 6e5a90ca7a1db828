"""The man page anvild(4) (docs/anvild.4) is what tools/tree2man.py makes of docs/TREE.md, renders
without a warning, and names every entry of TREE.md; the converter refuses Markdown it does not
know, with the line."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def tree2man() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tree2man", REPO / "tools" / "tree2man.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_page_is_what_the_generator_makes_of_tree_md() -> None:
    made = tree2man().convert((REPO / "docs" / "TREE.md").read_text(encoding="utf-8"))
    committed = (REPO / "docs" / "anvild.4").read_text(encoding="utf-8")
    assert committed == made, "docs/anvild.4 is stale: run python tools/tree2man.py"


def test_the_page_renders_without_warnings_and_names_every_entry() -> None:
    groff = shutil.which("groff")
    if groff is None:
        pytest.skip("groff is not installed (Debian: groff-base)")
    page = REPO / "docs" / "anvild.4"
    checked = subprocess.run(
        [groff, "-man", "-Tutf8", "-ww", "-z", str(page)], capture_output=True, text=True
    )
    assert (checked.returncode, checked.stderr) == (0, "")
    man = shutil.which("man")
    command = [man, "-l", str(page)] if man else [groff, "-man", "-Tutf8", str(page)]
    env = {**os.environ, "MANWIDTH": "100", "MANPAGER": "cat", "PAGER": "cat"}
    shown = subprocess.run(command, capture_output=True, text=True, env=env, check=True).stdout
    shown = re.sub(r".\x08", "", shown)  # overstrikes, if the formatter kept them
    assert "anvild - the files anvild serves" in shown
    entries = re.findall(
        r"^### `([^`]+)` (d?[0-7]{3})$", (REPO / "docs" / "TREE.md").read_text(), re.M
    )
    assert len(entries) > 50
    lines = {line.strip() for line in shown.splitlines()}
    missing = [f"{path} {mode}" for path, mode in entries if f"{path} {mode}" not in lines]
    assert missing == []
    assert "rm -r /mnt/agent/dev                  # killed (rmdir /mnt/agent/dev too)" in lines


def test_the_wheel_installs_the_page_where_man_finds_it() -> None:
    hatch = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["hatch"]["build"]
    shared = hatch["targets"]["wheel"]["shared-data"]
    assert shared == {"docs/anvild.4": "share/man/man4/anvild.4"}
    sdist = hatch["targets"]["sdist"]["include"]
    assert {"/docs", "/tools"} <= set(sdist)  # the wheel is built from the sdist


@pytest.mark.parametrize(
    ("markdown", "said"),
    [
        ("# Title\n", "line 1: the title is"),
        ("# ANVILD(4): x\n\n#### deep\n", "line 3: only ## and ### headings"),
        ("# ANVILD(4): x\n\n> quoted\n", "line 3: not a construct of TREE.md"),
        ("# ANVILD(4): x\n\n| a | b |\n| c | d |\n| e | f |\n", "line 3: a table is a header"),
        ("# ANVILD(4): x\n\n| a | b |\n|---|---|\n| c |\n", "line 5: a table row has two"),
    ],
)
def test_markdown_it_does_not_know_is_refused_with_the_line(markdown: str, said: str) -> None:
    module = tree2man()
    with pytest.raises(module.MarkdownError, match=re.escape(said)):
        module.convert(markdown)


def test_inline_markdown_and_roff_control_characters() -> None:
    page = tree2man().convert(
        "# ANVILD(4): x\n\nSee `a-b 'c'` and **bold** *it* [link](http://x).\n.dot\n\n"
        "    code -x \\n\n    .start\n"
    )
    assert (
        "See \\fB\\%a\\-b \\%\\(aqc\\(aq\\fR and \\fBbold\\fR \\fIit\\fR link.\n\\&.dot\n" in page
    )
    assert ".EX\ncode \\-x \\en\n\\&.start\n.EE\n" in page
