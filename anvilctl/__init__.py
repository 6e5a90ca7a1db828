"""anvilctl: the companion CLI of anvild (a 9P client plus ergonomic session commands)."""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    import argparse
    from pathlib import Path


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


def add_data_dir(parser: argparse.ArgumentParser, help: str = "the daemon's data dir") -> None:
    """The `--data-dir DIR` option of a command that reads the daemon's data (`data_dir`)."""
    from pathlib import Path

    parser.add_argument("--data-dir", type=Path, metavar="DIR", help=help)


def data_dir(given: Path | None) -> Path:
    """The daemon's data directory: `given` (`--data-dir`), else the user data dir, which the
    daemon uses when it is started without one."""
    from anvild.config import user_data_dir

    return user_data_dir() if given is None else given
