"""Beads through a git remote, across processes: several OS processes, each a bead store with its
own clone and host name (standing for daemons on several hosts), share one bare repository in
a tmp dir, reached by path (no network namespaces: the git protocol over a path is the same
compare-and-swap as over ssh). Real git; kill -9 is a real SIGKILL of a process group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.integration.test_beads_e2e import new_bead
from tests.integration.test_sessions_e2e import anvilctl, read, start_daemon

WORKER = r"""
import json, sys, time
from pathlib import Path
import trio
from anvild.beads import BeadConflict, BeadStore, NewBead

async def main(repo, remote, host, job, *args):
    git = args[-1] if job == "create" and len(args) > 2 else "git"
    store = BeadStore(Path(repo), remote=remote, host=host, pull_bound=0.0, git=git)
    await store.open()
    print(json.dumps({"opened": store.sync_state.queued}), flush=True)
    if job == "claim":
        bead, count, go = args[0], int(args[1]), Path(args[2])
        while not go.exists():
            await trio.sleep(0.005)
        async def claim(n):
            try:
                await store.claim(bead, f"{host}-s{n}", by="user")
                print(json.dumps({"won": f"{host}-s{n}"}), flush=True)
            except BeadConflict as exc:
                print(json.dumps({"refused": str(exc)}), flush=True)
        async with trio.open_nursery() as nursery:
            for n in range(count):
                nursery.start_soon(claim, n)
    elif job == "create":
        prefix, count = args[0], int(args[1])
        for n in range(count):
            bead = await store.create(NewBead(f"{prefix} item {n}", "dev"), by="user")
            print(json.dumps({"made": bead.id, "title": bead.title}), flush=True)
    elif job == "board":
        await store.refresh()
    beads = {b.id: b.title for b in store.beads()}
    print(json.dumps({"board": beads, "sync": store.sync_state.text()}), flush=True)
    store.close()

trio.run(main, *sys.argv[1:])
"""

ROOT = Path(__file__).resolve().parents[2]


def run_git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def bare_repo(tmp_path: Path) -> Path:
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    return bare


def start(tmp_path: Path, host: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            WORKER,
            str(tmp_path / host),
            str(tmp_path / "remote.git"),
            host,
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def board_of(tmp_path: Path, host: str) -> dict[str, str]:
    lines = finish(start(tmp_path, host, "board"))
    board: dict[str, str] = lines[-1]["board"]
    return board


def test_thirty_claims_from_three_processes_one_wins_and_the_remote_has_one_claim(
    tmp_path: Path,
) -> None:
    bare = bare_repo(tmp_path)
    made = finish(start(tmp_path, "d1", "create", "Contended", "1"))
    bead = made[1]["made"]
    go = tmp_path / "go"
    procs = [start(tmp_path, f"d{n}", "claim", bead, "10", str(go)) for n in (1, 2, 3)]
    time.sleep(1.0)  # every process has opened its clone (pulled) and waits for the go
    go.touch()
    lines = [line for proc in procs for line in finish(proc)]
    won = [line["won"] for line in lines if "won" in line]
    refused = [line["refused"] for line in lines if "refused" in line]
    assert len(won) == 1, won
    assert len(refused) == 29
    host = won[0].split("-")[0]
    assert all(f"already claimed by {won[0]} on host {host} " in r for r in refused), refused
    claims = [s for s in run_git(bare, "log", "--format=%s", "main").splitlines() if "claim" in s]
    assert claims == [f"claim {bead} for {won[0]} (by user)"]


def test_a_hundred_beads_made_by_three_processes_at_once_are_on_every_board(tmp_path: Path) -> None:
    bare = bare_repo(tmp_path)
    finish(start(tmp_path, "d0", "board"))  # the remote's first commit
    counts = {1: "34", 2: "33", 3: "33"}
    procs = [start(tmp_path, f"d{n}", "create", f"Host {n}", c) for n, c in counts.items()]
    made = [line for proc in procs for line in finish(proc) if "made" in line]
    assert len(made) == 100
    assert len({line["made"] for line in made}) == 100  # no id given twice
    titles = {line["title"] for line in made}
    for host in ("d1", "d2", "d3", "d4"):
        board = board_of(tmp_path, host)
        assert set(board.values()) == titles
    news = [s for s in run_git(bare, "log", "--format=%s", "main").splitlines() if s[:4] == "new "]
    assert len(news) == 100


def test_kill_9_mid_push_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    bare = bare_repo(tmp_path)
    finish(start(tmp_path, "d1", "board"))
    # A git that stops in the middle of a push (after the commit) until it is killed.
    stuck = tmp_path / "stuck-git"
    marker = tmp_path / "pushing"
    stuck.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do if [ "$a" = push ]; then touch '
        f'{marker}; exec sleep 600; fi; done\nexec git "$@"\n'
    )
    stuck.chmod(0o755)
    proc = start(tmp_path, "d1", "create", "Crash", "3", str(stuck))
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert time.monotonic() < deadline, "the push never started"
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)  # reaps it and closes its pipe
    local = run_git(tmp_path / "d1", "log", "--format=%s").splitlines()
    assert local[0] == "new crash-item-001: Crash item 0 (role dev) (by user)"
    assert "crash-item" not in run_git(bare, "log", "--format=%s", "main")
    # Restarted with a working git: the committed change is pushed when the store opens.
    lines = finish(start(tmp_path, "d1", "create", "After", "1"))
    assert lines[0] == {"opened": 0}
    board = board_of(tmp_path, "d2")
    assert sorted(board.values()) == ["After item 0", "Crash item 0"]
    remote = run_git(bare, "log", "--format=%s", "main").splitlines()
    assert sum(1 for s in remote if "Crash item 0" in s) == 1


def test_two_daemons_share_one_board_through_the_configured_remote(tmp_path: Path) -> None:
    """`[beads] remote` in the daemons' configs: a bead made on one daemon is ready on the
    other, whose claim wins; the first daemon's own claim is then refused naming that host."""
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    daemons, namespaces = [], []
    try:
        for host in ("d1", "d2"):
            home = tmp_path / host
            home.mkdir()
            config = home / "config.toml"
            config.write_text(f'[beads]\nremote = "{bare}"\nhost = "{host}"\n')
            namespaces.append(home / "ns")
            daemons.append(start_daemon(home / "ns", config))
        one, two = namespaces
        bead = new_bead(one, 'new "Shared work" developer')
        assert bead in read(two, "agent/beads/ready")
        claim = anvilctl(two, "write", f"agent/beads/{bead}/ctl", stdin="claim user\n")
        assert claim.returncode == 0, claim.stderr
        assert read(two, f"agent/beads/{bead}/host").strip() == "d2"
        refused = anvilctl(one, "write", f"agent/beads/{bead}/ctl", stdin="claim user\n")
        assert refused.returncode != 0
        assert "already claimed" in refused.stderr, refused.stderr
        assert "d2" in refused.stderr, refused.stderr
        assert "in sync" in read(one, "agent/beads/sync")
    finally:
        for daemon in daemons:
            code, log = daemon.stop()
            assert code == 0, log
