"""The `anvilctl` command line: entry point and subcommand dispatch.

Where each command lives: the 9P file commands in `anvilctl.ninep_cli` (plan9port `9p`
behaviour); `new`, `send`, `wait`, `out`, `models`, `sessions`, `attach` in `anvilctl.sessions`
(`attach` in `anvilctl.attach`); `-p PROMPT` (an option, recognised before any command word,
after `-a`/`-A`/`-n`) in `anvilctl.headless`; `completion bash|zsh|fish` in
`anvilctl.completion`; `eval run` in `anvilctl.eval`, `auto` in `anvilctl.auto`. A mistyped
command is refused with the nearest one.
Invariant: the 9P commands start fast (scripts poll in loops; bench/anvilctl.py): for them only
`ninep_cli`, the client and `anvilctl.wire` are imported and the line is parsed without argparse.
Other commands' modules (provider and sandbox layers) are imported only when asked for.
"""

from __future__ import annotations

import sys

from anvilctl import ninep_cli

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from types import ModuleType

# Modules with `add_subcommand(subparsers)` and `run(args) -> int`, and the commands they add.
_OTHER_COMMANDS: dict[str, tuple[str, ...]] = {
    "anvilctl.trust": ("trust",),
    "anvilctl.replay": ("replay-stream",),
    "anvilctl.sandbox": ("sandbox",),
    "anvilctl.completion": ("completion",),
    "anvilctl.eval": ("eval",),
    "anvilctl.stats": ("stats",),
    "anvilctl.rerun": ("replay",),
    "anvilctl.auto": ("auto",),
}
_GLOBAL_OPTIONS_WITH_VALUE = ("-a", "-A", "-D")
# `-p`'s options that take a value: given before `-p` (`anvilctl --resume ID -p ...`), their
# value is not a command word.
_HEADLESS_OPTIONS_WITH_VALUE = (
    *_GLOBAL_OPTIONS_WITH_VALUE,
    *("-r", "--resume", "-m", "--model", "-C", "--cwd", "--max-steps", "--max-budget-tokens"),
    *("--permission-mode", "--output-format"),
)


def _command_word(argv: Sequence[str]) -> str | None:
    args = iter(argv)
    for arg in args:
        if arg in _GLOBAL_OPTIONS_WITH_VALUE:
            next(args, None)
        elif not arg.startswith("-"):
            return arg
    return None


def headless_requested(argv: Sequence[str]) -> bool:
    """Whether `-p`/`--print` comes before any command word (`anvilctl -a ADDR -p TEXT ...`,
    `anvilctl -c -p TEXT`)."""
    args = iter(argv)
    for arg in args:
        if arg in _HEADLESS_OPTIONS_WITH_VALUE:
            next(args, None)
        elif arg == "--print" or arg.startswith(("--print=", "-p")):
            return True
        elif arg == "--" or not arg.startswith("-"):
            return False
    return False


def _version() -> str:
    from anvild import __version__

    return f"anvilctl {__version__}"


def _unknown_command(word: str, commands: Sequence[str]) -> str | None:
    """The usage error for a command word that is none of `commands`, with the nearest one."""
    if word in commands:
        return None
    import difflib

    guess = difflib.get_close_matches(word, commands, n=1, cutoff=0.6)
    hint = f"; did you mean {guess[0]!r}?" if guess else ""
    return (
        f"unknown command {word!r}{hint} (anvilctl --help lists the commands; "
        "anvilctl -p PROMPT runs a prompt)"
    )


def build_parser(*, only_9p: bool = False) -> tuple[argparse.ArgumentParser, list[ModuleType]]:
    import argparse
    import importlib

    from anvilctl import sessions

    parser = argparse.ArgumentParser(
        prog="anvilctl",
        description="Talk to anvild: plain 9P file commands with plan9port 9p(1) semantics. "
        "Headless: anvilctl -p PROMPT [-c | -r ID] [-m MODEL] [-C DIR] [--max-steps N] "
        "[--max-budget-tokens N] [--permission-mode MODE] [--output-format text|json|stream-json]"
        " (anvilctl -p --help for details). Shell completion: anvilctl completion bash|zsh|fish.",
    )
    ninep_cli.add_global_options(parser)

    class Version(argparse.Action):  # the version is looked up only when asked for
        def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
            parser.exit(message=_version() + "\n")

    parser.add_argument(
        "--version",
        action=Version,
        nargs=0,
        dest=argparse.SUPPRESS,
        default=argparse.SUPPRESS,
        help="print the version and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    ninep_cli.add_subcommands(sub)
    sessions.add_subcommands(sub)
    others = [] if only_9p else [importlib.import_module(name) for name in _OTHER_COMMANDS]
    for module in others:
        module.add_subcommand(sub)
    return parser, others


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if headless_requested(argv):
        from anvilctl import headless

        return headless.main(argv)
    word = _command_word(argv)
    if word in ninep_cli.COMMANDS:
        fast = ninep_cli.parse_args(argv)
        if fast is not None:
            return ninep_cli.run(fast)
    if argv == ["--version"]:
        print(_version())
        return 0
    from anvilctl import sessions

    light = (*ninep_cli.COMMANDS, *sessions.COMMANDS)
    commands = [*light, *(c for names in _OTHER_COMMANDS.values() for c in names)]
    unknown = None if word is None else _unknown_command(word, commands)
    parser, others = build_parser(only_9p=word in light or unknown is not None)
    if unknown is not None:
        parser.error(unknown)
    args = parser.parse_args(argv)
    try:
        ninep_cli.resolve_daemon(args)
    except ValueError as exc:
        parser.error(str(exc))
    if args.command in ninep_cli.COMMANDS:
        return ninep_cli.run(args)
    if args.command in sessions.COMMANDS:
        return sessions.run(args)
    for module in others:
        if args.command in _OTHER_COMMANDS[module.__name__]:
            result: int = module.run(args)
            return result
    raise AssertionError(f"unhandled command {args.command!r}")  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
