"""The file format of beads and convoys: one JSON object per file, stable formatting.

    beads/<id>.json     {"version": 1, "id": "research-auth-001", "title": ..., ...}
    convoys/<id>.json   {"version": 1, "id": "auth-system-001", ...}

Fields are written in their declaration order, indented by two spaces, UTF-8 (not escaped),
with a final newline, so the same value always gives the same bytes and `git diff` of a change
shows just the fields it changed. The first key is the schema version; a file with another
version, or one that does not decode, is reported (never guessed at).
"""

from __future__ import annotations

import json
from typing import Any, Final, TypeVar

import cattrs

from anvild.beads.model import Bead, Convoy

__all__ = ["VERSION", "CodecError", "decode_bead", "decode_convoy", "encode"]

VERSION: Final = 1

_converter = cattrs.Converter(forbid_extra_keys=True)

T = TypeVar("T", Bead, Convoy)


class CodecError(ValueError):
    """A bead or convoy file that cannot be read as one."""


def encode(value: Bead | Convoy) -> bytes:
    data: dict[str, Any] = {"version": VERSION, **_converter.unstructure(value)}
    # allow_nan=False: a NaN would make a file that strict JSON parsers refuse.
    return (json.dumps(data, ensure_ascii=False, indent=2, allow_nan=False) + "\n").encode()


def _decode(data: bytes, cls: type[T]) -> T:
    try:
        doc = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # bad UTF-8, bad JSON, a huge or deep value
        raise CodecError(f"not a JSON document: {exc}") from exc
    if not isinstance(doc, dict):
        raise CodecError("not a JSON object")
    version = doc.pop("version", None)
    if version != VERSION:
        raise CodecError(f"schema version {version!r}, expected {VERSION}")
    try:
        return _converter.structure(doc, cls)
    except (cattrs.BaseValidationError, ValueError, TypeError) as exc:
        raise CodecError(f"not a {cls.__name__.lower()}: {exc}") from exc


def decode_bead(data: bytes) -> Bead:
    return _decode(data, Bead)


def decode_convoy(data: bytes) -> Convoy:
    return _decode(data, Convoy)
