"""`agent/roles/`, `agent/sandbox-roles/` and `agent/scripts/` (`anvild.tree.roles`) over a
real 9P connection, in-process: reads, writes checked on the Twrite, create and remove, and the
next session using what was written."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from anvild import data
from anvild.llm.testing import ScriptedProvider, script
from anvild.ninep import messages as m
from anvild.ninep.constants import L_O_CREAT, L_O_TRUNC, L_O_WRONLY, Dialect
from anvild.sandbox.roles import BUILTIN_DIR, BUILTIN_ROLES
from anvild.session.roles import BUILTIN_TEXT_DIR, ROLES
from anvild.tree.roles import MAX_ROLE_BYTES
from anvild.tree.roles import _write_atomically as write_atomically
from tests.unit.session.support import Models, target
from tests.unit.store.support import record_fsyncs
from tests.unit.tree.test_sessions_tree import (
    OREAD,
    OTRUNC,
    OWRITE,
    Client,
    dir_names,
    error_text,
    new_session,
    served,
)

READ_ONLY_ROLE = b"description: Reads only.\nnetwork: false\ngit: read-only\n"


def user_sandbox(tmp_path: Path, name: str = "developer") -> Path:
    return tmp_path / "config" / "sandbox-roles" / f"{name}.yaml"


def user_text(tmp_path: Path, name: str = "developer") -> Path:
    return tmp_path / "config" / "roles" / f"{name}.txt"


async def create(c: Client, dir_path: str, name: str, perm: int = 0o644) -> tuple[int, m.Message]:
    fid = 900 + len(name)
    names = tuple(p for p in dir_path.split("/") if p)
    walked = await c.raw.rpc(m.Twalk(0, 0, fid, names))
    assert isinstance(walked, m.Rwalk), walked
    return fid, await c.raw.rpc(m.Tcreate(0, fid, name, perm, OWRITE))


async def remove(c: Client, path: str) -> m.Message:
    fid = 800
    names = tuple(p for p in path.split("/") if p)
    walked = await c.raw.rpc(m.Twalk(0, 0, fid, names))
    assert isinstance(walked, m.Rwalk), walked
    assert len(walked.qids) == len(names), walked
    return await c.raw.rpc(m.Tremove(0, fid))


async def test_the_directories_list_the_shipped_files_and_scripts_read_as_shipped(
    tmp_path: Path,
) -> None:
    async with served(tmp_path, []) as (_, con, _root):
        c = await con()
        assert await dir_names(c, "roles") == list(ROLES)
        assert await dir_names(c, "sandbox-roles") == [f"{r}.yaml" for r in BUILTIN_ROLES]
        assert await dir_names(c, "scripts") == list(data.WORKFLOW_SCRIPTS)
        for name in data.WORKFLOW_SCRIPTS:
            shipped = (data.path(data.SCRIPTS) / name).read_text()
            assert await c.get(f"scripts/{name}") == shipped
            assert len(shipped) > 1000
        assert await c.get("roles/reviewer") == (BUILTIN_TEXT_DIR / "reviewer.txt").read_text()
        assert await c.get("sandbox-roles/tester.yaml") == (BUILTIN_DIR / "tester.yaml").read_text()
        # Read-only: a write open of a script is refused by its mode.
        fid = 77
        await c.raw.rpc(m.Twalk(0, 0, fid, ("scripts", "fanout")))
        refused = await c.raw.rpc(m.Topen(0, fid, OWRITE))
        assert isinstance(refused, m.Rerror), refused


async def test_a_broken_sandbox_role_is_refused_on_the_twrite_and_the_old_role_stays(
    tmp_path: Path,
) -> None:
    shipped = (BUILTIN_DIR / "developer.yaml").read_text()
    async with served(tmp_path, []) as (_, con, _root):
        c = await con()
        path = "sandbox-roles/developer.yaml"
        for body, said in [
            (b"network: [true\nfoo: : :\n", "not valid YAML"),
            (b"network: maybe\n", "network must be true or false, got 'maybe'"),
            (b"colour: red\n", "unknown key 'colour'"),
            (b"full_access: true\n", "A role cannot turn the sandbox off"),
            (b"filesystem:\n  read_write: [relative/dir]\n", "not an absolute path"),
        ]:
            fid = await c.open(path, OWRITE | OTRUNC)
            reply = await c.write(fid, body)
            assert said in error_text(reply), (body, reply)
            assert "the role file is unchanged" in error_text(reply)
            assert error_text(await c.clunk(fid)) == error_text(reply)  # the open is dead
            assert not user_sandbox(tmp_path).exists()
            assert await c.get(path) == shipped
        # Over a user file: a broken write keeps the user's file, not only the shipped one.
        assert await c.put(path, READ_ONLY_ROLE) == m.Rclunk(0)
        assert user_sandbox(tmp_path).read_bytes() == READ_ONLY_ROLE
        reply = await c.put(path, b"git: sometimes\n")
        assert "git must be 'commit' or 'read-only'" in error_text(reply)
        assert user_sandbox(tmp_path).read_bytes() == READ_ONLY_ROLE
        assert await c.get(path) == READ_ONLY_ROLE.decode()


async def test_a_valid_sandbox_role_lands_in_the_user_dir_and_the_next_session_uses_it(
    tmp_path: Path,
) -> None:
    async with served(tmp_path, []) as (manager, con, _root):
        c = await con()
        before = await new_session(c, b"role=developer")
        assert await c.get(f"{before}/sandbox") == "workspace-write\n"
        assert await c.put("sandbox-roles/developer.yaml", READ_ONLY_ROLE) == m.Rclunk(0)
        assert user_sandbox(tmp_path).read_bytes() == READ_ONLY_ROLE
        after = await new_session(c, b"role=developer")
        assert await c.get(f"{after}/sandbox") == "read-only\n"  # no writable path any more
        assert await c.get(f"{before}/sandbox") == "workspace-write\n"  # a live session keeps its
        assert manager.settings.sandbox_role_dir == user_sandbox(tmp_path).parent


async def test_a_yaml_construct_cut_between_twrites_is_judged_when_whole(tmp_path: Path) -> None:
    async with served(tmp_path, []) as (_, con, _root):
        c = await con()
        fid = await c.open("sandbox-roles/reviewer.yaml", OWRITE | OTRUNC)
        # A flow list open at a line end, then a value cut in the middle of a word.
        offset = 0
        for piece in [b"filesystem:\n  read_only: [/a,\n", b"   /b]\nnetwork: fa", b"lse\n"]:
            assert isinstance(await c.write(fid, piece, offset), m.Rwrite), piece
            offset += len(piece)
        assert await c.clunk(fid) == m.Rclunk(0)
        assert "/b]" in user_sandbox(tmp_path, "reviewer").read_text()
        # Still invalid at the clunk (no final newline): refused there, nothing written.
        fid = await c.open("sandbox-roles/planner.yaml", OWRITE | OTRUNC)
        assert isinstance(await c.write(fid, b"network: maybe"), m.Rwrite)
        assert "network must be true or false" in error_text(await c.clunk(fid))
        assert not user_sandbox(tmp_path, "planner").exists()


async def test_a_role_text_lands_in_the_user_dir_and_the_next_session_prompts_with_it(
    tmp_path: Path,
) -> None:
    provider = ScriptedProvider([script.text("ok")])
    async with served(tmp_path, Models({"fake": target(provider)})) as (_, con, _root):
        c = await con()
        text = b"You are a developer who writes haiku in every commit message.\n"
        assert await c.put("roles/developer", text) == m.Rclunk(0)
        assert user_text(tmp_path).read_bytes() == text
        assert await c.get("roles/developer") == text.decode()
        sid = await new_session(c, b"role=developer")
        assert await c.put(f"{sid}/in", b"hi") == m.Rclunk(0)
        assert await c.get(f"{sid}/wait") == "await\n"
        assert "writes haiku in every commit message" in provider.requests[0].system
        # Not text: refused on the Twrite, the override stays.
        reply = await c.put("roles/developer", b"\xff\xfe binary")
        assert "not valid UTF-8" in error_text(reply)
        assert user_text(tmp_path).read_bytes() == text
        fid = await c.open("roles/developer", OWRITE | OTRUNC)
        offset, reply = 0, m.Message()
        while offset <= MAX_ROLE_BYTES:  # in pieces that fit the connection's msize
            reply = await c.write(fid, b"x" * 8000, offset)
            if isinstance(reply, m.Rerror):
                break
            offset += 8000
        assert "body too large" in error_text(reply)
        assert "body too large" in error_text(await c.clunk(fid))
        assert user_text(tmp_path).read_bytes() == text


async def test_remove_reverts_to_the_shipped_role_and_a_shipped_role_cannot_be_removed(
    tmp_path: Path,
) -> None:
    shipped = (BUILTIN_TEXT_DIR / "tester.txt").read_text()
    async with served(tmp_path, []) as (_, con, _root):
        c = await con()
        refused = await remove(c, "roles/tester")
        assert "a shipped role cannot be removed" in error_text(refused)
        assert await c.get("roles/tester") == shipped
        assert await c.put("roles/tester", b"Test everything twice.\n") == m.Rclunk(0)
        assert await c.get("roles/tester") == "Test everything twice.\n"
        assert await remove(c, "roles/tester") == m.Rremove(0)
        assert not user_text(tmp_path, "tester").exists()
        assert await c.get("roles/tester") == shipped
        assert await dir_names(c, "roles") == list(ROLES)
        refused = await remove(c, "sandbox-roles/tester.yaml")
        assert "a shipped role cannot be removed" in error_text(refused)
        assert (BUILTIN_DIR / "tester.yaml").is_file()


async def test_create_makes_a_new_sandbox_role_and_refuses_bad_names_and_new_role_texts(
    tmp_path: Path,
) -> None:
    async with served(tmp_path, []) as (_, con, _root):
        c = await con()
        fid, reply = await create(c, "sandbox-roles", "auditor.yaml")
        assert isinstance(reply, m.Rcreate), reply
        assert isinstance(await c.write(fid, READ_ONLY_ROLE), m.Rwrite)
        assert await c.clunk(fid) == m.Rclunk(0)
        assert user_sandbox(tmp_path, "auditor").read_bytes() == READ_ONLY_ROLE
        assert "auditor.yaml" in await dir_names(c, "sandbox-roles")
        assert await c.get("sandbox-roles/auditor.yaml") == READ_ONLY_ROLE.decode()
        # Created and clunked without a write (`9p create`): an empty role, the narrowest.
        fid, reply = await create(c, "sandbox-roles", "empty.yaml")
        assert isinstance(reply, m.Rcreate), reply
        assert await c.clunk(fid) == m.Rclunk(0)
        assert user_sandbox(tmp_path, "empty").read_bytes() == b""
        assert "empty.yaml" in await dir_names(c, "sandbox-roles")
        # A broken body on a created file: refused on the Twrite, the file stays empty.
        fid, reply = await create(c, "sandbox-roles", "broken.yaml")
        assert isinstance(reply, m.Rcreate), reply
        assert "not valid YAML" in error_text(await c.write(fid, b"a: [b\nc: : d\n"))
        await c.clunk(fid)
        assert user_sandbox(tmp_path, "broken").read_bytes() == b""
        # A user-only role removed is gone.
        assert await remove(c, "sandbox-roles/auditor.yaml") == m.Rremove(0)
        assert "auditor.yaml" not in await dir_names(c, "sandbox-roles")
        for where, name, said in [
            ("sandbox-roles", "Auditor.yaml", "not a role name"),
            ("sandbox-roles", "auditor.yml", "not a role name"),
            ("sandbox-roles", "tester.yaml", "already exists"),
            ("roles", "auditor", "a new role cannot be made here"),
        ]:
            fid, reply = await create(c, where, name)
            assert said in error_text(reply), (name, reply)
            await c.clunk(fid)
        assert not (tmp_path / "config" / "roles" / "auditor.txt").exists()


async def test_a_truncating_open_that_writes_nothing_changes_nothing(tmp_path: Path) -> None:
    async with served(tmp_path, []) as (_, con, _root):
        c = await con()
        fid = await c.open("sandbox-roles/developer.yaml", OWRITE | OTRUNC)
        assert await c.clunk(fid) == m.Rclunk(0)
        assert not user_sandbox(tmp_path).exists()
        fid = await c.open("roles/developer", OREAD)
        assert (await c.read_all(fid)).strip()
        await c.clunk(fid)


async def test_v9fs_cp_and_rm_create_and_remove_user_roles_in_9p2000_l(tmp_path: Path) -> None:
    """What v9fs sends for `cp x.yaml /mnt/agent/sandbox-roles/` (Tlcreate with O_CREAT|O_TRUNC,
    Twrite, Tclunk) and for `rm` (Tunlinkat of the entry, not AT_REMOVEDIR)."""
    creat = L_O_WRONLY | L_O_CREAT | L_O_TRUNC
    async with served(tmp_path, []) as (_, con, _root):
        u = await con()  # reads the files back
        c = await con(Dialect.P9P2000_L)
        assert isinstance(await c.raw.rpc(m.Twalk(0, 0, 701, ("sandbox-roles",))), m.Rwalk)
        assert isinstance(await c.raw.rpc(m.Twalk(0, 0, 702, ("sandbox-roles",))), m.Rwalk)
        reply = await c.raw.rpc(m.Tlcreate(0, 702, "auditor.yaml", creat, 0o644, 0))
        assert isinstance(reply, m.Rlcreate), reply
        assert isinstance(await c.raw.rpc(m.Twrite(0, 702, 0, READ_ONLY_ROLE)), m.Rwrite)
        assert await c.raw.rpc(m.Tclunk(0, 702)) == m.Rclunk(0)
        assert user_sandbox(tmp_path, "auditor").read_bytes() == READ_ONLY_ROLE
        assert await u.get("sandbox-roles/auditor.yaml") == READ_ONLY_ROLE.decode()
        # A broken body on a new file: refused at its Twrite, the file stays the empty role.
        assert isinstance(await c.raw.rpc(m.Twalk(0, 0, 703, ("sandbox-roles",))), m.Rwalk)
        reply = await c.raw.rpc(m.Tlcreate(0, 703, "broken.yaml", creat, 0o644, 0))
        assert isinstance(reply, m.Rlcreate), reply
        refused = await c.raw.rpc(m.Twrite(0, 703, 0, b"network: maybe\n"))
        assert refused == m.Rlerror(0, errno.EINVAL)
        await c.raw.rpc(m.Tclunk(0, 703))
        assert user_sandbox(tmp_path, "broken").read_bytes() == b""
        # rm: the user-only roles go; a shipped one stays (EPERM); an override goes and the
        # shipped file shows again.
        for name in ("auditor.yaml", "broken.yaml"):
            assert await c.raw.rpc(m.Tunlinkat(0, 701, name, 0)) == m.Runlinkat(0)
            assert not user_sandbox(tmp_path, name.removesuffix(".yaml")).exists()
        assert await dir_names(u, "sandbox-roles") == [f"{r}.yaml" for r in BUILTIN_ROLES]
        assert await c.raw.rpc(m.Tunlinkat(0, 701, "tester.yaml", 0)) == m.Rlerror(0, errno.EPERM)
        assert await u.put("roles/tester", b"Test twice.\n") == m.Rclunk(0)
        assert isinstance(await c.raw.rpc(m.Twalk(0, 0, 704, ("roles",))), m.Rwalk)
        assert await c.raw.rpc(m.Tunlinkat(0, 704, "tester", 0)) == m.Runlinkat(0)
        assert await u.get("roles/tester") == (BUILTIN_TEXT_DIR / "tester.txt").read_text()
        # A new role text: refused (EPERM), nothing written.
        assert isinstance(await c.raw.rpc(m.Twalk(0, 0, 705, ("roles",))), m.Rwalk)
        reply = await c.raw.rpc(m.Tlcreate(0, 705, "auditor", creat, 0o644, 0))
        assert reply == m.Rlerror(0, errno.EPERM)
        assert not user_text(tmp_path, "auditor").exists()


def test_a_written_role_file_and_its_directory_entry_are_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced = record_fsyncs(monkeypatch)
    role = user_sandbox(tmp_path)
    write_atomically(role, READ_ONLY_ROLE)
    assert role.read_bytes() == READ_ONLY_ROLE
    assert synced == [role.stat().st_ino, role.parent.stat().st_ino]  # the file, then the rename
