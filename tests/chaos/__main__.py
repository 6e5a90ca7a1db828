"""The reliability harness in full: `python -m tests.chaos` (`make chaos`).

    python -m tests.chaos [--short] [--only fuzz,crash,disk,provider,connections] [--out FILE]

Runs each part with its full counts (--short: small counts, about those of the pytest tests
in tests/chaos, which run the short mode in `make test`) and prints every part's figures as
Markdown tables, with the findings under each; --out also writes them to FILE. Exit status 1
when a target is missed: a crash, a hang, a record lost, a repeated side effect, an internal
error for client input. The figures in docs/RELIABILITY.md come from this command.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.chaos import connections, crash, diskfull, ninep_fuzz, provider_faults
from tests.chaos.common import Result

FULL = {"fuzz_episodes": 3000, "kills": 100, "disk_rounds": 3, "connections": 1000}
SHORT = {"fuzz_episodes": 165, "kills": 1, "disk_rounds": 1, "connections": 1000}

# Counts that must be 0 (the targets), in any part that reports them.
TARGETS = (
    "crashes (daemon died)",
    "hangs (no reply within the bound)",
    "daemon stuck (fresh connection not served)",
    "internal error replies",
    "internal errors in the daemon log",
    "internal errors",
    "records lost (acknowledged prompt missing)",
    "repeated side effects",
    "torn files",
    "corrupt records",
    "turns that hung",
    "other session not served during a fault",
    "other client not served",
    "descriptors leaked",
)


def missed(result: Result) -> list[str]:
    return [f"{name}: {result[name]}" for name in TARGETS if result[name]]


def parts(full: bool) -> dict[str, Callable[[Path], list[Result]]]:
    n = FULL if full else SHORT

    def disk(tmp: Path) -> list[Result]:
        try:
            plain = diskfull.run(tmp / "plain", n["disk_rounds"])
            with_clear = diskfull.run(tmp / "clear", n["disk_rounds"], clear_while_full=True)
        except diskfull.MountRefused as exc:
            skipped = Result("Disk full")
            skipped.note(f"skipped: {exc}")
            return [skipped]
        return [plain, with_clear]

    return {
        "fuzz": lambda tmp: [ninep_fuzz.run(tmp, n["fuzz_episodes"])],
        "crash": lambda tmp: [crash.run(tmp, n["kills"])],
        "disk": disk,
        "provider": lambda tmp: [provider_faults.run(tmp, full=full)],
        "connections": lambda tmp: [
            connections.run(tmp / "inherited", n["connections"], beyond=30),
            connections.run(tmp / "soft1024", n["connections"], soft_nofile=1024, beyond=30),
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="the pytest tests' small counts")
    parser.add_argument("--only", default="", help="comma-separated parts (default: all)")
    parser.add_argument("--out", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    table = parts(not args.short)
    chosen = [p for p in args.only.split(",") if p] or list(table)
    unknown = set(chosen) - set(table)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; known: {', '.join(table)}")
    load = os.getloadavg()
    lines = [
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{'short' if args.short else 'full'} counts, {os.cpu_count()} cores, "
        f"load average {load[0]:.1f} at start, Python {platform.python_version()}, "
        f"uid {os.geteuid()}.",
        "",
    ]
    failed: list[str] = []
    for name in chosen:
        with tempfile.TemporaryDirectory(prefix=f"anvil-chaos-{name}-") as tmp:
            for result in table[name](Path(tmp)):
                block = [result.table(), "", *(f"- {note}" for note in result.notes), ""]
                lines += block
                failed += [f"{result.part}: {m}" for m in missed(result)]
                print("\n".join(block), flush=True)
    lines.append("Targets missed: " + ("; ".join(failed) if failed else "none"))
    report = "\n".join(lines) + "\n"
    print(lines[-1])
    if args.out:
        args.out.write_text(report)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
