"""OpenTelemetry for sessions: traces per turn and metrics, off unless `[telemetry]` names an
OTLP/HTTP endpoint. `traces` makes spans and metrics from a session's agent events; `spans`
the cheap spans it makes; `export` is the non-blocking span processor (bounded queue, drops
counted); `who` is what a session's spans say about it. Only `who` is imported here: the
SDK loads when telemetry is configured."""

from anvild.telemetry.who import Who

__all__ = ["Who"]
