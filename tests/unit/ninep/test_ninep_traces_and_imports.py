"""Table-driven checks against plan9port's real wire bytes, and the package's import rules."""

from __future__ import annotations

import ast
import pathlib
import re
from typing import Any

import pytest

import anvild.ninep
from anvild.ninep import messages as m
from anvild.ninep.constants import Dialect

ROOT = pathlib.Path(__file__).resolve().parents[3]
TRACES = ROOT / "fixtures" / "9p" / "plan9port-9p-client-traces.txt"
LINE = re.compile(
    r"^(?P<conn>\S+) (?P<dir>->|<-) (?P<name>[TR]\w+) (?P<fields>.*?)\s+raw=(?P<raw>[0-9a-f]+)$"
)
FIELD = re.compile(r"(\w+)=('(?:[^']*)'|\[[^\]]*\]|b'[^']*'|\S+)")


def trace_lines() -> list[tuple[str, str, str, bytes]]:
    out = []
    for line in TRACES.read_text().splitlines():
        if match := LINE.match(line):
            fields = match["fields"]
            out.append((match["dir"], match["name"], fields, bytes.fromhex(match["raw"])))
    return out


def _expected(fields: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, raw in FIELD.findall(fields):
        if raw.startswith("b'"):
            values[key] = raw[2:-1].encode().decode("unicode_escape").encode("latin-1")
        elif raw.startswith(("'", "[")):
            values[key] = ast.literal_eval(raw)
        else:
            values[key] = int(raw)
    return values


CLIENT = [t for t in trace_lines() if t[0] == "->"]
# Server lines whose raw bytes are complete (the log truncates long ones).
SERVER = [
    t for t in trace_lines() if t[0] == "<-" and len(t[3]) == int.from_bytes(t[3][:4], "little")
]


def test_the_fixture_has_every_command() -> None:
    names = {t[1] for t in CLIENT}
    assert {"Tversion", "Tauth", "Tattach", "Twalk", "Topen", "Tread", "Twrite", "Tstat",
            "Tclunk"} <= names  # fmt: skip
    assert len(CLIENT) > 60


@pytest.mark.parametrize(("direction", "name", "fields", "raw"), CLIENT)
def test_decode_plan9port_client_messages(
    direction: str, name: str, fields: str, raw: bytes
) -> None:
    msg = m.decode(raw, Dialect.P9P2000)
    assert type(msg).__name__ == name
    expected = _expected(fields)
    expected.pop("nwqid", None)
    if "wname" in expected:
        assert msg.wnames == tuple(expected.pop("wname"))  # type: ignore[attr-defined]
    if "data" in expected:
        assert msg.data == expected.pop("data")  # type: ignore[attr-defined]
        assert len(msg.data) == expected.pop("count")  # type: ignore[attr-defined]
    for key, value in expected.items():
        assert getattr(msg, key) == value, (key, msg)
    # Our encoder produces exactly plan9port's bytes.
    assert m.encode(msg, Dialect.P9P2000) == raw


@pytest.mark.parametrize(("direction", "name", "fields", "raw"), SERVER)
def test_reencode_replies_byte_for_byte(direction: str, name: str, fields: str, raw: bytes) -> None:
    msg = m.decode(raw, Dialect.P9P2000)
    assert type(msg).__name__ == name
    assert m.encode(msg, Dialect.P9P2000) == raw


def test_our_replies_match_the_wire() -> None:
    assert m.encode(m.Rversion(0xFFFF, 8192, "9P2000"), Dialect.P9P2000) == bytes.fromhex(
        "1300000065ffff002000000600395032303030"
    )
    assert m.encode(m.Rerror(0, "authentication not required"), Dialect.P9P2000).hex() == (
        "240000006b00001b0061757468656e7469636174696f6e206e6f74207265717569726564"
    )
    assert m.encode(m.Rwalk(0, ()), Dialect.P9P2000).hex() == "090000006f00000000"
    assert m.encode(m.Rclunk(0), Dialect.P9P2000).hex() == "07000000790000"
    assert m.encode(m.Rwrite(0, 11), Dialect.P9P2000).hex() == "0b0000007700000b000000"


# --- import rules (DESIGN.md §2) -----------------------------------------------------------------

PACKAGE = pathlib.Path(anvild.ninep.__file__).parent
IO_MODULES = {"socket", "trio", "os", "io", "selectors", "asyncio", "subprocess", "pathlib"}
PURE = {"messages.py", "framing.py", "constants.py", "errors.py"}


def _imports(path: pathlib.Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: use absolute imports"
            names.add(node.module or "")
    return names


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_ninep_imports_nothing_else_from_the_project(path: pathlib.Path) -> None:
    for name in _imports(path):
        if name == "anvild" or name.startswith(("anvild.", "anvilctl")):
            assert name.startswith("anvild.ninep"), f"{path.name} imports {name}"


@pytest.mark.parametrize("name", sorted(PURE))
def test_the_codec_does_no_io(name: str) -> None:
    imported = {n.split(".")[0] for n in _imports(PACKAGE / name)}
    assert not imported & IO_MODULES, f"{name} imports {imported & IO_MODULES}"
