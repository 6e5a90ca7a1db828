"""A session's hooks: Claude Code's hook contract at the agent loop's and the session's points.

`SessionHooks` implements `anvild.agent.hookpoints.TurnHooks` (PreToolUse, PostToolUse, Stop,
PreCompact) and the session's own points (`prompt_submit`, `session_start`, `session_end`);
`approver(inner)` wraps the permission gate's approver (Notification, and PreToolUse `allow`).
Each point runs the matching hooks of the config that applies now (`source()`), concurrently,
with the event's JSON on stdin (`transcript_path`: the session's records file). Exit 0 goes on
(stdout may be JSON: `decision`/`reason`, `hookSpecificOutput`, and at every event `continue`/
`stopReason`, `systemMessage`, `suppressOutput`); exit 2 blocks with stderr where the event can
block; anything else, a timeout or unreadable output is reported (`HookReported` on the
session's events) and never blocks. `continue: false` wins over any decision: the turn ends
(`TurnStopped`), or the prompt is refused. Everything shown to the user is a `HookReported`.

Authority: a PreToolUse `deny` or exit 2 refuses the call; `allow` only answers the approval the
permission gate would ask for (the gate still applies the mode, the role's ceiling, deny rules
and the sandbox: what it denies stays denied); `ask` asks a person even where the policy would
not; `updatedInput` is a `Rewrite` the gate decides as if the model had sent it. A Stop hook
continues a turn at most its `max_blocks` times.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import trio

from anvild.agent import events as ev
from anvild.agent.hookpoints import Rewrite, TurnStopped
from anvild.agent.permissions.approval import (
    ApprovalAnswer,
    ApprovalRequest,
    ApproveAlways,
    ApproveOnce,
    Approver,
    Reject,
    Unavailable,
)
from anvild.hooks.process import HookRun, hook_env, run_hook
from anvild.hooks.spec import Event, HookSet, HookSpec
from anvild.llm.types import ToolCall, ToolResult

HookTables = Mapping[str, Mapping[str, Any]]
Runner = Callable[..., Awaitable[HookRun]]
"""`run_hook`'s signature (a benchmark wraps it to time the hooks' own runs)."""

SHOWN_OUTPUT: Final = 2000
"""How much of a hook's stdout an `output` report shows (characters)."""
CONTEXT_EVENTS: Final = frozenset({Event.USER_PROMPT_SUBMIT, Event.SESSION_START})
"""Where plain text on stdout is context for the model (so not an `output` report)."""


class PromptBlocked(Exception):
    """A UserPromptSubmit hook rejected the prompt; the message says which and why."""


def _nothing() -> str:
    return ""


def _output(run: HookRun) -> dict[str, Any]:
    """The JSON object a hook that exited 0 printed ({} for none or plain text)."""
    text = run.stdout.strip()
    if run.exit_code != 0 or not text.startswith("{"):
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _specific(output: Mapping[str, Any], key: str) -> str:
    specific = output.get("hookSpecificOutput")
    value = specific.get(key) if isinstance(specific, dict) else None
    return value if isinstance(value, str) else ""


def _stderr(run: HookRun) -> str:
    return run.stderr.strip() or f"exit {run.exit_code} with nothing on stderr"


def _shown(text: str) -> str:
    text = text.strip()
    return text if len(text) <= SHOWN_OUTPUT else text[:SHOWN_OUTPUT] + "…"


class SessionHooks:
    """The hooks of one session; see the module docstring."""

    def __init__(
        self,
        source: Callable[[], HookTables],
        *,
        session_id: str,
        cwd: Path,
        role: Callable[[], str],
        mode: Callable[[], str],
        emit: Callable[[ev.AgentEvent], None],
        bead: Callable[[], str] = _nothing,
        transcript: Path | None = None,
        environ: Mapping[str, str] | None = None,
        runner: Runner = run_hook,
    ) -> None:
        self._source = source
        self.session_id = session_id
        self.cwd = cwd
        self.transcript = transcript  # the session's records file: `transcript_path`
        self._role = role
        self._mode = mode
        self.emit = emit
        self._bead = bead
        self._environ = environ
        self._env: dict[str, str] | None = None  # `hook_env`, made when a hook first runs
        self._tables: HookTables | None = None
        self._set = HookSet()
        self._approved: dict[str, str] = {}  # call id -> the hook that allowed it
        self._inner: Approver | None = None
        self._runner = runner

    # -- the config that applies ------------------------------------------------------------

    def hooks(self) -> HookSet:
        """The hooks of the config that applies now (parsed again only when it changed)."""
        try:
            tables = self._source()
        except Exception as exc:  # the config's trouble is reported there; keep the last set
            self.emit(ev.HookReported("-", "-", "error", f"the hooks could not be read: {exc}"))
            return self._set
        if tables is not self._tables:
            if self._tables is None or tables != self._tables:
                try:
                    self._set = HookSet.of(tables)
                except Exception as exc:  # not checked by the config schema: run none of them
                    self._set = HookSet()
                    detail = f"the hooks are not valid ({exc!r}); none runs until they are"
                    self.emit(ev.HookReported("-", "-", "error", detail))
            self._tables = tables
        return self._set

    def _payload(self, event: Event, **fields: Any) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "transcript_path": "" if self.transcript is None else str(self.transcript),
            "cwd": str(self.cwd),
            "permission_mode": self._mode(),
            "hook_event_name": event.value,
            "role": self._role(),
            "bead": self._bead(),
            **fields,
        }

    async def _run(self, event: Event, subject: str, **fields: Any) -> list[HookRun]:
        """Run the hooks of `event` matching `subject`, concurrently; report the failures."""
        specs = self.hooks().matching(event, subject)
        if not specs:
            return []
        try:
            payload = self._payload(event, **fields)
        except Exception as exc:  # e.g. the bead lookup failed: the hooks cannot be told
            self.emit(ev.HookReported("-", event.value, "error", f"not run: {exc!r}"))
            return []
        runs: list[HookRun | None] = [None] * len(specs)
        if self._env is None:  # a copy of the daemon's environment: most sessions run no hook
            base = os.environ if self._environ is None else self._environ
            self._env = hook_env(base, self.cwd, self.session_id)
        env = self._env

        async def one(index: int, spec: HookSpec) -> None:
            runs[index] = await self._runner(spec, payload, cwd=self.cwd, env=env)

        async with trio.open_nursery() as nursery:
            for index, spec in enumerate(specs):
                nursery.start_soon(one, index, spec)
        done = [r for r in runs if r is not None]
        for run in done:
            if run.exit_code is None:
                outcome = "timeout" if run.timed_out else "error"
                self._report(run, outcome, run.problem)
            elif run.exit_code not in (0, 2):
                self._report(run, "error", f"exit {run.exit_code}: {run.stderr.strip()}")
            elif run.exit_code == 0 and run.stdout.lstrip().startswith("{") and not _output(run):
                self._report(run, "error", f"stdout is not a JSON object: {run.stdout[:200]}")
            elif run.exit_code == 0:
                self._shown_to_user(run, event)
        return done

    def _shown_to_user(self, run: HookRun, event: Event) -> None:
        """What an exit-0 hook shows the user: its stdout (`output`, as Claude Code's verbose
        mode does) unless `suppressOutput` or it is the model's context, and `systemMessage`
        (`message`). Neither ever reaches the model."""
        output = _output(run)
        plain_context = not output and event in CONTEXT_EVENTS
        if run.stdout.strip() and output.get("suppressOutput") is not True and not plain_context:
            self._report(run, "output", _shown(run.stdout))
        message = output.get("systemMessage")
        if isinstance(message, str) and message.strip():
            self._report(run, "message", message)

    def _stops(self, runs: Sequence[HookRun]) -> str | None:
        """Why the hooks that said `continue: false` stop (each reported `stopped`), or None:
        `EVENT hook NAME: STOPREASON`, joined by "; ". For the user, never the model."""
        reasons: list[str] = []
        for run in runs:
            output = _output(run)
            if output.get("continue") is not False:
                continue
            reason = output.get("stopReason")
            reason = reason.strip() if isinstance(reason, str) and reason.strip() else ""
            self._report(run, "stopped", reason or "no reason given")
            reasons.append(
                f"{run.spec.event.value} hook {run.spec.name}: " + (reason or "no reason given")
            )
        return "; ".join(reasons) if reasons else None

    def _report(self, run: HookRun, outcome: str, detail: str) -> None:
        self.emit(ev.HookReported(run.spec.name, run.spec.event.value, outcome, detail.strip()))

    def _blocked(self, run: HookRun, why: str, detail: str | None = None) -> str:
        """Report `run` as blocked (with `detail`, else `why`); the line that says so to the
        model: `PreToolUse hook NAME: WHY`."""
        self._report(run, "blocked", why if detail is None else detail)
        return f"{run.spec.event.value} hook {run.spec.name}: {why}"

    # -- the agent loop's points (TurnHooks) ------------------------------------------------

    async def before_call(self, call: ToolCall) -> str | Rewrite | None:
        """PreToolUse: a refusal (exit 2 or `deny`), a `Rewrite` (`updatedInput`), or None;
        `allow` and an approved `ask` answer the permission gate's question for this call (it
        asks nothing else). With a rewrite only its own hook's `allow` counts (the others saw
        the model's input). `TurnStopped` for `continue: false`, whatever else was said."""
        if len(self._approved) > 256:  # calls the gate decided without asking
            self._approved.clear()
        arguments = call.arguments if isinstance(call.arguments, dict) else {}
        runs = await self._run(
            Event.PRE_TOOL_USE,
            call.name,
            tool_name=call.name,
            tool_input=arguments,
            tool_use_id=call.id,
        )
        if (stopped := self._stops(runs)) is not None:
            raise TurnStopped(stopped)
        refusals: list[str] = []
        asks: list[tuple[str, str]] = []
        allows: list[str] = []
        rewrites: dict[str, dict[str, Any]] = {}  # hook -> its updatedInput
        for run in runs:
            name = run.spec.name
            if run.exit_code == 2:
                refusals.append(self._blocked(run, _stderr(run), run.stderr))
                continue
            output = _output(run)
            decision = _specific(output, "permissionDecision")
            reason = _specific(output, "permissionDecisionReason")
            if not decision:  # the older form: decision approve|block, reason
                legacy = output.get("decision")
                decision = {"approve": "allow", "block": "deny"}.get(str(legacy), "")
                reason = str(output.get("reason", "")) if decision else reason
            if decision == "deny":
                refusals.append(self._blocked(run, reason or "denied", reason))
                continue
            specific = output.get("hookSpecificOutput")
            if isinstance(specific, dict) and specific.get("updatedInput") is not None:
                updated = specific["updatedInput"]
                if not isinstance(updated, dict):
                    why = f"its updatedInput is not a JSON object: {json.dumps(updated)[:200]}"
                    refusals.append(self._blocked(run, why))
                    continue
                if updated != arguments:
                    rewrites[name] = updated
            if decision == "ask":
                asks.append((name, reason))
            elif decision == "allow":
                allows.append(name)
        if len({json.dumps(v, sort_keys=True) for v in rewrites.values()}) > 1:
            names = " and ".join(sorted(rewrites))
            refusals.append(f"PreToolUse hooks {names} each changed its input differently")
            for run in runs:
                if run.spec.name in rewrites:
                    self._report(run, "blocked", refusals[-1])
        if refusals:
            return "\n".join(refusals)
        rewrite = None
        if rewrites:
            by, arguments = next(iter(sorted(rewrites.items())))
            rewrite = Rewrite(arguments, by)
            allows = [name for name in allows if name == by]
            changed = json.dumps(arguments, ensure_ascii=False)
            detail = f"changed the input of {call.name} call {call.id} to {changed}"
            self.emit(ev.HookReported(by, Event.PRE_TOOL_USE.value, "updated", detail))
        if asks:
            refused = await self._ask(call, arguments, asks)
            return rewrite if refused is None else refused
        if allows:
            self._approved[call.id] = allows[0]
        return rewrite

    async def _ask(
        self, call: ToolCall, arguments: dict[str, Any], asks: Sequence[tuple[str, str]]
    ) -> str | None:
        why = "; ".join(f"hook {n} asks: {r}" if r else f"hook {n} asks" for n, r in asks)
        if self._inner is None:
            return f"{why}, and this session has no approver"
        request = ApprovalRequest(call.id, call.name, arguments, why)
        answer = await self._inner.request_approval(request)
        match answer:
            case ApproveOnce() | ApproveAlways():
                self._approved[call.id] = asks[0][0]
                return None
            case Reject(feedback=feedback):
                said = f" and said: {feedback.strip()}" if feedback.strip() else ""
                return f"the user rejected this call ({why}){said}"
            case Unavailable(reason=reason):
                return reason

    async def after_call(self, call: ToolCall, result: ToolResult) -> str:
        """PostToolUse: what the hooks tell the model about the result ("" for nothing), or
        `TurnStopped` (`continue: false`: the result stands, the turn ends after its step)."""
        self._approved.pop(call.id, None)
        if not self.hooks().matching(Event.POST_TOOL_USE, call.name):
            return ""
        runs = await self._run(
            Event.POST_TOOL_USE,
            call.name,
            tool_name=call.name,
            tool_input=call.arguments if isinstance(call.arguments, dict) else {},
            tool_response={"content": result.content, "is_error": result.is_error},
            tool_use_id=call.id,
        )
        if (stopped := self._stops(runs)) is not None:
            raise TurnStopped(stopped)
        notes: list[str] = []
        for run in runs:
            if run.exit_code == 2:
                notes.append(self._blocked(run, _stderr(run), run.stderr))
                continue
            output = _output(run)
            if output.get("decision") == "block":
                reason = str(output.get("reason", "")) or "it blocked without a reason"
                notes.append(self._blocked(run, reason))
            if context := _specific(output, "additionalContext"):
                notes.append(f"PostToolUse hook {run.spec.name}: {context}")
        return "\n".join(notes)

    async def before_stop(self, continued: int) -> str | None:
        """Stop: a message that continues the turn (exit 2, or `decision: block`), or None.
        A hook that already continued this turn `max_blocks` times is reported instead.
        `continue: false` wins: `TurnStopped`."""
        runs = await self._run(Event.STOP, "", stop_hook_active=continued > 0)
        if (stopped := self._stops(runs)) is not None:
            raise TurnStopped(stopped)
        reasons: list[str] = []
        for run in runs:
            if run.exit_code == 2:
                reason = _stderr(run)
            elif (output := _output(run)).get("decision") == "block":
                reason = str(output.get("reason", "")) or "continue"
            else:
                continue
            if continued >= run.spec.max_blocks:
                self._report(
                    run,
                    "error",
                    f"asked to continue the turn again after {continued} times "
                    f"(max_blocks = {run.spec.max_blocks}); the turn ends: {reason}",
                )
                continue
            reasons.append(self._blocked(run, reason))
        return "\n".join(reasons) if reasons else None

    async def before_compact(self, trigger: str, focus: str) -> None:
        """PreCompact: run for their effects; `continue: false` is `TurnStopped` (no summary
        is written; a turn that was compacting ends)."""
        runs = await self._run(
            Event.PRE_COMPACT, trigger, trigger=trigger, custom_instructions=focus
        )
        if (stopped := self._stops(runs)) is not None:
            raise TurnStopped(stopped)

    # -- the session's points ---------------------------------------------------------------

    async def prompt_submit(self, prompt: str) -> str:
        """UserPromptSubmit: the context the hooks add to `prompt` ("" for none), or
        `PromptBlocked` (exit 2, `decision: block`, or `continue: false` with its `stopReason`)
        with which hook and why."""
        runs = await self._run(Event.USER_PROMPT_SUBMIT, "", prompt=prompt)
        if (stopped := self._stops(runs)) is not None:
            raise PromptBlocked(f"stopped by {stopped}")
        refusals: list[str] = []
        context: list[str] = []
        for run in runs:
            name = run.spec.name
            if run.exit_code == 2:
                refusals.append(f"the UserPromptSubmit hook {name} rejected it: {_stderr(run)}")
                self._report(run, "blocked", run.stderr)
            elif run.exit_code == 0:
                output = _output(run)
                if output.get("decision") == "block":
                    reason = str(output.get("reason", "")) or "no reason given"
                    refusals.append(f"the UserPromptSubmit hook {name} rejected it: {reason}")
                    self._report(run, "blocked", reason)
                elif extra := _specific(output, "additionalContext"):
                    context.append(extra)
                elif not output and run.stdout.strip():
                    context.append(run.stdout.strip())
        if refusals:
            raise PromptBlocked("; ".join(refusals))
        return "\n\n".join(context)

    async def session_start(self, source: str) -> str:
        """SessionStart (`source`: startup, resume, clear): the context the hooks add."""
        runs = await self._run(Event.SESSION_START, source, source=source)
        self._stops(runs)  # nothing to stop here: reported
        context: list[str] = []
        for run in runs:
            if run.exit_code != 0:
                if run.exit_code == 2:
                    self._report(run, "error", run.stderr)
                continue
            output = _output(run)
            if extra := _specific(output, "additionalContext"):
                context.append(extra)
            elif not output and run.stdout.strip():
                context.append(run.stdout.strip())
        return "\n\n".join(context)

    async def session_end(self, reason: str) -> None:
        """SessionEnd: run for their effects."""
        runs = await self._run(Event.SESSION_END, "", reason=reason)
        self._stops(runs)  # nothing to stop here: reported
        for run in runs:
            if run.exit_code == 2:
                self._report(run, "error", run.stderr)

    async def notify(self, message: str, **fields: Any) -> None:
        """Notification: run for their effects (a person is asked something)."""
        runs = await self._run(Event.NOTIFICATION, "", message=message, **fields)
        self._stops(runs)  # nothing to stop here: reported
        for run in runs:
            if run.exit_code == 2:
                self._report(run, "error", run.stderr)

    def approver(self, inner: Approver) -> Approver:
        """The permission gate's approver: a call a PreToolUse hook allowed (or a person
        approved when a hook asked) is approved without asking again; any other request runs
        the Notification hooks, then asks `inner`."""
        self._inner = inner
        return _HookApprover(self, inner)

    def take_approval(self, call_id: str) -> str | None:
        """The hook that approved this call, once (None: none did)."""
        return self._approved.pop(call_id, None)


class _HookApprover:
    def __init__(self, hooks: SessionHooks, inner: Approver) -> None:
        self._hooks = hooks
        self._inner = inner

    async def request_approval(self, request: ApprovalRequest) -> ApprovalAnswer:
        hooks = self._hooks
        name = hooks.take_approval(request.id)
        if name is not None:
            detail = f"approved {request.tool}: {request.reason}"
            hooks.emit(ev.HookReported(name, Event.PRE_TOOL_USE.value, "approved", detail))
            return ApproveOnce()
        await hooks.notify(
            f"anvil needs your permission to use {request.tool}: {request.reason}",
            notification_type="permission_prompt",
            tool_name=request.tool,
            tool_input=dict(request.arguments),
        )
        return await self._inner.request_approval(request)


__all__ = ["HookTables", "PromptBlocked", "SessionHooks"]
