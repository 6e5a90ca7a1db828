"""`anvilctl auto SPEC.md`: a resumable loop of headless sessions that builds a spec.

In the spec's directory (a git repository; one is made if needed): without `features.json`, an
initializer session writes it (a list of `{"id", "description", "passes": false}`), `init.sh`
and `progress.txt`; then worker sessions, one unpassed feature each, until every feature passes
or `--max-sessions` / `--max-cost-usd` is reached. After each session only `passes` fields may
have changed in features.json: anything else is reverted to the file before the session and
logged. A feature that passes is committed (`auto: feature ID`), one commit per feature. Every
session is a line of `.anvil-auto/sessions.jsonl`; a restart (after a kill -9 too) counts
sessions and cost from it, commits a passed feature the kill left uncommitted, and goes on with
the first unpassed feature: a passed feature is never redone. Sessions run through the daemon.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from anvilctl import eval as evals

FEATURES = "features.json"
STATE_DIR = ".anvil-auto"
LOG = "sessions.jsonl"
SESSION_TIMEOUT = 1800.0

INITIALIZER = """You are the initializer of a long task that later sessions finish one feature at
a time.
Read the spec below. Do not implement it. Write, in the working directory:
- features.json: a JSON list of features, each {{"id": "short-id", "description": "what must
  work, testably", "passes": false}}, in the order to build them, every passes false;
- init.sh: a script that sets the project up if needed and runs its tests (exit 0 = pass);
- progress.txt: a short note for the next session.

SPEC ({spec_name}):
{spec}
"""

WORKER = """You are one session of a long task. Build exactly one feature: {feature_id}.
Description: {description}
Read progress.txt and git log first. Implement the feature with tests, run ./init.sh, and only
when it passes set "passes": true for {feature_id} in features.json. Change nothing else in
features.json: no other field, no other feature (a change there is reverted). Append what you
did and what is left to progress.txt.

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


def only_passes_changed(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> str | None:
    """None when `after` differs from `before` in `passes` values only; else what changed."""
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
    return None


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
        self.say = say
        options = ["-a", args.address] if args.address else []
        options += ["-A", args.aname] if args.aname else []
        options += ["-n"] if args.noauth else []
        self.anvilctl = [sys.executable, "-m", "anvilctl", *options]
        self.state = self.root / STATE_DIR
        self.env = dict(os.environ)

    # -- records -------------------------------------------------------------------------
    def sessions(self) -> list[dict[str, Any]]:
        path = self.state / LOG
        if not path.exists():
            return []
        lines = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line torn by a kill: the session is run again
        return lines

    def log(self, entry: dict[str, Any]) -> None:
        self.state.mkdir(exist_ok=True)
        with (self.state / LOG).open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")

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

    def commit(self, message: str) -> None:
        self.git("add", "-A")  # the loop's records are excluded (`ignore_state`)
        if self.git("status", "--porcelain").strip():
            self.git("commit", "-q", "-m", message)

    def committed_features(self) -> set[str]:
        try:
            log = self.git("log", "--format=%s")
        except AutoError:  # no commit yet
            return set()
        prefix = "auto: feature "
        return {line.removeprefix(prefix) for line in log.splitlines() if line.startswith(prefix)}

    # -- the loop ------------------------------------------------------------------------
    def run(self) -> int:
        if not (self.root / ".git").exists():
            self.git("init", "-q")
        self.ignore_state()
        past = self.sessions()
        count = len(past)
        cost = sum(s.get("cost_usd") or 0.0 for s in past)
        self.resume_commits()
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
                    f"session {entry['session_id']} has no known cost, so --max-cost-usd cannot "
                    "be enforced: price the model ([models.NAME.pricing]) or drop the option"
                )
            cost += entry["cost_usd"] or 0.0

    def ignore_state(self) -> None:
        """The loop's own records stay out of the project's history."""
        exclude = self.root / ".git" / "info" / "exclude"
        exclude.parent.mkdir(parents=True, exist_ok=True)
        text = exclude.read_text(encoding="utf-8") if exclude.exists() else ""
        if f"/{STATE_DIR}/" not in text.splitlines():
            exclude.write_text(text + f"/{STATE_DIR}/\n", encoding="utf-8")

    def features(self) -> list[dict[str, Any]] | None:
        path = self.root / FEATURES
        if not path.exists():
            return None
        try:
            return load_features(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise AutoError(f"{path}: {exc}; fix it, or remove it to initialize again") from exc

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

    def session(self, kind: str, feature: str | None, prompt: str) -> dict[str, Any]:
        started = time.monotonic()
        try:
            result = evals.run_headless(
                self.anvilctl, prompt, self.model or None, self.root, self.timeout, self.env
            )
        except evals.NoResult as exc:
            raise AutoError(f"{exc} (is anvild running? make run)") from exc
        return {
            "kind": kind,
            "feature": feature,
            "session_id": result.get("session_id"),
            "outcome": result.get("outcome"),
            "detail": result.get("detail"),
            "cost_usd": result.get("total_cost_usd"),
            "duration_s": round(time.monotonic() - started, 3),
            "reverted": None,
        }

    def initialize(self) -> dict[str, Any]:
        self.say("initializer session: writing features.json, init.sh, progress.txt")
        spec = self.spec.read_text(encoding="utf-8")
        entry = self.session(
            "initializer", None, INITIALIZER.format(spec_name=self.spec.name, spec=spec)
        )
        features = self.features()
        if features is None:
            raise AutoError(f"the initializer session {entry['session_id']} wrote no features.json")
        if any(f["passes"] for f in features):
            for f in features:
                f["passes"] = False
            self.write_features(features)
            entry["reverted"] = "the initializer marked features passing: all set to false"
            self.say(entry["reverted"])
        self.commit("auto: initialize features")
        return entry

    def work(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        feature = next(f for f in features if not f["passes"])
        before = (self.root / FEATURES).read_text(encoding="utf-8")
        self.say(f"worker session: {feature['id']}")
        spec = self.spec.read_text(encoding="utf-8")
        prompt = WORKER.format(
            feature_id=feature["id"],
            description=feature.get("description", ""),
            spec_name=self.spec.name,
            spec=spec,
        )
        entry = self.session("worker", feature["id"], prompt)
        try:
            after = self.features()
            problem = "features.json was removed" if after is None else None
        except AutoError as exc:
            after, problem = None, str(exc)
        if after is not None:
            problem = only_passes_changed(features, after)
        if problem is not None:
            (self.root / FEATURES).write_text(before, encoding="utf-8")
            entry["reverted"] = problem
            self.say(f"reverted features.json: {problem}")
            after = features
        assert after is not None
        if next(f for f in after if f["id"] == feature["id"])["passes"]:
            self.commit(f"auto: feature {feature['id']}")
            self.say(f"feature {feature['id']} passes: committed")
        return entry

    def write_features(self, features: list[dict[str, Any]]) -> None:
        text = json.dumps(features, indent=2) + "\n"
        (self.root / FEATURES).write_text(text, encoding="utf-8")


EXIT_LIMIT = 3


def add_subcommand(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "auto",
        help="build a spec with a resumable loop of headless sessions",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    parser.add_argument("spec", help="the spec (its directory is the project)")
    parser.add_argument("-m", "--model", help="the model alias (default: the daemon's)")
    parser.add_argument("--max-sessions", type=evals.positive, default=20)
    parser.add_argument("--max-cost-usd", type=float, help="stop once this much is spent")
    parser.add_argument(
        "--session-timeout", type=float, default=SESSION_TIMEOUT, help="seconds per session"
    )


def run(args: argparse.Namespace) -> int:
    def say(text: str) -> None:
        print(f"anvilctl auto: {text}", file=sys.stderr, flush=True)

    try:
        return Loop(args, say).run()
    except AutoError as exc:
        say(str(exc))
        return 1
