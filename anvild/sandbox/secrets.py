"""Secrets: the environment a child process gets, and masking of secret values in text.

Two defences, neither a guarantee. Scrubbing: `child_env` gives a child only `ENV_ALLOWLIST`
(plus `LC_*`), the user's trusted `env_passthrough`, and the caller's overrides; everything else,
API keys included, is dropped. Redaction: a `Redactor` (`from_environ`) replaces each secret
value with `[redacted:NAME]`: every credential-named variable (`is_secret_name`, even when passed
through), every other dropped variable except plain structure (paths, numbers, `BENIGN_NAMES`),
plus `extra_secret_names` and `with_secrets`. Values shorter than `MIN_SECRET_LENGTH` are
ignored, since masking `1` or `true` would destroy output and protect nothing.
`redact` masks longest first, and also a fragment (>= `MIN_FRAGMENT`) at the very start or end
of a text: redact truncated pieces before joining them. A transformed secret (base64, split) is
not recognised. Pure; imports nothing else from the project.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

ENV_ALLOWLIST: Final = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TERM",
        "COLORTERM",
        "NO_COLOR",
        "TZ",
        "TMPDIR",
    }
)
"""Names a child always inherits (when set): locale, terminal, identity and search path."""

ENV_ALLOWED_PREFIXES: Final = ("LC_",)
"""Name prefixes a child inherits: the locale categories (LC_ALL, LC_CTYPE, ...)."""

MIN_SECRET_LENGTH: Final = 8
"""Values shorter than this are never treated as secrets (they would mask ordinary words)."""

MIN_FRAGMENT: Final = 8
"""The shortest piece of a secret masked at the start or the end of a text (a truncation cut)."""

BENIGN_NAMES: Final = frozenset(
    {
        "PWD",
        "OLDPWD",
        "_",
        "SHLVL",
        "HOSTNAME",
        "HOSTTYPE",
        "OSTYPE",
        "MACHTYPE",
        "DISPLAY",
        "WAYLAND_DISPLAY",
        "EDITOR",
        "VISUAL",
        "PAGER",
        "MANPATH",
        "INFOPATH",
        "VIRTUAL_ENV",
        "VIRTUAL_ENV_PROMPT",
        "CONDA_DEFAULT_ENV",
        "CONDA_PREFIX",
        "PYTHONPATH",
        "SSH_TTY",
        "XDG_SESSION_TYPE",
        "XDG_SESSION_CLASS",
        "XDG_SESSION_DESKTOP",
        "XDG_CURRENT_DESKTOP",
        "DESKTOP_SESSION",
        "DEBIAN_FRONTEND",
    }
)
"""Scrubbed names whose values are configuration, not secrets: never used to build a Redactor
(unless the name also looks like a credential, which wins)."""

_SECRET_NAME: Final = re.compile(
    r"""
    API_?KEY | ACCESS_?KEY | PRIVATE_?KEY | SECRET | TOKEN | PASSWORD | PASSWD | PASSPHRASE
    | CREDENTIAL | COOKIE | SESSION_?ID | AUTH | BEARER | SIGNING | CLIENT_ID
    | (?:^|_)KEY$ | (?:^|_)PAT$ | (?:^|_)DSN$ | (?:^|_)PASS$ | CONNECTION_?STRING | DATABASE_URL
    | ^AWS_ | ^AZURE_ | ^GCP_ | ^GOOGLE_ | ^GH_ | ^GITHUB_ | ^GITLAB_ | ^HF_ | ^HUGGING
    | ^NPM_ | ^PYPI_ | ^TWINE_ | ^DOCKER_ | ^OPENAI | ^ANTHROPIC | ^GEMINI | ^MISTRAL
    | ^OPENROUTER | ^GROQ | ^DEEPSEEK | ^XAI_ | ^COHERE | ^TOGETHER | ^FIREWORKS
    """,
    re.IGNORECASE | re.VERBOSE,
)
_PATHLIKE: Final = re.compile(r"^(?:~|\.{0,2}/)\S*$")
_NUMBER: Final = re.compile(r"^[0-9]+(?:\.[0-9]+)*$")


def is_allowlisted(name: str) -> bool:
    """Whether a child inherits `name` without an explicit passthrough."""
    return name in ENV_ALLOWLIST or name.startswith(ENV_ALLOWED_PREFIXES)


def is_secret_name(name: str) -> bool:
    """Whether a variable's name says it holds a credential (`OPENAI_API_KEY`, `GH_TOKEN`, ...)."""
    return _SECRET_NAME.search(name) is not None


def _is_structural(value: str) -> bool:
    """Paths, path lists and numbers: scrubbed values that are configuration, not secrets."""
    if _NUMBER.match(value):
        return True
    parts = value.split(":")
    return all(_PATHLIKE.match(part) for part in parts if part) and any(parts)


def child_env(
    environ: Mapping[str, str] | None = None,
    *,
    passthrough: Iterable[str] = (),
    overrides: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment for a child: allowlisted names, then trusted passthrough, then overrides.

    `environ` defaults to the daemon's `os.environ`. `passthrough` names the user explicitly
    trusted (missing ones are skipped); `overrides` are set last and may also remove nothing: a
    sandbox uses them to point HOME and TMPDIR at its own directories.
    """
    source = os.environ if environ is None else environ
    trusted = frozenset(passthrough)
    env = {name: value for name, value in source.items() if is_allowlisted(name) or name in trusted}
    if overrides:
        env.update(overrides)
    return env


def _redaction_pattern(secrets: Mapping[str, str]) -> re.Pattern[str] | None:
    if not secrets:
        return None
    # Longest first: a secret that contains another one is masked whole, not around the inner one.
    ordered = sorted(secrets, key=lambda value: (-len(value), value))
    return re.compile("|".join(re.escape(value) for value in ordered))


@attrs.frozen
class Redactor:
    """Masks known secret values in text. Build it with `from_environ`; it is immutable and cheap
    to share between tasks."""

    secrets: Mapping[str, str] = attrs.field(factory=dict)
    """Secret value -> the name shown in its mask (`[redacted:NAME]`)."""
    _pattern: re.Pattern[str] | None = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        kept = {
            value: name for value, name in self.secrets.items() if len(value) >= MIN_SECRET_LENGTH
        }
        object.__setattr__(self, "secrets", kept)
        object.__setattr__(self, "_pattern", _redaction_pattern(kept))

    @classmethod
    def from_environ(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        passthrough: Iterable[str] = (),
        extra_secret_names: Iterable[str] = (),
    ) -> Redactor:
        """The redactor for an environment: credential-named variables (passed through or not),
        the other variables scrubbing drops (except structural values and `BENIGN_NAMES`), and the
        variables named in `extra_secret_names` (provider `api_key_env`s), each 8+ characters."""
        source = os.environ if environ is None else environ
        trusted = frozenset(passthrough)
        extra = frozenset(extra_secret_names)
        found: dict[str, str] = {}
        for name in sorted(source):
            value = source[name]
            if len(value) < MIN_SECRET_LENGTH:
                continue
            if name in extra or is_secret_name(name):
                found.setdefault(value, name)
            elif is_allowlisted(name) or name in trusted or name in BENIGN_NAMES:
                continue
            elif not _is_structural(value):
                found.setdefault(value, name)
        return cls(found)

    def with_secrets(self, secrets: Mapping[str, str]) -> Redactor:
        """A redactor that also masks `secrets` (name -> value), e.g. keys read from a file."""
        merged = dict(self.secrets)
        for name, value in secrets.items():
            merged.setdefault(value, name)
        return Redactor(merged)

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def redact(self, text: str) -> str:
        """`text` with every occurrence of a secret, and a secret fragment cut at either end of
        the text, replaced by `[redacted:NAME]`."""
        if self._pattern is None or not text:
            return text
        masked = self._pattern.sub(lambda m: f"[redacted:{self.secrets[m.group(0)]}]", text)
        return self._mask_cut_ends(masked)

    def _mask_cut_ends(self, text: str) -> str:
        if len(text) >= MIN_FRAGMENT:
            for value, name in self.secrets.items():
                if text in value:  # a piece cut from the middle of a secret, both ends gone
                    return f"[redacted:{name}]"
        head = tail = 0
        head_name = tail_name = ""
        for value, name in self.secrets.items():
            # A tail piece of a secret at the start (its head was cut off), longest match wins.
            for size in range(min(len(value) - 1, len(text)), MIN_FRAGMENT - 1, -1):
                if size <= head:
                    break
                if text.startswith(value[-size:]):
                    head, head_name = size, name
                    break
            # A head piece of a secret at the end (its tail was cut off).
            for size in range(min(len(value) - 1, len(text)), MIN_FRAGMENT - 1, -1):
                if size <= tail:
                    break
                if text.endswith(value[:size]):
                    tail, tail_name = size, name
                    break
        if head + tail > len(text):
            # Both ends overlap: the whole text is pieces of secrets.
            return f"[redacted:{head_name}]"
        start = f"[redacted:{head_name}]" if head else ""
        end = f"[redacted:{tail_name}]" if tail else ""
        return start + text[head : len(text) - tail] + end

    def redact_json(self, value: Any) -> Any:
        """A copy of a JSON-like value (str, list, tuple, dict; other leaves as they are) with
        every string, keys included, redacted."""
        if not self:
            return value
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, Mapping):
            return {self.redact_json(k): self.redact_json(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.redact_json(item) for item in value)
        return value


__all__ = [
    "BENIGN_NAMES",
    "ENV_ALLOWED_PREFIXES",
    "ENV_ALLOWLIST",
    "MIN_FRAGMENT",
    "MIN_SECRET_LENGTH",
    "Redactor",
    "child_env",
    "is_allowlisted",
    "is_secret_name",
]
