"""Debian's diod tools (9P2000.L) against a fresh `anvild` over TCP, the token as attach name.

`diodls` and `diodcat` are third-party clients with habits of their own (Tversion "9P2000.L",
Tauth expecting Rlerror ENOENT, Tgetattr, Treaddir, walks from an open directory fid). They are
installed by the Makefile (Debian package `diod`); these tests fail, rather than skip, when they
are missing, because `make test` must exercise them.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from anvild import __version__
from tests.integration.test_daemon_cli import Anvild

TIMEOUT = 20


def diod_tool(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if path is None:
        pytest.fail(f"{name} not found: install Debian's diod package (make setup does)")
    return path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    namespace = tmp_path_factory.mktemp("diod") / "ns"
    daemon = Anvild(namespace, "--listen", "tcp!127.0.0.1!0")
    line = daemon.wait_serving("serving ")  # the startup line names every listener
    match = re.search(r", tcp!127\.0\.0\.1!(\d+)", line)
    assert match, line
    token = (namespace / "agent.token").read_text().strip()
    yield f"127.0.0.1:{match.group(1)}", token
    code, log = daemon.stop()
    assert code == 0, log


def run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [diod_tool(tool), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def test_diodls_lists_the_root_with_the_token(served: tuple[str, str]) -> None:
    server, token = served
    out = run("diodls", "-s", server, "-a", token, "-l", "/")
    assert (out.returncode, out.stderr) == (0, "")
    rows = {line.split()[-1]: line.split() for line in out.stdout.splitlines()}
    assert set(rows) == {
        ".",
        "..",
        "ctl",
        "list",
        "load",
        "version",
        "events",
        "models",
        "roles",
        "sandbox-roles",
        "scripts",
        "beads",
        "budget",
        "convoys",
        "user",
    }
    assert rows["."][0].startswith("d")
    assert rows["ctl"][0].startswith("-rw-")
    assert rows["version"][0].startswith("-r--")
    # columns: mode nlink user group size date... name; generated files report length 0
    assert rows["version"][2] == pwd.getpwuid(os.getuid()).pw_name
    assert rows["version"][4] == "0"


def test_diodcat_reads_version(served: tuple[str, str]) -> None:
    server, token = served
    out = run("diodcat", "-s", server, "-a", token, "version")
    assert (out.returncode, out.stdout, out.stderr) == (0, f"anvild {__version__}\n", "")


def test_diodcat_reads_an_empty_list(served: tuple[str, str]) -> None:
    server, token = served
    out = run("diodcat", "-s", server, "-a", token, "list")
    assert (out.returncode, out.stdout) == (0, "")


@pytest.mark.parametrize("aname", [None, "", "wrong-token"])
def test_without_the_token_the_attach_is_refused(
    served: tuple[str, str], aname: str | None
) -> None:
    server, _token = served
    args = ["-s", server, "/"] if aname is None else ["-s", server, "-a", aname, "/"]
    out = run("diodls", *args)
    assert out.returncode != 0
    assert "error attaching" in out.stderr
    assert "Permission denied" in out.stderr  # EACCES: 9P2000.L carries only the errno
    assert "ctl" not in out.stdout


def test_diodcat_of_a_missing_file_fails(served: tuple[str, str]) -> None:
    server, token = served
    out = run("diodcat", "-s", server, "-a", token, "nonexistent")
    assert out.returncode != 0
    assert "No such file or directory" in out.stderr


def test_attach_as_another_uid_is_refused(served: tuple[str, str]) -> None:
    server, token = served
    out = run("diodls", "-s", server, "-a", token, "-u", str(os.getuid() + 4242), "/")
    assert out.returncode != 0
    assert "Permission denied" in out.stderr
