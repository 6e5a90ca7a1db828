"""The layered system prompt of a session (DESIGN section 5).

Layers, in order, under clear headers: BASE_INSTRUCTIONS; the AGENTS.md chain (user config dir,
then git root down to cwd, each capped at MAX_INSTRUCTION_BYTES with a note); the role's text;
the list of skills (names and descriptions, `anvild.skills.SkillSet.prompt_block`); the per-turn
extra context (config `instructions`, convoy context); the session's `context` file.
`PromptLayers` is frozen and `render` pure, so the prompt is byte-identical across turns
(provider prompt caches depend on it). Files are read when the session starts; a `context`
write makes new layers (`ContextFileChanged`) used from the next turn.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

import attrs

MAX_INSTRUCTION_BYTES: Final = 20 * 1024
INSTRUCTION_FILE: Final = "AGENTS.md"

BASE_INSTRUCTIONS: Final = """\
You are a coding agent run by anvild, a local daemon. Each session is published as plain files \
over 9P: a person, a script or another agent writes your prompt to the session's `in` file and \
reads your final answer from `out`. Your answer may be read by a program, so keep it plain and \
put the result where a reader expects it (usually at the end).

Tools:
- read_file, glob and grep to look at the workspace; edit_file and write_file to change it;
  bash to run commands; todo_write to keep a task list for work with several steps.
- Paths are relative to the session's working directory unless absolute.
- Read a file before you edit it. Prefer small, targeted edits over rewriting whole files.
- Tool results can be long: ask for what you need (grep for a name, read a range of lines).

Limits, enforced outside of you:
- Commands run in a sandbox: a private /tmp, the home directory hidden, the network off unless
  the user enabled it, and writes only where your role allows. A refusal from the sandbox or the
  permission policy is final: do not look for a way around it; say what you needed and why.
- Some calls wait for a person's approval. A rejection comes back as the call's result, often
  with a reason: follow it.
- .git/hooks, .git/config, .anvil and credential files are read-only or hidden for you.
- A turn has a step limit and a deadline; finish what you can and say what is left.

Honesty:
- Say what you did and what you did not do. Never claim a check passed unless you ran it and saw
  it pass; quote the command and its result.
- When you are unsure, say so, and say what would settle it. Do not guess at file contents,
  APIs or command output: look.
- If a tool call's outcome is reported as unknown (the daemon stopped while it ran), check the
  current state before doing it again.

When you are done, end with a short answer: what changed, how it was checked, what remains.
"""


@attrs.frozen
class InstructionFile:
    """One AGENTS.md as it enters the prompt: its path, its (possibly capped) text."""

    path: Path
    text: str
    truncated: bool = False


@attrs.frozen
class PromptLayers:
    """Everything the system prompt is made of; `render()` is the prompt."""

    base: str = BASE_INSTRUCTIONS
    instructions: tuple[InstructionFile, ...] = ()
    role: str = ""
    role_text: str = ""
    skills: str = ""
    extra: str = ""
    context: str = ""

    def render(self) -> str:
        parts = [self.base.strip()]
        if self.instructions:
            section = ["# Instructions (AGENTS.md, most general first)"]
            for item in self.instructions:
                section.append(f"## {item.path}\n\n{item.text.strip()}")
                if item.truncated:
                    section.append(
                        f"[{item.path} is longer than {MAX_INSTRUCTION_BYTES // 1024} KB: only its "
                        "beginning is shown. Read the file for the rest.]"
                    )
            parts.append("\n\n".join(section))
        if self.role_text.strip():
            parts.append(f"# Your role: {self.role}\n\n{self.role_text.strip()}")
        if self.skills.strip():
            parts.append(self.skills.strip())
        if self.extra.strip():
            parts.append(self.extra.strip())
        if self.context.strip():
            parts.append(f"# Session context\n\n{self.context.strip()}")
        return "\n\n".join(parts) + "\n"


def _up(directory: str) -> list[str]:
    """`directory` and its parents, nearest first (plain strings: this runs at every `new`)."""
    chain = [directory]
    while (parent := os.path.dirname(chain[-1])) != chain[-1]:
        chain.append(parent)
    return chain


def _git_root(chain: list[str]) -> str | None:
    return next((d for d in chain if os.path.exists(os.path.join(d, ".git"))), None)


def git_root(cwd: Path) -> Path | None:
    """The nearest directory at or above `cwd` holding `.git` (a directory or a worktree file)."""
    root = _git_root(_up(str(cwd)))
    return None if root is None else Path(root)


def read_instruction(path: Path | str) -> InstructionFile | None:
    """`path` capped at MAX_INSTRUCTION_BYTES (cut at a character boundary); None if absent or
    unreadable (a broken AGENTS.md must not stop a session)."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_INSTRUCTION_BYTES + 1)
    except OSError:
        return None
    truncated = len(data) > MAX_INSTRUCTION_BYTES
    text = data[:MAX_INSTRUCTION_BYTES].decode("utf-8", errors="ignore" if truncated else "replace")
    if not text.strip():
        return None
    return InstructionFile(Path(path), text, truncated)


def discover_instructions(cwd: Path, user_config_dir: Path | None) -> tuple[InstructionFile, ...]:
    """The AGENTS.md chain for `cwd`: the user config dir's, then from the git root (or `cwd`
    itself outside a repository) down to `cwd`."""
    chain = _up(os.path.realpath(cwd))
    root = _git_root(chain) or chain[0]
    directories = reversed(chain[: chain.index(root) + 1])
    paths = [] if user_config_dir is None else [str(user_config_dir / INSTRUCTION_FILE)]
    paths += [os.path.join(directory, INSTRUCTION_FILE) for directory in directories]
    found = (read_instruction(path) for path in dict.fromkeys(paths))
    return tuple(item for item in found if item is not None)


__all__ = [
    "BASE_INSTRUCTIONS",
    "MAX_INSTRUCTION_BYTES",
    "InstructionFile",
    "PromptLayers",
    "discover_instructions",
    "git_root",
    "read_instruction",
]
