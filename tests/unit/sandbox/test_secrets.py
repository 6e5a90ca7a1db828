"""Child environment allowlist and the Redactor (course 12.3, 12.B; issue 6 item 7)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from anvild.sandbox.secrets import (
    MIN_SECRET_LENGTH,
    Redactor,
    child_env,
    is_allowlisted,
    is_secret_name,
)

KEY = "sk-ant-api03-PLANTEDKEYvalue0123456789abcdef"
ENVIRON = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/home/dev",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "LC_CTYPE": "C.UTF-8",
    "TERM": "xterm-256color",
    "USER": "dev",
    "SHELL": "/bin/bash",
    "TZ": "UTC",
    "TMPDIR": "/tmp",
    "ANTHROPIC_API_KEY": KEY,
    "GH_TOKEN": "ghp_0123456789abcdefghij",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "MY_LLM": "opaque-value-with-no-telltale-name",
    "DATABASE_URL": "postgres://app:hunter2hunter2@db/app",
    "OLDPWD": "/home/dev/projects/something",
    "XDG_RUNTIME_DIR": "/run/user/1000",
    "PWD": "/home/dev/projects/anvil",
    "SHLVL": "1",
    "HISTSIZE": "100000000",
    "SHORT": "abc",
}


@pytest.mark.parametrize(
    ("name", "allowed"),
    [
        ("PATH", True),
        ("HOME", True),
        ("LC_MESSAGES", True),
        ("LANG", True),
        ("TMPDIR", True),
        ("ANTHROPIC_API_KEY", False),
        ("LD_PRELOAD", False),
        ("PWD", False),
        ("SSH_AUTH_SOCK", False),
    ],
)
def test_allowlist(name: str, allowed: bool) -> None:
    assert is_allowlisted(name) is allowed


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("OPENAI_API_KEY", True),
        ("ANTHROPIC_API_KEY", True),
        ("GH_TOKEN", True),
        ("CI_JOB_TOKEN", True),
        ("STRIPE_SECRET_KEY", True),
        ("AWS_ACCESS_KEY_ID", True),
        ("AWS_PROFILE", True),
        ("PGPASSWORD", True),
        ("SENTRY_DSN", True),
        ("DATABASE_URL", True),
        ("GITLAB_PAT", True),
        ("KEY", True),
        ("PATH", False),
        ("HOME", False),
        ("MONKEY", False),
        ("LANG", False),
        ("EDITOR", False),
    ],
)
def test_secret_names(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


def test_child_env_keeps_only_the_allowlist() -> None:
    env = child_env(ENVIRON)
    assert env == {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/home/dev",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "LC_CTYPE": "C.UTF-8",
        "TERM": "xterm-256color",
        "USER": "dev",
        "SHELL": "/bin/bash",
        "TZ": "UTC",
        "TMPDIR": "/tmp",
    }


def test_child_env_passthrough_and_overrides() -> None:
    env = child_env(
        ENVIRON,
        passthrough=["GH_TOKEN", "NOT_SET_ANYWHERE"],
        overrides={"HOME": "/sandbox/home"},
    )
    assert env["GH_TOKEN"] == ENVIRON["GH_TOKEN"]
    assert "NOT_SET_ANYWHERE" not in env
    assert env["HOME"] == "/sandbox/home"
    assert "ANTHROPIC_API_KEY" not in env


def test_child_env_defaults_to_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANVIL_TEST_API_KEY", KEY)
    monkeypatch.setenv("LC_ANVIL_TEST", "x")
    env = child_env()
    assert "ANVIL_TEST_API_KEY" not in env
    assert env["LC_ANVIL_TEST"] == "x"


def test_env_of_a_child_built_from_the_allowlist_has_no_api_key() -> None:
    environ = dict(ENVIRON, PATH="/usr/bin:/bin")
    out = subprocess.run(
        ["env"], env=child_env(environ), capture_output=True, text=True, check=True
    ).stdout
    assert "api_key" not in out.lower()
    assert KEY not in out
    assert "PATH=/usr/bin:/bin" in out.splitlines()


def test_redactor_from_environ_picks_secrets_not_structure() -> None:
    redactor = Redactor.from_environ(ENVIRON, extra_secret_names=["MY_LLM"])
    assert redactor.secrets == {
        KEY: "ANTHROPIC_API_KEY",
        "ghp_0123456789abcdefghij": "GH_TOKEN",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY": "AWS_SECRET_ACCESS_KEY",
        "opaque-value-with-no-telltale-name": "MY_LLM",
        "postgres://app:hunter2hunter2@db/app": "DATABASE_URL",
    }


def test_scrubbed_values_without_a_telltale_name_are_secrets_too() -> None:
    redactor = Redactor.from_environ({"MY_LLM": "opaque-value-with-no-telltale-name"})
    assert redactor.redact("x opaque-value-with-no-telltale-name y") == "x [redacted:MY_LLM] y"


def test_passed_through_credentials_are_still_redacted() -> None:
    redactor = Redactor.from_environ(ENVIRON, passthrough=["GH_TOKEN"])
    assert redactor.redact("token=ghp_0123456789abcdefghij") == "token=[redacted:GH_TOKEN]"


def test_passed_through_plain_variables_are_not_redacted() -> None:
    redactor = Redactor.from_environ(
        {"BUILD_FLAVOUR": "release-optimised"}, passthrough=["BUILD_FLAVOUR"]
    )
    assert not redactor
    assert redactor.redact("release-optimised") == "release-optimised"


def test_short_values_are_ignored() -> None:
    redactor = Redactor.from_environ({"API_KEY": "x" * (MIN_SECRET_LENGTH - 1)})
    assert not redactor
    assert Redactor({"short": "NAME"}).secrets == {}


def test_planted_key_never_appears_in_a_tool_result() -> None:
    redactor = Redactor.from_environ(ENVIRON)
    tool_result = (
        f"Exit code: 0\nstdout:\nANTHROPIC_API_KEY={KEY}\nexport K='{KEY}'\n{KEY}{KEY}\nstderr:\n"
    )
    masked = redactor.redact(tool_result)
    assert KEY not in masked
    assert masked.count("[redacted:ANTHROPIC_API_KEY]") == 4
    assert masked.startswith("Exit code: 0\nstdout:\nANTHROPIC_API_KEY=[redacted:")


@pytest.mark.parametrize(
    "text",
    [
        KEY[12:],  # the head of the key was cut off by truncation
        "tail of the output: " + KEY[: len(KEY) - 9],  # the tail was cut off
        KEY[5:-5],  # both
    ],
)
def test_fragments_cut_at_either_end_are_masked(text: str) -> None:
    masked = Redactor({KEY: "ANTHROPIC_API_KEY"}).redact(text)
    assert "[redacted:ANTHROPIC_API_KEY]" in masked
    for size in range(8, len(KEY)):
        for start in range(len(KEY) - size + 1):
            fragment = KEY[start : start + size]
            if fragment in text:
                assert fragment not in masked or fragment in "[redacted:ANTHROPIC_API_KEY]"


def test_fragments_in_the_middle_are_left_alone() -> None:
    # Only a cut at the text's ends is a truncation; 8 chars inside ordinary text are not masked.
    redactor = Redactor({KEY: "K"})
    assert redactor.redact(f"start {KEY[3:20]} end") == f"start {KEY[3:20]} end"


def test_a_secret_that_contains_another_is_masked_whole() -> None:
    redactor = Redactor({"abcdefgh": "INNER", "xxabcdefghxx": "OUTER"})
    assert (
        redactor.redact("1 xxabcdefghxx 2 abcdefgh 3") == "1 [redacted:OUTER] 2 [redacted:INNER] 3"
    )


def test_with_secrets_and_redact_json() -> None:
    redactor = Redactor().with_secrets({"FILE_KEY": "from-a-key-file-1234"})
    record = {
        "kind": "tool_result",
        "content": ["ok", "from-a-key-file-1234"],
        "nested": ({"from-a-key-file-1234": 3},),
        "n": 3,
    }
    assert redactor.redact_json(record) == {
        "kind": "tool_result",
        "content": ["ok", "[redacted:FILE_KEY]"],
        "nested": ({"[redacted:FILE_KEY]": 3},),
        "n": 3,
    }


def test_empty_redactor_returns_text_unchanged() -> None:
    assert Redactor().redact("anything at all") == "anything at all"
    assert Redactor().redact_json({"a": 1}) == {"a": 1}


def test_redactor_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANVIL_TEST_TOKEN", KEY)
    assert KEY not in Redactor.from_environ().redact(f"{sys.executable} printed {KEY}")
