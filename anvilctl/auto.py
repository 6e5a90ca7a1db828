"""`anvilctl auto SPEC.md`: a resumable loop of headless sessions that builds a spec.

In the spec's directory (a git repository; made if needed): without `features.json`, an
initializer session writes it, `init.sh` and `progress.txt`; then worker sessions, one unpassed
feature each, until all pass or `--max-sessions` / `--max-cost-usd` is reached. The sessions
follow two shipped skills (`anvild/data/skills/`, put in `.anvil/skills/`). A Stop hook
(`anvilctl.auto_hook`, written to `.anvil/config.toml` and granted) runs init.sh sandboxed; a
feature is marked passing only when the last run of its session passed, and then committed
(`auto: feature ID`). Only the worker's own `passes` may change in features.json: anything
else is reverted and logged. The spec is a convoy and each feature a bead (`auto_board`).
State in `.anvil/auto/` (no session can write it): `sessions.jsonl`, `checks.jsonl`, `beads.json`,
`current.json` (the session in flight). A restart, after a kill -9 of `auto` or the daemon,
kills the session in flight, reconciles beads and commits from features.json and goes on:
a passed feature is never redone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from anvilctl import add_command, add_data_dir, auto_hook, data_dir
from anvilctl import eval as evals
from anvilctl.auto_board import Board, BoardError

FEATURES = "features.json"
STATE_DIR = ".anvil/auto"
LOG = "sessions.jsonl"
BEADS = "beads.json"
CONFIG = ".anvil/config.toml"
INIT_SKILL = "auto-initializer"
WORKER_SKILL = "auto-worker"
SKILLS_DIR = ".anvil/skills"
SESSION_TIMEOUT = 1800.0
HEADER = "# Written by `anvilctl auto`"
SHIPPED = "shipped-with: anvil"  # in the metadata of the skills auto installs


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""


INITIALIZER = """You are the initializer of an `anvilctl auto` run: plan the spec below for the
sessions that will build it, one feature each.
Call the `skill` tool with the name "auto-initializer" first, and follow it.

SPEC ({spec_name}):
{spec}
"""

WORKER = """You are a worker session of an `anvilctl auto` run. Build exactly one feature: \
{feature_id}.
Description: {description}
Call the `skill` tool with the name "auto-worker" first, and follow it.

The spec, for reference ({spec_name}):
{spec}
"""


class AutoError(Exception):
    """A problem that stops the loop; the message says what to do."""


def load_features(text: str) -> list[dict[str, Any]]:
    data = json.loads(text)
    if not isinstance(data, list) or not data:
        raise ValueError("features.json must be a non-empty JSON list")
    ids = set()
    for item in data:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            raise ValueError('each feature must be an object with a string "id"')
        if not isinstance(item.get("passes"), bool):
            raise ValueError(f'feature {item["id"]!r}: "passes" must be true or false')
        if item["id"] in ids:
            raise ValueError(f"feature {item['id']!r} appears twice")
        ids.add(item["id"])
    return data


def only_passes_changed(
    before: list[dict[str, Any]], after: list[dict[str, Any]], own: str | None = None
) -> str | None:
    """None when `after` differs from `before` in `passes` values only (with `own`, only in
    that feature's); else what changed."""
    if [f["id"] for f in before] != [f["id"] for f in after]:
        return "the list of features (ids or order) changed"
    for old, new in zip(before, after, strict=True):
        rest_old = {k: v for k, v in old.items() if k != "passes"}
        rest_new = {k: v for k, v in new.items() if k != "passes"}
        if rest_old != rest_new:
            keys = sorted(
                k for k in set(rest_old) | set(rest_new) if rest_old.get(k) != rest_new.get(k)
            )
            return f"feature {old['id']!r}: {', '.join(keys)} changed"
        if own is not None and old["id"] != own and old["passes"] != new["passes"]:
            return f"feature {old['id']!r}: passes changed (only {own!r}'s may)"
    return None


def last_run(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The last Stop hook run of a session, as its line in sessions.jsonl records it."""
    if not runs:
        return None
    last = runs[-1]
    keys = ("ran", "passed", "exit_code", "detail", "infra")
    return {"runs": len(runs), **{k: last[k] for k in keys if k in last}}


class Loop:
    """The loop over one spec's directory; `run` returns the exit status."""

    def __init__(self, args: argparse.Namespace, say: Callable[[str], None]) -> None:
        self.spec = Path(args.spec).resolve()
        if not self.spec.is_file():
            raise AutoError(f"{args.spec}: no such file (give the spec, e.g. SPEC.md)")
        self.root = self.spec.parent
        self.model: str = args.model or ""
        self.max_sessions: int = args.max_sessions
        self.max_cost: float | None = args.max_cost_usd
        self.timeout: float = args.session_timeout
        self.data_dir: Path | None = args.data_dir
        self.say = say
        options = ["-a", args.address] if args.address else []
        options += ["-A", args.aname] if args.aname else []
        options += ["-n"] if args.noauth else []
        self.anvilctl = [sys.executable, "-m", "anvilctl", *options]
        self.board = Board(args.address, args.aname or "", not args.noauth)
        self.state = self.root / STATE_DIR
        self.env = dict(os.environ)

    # -- records -------------------------------------------------------------------------
    def _jsonl(self, name: str) -> list[dict[str, Any]]:
        path = self.state / name
        if not path.exists():
            return []
        lines = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line torn by a kill: that session is run again
        return lines

    def sessions(self) -> list[dict[str, Any]]:
        return self._jsonl(LOG)

    def test_runs(self, session_id: str) -> list[dict[str, Any]]:
        """The Stop hook's runs of init.sh for one session, in order."""
        return [r for r in self._jsonl(auto_hook.CHECKS) if r.get("session_id") == session_id]

    def log(self, entry: dict[str, Any]) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        with (self.state / LOG).open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")

    def _write_json(self, name: str, value: Any) -> None:
        path = self.state / name
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(value, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)

    def git(self, *args: str) -> str:
        done = subprocess.run(
            ["git", "-c", "safe.directory=*", *args],
            cwd=self.root,
            capture_output=True,
            text=True,
            check=False,
            env={
                **self.env,
                "GIT_AUTHOR_NAME": "anvil auto",
                "GIT_AUTHOR_EMAIL": "auto@anvil.invalid",
                "GIT_COMMITTER_NAME": "anvil auto",
                "GIT_COMMITTER_EMAIL": "auto@anvil.invalid",
            },
        )
        if done.returncode != 0:
            raise AutoError(f"git {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def commit(self, message: str) -> str:
        """Commit everything but the loop's own files; the commit's hash."""
        self.git("add", "-A")  # the loop's files are excluded (`prepare`)
        if self.git("status", "--porcelain").strip():
            self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "--short", "HEAD").strip()

    def committed_features(self) -> set[str]:
        try:
            log = self.git("log", "--format=%s")
        except AutoError:  # no commit yet
            return set()
        prefix = "auto: feature "
        return {line.removeprefix(prefix) for line in log.splitlines() if line.startswith(prefix)}

    # -- the loop ------------------------------------------------------------------------
    def run(self) -> int:
        self.prepare()
        past = self.sessions()
        count = len(past)
        cost = sum(s.get("cost_usd") or 0.0 for s in past)
        self.recover()
        self.resume_commits()
        features = self.features()
        if features is not None:
            self.track(features, reconcile=True)
        while True:
            features = self.features()
            if features is not None and all(f["passes"] for f in features):
                self.say(f"done: all {len(features)} features pass after {count} sessions")
                return 0
            if count >= self.max_sessions:
                self.say(f"stopped: --max-sessions {self.max_sessions} reached")
                return EXIT_LIMIT
            if self.max_cost is not None and cost >= self.max_cost:
                self.say(f"stopped: --max-cost-usd {self.max_cost:g} reached (spent {cost:.4f})")
                return EXIT_LIMIT
            entry = self.initialize() if features is None else self.work(features)
            count += 1
            self.log(entry)
            if entry["cost_usd"] is None and self.max_cost is not None:
                raise AutoError(
                    f"session {entry['session_id']} ({entry['outcome']}: {entry['detail']}) has "
                    "no known cost, so --max-cost-usd cannot be enforced: price the model "
                    "([models.NAME.pricing]) or drop the option"
                )
            cost += entry["cost_usd"] or 0.0

    def prepare(self) -> None:
        """A git repository whose history leaves out the loop's files, the two skills in
        `.anvil/skills/`, and the Stop hook granted in `.anvil/config.toml`."""
        if not (self.root / ".git").exists():
            self.git("init", "-q")
        exclude = self.root / ".git" / "info" / "exclude"
        exclude.parent.mkdir(parents=True, exist_ok=True)
        text = exclude.read_text(encoding="utf-8") if exclude.exists() else ""
        wanted = [f"/{STATE_DIR}/", f"/{CONFIG}"]
        wanted += [f"/{SKILLS_DIR}/{name}/" for name in (INIT_SKILL, WORKER_SKILL)]
        missing = [line for line in wanted if line not in text.splitlines()]
        if missing:
            sep = "" if not text or text.endswith("\n") else "\n"
            exclude.write_text(text + sep + "".join(f"{m}\n" for m in missing), encoding="utf-8")
        self.state.mkdir(parents=True, exist_ok=True)
        self.install_skills()
        self.grant_hook()

    def install_skills(self) -> None:
        """The shipped skills, copied afresh (a user's own skill of the same name in the
        user config dir comes first in discovery and shadows them)."""
        import shutil

        from anvild import data

        for name in (INIT_SKILL, WORKER_SKILL):
            target = self.root / SKILLS_DIR / name
            if target.exists() and SHIPPED not in _text(target / "SKILL.md"):
                raise AutoError(
                    f"{target} is the project's own skill, and auto puts its shipped one there: "
                    "move yours to the user config dir's skills/ (which comes first, so it is "
                    "used instead) or rename it"
                )
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(data.path(data.SKILLS) / name, target)

    def grant_hook(self) -> None:
        """Write the Stop hook's `.anvil/config.toml` (unless the project has its own) and
        grant it where the daemon reads grants (`--data-dir`)."""
        from anvild.config import TrustStore, authority_of, digest
        from anvild.config.schema import parse_bytes, render_key

        path = (self.root / CONFIG).resolve()
        wanted = auto_hook.config_text(self.state.resolve())
        if not path.exists() or path.read_text(encoding="utf-8").startswith(HEADER):
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists() or path.read_text(encoding="utf-8") != wanted:
                path.write_text(wanted, encoding="utf-8")
        data = path.read_bytes()
        store = TrustStore(data_dir(self.data_dir))
        sha = digest(data)
        if not data.decode("utf-8", "replace").startswith(HEADER):
            if f"[hooks.{auto_hook.HOOK_NAME}]" not in data.decode("utf-8", "replace"):
                raise AutoError(
                    f"{path} is the project's own config: add this table to it, review it with "
                    f"`anvilctl trust show`, grant it with `anvilctl trust grant`, and run auto "
                    f"again:\n{wanted.split(chr(10), 2)[2]}"
                )
            if not store.is_granted(path, sha):
                raise AutoError(
                    f"{path} has auto's Stop hook but is not granted: review it with "
                    f"`anvilctl trust show {path}` and grant it with `anvilctl trust grant {path}`"
                )
            return
        if not store.is_granted(path, sha):
            settings = parse_bytes(data, path)
            keys = [render_key(k) for k in settings if authority_of(k) is not None]
            store.grant(path, sha, keys)
            self.say(f"granted the Stop hook in {path}")

    def features(self) -> list[dict[str, Any]] | None:
        path = self.root / FEATURES
        if not path.exists():
            return None
        try:
            return load_features(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise AutoError(f"{path}: {exc}; fix it, or remove it to initialize again") from exc

    def recover(self) -> None:
        """A session a kill left in flight (`current.json`): killed, its bead released."""
        path = self.state / auto_hook.CURRENT
        try:
            current = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        session = current.get("session_id") if isinstance(current, dict) else None
        if isinstance(session, str):
            self.say(f"session {session} was in flight when the loop stopped: it is killed")
            if not self._end(session):
                raise AutoError(
                    f"session {session} could not be killed: the daemon does not answer "
                    "(is anvild running? make run)"
                )
        path.unlink(missing_ok=True)

    def resume_commits(self) -> None:
        """Commit each passed feature a kill left uncommitted (between its session and its
        commit)."""
        features = self.features()
        if features is None:
            return
        done = self.committed_features()
        for feature in features:
            if feature["passes"] and feature["id"] not in done:
                self.commit(f"auto: feature {feature['id']}")
                self.say(f"committed {feature['id']}: it passed before the restart")

    # -- the convoy and its beads --------------------------------------------------------
    def beads(self) -> dict[str, Any]:
        try:
            value = json.loads((self.state / BEADS).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            value = None
        if not isinstance(value, dict) or not isinstance(value.get("beads"), dict):
            return {"convoy": None, "beads": {}}
        return value

    def track(self, features: list[dict[str, Any]], *, reconcile: bool) -> None:
        """One convoy for the spec, one bead per feature (made once, ids in beads.json); with
        `reconcile`, each bead's state brought in line with features.json (passed: completed,
        else not held by anyone)."""
        state = self.beads()
        try:
            if not state["convoy"]:
                goal = (
                    f"Build {self.spec} with `anvilctl auto`: every feature in "
                    f"{self.root / FEATURES} passes its tests"
                )
                state["convoy"] = self.board.new_convoy(f"auto {self.root.name}", goal)
                self._write_json(BEADS, state)
            for feature in features:
                if feature["id"] not in state["beads"]:
                    bead = self.board.new_bead(
                        f"feature {feature['id']}",
                        str(feature.get("description", "")),
                        state["convoy"],
                    )
                    state["beads"][feature["id"]] = bead
                    self._write_json(BEADS, state)
            if reconcile:
                for feature in features:
                    bead = state["beads"][feature["id"]]
                    if feature["passes"]:
                        self.board.complete(bead, "passed before a restart of anvilctl auto")
                    else:
                        self.board.release(bead)
        except BoardError as exc:
            raise AutoError(f"the feature beads: {exc}") from exc

    # -- sessions ------------------------------------------------------------------------
    @contextmanager
    def session(self, kind: str, feature: str | None, prompt: str) -> Iterator[dict[str, Any]]:
        """A live session in the project that runs `prompt` (holding the feature's bead), its
        line for sessions.jsonl; killed once the caller has looked at what it did."""
        started = time.monotonic()
        bead = self.beads()["beads"].get(feature) if feature is not None else None
        try:
            session_id = self.board.new_session(str(self.root), self.model or None)
        except BoardError as exc:
            # A refusal says what to change (auto asks for permission=bypass, still sandboxed).
            hint = "" if exc.answered else " (is anvild running? make run)"
            raise AutoError(f"no session: {exc}{hint}") from exc
        self._write_json(
            auto_hook.CURRENT,
            {"session_id": session_id, "kind": kind, "feature": feature, "bead": bead},
        )
        try:
            try:
                if bead is not None:
                    self.board.claim(bead, session_id)
                result = evals.run_headless(
                    self.anvilctl,
                    prompt,
                    None,
                    self.root,
                    self.timeout,
                    self.env,
                    resume=session_id,
                )
            except (evals.NoResult, BoardError) as exc:
                raise AutoError(f"session {session_id}: {exc} (is anvild running?)") from exc
            entry = {
                "kind": kind,
                "feature": feature,
                "bead": bead,
                "session_id": session_id,
                "outcome": result.get("outcome"),
                "detail": result.get("detail"),
                "cost_usd": result.get("total_cost_usd"),
                "duration_s": round(time.monotonic() - started, 3),
                "reverted": None,
                "tests": last_run(self.test_runs(session_id)),
            }
            try:
                yield entry
            except BoardError as exc:  # completing or releasing its bead
                raise AutoError(f"session {session_id}: {exc} (is anvild running?)") from exc
        finally:
            if self._end(session_id):  # else the next start kills it (the daemon is away)
                (self.state / auto_hook.CURRENT).unlink(missing_ok=True)

    def _end(self, session_id: str) -> bool:
        """Kill the session; False when the daemon could not be asked."""
        try:
            self.board.kill_session(session_id)
        except BoardError as exc:
            return exc.answered  # it answered: no such session any more
        return True

    def initialize(self) -> dict[str, Any]:
        self.say("initializer session: writing features.json, init.sh, progress.txt")
        spec = self.spec.read_text(encoding="utf-8")
        prompt = INITIALIZER.format(spec_name=self.spec.name, spec=spec)
        with self.session("initializer", None, prompt) as entry:
            features = self.features()
            if features is None:
                raise AutoError(
                    f"the initializer session {entry['session_id']} wrote no features.json"
                )
            if any(f["passes"] for f in features):
                for f in features:
                    f["passes"] = False
                self.write_features(features)
                entry["reverted"] = "the initializer marked features passing: all set to false"
                self.say(entry["reverted"])
            self.commit("auto: initialize features")
            self.track(features, reconcile=False)
        return entry

    def work(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        feature = next(f for f in features if not f["passes"])
        fid = feature["id"]
        before = (self.root / FEATURES).read_text(encoding="utf-8")
        self.say(f"worker session: {fid}")
        spec = self.spec.read_text(encoding="utf-8")
        prompt = WORKER.format(
            feature_id=fid,
            description=feature.get("description", ""),
            spec_name=self.spec.name,
            spec=spec,
        )
        with self.session("worker", fid, prompt) as entry:
            try:
                after = self.features()
                problem = "features.json was removed" if after is None else None
            except AutoError as exc:
                after, problem = None, str(exc)
            if after is not None:
                problem = only_passes_changed(features, after, fid)
            if problem is not None:
                (self.root / FEATURES).write_text(before, encoding="utf-8")
                entry["reverted"] = problem
                self.say(f"reverted features.json: {problem}")
                after = features
            assert after is not None
            if next(f for f in after if f["id"] == fid)["passes"]:
                self.passed(fid, after, before, entry)
            elif entry["bead"] is not None:
                self.board.release(entry["bead"])
        return entry

    def passed(
        self, fid: str, features: list[dict[str, Any]], before: str, entry: dict[str, Any]
    ) -> None:
        """The worker marked its feature passing: commit it if the Stop hook's last run of
        init.sh in this session passed, else put `passes` back."""
        tests = entry["tests"]
        if tests is None:
            (self.root / FEATURES).write_text(before, encoding="utf-8")
            raise AutoError(
                f"no Stop hook ran init.sh for session {entry['session_id']}: the daemon did "
                f"not apply {self.root / CONFIG} (is its grant in the daemon's data dir? give "
                "auto the daemon's --data-dir)"
            )
        if tests.get("infra"):
            (self.root / FEATURES).write_text(before, encoding="utf-8")
            raise AutoError(f"the Stop hook could not run init.sh: {tests.get('detail')}")
        if not tests.get("passed"):
            for f in features:
                if f["id"] == fid:
                    f["passes"] = False
            self.write_features(features)
            why = tests.get("detail") or f"exit {tests.get('exit_code')}"
            entry["reverted"] = f"feature {fid!r}: passes set, but ./init.sh failed ({why})"
            self.say(f"reverted features.json: {entry['reverted']}")
            if entry["bead"] is not None:
                self.board.release(entry["bead"])
            return
        commit = self.commit(f"auto: feature {fid}")
        self.say(f"feature {fid} passes: committed {commit}")
        if entry["bead"] is not None:
            self.board.complete(entry["bead"], f"commit {commit} by session {entry['session_id']}")

    def write_features(self, features: list[dict[str, Any]]) -> None:
        text = json.dumps(features, indent=2) + "\n"
        (self.root / FEATURES).write_text(text, encoding="utf-8")


EXIT_LIMIT = 3


def add_subcommand(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        sub, "auto", __doc__, 1, help="build a spec with a resumable loop of headless sessions"
    )
    parser.add_argument("spec", help="the spec (its directory is the project)")
    parser.add_argument("-m", "--model", help="the model alias (default: the daemon's)")
    parser.add_argument("--max-sessions", type=evals.positive, default=20)
    parser.add_argument("--max-cost-usd", type=float, help="stop once this much is spent")
    parser.add_argument(
        "--session-timeout", type=float, default=SESSION_TIMEOUT, help="seconds per session"
    )
    add_data_dir(
        parser,
        "the daemon's data dir, where it reads trust grants (its --data-dir; default: the user "
        "data dir), for the Stop hook's grant",
    )


def run(args: argparse.Namespace) -> int:
    def say(text: str) -> None:
        print(f"anvilctl auto: {text}", file=sys.stderr, flush=True)

    try:
        return Loop(args, say).run()
    except AutoError as exc:
        say(str(exc))
        return 1
