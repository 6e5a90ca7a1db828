"""`anvild.tree.refusals`: the checks made at each Twrite say what the commit would say, and
each domain refusal maps to the errno kind of the one table."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from anvild.beads import BeadConflict, BeadNotFound, BeadStoreError, InvalidBeadRequest
from anvild.llm.testing import script
from anvild.mail import InvalidMessage, MailStoreError
from anvild.mail.errors import UnknownMailbox
from anvild.ninep.errors import FsError
from anvild.session import (
    InvalidSessionRequest,
    NameTaken,
    NewSession,
    RecordWriteFailed,
    SessionError,
    SessionNotFound,
    SessionRefused,
)
from anvild.tree.refusals import admit_context, admit_prompt, fs_error
from tests.unit.session.support import running


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (SessionRefused("x"), errno.EBUSY),
        (SessionNotFound("x"), errno.ENOENT),
        (InvalidSessionRequest("x"), errno.EINVAL),
        (NameTaken("x"), errno.EEXIST),
        (RecordWriteFailed("x"), errno.EIO),
        (SessionError("x"), errno.EINVAL),
        (BeadConflict("x"), errno.EBUSY),
        (BeadNotFound("x"), errno.ENOENT),
        (BeadStoreError("x"), errno.EIO),
        (InvalidBeadRequest("x"), errno.EINVAL),
        (UnknownMailbox("x"), errno.ENOENT),
        (InvalidMessage("x"), errno.EINVAL),
        (MailStoreError("x"), errno.EIO),
    ],
)
def test_each_domain_refusal_gets_its_errno(exc: Exception, code: int) -> None:
    error = fs_error("in", exc)
    assert (error.message, error.errno) == ("in: x", code)


def _refusal(action: object) -> str:
    try:
        action()  # type: ignore[operator]
    except (FsError, SessionError) as exc:
        return str(exc)
    return ""


@pytest.mark.parametrize("state", ["idle", "stopped", "ephemeral-used"])
async def test_the_twrite_check_says_what_submit_says(tmp_path: Path, state: str) -> None:
    async with running(tmp_path, [script.text("one")]) as manager:
        flags = ["ephemeral"] if state == "ephemeral-used" else []
        session = await manager.create(NewSession.parse(flags))
        if state == "stopped":
            await session.stop()
        elif state == "ephemeral-used":
            session.submit("first")
        admitted = _refusal(admit_prompt(session))
        submitted = _refusal(lambda: session.submit("hello"))
        assert admitted == (f"in: {submitted}" if submitted else "")
        assert bool(admitted) == (state != "idle")
        assert _refusal(admit_context(session)) == ""
