"""The daemon's log: structlog JSON lines in a rotating file in the data dir, secrets masked.

`configure_logging` is called once by the entry point; modules only call
`structlog.get_logger()` (or `logging.getLogger`): both reach one root `RotatingFileHandler` on
`<data>/logs/anvild.log` (`MAX_BYTES`, `BACKUPS`) whose formatter writes one JSON object a line
(`timestamp` UTC, `level`, `logger`, `event`). Nothing is logged on stdout or stderr.
The last two steps before a line is written redact it (`Redactor.redact_json` over the event,
`Redactor.redact` over the line), so a key reaching a log call shows `[redacted:NAME]`.
`ANVIL_LOG` sets the level (`parse_level`); HTTP libraries stay at warning unless debug.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import attrs
import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from anvild.sandbox.secrets import Redactor

__all__ = [
    "BACKUPS",
    "LEVELS",
    "LOG_ENV",
    "MAX_BYTES",
    "LogLevelError",
    "LogSetup",
    "configure_logging",
    "parse_level",
]

LOG_ENV: Final = "ANVIL_LOG"
LEVELS: Final[Mapping[str, int]] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
MAX_BYTES: Final = 10 * 1024 * 1024
BACKUPS: Final = 5
_CHATTY: Final = ("httpx", "httpcore")


class LogLevelError(Exception):
    """`ANVIL_LOG` names no level; the message lists the ones there are."""


def parse_level(value: str | None) -> int:
    """The logging level `ANVIL_LOG` asks for (unset or empty: info)."""
    if value is None or not value.strip():
        return logging.INFO
    level = LEVELS.get(value.strip().lower())
    if level is None:
        allowed = "|".join(LEVELS)
        raise LogLevelError(
            f"{LOG_ENV}={value!r} is not a log level; set it to one of {allowed} "
            f"(or unset it for info)"
        )
    return level


def _redacting(redactor: Redactor) -> Processor:
    def redact(logger: WrappedLogger, method: str, event: EventDict) -> EventDict:
        redacted: EventDict = redactor.redact_json(event)
        return redacted

    return redact


@attrs.define
class _RedactedRenderer:
    """JSON, then the rendered line redacted once more as a whole."""

    redactor: Redactor
    _json: structlog.processors.JSONRenderer = attrs.field(
        factory=lambda: structlog.processors.JSONRenderer(sort_keys=False)
    )

    def __call__(self, logger: WrappedLogger, method: str, event: EventDict) -> str:
        line = self._json(logger, method, event)
        assert isinstance(line, str)
        return self.redactor.redact(line)


@attrs.define
class LogSetup:
    """The configured log: where it is, and `close` to undo the configuration (tests)."""

    path: Path
    level: int
    _handler: logging.Handler
    _saved_levels: dict[str, int] = attrs.field(factory=dict)

    def close(self) -> None:
        root = logging.getLogger()
        root.removeHandler(self._handler)
        self._handler.close()
        for name, level in self._saved_levels.items():
            logging.getLogger(name).setLevel(level)
        structlog.reset_defaults()


def configure_logging(
    data_dir: Path,
    *,
    level: int,
    redactor: Redactor,
    max_bytes: int = MAX_BYTES,
    backups: int = BACKUPS,
) -> LogSetup:
    """Send every log record of this process to `<data_dir>/logs/anvild.log` as JSON lines.

    Replaces any handler already on the root logger (the log goes to the file only)."""
    logs = data_dir / "logs"
    logs.mkdir(mode=0o700, exist_ok=True)
    path = logs / "anvild.log"
    # Created 0600 before the handler opens it (logging opens with the umask's mode).
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600))
    handler = logging.handlers.RotatingFileHandler(
        path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"
    )
    timestamper = structlog.processors.TimeStamper(fmt="iso", utc=True)
    foreign: list[Processor] = [
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        timestamper,
    ]
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=foreign,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                _redacting(redactor),
                _RedactedRenderer(redactor),
            ],
        )
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    saved: dict[str, int] = {}
    if level > logging.DEBUG:
        for name in _CHATTY:
            chatty = logging.getLogger(name)
            saved[name] = chatty.level
            chatty.setLevel(logging.WARNING)
    processors: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.filter_by_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        structlog.stdlib.PositionalArgumentsFormatter(),
        timestamper,
        structlog.processors.StackInfoRenderer(),
        structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
    ]
    structlog.configure(
        processors=processors,
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    return LogSetup(path=path, level=level, handler=handler, saved_levels=saved)
