"""The subset's lexer against bash itself: for every generated line that `analyze` puts in the
subset, bash must run exactly its segments, word for word, and create exactly its redirect
targets. Lines are built from quoting, escapes, separators, redirects and characters that are
special somewhere in bash; programs are two scripts that record their argv.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from anvild.agent.permissions.shell import analyze

# Any other name the line runs is recorded by bash's not-found hook (BASH_ENV is read by bash -c),
# which also succeeds, so `&&` goes on as it does after p and q.
NOT_FOUND = (
    "command_not_found_handle() { out=$(printf '%s\\001' \"$@\"); "
    'printf \'%s\\n\' "$out" >> "$LOG"; return 0; }\n'
)
BUILTINS = frozenset(
    subprocess.run(
        ["/bin/bash", "-c", "compgen -b"], capture_output=True, text=True, check=True
    ).stdout.split()
)
# One write per run (O_APPEND), so the two sides of a pipe never interleave their records.
RECORDER = '#!/bin/sh\nout=$(printf \'%s\\001\' "$0" "$@")\nprintf \'%s\\n\' "$out" >> "$LOG"\n'
SPECIAL = " \t\n'\"\\;&|<>()$`{}[]~#=!*?-.:%^,+@é\r\x07"
BARE = SPECIAL.replace("<", "")  # a bare `<` would read a file that does not exist
PLAIN = "abcxyz019-._:%^,+@é="

plain = st.text(alphabet=PLAIN, min_size=1, max_size=4)
single = st.text(alphabet=SPECIAL.replace("'", "") + "ab", max_size=5).map(lambda s: f"'{s}'")
double = st.text(alphabet=SPECIAL.replace('"', "") + "ab", max_size=5).map(lambda s: f'"{s}"')
escaped = st.sampled_from(SPECIAL + "ab").map(lambda c: "\\" + c)
bare = st.sampled_from(BARE)
piece = st.one_of(plain, plain, single, double, escaped, bare)
word = st.lists(piece, min_size=1, max_size=4).map("".join)
# Output files go to the parent directory, so the working directory stays empty and a glob in a
# word matches nothing (bash then keeps it as written, as the segment does) unless a bare `>` in
# a generated word made a file there.
redirect = st.one_of(
    st.tuples(st.sampled_from([">", ">>", "2>", "&>", " > ", "2>&1 >", ">|"]),
              st.sampled_from(["../o1", "../o2", "'../o 3'", "..\\/o4"])),
    st.just(("<", "/dev/null")),
)  # fmt: skip
segment = st.tuples(
    st.sampled_from(["p", "q", "\\p", "'q'", "p\\\n"]),
    st.lists(word, max_size=4),
    st.lists(redirect, max_size=1),
).map(lambda t: " ".join([t[0], *t[1], *(op + target for op, target in t[2])]))
line = st.tuples(
    segment, st.lists(st.tuples(st.sampled_from(["; ", " && ", " | ", "\n", ";"]), segment),
                      max_size=2),
).map(lambda t: t[0] + "".join(sep + s for sep, s in t[1]))  # fmt: skip


def run_bash(command: str) -> tuple[Counter[tuple[str, ...]], set[str]]:
    """The argv of every recorded program run and the files created, running `command`."""
    with tempfile.TemporaryDirectory() as top:
        bin_dir, work = Path(top, "bin"), Path(top, "work")
        bin_dir.mkdir()
        work.mkdir()
        for name in ("p", "q"):
            (bin_dir / name).write_text(RECORDER)
            (bin_dir / name).chmod(0o755)
        log = Path(top, "log")
        log.touch()
        hook = Path(top, "hook")
        hook.write_text(NOT_FOUND)
        env = {"PATH": str(bin_dir), "LOG": str(log), "LC_ALL": "C.UTF-8", "BASH_ENV": str(hook)}
        subprocess.run(["/bin/bash", "-c", command], cwd=work, env=env, timeout=10,
                       stdin=subprocess.DEVNULL, capture_output=True, check=False)  # fmt: skip
        entries = [e.split("\x01")[:-1] for e in log.read_text().split("\n") if e]
        runs = Counter((os.path.basename(e[0]), *e[1:]) for e in entries)
        created = {p.name for p in Path(top).iterdir()} - {"bin", "work", "log", "hook"}
        created |= {p.name for p in work.iterdir()}
        return runs, created


@settings(max_examples=int(os.environ.get("ANVIL_BASH_EXAMPLES", "300")))
@given(line)
@example("p a\\\nb 'c;d' \"e|f\" g\\ h > ../o1; q")
@example("p x#y #z > ../o2\nq")
@example('p "";" </dev/null; p "')
def test_bash_runs_exactly_the_segments_of_an_in_subset_line(command: str) -> None:
    analysis = analyze(command)
    if not analysis.checkable:
        return
    runs, created = run_bash(command)
    # Every program succeeds, so a segment after `||` is skipped, with the rest of its pipeline.
    ran: list[tuple[str, ...]] = []
    skipped = False
    for s in analysis.segments:
        skipped = s.after == "||" or (s.after == "|" and skipped)
        # A name with a slash is a path: bash runs no not-found hook for it, so nothing records.
        if not skipped and s.words[0] not in BUILTINS and "/" not in s.words[0]:
            ran.append(s.words)
    expected = Counter(ran)
    targets = {
        os.path.basename(r.target) for s in analysis.segments for r in s.redirects if r.writes
    }
    assert created == targets, (command, analysis.segments)
    if created - {"o1", "o2", "o 3", "o4"} and any(s.globs for s in analysis.segments):
        # A file the line made in the working directory may match a later glob: then bash
        # expands it, and only the programs run can be compared.
        assert sorted(w[0] for w in runs.elements()) == sorted(w[0] for w in expected.elements())
        return
    assert runs == expected, (command, analysis.segments)
