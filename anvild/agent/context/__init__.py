"""Context management: sessions that never die of a full window.

    tokens.py      request sizes, and the meter that turns bytes into a model's tokens
    clearing.py    old tool results replaced by stubs in a request (never in the records)
    compaction.py  what a compaction drops and keeps, the summary request, the new transcript
    window.py      the policy (`ContextSettings`) and the summariser's model calls

The loop applies them before every request (`anvild.agent.loop`); the session records a
compaction and serves it (`anvild.session.compaction`).
"""

from anvild.agent.context.window import Compaction, ContextSettings, ContextWindow, SummaryFailed

__all__ = ["Compaction", "ContextSettings", "ContextWindow", "SummaryFailed"]
