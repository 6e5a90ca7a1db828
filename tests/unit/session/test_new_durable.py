"""`new`'s first record: the session is built while its file and directory are fsynced, and is
shown (listed, published, answered) only once both fsyncs returned; a failed fsync leaves no
file, no session and no event behind, and the next `new` works."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from anvild.session import session as session_module
from anvild.session.agent_builder import session_skills
from anvild.session.errors import RecordWriteFailed
from anvild.session.events import ConfigInvalid
from anvild.session.session import Session
from anvild.session.settings import Services
from anvild.skills import SkillSet
from tests.unit.session.support import new, running


async def test_a_new_session_is_shown_only_after_its_file_and_directory_are_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running(tmp_path, [], ids=["first01", "second2"]) as manager:
        await new(manager)  # makes the sessions directory (the threaded path)
        published: list[str] = []
        monkeypatch.setattr(manager.events, "publish", published.append)
        seen: list[tuple[str, bool, int]] = []  # what each fsync saw: its file, listed, events
        real = os.fsync

        def watching(fd: int) -> None:
            name = os.readlink(f"/proc/self/fd/{fd}")
            seen.append((os.path.basename(name), "second2" in manager.ids(), len(published)))
            real(fd)

        monkeypatch.setattr(os, "fsync", watching)
        session = await new(manager)
        assert session.id == "second2"
        assert seen == [("second2.jsonl", False, 0), ("sessions", False, 0)]
        assert "second2" in manager.ids()
        assert any('"second2"' in line for line in published)  # shown after the syncs


async def test_a_failed_fsync_of_a_new_session_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running(tmp_path, [], ids=["first01", "broken1", "third03"]) as manager:
        await new(manager)
        published: list[str] = []
        monkeypatch.setattr(manager.events, "publish", published.append)
        real = os.fsync

        def failing(fd: int) -> None:
            if os.readlink(f"/proc/self/fd/{fd}").endswith("broken1.jsonl"):
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            real(fd)

        monkeypatch.setattr(os, "fsync", failing)
        with pytest.raises(RecordWriteFailed, match="could not be created"):
            await new(manager)
        assert manager.ids() == ["first01"]
        assert not manager.store.path_for("broken1").exists()
        assert not [line for line in published if "broken1" in line]
        assert (await new(manager)).id == "third03"
        assert manager.ids() == ["first01", "third03"]


async def test_what_a_new_session_reports_while_it_is_built_waits_for_the_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An event of the session's construction (a skipped skill) is published after the
    fsyncs, before `session_created`; with a failed fsync it is dropped."""

    def reporting(session: Session, services: Services) -> SkillSet:
        services.publish(ConfigInvalid(session.id, "skill skipped: broken", "the others"))
        return session_skills(session, services)

    monkeypatch.setattr(session_module, "session_skills", reporting)
    async with running(tmp_path, [], ids=["first01", "second2", "broken3"]) as manager:
        await new(manager)
        published: list[str] = []
        monkeypatch.setattr(manager.events, "publish", published.append)
        real = os.fsync
        at_sync: list[int] = []

        def watching(fd: int) -> None:
            at_sync.append(len(published))
            if os.readlink(f"/proc/self/fd/{fd}").endswith("broken3.jsonl"):
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            real(fd)

        monkeypatch.setattr(os, "fsync", watching)
        await new(manager)
        assert at_sync == [0, 0]
        kinds = [json.loads(line)["type"] for line in published]
        assert kinds.index("config_invalid") < kinds.index("session_created")
        published.clear()
        with pytest.raises(RecordWriteFailed):
            await new(manager)
        assert published == []
