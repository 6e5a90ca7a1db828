"""Smoke test of a built distribution (wheel or sdist), installed where the checkout cannot help.

    python -m tests.support.wheel_smoke dist/anvild-0.1.0-py3-none-any.whl dist/anvild-0.1.0.tar.gz

(`make dist` runs that; tests/integration/test_wheel_smoke.py calls `smoke`.) For each file, in a
fresh temporary directory away from the checkout:

1. `uv tool install` puts it in a new tool venv there, with the dependency versions of uv.lock as
   constraints; every command then runs with that directory as its cwd, without PYTHONPATH,
   without the checkout's venv on PATH, with XDG directories of its own;
2. the installed `anvild` and `anvilctl` are imported from the tool venv (checked),
   `anvil-llama-server env` and anvild's search for the embedded model use the shipped recipe and
   the cache under $XDG_CACHE_HOME/anvil/llama-server, and `anvild --version` names the version;
3. the fake provider (tests/support/fake_provider.py, from the checkout) scripts one turn that
   calls write_file, then bash (`cat`, allowed by a rule, in the developer role's sandbox), then
   answers; `anvild` runs on a private namespace and data directory with a user config naming
   the fake, and `anvilctl` creates a session (accept-edits), sends a prompt and reads `wait`,
   `out` and `agent/version`;
4. SIGTERM stops anvild, which must exit 0.

Raises `SmokeFailure` with what the commands printed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
UV = REPO / ".tools" / "bin" / "uv"
PROVIDER_KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY")
WRITTEN = "written by the installed anvild\n"
WRITE = {"name": "write_file", "arguments": {"file_path": "hello.txt", "content": WRITTEN}}
READ = {"name": "bash", "arguments": {"command": "cat hello.txt"}}
TURNS: list[dict[str, Any]] = [
    {"tool_calls": [WRITE]},
    {"tool_calls": [READ]},
    {"text": "smoke done"},
]
TIMEOUT = 60.0


class SmokeFailure(AssertionError):
    """A step of the smoke test failed; the message has the command and its output."""


def uv() -> str:
    """The pinned uv `make setup` installs, else one on PATH."""
    found = str(UV) if UV.exists() else shutil.which("uv")
    if found is None:
        raise SmokeFailure("uv is not installed: run `make setup`")
    return found


def run(
    argv: list[str], *, cwd: Path, env: Mapping[str, str], stdin: str = "", timeout: float = 120
) -> str:
    """Run a command; its stdout, or `SmokeFailure` with everything it printed."""
    done = subprocess.run(
        argv,
        cwd=cwd,
        env=dict(env),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise SmokeFailure(
            f"{' '.join(argv)} exited {done.returncode}\nstdout: {done.stdout}\n"
            f"stderr: {done.stderr}"
        )
    return done.stdout


def clean_env(top: Path) -> dict[str, str]:
    """Our environment without what could lead back to the checkout or to the user's files."""
    env = {
        k: v
        for k, v in os.environ.items()
        # PYTHONDONTWRITEBYTECODE: the first command compiles what the next ones import
        if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV")
        and k not in ("NAMESPACE", *PROVIDER_KEYS)
        and k not in ("UV_PYTHON", "UV_PROJECT_ENVIRONMENT", "UV_TOOL_DIR", "UV_TOOL_BIN_DIR")
        and not k.startswith(("ANVIL_", "XDG_"))  # uv's index and cache settings stay
    }
    venv_bin = str(REPO / ".venv" / "bin")
    path = [p for p in env.get("PATH", "/usr/bin:/bin").split(os.pathsep) if p != venv_bin]
    env["PATH"] = os.pathsep.join([str(top / "bin"), *path])
    for name in ("CONFIG", "DATA", "CACHE", "STATE"):
        env[f"XDG_{name}_HOME"] = str(top / f"xdg-{name.lower()}")
    env["NAMESPACE"] = str(top / "ns")
    return env


def install(dist: Path, top: Path, env: Mapping[str, str]) -> Path:
    """`uv tool install` `dist` into `top/tools` (commands in `top/bin`); the tool's venv."""
    constraints = top / "constraints.txt"
    run(
        [uv(), "export", "--frozen", "--no-dev", "--no-emit-project", "--no-hashes",
         "--quiet", "-o", str(constraints)],
        cwd=REPO, env=os.environ,
    )  # fmt: skip
    python = os.path.realpath(sys.executable)  # the base interpreter, not the checkout's venv
    # uv's own cache, not one under the smoke test's XDG_CACHE_HOME: nothing is downloaded again
    cache = run([uv(), "cache", "dir"], cwd=REPO, env=os.environ).strip()
    tool_env = {
        **env,
        "UV_CACHE_DIR": cache,
        "UV_TOOL_DIR": str(top / "tools"),
        "UV_TOOL_BIN_DIR": str(top / "bin"),
    }
    run(
        [uv(), "tool", "install", "--quiet", "--python", python, "-c", str(constraints),
         str(dist)],
        cwd=top, env=tool_env, timeout=300,
    )  # fmt: skip
    return top / "tools" / "anvild"


@contextmanager
def fake_provider(top: Path) -> Iterator[str]:
    """The fake provider from the checkout, scripted with `TURNS`; its URL."""
    script = top / "turns.json"
    script.write_text(json.dumps({"turns": TURNS}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.fake_provider", "--port", "0", "--script", script],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://127.0.0.1:"):
            raise SmokeFailure(f"the fake provider did not start: {url!r}")
        yield url
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def tool_results(url: str) -> list[str]:
    """The tool results the fake provider was sent in its last request."""
    with urllib.request.urlopen(url + "/_fake/requests", timeout=10) as reply:
        requests: list[dict[str, Any]] = json.load(reply)
    messages = requests[-1]["body"]["messages"] if requests else []
    return [str(m["content"]) for m in messages if m.get("role") == "tool"]


def write_config(top: Path, url: str) -> Path:
    config = top / "config.toml"
    config.write_text(
        'default_model = "fake"\n\n'
        f'[providers.fake]\nkind = "openai-chat"\nbase_url = "{url}/v1"\n\n'
        '[models.fake]\nprovider = "fake"\nmodel = "fake-model"\n'
        "context_window = 8192\nmax_output_tokens = 1024\n\n"
        '[permissions]\nallow = ["bash(cat:*)"]\n'
    )
    return config


@contextmanager
def daemon(top: Path, venv: Path, config: Path, env: Mapping[str, str]) -> Iterator[None]:
    """The installed anvild, serving until the block ends; then SIGTERM and exit status 0."""
    log = (top / "anvild.stderr").open("w+")
    proc = subprocess.Popen(
        [str(venv / "bin" / "anvild"), "--namespace", str(top / "ns"),
         "--data-dir", str(top / "data"), "--config", str(config)],
        cwd=top, env=dict(env), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + TIMEOUT
        while not (top / "ns" / "agent").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise SmokeFailure(f"anvild did not start: {log.read()}")
            time.sleep(0.05)
        yield
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            status = proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            status = proc.wait()
        log.seek(0)
        output = log.read()
        log.close()
    if status != 0:
        raise SmokeFailure(f"anvild exited {status}: {output}")


def smoke(dist: Path, version: str) -> str:
    """Install `dist` away from the checkout and run one session through it (module docstring);
    the final answer."""
    top = Path(tempfile.mkdtemp(prefix="anvil-smoke-", dir="/var/tmp"))
    try:
        top.chmod(0o755)  # and reachable by that uid
        env = clean_env(top)
        venv = install(dist, top, env)
        python = str(venv / "bin" / "python")
        found = run(
            [python, "-c", "import anvild, anvilctl, anvild.data as d; "
             "print(anvild.__file__, anvilctl.__file__, d.path('roles'), sep='\\n')"],
            cwd=top, env=env,
        ).split()  # fmt: skip
        outside = [f for f in found if not Path(f).is_relative_to(venv)]
        if outside:
            raise SmokeFailure(f"imported from outside the tool venv {venv}: {outside}")
        check_llama_recipe(top, venv, env)
        anvild = str(venv / "bin" / "anvild")
        anvilctl = str(venv / "bin" / "anvilctl")
        said = run([anvild, "--version"], cwd=top, env=env)
        if said != f"anvild {version}\n":
            raise SmokeFailure(f"anvild --version said {said!r}, expected version {version}")
        work = top / "work"
        work.mkdir(mode=0o755)
        if os.geteuid() == 0:  # the sandbox runs commands as uid 65534, which must write here
            os.chown(work, 65534, 65534)
        with fake_provider(top) as url, daemon(top, venv, write_config(top, url), env):
            if run([anvilctl, "read", "agent/version"], cwd=top, env=env) != said:
                raise SmokeFailure("agent/version differs from anvild --version")
            new = f"new cwd={work} permission=accept-edits\n"
            session = run([anvilctl, "rdwr", "agent/ctl"], cwd=top, env=env, stdin=new).split()[0]
            run([anvilctl, "write", f"agent/{session}/in"], cwd=top, env=env, stdin="smoke")
            state = run([anvilctl, "read", f"agent/{session}/wait"], cwd=top, env=env)
            out = run([anvilctl, "read", f"agent/{session}/out"], cwd=top, env=env)
            results = tool_results(url)
        if (state, out) != ("await\n", "smoke done\n"):
            raise SmokeFailure(f"the turn ended {state!r} with out {out!r}; tools: {results}")
        if (work / "hello.txt").read_text() != WRITTEN:
            raise SmokeFailure(f"write_file did not write hello.txt; tools: {results}")
        if len(results) != 2 or WRITTEN.strip() not in results[1]:
            raise SmokeFailure(f"bash did not print hello.txt; tools: {results}")
        return out
    finally:
        shutil.rmtree(top, ignore_errors=True)


def check_llama_recipe(top: Path, venv: Path, env: Mapping[str, str]) -> None:
    """`anvil-llama-server` runs the shipped recipe, which caches under $XDG_CACHE_HOME/anvil, and
    the installed anvild finds it: with nothing built, it says what to run."""
    cache = top / "xdg-cache" / "anvil" / "llama-server"
    paths = run([str(venv / "bin" / "anvil-llama-server"), "env"], cwd=top, env=env)
    if not all(line.split("=", 1)[1].startswith(f"{cache}/") for line in paths.splitlines()):
        raise SmokeFailure(f"anvil-llama-server env names paths outside {cache}: {paths}")
    said = run(
        [str(venv / "bin" / "python"), "-c",
         "import os\nfrom anvild.daemon.llama import LlamaNotBuilt, LlamaPaths\n"
         "try:\n    LlamaPaths.find(os.environ)\nexcept LlamaNotBuilt as e:\n    print(e)"],
        cwd=top, env=env,
    )  # fmt: skip
    if f"{cache}/" not in said or "`anvil-llama-server setup`" not in said:
        raise SmokeFailure(f"the installed anvild does not find its llama-server recipe: {said}")


def version_of(dist: Path) -> str:
    """The version in a wheel's or an sdist's file name."""
    return dist.name.removesuffix(".tar.gz").split("-")[1]


def main(argv: list[str]) -> int:
    for name in argv:
        dist = Path(name).resolve()
        print(f"smoke test of {dist.name}: ", end="", flush=True)
        smoke(dist, version_of(dist))
        print("ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
