"""`anvilctl new|send|wait|out|models`: the session commands, each a few 9P file operations.

    anvilctl [-a ADDRESS] [-A ANAME] [-n] new [model=M] [cwd=D] [role=R] [alias=A] [sandbox=S]
                                                                          [ephemeral]
    anvilctl [...] send ID TEXT...|-     one prompt (`-`: read it from stdin)
    anvilctl [...] wait ID [--timeout T]
    anvilctl [...] out ID
    anvilctl [...] models

What each does on the `agent/` tree (DESIGN section 4):

- `new` writes `new ...` to `agent/ctl` and reads the same fid, which answers the new session's
  id; it prints the id. `cwd` defaults to the current directory.
- `send` writes the prompt to `agent/ID/in` on one open; the daemon takes it when the fid is
  clunked (a refusal, e.g. an exited session, fails the clunk and so the command).
- `wait` reads `agent/ID/wait`: it returns once every prompt sent before it has been handled
  and no turn runs, and prints the state (`await`, `idle`, `error`, ...). With `--timeout T` it
  gives up after T seconds and exits 1.
- `out` reads `agent/ID/out`, the last answer; reading it to the end moves `await` to `idle`.
- `models` reads `agent/models`: alias, provider, model, window, whether its key is present.

Paths follow the 9P commands' rules (`anvilctl.ninep_cli`): without `-a` the service `agent` in
the namespace directory; with `-a ADDRESS` the files at the root of that server (`-A`: the
attach name, the token over TCP). Errors print the server's message and exit 1.

Only the 9P client is imported (these commands run in scripts' loops, like the 9P commands).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import BinaryIO

from anvilctl.ninep_client import CFid, Client, ClientError, dial, service_address
from anvild.ninep.constants import ORDWR, OREAD, OTRUNC, OWRITE

__all__ = ["COMMANDS", "add_subcommands", "run"]

COMMANDS = ("new", "send", "wait", "out", "models")
SERVICE = "agent"
_CHUNK = 8192


class WaitTimedOut(ClientError):
    """`wait --timeout` gave up."""


def _open(args: argparse.Namespace, path: str, mode: int) -> tuple[Client, CFid]:
    """`path` (relative to `agent/`) opened on a fresh connection."""
    address = args.address or service_address(SERVICE)
    client = Client(dial(address))
    try:
        root = client.mount(aname=args.aname, auth=not args.noauth)
        return client, client.open(root, path, mode)
    except BaseException:
        client.close()
        raise


def _read_all(fid: CFid) -> bytes:
    parts = []
    while data := fid.read(_CHUNK):
        parts.append(data)
    return b"".join(parts)


def _new(args: argparse.Namespace, out: BinaryIO) -> None:
    words = list(args.words)
    for word in words:
        if word != "ephemeral" and "=" not in word:
            raise ClientError(
                f"{word!r} is not key=value or ephemeral; "
                "use model=M cwd=D role=R alias=A sandbox=S ephemeral"
            )
    if not any(word.startswith("cwd=") for word in words):
        words.append(f"cwd={os.getcwd()}")
    client, fid = _open(args, "ctl", ORDWR)
    with client:
        fid.write(" ".join(["new", *words]).encode())
        session_id = fid.pread(_CHUNK, 0).decode().strip()
        fid.clunk()
    if not session_id:
        raise ClientError("the daemon answered no session id; read agent/ctl's errors above")
    out.write(session_id.encode() + b"\n")


def _send(args: argparse.Namespace, stdin: BinaryIO) -> None:
    text = stdin.read() if args.text == ["-"] else " ".join(args.text).encode()
    if not text.strip():
        raise ClientError("the prompt is empty; give TEXT or pipe it with `-`")
    client, fid = _open(args, f"{args.id}/in", OWRITE | OTRUNC)
    with client:
        try:
            fid.write(text)
        finally:
            fid.clunk()  # the daemon takes the prompt here; a refusal fails the clunk


def _wait(args: argparse.Namespace, out: BinaryIO) -> None:
    client, fid = _open(args, f"{args.id}/wait", OREAD)
    with client:
        if args.timeout is not None:
            client.sock.settimeout(args.timeout)
        try:
            state = _read_all(fid)
        except ClientError as exc:
            if isinstance(exc.__cause__, TimeoutError):
                raise WaitTimedOut(
                    f"still busy after {args.timeout:g} s; wait again or read agent/{args.id}/state"
                ) from exc
            raise
        fid.clunk()
    out.write(state)


def _read_file(args: argparse.Namespace, path: str, out: BinaryIO) -> None:
    client, fid = _open(args, path, OREAD)
    with client:
        while data := fid.read(_CHUNK):
            out.write(data)
            out.flush()
        fid.clunk()  # after a read to the end: `out` moves await to idle


def add_subcommands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("new", help="start a session; prints its id")
    p.add_argument(
        "words",
        nargs="*",
        metavar="KEY=VALUE",
        help="model=M cwd=D (default: the current directory) role=R alias=A sandbox=S, "
        "and the word ephemeral",
    )
    p = sub.add_parser("send", help="send a prompt to a session")
    p.add_argument("id", metavar="ID", help="the session's id or alias")
    p.add_argument("text", nargs="+", metavar="TEXT", help="the prompt, or - to read stdin")
    p = sub.add_parser("wait", help="wait until a session has handled its prompts")
    p.add_argument("id", metavar="ID", help="the session's id or alias")
    p.add_argument("--timeout", type=float, metavar="T", help="give up after T seconds (exit 1)")
    p = sub.add_parser("out", help="print a session's last answer")
    p.add_argument("id", metavar="ID", help="the session's id or alias")
    sub.add_parser("models", help="list the models sessions can use")


def run(
    args: argparse.Namespace,
    *,
    stdin: BinaryIO | None = None,
    stdout: BinaryIO | None = None,
    stderr: BinaryIO | None = None,
) -> int:
    """Run one parsed session command; return the exit status."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    stderr = stderr or sys.stderr.buffer
    what = args.command if args.command in ("new", "models") else f"{args.command} {args.id}"
    try:
        if args.command == "new":
            _new(args, stdout)
        elif args.command == "send":
            _send(args, stdin)
        elif args.command == "wait":
            _wait(args, stdout)
        elif args.command == "out":
            _read_file(args, f"{args.id}/out", stdout)
        elif args.command == "models":
            _read_file(args, "models", stdout)
        else:  # pragma: no cover - argparse restricts the choices
            raise AssertionError(args.command)
    except ClientError as exc:
        stdout.flush()
        stderr.write(f"anvilctl {what}: {exc}\n".encode())
        stderr.flush()
        return 1
    stdout.flush()
    return 0
