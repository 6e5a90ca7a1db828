"""`anvilctl ls|read|write|rdwr|stat`: plan9port `9p` semantics over `anvilctl.ninep_client`.

    anvilctl [-a ADDRESS] [-A ANAME | -D NAME] [-n] ls [-l] PATH...
    anvilctl [...] read PATH | write [-l] PATH | rdwr PATH | stat PATH

Without ``-a`` the first path element names a service in the namespace directory (``agent/list``
is ``list`` on ``$NAMESPACE/agent``); with ``-a tcp!host!port`` (or ``unix!/path``) the whole
path is inside that server, ``-A`` the attach name (the TCP token); ``-D NAME`` takes both from
``[remotes.NAME]`` of anvild's user config. ``-n`` skips Tauth. The wire
sequences match plan9port's. Errors print the server's message, prefixed by command and path,
exit 1. Scripts run these in loops: only the client and `anvilctl.wire` are imported, and
`parse_args` reads plain command lines without argparse.
"""

from __future__ import annotations

import sys
import time
from types import SimpleNamespace

from anvilctl.ninep_client import CFid, Client, ClientError, dial, service_address
from anvilctl.wire import DMAPPEND, DMAUTH, DMDIR, DMEXCL, ORDWR, OREAD, OTRUNC, OWRITE, Stat

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterator, Sequence
    from typing import BinaryIO, TypeAlias

    Args: TypeAlias = argparse.Namespace | SimpleNamespace

__all__ = [
    "COMMANDS",
    "add_global_options",
    "add_subcommands",
    "failed",
    "named_daemon",
    "parse_args",
    "resolve_daemon",
    "run",
    "std_streams",
]

COMMANDS = ("ls", "read", "write", "rdwr", "stat")
_CHUNK = 4096  # plan9port's `9p` buffer: one Twrite per read(2) of at most this much


def std_streams(
    stdin: BinaryIO | None, stdout: BinaryIO | None, stderr: BinaryIO | None
) -> tuple[BinaryIO, BinaryIO, BinaryIO]:
    """The streams a command was given, or the process's binary stdin, stdout and stderr for
    those it was not (tests pass their own)."""
    return (stdin or sys.stdin.buffer, stdout or sys.stdout.buffer, stderr or sys.stderr.buffer)


def failed(what: str, exc: ClientError, stdout: BinaryIO, stderr: BinaryIO) -> int:
    """Report a command's failure as `anvilctl WHAT: MESSAGE` on stderr, after what it printed
    so far; the exit status (1)."""
    stdout.flush()
    stderr.write(f"anvilctl {what}: {exc}\n".encode())
    stderr.flush()
    return 1


def add_global_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-a", dest="address", help="dial this address (tcp!host!port or unix!/path)"
    )
    parser.add_argument("-A", dest="aname", default="", help="attach name (anvild: the token)")
    parser.add_argument(
        "-D",
        dest="daemon",
        metavar="NAME",
        help="the daemon [remotes.NAME] of anvild's user config names (its address and token)",
    )
    parser.add_argument("-n", dest="noauth", action="store_true", help="do not send Tauth")


def named_daemon(name: str) -> tuple[str, str | None]:
    """`[remotes.NAME]` of anvild's user config ($XDG_CONFIG_HOME/anvil/config.toml): the
    address and the token file (None: none given); `ValueError` says what is missing."""
    import os
    import tomllib

    home = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    path = os.path.join(home, "anvil", "config.toml")
    try:
        with open(path, "rb") as file:
            remotes = tomllib.load(file).get("remotes", {})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"daemon {name}: cannot read {path}: {exc}") from exc
    entry = remotes.get(name) if isinstance(remotes, dict) else None
    if not isinstance(entry, dict) or not isinstance(entry.get("address"), str):
        known = ", ".join(sorted(remotes)) if isinstance(remotes, dict) and remotes else "none"
        raise ValueError(
            f"daemon {name}: {path} has no [remotes.{name}] address (named there: {known})"
        )
    token = entry.get("token_file")
    return entry["address"], os.path.expanduser(token) if isinstance(token, str) else None


def resolve_daemon(args: Args) -> None:
    """`-D NAME`: set the address and attach name from the user config; `ValueError` says why
    not (with `-a`, or a token file that cannot be read)."""
    name = getattr(args, "daemon", None)
    if name is None:
        return
    if args.address is not None or args.aname:
        raise ValueError("-D names a daemon with its address and token: give no -a or -A with it")
    address, token_file = named_daemon(name)
    args.address = address
    if token_file is not None:
        try:
            with open(token_file, encoding="utf-8") as file:
                args.aname = file.read().strip()
        except OSError as exc:
            raise ValueError(f"daemon {name}: token file {token_file}: {exc.strerror}") from exc


class _Mount:
    """Resolve a command's PATH to (client, root fid, path inside the server)."""

    def __init__(self, args: Args) -> None:
        self.args = args

    def __call__(self, name: str) -> tuple[Client, CFid, str]:
        if self.args.address:
            address, path = self.args.address, name
        else:
            service, _, path = name.partition("/")
            if not service:
                raise ClientError(f"{name}: the path must start with a service name (agent/...)")
            address = service_address(service)
        client = Client(dial(address))
        try:
            root = client.mount(aname=self.args.aname, auth=not self.args.noauth)
        except BaseException:
            client.close()
            raise
        return client, root, path


def _mode_string(mode: int) -> str:
    # Plan 9 dirmodefmt: type letter, exclusive-use letter, then rwx for owner, group, other.
    kind = "d" if mode & DMDIR else "a" if mode & DMAPPEND else "A" if mode & DMAUTH else "-"
    excl = "l" if mode & DMEXCL else "-"
    rwx = "".join(
        ("r" if mode & (4 << s) else "-")
        + ("w" if mode & (2 << s) else "-")
        + ("x" if mode & (1 << s) else "-")
        for s in (6, 3, 0)
    )
    return kind + excl + rwx


def _dir_line(d: Stat) -> str:
    """stat(5) entry in plan9port's %D format (what `9p stat` prints)."""
    return (
        f"'{d.name}' '{d.uid}' '{d.gid}' '{d.muid}' "
        f"q ({d.qid.path:016x} {d.qid.version} {d.qid.type:02X}) "
        f"m {d.mode:#o} at {d.atime} mt {d.mtime} l {d.length} t {d.type} d {d.dev}"
    )


def _long_line(d: Stat) -> str:
    mtime = time.strftime("%b %d %H:%M", time.localtime(d.mtime))
    return f"{_mode_string(d.mode)} M {d.dev} {d.uid} {d.gid} {d.length} {mtime} {d.name}"


def _lines(stdin: BinaryIO) -> Iterator[bytes]:
    while line := stdin.readline():
        yield line


def _chunks(stdin: BinaryIO) -> Iterator[bytes]:
    read1: Callable[[int], bytes] = getattr(stdin, "read1", stdin.read)
    while chunk := read1(_CHUNK):
        yield chunk


def _stat(client: Client, root: CFid, path: str) -> Stat:
    """The stat of `path`, walked to and clunked again."""
    fid = client.walk(root, path)
    try:
        return fid.stat()
    finally:
        fid.clunk()


def _cmd_ls(mount: _Mount, args: Args, out: BinaryIO) -> None:
    for name in args.paths:
        client, root, path = mount(name)
        with client:
            d = _stat(client, root, path)
            if d.mode & DMDIR:
                fid = client.open(root, path, OREAD)
                try:
                    entries = sorted(fid.read_dir(), key=lambda e: e.name)
                finally:
                    fid.clunk()
            else:
                entries = [d]
            for e in entries:
                line = _long_line(e) if args.long else e.name
                out.write(line.encode() + b"\n")


def _cmd_read(mount: _Mount, args: Args, out: BinaryIO) -> None:
    client, root, path = mount(args.path)
    with client:
        fid = client.open(root, path, OREAD)
        while data := fid.read(_CHUNK):
            out.write(data)
            out.flush()
        fid.clunk()


def _cmd_write(mount: _Mount, args: Args, stdin: BinaryIO) -> None:
    client, root, path = mount(args.path)
    with client:
        fid = client.open(root, path, OWRITE | OTRUNC)
        wrote = False
        try:
            for piece in _lines(stdin) if args.lines else _chunks(stdin):
                wrote = True
                fid.write(piece)
            if not wrote:
                fid.write(b"")  # plan9port: empty stdin still sends one zero-length Twrite
        finally:
            fid.clunk()


def _cmd_rdwr(mount: _Mount, args: Args, stdin: BinaryIO, out: BinaryIO, err: BinaryIO) -> bool:
    client, root, path = mount(args.path)
    ok = True
    with client:
        fid = client.open(root, path, ORDWR)
        while True:
            fid.offset = 0
            try:
                data = fid.read(_CHUNK)
            except ClientError as exc:
                err.write(f"read: {exc}\n".encode())
                ok = False
            else:
                out.write(data + b"\n")
                out.flush()
            line = stdin.readline()
            if not line:
                break
            try:
                fid.write(line.rstrip(b"\n"))
            except ClientError as exc:
                err.write(f"write: {exc}\n".encode())
                ok = False
        fid.clunk()
    return ok


def _cmd_stat(mount: _Mount, args: Args, out: BinaryIO) -> None:
    client, root, path = mount(args.path)
    with client:
        out.write(_dir_line(_stat(client, root, path)).encode() + b"\n")


def add_subcommands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("ls", help="list files")
    p.add_argument("-l", dest="long", action="store_true", help="long listing")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p = sub.add_parser("read", help="copy a file to stdout")
    p.add_argument("path", metavar="PATH")
    p = sub.add_parser("write", help="copy stdin to a file")
    p.add_argument("-l", dest="lines", action="store_true", help="one write per line")
    p.add_argument("path", metavar="PATH")
    p = sub.add_parser("rdwr", help="alternate reads and line writes")
    p.add_argument("path", metavar="PATH")
    p = sub.add_parser("stat", help="print a file's stat entry")
    p.add_argument("path", metavar="PATH")


def parse_args(argv: Sequence[str]) -> SimpleNamespace | None:
    """``argv`` parsed exactly as `anvilctl.__main__.build_parser` would parse it, for the plain
    forms a script writes: ``[-a ADDR] [-A ANAME] [-n] COMMAND [-l] PATH...``. Anything else
    (``-h``, an option glued to its value, an argument starting with "-" in another place, a
    missing or extra PATH) gives None, and the caller parses with argparse, which also reports
    the errors. Scripts call these commands in loops; argparse is a measurable part of a run."""
    global_options = {"address": None, "aname": "", "daemon": None, "noauth": False}
    i = 0
    while i < len(argv) and argv[i] in ("-a", "-A", "-n"):
        if argv[i] == "-n":
            global_options["noauth"] = True
            i += 1
            continue
        if i + 1 == len(argv) or argv[i + 1].startswith("-"):
            return None
        global_options["address" if argv[i] == "-a" else "aname"] = argv[i + 1]
        i += 2
    if i == len(argv) or argv[i] not in COMMANDS:
        return None
    command, rest = argv[i], list(argv[i + 1 :])
    flag = command in ("ls", "write") and rest[:1] == ["-l"]
    if flag:
        del rest[0]
    if not rest or any(arg.startswith("-") for arg in rest):
        return None
    if command == "ls":
        return SimpleNamespace(**global_options, command=command, long=flag, paths=rest)
    if len(rest) != 1:
        return None
    if command == "write":
        return SimpleNamespace(**global_options, command=command, lines=flag, path=rest[0])
    return SimpleNamespace(**global_options, command=command, path=rest[0])


def run(
    args: Args,
    *,
    stdin: BinaryIO | None = None,
    stdout: BinaryIO | None = None,
    stderr: BinaryIO | None = None,
) -> int:
    """Run one parsed 9P command; return the exit status."""
    stdin, stdout, stderr = std_streams(stdin, stdout, stderr)
    mount = _Mount(args)
    target = " ".join(args.paths) if args.command == "ls" else args.path
    try:
        if args.command == "ls":
            _cmd_ls(mount, args, stdout)
        elif args.command == "read":
            _cmd_read(mount, args, stdout)
        elif args.command == "write":
            _cmd_write(mount, args, stdin)
        elif args.command == "rdwr":
            if not _cmd_rdwr(mount, args, stdin, stdout, stderr):
                return 1
        elif args.command == "stat":
            _cmd_stat(mount, args, stdout)
        else:  # pragma: no cover - argparse restricts the choices
            raise AssertionError(args.command)
    except ClientError as exc:
        return failed(f"{args.command} {target}", exc, stdout, stderr)
    stdout.flush()
    return 0
