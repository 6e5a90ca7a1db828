"""Three read-only files showing what a session's model and tools are given (a `SessionExtension`).

    agent/ID/systemprompt   the system prompt the next request sends (`Session.system_prompt`)
    agent/ID/history        the transcript as the next request sends it, one JSON line a message
    agent/ID/env            NAME=VALUE, sorted: the environment the session's commands get

Each is a snapshot at open and holds no secret: every text goes through the daemon's redactor,
and a credential-looking variable shows `***`. `history` uses `ContextWindow.for_request`
(cleared results as stubs); before a compaction's summary stands one line with `marker` where a
message has `role`: `{"marker": "compacted", "at": ..., "trigger": ..., "dropped": ..., ...}`.
`env` is `sandbox_env` for a sandboxed session, the daemon's environment for full-access; a
newline in a value shows as `\\n`.
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
