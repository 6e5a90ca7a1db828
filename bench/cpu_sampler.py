"""A CPU-time sampling profiler for one Python process: where the main thread spends its CPU.

    python bench/cpu_sampler.py OUT [--interval-ms 1] -m MODULE [ARGS...]

runs `python -m MODULE ARGS...` with a SIGPROF timer (ITIMER_PROF: the process's CPU time,
user and system) firing every `--interval-ms` (the kernel's tick bounds it: 4 ms at HZ=250);
each tick takes the main thread's stack; SIGUSR1 forgets the samples so far (the bench sends
it when the phase it measures starts). At
exit OUT gets the samples as collapsed stacks (`a;b;c COUNT`, one a line, what flame graph
tools read) and OUT.txt a table of the functions by self and by inclusive share. Unlike
cProfile it adds no cost per call, so small hot functions are not inflated; time in a C call
(a `send`) is charged to the Python line that made it.
"""

from __future__ import annotations

import atexit
import collections
import os
import runpy
import signal
import sys
from pathlib import Path
from types import FrameType


def _name(frame: FrameType) -> str:
    code = frame.f_code
    path = code.co_filename
    for marker in ("/site-packages/", "/work/main/", "/lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{code.co_name}"


def main() -> None:
    args = sys.argv[1:]
    out = Path(args.pop(0))
    interval = 0.001
    if args[:1] == ["--interval-ms"]:
        interval = float(args[1]) / 1000
        del args[:2]
    if args[:1] != ["-m"] or len(args) < 2:
        raise SystemExit("usage: cpu_sampler.py OUT [--interval-ms MS] -m MODULE [ARGS...]")
    module = args[1]
    stacks: collections.Counter[tuple[str, ...]] = collections.Counter()

    def tick(_signum: int, frame: FrameType | None) -> None:
        names = []
        while frame is not None:
            names.append(_name(frame))
            frame = frame.f_back
        stacks[tuple(reversed(names))] += 1

    def report() -> None:
        signal.setitimer(signal.ITIMER_PROF, 0)
        total = sum(stacks.values()) or 1
        own: collections.Counter[str] = collections.Counter()
        inclusive: collections.Counter[str] = collections.Counter()
        with out.open("w") as collapsed:
            for stack, count in stacks.items():
                collapsed.write(f"{';'.join(stack)} {count}\n")
                own[stack[-1]] += count
                for name in set(stack):
                    inclusive[name] += count
        lines = [f"{total} samples, {interval * 1000:g} ms of CPU each", "", "self %  function"]
        lines += [f"{100 * n / total:6.2f}  {name}" for name, n in own.most_common(60)]
        lines += ["", "inclusive %  function"]
        lines += [f"{100 * n / total:6.2f}  {name}" for name, n in inclusive.most_common(120)]
        out.with_name(out.name + ".txt").write_text("\n".join(lines) + "\n")

    atexit.register(report)
    signal.signal(signal.SIGUSR1, lambda _signum, _frame: stacks.clear())
    signal.signal(signal.SIGPROF, tick)
    signal.setitimer(signal.ITIMER_PROF, interval, interval)
    sys.argv = [module, *args[2:]]
    sys.path[0] = os.getcwd()  # as `python -m` has it: the module is the working directory's
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
