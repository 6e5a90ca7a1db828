"""Provider adapters, one module per wire protocol family.

Each module (`anthropic`, `openai_chat`, `openai_responses`, `gemini`) has the same shape:

- `KIND`: the config name of the protocol (`"anthropic"`, `"openai-chat"`, ...);
- `to_wire(request, capabilities) -> dict`: the pure request body;
- `StreamState`: a sans-IO state machine, `on_sse(SseEvent) -> list[StreamEvent]` and
  `on_end() -> list[StreamEvent]`, raising `LlmError`s for wire errors;
- a `Provider` implementation: thin httpx glue around the two, using `anvild.llm.http`.
"""
