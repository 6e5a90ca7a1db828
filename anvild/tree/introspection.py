"""Three read-only files that show what a session's model and tools are given, added to every
session directory as a `SessionExtension` (`anvild.daemon.wiring`). Each is a snapshot taken at
the open, and nothing in them is a secret: every text goes through the daemon's redactor
(`SessionSettings.redact`, `anvild.sandbox.secrets.Redactor`).

    9p read agent/ID/systemprompt   the system prompt the next request sends
    9p read agent/ID/history        the conversation as that request sends it, JSONL
    9p read agent/ID/env            NAME=VALUE of the environment the session's commands get

`systemprompt` is `Session.system_prompt`: every layer in order (base instructions, the AGENTS.md
chain, the role's text, the config's instructions and bead context, the `context` file;
`anvild.session.prompt`), exactly as rendered for the next turn, secrets masked as
`[redacted:NAME]`.

`history` is one JSON object a line. A message line is the canonical message as the llm layer's
converter writes it (`anvild.llm.types.converter`: `{"role": "user", "content": [{"type":
"text", "text": ...}, ...]}`), every string redacted. It is the transcript as the next request
would send it if it were sent now (`ContextWindow.for_request` over the agent's transcript): the
old tool results the window clears are their one-line stubs (`[Cleared to save context: ...]`,
`anvild.agent.context.clearing`), not the full results the records keep. After a compaction
the transcript starts with the summary message (its first text begins `[Compacted history:`,
`anvild.agent.context.compaction.SUMMARY_MARK`), and the line before it is a marker, not a
message (it has `marker` where a message has `role`):

    {"marker": "compacted", "at": "2026-12-02T07:30:00Z", "trigger": "auto", "dropped": 12,
     "model": "fake-model"}

(on one line; `at`, `trigger`, `dropped` and `model` are the last compaction's, as in
`compactions`, and absent when the session's records hold none: a session started `from=` a
compacted conversation). A compaction the next request would trigger has not happened yet and is
not shown. A turn adds its messages: the prompt, then each step's assistant message and its tool
results.

`env` is one `NAME=VALUE` line per variable, sorted by name: exactly the environment a command of
the session (the bash tool) starts with, read from the daemon's environment at the open, as
`anvild.sandbox.bwrap.sandbox_env` builds it for a sandboxed session (the allowlist, the
`env_passthrough` names, HOME, TMPDIR and git's safe.directory) and the daemon's whole
environment for `sandbox=full-access` (which inherits it). A variable whose name looks like a
credential (`anvild.sandbox.secrets.is_secret_name`) shows `***`; every other value goes through
the redactor; a newline in a value shows as `\\n`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from anvild.agent.context.compaction import is_compacted
from anvild.fs import SnapshotFile
from anvild.llm.types import Message, converter
from anvild.ninep.backend import Node
from anvild.sandbox import FullAccess
from anvild.sandbox.bwrap import sandbox_env
from anvild.sandbox.secrets import is_secret_name
from anvild.session import Session, SessionSettings
from anvild.tree.sessions import SessionExtension

SYSTEMPROMPT: Final = "systemprompt"
HISTORY: Final = "history"
ENV: Final = "env"
NAMES: Final = (SYSTEMPROMPT, HISTORY, ENV)
SECRET: Final = "***"
"""The value `env` shows for a variable whose name looks like a credential."""

Redact = Callable[[str], str]


def _identity(text: str) -> str:
    return text


def redact_json(value: Any, redact: Redact) -> Any:
    """A copy of a JSON value with every string (keys included) redacted."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {redact_json(k, redact): redact_json(v, redact) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_json(item, redact) for item in value]
    return value


def system_prompt_text(session: Session, redact: Redact) -> str:
    """The `systemprompt` file."""
    return redact(session.system_prompt)


def request_messages(session: Session) -> tuple[Message, ...]:
    """The transcript as the next request would send it now: cleared results stubbed."""
    agent = session.agent
    window = agent.window
    if window is None:
        return agent.messages
    specs = agent.tools.specs(compact=agent.config.compact_tools)
    return window.for_request(session.system_prompt, specs, agent.messages).messages


def compacted_marker(session: Session) -> dict[str, Any]:
    """The marker line before a compacted transcript's summary."""
    marker: dict[str, Any] = {"marker": "compacted"}
    compactions = session.record.compactions
    if compactions:
        last = compactions[-1]
        marker["at"] = last.at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        marker["trigger"] = last.trigger
        marker["dropped"] = last.dropped
        marker["model"] = last.model
    return marker


def history_text(session: Session, redact: Redact) -> str:
    """The `history` file."""
    messages = request_messages(session)
    values: list[Any] = [compacted_marker(session)] if is_compacted(messages) else []
    values += [converter.unstructure(message, Message) for message in messages]
    return "".join(
        json.dumps(redact_json(value, redact), ensure_ascii=False) + "\n" for value in values
    )


def tool_env(session: Session, settings: SessionSettings) -> dict[str, str]:
    """The environment a command of `session` starts with (see the module docstring)."""
    if isinstance(session.agent.context.sandbox, FullAccess):
        return dict(os.environ)
    home = Path(os.path.expanduser("~"))
    return sandbox_env(home, passthrough=settings.sandbox_settings.passthrough)


def env_text(session: Session, settings: SessionSettings) -> str:
    """The `env` file."""
    redact = settings.redact or _identity
    lines = []
    for name, value in sorted(tool_env(session, settings).items()):
        shown = SECRET if is_secret_name(name) else redact(value).replace("\n", "\\n")
        lines.append(f"{name}={shown}\n")
    return "".join(lines)


def introspection_files(settings: SessionSettings) -> SessionExtension:
    """The extension that adds `systemprompt`, `history` and `env` to every session directory;
    `settings` are the manager's (their redactor and env passthrough)."""
    redact = settings.redact or _identity

    def files(session: Session) -> Iterable[Node]:
        return [
            SnapshotFile(SYSTEMPROMPT, lambda: system_prompt_text(session, redact)),
            SnapshotFile(HISTORY, lambda: history_text(session, redact)),
            SnapshotFile(ENV, lambda: env_text(session, settings)),
        ]

    return SessionExtension(files=files)


__all__ = [
    "ENV",
    "HISTORY",
    "NAMES",
    "SECRET",
    "SYSTEMPROMPT",
    "env_text",
    "history_text",
    "introspection_files",
    "redact_json",
    "request_messages",
    "system_prompt_text",
    "tool_env",
]
