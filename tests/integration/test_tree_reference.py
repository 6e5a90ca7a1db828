"""docs/TREE.md against a live daemon's tree: every file served is described, and nothing else.

The test starts `anvild` with the fake provider (tests/integration/conftest.py), makes one of each
thing that has files (sessions of every kind, a bead, a convoy, mail both ways, read and sent),
then walks the whole tree over 9P with anvilctl's client, statting every entry and reading
every directory (no file is opened: streams and waits are never touched). Each path is written
in TREE.md's placeholder form (a session id becomes `ID`, a bead id `BEAD`, a message file
`MSG.json`, ...) and compared both ways with the entries TREE.md declares (`### `PATH` MODE`
headings): a failure lists the files served but undocumented and those documented but not
served, and any mode that differs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs
import pytest

from anvilctl import ninep_client as nc
from anvild.ninep.constants import DMDIR, ORDWR, OREAD, OWRITE
from tests.integration.test_daemon_cli import Anvild

TREE_MD = Path(__file__).resolve().parents[2] / "docs" / "TREE.md"

ENTRY = re.compile(r"### `(?P<path>agent/[^`]*)` (?P<mode>d?[0-7]{3})")
"""An entry of TREE.md: the whole of a level-3 heading (every level-3 heading is one)."""

PLACEHOLDERS = frozenset({"ID", "BEAD", "CONVOY", "MSG", "NAME", "N"})
"""The variable parts TREE.md may name, each in capitals as a whole path element (before any
file extension)."""

NAMED = {
    ("agent", "roles"): "NAME",
    ("agent", "scripts"): "NAME",
    ("agent", "sandbox-roles"): "NAME",
}
"""Directories whose entries are named by the user or the configuration: each becomes `NAME`
(keeping its extension: `NAME.yaml`)."""


# --- TREE.md --------------------------------------------------------------------------------


def documented(text: str) -> dict[str, str]:
    """TREE.md's entries: path (placeholder form, a directory ending in `/`) -> mode as written
    (`d555`, `644`). Raises `AssertionError` on a level-3 heading that is not an entry, a
    repeated path, an unknown placeholder or a directory mode on a file (or the reverse)."""
    entries: dict[str, str] = {}
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith("### "):
            continue
        match = ENTRY.fullmatch(line)
        if match is None:
            problems.append(f"line {number}: not an entry (### `agent/PATH` MODE): {line!r}")
            continue
        path, mode = match["path"], match["mode"]
        if path in entries:
            problems.append(f"line {number}: {path} is described twice")
        if path.endswith("/") != mode.startswith("d"):
            problems.append(f"line {number}: {path}: a directory ends in / and its mode has d")
        for part in path.rstrip("/").split("/"):
            stem = part.split(".", 1)[0]
            if stem.isupper() and stem not in PLACEHOLDERS:
                problems.append(f"line {number}: {path}: unknown placeholder {stem}")
        entries[path] = mode
    assert not problems, "docs/TREE.md:\n" + "\n".join(problems)
    return entries


# --- the live tree ---------------------------------------------------------------------------


@attrs.frozen
class Served:
    """One entry of the walked tree."""

    parts: tuple[str, ...]  # ("agent", "9c9e8bf5", "usage")
    is_dir: bool
    mode: str  # as TREE.md writes it

    @property
    def path(self) -> str:
        return "/".join(self.parts) + ("/" if self.is_dir else "")


@attrs.frozen
class Ids:
    sessions: frozenset[str]
    beads: frozenset[str]
    convoys: frozenset[str]


def placeholder_form(served: Served, ids: Ids) -> str:
    """`served`'s path with its variable parts replaced by TREE.md's placeholders."""
    parts = list(served.parts)
    for i, name in enumerate(served.parts):
        parent = served.parts[:i]
        if parent == ("agent",) and name in ids.sessions:
            parts[i] = "ID"
        elif parent == ("agent", "beads") and name in ids.beads:
            parts[i] = "BEAD"
        elif parent == ("agent", "convoys") and name in ids.convoys:
            parts[i] = "CONVOY"
        elif parent[-2:] in (("mail", "received"), ("mail", "sent")) and name.startswith("msg-"):
            parts[i] = "MSG" + name[name.index(".") :] if "." in name else "MSG"
        elif len(parent) == 3 and parent[2] == "turns" and name.isdigit():
            parts[i] = "N"  # a turn's number
        elif parent in NAMED:
            parts[i] = NAMED[parent] + (name[name.index(".") :] if "." in name else "")
    return "/".join(parts) + ("/" if served.is_dir else "")


def _in_service(path: str) -> str:
    """`agent/beads/ctl` -> `beads/ctl`: the attach is the service's root."""
    assert path == "agent" or path.startswith("agent/"), path
    return path.removeprefix("agent").lstrip("/")


class Tree:
    """A 9P connection to the daemon's `agent` service, with the few operations the test needs
    (paths as TREE.md and `9p` write them, starting `agent/`)."""

    def __init__(self, namespace: Path) -> None:
        self.client = nc.Client(nc.dial(f"unix!{namespace / 'agent'}"))
        self.root = self.client.mount()

    def rdwr(self, path: str, line: str) -> str:
        """Write one line on an ORDWR fid, then read the answer on it (as `9p rdwr`)."""
        fid = self.client.open(self.root, _in_service(path), ORDWR)
        try:
            fid.write(f"{line}\n".encode())
            return fid.pread(8192, 0).decode().strip()
        finally:
            fid.clunk()

    def write(self, path: str, text: str) -> None:
        """One open, one write, clunk: a body is committed (as `9p write`)."""
        fid = self.client.open(self.root, _in_service(path), OWRITE)
        try:
            fid.write(text.encode())
        finally:
            fid.clunk()

    def read(self, path: str) -> str:
        """Read to EOF, then clunk (as `9p read`)."""
        fid = self.client.open(self.root, _in_service(path), OREAD)
        try:
            data = b""
            while chunk := fid.read(8192):
                data += chunk
            return data.decode()
        finally:
            fid.clunk()

    def walk(self, parts: tuple[str, ...] = ("agent",)) -> Iterator[Served]:
        """Every entry from `parts` down: a stat of each, a read of each directory."""
        fid = self.client.walk(self.root, "/".join(parts[1:]))
        try:
            stat = fid.stat()
            is_dir = bool(stat.mode & DMDIR)
            names: list[str] = []
            if is_dir:
                fid.open(OREAD)
                names = [entry.name for entry in fid.read_dir()]
        finally:
            fid.clunk()
        yield Served(parts, is_dir, ("d" if is_dir else "") + f"{stat.mode & 0o777:03o}")
        for name in names:
            yield from self.walk((*parts, name))

    def close(self) -> None:
        self.client.close()


@contextmanager
def connected(namespace: Path) -> Iterator[Tree]:
    tree = Tree(namespace)
    try:
        yield tree
    finally:
        tree.close()


def populate(tree: Tree, workdir: Path) -> Ids:
    """One of each thing that has files of its own."""
    new = f"new cwd={workdir}"
    plain = tree.rdwr("agent/ctl", f"{new} alias=plain")
    tree.write("agent/plain/in", "hello")
    assert tree.read("agent/plain/wait") in ("await\n", "idle\n")
    tree.read("agent/plain/out")
    sessions = {
        plain,
        tree.rdwr("agent/ctl", f"{new} ephemeral"),
        tree.rdwr("agent/ctl", f"{new} headless"),
        tree.rdwr("agent/ctl", f"{new} approver=plain"),
        tree.rdwr("agent/ctl", f"{new} mail=auto"),
        tree.rdwr("agent/ctl", "new from=plain"),
    }
    # Mail both ways, then both inboxes read to the end: every mailbox has received and sent.
    message = '{"to":"%s","type":"%s","subject":"tree","body":"walk it"}'
    tree.write("agent/plain/outbox", message % ("user", "QUESTION"))
    tree.write("agent/user/outbox", message % ("plain", "ANSWER"))
    assert '"subject":"tree"' in tree.read("agent/plain/inbox")
    assert '"subject":"tree"' in tree.read("agent/user/inbox")

    bead = tree.rdwr("agent/beads/ctl", 'new "Walk the tree" developer "and document it"')
    convoy = tree.rdwr("agent/convoys/ctl", 'new "Reference" "every file described"')
    tree.write(f"agent/convoys/{convoy}/ctl", f"add_bead {bead}\n")

    listed = {line.split("\t")[0] for line in tree.read("agent/list").splitlines()}
    assert listed == sessions, (listed, sessions)
    return Ids(frozenset(sessions), frozenset({bead}), frozenset({convoy}))


def differences(served: list[Served], ids: Ids, reference: dict[str, str]) -> list[str]:
    """What the served tree and the reference disagree on, one line each (none: they agree)."""
    found: dict[str, set[str]] = {}
    per_session: dict[str, set[str]] = {sid: set() for sid in ids.sessions}
    for entry in served:
        form = placeholder_form(entry, ids)
        found.setdefault(form, set()).add(entry.mode)
        if len(entry.parts) > 1 and entry.parts[1] in per_session:
            per_session[entry.parts[1]].add(form)
    problems = [
        *(f"undocumented: {path}" for path in sorted(found.keys() - reference.keys())),
        *(f"documented but not served: {path}" for path in sorted(reference.keys() - found)),
    ]
    for path in sorted(found.keys() & reference.keys()):
        if found[path] != {reference[path]}:
            modes = ", ".join(sorted(found[path]))
            problems.append(f"mode: {path} is {modes}, documented {reference[path]}")
    # Each kind of session has every session file (a message file only where mail went, a turn's
    # directory only where a turn ran).
    every_session = {
        p
        for p in reference
        if p.startswith("agent/ID/") and "MSG" not in p and not re.search("/turns/(N|last)/", p)
    }
    for sid, forms in sorted(per_session.items()):
        missing = sorted(every_session - forms)
        if missing:
            problems.append(f"session {sid} lacks: {', '.join(missing)}")
    return problems


# --- the tests -------------------------------------------------------------------------------


def test_every_served_file_is_in_tree_md_and_every_entry_is_served(
    daemon: Anvild, namespace: Path, workdir: Path
) -> None:
    reference = documented(TREE_MD.read_text())
    with connected(namespace) as tree:
        ids = populate(tree, workdir)
        served = list(tree.walk())
    assert len(served) > 100, [s.path for s in served]  # the walk went everywhere
    problems = differences(served, ids, reference)
    assert not problems, "docs/TREE.md and the served tree differ:\n" + "\n".join(problems)


SAMPLE = """\
# a reference

### `agent/` d555
### `agent/ctl` 644
### `agent/ID/` d555
### `agent/ID/out` 444
### `agent/ID/mail/sent/MSG.json` 444
"""


def sample_tree(*extra: Served) -> list[Served]:
    return [
        Served(("agent",), True, "d555"),
        Served(("agent", "ctl"), False, "644"),
        Served(("agent", "s1"), True, "d555"),
        Served(("agent", "s1", "out"), False, "444"),
        Served(("agent", "s1", "mail", "sent", "msg-0a1b.json"), False, "444"),
        *extra,
    ]


def test_the_check_agrees_with_a_matching_reference() -> None:
    ids = Ids(frozenset({"s1"}), frozenset(), frozenset())
    assert differences(sample_tree(), ids, documented(SAMPLE)) == []


def test_the_check_lists_undocumented_missing_and_wrong_modes() -> None:
    ids = Ids(frozenset({"s1", "s2"}), frozenset(), frozenset())
    reference = documented(SAMPLE + "### `agent/ID/state` 444\n### `agent/gone` 444\n")
    served = sample_tree(
        Served(("agent", "s1", "state"), False, "644"),
        Served(("agent", "s1", "secret"), False, "444"),
        Served(("agent", "s2"), True, "d555"),
    )
    assert differences(served, ids, reference) == [
        "undocumented: agent/ID/secret",
        "documented but not served: agent/gone",
        "mode: agent/ID/state is 644, documented 444",
        "session s2 lacks: agent/ID/out, agent/ID/state",
    ]


@pytest.mark.parametrize(
    "bad",
    [
        "### `agent/ctl`",  # no mode
        "### `agent/ID/` 555",  # a directory without d
        "### `agent/ID/x` d444",  # a file with d
        "### `agent/SID/x` 444",  # an unknown placeholder
        "### Notes",  # not an entry
        "### `agent/ctl` 644",  # described twice
    ],
)
def test_tree_md_headings_are_all_well_formed_entries(bad: str) -> None:
    with pytest.raises(AssertionError, match=r"docs/TREE\.md"):
        documented(SAMPLE + bad + "\n")
