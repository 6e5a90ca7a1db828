"""The synthetic file tree served over 9P: directories, and the file kinds sessions are made of.

`anvild.fs` sits on `anvild.ninep` (it implements that package's `Node`/`Handle` interface) and
never the other way round. Pure parts are separate modules, testable without trio:

- `anvild.fs.stream`  line broadcast with per-reader cursors, bounded buffers and lag markers;
- `anvild.fs.ctl`     ctl command lines: splitting, tokenizing, validating;
- `anvild.fs.body`    accumulating a body written in many pieces, checked at each write;
- `anvild.fs.jsonscan` where one JSON value ends in text that arrives in pieces;
- `anvild.fs.nodes`   the node and handle kinds that use them.
"""

from anvild.fs.body import DEFAULT_BODY_LIMIT, BodyBuffer, BodyError, BodyTooLarge, Framing
from anvild.fs.ctl import Command, CommandError, CommandSpec, CommandTable, Handler
from anvild.fs.nodes import (
    BodyFile,
    CommitBody,
    CtlFile,
    Directory,
    DynamicChildren,
    FsNode,
    Generate,
    SnapshotFile,
    StreamFile,
    ValueFile,
    new_qid_path,
    owner_names,
    qid_paths_from,
    reserve_qid_paths,
)
from anvild.fs.stream import LineStream, StreamLimits, StreamReader, lag_marker
from anvild.fs.wait import Wait, WaitFile

__all__ = [
    "DEFAULT_BODY_LIMIT",
    "BodyBuffer",
    "BodyError",
    "BodyFile",
    "BodyTooLarge",
    "Command",
    "CommandError",
    "CommandSpec",
    "CommandTable",
    "CommitBody",
    "CtlFile",
    "Directory",
    "DynamicChildren",
    "Framing",
    "FsNode",
    "Generate",
    "Handler",
    "LineStream",
    "SnapshotFile",
    "StreamFile",
    "StreamLimits",
    "StreamReader",
    "ValueFile",
    "Wait",
    "WaitFile",
    "lag_marker",
    "new_qid_path",
    "owner_names",
    "qid_paths_from",
    "reserve_qid_paths",
]
