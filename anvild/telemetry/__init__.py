"""OpenTelemetry for sessions: traces per turn and metrics, off unless `[telemetry]` names an
OTLP/HTTP endpoint. `traces` makes spans and metrics from a session's agent events; `export`
is the non-blocking span processor (bounded queue, drops counted)."""

from anvild.telemetry.export import BoundedProcessor
from anvild.telemetry.traces import Telemetry, Who, parse_headers

__all__ = ["BoundedProcessor", "Telemetry", "Who", "parse_headers"]
