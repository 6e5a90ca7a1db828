"""`new cwd=`: what each kind of path is told (one stat decides: a directory, something else,
nothing there, or an error worth showing), and the normalized cwd a session gets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from anvild.session.errors import InvalidSessionRequest
from tests.unit.session.support import new, running


async def test_each_cwd_gets_its_answer(tmp_path: Path) -> None:
    base = tmp_path / "base"
    base.mkdir()
    (base / "file").write_text("x")
    os.symlink(tmp_path / "nowhere", base / "dangling")
    os.symlink(base / "loop", base / "loop")
    os.symlink(base, base / "link")
    refused = {
        f"{base}/file": "is not a directory",
        f"{base}/file/": "is not a directory",
        f"{base}/nope": "does not exist",
        f"{base}/file/under": "does not exist",
        f"{base}/dangling": "does not exist",
        f"{base}/loop": "does not exist",
        "relative/dir": "is not an absolute path",
        "/" + "a" * 300: "cannot be used: File name too long",
    }
    accepted = {
        f"{base}/": str(base),
        f"{base}//./": str(base),
        f"{base}/link": f"{base}/link",
    }
    async with running(tmp_path, []) as manager:
        for cwd, message in refused.items():
            with pytest.raises(InvalidSessionRequest, match=message):
                await new(manager, cwd=cwd)
        for cwd, expected in accepted.items():
            assert (await new(manager, cwd=cwd)).cwd == expected
