"""End to end: checkpoints and undo (README "Checkpoints and undo") through the real `anvild`
and the fake provider, in a workspace that is the user's own git repository.

- A turn edits with edit_file, creates with write_file, and with bash deletes, renames, changes
  a mode, touches an ignored file and writes one over the size cap: `turns/1/changes` and
  `diff` (and `anvilctl diff`) show all of it; `anvilctl undo` restores every file and mode,
  the ones bash deleted included, leaves the ignored and the oversized file alone and names them;
  the user's `.git` is byte-identical before and after everything.
- A user's overlapping edit after a turn makes `undo` refuse, naming the path; a
  non-overlapping one merges; `undo force` overwrites; `undo` during a turn is refused.
- `rewind 2 conversation` after 4 turns: files and transcript as before turn 2, and so after a
  daemon restart (the next request the model gets has no trace of turns 2 to 4), even after an
  `undo` of the rewind, which brings the files back and says the conversation stays cut.
- kill -9 in the middle of an undo (a crash point after two of its files): after the restart
  every file is as after the undo, none half done.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from anvild.checkpoints.revert import CRASH_ENV
from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_sessions_e2e import FakeServer, anvilctl, ok, read, user_config

APP = "ALPHA-LINE\nbeta\ngamma\ndelta\nepsilon\nzeta\neta\ntheta\n"


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def bash(command: str) -> dict[str, Any]:
    return call("bash", command=command)


def tree_of(root: Path) -> dict[str, tuple[str, int]]:
    """Every file under `root` outside .git: its sha256 and its mode bits."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] == ".git" or (path.is_dir() and not path.is_symlink()):
            continue
        try:
            data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
            mode = stat.S_IMODE(path.lstat().st_mode)
        except FileNotFoundError:  # renamed away between the listing and the read
            found[str(rel)] = ("vanished", 0)
            continue
        found[str(rel)] = (hashlib.sha256(data).hexdigest(), mode)
    return found


def git_bytes(root: Path) -> dict[str, bytes]:
    """The user's .git, every file's bytes (HEAD, index, refs, config, objects...)."""
    git = root / ".git"
    return {str(p.relative_to(git)): p.read_bytes() for p in sorted(git.rglob("*")) if p.is_file()}


def user_repo(root: Path) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text(APP)
    (root / "old.txt").write_text("to be deleted\n")
    (root / "name.txt").write_text("to be renamed\n")
    (root / "run.sh").write_text("#!/bin/sh\necho run\n")
    (root / ".gitignore").write_text("build/\n")
    (root / "build").mkdir()
    (root / "build" / "out.o").write_text("object\n")
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    for command in (
        ["git", "init", "-q"],
        ["git", "add", "-A"],
        ["git", "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "start"],
    ):
        subprocess.run(command, cwd=root, check=True, env=env)
    return root


SCRIPT: list[dict[str, Any]] = [
    # turn one: every kind of change
    {"contains": "turn one", "tool_calls": [call("read_file", file_path="src/app.py")]},
    {
        "contains": "ALPHA-LINE",
        "tool_calls": [
            call("edit_file", file_path="src/app.py", old_string="beta\n", new_string="BETA\n"),
            call("write_file", file_path="new.txt", content="created\n"),
        ],
    },
    {
        "contains": "Edited src/app.py",
        "tool_calls": [
            bash(
                "rm old.txt && mv name.txt renamed.txt && chmod +x run.sh && "
                "echo changed > build/out.o && head -c 300000 /dev/zero > big.bin && "
                "echo BASH-ONE-DONE"
            )
        ],
    },
    {"contains": "BASH-ONE-DONE", "text": "turn one done"},
    # turns that change one line each, for the conflict checks
    {"contains": "turn two", "tool_calls": [bash("sed -i s/gamma/GAMMA/ src/app.py && echo T2")]},
    {"contains": "T2", "text": "turn two done"},
    {"contains": "turn three", "tool_calls": [bash("sed -i s/delta/DELTA/ src/app.py && echo T3")]},
    {"contains": "T3", "text": "turn three done"},
    {"contains": "held turn", "text": "held turn done", "hold": 1},
    # four numbered turns for rewind, one file each
    *(
        step
        for n in (1, 2, 3, 4)
        for step in (
            {
                "contains": f"rewind-turn-{n}",
                "tool_calls": [bash(f"echo {n} > r{n}.txt && echo R{n}")],
            },
            {"contains": f"R{n}", "text": f"rewind turn {n} done"},
        )
    ),
    {"contains": "rewind-turn-5", "text": "rewind turn 5 done"},
    # a turn of many files, for the crash in the middle of its undo
    {
        "contains": "crash turn",
        "tool_calls": [
            bash(
                "echo 1 > c1.txt && echo 2 > c2.txt && echo 3 > c3.txt && echo 4 > c4.txt && "
                "rm old.txt && "
                "sed -i s/epsilon/EPSILON/ src/app.py && echo CRASH-DONE"
            )
        ],
    },
    {"contains": "CRASH-DONE", "text": "crash turn done"},
]


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeServer]:
    server = FakeServer(tmp_path, SCRIPT)
    yield server
    server.stop()


def config(tmp_path: Path, fake: FakeServer) -> Path:
    path = user_config(tmp_path, fake.url)
    path.write_text(
        path.read_text()
        + '\n[permissions]\nmode = "bypass"\nmax_mode = "bypass"\nfull_access = true\n'
        + "\n[checkpoints]\nmax_file_bytes = 100000\n"
    )
    return path


def start(namespace: Path, cfg: Path, env: dict[str, str] | None = None) -> Anvild:
    daemon = Anvild(namespace, "--config", str(cfg), env=env)
    daemon.wait_serving()
    return daemon


def turn(namespace: Path, sid: str, prompt: str) -> None:
    ok(anvilctl(namespace, "send", sid, prompt))
    assert ok(anvilctl(namespace, "wait", sid)) == "await\n"


def ctl(namespace: Path, sid: str, line: str) -> subprocess.CompletedProcess[str]:
    return anvilctl(namespace, "write", f"agent/{sid}/ctl", stdin=line + "\n")


def test_changes_diff_undo_and_conflicts(tmp_path: Path, fake: FakeServer) -> None:
    namespace = tmp_path / "ns"
    work = user_repo(tmp_path / "ws")
    git_before = git_bytes(work)
    daemon = start(namespace, config(tmp_path, fake))
    try:
        sid = ok(anvilctl(namespace, "new", "sandbox=full-access", cwd=work)).strip()
        before = tree_of(work)
        turn(namespace, sid, "turn one")
        assert ok(anvilctl(namespace, "out", sid)) == "turn one done\n"
        changes = read(namespace, f"agent/{sid}/turns/1/changes").splitlines()
        assert "M\t+1\t-1\tsrc/app.py" in changes
        assert "A\t+1\t-0\tnew.txt" in changes
        assert "D\t+0\t-1\told.txt" in changes
        assert "D\t+0\t-1\tname.txt" in changes
        assert "A\t+1\t-0\trenamed.txt" in changes
        assert "M\t+0\t-0\trun.sh\tmode 100644 -> 100755" in changes
        assert "S\t-\t-\tbig.bin\t300000 bytes, over max_file_bytes" in changes
        assert not any("build/" in line for line in changes)  # ignored
        diff = read(namespace, f"agent/{sid}/turns/1/diff")
        assert "-beta\n+BETA\n" in diff
        assert "deleted file mode 100644" in diff
        assert "old mode 100644\nnew mode 100755" in diff
        assert ok(anvilctl(namespace, "diff", sid)) == diff
        assert ok(anvilctl(namespace, "diff", sid, "1")) == diff
        assert read(namespace, f"agent/{sid}/turns/1/prompt") == "turn one\n"
        assert read(namespace, f"agent/{sid}/turns/1/outcome") == "done\n"
        assert read(namespace, f"agent/{sid}/turns/last/prompt") == "turn one\n"

        answer = ok(anvilctl(namespace, "undo", sid))
        assert "undo turn 1" in answer
        assert "big.bin" in answer  # reported: not in checkpoints
        assert "never checkpointed nor restored: build/" in answer  # ignored: named
        after = tree_of(work)
        assert (work / "build" / "out.o").read_text() == "changed\n"  # ignored: left alone
        assert after.pop("big.bin")[0] == hashlib.sha256(bytes(300000)).hexdigest()
        after.pop("build/out.o")
        before.pop("build/out.o")
        assert after == before  # every file and mode, the deleted ones back
        (work / "big.bin").unlink()

        app = work / "src" / "app.py"
        turn(namespace, sid, "turn two")  # gamma -> GAMMA
        app.write_text(APP.replace("gamma", "gamma, the user's"))  # overlaps
        refused = ctl(namespace, sid, "undo")
        assert refused.returncode == 1
        assert "src/app.py" in refused.stderr
        assert app.read_text() == APP.replace("gamma", "gamma, the user's")
        app.write_text(APP.replace("gamma", "GAMMA").replace("theta", "THETA"))  # does not
        ok(ctl(namespace, sid, "undo"))
        assert app.read_text() == APP.replace("theta", "THETA")

        turn(namespace, sid, "turn three")  # delta -> DELTA
        app.write_text(APP.replace("delta", "delta, the user's"))
        assert ctl(namespace, sid, "undo").returncode == 1
        ok(anvilctl(namespace, "undo", sid, "--force"))
        assert app.read_text() == APP.replace("theta", "THETA")  # as before turn three

        ok(anvilctl(namespace, "send", sid, "held turn"))  # the model holds its answer
        deadline = time.monotonic() + 30
        while read(namespace, f"agent/{sid}/state") != "running\n":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        busy = ctl(namespace, sid, "undo")
        assert busy.returncode == 1
        assert "a turn is running" in busy.stderr
        fake.release()
        assert ok(anvilctl(namespace, "wait", sid)) == "await\n"
        assert app.read_text() == APP.replace("theta", "THETA")
        assert git_bytes(work) == git_before
    finally:
        daemon.stop()


def request_texts(request: dict[str, Any]) -> str:
    return json.dumps(request["body"].get("messages", []))


def test_rewind_conversation_survives_a_restart(tmp_path: Path, fake: FakeServer) -> None:
    namespace = tmp_path / "ns"
    work = user_repo(tmp_path / "ws")
    cfg = config(tmp_path, fake)
    daemon = start(namespace, cfg)
    try:
        sid = ok(anvilctl(namespace, "new", "sandbox=full-access", cwd=work)).strip()
        before = tree_of(work)
        for n in (1, 2, 3, 4):
            turn(namespace, sid, f"rewind-turn-{n}")
        assert (work / "r4.txt").exists()
        answer = ok(
            anvilctl(namespace, "rdwr", f"agent/{sid}/ctl", stdin="rewind 2 conversation\n")
        )
        assert "conversation: back to before turn 2" in answer
        expected = {**before, "r1.txt": tree_of(work)["r1.txt"]}
        assert tree_of(work) == expected
    finally:
        daemon.stop()
    daemon = start(namespace, cfg)
    try:
        assert tree_of(work) == expected
        undone = ok(anvilctl(namespace, "undo", sid))  # of the rewind: the files come back
        assert "undo rewind 1" in undone
        assert "conversation` stays cut" in undone
        assert (work / "r4.txt").exists()
        turn(namespace, sid, "rewind-turn-5")
        last = request_texts(fake.requests()[-1])
        assert "rewind-turn-1" in last
        assert "rewind-turn-2" not in last  # the conversation stays cut, as the undo said
        assert "rewind-turn-4" not in last
    finally:
        daemon.stop()


def test_kill_9_in_the_middle_of_an_undo(tmp_path: Path, fake: FakeServer) -> None:
    namespace = tmp_path / "ns"
    work = user_repo(tmp_path / "ws")
    git_before = git_bytes(work)
    cfg = config(tmp_path, fake)
    daemon = start(namespace, cfg, env={CRASH_ENV: "2"})
    try:
        sid = ok(anvilctl(namespace, "new", "sandbox=full-access", cwd=work)).strip()
        before = tree_of(work)
        turn(namespace, sid, "crash turn")
        done = tree_of(work)
        assert done != before
        crashed = ctl(namespace, sid, "undo")  # the daemon kills itself after two files
        assert crashed.returncode != 0
        assert daemon.proc.wait(timeout=30) == -signal.SIGKILL
        half = tree_of(work)
        assert half not in (before, done)  # the crash point is in the middle
    finally:
        daemon.stop(signal.SIGKILL)
    daemon = start(namespace, cfg)
    try:
        deadline = time.monotonic() + 30
        while tree_of(work) != before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert tree_of(work) == before  # rolled forward: fully after the undo
        assert git_bytes(work) == git_before
        steps = read(namespace, f"agent/{sid}/turns/1/prompt")
        assert steps == "crash turn\n"
    finally:
        daemon.stop()
