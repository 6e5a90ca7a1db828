"""`SessionPart`: what a session hands each collaborator that acts for it around its turns.

A part (`Compactions`, `Turns`) reads the session through its public read side, records through
`recorder`, logs through `output`, and acts only through the callables it is given: `agent` (the
session's agent now), `held` (the verb lock, which keeps the worker from taking a prompt),
`turn_active` and `notify` (something a reader waits on changed). It never reaches into the
session's private state.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING

import attrs

from anvild.agent.loop import Agent
from anvild.session.output import Output
from anvild.session.recorder import Recorder

if TYPE_CHECKING:
    from anvild.session.session import Session


@attrs.define(eq=False)
class SessionPart:
    _session: Session
    _recorder: Recorder
    _output: Output
    _agent: Callable[[], Agent] = attrs.field(kw_only=True)
    _held: Callable[[], AbstractAsyncContextManager[None]] = attrs.field(kw_only=True)
    _turn_active: Callable[[], bool] = attrs.field(kw_only=True)
    _notify: Callable[[], None] = attrs.field(kw_only=True)


__all__ = ["SessionPart"]
