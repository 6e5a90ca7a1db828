"""The `anvilctl` command line: entry point and subcommand dispatch.

The 9P file commands (`ls`, `read`, `write`, `rdwr`, `stat`) live in `anvilctl.ninep_cli` and
behave like plan9port's `9p`; `anvilctl --help` lists every command.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from anvilctl import ninep_cli, replay, sandbox, trust


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="anvilctl",
        description="Talk to anvild: plain 9P file commands with plan9port 9p(1) semantics.",
    )
    ninep_cli.add_global_options(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    ninep_cli.add_subcommands(sub)
    trust.add_subcommand(sub)
    replay.add_subcommand(sub)
    sandbox.add_subcommand(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ninep_cli.COMMANDS:
        return ninep_cli.run(args)
    if args.command == "trust":
        return trust.run(args)
    if args.command == "replay-stream":
        return replay.run(args)
    if args.command == "sandbox":
        return sandbox.run(args)
    raise AssertionError(f"unhandled command {args.command!r}")  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
