"""Every case of docs/sandbox-escapes.md against the real sandbox, through the privilege drop.

The attacks run as one script per role (fast: one sandbox each), each line reporting whether the
attempt succeeded; the host is then inspected for what a write may have changed. The same script
runs once more as the sandbox uid *without* bwrap (the control), to show that each attack that
has a meaningful control does succeed when the sandbox is not there: the tests can fail.
"""

from __future__ import annotations

import contextlib
import os
import pty
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import attrs
import platformdirs
import pytest

from anvild.sandbox import ReadOnly, WorkspaceWrite
from anvild.sandbox.bwrap import DEFAULT_GID, DEFAULT_UID
from anvild.sandbox.confine import Sandbox
from anvild.sandbox.roles import load_role
from tests.sandbox.conftest import ROOT, give, make_repo, pids_with, run_in

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

KEY = "sk-anvil-test-" + "9" * 24


@attrs.frozen
class World:
    top: Path
    ws: Path  # a developer workspace: a git repository with a nested one
    bare: Path  # a workspace without .git or .anvil
    out: Path  # outside every workspace, writable by the sandbox uid
    home: Path
    tcp_port: int
    udp_port: int
    tag: str
    udp: socket.socket | None = attrs.field(default=None, eq=False)


def _attacks(w: World) -> list[tuple[str, str]]:
    """(name, shell snippet that exits 0 when the attack WORKED)."""
    out = w.out
    perl_sock = "perl -e 'socket(my $s, {f}, {t}, 0) or exit 1'"
    return [
        ("write_outside", f"echo pwned > {out}/target"),
        ("write_etc", "echo pwned > /etc/anvil-pwned"),
        ("write_usr", "echo pwned > /usr/anvil-pwned"),
        ("write_root", "echo pwned > /anvil-pwned"),
        ("file_symlink", "echo pwned > flink"),
        ("dir_symlink", "echo pwned > dlink/new"),
        ("new_symlink", f"ln -s {out} l2 && echo pwned > l2/new2"),
        ("hardlink_in", f"ln {out}/hl-src hl"),
        ("mv_out", f"mv movable {out}/moved"),
        ("git_config", "echo '[alias] x = !id' >> .git/config"),
        ("git_hook", "printf '#!/bin/sh\\nid\\n' > .git/hooks/pre-commit"),
        ("git_info", "echo '* filter=x' > .git/info/attributes"),
        ("nested_hook", "echo id > nested/.git/hooks/post-checkout"),
        ("nested_config", "echo x >> nested/.git/config"),
        ("anvil_config", "echo 'x = 1' >> .anvil/config.toml"),
        ("anvil_replace", "mv .anvil .anvil-old && ln -s /tmp .anvil"),
        ("git_replace", "mv .git .git-old && mkdir .git"),
        ("git_symlink", "mv .git .git-old2 && ln -s .git-old2 .git"),
        ("nested_git_replace", "mv nested/.git nested/.git-old"),
        ("read_ssh", f"cat {w.home}/.ssh/id_rsa | grep -q PRIVATE"),
        ("read_aws", f"grep -q secret {w.home}/.aws/credentials"),
        ("read_dotenv", "grep -q DOTENV_SECRET .env"),
        ("env_key", "env | grep -qi api_key"),
        ("read_config_dir", f"cat {w.home}/.config/anvil/config.toml"),
        ("read_data_dir", f"ls {w.home}/.local/share/anvil/trust.toml"),
        ("caps", "grep -Eq '^CapEff:[[:space:]]+0*[1-9a-f]' /proc/self/status"),
        ("no_nnp", "! grep -Eq '^NoNewPrivs:[[:space:]]+1' /proc/self/status"),
        ("remount_root", "mount -o remount,rw,bind / 2>/dev/null || mount -o remount,rw /"),
        ("nested_userns", "unshare -U -r -m sh -c 'mount -o remount,rw /usr && touch /usr/x'"),
        ("unshare_u", "unshare -U true"),
        ("setuid_bash", './suidbash -p -c \'[ "$(id -u)" = 0 ] || [ "$(id -ur)" = 0 ]\''),
        ("tcp_host", f"exec 3<>/dev/tcp/127.0.0.1/{w.tcp_port}"),
        # Judged on the host: bwrap brings up a loopback of the sandbox's own, so the send
        # itself succeeds; what matters is that the host's listener gets nothing.
        ("udp_host", f'echo "udp-$(basename "$PWD")" > /dev/udp/127.0.0.1/{w.udp_port}'),
        ("dns", "getent ahosts example.com"),
        (
            "abstract_unix",
            "perl -MIO::Socket::UNIX -e 'IO::Socket::UNIX->new(Peer => \"\\0anvil-"
            + w.tag
            + "\") or exit 1'",
        ),
        (
            "tmp_unix",
            f'perl -MIO::Socket::UNIX -e \'IO::Socket::UNIX->new(Peer => "/tmp/anvil-{w.tag}.sock")'
            " or exit 1'",
        ),
        (
            "run_unix",
            f'perl -MIO::Socket::UNIX -e \'IO::Socket::UNIX->new(Peer => "/run/anvil-{w.tag}.sock")'
            " or exit 1'",
        ),
        ("vsock", perl_sock.format(f=40, t=1)),
        ("vsock_high_bits", "perl -e 'my $r = syscall(41, (1 << 32) | 40, 1, 0); exit($r < 0)'"),
        ("netlink", perl_sock.format(f=16, t=3)),
        ("packet", perl_sock.format(f=17, t=3)),
        ("io_uring", "perl -e 'my $p = \"\\0\" x 120; exit(syscall(425, 1, $p) < 0)'"),
        # The bracket keeps the pattern from matching the grep's own command line.
        ("see_host_process", f"grep -qs 'sleeper-[{w.tag[0]}]{w.tag[1:]}' /proc/[0-9]*/cmdline"),
        ("signal_host_process", f"kill -0 $(cat {w.top}/sleeper.pid)"),
        ("tiocsti", "perl -e 'ioctl(STDIN, 0x5412, \"x\") or exit 1'"),
    ]


MUST_WORK = [
    ("write_workspace", 'echo ok > written && [ "$(cat written)" = ok ]'),
    ("dev_null", 'echo x > /dev/null && [ -z "$(cat /dev/null)" ]'),
    ("pipes_subprocesses", "[ \"$(echo a | tr a b | (cat; bash -c 'echo c'))\" = $'b\\nc' ]"),
    ("git_status", "git status --short >/dev/null"),
    ("tmp_private", "echo x > /tmp/private && [ -s /tmp/private ]"),
    # Private tmpfs: writable inside, gone afterwards (the host is checked below).
    ("home_private", 'echo pwned > "$HOME/anvil-pwned"'),
    ("host_tmp_private", "echo pwned > /tmp/anvil-$TAG"),
]
COMMIT = "git add written && git -c user.name=a -c user.email=a@b commit -q -m sandboxed"
# Controls that cannot succeed for the unsandboxed sandbox uid either (no meaningful control).
NO_CONTROL = {
    "write_etc",
    "write_usr",
    "write_root",
    "read_dotenv",
    "env_key",
    "caps",
    "remount_root",
    "packet",
    "dns",
    "signal_host_process",
    "tiocsti",
    "read_ssh",
    "read_aws",
    "read_config_dir",
    "read_data_dir",
    "io_uring",
    "no_nnp",
    "nested_userns",
}


def _script(checks: list[tuple[str, str]]) -> str:
    lines = ['cd "$PWD"']
    for name, snippet in checks:
        lines.append(
            f"if ( {snippet} ) >/dev/null 2>&1; then echo '{name} yes'; else echo '{name} no'; fi"
        )
    return "\n".join(lines)


def _results(stdout: str) -> dict[str, bool]:
    out = {}
    for line in stdout.splitlines():
        name, _, verdict = line.partition(" ")
        if verdict in ("yes", "no"):
            out[name] = verdict == "yes"
    return out


def _populate(w: World, ws: Path) -> None:
    make_repo(ws)
    make_repo(ws / "nested")
    (ws / ".anvil").mkdir()
    (ws / ".anvil" / "config.toml").write_text("# project\n")
    (ws / ".env").write_text("DOTENV_SECRET=1\n")
    (ws / "movable").write_text("stay\n")
    (ws / "tests").mkdir()
    (w.out / "target").write_text("original\n")
    (w.out / "hl-src").write_text("outside\n")
    (ws / "flink").symlink_to(w.out / "target")
    (ws / "dlink").symlink_to(w.out)
    give(ws)
    give(w.out)
    if ROOT:
        shutil.copy("/bin/bash", ws / "suidbash")
        os.chown(ws / "suidbash", 0, 0)
        os.chmod(ws / "suidbash", 0o4755)


@pytest.fixture(scope="module")
def world(base_dir: Path) -> Iterator[World]:
    tag = uuid.uuid4().hex[:10]
    top = base_dir / f"w-{tag}"
    top.mkdir()
    top.chmod(0o755)
    home = top / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text("aws_secret_access_key = secret\n")
    (home / ".config" / "anvil").mkdir(parents=True)
    (home / ".config" / "anvil" / "config.toml").write_text("# user config\n")
    (home / ".local" / "share" / "anvil").mkdir(parents=True)
    (home / ".local" / "share" / "anvil" / "trust.toml").write_text("# grants\n")
    give(home)
    w = World(top, top / "ws", top / "bare", top / "out", home, 0, 0, tag)
    w.out.mkdir()
    tcp = socket.socket()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    abstract = socket.socket(socket.AF_UNIX)
    tmp_sock = socket.socket(socket.AF_UNIX)
    run_sock = socket.socket(socket.AF_UNIX)
    sleeper = None
    saved = {k: os.environ.get(k) for k in ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME")}
    try:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(8)
        udp.bind(("127.0.0.1", 0))
        udp.setblocking(False)
        abstract.bind(f"\0anvil-{tag}")
        abstract.listen(8)
        for sock, path in (
            (tmp_sock, f"/tmp/anvil-{tag}.sock"),
            (run_sock, f"/run/anvil-{tag}.sock"),
        ):
            sock.bind(path)
            os.chmod(path, 0o777)
            sock.listen(8)
        w = attrs.evolve(w, tcp_port=tcp.getsockname()[1], udp_port=udp.getsockname()[1], udp=udp)
        drop = ["setpriv", f"--reuid={DEFAULT_UID}", f"--regid={DEFAULT_GID}", "--clear-groups"]
        sleeper = subprocess.Popen(
            [*(drop if ROOT else []), "bash", "-c", f"exec -a sleeper-{tag} sleep 300"]
        )
        (top / "sleeper.pid").write_text(str(sleeper.pid))
        os.environ["HOME"] = str(home)
        os.environ.pop("XDG_CONFIG_HOME", None)
        os.environ.pop("XDG_DATA_HOME", None)
        yield w
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if sleeper is not None:
            sleeper.kill()
            sleeper.wait()
        for sock in (tcp, udp, abstract, tmp_sock, run_sock):
            sock.close()
        for p in (f"/tmp/anvil-{tag}.sock", f"/run/anvil-{tag}.sock", f"/tmp/anvil-{tag}"):
            with contextlib.suppress(OSError):
                os.unlink(p)


@attrs.frozen
class Outcome:
    results: dict[str, bool]
    stdout: str
    ws: Path


def _run_role(
    world: World, role_name: str, policy: ReadOnly | WorkspaceWrite, name: str
) -> Outcome:
    ws = world.top / name
    out_backup = world.out
    _populate(world, ws)
    checks = [
        *[(n, c.replace("$TAG", world.tag)) for n, c in MUST_WORK],
        ("git_add_only", "git add movable"),
        ("commit", COMMIT),
        *_attacks(world),
    ]
    primary, replica = pty.openpty()
    try:
        done = run_in(policy, load_role(role_name), ws, _script(checks), stdin=replica)
    finally:
        os.close(primary)
        os.close(replica)
    assert out_backup == world.out
    return Outcome(_results(done.stdout), done.stdout, ws)


@pytest.fixture(scope="module")
def developer(world: World) -> Outcome:
    os.environ["OPENAI_API_KEY"] = KEY
    try:
        return _run_role(world, "developer", WorkspaceWrite(network=False), "dev")
    finally:
        del os.environ["OPENAI_API_KEY"]


@pytest.fixture(scope="module")
def control(world: World) -> dict[str, bool]:
    """The same attacks as the sandbox uid with no sandbox (and no no_new_privs)."""
    if not ROOT:
        pytest.skip("the control runs the attacks as another uid: needs root")
    ws = world.top / "control"
    world = attrs.evolve(world, out=world.top / "control-out")
    world.out.mkdir()
    _populate(world, ws)
    prefix = ["setpriv", f"--reuid={DEFAULT_UID}", f"--regid={DEFAULT_GID}", "--clear-groups"]
    done = subprocess.run(
        [*prefix, "bash", "-c", _script(_attacks(world))],
        cwd=ws,
        env={"PATH": "/usr/bin:/bin", "HOME": str(world.home)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return _results(done.stdout)


ATTACK_NAMES = [name for name, _ in _attacks(World(Path("/x"), *[Path("/x")] * 4, 1, 1, "t"))]


HOST_SIDE = {"udp_host"}


@pytest.mark.parametrize("name", sorted(set(ATTACK_NAMES) - HOST_SIDE))
def test_attack_is_blocked(developer: Outcome, name: str) -> None:
    assert developer.results[name] is False, developer.stdout


@pytest.mark.parametrize("name", sorted(set(ATTACK_NAMES) - NO_CONTROL))
def test_attack_works_without_the_sandbox(control: dict[str, bool], name: str) -> None:
    assert control[name] is True, control


@pytest.mark.parametrize("name", [n for n, _ in MUST_WORK] + ["commit", "git_add_only"])
def test_developer_must_work(developer: Outcome, name: str) -> None:
    assert developer.results[name] is True, developer.stdout


def test_udp_to_the_host_never_arrives(
    world: World, developer: Outcome, request: pytest.FixtureRequest
) -> None:
    if ROOT:  # the control sends one from the same uid without the sandbox
        request.getfixturevalue("control")
    assert world.udp is not None
    received = []
    with contextlib.suppress(BlockingIOError):
        while True:
            received.append(world.udp.recv(100).strip())
    assert b"udp-dev" not in received
    if ROOT:
        assert b"udp-control" in received


def test_host_unchanged_by_the_developer(world: World, developer: Outcome) -> None:
    ws = developer.ws
    assert (world.out / "target").read_text() == "original\n"
    assert not (world.out / "new").exists()
    assert not (world.out / "new2").exists()
    assert not (world.out / "moved").exists()
    assert (ws / "movable").read_text() == "stay\n"
    assert not (ws / "hl").exists()
    assert not Path(f"/tmp/anvil-{world.tag}").exists()
    assert not (world.home / "anvil-pwned").exists()
    assert "alias" not in (ws / ".git" / "config").read_text()
    assert not (ws / ".git" / "hooks" / "pre-commit").exists()
    assert not (ws / ".git" / "info" / "attributes").exists()
    assert not (ws / "nested" / ".git" / "hooks" / "post-checkout").exists()
    assert (ws / ".anvil" / "config.toml").read_text() == "# project\n"
    assert (ws / ".anvil").is_dir()
    assert not (ws / ".anvil").is_symlink()
    assert (ws / ".git").is_dir()
    assert not (ws / ".git").is_symlink()
    assert (ws / "written").read_text() == "ok\n"
    assert (
        "sandboxed"
        in subprocess.run(
            ["git", "-c", "safe.directory=*", "log", "--oneline"],
            cwd=ws,
            capture_output=True,
            text=True,
        ).stdout
    )
    assert not Path("/etc/anvil-pwned").exists()


@pytest.mark.parametrize("role", ["reviewer", "planner"])
@pytest.mark.parametrize("policy", [ReadOnly(), WorkspaceWrite()])
def test_reviewer_and_planner_cannot_write_or_commit(
    world: World, role: str, policy: ReadOnly | WorkspaceWrite
) -> None:
    ws = world.top / f"{role}-{type(policy).__name__}"
    _populate(world, ws)
    head = (ws / ".git" / "HEAD").read_text()
    index = (ws / ".git" / "index").read_bytes()
    script = (
        "echo x > README; echo rc1=$?; git add README; echo rc2=$?; "
        "git -c user.name=a -c user.email=a@b commit -q --allow-empty -m x; echo rc3=$?; "
        "git status --short >/dev/null; echo rc4=$?; touch .git/objects/x; echo rc5=$?"
    )
    done = run_in(policy, load_role(role), ws, script)
    assert "rc1=1" in done.stdout
    assert "rc2=128" in done.stdout
    assert "rc3=0" not in done.stdout
    assert "rc4=0" in done.stdout  # reading works
    assert "rc5=1" in done.stdout
    assert (ws / ".git" / "HEAD").read_text() == head
    assert (ws / ".git" / "index").read_bytes() == index


def test_tester_commits_tests_only(world: World) -> None:
    ws = world.top / "tester"
    _populate(world, ws)
    script = (
        "echo t > tests/test_x.py && echo w1=ok; echo x > README || echo w2=refused; "
        "git add tests/test_x.py && git -c user.name=a -c user.email=a@b commit -q -m t "
        "&& echo commit=ok; echo x >> .git/config || echo cfg=refused"
    )
    done = run_in(WorkspaceWrite(), load_role("tester"), ws, script)
    for word in ("w1=ok", "w2=refused", "commit=ok", "cfg=refused"):
        assert word in done.stdout, done.stdout + done.stderr
    assert (ws / "README").read_text() == "hello\n"


def test_missing_git_and_anvil_cannot_be_created(world: World) -> None:
    bare = world.top / "bare"
    bare.mkdir()
    give(bare)
    script = (
        "mkdir .git 2>/dev/null && echo git=created; "
        "mkdir .anvil/x 2>/dev/null && echo anvil=created;"
        " ln -s /tmp .git 2>/dev/null && echo link=created; echo fine > ok && echo ok=1"
    )
    done = run_in(WorkspaceWrite(), load_role("developer"), bare, script)
    assert "created" not in done.stdout
    assert "ok=1" in done.stdout
    # The mount points were removed afterwards: the workspace is as it was, plus `ok`.
    assert sorted(p.name for p in bare.iterdir()) == ["ok"]
    # The control: without the sandbox the same uid creates them.
    if ROOT:
        subprocess.run(
            [
                "setpriv",
                f"--reuid={DEFAULT_UID}",
                f"--regid={DEFAULT_GID}",
                "--clear-groups",
                "mkdir",
                ".git",
            ],
            cwd=bare,
            check=True,
        )


def test_network_on_reaches_the_host(world: World) -> None:
    ws = world.top / "net"
    _populate(world, ws)
    done = run_in(
        WorkspaceWrite(network=True),
        load_role("developer"),
        ws,
        f"exec 3<>/dev/tcp/127.0.0.1/{world.tcp_port} && echo connected; "
        "perl -e 'socket(my $s, 40, 1, 0) or exit 1' || echo vsock=denied",
    )
    assert "connected" in done.stdout
    assert "vsock=denied" in done.stdout  # seccomp holds with the network on too


def test_daemon_dirs_hidden_even_when_home_is_bound(world: World) -> None:
    ws = world.top / "homebound"
    _populate(world, ws)
    role = attrs.evolve(load_role("developer"), read_only=("{HOME}",))
    config_dir = platformdirs.user_config_path("anvil")
    assert world.home in config_dir.parents
    done = run_in(
        WorkspaceWrite(),
        role,
        ws,
        f"cat {config_dir}/config.toml; ls {world.home}/.ssh; cat {world.home}/.aws/credentials; "
        f"ls {world.home}/.local/share/anvil; echo listed",
    )
    assert "listed" in done.stdout
    assert "user config" not in done.stdout
    assert "PRIVATE" not in done.stdout
    assert "id_rsa" not in done.stdout
    assert "secret" not in done.stdout
    assert "trust.toml" not in done.stdout


def _daemon_code(ws: Path, script: str) -> str:
    """A stand-in daemon: launches `script` exactly as the bash tool does, then waits."""
    command = ("bash", "-c", script)
    return (
        "import subprocess, sys\n"
        "from pathlib import Path\n"
        "from anvild.sandbox import WorkspaceWrite\n"
        "from anvild.sandbox.confine import Sandbox\n"
        f"launch = Sandbox(WorkspaceWrite()).prepare({command!r}, Path({str(ws)!r}))\n"
        "subprocess.Popen(launch.argv, env=launch.env, pass_fds=launch.pass_fds, cwd='/')\n"
        "print('started', flush=True)\n"
        "sys.stdin.read()\n"
    )


def _argv0_endswith(marker: str, suffix: str) -> bool:
    for pid in pids_with(marker):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(suffix.encode()):
                return True
    return False


@pytest.mark.parametrize("moment", ["during-setup", "while-running"])
def test_process_tree_dies_when_the_daemon_dies(world: World, marker: str, moment: str) -> None:
    """SIGKILL of the daemon, while bwrap is still setting the sandbox up (bwrap's own
    parent-death signals are not armed yet: this leaked the sandbox) or once the command and a
    process that left its session run. Everything carrying the marker must be gone: the
    supervisor, setpriv/bwrap, the sandbox's init and everything in its pid namespace."""
    ws = world.top / f"daemon-death-{moment}"
    ws.mkdir()
    give(ws)
    script = (
        f"(setsid bash -c 'exec -a {marker}-escaped sleep 300' &); exec -a {marker}-cmd sleep 300"
    )
    daemon = subprocess.Popen(
        [sys.executable, "-c", _daemon_code(ws, script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert daemon.stdout is not None
        assert daemon.stdout.readline().strip() == "started"
        wanted = ["bwrap"] if moment == "during-setup" else [f"{marker}-cmd", f"{marker}-escaped"]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if all(_argv0_endswith(marker, w) for w in wanted):
                break
            time.sleep(0.002)
        else:
            pytest.fail(f"never saw {wanted} start")
    finally:
        daemon.kill()
        daemon.wait()
        assert daemon.stdin is not None
        daemon.stdin.close()
        assert daemon.stdout is not None
        daemon.stdout.close()
    deadline = time.monotonic() + 5
    while pids_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = {pid: Path(f"/proc/{pid}/cmdline").read_bytes()[:120] for pid in pids_with(marker)}
    assert left == {}


def test_the_sandbox_outlives_the_thread_that_started_it(world: World, marker: str) -> None:
    """The daemon spawns from worker threads (trio's exit after ten idle seconds). A parent-death
    signal fires when the forking *thread* exits: with `setpriv --pdeathsig` straight under the
    daemon every command running longer than that was killed. The supervisor in front has no
    parent-death signal; it watches the daemon's lifeline instead."""
    ws = world.top / "thread-death"
    ws.mkdir()
    give(ws)
    launch = Sandbox(WorkspaceWrite()).prepare(
        ("bash", "-c", f"exec -a {marker} bash -c 'sleep 1.5; echo survived'"), ws
    )
    started: list[subprocess.Popen[bytes]] = []

    def spawn() -> None:
        started.append(
            subprocess.Popen(
                launch.argv,
                env=launch.env,
                pass_fds=launch.pass_fds,
                cwd=launch.cwd,
                stdout=subprocess.PIPE,
            )
        )
        time.sleep(0.5)  # then the thread exits, while the command still runs

    with launch:
        spawner = threading.Thread(target=spawn)
        spawner.start()
        spawner.join()
        out, _ = started[0].communicate(timeout=30)
        assert launch.verdict(started[0].returncode, "") is None
    assert (started[0].returncode, out) == (0, b"survived\n")
