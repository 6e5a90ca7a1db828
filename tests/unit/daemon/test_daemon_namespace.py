"""`anvild.daemon.namespace`: the namespace directory, its checks, the pid lock, the token."""

from __future__ import annotations

import os
import pwd
import socket
import stat
from pathlib import Path

import pytest

from anvild.daemon.namespace import (
    NamespaceError,
    ServiceFiles,
    default_namespace,
    prepare_namespace,
    read_or_create_token,
)

ME = pwd.getpwuid(os.getuid()).pw_name


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"NAMESPACE": "/run/ns"}, "/run/ns"),
        ({"NAMESPACE": "/run/ns", "DISPLAY": ":5"}, "/run/ns"),
        ({}, f"/tmp/ns.{ME}.:0"),
        ({"DISPLAY": ""}, f"/tmp/ns.{ME}.:0"),
        ({"DISPLAY": ":0.0"}, f"/tmp/ns.{ME}.:0"),  # plan9port canonicalises :0.0 to :0
        ({"DISPLAY": ":1.1"}, f"/tmp/ns.{ME}.:1.1"),
        ({"DISPLAY": "host:10.0"}, f"/tmp/ns.{ME}.host:10"),
        ({"DISPLAY": "/tmp/launch/:0"}, f"/tmp/ns.{ME}._tmp_launch_:0"),
    ],
)
def test_default_namespace_matches_plan9port(environ: dict[str, str], expected: str) -> None:
    assert default_namespace(environ) == Path(expected)


def test_prepare_creates_the_directory_0700(tmp_path: Path) -> None:
    ns = tmp_path / "ns"
    old = os.umask(0)
    try:
        prepare_namespace(ns)
    finally:
        os.umask(old)
    assert stat.S_IMODE(ns.stat().st_mode) == 0o700
    assert prepare_namespace(ns) == ns  # an existing good one is accepted


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702, 0o720])
def test_prepare_refuses_a_writable_directory(tmp_path: Path, mode: int) -> None:
    ns = tmp_path / "ns"
    ns.mkdir()
    ns.chmod(mode)
    with pytest.raises(NamespaceError, match=rf"mode {mode:04o}.*chmod 700 {ns}"):
        prepare_namespace(ns)


@pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")
def test_prepare_refuses_a_strangers_directory(tmp_path: Path) -> None:
    ns = tmp_path / "ns"
    ns.mkdir(mode=0o700)
    os.chown(ns, 65534, 65534)
    with pytest.raises(
        NamespaceError, match=r"uid 65534\), not to you .*Choose another with \$NAMESPACE"
    ):
        prepare_namespace(ns)


def test_prepare_refuses_a_symlink_and_a_file(tmp_path: Path) -> None:
    target = tmp_path / "real"
    target.mkdir(mode=0o700)
    link = tmp_path / "ns"
    link.symlink_to(target)
    with pytest.raises(NamespaceError, match="symbolic link"):
        prepare_namespace(link)
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(NamespaceError, match="not a directory"):
        prepare_namespace(f)


def test_prepare_says_when_the_parent_is_missing(tmp_path: Path) -> None:
    with pytest.raises(NamespaceError, match="parent does not exist"):
        prepare_namespace(tmp_path / "no" / "ns")


def test_claim_writes_the_pid_and_release_cleans_up(tmp_path: Path) -> None:
    files = ServiceFiles(prepare_namespace(tmp_path / "ns"))
    files.claim()
    assert files.pid_path.read_text() == f"{os.getpid()}\n"
    files.socket_path.touch()  # as if bound
    files.release()
    files.release()  # idempotent
    assert not files.pid_path.exists()
    assert not files.socket_path.exists()


def test_a_second_claim_is_refused_with_the_holders_pid(tmp_path: Path) -> None:
    ns = prepare_namespace(tmp_path / "ns")
    first = ServiceFiles(ns)
    first.claim()
    try:
        with pytest.raises(NamespaceError, match=rf"another anvild \(pid {os.getpid()}\)"):
            ServiceFiles(ns).claim()
    finally:
        first.release()
    ServiceFiles(ns).claim()  # free again once released


def test_a_stale_socket_is_replaced(tmp_path: Path) -> None:
    files = ServiceFiles(prepare_namespace(tmp_path / "ns"))
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(files.socket_path))
    dead.close()  # the file stays, nobody listens: connect is refused
    files.claim()
    try:
        assert not files.socket_path.exists()
    finally:
        files.release()


def test_a_live_socket_is_not_taken_over(tmp_path: Path) -> None:
    files = ServiceFiles(prepare_namespace(tmp_path / "ns"))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as live:
        live.bind(str(files.socket_path))
        live.listen(1)
        with pytest.raises(NamespaceError, match="already answers"):
            files.claim()
        assert files.socket_path.exists()
    ServiceFiles(files.namespace).claim()  # the refusal did not keep the lock


def test_a_non_socket_in_the_way_is_refused(tmp_path: Path) -> None:
    files = ServiceFiles(prepare_namespace(tmp_path / "ns"))
    files.socket_path.write_text("mine")
    with pytest.raises(NamespaceError, match="not a socket"):
        files.claim()
    assert files.socket_path.read_text() == "mine"


def test_token_is_created_0600_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "agent.token"
    token = read_or_create_token(path)
    assert len(token) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == token + "\n"
    assert read_or_create_token(path) == token


def test_a_token_is_hex_so_no_command_line_takes_it_for_an_option(tmp_path: Path) -> None:
    tokens = {read_or_create_token(tmp_path / f"agent{i}.token") for i in range(50)}
    assert len(tokens) == 50
    assert all(len(t) == 64 and set(t) <= set("0123456789abcdef") for t in tokens)


@pytest.mark.parametrize("damage", ["mode", "content", "leading dash"])
def test_a_damaged_token_file_is_replaced(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "agent.token"
    token = read_or_create_token(path)
    if damage == "mode":
        path.chmod(0o644)
    elif damage == "content":
        path.write_text("short\n")
    else:  # an older daemon's token_urlsafe could begin with "-"
        token = "-" + "A" * 42
        path.write_text(token + "\n")
    fresh = read_or_create_token(path)
    assert fresh != token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
