"""anvild.session: the session supervisor (DESIGN sections 4, 5, 7 and 8).

    manager.py   SessionManager: create, look up, kill, restore   session.py  Session: one agent
    output.py    the `log`/`events` streams and `out`    approvals.py  approvals and result gates
    recorder.py  the journal writes    state.py  the lifecycle    prompt.py  system prompt layers

Imports the agent, llm, sandbox, store and config; never ninep, fs, the tree or the daemon (a test
checks): the tree observes sessions through `SessionManager` and `Session`. Every refusal is a
`SessionError` whose `str()` is the 9P error string. The per-file API the tree uses (agent/ctl,
in, out, wait, approval, ...) is kept in docs/decisions.md, "Module notes" (anvild.session).

    manager = SessionManager(SessionStore(data_dir / "sessions"), registry.resolve, settings=...)
    await nursery.start(manager.run)   # restores every session, then serves; cancel = shutdown
"""

from anvild.session.errors import (
    IllegalTransition,
    InvalidSessionRequest,
    NameTaken,
    RecordWriteFailed,
    SessionError,
    SessionNotFound,
    SessionRefused,
)
from anvild.session.manager import NewSession, SessionManager, chain_tools, default_tools
from anvild.session.session import Session
from anvild.session.settings import SessionSettings, ToolSetup
from anvild.session.state import TRANSITIONS, SessionStatus
from anvild.session.stream import BroadcastLimits, LineBroadcast, LineReader

__all__ = [
    "TRANSITIONS",
    "BroadcastLimits",
    "IllegalTransition",
    "InvalidSessionRequest",
    "LineBroadcast",
    "LineReader",
    "NameTaken",
    "NewSession",
    "RecordWriteFailed",
    "Session",
    "SessionError",
    "SessionManager",
    "SessionNotFound",
    "SessionRefused",
    "SessionSettings",
    "SessionStatus",
    "ToolSetup",
    "chain_tools",
    "default_tools",
]
