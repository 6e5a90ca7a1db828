"""Role limits, both layers (DESIGN section 7; issue 7 "Checks": reviewer and tester).

1. The policy, end to end through the real daemon with the fake provider server: a reviewer
   session whose scripted model writes, edits and runs `git commit` gets every call refused
   (the model sees why; the repository is unchanged); a tester session writes under tests/ (after
   approval) and is refused elsewhere, by a native tool and by a shell redirect.
2. The OS and the file boundary, with the policy bypassed: the session's own tool set (bash under
   the role's sandbox file, the file tools behind the role's `FileAccess`) is dispatched
   directly, without the permission gate, under a permissive `WorkspaceWrite` policy. The
   reviewer's write and commit still fail (bubblewrap: the workspace and `.git` are read-only;
   the file tools: no writable root), and the tester writes only under test directories.

As root (CI) the sandbox drops to an unprivileged uid, so workspaces live under /var/tmp and
belong to that uid.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from anvild.agent.tools.base import ToolContext
from anvild.agent.tools.registry import ToolRegistry
from anvild.llm.types import ToolCall
from anvild.sandbox import WorkspaceWrite
from anvild.sandbox.bwrap import DEFAULT_GID, DEFAULT_UID
from anvild.session import ToolSetup, default_tools, roles
from tests.integration.test_sessions_e2e import (
    TURN_TIMEOUT,
    FakeServer,
    anvilctl,
    ok,
    read,
    start_daemon,
    user_config,
)
from tests.sandbox.conftest import git

pytestmark = pytest.mark.slow


@pytest.fixture
def repo() -> Iterator[Path]:
    """A git repository with README, src/ and tests/, owned by the sandbox uid (as root)."""
    top = Path(tempfile.mkdtemp(prefix="anvil-roles-", dir="/var/tmp"))
    top.chmod(0o755)
    work = top / "work"
    work.mkdir()
    git(work, "init", "-q", "-b", "main", ".")
    (work / "README").write_text("hello\n")
    (work / "src").mkdir()
    (work / "src" / "app.py").write_text("print('app')\n")
    (work / "tests").mkdir()
    (work / "tests" / "test_app.py").write_text("def test(): pass\n")
    git(work, "add", ".")
    git(work, "commit", "-q", "-m", "init")
    if os.geteuid() == 0:
        for dirpath, dirnames, filenames in os.walk(work):
            os.chown(dirpath, DEFAULT_UID, DEFAULT_GID)
            for name in dirnames + filenames:
                path = os.path.join(dirpath, name)
                os.chown(path, DEFAULT_UID, DEFAULT_GID, follow_symlinks=False)
    try:
        yield work
    finally:
        shutil.rmtree(top, ignore_errors=True)


def head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").strip()


def tool_results(request: dict[str, object]) -> dict[str, str]:
    """The openai-chat tool messages of a recorded request: call id -> content."""
    messages = request["body"]["messages"]  # type: ignore[index]
    return {m["tool_call_id"]: str(m["content"]) for m in messages if m["role"] == "tool"}


def wait_state(namespace: Path, sid: str, state: str) -> None:
    """Poll `state` (a snapshot file) until it reads `state`."""
    deadline = time.monotonic() + TURN_TIMEOUT
    while (now := read(namespace, f"agent/{sid}/state")) != f"{state}\n":
        assert time.monotonic() < deadline, f"still {now!r}, not {state}"
        time.sleep(0.05)


# -- 1. the policy, through the daemon ----------------------------------------------------------

REVIEWER_CALLS = [
    {"id": "rw", "name": "write_file", "arguments": {"file_path": "README", "content": "mine\n"}},
    {
        "id": "re",
        "name": "edit_file",
        "arguments": {"file_path": "README", "old_string": "hello", "new_string": "bye"},
    },
    {"id": "rc", "name": "bash", "arguments": {"command": "git commit -am sneaky"}},
]
TESTER_CALLS = [
    {
        "id": "tw",
        "name": "write_file",
        "arguments": {"file_path": "tests/test_new.py", "content": "def test_new(): pass\n"},
    },
    {"id": "ts", "name": "write_file", "arguments": {"file_path": "src/app.py", "content": "x\n"}},
    {"id": "tr", "name": "bash", "arguments": {"command": "echo x > src/other.py"}},
]


def test_the_policy_refuses_a_reviewer_and_confines_a_tester_through_the_daemon(
    tmp_path: Path, repo: Path
) -> None:
    namespace = tmp_path / "ns"
    fake = FakeServer(
        tmp_path,
        [
            {"contains": "review and fix it", "tool_calls": REVIEWER_CALLS},
            {"contains": "Permission denied", "model": "fake-model", "text": "VERDICT: CHANGES"},
            {"contains": "add a test", "tool_calls": TESTER_CALLS},
            {"text": "tests written"},
        ],
    )
    before = head(repo)
    daemon = start_daemon(namespace, user_config(tmp_path, fake.url))
    try:
        reviewer = ok(anvilctl(namespace, "new", "role=reviewer", cwd=repo)).strip()
        assert read(namespace, f"agent/{reviewer}/sandbox") == "read-only\n"
        ok(anvilctl(namespace, "send", reviewer, "review and fix it"))
        assert ok(anvilctl(namespace, "wait", reviewer)) == "await\n"
        assert ok(anvilctl(namespace, "out", reviewer)) == "VERDICT: CHANGES\n"
        results = tool_results(fake.requests()[1])
        assert set(results) == {"rw", "re", "rc"}
        for call_id, content in results.items():
            assert "Permission denied for" in content, (call_id, content)
            assert "reviewer role" in content, (call_id, content)
        assert "may not change the repository" in results["rc"]
        assert (repo / "README").read_text() == "hello\n"
        assert head(repo) == before

        tester = ok(anvilctl(namespace, "new", "role=tester", cwd=repo)).strip()
        ok(anvilctl(namespace, "send", tester, "add a test"))
        wait_state(namespace, tester, "await_approval")  # the write under tests/ asks
        assert "tests/test_new.py" in read(namespace, f"agent/{tester}/approval")
        ok(anvilctl(namespace, "write", f"agent/{tester}/approval", stdin="approve\n"))
        assert ok(anvilctl(namespace, "wait", tester)) == "await\n"
        results = tool_results(fake.requests()[-1])
        assert "Permission denied" not in results["tw"], results["tw"]
        for call_id in ("ts", "tr"):
            assert "Permission denied for" in results[call_id], results[call_id]
            assert "test directories" in results[call_id] or "may not write" in results[call_id]
        assert (repo / "tests" / "test_new.py").read_text() == "def test_new(): pass\n"
        assert (repo / "src" / "app.py").read_text() == "print('app')\n"
        assert not (repo / "src" / "other.py").exists()
    finally:
        code, log = daemon.stop()
        fake.stop()
    assert code == 0, log


# -- 2. the OS and the file boundary, with the policy bypassed ------------------------------------


def bypassed(role: str, repo: Path, tmp_path: Path) -> tuple[ToolRegistry, ToolContext]:
    """The tool set and context a `role` session gets, under a permissive WorkspaceWrite policy;
    calls go to `dispatch` directly (no permission gate)."""
    sandbox_role = roles.sandbox_role(role, user_dir=tmp_path / "no-user-roles")
    policy = WorkspaceWrite()
    registry = ToolRegistry(
        default_tools(ToolSetup(repo, role, policy, sandbox_role, session_id="s1"))
    )
    return registry, ToolContext(cwd=repo, files=roles.file_access(role, repo), sandbox=policy)


COMMIT = (
    "echo mine > README; echo write=$?; git add README; echo add=$?; "
    "git -c user.name=a -c user.email=a@b commit -q --allow-empty -m sneaky; echo commit=$?"
)


@pytest.mark.parametrize("role", ["reviewer", "planner", "conductor"])
async def test_with_the_policy_bypassed_the_sandbox_refuses_a_reviewers_write_and_commit(
    tmp_path: Path, repo: Path, role: str
) -> None:
    registry, ctx = bypassed(role, repo, tmp_path)
    before, index = head(repo), (repo / ".git" / "index").read_bytes()
    result = await registry.dispatch(ToolCall("b1", "bash", {"command": COMMIT}), ctx)
    assert "write=1" in result.content, result.content  # the OS refused: read-only file system
    assert "add=128" in result.content, result.content
    assert "commit=0" not in result.content, result.content
    for call in (
        ToolCall("w1", "write_file", {"file_path": "README", "content": "mine\n"}),
        ToolCall("w2", "write_file", {"file_path": "NEW", "content": "new\n"}),
    ):
        written = await registry.dispatch(call, ctx)
        assert written.is_error, written
        assert "outside the writable roots (none)" in written.content, written.content
    assert (repo / "README").read_text() == "hello\n"
    assert not (repo / "NEW").exists()
    assert head(repo) == before
    assert (repo / ".git" / "index").read_bytes() == index


async def test_with_the_policy_bypassed_a_tester_writes_only_under_test_directories(
    tmp_path: Path, repo: Path
) -> None:
    registry, ctx = bypassed("tester", repo, tmp_path)
    script = (
        "echo t > tests/test_sh.py; echo tests=$?; echo x > src/sh.py; echo src=$?; "
        "echo x > README; echo readme=$?"
    )
    result = await registry.dispatch(ToolCall("b1", "bash", {"command": script}), ctx)
    for expected in ("tests=0", "src=1", "readme=1"):
        assert expected in result.content, result.content
    inside = await registry.dispatch(
        ToolCall("w1", "write_file", {"file_path": "tests/unit/test_f.py", "content": "ok\n"}),
        ctx,
    )
    assert not inside.is_error, inside
    for path in ("src/app.py", "src/new.py", "README"):
        outside = await registry.dispatch(
            ToolCall("w2", "write_file", {"file_path": path, "content": "x\n"}), ctx
        )
        assert outside.is_error, outside
        assert "writes only under test directories" in outside.content, outside.content
    assert (repo / "tests" / "test_sh.py").read_text() == "t\n"
    assert (repo / "tests" / "unit" / "test_f.py").read_text() == "ok\n"
    assert (repo / "src" / "app.py").read_text() == "print('app')\n"
    assert not (repo / "src" / "sh.py").exists()
    assert not (repo / "src" / "new.py").exists()
