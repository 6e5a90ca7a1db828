"""`anvilctl completion bash|zsh|fish`: a shell completion script, generated from the parser.

    anvilctl completion bash > ~/.local/share/bash-completion/completions/anvilctl
    anvilctl completion zsh > ~/.zfunc/_anvilctl     # with fpath=(~/.zfunc $fpath) before compinit
    anvilctl completion fish > ~/.config/fish/completions/anvilctl.fish

The script is shtab's rendering of `anvilctl.__main__.build_parser` (every command, its options
and their choices), with the headless options of `anvilctl -p` (`anvilctl.headless.add_options`)
offered at the top level, where they are given, and directories offered for `-C`. It is made
from the parser of the anvilctl that runs, so regenerate it after an upgrade.
"""

from __future__ import annotations

import argparse
import sys
from typing import Final

SHELLS: Final = ("bash", "zsh", "fish")
INSTALL: Final = {
    "bash": "anvilctl completion bash > ~/.local/share/bash-completion/completions/anvilctl",
    "zsh": "anvilctl completion zsh > ~/.zfunc/_anvilctl  "
    "(with fpath=(~/.zfunc $fpath) before compinit in ~/.zshrc)",
    "fish": "anvilctl completion fish > ~/.config/fish/completions/anvilctl.fish",
}


def add_subcommand(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh or fish)",
        description="Print the completion script of SHELL on stdout. Install it with:",
        epilog="  ".join(f"{shell}: {INSTALL[shell]}." for shell in SHELLS),
    )
    parser.add_argument("shell", choices=SHELLS, metavar="SHELL", help=", ".join(SHELLS))


def script(shell: str) -> str:
    """The completion script of `shell` for the whole `anvilctl` command line."""
    import shtab

    from anvilctl import headless
    from anvilctl.__main__ import build_parser

    parser, _ = build_parser()
    headless.add_options(parser)
    for action in parser._actions:
        if "-C" in action.option_strings:
            action.complete = shtab.DIRECTORY  # type: ignore[attr-defined]
    text: str = shtab.complete(parser, shell=shell)
    return text


def run(args: argparse.Namespace) -> int:
    sys.stdout.write(script(args.shell))
    sys.stdout.flush()
    return 0
