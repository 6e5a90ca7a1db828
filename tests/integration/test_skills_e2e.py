"""Skills with the real embedded model: a session whose user has 20 skills says "hi" within its
window. A real daemon on llama-server (SmolLM2-135M, 8,192 tokens) finds the skills in the
user's config dir (XDG_CONFIG_HOME/anvil/skills): `agent/ID/skills` lists them, the system
prompt has their names and descriptions and none of their bodies, and the turn ends done (or at
the model's 256-token output limit, which a 135M model may reach) with the request well inside
the window. It runs with `make test-llama-long` (the 4,000-token prompt takes the one-thread
test model most of a minute; `make test` checks the skills list, the prompt block and the
`skill` tool in tests/unit/skills). Skipped with the command to run when `make llama-server` has
not been run; with ANVIL_REQUIRE_LLAMA=1 it fails instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from anvilctl.headless import EXIT_CODES
from anvild.daemon.llama import CONTEXT
from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_sessions_e2e import LLAMA_TIMEOUT, anvilctl, ok, read
from tests.support.llama import built_llama, llama_env

SKILLS = 20
TOPICS = (
    "database migrations",
    "release notes",
    "PDF forms",
    "Dockerfiles",
    "flaky tests",
    "API changelogs",
    "log analysis",
    "SQL query plans",
    "shell scripts",
    "CSV cleanup",
)


def write_skills(config_dir: Path) -> list[str]:
    names = []
    for i in range(SKILLS):
        topic = TOPICS[i % len(TOPICS)]
        name = f"{topic.lower().replace(' ', '-')}-{i}"
        folder = config_dir / "skills" / name
        (folder / "scripts").mkdir(parents=True)
        (folder / "SKILL.md").write_text(
            f"---\nname: {name}\ndescription: Work with {topic} in this kind of project. Use "
            f"when the user asks about {topic} or a file of that kind fails to load.\n"
            f"license: MIT\n---\n# {topic}\n\nBODY-OF-{name}: " + "Step by step. " * 200 + "\n"
        )
        (folder / "scripts" / "check.sh").write_text("#!/bin/sh\necho ok\n")
        names.append(name)
    return names


@pytest.mark.slow
@pytest.mark.usefixtures("one_llama_at_a_time")
@pytest.mark.skipif(
    os.environ.get("ANVIL_LLAMA_LONG") != "1",
    reason="most of a minute of llama-server work: `make test-llama-long`",
)
def test_twenty_skills_stay_under_the_window_for_hi(namespace: Path, workdir: Path) -> None:
    paths = built_llama()
    names = write_skills(namespace.parent / "xdg-config" / "anvil")
    daemon = Anvild(
        namespace,
        env=llama_env(paths),
    )
    try:
        daemon.wait_serving()
        session_id = ok(anvilctl(namespace, "new", cwd=workdir)).strip()
        listed = read(namespace, f"agent/{session_id}/skills").splitlines()
        assert sorted(line.split("\t")[0] for line in listed) == sorted(names)
        assert {line.split("\t")[1] for line in listed} == {"user"}
        system = read(namespace, f"agent/{session_id}/systemprompt")
        assert system.count("\n- ") >= SKILLS
        for name in names:
            assert f"\n- {name}: Work with " in system
        assert "BODY-OF-" not in system
        ok(anvilctl(namespace, "send", session_id, "-", stdin="hi\n"))
        waited = anvilctl(namespace, "wait", session_id, "--timeout", str(LLAMA_TIMEOUT))
        assert waited.returncode in (0, EXIT_CODES["max_tokens"]), (waited, waited.stderr)
        assert ok(anvilctl(namespace, "out", session_id)).strip()
        used, window = read(namespace, f"agent/{session_id}/usage").split()[0].split("/")
        assert int(window) == CONTEXT
        # About 2,900 tokens without skills (test_sessions_e2e.py); the 20 lines and the `skill`
        # tool add about 1,200 (4,076 measured).
        assert int(used) < 4500, used
    finally:
        code, log = daemon.stop()
    assert code == 0, log
