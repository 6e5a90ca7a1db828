"""Benchmark: bead claims per second through a shared git remote, with 1, 3 and 10 daemons.

    .venv/bin/python bench/beads_remote.py [--daemons 1,3,10] [--beads 60]

A bare repository in a tmp dir holds `--beads` pending beads. Each "daemon" is an OS process
with its own clone and host name (a `BeadStore` with `remote=`, as `[beads] remote` makes it),
reaching the remote by path. Once all have opened, each claims ready beads (a random one each
time, from its last pull) until none is left: a claim that lost the race is refused and costs
its fetch and rebase. Reported: successful claims per second (all beads claimed, over the wall
time from the go to the last process's end), refused claims, claims withdrawn as busy (pushes
rejected beyond the store's retries), and it checks that every bead was claimed exactly once
on the remote and that every acknowledged claim is one of those.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from anvild.beads import BeadStore, NewBead

WORKER = r"""
import json, random, sys, time
from pathlib import Path
import trio
from anvild.beads import BeadConflict, BeadStore, BeadStoreError

async def main(repo, remote, host, go):
    store = BeadStore(Path(repo), remote=remote, host=host, pull_bound=0.0)
    await store.open()
    print("opened", flush=True)
    while not Path(go).exists():
        await trio.sleep(0.002)
    won = lost = busy = 0
    while True:
        await store.refresh()
        ready = store.ready()
        if not ready:
            break
        try:
            await store.claim(random.choice(ready).id, f"{host}-s", by="user")
            won += 1
        except BeadConflict:
            lost += 1
        except BeadStoreError:  # the board was busy beyond the store's retries
            busy += 1
    print(json.dumps({"won": won, "lost": lost, "busy": busy, "end": time.time()}), flush=True)
    store.close()

trio.run(main, *sys.argv[1:])
"""


async def seed(root: Path, bare: Path, beads: int) -> None:
    store = BeadStore(root / "seed", remote=str(bare), host="seed")
    await store.open()
    for n in range(beads):
        await store.create(NewBead(f"Work item {n}", "dev"), by="user")
    store.close()


def run(daemons: int, beads: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        bare = root / "remote.git"
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
        trio.run(seed, root, bare, beads)
        go = root / "go"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", WORKER, str(root / f"d{n}"), str(bare), f"d{n}", str(go)],
                stdout=subprocess.PIPE,
                text=True,
            )
            for n in range(daemons)
        ]
        try:
            for proc in procs:  # the store's log lines come first
                assert proc.stdout is not None
                while (line := proc.stdout.readline()) and line.strip() != "opened":
                    pass
            start = time.time()
            go.touch()
            results = []
            for proc in procs:
                out, _ = proc.communicate(timeout=600)
                results.append(json.loads([x for x in out.splitlines() if x[:1] == "{"][-1]))
        finally:
            for proc in procs:  # none is left waiting for the go
                proc.kill()
                proc.communicate()
        end = max(r["end"] for r in results)
        won = sum(r["won"] for r in results)
        lost = sum(r["lost"] for r in results)
        busy = sum(r["busy"] for r in results)
        log = subprocess.run(
            ["git", "-C", str(bare), "log", "--format=%s", "main"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        claims = [s for s in log.splitlines() if s.startswith("claim ")]
        assert won == beads == len(claims) == len({s.split()[1] for s in claims}), (won, claims)
        return {
            "claims_per_s": won / (end - start),
            "seconds": end - start,
            "refused": lost,
            "busy": busy,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--daemons", default="1,3,10")
    parser.add_argument("--beads", type=int, default=60)
    args = parser.parse_args()
    print(f"{'daemons':>8} {'claims/s':>9} {'seconds':>8} {'refused':>8} {'busy':>5}")
    for daemons in (int(d) for d in args.daemons.split(",")):
        r = run(daemons, args.beads)
        print(
            f"{daemons:>8} {r['claims_per_s']:>9.1f} {r['seconds']:>8.2f} {r['refused']:>8.0f} "
            f"{r['busy']:>5.0f}"
        )


if __name__ == "__main__":
    main()
