"""The llm layer: canonical conversation types, transcript integrity, the stream vocabulary, the
SSE decoder, the message builder and (later) the provider adapters, retry and registry.

Dependency rule (DESIGN section 2, enforced by a test): this package imports nothing else from
the project. It knows providers; it knows nothing about tools, sessions or 9P.
"""
