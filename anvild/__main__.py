"""The `anvild` command: run the daemon in the foreground until SIGTERM or SIGINT.

    anvild [--namespace DIR] [--listen tcp!127.0.0.1!5640 ...] [--allow-remote] [-v] [--version]

Exit status: 0 after a clean shutdown (socket and pid file removed), 1 when the daemon cannot
start (the reason is printed on stderr and says what to do), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import trio

from anvild import __version__
from anvild.daemon.app import Daemon, DaemonConfig
from anvild.daemon.listeners import ListenError, TcpAddress, parse_listen_address
from anvild.daemon.namespace import NamespaceError, default_namespace

log = logging.getLogger("anvild")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="anvild",
        description="Run LLM coding-agent sessions and serve them as files over 9P.",
        epilog=(
            "The service is posted as the Unix socket `agent` in the plan9port namespace "
            "directory, so `9p ls agent` and `anvilctl ls agent` find it. TCP is off unless "
            "--listen is given; TCP clients must give the token from agent.token (next to the "
            "socket) as the attach name. Note that a v9fs mount's aname= option, and so the "
            "token, is visible to every local user in /proc/mounts."
        ),
    )
    p.add_argument(
        "--namespace",
        metavar="DIR",
        type=Path,
        help="namespace directory (default: $NAMESPACE, else /tmp/ns.$USER.$DISPLAY, DISPLAY=:0)",
    )
    p.add_argument(
        "--listen",
        metavar="ADDR",
        action="append",
        default=[],
        help="also listen on TCP, e.g. tcp!127.0.0.1!5640 (repeatable; loopback only unless "
        "--allow-remote)",
    )
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="permit --listen addresses that other machines can reach",
    )
    p.add_argument("-v", "--verbose", action="count", default=0, help="debug logging")
    p.add_argument("--version", action="version", version=f"anvild {__version__}")
    return p


async def _run_until_signalled(daemon: Daemon) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(daemon.run)
            async for signum in signals:
                log.info("received %s; shutting down", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="anvild: %(levelname)s %(name)s: %(message)s",
    )
    try:
        listen: tuple[TcpAddress, ...] = tuple(
            parse_listen_address(a, allow_remote=args.allow_remote) for a in args.listen
        )
        namespace = args.namespace or default_namespace()
    except (ListenError, NamespaceError) as exc:
        print(f"anvild: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ListenError) else 1
    daemon = Daemon(DaemonConfig(namespace=namespace, listen=listen))
    try:
        trio.run(_run_until_signalled, daemon)
    except (ListenError, NamespaceError) as exc:
        print(f"anvild: {exc}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as group:
        startup, rest = group.split((ListenError, NamespaceError))
        if startup is None or rest is not None:
            raise
        for err in _leaves(startup):
            print(f"anvild: {err}", file=sys.stderr)
        return 1
    return 0


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


if __name__ == "__main__":
    sys.exit(main())
