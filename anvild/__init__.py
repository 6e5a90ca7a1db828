"""anvild: LLM coding-agent sessions published as plain files over 9P."""

__version__ = "0.1.0"
