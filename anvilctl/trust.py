"""`anvilctl trust show|grant|revoke [PATH]`: review and decide a project config's authority.

    anvilctl trust show              # the project config found from the cwd
    anvilctl trust grant ~/src/app   # trust that project's .anvil/config.toml, as it is now

PATH is a project directory (its config found as anvild finds it) or the file; default the cwd.
`show` lists the authority-bearing keys with values and categories, then the instruction and data
keys, the SHA-256 and whether a grant covers it. `grant` records a grant for the current digest
(`--sha256 HEX` refuses unless the file still has the digest you reviewed); any edit voids it.
`revoke` removes it. A grant never extends a credential to a new host.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from anvilctl import add_command, add_data_dir, data_dir
from anvild.config import (
    TrustStore,
    authority_of,
    digest,
    find_project_config,
)
from anvild.config.schema import parse_bytes, render_key
from anvild.llm.errors import ConfigError


def add_subcommand(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        sub, "trust", __doc__, help="show, grant or revoke trust in a project's .anvil/config.toml"
    )
    actions = parser.add_subparsers(dest="trust_action", required=True, metavar="ACTION")
    for name, text in (
        ("show", "list the project config's authority-bearing keys and its trust state"),
        ("grant", "trust the project config as it is now (bound to its SHA-256)"),
        ("revoke", "remove the trust grant for the project config"),
    ):
        action = actions.add_parser(name, help=text, description=text)
        action.add_argument("path", nargs="?", type=Path, default=None, metavar="PATH")
        add_data_dir(
            action,
            "where grants are kept (default: the user data dir, "
            "platformdirs.user_data_dir('anvil'))",
        )
        if name == "grant":
            action.add_argument(
                "--sha256",
                default=None,
                metavar="HEX",
                help="grant only if the file still has this digest (as `show` printed it)",
            )


def project_file(path: Path | None) -> Path:
    """The project config a PATH names: the file itself, or the one found from a directory."""
    start = Path.cwd() if path is None else path
    if start.is_file():
        return start.resolve()
    found = find_project_config(start)
    if found is None:
        raise ConfigError(f"no .anvil/config.toml found from {start.resolve()} up to its git root")
    return found.resolve()


def run(args: argparse.Namespace) -> int:
    store = TrustStore(data_dir(args.data_dir))
    try:
        file = project_file(args.path)
        if args.trust_action == "revoke":
            return _revoke(store, file)
        data = file.read_bytes()
        sha = digest(data)
        settings = parse_bytes(data, file)
        if args.trust_action == "show":
            return _show(store, file, sha, settings)
        return _grant(store, file, sha, settings, args.sha256)
    except (ConfigError, OSError) as exc:
        print(f"anvilctl trust: {exc}", file=sys.stderr)
        return 1


def _value(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _show(store: TrustStore, file: Path, sha: str, settings: dict[tuple[str, ...], object]) -> int:
    grant = store.find(file)
    if grant is None:
        state = "not granted: authority-bearing keys below are ignored"
    elif grant.sha256 == sha:
        state = f"granted {grant.granted_at}: authority-bearing keys below apply"
    else:
        state = (
            f"grant void: the file changed since it was granted {grant.granted_at}; "
            "authority-bearing keys below are ignored"
        )
    print(f"project config: {file}")
    print(f"sha256: {sha}")
    print(f"trust: {state}")
    authority = [(k, v, c) for k, v in settings.items() if (c := authority_of(k)) is not None]
    data = [(k, v) for k, v in settings.items() if authority_of(k) is None]
    print(f"authority-bearing keys ({len(authority)}):")
    for key, value, category in authority:
        print(f"  {render_key(key)} = {_value(value)}    [{category}; from {file}]")
    print(f"instruction and data keys ({len(data)}):")
    for key, value in data:
        print(f"  {render_key(key)} = {_value(value)}    [from {file}]")
    return 0


def _grant(
    store: TrustStore,
    file: Path,
    sha: str,
    settings: dict[tuple[str, ...], object],
    expected: str | None,
) -> int:
    if expected is not None and expected.lower() != sha:
        print(
            f"anvilctl trust: {file} changed since it was reviewed: its sha256 is {sha}, "
            f"not {expected}; run `anvilctl trust show` again",
            file=sys.stderr,
        )
        return 1
    keys = [render_key(k) for k in settings if authority_of(k) is not None]
    store.grant(file, sha, keys)
    print(f"granted: {file}")
    print(f"sha256: {sha}")
    print(f"authority-bearing keys now applied ({len(keys)}): {', '.join(keys) or 'none'}")
    print("any edit of the file voids this grant")
    return 0


def _revoke(store: TrustStore, file: Path) -> int:
    removed = store.revoke(file)
    if removed is None:
        print(f"anvilctl trust: no trust grant for {file}", file=sys.stderr)
        return 1
    print(f"revoked: {file} (granted {removed.granted_at}, sha256 {removed.sha256})")
    return 0
