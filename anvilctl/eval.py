"""`anvilctl eval run`: run eval tasks through the daemon, grade them, one JSONL line per trial
(`anvilctl eval report` reads them: `anvilctl.eval_report`).

A task is a directory `TASKS/NAME/`: `task.toml` (`prompt`, `timeout` seconds, `tags`), `repo/`
(the starting workspace), `check.sh` (the grader), optionally `hidden/` (trusted tests),
`outside/` (files placed beside the workspace, for safety tasks) and `solution/` (a reference
answer laid over `repo/`, only for testing the grader). Each trial copies `repo/`
into a fresh directory, commits it with git, runs `anvilctl -p` against the running daemon in
bypass mode (the daemon still sandboxes every command), then copies the result into a separate
grading directory, lays `hidden/` over it and runs `check.sh` there in the sandbox. The grader
and hidden tests are never inside anything the agent can write. An infrastructure failure (no
sandbox, the provider failing, no result from the session) is recorded with `pass: null` and
`outcome: "infra_error"`, never as a pass or a fail, and is left out of the pass rates.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import attrs

from anvilctl import add_command, eval_stats

TASK_FILE = "task.toml"
GRADER = "check.sh"
GRACE = 15.0  # seconds between asking a timed-out turn to stop and killing anvilctl
GRADER_TIMEOUT = 300.0
# Outcomes of a turn that say the harness, not the agent, failed (the provider, the daemon).
INFRA_TURN_OUTCOMES = frozenset({"error", "cancelled"})


class EvalError(Exception):
    """A problem with the run's inputs; the message says what to fix."""


@attrs.frozen
class Task:
    name: str
    path: Path
    prompt: str
    timeout: float
    tags: tuple[str, ...]
    digest: str
    grader_digest: str


@attrs.frozen
class Trial:
    task: Task
    model: str
    number: int


def digest_of(paths: Iterable[Path], base: Path) -> str:
    """sha256 over the relative names and contents of the files under `paths` (sorted)."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(p for p in path.rglob("*") if p.is_file() or p.is_symlink())
        elif path.exists():
            files.append(path)
    h = hashlib.sha256()
    for file in sorted(files, key=lambda p: p.relative_to(base).as_posix()):
        h.update(file.relative_to(base).as_posix().encode() + b"\0")
        h.update(os.readlink(file).encode() if file.is_symlink() else file.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:16]


def load_task(path: Path) -> Task:
    where = path / TASK_FILE
    try:
        data = tomllib.loads(where.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise EvalError(f"{where}: missing; a task needs task.toml, repo/ and check.sh") from exc
    except tomllib.TOMLDecodeError as exc:
        raise EvalError(f"{where}: not valid TOML: {exc}") from exc
    prompt, timeout, tags = data.get("prompt"), data.get("timeout", 300), data.get("tags", [])
    if not isinstance(prompt, str) or not prompt.strip():
        raise EvalError(f"{where}: `prompt` must be a non-empty string")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise EvalError(f"{where}: `timeout` must be a positive number of seconds")
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise EvalError(f"{where}: `tags` must be a list of strings")
    unknown = sorted(set(data) - {"prompt", "timeout", "tags"})
    if unknown:
        raise EvalError(f"{where}: unknown keys {unknown} (known: prompt, timeout, tags)")
    for needed in ("repo", GRADER):
        if not (path / needed).exists():
            raise EvalError(f"{path}: missing {needed}; a task needs task.toml, repo/, check.sh")
    grader = [path / GRADER, path / "hidden"]
    return Task(
        name=path.name,
        path=path,
        prompt=prompt,
        timeout=float(timeout),
        tags=tuple(tags),
        digest=digest_of([where, path / "repo", path / "outside"], path),
        grader_digest=digest_of(grader, path),
    )


def find_tasks(tasks_dir: Path, pattern: str) -> list[Task]:
    if not tasks_dir.is_dir():
        raise EvalError(f"{tasks_dir}: not a directory of tasks (give --tasks-dir)")
    names = sorted(p.name for p in tasks_dir.iterdir() if (p / TASK_FILE).is_file())
    globs = [g.strip() for g in pattern.split(",") if g.strip()]
    chosen = [n for n in names if any(fnmatch.fnmatch(n, g) for g in globs)]
    if not chosen:
        raise EvalError(f"no task in {tasks_dir} matches {pattern!r} (tasks: {', '.join(names)})")
    return [load_task(tasks_dir / name) for name in chosen]


def _git(cwd: Path, *args: str) -> str:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(cwd),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        **{
            f"GIT_{who}_{what}": value
            for who in ("AUTHOR", "COMMITTER")
            for what, value in (("NAME", "anvil eval"), ("EMAIL", "eval@anvil.invalid"))
        },
    }
    done = subprocess.run(
        ["git", "-c", "safe.directory=*", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise OSError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def anvil_revision() -> str:
    """The anvil checkout's git sha (`+dirty` when it has changes), or the package version."""
    from anvild import __version__

    top = Path(__file__).resolve().parent.parent
    if not (top / ".git").exists():
        return __version__
    try:
        sha = _git(top, "rev-parse", "HEAD")
        dirty = _git(top, "status", "--porcelain", "--untracked-files=no")
    except OSError:
        return __version__
    return sha + ("+dirty" if dirty else "")


def _hand_to_sandbox_uid(path: Path) -> None:
    """As root the sandbox runs commands as an unprivileged uid: give it the tree."""
    if os.geteuid() != 0:
        return
    from anvild.sandbox.bwrap import DEFAULT_GID, DEFAULT_UID

    for dirpath, dirnames, filenames in os.walk(path):
        os.chown(dirpath, DEFAULT_UID, DEFAULT_GID)
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), DEFAULT_UID, DEFAULT_GID, follow_symlinks=False)


@attrs.define
class Runner:
    """Runs trials: `anvilctl_argv` starts anvilctl with the global options (address)."""

    base: Path
    anvilctl_argv: Sequence[str]
    config_digest: str
    revision: str
    sandbox_problem: str | None
    env: dict[str, str] = attrs.field(factory=lambda: dict(os.environ))

    def trial_dir(self, trial: Trial) -> Path:
        return self.base / f"{trial.task.name}--{trial.model}--{trial.number}"

    def run(self, trial: Trial) -> dict[str, Any]:
        started = time.monotonic()
        record: dict[str, Any] = {
            "task": trial.task.name,
            "model": trial.model,
            "trial": trial.number,
            "pass": None,
            "outcome": "infra_error",
            "turn_outcome": None,
            "infra_error": None,
            "detail": "",
            "steps": None,
            "tokens": None,
            "cost_usd": None,
            "cost_known": False,
            "duration_s": None,
            "session_id": None,
            "anvil_git_sha": self.revision,
            "task_digest": trial.task.digest,
            "grader_digest": trial.task.grader_digest,
            "config_digest": self.config_digest,
            "tags": list(trial.task.tags),
        }
        try:
            if self.sandbox_problem is not None:
                raise _Infra(f"sandbox unavailable: {self.sandbox_problem}")
            self._trial(trial, record)
        except _Infra as exc:
            record.update(outcome="infra_error", infra_error=str(exc), **{"pass": None})
        except OSError as exc:  # copying, git: the harness's machine, not the agent
            record.update(outcome="infra_error", infra_error=f"harness: {exc}", **{"pass": None})
        record["duration_s"] = round(time.monotonic() - started, 3)
        return record

    def _trial(self, trial: Trial, record: dict[str, Any]) -> None:
        task, top = trial.task, self.trial_dir(trial)
        work = top / "work"
        shutil.copytree(task.path / "repo", work, symlinks=True)
        _git(work, "init", "-q", "-b", "main")
        _git(work, "add", "-A")
        _git(work, "commit", "-q", "-m", f"eval task {task.name}")
        if (task.path / "outside").is_dir():
            shutil.copytree(task.path / "outside", top / "outside", symlinks=True)
        _hand_to_sandbox_uid(top)
        result = self._session(trial, work)
        usage = result.get("usage") or {}
        tokens = {k: usage.get(k) for k in ("input", "output", "cache_read", "cache_write")}
        cost = result.get("total_cost_usd")
        record.update(
            session_id=result.get("session_id"),
            turn_outcome=result.get("outcome"),
            detail=str(result.get("detail") or ""),
            steps=result.get("steps"),
            tokens=tokens if usage else None,
            cost_usd=cost,
            cost_known=cost is not None,
        )
        if result.get("outcome") in INFRA_TURN_OUTCOMES:
            raise _Infra(f"the session ended {result.get('outcome')}: {record['detail']}")
        passed, grader_detail = self._grade(task, top)
        record.update(outcome="pass" if passed else "fail", grader=grader_detail)
        record["pass"] = passed

    def _session(self, trial: Trial, work: Path) -> dict[str, Any]:
        try:
            return run_headless(
                self.anvilctl_argv,
                trial.task.prompt,
                trial.model,
                work,
                trial.task.timeout,
                self.env,
            )
        except NoResult as exc:
            raise _Infra(str(exc)) from exc

    def _grade(self, task: Task, top: Path) -> tuple[bool, str]:
        return grade_trial(task, top)


class _Infra(Exception):
    """An infrastructure failure of one trial."""


class NoResult(Exception):
    """`anvilctl -p` ended without its JSON result: the harness failed, not the agent."""


def run_headless(
    anvilctl_argv: Sequence[str],
    prompt: str,
    model: str | None,
    cwd: Path,
    timeout: float,
    env: dict[str, str],
    *,
    resume: str | None = None,
) -> dict[str, Any]:
    """One headless turn through the daemon in bypass mode (still sandboxed): its JSON
    `result`. Past `timeout` the turn is cancelled (SIGINT, as Ctrl-C) and the result says
    `outcome: "timeout"`. With `resume`, the prompt goes to that live session, which keeps
    the cwd, model and mode it was made with."""
    if resume is not None:
        argv = [*anvilctl_argv, "-p", prompt, "--resume", resume, "--output-format", "json"]
    else:
        argv = [
            *anvilctl_argv,
            *("-p", prompt, "-C", str(cwd)),
            *(("-m", model) if model else ()),
            *("--output-format", "json", "--permission-mode", "bypass"),
        ]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.send_signal(signal.SIGINT)  # anvilctl -p cancels the turn on Ctrl-C
        try:
            out, err = proc.communicate(timeout=GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    lines = [line for line in out.decode(errors="replace").splitlines() if line.strip()]
    try:
        result = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        result = None
    if not isinstance(result, dict) or result.get("type") != "result":
        why = err.decode(errors="replace").strip()[-500:] or f"exit {proc.returncode}"
        raise NoResult(f"anvilctl -p gave no result: {why}")
    if timed_out:  # the agent used its time: a task failure, whatever the turn said
        result["outcome"] = "timeout"
        result["detail"] = f"timed out after {timeout:g} s"
    return result


def grade_trial(task: Task, top: Path) -> tuple[bool, str]:
    """Grade the trial in `top` (`work/`, and `outside/` when the task has one): copy the
    agent's workspace to `grade/work` and what is beside it to `grade/outside`, lay the hidden
    tests over `grade/work`, and run the grader there in the sandbox."""
    grade = top / "grade"
    shutil.copytree(top / "work", grade / "work", symlinks=True)
    if (top / "outside").is_dir():
        shutil.copytree(top / "outside", grade / "outside", symlinks=True)
    if (task.path / "hidden").is_dir():
        shutil.copytree(task.path / "hidden", grade / "work", symlinks=True, dirs_exist_ok=True)
    _hand_to_sandbox_uid(grade)
    return run_grader((task.path / GRADER).read_text(encoding="utf-8"), grade)


def run_grader(script: str, grade: Path) -> tuple[bool, str]:
    """Run the grader's text with bash in `grade/work`, under the sandbox with `grade` as the
    workspace; its exit status decides. The text goes in argv, never into a file the code under
    test could change while bash reads it. `EVAL_OUTSIDE` is `grade/outside`, a copy of what
    was beside the agent's workspace after the run."""
    from anvilctl.sandbox import run_launch
    from anvild.sandbox import SandboxError, WorkspaceWrite
    from anvild.sandbox.confine import Sandbox
    from anvild.sandbox.roles import DEFAULT_ROLE

    setup = f"export EVAL_OUTSIDE={_sh_quote(str(grade / 'outside'))}; cd work || exit 125\n"
    try:
        launch = Sandbox(WorkspaceWrite(), DEFAULT_ROLE).prepare(
            ("bash", "-c", setup + script, GRADER), grade
        )
    except SandboxError as exc:
        raise _Infra(f"the grader's sandbox: {exc}") from exc
    try:
        ran = run_launch(launch, timeout=GRADER_TIMEOUT)
    except subprocess.TimeoutExpired:
        return False, f"grader timed out after {GRADER_TIMEOUT:g} s"
    if ran.refusal is not None:
        raise _Infra(f"the grader's sandbox refused: {ran.refusal}")
    tail = (ran.stdout + ran.stderr).strip()[-300:]
    return ran.returncode == 0, f"exit {ran.returncode}: {tail}"


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def config_digest(address: str | None, aname: str, noauth: bool) -> str:
    """A digest of what the daemon says it runs: `version`, `models` and the developer role.
    Raises `EvalError` when no daemon answers: trials run only through the daemon."""
    from anvilctl.ninep_client import ClientError, mount_agent
    from anvild.ninep.constants import OREAD

    try:
        client, root = mount_agent(address, aname=aname, auth=not noauth)
    except (ClientError, OSError) as exc:
        raise EvalError(
            f"no daemon answers ({exc}); start anvild (make run) or give -a ADDR: "
            "evals run only through the daemon"
        ) from exc
    h = hashlib.sha256()
    with client:
        for name in ("version", "models", "roles/developer"):
            try:
                fid = client.open(root, name, OREAD)
                try:
                    while data := fid.read(8192):
                        h.update(data)
                finally:
                    fid.clunk()
            except ClientError as exc:
                h.update(f"unreadable {name}: {exc}".encode())
            h.update(b"\0")
    return h.hexdigest()[:16]


def summary(records: Sequence[dict[str, Any]]) -> str:
    """Per model: graded trials, infrastructure failures (excluded), pass@1 as the mean of
    per-task rates with a bootstrap interval over tasks, and the pooled Wilson interval."""
    lines = []
    for model in sorted({r["model"] for r in records}):
        mine = [r for r in records if r["model"] == model]
        graded = [r for r in mine if r["pass"] is not None]
        infra = len(mine) - len(graded)
        passes = sum(1 for r in graded if r["pass"])
        per_task: dict[str, list[bool]] = {}
        for r in graded:
            per_task.setdefault(r["task"], []).append(bool(r["pass"]))
        head = f"{model}: {passes}/{len(graded)} graded trials passed, {infra} infra errors"
        if not per_task:
            lines.append(head + " (nothing graded: no pass rate)")
            continue
        rates = [sum(v) / len(v) for v in per_task.values()]
        mean, low, high = eval_stats.task_mean_interval(rates)
        w_low, w_high = eval_stats.wilson(passes, len(graded))
        lines.append(
            f"{head}; pass@1 {mean:.2f} over {len(rates)} tasks "
            f"(95% bootstrap over tasks {low:.2f}-{high:.2f}; "
            f"Wilson over trials {w_low:.2f}-{w_high:.2f})"
        )
    return "\n".join(lines)


def add_subcommand(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("eval", help="run eval tasks through the daemon and grade them")
    verbs = parser.add_subparsers(dest="eval_command", required=True, metavar="VERB")
    run = add_command(
        verbs, "run", __doc__, 1, help="run tasks x models x trials; one JSONL line per trial"
    )
    run.add_argument("--models", required=True, help="comma-separated model aliases")
    run.add_argument("--trials", type=positive, default=1, help="trials per task and model")
    run.add_argument(
        "--tasks", default="*", help="globs over task names, comma-separated (default: all)"
    )
    run.add_argument("--concurrency", type=positive, default=1, help="trials at a time")
    run.add_argument("--tasks-dir", type=Path, default=Path("evals/tasks"))
    run.add_argument("--out", type=Path, default=Path("results.jsonl"), help="JSONL (rewritten)")
    run.add_argument("--work-dir", type=Path, help="where trials run (default: a new dir)")
    run.add_argument("--keep", action="store_true", help="keep the trial directories")
    from anvilctl import eval_report

    eval_report.add_verb(verbs)


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of at least 1")
    return value


def run(args: argparse.Namespace) -> int:
    from anvilctl import eval_report

    try:
        if args.eval_command == "report":
            return eval_report.run(args)
        return _run(args, print_line=lambda s: print(s, file=sys.stderr, flush=True))
    except (EvalError, eval_report.ReportError) as exc:
        print(f"anvilctl eval: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, print_line: Callable[[str], None]) -> int:
    from anvild.sandbox.probe import probe

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not models:
        raise EvalError("--models: give at least one model alias (anvilctl models lists them)")
    tasks = find_tasks(args.tasks_dir, args.tasks)
    digest = config_digest(args.address, args.aname, args.noauth)
    checked = probe()
    base = args.work_dir or Path(tempfile.mkdtemp(prefix="anvil-eval-", dir="/var/tmp"))
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o755)  # the sandbox uid must reach the trial directories
    global_options = ["-a", args.address] if args.address else []
    global_options += ["-A", args.aname] if args.aname else []
    global_options += ["-n"] if args.noauth else []
    runner = Runner(
        base=base,
        anvilctl_argv=[sys.executable, "-m", "anvilctl", *global_options],
        config_digest=digest,
        revision=anvil_revision(),
        sandbox_problem=None if checked.ok else checked.message,
    )
    trials = [Trial(t, m, n) for t in tasks for m in models for n in range(1, args.trials + 1)]
    print_line(f"{len(trials)} trials ({len(tasks)} tasks x {len(models)} models) in {base}")
    records: list[dict[str, Any]] = []
    lock = threading.Lock()
    with args.out.open("w", encoding="utf-8") as out, ThreadPoolExecutor(args.concurrency) as pool:
        for future in as_completed([pool.submit(runner.run, trial) for trial in trials]):
            record = future.result()
            with lock:
                records.append(record)
                out.write(json.dumps(record, sort_keys=True) + "\n")
                out.flush()
            print_line(
                f"{record['task']} {record['model']} #{record['trial']}: {record['outcome']}"
                + (f" ({record['infra_error']})" if record["infra_error"] else "")
            )
    if not args.keep and args.work_dir is None:
        shutil.rmtree(base, ignore_errors=True)
    print_line(summary(records))
    return 0
