"""Git planting as real attacks (docs/sandbox-escapes.md, "Git planting"; vectors in
`tests/sandbox/planting.py`).

Each vector's command runs through the real sandbox as the bash tool runs it (developer role,
through the privilege drop as root, the check after the command included); then the host's git
runs status, diff, log -p and commit in the workspace and where the vector aims, and the planted
program must never have run. Against the layout without this section's protections every vector
works (docs/decisions.md records the run).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import attrs
import pytest
import trio

from anvild.agent.tools.base import Failed, ToolContext
from anvild.agent.tools.bash import BashTool, SandboxWrapper
from anvild.sandbox import ReadOnly, WorkspaceWrite
from anvild.sandbox.bwrap import DEFAULT_GID, DEFAULT_UID, SandboxSettings, uid_may
from anvild.sandbox.confine import Sandbox
from anvild.sandbox.roles import load_role
from tests.sandbox import planting
from tests.sandbox.conftest import ROOT, give, run_reported

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

HELPER = Path(__file__).with_name("plant_unprivileged.py")


@attrs.frozen
class Place:
    top: Path
    ws: Path
    marker: Path
    quarantine: Path

    @property
    def settings(self) -> SandboxSettings:
        return SandboxSettings(quarantine=self.quarantine)


@pytest.fixture
def place(base_dir: Path) -> Place:
    top = base_dir / f"plant-{uuid.uuid4().hex[:8]}"
    top.mkdir()
    top.chmod(0o755)
    markers = top / "markers"  # the host's; the sandbox sees an empty /var/tmp instead
    markers.mkdir()
    return Place(top, top / "ws", markers / "ran", top / "quarantine")


def plant(place: Place, vector: planting.Vector) -> str | None:
    planting.set_up(vector, place.ws)
    give(place.top)
    script = planting.plant_script(vector, place.marker)
    _, report = run_reported(
        WorkspaceWrite(), load_role("developer"), place.ws, script, settings=place.settings
    )
    assert not place.marker.exists(), "the plant ran its program on the host by itself"
    return report


@pytest.mark.parametrize("vector", planting.VECTORS, ids=lambda v: v.name)
def test_planted_git_never_runs_a_program_on_the_host(
    place: Place, vector: planting.Vector
) -> None:
    plant(place, vector)
    assert planting.attack_worked(vector, place.ws, place.marker) == []


QUARANTINED = {
    "new_worktree": [".git/worktrees/evil", "evilwt/.git"],
    "nested_gitlink": ["sub/.git"],
    "nested_hook": ["hooked/.git"],
    "nested_bare": ["evil.git"],
    "nested_textconv": ["tc/.git"],
    "rebase_exec": [".git/rebase-merge"],
    "unknown_name": [".git/anvil-unknown"],
}


@pytest.mark.parametrize("name", sorted(QUARANTINED))
def test_what_mounts_cannot_stop_is_quarantined_and_reported(place: Place, name: str) -> None:
    vector = next(v for v in planting.VECTORS if v.name == name)
    report = plant(place, vector)
    assert report is not None
    manifest = [
        json.loads(line)
        for path in place.quarantine.glob("*/manifest.jsonl")
        for line in path.read_text().splitlines()
    ]
    for rel in QUARANTINED[name]:
        original = place.ws / rel
        assert str(original) in report
        assert not os.path.lexists(original)
        moved = next(Path(m["moved_to"]) for m in manifest if m["path"] == str(original))
        assert os.path.lexists(moved)


def test_developer_git_work_still_works_and_is_left_alone(place: Place) -> None:
    planting.make_repo(place.ws)
    give(place.top)
    script = " && ".join(
        [
            "export GIT_AUTHOR_NAME=m GIT_AUTHOR_EMAIL=m@x GIT_COMMITTER_NAME=m "
            "GIT_COMMITTER_EMAIL=m@x",
            "echo a > a && git add a && git commit -qm a && echo commit=ok",
            "echo b >> a && git stash -q && git stash pop -q && git commit -qam b && echo stash=ok",
            "git checkout -qb side HEAD~1 && echo c > c && git add c && git commit -qm c",
            "git rebase -q main && git rebase -q -x true HEAD~2 && echo rebase=ok",
            "git worktree add -q wt -b other && (cd wt && echo d > d && git add d && "
            "git commit -qm d) && echo worktree=ok",
            "git clone -q . cloned && git -C cloned log -1 --format=%s && echo clone=ok",
            "git -C cloned config user.name someone && echo config=ok",
        ]
    )
    done, report = run_reported(
        WorkspaceWrite(), load_role("developer"), place.ws, script, settings=place.settings
    )
    for word in ("commit", "stash", "rebase", "worktree", "clone", "config"):
        assert f"{word}=ok" in done.stdout, done.stdout + done.stderr
    assert report is None
    assert not place.quarantine.exists()
    assert planting.host_git(place.ws / "wt", "log", "-1", "--format=%s").stdout == "d\n"
    assert (place.ws / "cloned" / ".git").is_dir()
    leftovers = {"commondir", "config.worktree", "modules", "remotes"} & set(
        os.listdir(place.ws / ".git")
    )
    assert leftovers == set()  # the seeds and placeholders went away with the sandbox


def test_reviewer_workspace_is_not_checked(place: Place) -> None:
    planting.make_repo(place.ws)
    give(place.top)
    _, report = run_reported(
        ReadOnly(), load_role("reviewer"), place.ws, "git status", settings=place.settings
    )
    assert report is None


def _bash_tool(place: Place) -> BashTool:
    role = load_role("developer")
    return BashTool(
        wrapper_for=lambda policy: SandboxWrapper(Sandbox(policy, role, place.settings))  # type: ignore[arg-type]
    )


async def test_the_bash_tool_reports_the_quarantine(place: Place) -> None:
    vector = next(v for v in planting.VECTORS if v.name == "nested_gitlink")
    planting.set_up(vector, place.ws)
    give(place.top)
    ctx = ToolContext(cwd=place.ws, sandbox=WorkspaceWrite())
    out = await _bash_tool(place).call(
        {"command": planting.plant_script(vector, place.marker)}, ctx
    )
    assert "quarantined" in out.content
    assert f"{place.ws / 'sub' / '.git'}: " in out.content
    assert planting.attack_worked(vector, place.ws, place.marker) == []


async def test_the_check_runs_after_a_timeout_too(place: Place) -> None:
    vector = next(v for v in planting.VECTORS if v.name == "nested_gitlink")
    planting.set_up(vector, place.ws)
    give(place.top)
    ctx = ToolContext(cwd=place.ws, sandbox=WorkspaceWrite())
    command = planting.plant_script(vector, place.marker) + "\nsleep 60"
    with pytest.raises(Failed, match="timed out") as failed:
        await _bash_tool(place).call({"command": command, "timeout_ms": 3000}, ctx)
    assert "sub/.git" in str(failed.value)
    assert planting.attack_worked(vector, place.ws, place.marker) == []


def _unprivileged_prefix() -> list[str] | None:
    """How to run a process as the sandbox uid with user namespaces, or None if not here."""
    prefix = (
        ["setpriv", f"--reuid={DEFAULT_UID}", f"--regid={DEFAULT_GID}", "--clear-groups"]
        if ROOT
        else []
    )
    probe = subprocess.run(
        [*prefix, "bwrap", "--unshare-user", "--ro-bind", "/", "/", "true"],
        capture_output=True,
        check=False,
    )
    return prefix if probe.returncode == 0 else None


def test_planting_as_an_unprivileged_user(base_dir: Path) -> None:
    """The daemon as an ordinary user: no privilege drop, the same uid inside the sandbox and
    out, its own git afterwards. Runs every vector in a pytest-free helper."""
    prefix = _unprivileged_prefix()
    if prefix is None:
        pytest.skip("bwrap cannot create a user namespace for an unprivileged uid here")
    top = base_dir / f"unpriv-{uuid.uuid4().hex[:8]}"
    top.mkdir()
    top.chmod(0o755)
    give(top)
    # The project and its dependencies by path, for an interpreter the sandbox uid can run
    # (this one may live under a root-only directory).
    paths = [str(Path(__file__).parents[2]), str(Path(attrs.__file__).parents[1])]
    python = os.path.realpath(sys.executable)
    if ROOT and not uid_may(Path(python), DEFAULT_UID, DEFAULT_GID, write=False):
        python = "/usr/bin/python3"
    done = subprocess.run(
        [*prefix, "env", f"HOME={top}", f"PYTHONPATH={':'.join(paths)}", python, HELPER, top],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.splitlines()[-1])  # after the log lines
    assert set(results) == {v.name for v in planting.VECTORS}
    assert {name: ev for name, ev in results.items() if ev} == {}


async def test_the_check_runs_after_a_cancel_too(place: Place) -> None:
    vector = next(v for v in planting.VECTORS if v.name == "nested_gitlink")
    planting.set_up(vector, place.ws)
    give(place.top)
    ctx = ToolContext(cwd=place.ws, sandbox=WorkspaceWrite())
    command = planting.plant_script(vector, place.marker) + "\ntouch planted; sleep 60"
    with trio.move_on_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_bash_tool(place).call, {"command": command}, ctx)
            while not (place.ws / "planted").exists():  # noqa: ASYNC110
                await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
    assert (place.ws / "planted").exists()
    assert not (place.ws / "sub" / ".git").exists()
    assert planting.attack_worked(vector, place.ws, place.marker) == []


def test_closing_a_launch_runs_the_check_its_caller_forgot(place: Place) -> None:
    vector = next(v for v in planting.VECTORS if v.name == "nested_gitlink")
    planting.set_up(vector, place.ws)
    give(place.top)
    sandbox = Sandbox(WorkspaceWrite(), load_role("developer"), place.settings)
    script = planting.plant_script(vector, place.marker)
    with sandbox.prepare(("bash", "-c", script), place.ws) as launch:
        subprocess.run(
            launch.argv,
            env=launch.env,
            pass_fds=launch.pass_fds,
            cwd=launch.cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
        assert (place.ws / "sub" / ".git").is_dir()  # planted, not yet checked
    assert not (place.ws / "sub" / ".git").exists()
