"""A scripted approver for tests: answers from a list, records every request.

    approver = ScriptedApprover([ApproveAlways(), Reject("use cargo check")])
    ...
    assert [r.tool for r in approver.requests] == ["bash", "bash"]

A script item is an answer, a function of the request returning one, or `HANG` (wait until
cancelled, for tests of cancellation during an approval). When the script runs out, the request
is answered `Unavailable` (never approved) and `exhausted` counts it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final, TypeAlias

import trio

from anvild.agent.permissions.approval import ApprovalAnswer, ApprovalRequest, Unavailable


class _Hang:
    def __repr__(self) -> str:
        return "HANG"


HANG: Final = _Hang()

Script: TypeAlias = ApprovalAnswer | Callable[[ApprovalRequest], ApprovalAnswer] | _Hang


class ScriptedApprover:
    def __init__(self, script: Iterable[Script] = ()) -> None:
        self._script = list(script)
        self.requests: list[ApprovalRequest] = []
        self.exhausted = 0
        self._asked = trio.Event()

    async def wait_asked(self) -> None:
        """Until the first request has arrived (a test's synchronisation point)."""
        await self._asked.wait()

    async def request_approval(self, request: ApprovalRequest) -> ApprovalAnswer:
        self.requests.append(request)
        self._asked.set()
        await trio.lowlevel.checkpoint()
        if not self._script:
            self.exhausted += 1
            return Unavailable(f"ScriptedApprover has no answer left for {request.tool}")
        item = self._script.pop(0)
        if isinstance(item, _Hang):
            await trio.sleep_forever()
        if callable(item):
            return item(request)
        return item

    @property
    def remaining(self) -> int:
        return len(self._script)


__all__ = ["HANG", "ScriptedApprover"]
