"""anvilctl's command-line conventions: `--version`, "did you mean" for a mistyped command, and
the shell completion scripts (`anvilctl completion bash|zsh|fish`, made from the parser)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from anvild import __version__


def _anvilctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "anvilctl", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=env,
        check=False,
    )


def test_version() -> None:
    result = _anvilctl("--version")
    assert (result.returncode, result.stdout, result.stderr) == (0, f"anvilctl {__version__}\n", "")


@pytest.mark.parametrize(
    ("word", "guess"),
    [("sesions", "sessions"), ("raed", "read"), ("atach", "attach"), ("complete", "completion")],
)
def test_a_mistyped_command_names_the_nearest_one(word: str, guess: str) -> None:
    result = _anvilctl(word, "x")
    assert result.returncode == 2
    assert f"anvilctl: error: unknown command {word!r}; did you mean {guess!r}?" in result.stderr


def test_a_word_like_no_command_says_how_to_run_a_prompt() -> None:
    result = _anvilctl("explain this code")
    assert result.returncode == 2
    assert "unknown command 'explain this code' (anvilctl --help" in result.stderr
    assert "did you mean" not in result.stderr
    assert "anvilctl -p PROMPT runs a prompt" in result.stderr


def test_help_recommends_p_help_and_it_works() -> None:
    assert "anvilctl -p --help" in _anvilctl("--help").stdout
    result = _anvilctl("-p", "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: anvilctl -p")


SUBCOMMANDS = ("ls", "read", "write", "rdwr", "stat", "new", "send", "wait", "out", "models")
SUBCOMMANDS += ("sessions", "attach", "trust", "replay-stream", "sandbox", "completion")


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_each_completion_script_generates_and_names_the_subcommands(shell: str) -> None:
    result = _anvilctl("completion", shell)
    assert result.returncode == 0, result.stderr
    script = result.stdout
    assert script.strip()
    for command in SUBCOMMANDS:
        assert command in script, (shell, command)
    for option in ("output-format", "continue", "resume", "version"):  # fish: `-l NAME`
        assert f"--{option}" in script or f"-l {option}" in script, (shell, option)
    assert "stream-json" in script  # a choice of --output-format


def test_the_bash_completion_completes_commands_and_choices(tmp_path: pathlib.Path) -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed")
    script = tmp_path / "anvilctl.bash"
    script.write_text(_anvilctl("completion", "bash").stdout)

    def complete(*words: str) -> list[str]:
        line = " ".join(words)
        code = (
            f"source {script}; COMP_WORDS=({' '.join(repr(w) for w in words)}); "
            f"COMP_CWORD={len(words) - 1}; COMP_LINE={line!r}; COMP_POINT=${{#COMP_LINE}}; "
            '_shtab_anvilctl; printf "%s\\n" "${COMPREPLY[@]}"'
        )
        out = subprocess.run([bash, "-c", code], capture_output=True, text=True, check=True)
        return out.stdout.split()

    assert complete("anvilctl", "se") == ["send", "sessions"]
    assert complete("anvilctl", "-p", "--output-format", "") == ["text", "json", "stream-json"]
    assert complete("anvilctl", "completion", "") == ["bash", "zsh", "fish"]


def test_an_unknown_shell_is_a_usage_error() -> None:
    result = _anvilctl("completion", "tcsh")
    assert result.returncode == 2
    assert "invalid choice: 'tcsh'" in result.stderr


def test_the_9p_commands_still_start_light(tmp_path: pathlib.Path) -> None:
    """The completion module and the "did you mean" check load nothing for `anvilctl read`."""
    code = (
        "import sys\n"
        "from anvilctl.__main__ import main\n"
        "assert main(['read', 'agent/x']) == 1\n"
        "print(sorted(n for n in ('shtab', 'difflib', 'argparse', 'anvilctl.completion')"
        " if n in sys.modules))\n"
    )
    env = {**os.environ, "NAMESPACE": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, check=True)
    assert out.stdout == b"[]\n"
