"""`SessionSettings.extra_context`: the convoy context in a session's system prompt, after the
role and before the session's own context, byte-stable while it does not change."""

from __future__ import annotations

from pathlib import Path

from anvild.beads import BeadStore, NewBead, NewConvoy
from anvild.llm.testing import ScriptedProvider, script
from tests.unit.session.support import Models, ask, new, running, target


async def test_the_convoy_context_enters_the_prompt_of_its_workers(tmp_path: Path) -> None:
    store = BeadStore(tmp_path / "beads")
    await store.open()
    convoy = await store.create_convoy(
        NewConvoy("Auth", "Add OAuth", context="OWASP top 10 applies."), by="user"
    )
    bead = await store.create(NewBead("Implement OAuth", "developer", convoy=convoy.id), by="user")
    provider = ScriptedProvider([script.text(f"t{n}") for n in range(4)])
    models = Models({"fake": target(provider)})
    async with running(tmp_path, models, extra_context=store.context_for) as manager:
        session = await new(manager, role="developer")
        session.set_context("Session notes.")
        await ask(session, "before the claim")
        await store.claim(bead.id, session.id, by="user")
        await ask(session, "first turn on the bead")
        await ask(session, "second turn on the bead")
        await store.set_context(convoy.id, "OWASP top 10 applies. Use the user table.", by="u")
        await ask(session, "after the context changed")
    systems = [request.system for request in provider.requests]
    assert "Convoy context" not in systems[0]
    prompt = systems[1]
    assert "## Convoy auth-001: Auth\n\nGoal: Add OAuth\n\nOWASP top 10 applies." in prompt
    assert prompt.index("# Your role: developer") < prompt.index("# Convoy context")
    assert prompt.index("# Convoy context") < prompt.index("# Session context")
    assert systems[2] == systems[1]  # byte-stable while unchanged
    assert "Use the user table." in systems[3]
