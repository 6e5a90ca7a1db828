"""The `anvild` command: run the daemon in the foreground until SIGTERM or SIGINT.

    anvild [--namespace DIR] [--listen tcp!127.0.0.1!5640 ...] [--web 127.0.0.1:8080]
           [--allow-remote] [--data-dir DIR] [--config FILE] [-q] [--version]

Start-up, each refusal on stderr with what to do: check `ANVIL_LOG` and listen addresses (exit
2); prepare the data dir and load and check the config (exit 2; a missing provider key is only a
warning); lock the data dir (exit 1 naming the holder); configure logging (file only); set the
process's GC policy and descriptor limit; run the `Daemon` with the session layer (every session
restored before the first connection) and llama-server when it is the default, printing one line
(`-q` silences it). The first SIGTERM/SIGINT asks for a clean shutdown, a second cancels at
once; the lock file goes last. Exit 0 clean, 1 cannot start, 2 usage or configuration error.
"""

# ruff: noqa: E402 (the imports follow _import_without_terminal_extras)
from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any


def _import_without_terminal_extras() -> None:
    """Import structlog and httpx with rich and click hidden: structlog imports rich, when
    installed, for console tracebacks, and httpx imports click and rich for its command line
    (0.25 s of every start together). The daemon writes JSON lines with plain tracebacks and
    never runs httpx's command line; both are importable again afterwards."""
    modules: dict[str, Any] = sys.modules
    hidden = [name for name in ("rich", "click") if name not in modules]
    for name in hidden:
        modules[name] = None  # `import NAME` raises ImportError while the entry is None
    try:
        importlib.import_module("structlog")
        importlib.import_module("httpx")
    finally:
        for name in hidden:
            del modules[name]


_import_without_terminal_extras()

import structlog
import trio

from anvild import __version__
from anvild.config import (
    Config,
    ConfigFileError,
    check_models,
    load,
    user_config_file,
    user_data_dir,
)
from anvild.daemon.app import Daemon, DaemonConfig, Endpoints
from anvild.daemon.datadir import DataDirError, DataDirLock, prepare_data_dir
from anvild.daemon.fdlimit import raise_nofile
from anvild.daemon.gcpolicy import GcPolicy
from anvild.daemon.listeners import ListenError, TcpAddress, parse_listen_address
from anvild.daemon.llama import (
    LOCAL,
    LlamaNotBuilt,
    LlamaPaths,
    LlamaServer,
    embedded_default_wanted,
    threads_from,
)
from anvild.daemon.logs import LOG_ENV, LogLevelError, configure_logging, parse_level
from anvild.daemon.namespace import (
    SERVICE,
    NamespaceError,
    ServiceFiles,
    default_namespace,
    read_or_create_token,
)
from anvild.daemon.wiring import Sessions
from anvild.llm.errors import ConfigError
from anvild.tree.root import RootTree
from anvild.web import WebAddress, WebAddressError, parse_web_address, web_settings

if TYPE_CHECKING:
    from anvild.web.server import WebBoard

log = structlog.get_logger("anvild")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="anvild",
        description="Run LLM coding-agent sessions and serve them as files over 9P.",
        epilog=(
            "The service is posted as the Unix socket `agent` in the plan9port namespace "
            "directory, so `9p ls agent` and `anvilctl ls agent` find it. TCP is off unless "
            "--listen is given; TCP clients must give the token from agent.token (next to the "
            "socket) as the attach name. Note that a v9fs mount's aname= option, and so the "
            "token, is visible to every local user in /proc/mounts. "
            f"Logs go to DATA_DIR/logs/anvild.log; {LOG_ENV}=debug|info|warning|error sets "
            "the level (default info)."
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
        "--web",
        metavar="HOST:PORT",
        help="serve the web board there, e.g. 127.0.0.1:8080 (default: [web] listen, else off; "
        "loopback only unless --allow-remote); open /?token=TOKEN with the token from "
        "agent.token",
    )
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="permit --listen and --web addresses that other machines can reach",
    )
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        type=Path,
        help=f"where sessions, trust grants and logs are kept (default: {user_data_dir()}); "
        "one daemon per data directory",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        type=Path,
        help=f"the user configuration file (default: {user_config_file()}, if it exists)",
    )
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="do not print the startup line on stderr (a note that the default model is "
        "not built is still printed)",
    )
    p.add_argument("--version", action="version", version=f"anvild {__version__}")
    return p


def _say(message: str) -> None:
    print(f"anvild: {message}", file=sys.stderr, flush=True)


async def _run_until_signalled(daemon: Daemon, on_started: Callable[[Endpoints], None]) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def run(*, task_status: trio.TaskStatus[Endpoints]) -> None:
                await daemon.run(task_status=task_status)
                nursery.cancel_scope.cancel()  # stopped on its own: end the signal loop

            on_started(await nursery.start(run))
            async for signum in signals:
                name = signal.Signals(signum).name
                if daemon.stopping:
                    log.warning("daemon.signal_again", signal=name, action="cancelling now")
                    nursery.cancel_scope.cancel()
                    break
                log.info("daemon.signal", signal=name)
                daemon.request_shutdown(f"received {name}")


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    args = _parser().parse_args(argv)
    try:
        level = parse_level(env.get(LOG_ENV))
        listen: tuple[TcpAddress, ...] = tuple(
            parse_listen_address(a, allow_remote=args.allow_remote) for a in args.listen
        )
    except (LogLevelError, ListenError) as exc:
        _say(str(exc))
        return 2
    try:
        namespace = args.namespace or default_namespace(env)
        data_dir = prepare_data_dir((args.data_dir or user_data_dir()).absolute())
    except (NamespaceError, DataDirError) as exc:
        _say(str(exc))
        return 1
    user_file = args.config if args.config is not None else user_config_file()
    try:
        if args.config is not None and not args.config.is_file():
            raise ConfigFileError(
                args.config, None, "does not exist or is not a file; give one with --config"
            )
        config = load(user_file=user_file, data_dir=data_dir, project=False)
        local = (LOCAL,) if embedded_default_wanted(config, env) else ()
        key_warnings = check_models(config, env, known=local)
    except ConfigError as exc:
        _say(f"bad configuration: {exc}")
        return 2
    for warning in key_warnings:
        _say(warning)
    try:
        web = _web_address(args.web, args.allow_remote, config)
    except WebAddressError as exc:
        _say(str(exc))
        return 2
    lock = DataDirLock(data_dir)
    try:
        lock.acquire(namespace / SERVICE)
    except DataDirError as exc:
        _say(str(exc))
        return 1
    try:
        redactor = config.redactor(env)
        try:
            logs = configure_logging(data_dir, level=level, redactor=redactor)
        except OSError as exc:
            _say(
                f"cannot open the log file in {data_dir / 'logs'}: {exc.strerror or exc}; "
                "fix its permissions or choose another --data-dir"
            )
            return 1
        log.info(
            "daemon.starting",
            version=__version__,
            pid=os.getpid(),
            data_dir=str(data_dir),
            config=str(user_file),
            namespace=str(namespace),
        )
        for warning in key_warnings:
            log.warning("config.key_missing", message=warning)
        local_model: LlamaServer | None = None
        not_built = ""
        if embedded_default_wanted(config, env):
            try:
                paths = LlamaPaths.find(env)
            except LlamaNotBuilt as exc:
                not_built = str(exc)
                log.warning("llama.not_built", message=not_built)
            else:
                log_file = logs.path.with_name("llama-server.log")
                try:
                    threads = threads_from(env)
                except ValueError as exc:
                    _say(str(exc))
                    return 2
                local_model = LlamaServer(paths, log_file=log_file, env=env, threads=threads)
        nofile = raise_nofile(config.server.max_connections)
        log.info("daemon.nofile", soft=nofile.soft, hard=nofile.hard, was=nofile.before)
        if not nofile.enough:
            log.warning(
                "daemon.nofile_low",
                message=f"the descriptor limit ({nofile.soft}, hard limit {nofile.hard}) is "
                f"below max_connections + {nofile.wanted - config.server.max_connections}: "
                "raise the hard limit (ulimit -Hn) or lower [server] max_connections",
            )
        root = RootTree(version=__version__)
        sessions = Sessions.build(
            config,
            root,
            env=env,
            data_dir=data_dir,
            redactor=redactor,
            local_model=local_model,
            gc_policy=GcPolicy(),
        )
        board: WebBoard | None = None
        if web is not None:
            from anvild.web.beads import BeadActions  # starlette and hypercorn: only when on
            from anvild.web.server import WebBoard

            token_file = ServiceFiles(namespace, SERVICE).token_path
            board = WebBoard(
                web,
                sessions.manager,
                root.events.core,
                lambda: read_or_create_token(token_file),
                answered=None if sessions.gates is None else sessions.gates.settle,
                beads=None
                if sessions.beads is None
                else BeadActions(
                    sessions.beads.store, sessions.beads.answer, sessions.beads.resolve_session
                ),
                mail=None if sessions.mail is None else sessions.mail.office,
                root_ctl=_ctl_line(root),
                pricing_of=lambda name: (
                    config.models[name].pricing if name in config.models else None
                ),
            )
        daemon = Daemon(
            DaemonConfig(
                namespace=namespace,
                listen=listen,
                handshake_timeout=config.server.handshake_timeout,
                max_connections=config.server.max_connections,
                max_fids=config.server.max_fids,
                max_outstanding=config.server.max_outstanding,
            ),
            tree=root,
            children=[sessions.run] if board is None else [sessions.run, board.run],
            local_model=local_model,
        )
        sessions.attach(daemon)

        def started(endpoints: Endpoints) -> None:
            if not args.quiet:
                where = ", ".join([str(endpoints.socket_path), *endpoints.tcp_addresses])
                token = f" (token in {endpoints.token_path})" if endpoints.token_path else ""
                model = "; default model: local llama-server" if local_model else ""
                _say(f"serving {where}{token}; data {data_dir}; log {logs.path}{model}")
                if board is not None and board.url is not None:
                    token_file = ServiceFiles(namespace, SERVICE).token_path
                    _say(f"web board {board.url}?token=TOKEN (TOKEN: the contents of {token_file})")
            if not_built:
                _say(not_built)  # even with -q: what the user expects to work does not

        return _run(daemon, started)
    finally:
        lock.release()


def _ctl_line(root: RootTree) -> Callable[[str], Awaitable[str]]:
    """One line of `agent/ctl`, run as a write of it runs it (for the board's New session)."""

    async def run(line: str) -> str:
        command = root.commands.parse_line(line)
        return await root.commands[command.verb].handler(command)

    return run


def _web_address(flag: str | None, allow_remote: bool, config: Config) -> WebAddress | None:
    """Where the board listens: `--web`, else `[web] listen`, else nowhere (off)."""
    settings = web_settings(config)
    text = flag if flag is not None else settings.listen
    if text is None:
        return None
    return parse_web_address(text, allow_remote=allow_remote or settings.allow_remote)


def _run(daemon: Daemon, started: Callable[[Endpoints], None]) -> int:
    try:
        trio.run(_run_until_signalled, daemon, started)
    except (ListenError, NamespaceError) as exc:
        log.error("daemon.refused", error=str(exc))
        _say(str(exc))
        return 1
    except BaseExceptionGroup as group:
        startup, rest = group.split((ListenError, NamespaceError))
        if startup is None or rest is not None:
            log.critical("daemon.crashed", exc_info=group)
            raise
        for err in _leaves(startup):
            log.error("daemon.refused", error=str(err))
            _say(str(err))
        return 1
    except Exception:
        log.critical("daemon.crashed", exc_info=True)
        raise
    log.info("daemon.exit", status=0)
    return 0


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


if __name__ == "__main__":
    sys.exit(main())
