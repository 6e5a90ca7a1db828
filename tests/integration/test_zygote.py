"""The tests' zygote (tests/support/zygote.py): a forked `python -m anvilctl|anvild` is what an
exec'd one would be (cwd, environment, argv, standard streams, exit status, signals), and a
command it cannot reproduce is exec'd."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_daemon_cli import STARTUP_TIMEOUT, isolated_env
from tests.support import zygote

pytestmark = pytest.mark.skipif(
    os.environ.get(zygote.ENV_SWITCH) == "0", reason="ANVIL_TEST_ZYGOTE=0: nothing is forked"
)


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.fixture
def forks_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on, a command that is exec'd instead of forked fails the test."""
    assert zygote._Zygote.path() is not None  # the zygote is up (its own start is an exec)

    def execed(*args: object) -> None:
        raise AssertionError("exec'd, not forked from the zygote")

    monkeypatch.setattr(zygote._REAL_POPEN, "_execute_child", execed)


def test_a_forked_command_has_its_cwd_environment_streams_and_status(tmp_path: Path) -> None:
    env = {**isolated_env(tmp_path), "NAMESPACE": str(tmp_path / "nowhere")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "anvilctl", "write", "agent/ctl"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=env,
    )
    assert isinstance(proc, zygote.ForkingPopen)
    assert parent_of(proc.pid) != os.getpid()  # the zygote's child, not this process's
    out, err = proc.communicate(b"new\n", timeout=STARTUP_TIMEOUT)
    assert (proc.returncode, out) == (1, b"")
    assert err.decode() == (
        f"anvilctl write agent/ctl: anvild is not running (no socket at {tmp_path}/nowhere/agent)"
        ": start it with `anvild`\n"
    )
    assert "Traceback" not in err.decode()

    shown = subprocess.run(
        [sys.executable, "-m", "anvilctl", "--help"],
        capture_output=True,
        cwd=tmp_path,
        env=env,
        timeout=STARTUP_TIMEOUT,
        check=True,
    )
    assert shown.stdout.startswith(b"usage: anvilctl")
    assert shown.stderr == b""  # no warning about the zygote's own copy of the module


@pytest.mark.usefixtures("forks_only")
def test_a_forked_daemon_is_signalled_and_reaped_like_a_child(tmp_path: Path) -> None:
    namespace = tmp_path / "ns"
    proc = subprocess.Popen(
        [sys.executable, "-m", "anvild", "--namespace", str(namespace)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=isolated_env(tmp_path),
        start_new_session=True,
    )
    assert proc.stderr is not None
    try:
        assert os.getsid(proc.pid) == proc.pid  # start_new_session, as Popen gives it
        for line in proc.stderr:
            if b"serving " in line:
                break
        else:
            pytest.fail("the forked daemon did not serve")
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=STARTUP_TIMEOUT) == 0  # a clean stop
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()

    killed = subprocess.Popen(
        [sys.executable, "-m", "anvild", "--namespace", str(tmp_path / "ns2")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=isolated_env(tmp_path),
    )
    killed.kill()
    assert killed.wait(timeout=STARTUP_TIMEOUT) == -signal.SIGKILL


@pytest.mark.usefixtures("forks_only")
def test_a_missing_cwd_is_refused_as_popen_refuses_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as refused:
        subprocess.Popen([sys.executable, "-m", "anvilctl", "--help"], cwd=tmp_path / "gone")
    assert refused.value.filename == str(tmp_path / "gone")


def test_what_a_fork_cannot_reproduce_is_execed(tmp_path: Path) -> None:
    env = {**isolated_env(tmp_path), "NAMESPACE": str(tmp_path / "nowhere")}
    read = ["-m", "anvilctl", "read", "agent/list"]
    for args, kwargs in (
        ([sys.executable, *read], {"env": {**env, "PYTHONWARNINGS": "error"}}),  # read at start
        ([sys.executable, "-X", "dev", *read], {"env": env}),
        ([sys.executable, *read], {"env": env, "preexec_fn": os.getpid}),
    ):
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)  # type: ignore[call-overload]
        assert parent_of(proc.pid) == os.getpid()
        _, err = proc.communicate(timeout=STARTUP_TIMEOUT)
        assert proc.returncode == 1
        assert b"anvild is not running" in err
