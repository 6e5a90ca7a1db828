"""End to end: scripts/conductor with workers on two daemons sharing one bead board.

Two real `anvild` processes on this machine stand for two hosts: separate namespaces and data
directories, each listening on TCP with its own token, both with `[beads] remote` on one bare
repository in a tmp dir and one fake provider server. The conductor reaches them only over TCP
(`--daemon NAME=tcp!127.0.0.1!PORT --token-file NAME=PATH`), places each workflow session by
`agent/load`, and a kill -9 of one daemon mid-turn (either one) is followed by a re-run on the
survivor. scripts/fanout, DevReview and Planning spread their sessions over two such
daemons (by role with -p, else by load) and reach each session on its own daemon.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_sessions_e2e import FakeServer, anvilctl, ok, read
from tests.integration.test_workflows_e2e import models_config

ROOT = Path(__file__).resolve().parents[2]
CONDUCTOR = ROOT / "scripts" / "conductor"
RC = Path("/usr/lib/plan9/bin/rc")
TIMEOUT = 120.0

CHAIN = """\
name: spread
sessions:
  a: {role: planner, model: dev}
  b: {role: planner, model: rev}
steps:
  - id: one
    session: a
    prompt: "ONE: begin."
  - id: two
    needs: [one]
    session: b
    prompt: "TWO: after {{out.one}}"
  - id: three
    needs: [two]
    session: b
    prompt: "THREE: after {{out.two}}"
  - id: four
    needs: [three]
    session: a
    prompt: "FOUR: after {{out.three}}"
"""

ONE = {"model": "dev-model", "contains": "ONE: begin", "text": "uno"}
TWO = {"model": "rev-model", "contains": "TWO: after uno", "text": "dos"}
THREE = {"model": "rev-model", "contains": "THREE: after dos", "text": "tres"}
FOUR = {"model": "dev-model", "contains": "FOUR: after tres", "text": "cuatro"}


class Hosts:
    """A fake provider, a bare bead remote and two daemons (`d1`, `d2`) on TCP with tokens."""

    def __init__(self, tmp_path: Path, turns: list[dict[str, Any]]) -> None:
        self.tmp_path = tmp_path
        self.fake = FakeServer(tmp_path, turns)
        self.remote = tmp_path / "remote.git"
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(self.remote)], check=True)
        models = models_config(tmp_path, self.fake.url).read_text()
        self.work = tmp_path / "work"
        self.work.mkdir()
        (tmp_path / "workflow.yaml").write_text(CHAIN)
        self.daemons: dict[str, Anvild] = {}
        self.addresses: dict[str, str] = {}
        try:
            for name in ("d1", "d2"):  # one after the other: each has its own start-up time
                home = tmp_path / name
                home.mkdir()
                beads = f'[beads]\nremote = "{self.remote}"\nhost = "{name}"\n'
                (home / "config.toml").write_text(f"{models}\n{beads}")
                self.start(name)
        except BaseException:
            self.stop()
            raise

    def start(self, name: str) -> None:
        """Start (or restart) daemon `name` on a new TCP port."""
        home = self.tmp_path / name
        config = str(home / "config.toml")
        self.daemons[name] = daemon = Anvild(
            home / "ns", "--config", config, "--listen", "tcp!127.0.0.1!0"
        )
        found = re.search(r"tcp!127\.0\.0\.1!\d+", daemon.wait_serving())
        assert found is not None
        self.addresses[name] = found.group(0)

    def namespace(self, name: str) -> Path:
        return self.tmp_path / name / "ns"

    def argv(self, *extra: str) -> list[str]:
        """d1 by name ([remotes.d1] of the user config, as for the LLM conductor), d2 by
        address and token file."""
        config = self.tmp_path / "xdg-config" / "anvil" / "config.toml"
        if not config.exists():
            config.parent.mkdir(parents=True)
            token = self.namespace("d1") / "agent.token"
            address = self.addresses["d1"]
            config.write_text(f'[remotes.d1]\naddress = "{address}"\ntoken_file = "{token}"\n')
        token = self.namespace("d2") / "agent.token"
        argv = [sys.executable, str(CONDUCTOR), "--daemon", "d1"]
        argv += ["--daemon", f"d2={self.addresses['d2']}", "--token-file", f"d2={token}"]
        return [*argv, *extra, str(self.tmp_path / "workflow.yaml")]

    def env(self) -> dict[str, str]:
        # no $NAMESPACE: the conductor reaches the daemons only by their TCP addresses
        env = {k: v for k, v in os.environ.items() if k != "NAMESPACE"}
        env["XDG_CONFIG_HOME"] = str(self.tmp_path / "xdg-config")
        return env

    def conduct(self, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*extra),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=self.env(),
            cwd=self.work,
            check=False,
        )

    def aliases(self, name: str) -> list[str]:
        listing = ok(anvilctl(self.namespace(name), "read", "agent/list"))
        return [line.split("\t")[1] for line in listing.splitlines()]

    def beads(self, name: str, count: int = 0) -> dict[str, dict[str, str]]:
        """The board as daemon `name` shows it, once it has `count` beads (its `list` pulls
        first when its last pull is a second old): by title, each bead's status, host and
        result."""
        namespace = self.namespace(name)
        deadline = time.monotonic() + 15
        while len(read(namespace, "agent/beads/list").splitlines()) < count:
            assert time.monotonic() < deadline, f"{name} never pulled {count} beads"
            time.sleep(0.3)
        board = {}
        for line in read(namespace, "agent/beads/list").splitlines():
            bead = line.split("\t")[0]
            fields = {f: read(namespace, f"agent/beads/{bead}/{f}") for f in ("status", "host")}
            title = read(namespace, f"agent/beads/{bead}/title").strip()
            board[title] = {k: v.strip() for k, v in fields.items()}
            board[title]["result"] = read(namespace, f"agent/beads/{bead}/result")
        return board

    def load(self, name: str) -> dict[str, str]:
        text = read(self.namespace(name), "agent/load")
        return dict(line.split(" ", 1) for line in text.splitlines())

    def stop(self) -> None:
        for daemon in self.daemons.values():
            daemon.stop(signal.SIGKILL)
        self.fake.stop()


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    stuck = {**THREE, "text": "never", "chunk_delay": 60}
    hangs = {**FOUR, "text": "never", "chunk_delay": 60}
    # run `spread`: each step once; run `again`: its step three hangs once; run `third`: its
    # step four hangs once
    fanned = {"model": "fake-model", "contains": "FAN:", "text": "fanned", "repeat": True}
    again: list[dict[str, Any]] = [ONE, TWO, stuck, THREE, FOUR]
    third: list[dict[str, Any]] = [ONE, TWO, THREE, hangs, FOUR]
    made = Hosts(tmp_path, [ONE, TWO, THREE, FOUR, *again, *third, fanned])
    yield made
    made.stop()


def killed_mid_turn(
    hosts: Hosts,
    args: tuple[str, ...],
    requests: int,
    victim: str,
    check: Callable[[], None] | None = None,
) -> tuple[int, str]:
    """Run the conductor with `args` until the fake provider has `requests` more requests (the
    last one's turn hangs), `check()`, kill -9 daemon `victim`: the conductor's exit and stderr."""
    waited = len(hosts.fake.requests()) + requests
    run = subprocess.Popen(
        hosts.argv(*args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=hosts.env(),
        cwd=hosts.work,
    )
    try:
        url = f"{hosts.fake.url}/_fake/wait?requests={waited}"
        with urllib.request.urlopen(url, timeout=60) as r:
            assert json.load(r)["requests"] == waited
        if check is not None:
            check()
        hosts.daemons[victim].stop(signal.SIGKILL)
        _, err = run.communicate(timeout=TIMEOUT)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    return run.returncode, err


def test_a_workflow_on_two_daemons_completes_and_a_rerun_after_kill_9_redoes_no_completed_bead(
    hosts: Hosts,
) -> None:
    """One shared board, sessions placed by agent/load: a run completes with work on both
    daemons; a second run's daemon d2 is killed -9 mid-turn, and the re-run (d2 still given,
    unreachable) finishes on d1 without asking again for the beads completed on either; with
    d2 restarted, a third run loses d1, the daemon its beads were made on, and finishes on d2."""
    result = hosts.conduct("--keep")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "=== four ===\ncuatro\n"
    # a: the first placement, both idle (d1 first in order); b: d2, where this run has none
    assert hosts.aliases("d1") == ["spread-a"]
    assert hosts.aliases("d2") == ["spread-b"]
    for name in ("d1", "d2"):
        board = hosts.beads(name, 5)  # the same shared board on both
        hosts_of = {title.split(" ")[0]: bead["host"] for title, bead in board.items()}
        assert hosts_of == {"one": "d1", "two": "d2", "three": "d2", "four": "d1", "finish": "d1"}
        assert {bead["status"] for bead in board.values()} == {"completed"}
        assert board["three (workflow spread)"]["result"] == "tres\n"
    claims = subprocess.run(
        ["git", "-C", str(hosts.remote), "log", "--format=%s", "main"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert sum(1 for s in claims.splitlines() if s.startswith("claim ")) == 5
    # agent/load: the kept session, idle, and the host's figures
    load = hosts.load("d2")
    assert (load["running"], load["sessions"], load["state.idle"]) == ("0", "1", "1")
    assert int(load["cores"]) >= 1
    assert len(load["loadavg"].split()) == 3
    assert int(load["mem_available"]) <= int(load["mem_total"])

    # scripts/fanout spreads its sessions the same way: kept sessions are idle, so 2 and 2
    fanout = [str(ROOT / "scripts" / "fanout"), "-n", "4", "-m", "fake", "-r", "planner"]
    for name, address in hosts.addresses.items():
        token = hosts.namespace(name) / "agent.token"
        fanout += ["-d", f"{name}={address}", "-t", f"{name}={token}"]
    env = hosts.env()
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    fan = subprocess.run(
        [*fanout, "FAN: say it"], capture_output=True, text=True, timeout=TIMEOUT, env=env,
        cwd=hosts.work, check=False,
    )  # fmt: skip
    assert fan.returncode == 0, fan.stderr
    headers = [line.split() for line in fan.stdout.splitlines() if line.startswith("=== ")]
    assert [h[2].split("/")[0] for h in headers] == ["d1", "d2", "d1", "d2"]
    assert {h[3] for h in headers} == {"await"}
    assert fan.stdout.count("fanned\n") == 4
    assert hosts.aliases("d1") == ["spread-a"]  # the fanned-out sessions were killed
    # one daemon through ANVIL_9P: by address and token, or by name (anvilctl -D: [remotes.d1]
    # of the user config), in bash and in Plan 9's rc
    secret = (hosts.namespace("d2") / "agent.token").read_text().strip()
    fanout_sh, fanout_rc = [str(ROOT / "scripts" / "fanout")], [str(RC), f"{fanout[0]}.rc"]
    runs = [(fanout_sh, f"anvilctl -a {hosts.addresses['d2']} -A {secret}")]
    runs.append((fanout_rc if RC.exists() else fanout_sh, "anvilctl -D d1"))
    for script, ninep in runs:
        one = subprocess.run(
            [*script, "-n", "1", "-m", "fake", "FAN: one"], capture_output=True, text=True,
            timeout=TIMEOUT, env={**env, "ANVIL_9P": ninep}, cwd=hosts.work, check=False,
        )  # fmt: skip
        assert one.returncode == 0, (script, ninep, one.stderr)
        assert one.stdout.endswith("fanned\n"), one.stdout
    named = subprocess.run(
        [sys.executable, "-m", "anvilctl", "-D", "d1", "read", "load"], capture_output=True,
        text=True, env=env, check=False,
    )  # fmt: skip
    assert named.returncode == 0, named.stderr
    assert named.stdout.startswith("running 0\n")
    unknown = subprocess.run(
        [sys.executable, "-m", "anvilctl", "-D", "d7", "read", "load"], capture_output=True,
        text=True, env=env, check=False,
    )  # fmt: skip
    assert unknown.returncode == 2
    assert "has no [remotes.d7] address (named there: d1)" in unknown.stderr

    def running_on_d2() -> None:  # d2 has step three's request (its turn hangs): agent/load
        load = hosts.load("d2")
        assert (load["running"], load["state.running"]) == ("1", "1")

    # ONE, TWO and the hanging THREE of run `again`
    code, err = killed_mid_turn(
        hosts, ("--run", "again", "--place", "b=d2"), 3, "d2", running_on_d2
    )
    assert code == 1, err
    assert "two: bead two-workflow-" in err
    assert "claimed by d2/" in err
    before = len(hosts.fake.requests())
    second = hosts.conduct("--run", "again", "--place", "b=d2")
    assert second.returncode == 0, second.stderr
    assert second.stdout == "=== four ===\ncuatro\n"
    assert "daemon d2 (tcp!127.0.0.1!" in second.stderr
    assert "not reachable, left out" in second.stderr
    assert "session b: daemon d2 is not reachable; placing by load" in second.stderr
    # one (done on d1) and two (done on d2, now dead) are not asked again; three is redone on d1
    asked = [r["last_user_text"].split(":")[0] for r in hosts.fake.requests()[before:]]
    assert asked == ["THREE", "FOUR"]
    assert second.stderr.count("already completed") == 2
    board = {t: b for t, b in hosts.beads("d1").items() if t.endswith("(workflow again)")}
    assert len(board) == 5
    assert {bead["status"] for bead in board.values()} == {"completed"}
    assert board["two (workflow again)"]["host"] == "d2"
    assert board["three (workflow again)"]["host"] == "d1"
    assert board["three (workflow again)"]["result"] == "tres\n"

    # d2 back (it pulls the board); now the daemon that holds the board dies: d1, mid-turn
    hosts.start("d2")
    code, err = killed_mid_turn(hosts, ("--run", "third"), 4, "d1")  # FOUR hangs
    assert code == 1, err
    assert "four: bead four-workflow-" in err
    assert "claimed by d1/" in err
    before = len(hosts.fake.requests())
    second = hosts.conduct("--run", "third")
    assert second.returncode == 0, second.stderr
    assert second.stdout == "=== four ===\ncuatro\n"
    assert "daemon d1 (tcp!127.0.0.1!" in second.stderr
    asked = [r["last_user_text"].split(":")[0] for r in hosts.fake.requests()[before:]]
    assert asked == ["FOUR"]
    assert second.stderr.count("already completed") == 3
    board = {t: b for t, b in hosts.beads("d2").items() if t.endswith("(workflow third)")}
    assert {bead["status"] for bead in board.values()} == {"completed"}
    assert (board["one (workflow third)"]["host"], board["four (workflow third)"]["host"]) == (
        "d1",
        "d2",
    )


# -- the LLM conductor's start_session on another host -----------------------------------------


def test_a_conductor_session_starts_and_drives_a_reviewer_on_a_remote_daemon(
    tmp_path: Path,
) -> None:
    def cond(contains: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        call = {"name": name, "arguments": arguments}
        return {"model": "cond-model", "contains": contains, "tool_calls": [call]}

    fake = FakeServer(
        tmp_path,
        [
            cond("Coordinate", "start_session", {"role": "reviewer", "host": "nowhere"}),
            cond(
                "not a configured remote",
                "start_session",
                {"role": "reviewer", "name": "rev", "host": "d2"},
            ),
            cond("Started session", "send_prompt", {"session": "rev", "prompt": "Review it."}),
            cond("accepted", "wait_sessions", {"sessions": ["rev"]}),
            cond(" on d2: await", "read_out", {"session": "rev"}),
            cond("VERDICT: LGTM", "my_sessions", {}),
            cond("host=d2", "kill_session", {"session": "rev"}),
            {"model": "cond-model", "contains": "on d2.", "text": "Reviewed on d2: LGTM."},
            {"model": "fake-model", "contains": "Review it.", "text": "Fine.\nVERDICT: LGTM"},
        ],
    )
    models = models_config(tmp_path, fake.url).read_text()
    work = tmp_path / "work"
    work.mkdir()
    daemons = []
    try:
        (tmp_path / "d2").mkdir()
        config = tmp_path / "d2" / "config.toml"
        config.write_text(models)
        remote = Anvild(
            tmp_path / "d2" / "ns", "--config", str(config), "--listen", "tcp!127.0.0.1!0"
        )
        daemons.append(remote)
        found = re.search(r"tcp!127\.0\.0\.1!\d+", remote.wait_serving())
        assert found is not None
        (tmp_path / "d1").mkdir()
        config = tmp_path / "d1" / "config.toml"
        token = tmp_path / "d2" / "ns" / "agent.token"
        config.write_text(
            f'{models}\n[remotes.d2]\naddress = "{found.group(0)}"\ntoken_file = "{token}"\n'
        )
        here = Anvild(tmp_path / "d1" / "ns", "--config", str(config))
        daemons.append(here)
        here.wait_serving()
        d1, d2 = tmp_path / "d1" / "ns", tmp_path / "d2" / "ns"
        boss = ok(anvilctl(d1, "new", "role=conductor", "model=cond", cwd=work)).strip()
        ok(anvilctl(d1, "send", boss, "Coordinate a review.", cwd=work))
        assert ok(anvilctl(d1, "wait", boss)) == "await\n"
        assert ok(anvilctl(d1, "out", boss)) == "Reviewed on d2: LGTM.\n"
        requests = fake.requests()
        refusal = requests[1]["body"]["messages"][-1]["content"]
        assert "host 'nowhere' is not a configured remote daemon (d2)" in refusal
        # the reviewer ran on d2, named for its conductor on d1, and was killed from d1
        worker = next(r for r in requests if r["model"] == "fake-model")
        assert worker["last_user_text"] == "Review it."
        started = requests[2]["body"]["messages"][-1]["content"]
        found = re.search(
            r"Started session (\w+) \(alias rev\.(\w+), role reviewer\) on host d2", started
        )
        assert found is not None, started
        assert found.group(2) == boss
        listed = requests[-2]["body"]["messages"][-1]["content"]
        assert f"{found.group(1)}\talias=rev.{boss}\trole=reviewer\thost=d2" in listed
        assert requests[-1]["body"]["messages"][-1]["content"].startswith(
            f"Killed {found.group(1)}"
        )
        assert read(d2, "agent/list") == ""
        assert [r.split("\t")[1] for r in read(d1, "agent/list").splitlines()] == ["-"]
    finally:
        for daemon in daemons:
            daemon.stop(signal.SIGKILL)
        fake.stop()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--daemon", "d1=tcp!127.0.0.1!1", "--place", "x=d1"], "--place x=d1: x is no session"),
        (["--daemon", "d1=tcp!127.0.0.1!1", "--place", "a=d9"], "--place a=d9: no --daemon d9"),
        (["--daemon", "d1"], "--daemon d1: "),  # no [remotes.d1] in the user config
        (["--daemon", "d1=tcp!127.0.0.1!1"], "--daemon d1=tcp!127.0.0.1!1: no token: give"),
        (["--daemon", "d1=tcp!127.0.0.1!1", "--token-file", "d2=/x"], "no --daemon d2=ADDRESS"),
        (["-a", "unix!/x", "--daemon", "d1=unix!/y"], "-a/-A name one daemon"),
    ],
)
def test_conductor_refuses_bad_daemon_options_before_dialing(
    tmp_path: Path, args: list[str], message: str
) -> None:
    workflow = tmp_path / "workflow.yaml"
    workflow.write_text(CHAIN)
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    done = subprocess.run(
        [sys.executable, str(CONDUCTOR), *args, str(workflow)], capture_output=True, text=True,
        env=env, cwd=tmp_path, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert message in done.stderr


# -- DevReview and Planning on two daemons -----------------------------------------------------

SPREAD_TURNS: list[dict[str, Any]] = [
    {"model": "dev-model", "contains": "MULTI: build it", "text": "Built it."},
    {"model": "rev-model", "contains": "Built it.", "text": "Fine.\nVERDICT: LGTM"},
    {"model": "fake-model", "contains": "Research what", "text": "FACTS: one module."},
    {"model": "fake-model", "contains": "FACTS: one module.", "text": "PLAN: one step."},
    {"model": "fake-model", "contains": "PLAN: one step.", "text": "FINAL: one step."},
]


@pytest.fixture(scope="module")
def spread_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosts]:
    """Two daemons shared by the workflow-script tests below (started once: ~4 s)."""
    made = Hosts(tmp_path_factory.mktemp("spread"), SPREAD_TURNS)
    yield made
    made.stop()


def run_script(hosts: Hosts, script: str, daemon: str, token: str, *args: str) -> Any:
    """Run scripts/SCRIPT with each daemon as `DAEMON NAME=ADDR TOKEN NAME=FILE`; no
    $NAMESPACE, so a command that went to no daemon would fail."""
    argv = [str(ROOT / "scripts" / script), "-k"]
    for name, address in hosts.addresses.items():
        argv += [daemon, f"{name}={address}", token, f"{name}={hosts.namespace(name)}/agent.token"]
    env = hosts.env()
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    return subprocess.run(
        [*argv, *args], capture_output=True, text=True, timeout=TIMEOUT, env=env,
        cwd=hosts.work, check=False,
    )  # fmt: skip


def sessions_of(hosts: Hosts, name: str) -> dict[str, str]:
    """Daemon `name`'s live sessions (agent/list): id -> role; each is killed afterwards."""
    listing = ok(anvilctl(hosts.namespace(name), "read", "agent/list"))
    found = {line.split("\t")[0]: line.split("\t")[3] for line in listing.splitlines()}
    for session in found:
        ok(anvilctl(hosts.namespace(name), "kill", session))
    return found


def test_devreview_puts_the_reviewer_where_p_says_and_the_developer_by_load(
    spread_hosts: Hosts,
) -> None:
    done = run_script(
        spread_hosts, "DevReview", "-D", "-T", "-d", "dev", "-r", "rev", "-p", "reviewer=d2",
        "MULTI: build it",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "round 1: reviewer says lgtm" in done.stderr
    assert done.stdout.endswith("Fine.\nVERDICT: LGTM\n"), done.stdout
    found = re.search(r"developer d1/(\w+), reviewer d2/(\w+)", done.stderr)
    assert found is not None, done.stderr
    # -p reviewer=d2 counts against d2, so the developer goes to d1 by load
    assert sessions_of(spread_hosts, "d1") == {found.group(1): "developer"}
    assert sessions_of(spread_hosts, "d2") == {found.group(2): "reviewer"}


def test_planning_puts_a_pinned_stage_on_its_daemon_and_leaves_out_a_dead_one(
    spread_hosts: Hosts,
) -> None:
    dead = f"{spread_hosts.namespace('d1')}/agent.token"
    done = run_script(
        spread_hosts, "Planning", "-d", "-t", "-m", "fake", "-p", "editor=d2",
        "-d", "d3=tcp!127.0.0.1!1", "-t", f"d3={dead}", "Add", "caching.",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "FINAL: one step.\n"
    assert "daemon d3 (tcp!127.0.0.1!1) does not answer, left out" in done.stderr
    placed = dict(re.findall(r"(\w+) is session (\w+/\w+)", done.stderr))
    # editor pinned on d2 (one session there); research and engineering by load: d1 both
    assert {stage: where.split("/")[0] for stage, where in placed.items()} == {
        "research": "d1",
        "engineering": "d1",
        "editor": "d2",
    }
    on_d1 = sessions_of(spread_hosts, "d1")
    assert sorted(on_d1) == sorted(placed[s].split("/")[1] for s in ("research", "engineering"))
    assert sessions_of(spread_hosts, "d2") == {placed["editor"].split("/")[1]: "planner"}
    assert set(on_d1.values()) == {"planner"}


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["DevReview", "-D", "d1=unix!/x", "-p", "tester=d1"], 2, "is developer or reviewer"),
        (["DevReview", "-D", "d1=unix!/x", "-p", "reviewer=d9"], 2, "-p reviewer=d9: no -D d9="),
        (["DevReview", "-D", "d1=tcp!127.0.0.1!1"], 1, "-D d1: no token: give -T d1=FILE"),
        (["Planning", "-d", "d1=unix!/x", "-p", "review=d1"], 2, "research, engineering or editor"),
        (["Planning", "-d", "d1", "-p", "editor=d1"], 2, "-d wants NAME=ADDR, not d1"),
    ],
)
def test_workflow_scripts_refuse_bad_daemon_options(
    tmp_path: Path, argv: list[str], code: int, message: str
) -> None:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "ANVIL_9P": "anvilctl"}
    done = subprocess.run(
        [str(ROOT / "scripts" / argv[0]), *argv[1:], "task"], capture_output=True, text=True,
        env=env, cwd=tmp_path, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    assert done.returncode == code, done.stderr
    assert message in done.stderr
