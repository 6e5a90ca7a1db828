"""anvilctl: the companion CLI of anvild (a 9P client plus ergonomic session commands)."""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    import argparse


def add_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    doc: str | None,
    paragraph: int = 0,
    *,
    help: str,
) -> argparse.ArgumentParser:
    """The parser of subcommand `name`; its `--help` description is paragraph `paragraph` of
    `doc` (the module docstring that documents the command)."""
    description = doc.split("\n\n")[paragraph] if doc else None
    return sub.add_parser(name, help=help, description=description)
