"""`anvilctl new|send|wait|out|kill|models|sessions|attach|diff|undo`: session commands over 9P.

    anvilctl [-a ADDRESS] [-A ANAME] [-n] new [model=M] [cwd=D] [role=R] [alias=A] ...
    anvilctl [...] send [--wait] ID TEXT...|-       anvilctl [...] wait ID [--timeout T]
    anvilctl [...] out|kill ID    models [--no-header]    sessions [--all]    attach ID
    anvilctl [...] diff ID [TURN]    undo ID [--force]    (agent/ID/turns/, undo on its ctl)

Each is a few reads and writes on `agent/` (DESIGN section 4): `new` reads the id back on the
ctl fid; `send` writes `in` on one open (a refusal fails the clunk and the command); `wait` reads
`wait`, then `outcome`, and exits with `anvilctl -p`'s status for it (`--timeout`: exit 1);
`out` reads the last answer (to the end: `await` -> `idle`); `sessions` reads the per-session
files pipelined (`read_small_files`). Paths follow `anvilctl.ninep_cli`; errors print the
server's message and exit 1, a mistyped session name adds the closest names. Only the 9P client
is imported (scripts call these in loops); `attach` lives in `anvilctl.attach`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import difflib
import os
import re
import shutil
from collections.abc import Sequence
from typing import BinaryIO, NamedTuple

from anvilctl.ninep_cli import failed, std_streams
from anvilctl.ninep_client import CFid, Client, ClientError, ConnectError, ServerError, mount_agent
from anvilctl.wire import IOHDRSZ, ORDWR, OREAD, OTRUNC, OWRITE

__all__ = ["COMMANDS", "add_subcommands", "run"]

COMMANDS = ("new", "send", "wait", "out", "kill", "models", "sessions", "attach", "diff", "undo")
_CHUNK = 8192


class WaitTimedOut(ClientError):
    """`wait --timeout` gave up."""


def _connect(args: argparse.Namespace) -> tuple[Client, CFid]:
    """A fresh connection and its root fid (`agent/`)."""
    return mount_agent(args.address, aname=args.aname, auth=not args.noauth)


def _open(args: argparse.Namespace, path: str, mode: int) -> tuple[Client, CFid]:
    """`path` (relative to `agent/`) opened on a fresh connection."""
    client, root = _connect(args)
    try:
        return client, client.open(root, path, mode)
    except BaseException:
        client.close()
        raise


def _read_all(fid: CFid) -> bytes:
    parts = []
    while data := fid.read(_CHUNK):
        parts.append(data)
    return b"".join(parts)


# What `new` on agent/ctl takes (anvild.session.manager NEW_KEYS and NEW_FLAGS; a test keeps the
# two in step: importing the manager here would load the daemon's layers for every command).
NEW_FLAGS = ("ephemeral", "headless")
NEW_USAGE = (
    "model=M cwd=DIR role=R alias=A sandbox=S max_steps=N permission=MODE budget=TOKENS "
    "approver=ID|ALIAS|user from=ID|ALIAS|latest ephemeral headless"
)


def _new(args: argparse.Namespace, out: BinaryIO) -> None:
    words = list(args.words)
    for word in words:
        if word not in NEW_FLAGS and "=" not in word:
            raise ClientError(f"{word!r} is not key=value, ephemeral or headless; use {NEW_USAGE}")
    # from=ID: the old session's cwd unless one is given; from=latest: this directory's latest.
    if not any(word.startswith("cwd=") for word in words) and not any(
        word.startswith("from=") and word != "from=latest" for word in words
    ):
        words.append(f"cwd={os.getcwd()}")
    client, fid = _open(args, "ctl", ORDWR)
    with client:
        fid.write(" ".join(["new", *words]).encode())
        session_id = fid.pread(_CHUNK, 0).decode().strip()
        fid.clunk()
    if not session_id:
        raise ClientError("the daemon answered no session id; read agent/ctl's errors above")
    out.write(session_id.encode() + b"\n")


def _send(args: argparse.Namespace, stdin: BinaryIO, out: BinaryIO, err: BinaryIO) -> int:
    text = stdin.read() if args.text == ["-"] else " ".join(args.text).encode()
    if not text.strip():
        raise ClientError("the prompt is empty; give TEXT or pipe it with `-`")
    client, root = _connect(args)
    with client:
        fid = client.open(root, f"{args.id}/in", OWRITE | OTRUNC)
        try:
            fid.write(text)
        finally:
            fid.clunk()  # the daemon takes the prompt here; a refusal fails the clunk
        if not args.wait:
            return 0
        # Opened after the clunk: this wait counts the prompt just taken.
        state, outcome = _wait_for_turns(client, root, args.id, None)
    out.write(state)
    return _turn_status(f"send {args.id}", outcome, err)


def _wait(args: argparse.Namespace, out: BinaryIO, err: BinaryIO) -> int:
    client, root = _connect(args)
    with client:
        state, outcome = _wait_for_turns(client, root, args.id, args.timeout)
    out.write(state)
    return _turn_status(f"wait {args.id}", outcome, err)


def _wait_for_turns(
    client: Client, root: CFid, session: str, timeout: float | None
) -> tuple[bytes, str | None]:
    """Block on `SESSION/wait` (at most `timeout` seconds); the state it answered and the
    session's `outcome` line (None when it cannot be read: a daemon without the file)."""
    fid = client.open(root, f"{session}/wait", OREAD)
    if timeout is not None:
        client.sock.settimeout(timeout)
    try:
        state = _read_all(fid)
    except ClientError as exc:
        if isinstance(exc.__cause__, TimeoutError):
            raise WaitTimedOut(
                f"still busy after {timeout:g} s; wait again or read agent/{session}/state"
            ) from exc
        raise
    fid.clunk()
    try:
        outcome: str | None = _read_path(client, root, f"{session}/outcome")
    except ServerError:
        outcome = None
    return state, outcome


def outcome_status(line: str | None) -> int:
    """The exit status for an `outcome` line: `anvilctl -p`'s for its first word (0 for done,
    1 for a word the table lacks); 0 when no turn has ended (`-`) or the line is unknown
    (None: the daemon has no `outcome` file)."""
    words = (line or "").split(maxsplit=1)
    if not words or words[0] == "-":
        return 0
    from anvilctl.headless import EXIT_CODES, EXIT_ERROR  # a dozen stdlib modules: only here

    return EXIT_CODES.get(words[0], EXIT_ERROR)


def _turn_status(what: str, outcome: str | None, err: BinaryIO) -> int:
    """The exit status of a wait that saw `outcome`; anything but done is said on stderr
    (`anvilctl wait ID: turn ended: error HttpError: ...`)."""
    status = outcome_status(outcome)
    if status != 0 and outcome is not None:
        from anvilctl.headless import plain  # a provider's message must not drive the terminal

        err.write(f"anvilctl {what}: turn ended: {plain(outcome.strip())}\n".encode())
    return status


def _kill(args: argparse.Namespace) -> None:
    if not args.id or args.id.split() != [args.id]:
        raise ClientError(f"{args.id!r} is not a session id or alias (one word, no blanks)")
    client, fid = _open(args, "ctl", OWRITE)
    with client:
        try:
            fid.write(f"kill {args.id}".encode())  # a refusal fails this write
        finally:
            fid.clunk()


def _undo(args: argparse.Namespace, out: BinaryIO) -> None:
    """`undo [force]` on the session's ctl; prints what the daemon answered."""
    client, fid = _open(args, f"{args.id}/ctl", ORDWR)
    with client:
        fid.write(b"undo force" if args.force else b"undo")  # a refusal fails this write
        answer = fid.pread(_CHUNK, 0)
        fid.clunk()
    out.write(answer if answer.endswith(b"\n") or not answer else answer + b"\n")


def _suggestion(args: argparse.Namespace, name: str, error: str) -> str | None:
    """For a name that is neither the id nor the alias of a listed session: the listed names
    closest to it, or (unless `error` says so already) that there is no such session; None when
    it is listed (the failure was something else) or the listing cannot be read."""
    try:
        client, root = _connect(args)
        with client:
            listing = _read_path(client, root, "list")
    except ClientError:
        return None
    names = []
    for line in listing.splitlines():
        names += [f for f in line.split("\t")[:2] if f and f != "-" and f not in names]
    if name in names:
        return None
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    if close:
        return f"did you mean {' or '.join(close)}?"
    if "no session" in error:
        return None
    return "no session has that id or alias (`anvilctl sessions --all` lists them)"


def _models(args: argparse.Namespace, out: BinaryIO) -> None:
    if args.no_header:
        _read_file(args, "models", out)
        return
    client, fid = _open(args, "models", OREAD)
    with client:
        text = _read_all(fid).decode(errors="replace")
        fid.clunk()
    out.write(format_models(text).encode())


def _read_file(args: argparse.Namespace, path: str, out: BinaryIO) -> None:
    client, fid = _open(args, path, OREAD)
    with client:
        while data := fid.read(_CHUNK):
            out.write(data)
            out.flush()
        fid.clunk()  # after a read to the end: `out` moves await to idle


class SessionRow(NamedTuple):
    """One session as `anvilctl sessions` shows it (`created` is None if it could not be read)."""

    id: str
    alias: str
    state: str
    role: str
    model: str
    cwd: str
    created: dt.datetime | None
    first_prompt: str
    usage: str = "-"  # as `usage_text` shows it
    outcome: str = "-"  # as `outcome_word` shows it


def age_text(seconds: float) -> str:
    """A short age: `42s`, `3m`, `2h`, `5d` (whole units, rounded down; never negative)."""
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def parse_created(text: str) -> dt.datetime | None:
    """The `created` file (RFC 3339 UTC), or None when it is not one."""
    try:
        stamp = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return stamp if stamp.tzinfo is not None else None


_USAGE_RE = re.compile(r"(\d+)/(\d+) \(([0-9.]+)%\)(?: compact at [0-9.]+%)?")


def _tokens(count: int) -> str:
    for unit, size in (("M", 1_000_000), ("k", 1000)):
        if count >= size:
            return f"{count / size:.1f}".removesuffix(".0") + unit
    return str(count)


def usage_text(text: str | None) -> str:
    """The `usage` file (`17426/200000 (8.7%) compact at 85%`, `-` before any turn) as the
    table shows it:
    `17.4k/200k 8.7%`; `-` when there is none."""
    match = _USAGE_RE.fullmatch((text or "").strip())
    if match is None:
        return "-"
    used, window, percent = match.groups()
    return f"{_tokens(int(used))}/{_tokens(int(window))} {percent}%"


def outcome_word(text: str | None) -> str:
    """The `outcome` file (`error HttpError: HTTP 401: ...`) as the table shows it: its first
    word, the outcome (`error`); `-` before any turn ended or when it could not be read."""
    words = (text or "").split(maxsplit=1)
    return words[0] if words else "-"


def format_models(text: str) -> str:
    """`agent/models` (alias, provider, model, window, key present; tab-separated) as a table
    under a header row, its columns aligned."""
    table = [["ALIAS", "PROVIDER", "MODEL", "WINDOW", "KEY"]]
    table += [line.split("\t") for line in text.splitlines() if line.strip()]
    columns = max(len(cells) for cells in table)
    table = [cells + [""] * (columns - len(cells)) for cells in table]
    widths = [max(len(cells[i]) for cells in table) for i in range(columns)]
    return "".join(
        "  ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True)).rstrip() + "\n"
        for cells in table
    )


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def format_sessions(
    rows: Sequence[SessionRow], now: dt.datetime, *, show_cwd: bool = False, width: int = 100
) -> str:
    """The `anvilctl sessions` table: a header, then one aligned line per session; the prompt
    column takes what is left of `width` (at least 20 characters)."""
    header = ["ID", "ALIAS", "STATE", "OUTCOME", "ROLE", "MODEL", "USAGE", "AGE"]
    header += ["CWD"] if show_cwd else []
    table = [header]
    for row in rows:
        age = "-" if row.created is None else age_text((now - row.created).total_seconds())
        cells = [row.id, row.alias, row.state, row.outcome, row.role, row.model, row.usage, age]
        table.append([*cells, *([row.cwd] if show_cwd else [])])
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    used = sum(widths) + 2 * len(widths)
    room = max(20, width - used)
    prompts = ["PROMPT", *(_cut(row.first_prompt, room) for row in rows)]
    lines = []
    for cells, prompt in zip(table, prompts, strict=True):
        padded = "  ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True))
        lines.append(f"{padded}  {prompt}".rstrip() + "\n")
    return "".join(lines)


def _read_path(client: Client, root: CFid, path: str) -> str:
    """Walk, open, read to the end, clunk."""
    fid = client.open(root, path, OREAD)
    try:
        data = _read_all(fid)
    finally:
        fid.clunk()
    return data.decode(errors="replace")


_WINDOW = 32  # files per pipelined batch: bounds what either side buffers
_FIRST_FID = 1 << 16  # above every fid the client hands out on this connection


def read_small_files(client: Client, root: CFid, paths: Sequence[str]) -> list[str | None]:
    """Read small snapshot files (one read each), pipelined: each batch of files goes out as
    one write of Twalk, Topen, Tread, Tclunk per file, each with its own tag and fid, and the
    replies are matched by tag. On anvild these requests are answered inline and in order
    (anvild.ninep.server), so a batch costs one round trip, not four per file. A file that
    cannot be read (its session ended; an older daemon without it) gives None."""
    # The full codec (69 attrs classes, 0.2 s to import) only for `sessions`: `new`, `send`,
    # `wait` and `out`, which scripts and tests run by the hundred, start without it.
    from anvild.ninep import messages as m
    from anvild.ninep.errors import ProtocolError
    from anvild.ninep.framing import FrameReader

    results: list[str | None] = []
    frames = FrameReader(1 << 24)
    count = min(_CHUNK, client.msize - IOHDRSZ)
    for start in range(0, len(paths), _WINDOW):
        batch: list[m.Message] = []
        reads = []
        for index, path in enumerate(paths[start : start + _WINDOW]):
            fid, tag = _FIRST_FID + index, 1 + 4 * index
            names = tuple(p for p in path.split("/") if p)
            batch += [
                m.Twalk(tag, root.fid, fid, names),
                m.Topen(tag + 1, fid, OREAD),
                m.Tread(tag + 2, fid, 0, count),
                m.Tclunk(tag + 3, fid),
            ]
            reads.append(tag + 2)
        replies: dict[int, m.Message] = {}
        try:
            client.sock.sendall(b"".join(m.encode(msg, client.dialect) for msg in batch))
            while len(replies) < len(batch):
                frame = frames.next_frame()
                if frame is None:
                    data = client.sock.recv(65536)
                    if not data:
                        raise ConnectError("the server closed the connection")
                    frames.feed(data)
                    continue
                reply = m.decode(frame, client.dialect)
                replies[reply.tag] = reply
        except OSError as exc:
            raise ConnectError(f"connection lost: {exc}") from exc
        except ProtocolError as exc:
            raise ClientError(f"bad reply from the server: {exc}") from exc
        for tag in reads:
            answer = replies.get(tag)
            text = answer.data.decode(errors="replace") if isinstance(answer, m.Rread) else None
            results.append(text)
    return results


def _same_dir(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def _sessions(args: argparse.Namespace, out: BinaryIO, err: BinaryIO) -> None:
    here = os.getcwd()
    client, root = mount_agent(args.address, aname=args.aname, auth=not args.noauth)
    with client:
        chosen = []
        for line in _read_path(client, root, "list").splitlines():
            fields = [("" if f == "-" else f) for f in line.split("\t")]
            if len(fields) >= 6 and fields[0] and (args.all or _same_dir(fields[5], here)):
                chosen.append(fields[:6])
        names = ("created", "first_prompt", "usage", "outcome")
        paths = [f"{fields[0]}/{name}" for fields in chosen for name in names]
        texts = read_small_files(client, root, paths)
    rows = []
    for (sid, alias, state, role, model, cwd), created, first, usage, outcome in zip(
        chosen, *(texts[i :: len(names)] for i in range(len(names))), strict=True
    ):
        if created is None and first is None:
            continue  # it ended since the listing
        prompt = (first or "").strip()
        stamp = None if created is None else parse_created(created)
        row = SessionRow(
            sid,
            alias or "-",
            state,
            role,
            model,
            cwd,
            stamp,
            prompt or "-",
            usage_text(usage),
            outcome_word(outcome),
        )
        rows.append(row)
    if not rows:
        where = "the daemon" if args.all else here
        err.write(f"no sessions in {where}; `anvilctl sessions --all` lists every one\n".encode())
        return
    width = shutil.get_terminal_size().columns if out.isatty() else 100
    now = dt.datetime.now(dt.UTC)
    out.write(format_sessions(rows, now, show_cwd=args.all, width=width).encode())


def _on_session(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help: str
) -> argparse.ArgumentParser:
    """A subcommand on one session: its first positional argument is the session's id."""
    parser = sub.add_parser(name, help=help)
    parser.add_argument("id", metavar="ID", help="the session's id or alias")
    return parser


def add_subcommands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("new", help="start a session; prints its id")
    p.add_argument(
        "words",
        nargs="*",
        metavar="KEY=VALUE",
        help=f"{NEW_USAGE} (cwd defaults to the current directory; from=ID|ALIAS starts from "
        "that session's conversation, live or exited, with its cwd, role, model and sandbox "
        "unless given; from=latest: this directory's latest session; the daemon checks the keys "
        "and values)",
    )
    p = _on_session(sub, "send", "send a prompt to a session")
    p.add_argument(
        "--wait",
        action="store_true",
        help="then wait for the turn as `wait` does (prints the state; exits with the turn's "
        "outcome status)",
    )
    p.add_argument("text", nargs="+", metavar="TEXT", help="the prompt, or - to read stdin")
    p = _on_session(
        sub,
        "wait",
        "wait until a session has handled its prompts; prints the state, exits with the last "
        "turn's outcome status (0 done, 1 error, 2 max_steps, ... as anvilctl -p)",
    )
    p.add_argument("--timeout", type=float, metavar="T", help="give up after T seconds (exit 1)")
    _on_session(sub, "out", "print a session's last answer")
    _on_session(sub, "kill", "end a session (kill ID on agent/ctl)")
    p = _on_session(sub, "diff", "print what a turn changed in the files (a unified diff)")
    p.add_argument("turn", nargs="?", metavar="TURN", help="the turn's number (default: the last)")
    p = _on_session(
        sub,
        "undo",
        "take back the files' changes of a session's last turn (refused if they were edited "
        "since and do not merge)",
    )
    p.add_argument("--force", action="store_true", help="overwrite later edits that do not merge")
    p = sub.add_parser("models", help="list the models sessions can use")
    p.add_argument(
        "--no-header",
        action="store_true",
        help="print agent/models as it is: tab-separated, no header row (for scripts)",
    )
    p = sub.add_parser("sessions", help="list this directory's sessions (first prompt, age)")
    p.add_argument("--all", action="store_true", help="every session, whatever its cwd")
    p = _on_session(sub, "attach", "talk to a session interactively (anvilctl.attach)")
    p.add_argument(
        "-v", "--verbose", action="store_true", help="show every tool result in full (/verbose)"
    )


def run(
    args: argparse.Namespace,
    *,
    stdin: BinaryIO | None = None,
    stdout: BinaryIO | None = None,
    stderr: BinaryIO | None = None,
) -> int:
    """Run one parsed session command; return the exit status."""
    stdin, stdout, stderr = std_streams(stdin, stdout, stderr)
    if args.command == "attach":
        from anvilctl import attach  # readline and the terminal: only for this command

        return attach.run(args)
    named = getattr(args, "id", None)
    what = args.command if named is None else f"{args.command} {named}"
    status = 0
    try:
        if args.command == "new":
            _new(args, stdout)
        elif args.command == "send":
            status = _send(args, stdin, stdout, stderr)
        elif args.command == "wait":
            status = _wait(args, stdout, stderr)
        elif args.command == "out":
            _read_file(args, f"{args.id}/out", stdout)
        elif args.command == "kill":
            _kill(args)
        elif args.command == "diff":
            turn = args.turn or "last"
            if turn != "last" and not turn.isdigit():
                raise ClientError(f"{turn!r} is not a turn number (1, 2, ...) or last")
            _read_file(args, f"{args.id}/turns/{turn}/diff", stdout)
        elif args.command == "undo":
            _undo(args, stdout)
        elif args.command == "models":
            _models(args, stdout)
        elif args.command == "sessions":
            _sessions(args, stdout, stderr)
        else:  # pragma: no cover - argparse restricts the choices
            raise AssertionError(args.command)
    except ServerError as exc:
        hint = None if named is None else _suggestion(args, named, str(exc))
        return failed(what, ClientError(f"{exc}; {hint}") if hint else exc, stdout, stderr)
    except ClientError as exc:
        return failed(what, exc, stdout, stderr)
    stdout.flush()
    return status
