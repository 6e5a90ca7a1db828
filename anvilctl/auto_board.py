"""`anvilctl auto`'s side of the daemon's files: its sessions, its convoy and its beads.

Each call is one short 9P connection to the `agent` service (the `-a`/`-A`/`-n` options as
everywhere): `new` on `ctl` for a session, `kill` when its turn is over, `new` on `convoys/ctl`
and `beads/ctl`, and a bead's `claim`, `complete` and `release`. A refusal is `BoardError`
with the daemon's message. Words are quoted as the ctl files parse them (double quotes, with
`\\"` and `\\\\`).
"""

from __future__ import annotations

from typing import Final

from anvilctl.ninep_client import ClientError, ServerError, mount_agent
from anvilctl.wire import ORDWR, OREAD, OWRITE

_CHUNK: Final = 8192


class BoardError(Exception):
    """The daemon refused (`answered`) or could not be reached; the message says
    which."""

    def __init__(self, message: str, *, answered: bool = False) -> None:
        super().__init__(message)
        self.answered = answered


def quote(word: str) -> str:
    """`word` as one quoted word of a ctl line."""
    return '"' + " ".join(word.split()).replace("\\", "\\\\").replace('"', '\\"') + '"'


class Board:
    def __init__(self, address: str | None, aname: str, auth: bool) -> None:
        self.address, self.aname, self.auth = address, aname, auth

    def _call(self, path: str, line: str | None, *, answer: bool) -> str:
        try:
            client, root = mount_agent(self.address, aname=self.aname, auth=self.auth)
            with client:
                mode = OREAD if line is None else (ORDWR if answer else OWRITE)
                fid = client.open(root, path, mode)
                try:
                    if line is not None:
                        fid.write(line.encode())
                    if not answer:
                        return ""
                    parts = []
                    offset = 0
                    while data := fid.pread(_CHUNK, offset):
                        parts.append(data)
                        offset += len(data)
                    return b"".join(parts).decode("utf-8", "replace").strip()
                finally:
                    fid.clunk()
        except ServerError as exc:  # the daemon answered with a refusal
            where = line.split()[0] if line else "read"
            raise BoardError(f"agent/{path} ({where}): {exc}", answered=True) from exc
        except ClientError as exc:
            where = line.split()[0] if line else "read"
            raise BoardError(f"agent/{path} ({where}): {exc}") from exc

    def read(self, path: str) -> str:
        return self._call(path, None, answer=True)

    def write(self, path: str, line: str) -> None:
        self._call(path, line, answer=False)

    def new_session(self, cwd: str, model: str | None) -> str:
        words = ["new", f"cwd={cwd}", "permission=bypass", "headless", "ephemeral"]
        words += [f"model={model}"] if model else []
        return self._call("ctl", " ".join(words), answer=True)

    def kill_session(self, session_id: str) -> None:
        self.write("ctl", f"kill {session_id}")

    def new_convoy(self, title: str, goal: str) -> str:
        return self._call("convoys/ctl", f"new {quote(title)} {quote(goal)}", answer=True)

    def new_bead(self, title: str, description: str, convoy: str) -> str:
        line = f"new {quote(title)} developer {quote(description)} convoy={convoy}"
        return self._call("beads/ctl", line, answer=True)

    def bead_status(self, bead: str) -> str:
        return self.read(f"beads/{bead}/status")

    def claim(self, bead: str, holder: str) -> None:
        """Claim `bead` for `holder` (a session id, or `user`); one held by someone else (a
        session a kill left behind) is released first."""
        if self.bead_status(bead) == "in_progress":
            self.write(f"beads/{bead}/ctl", "release")
        self.write(f"beads/{bead}/ctl", f"claim {holder}")

    def complete(self, bead: str, result: str) -> None:
        """Complete `bead` (claimed for `user` first when nobody holds it)."""
        status = self.bead_status(bead)
        if status == "completed":
            return
        if status != "in_progress":
            self.claim(bead, "user")
        self.write(f"beads/{bead}/ctl", f"complete {quote(result)}")

    def release(self, bead: str) -> None:
        if self.bead_status(bead) == "in_progress":
            self.write(f"beads/{bead}/ctl", "release")
