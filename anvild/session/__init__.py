"""anvild.session: the session supervisor (DESIGN sections 4, 5, 7 and 8).

    manager.py     SessionManager: create, look up, kill, restore; provider caps; daemon events
    session.py     Session: one agent, its queue, verbs, task and state (docs/session.md)
    settings.py    SessionSettings, Services, ToolSetup: the manager's; mode and sandbox helpers
    recorder.py    Recorder: the journal writes, the transcript sync, a failed write (error)
    output.py      Output: the `log` and `events` streams, agent events shown, `out`
    approvals.py   Approvals: tool-call approvals and result gates
    agent_builder.py  the agent from the records: recorded tools, permission gate, prompt layers
    state.py       the lifecycle states and the one transition table
    prompt.py      the layered system prompt (base, AGENTS.md chain, role, context)
    roles.py       roles: text (user overrides), sandbox file, permission ceiling
    accounting.py  the `usage` and `cost` texts (pure)
    handoff.py     `model NAME`: replay check and text handoff (pure)
    stream.py      LineBroadcast: the `log`, `events` and daemon event streams
    checkpoint.py  TextCheckpoint: a streaming answer recorded at most a second behind
    leftovers.py   the temp files of writes a crash interrupted: named per call, removed at start
    events.py      the daemon-wide session events (typed, one JSON line each)
    project_config.py  ProjectConfigs: the cwd's .anvil/config.toml, merged per session
    errors.py      SessionError and its subclasses

This package imports the agent, the llm layer, the sandbox and the store (and `project_config`
the configuration); never the 9P service, the tree or the daemon (a test checks). The tree
observes sessions through the API below.

Wiring (the daemon)
-------------------
    manager = SessionManager(SessionStore(data_dir / "sessions"), registry.resolve,
                             settings=SessionSettings(...), default_cwd=..., on_event=...)
    await nursery.start(manager.run)     # restores every session, then serves; cancel = shutdown

`on_event(SessionEvent)` receives session created/ended, state changes, usage thresholds (80 %,
90 %) and failures; `anvild.session.events.encode_event` gives their JSON line for
`agent/events` (the same lines are on `manager.events`, a `LineBroadcast`).

The tree, file by file (DESIGN section 4)
-----------------------------------------
Errors: every refusal is a `SessionError` whose `str()` is the 9P error string (it says what to
do): `InvalidSessionRequest` (bad arguments), `SessionRefused` (not possible in this state),
`SessionNotFound`, `RecordWriteFailed` (the disk refused a record: the session is in error).

agent/ctl     `new ...`: `await manager.create(NewSession.parse(words))` -> Session; its `id` is
              what a read on the same fid returns. Unknown model (lists the aliases), missing cwd,
              unknown role, bad sandbox, taken or reserved alias: `InvalidSessionRequest`.
              Limits per session (recorded in `SessionStarted`, so they survive a restart):
              `max_steps=N` (1..1000), `budget=TOKENS` (per turn), `permission=MODE` (refused
              when wider than `SessionSettings.max_mode`); `approver=ID|ALIAS|user`: the
              session that may answer its result gates besides a person (a live session,
              recorded as its id; `Session.approver`, `user` when none; never changed);
              `headless`: a call that needs
              approval is refused at once, the reason naming the mode or rule that would allow
              it (`Session.mode`, `max_steps`, `token_budget`, `headless` read them back).
              `kill ID`: `await manager.kill(id_or_alias)` (blocks until the turn has ended).
agent/list    `manager.list_text()` (one `Session.list_line()` per session, creation order).
agent/events  `manager.events.open_reader()` (or bridge `on_event` to the root's stream).
agent/roles/  `roles.ROLES`; content `roles.role_text(name)`.
agent/<id>/ and agent/<alias>/: `manager.get(id_or_alias)` -> Session (`SessionNotFound`).

For a Session `s`:
  ctl       `await s.control(line)`: stop | start | restart | kill | cancel | clear | model NAME
            | request_approval [SUMMARY] | approve | reject REASON (or the methods `stop`,
            `start`, `restart`, `kill`, `cancel`, `clear`, `switch_model`). Blocking: each
            waits for the running turn to end when it ends one.
            `clear` and `model` refuse while a turn runs (write cancel first); `cancel` refuses
            when no turn runs; `start` only from stopped or error.
  in        at clunk: `s.submit(text)` -> accepted sequence number (queued behind a running
            turn). Refused when stopped, in error or exited, for an empty prompt, and for a second
            prompt to an ephemeral session.
  out       `s.out` (text, snapshot per open); after a read reached EOF, at clunk:
            `s.mark_out_read()` (await -> idle; harmless otherwise).
  wait      at open: `seq = s.accepted_seq()`; read: `await s.wait_handled(seq)` -> the state
            (`.value` + "\n", then EOF). Returns at once for stopped, error or exited.
  queue     `s.queue_text()` (`<prompt-id>\t<first line>` per waiting prompt); write `drop`:
            `s.drop_queue()` -> how many.
  state     `s.status.value` (and `s.status_detail`, why, for error and stopped).
  usage     `s.usage_line()`: "used/window (pct%) compact at P%" (no `compact at` when
            `[context] auto_compact` is 0) or "-".
  cost      `s.cost_text()`: `input/output/cache_read/cache_write N`, `cache_hit_rate`, `usd`,
            then `turn N input I cache_read R cache_write W cache_hit_rate P%` per recent turn.
  approval  read `s.approval_text()` ("" when nothing is pending; `kind tool` with call_id,
            tool, arguments, reason, always_adds; or `kind result` with asked_by and summary);
            write `s.answer_approval(line, by="user")`: approve | always | reject REASON
            (`SessionRefused` when nothing is pending, and when `by` is the session itself:
            an agent never answers its own approval; `always` refused for a result; a
            session `by` that is not the open result gate's `approver`, or any session `by`
            for a tool call: only a person answers those). The result text shows
            `approver <id|user>`.
            Result gates: `s.request_result_approval(summary, asked_by, ref, approver=None)`
            (approver: default `s.approver`; a bead passes its own) (ctl
            `request_approval [SUMMARY]`, the model's tool, a bead: `asked_by="bead <id>"`,
            `ref` its approval round) -> await_approval until approve (idle) or reject REASON
            (stopped); `ResultDecided` (verdict, reason, asked_by, ref, by) on the events.
            The decision is in the records: `s.result_decision(asked_by)` after a restart;
            `s.pending_result` / `s.requested_result` the open / asked-for gate;
            `s.withdraw_result_approval(asked_by, why)` cancels an asker's gate.
  role      read `s.role`; write `s.set_role(name)` (refused after the first prompt).
  context   read `s.context`; write (body, at clunk) `s.set_context(text)`: from the next turn.
  alias, model, cwd, sandbox   `s.alias` (None -> "-"), `s.model`, `s.cwd`, `s.sandbox`.
  approver  `s.approver` (read-only; ctl `approver ...` is refused: fixed at creation).
  created   `s.created`: the creation time, RFC 3339 UTC to the second (`2026-11-30T21:12:33Z`).
  first_prompt  `s.first_prompt`: the first line of the first prompt, at most 200 characters
            ("" -> "-" before any prompt has run). Both from the records: they survive restarts.
  log       `s.log.open_reader()`: USER:/ASSISTANT:/TOOL:/RESULT:/ERROR:/STATE:/NOTE: lines.
  events    `s.events.open_reader()`: stream-json agent events (`anvild.agent.events`), with
            `approval_requested` / `approval_answered` when `approval` opens and closes.
  todos     `s.todos_text()` (`<status>\t<content>` per item).
  config    `configs.text(s)` (`ProjectConfigs`, added by the daemon as an extension): every
            setting that applied at the last turn start, with its origin.
  compactions  `s.compaction.text()` (an extension too): `TIME\tTRIGGER\tBEFORE\tAFTER\tDROPPED
            \tMODEL` per compaction; ctl `compact [FOCUS...]`: `await s.compaction.compact(f)`.
  outcome   `s.record.last_turn` (`anvild.tree.outcome`, an extension too): the last
            turn's outcome as one line, `OUTCOME[ DETAIL]` (`done`, `error KIND: message`,
            `max_steps stopped after N steps`, ...), `-` before any turn has ended. From the
            records: it survives restarts. While a turn runs it holds the previous one's.
  systemprompt, history, env  (`anvild.tree.introspection`, an extension too):
            `s.system_prompt`, redacted; the transcript as the next request sends it
            (`s.agent.messages` through `s.agent.window.for_request`: cleared results stubbed)
            as JSONL, one canonical message (`anvild.llm.types.converter`) a line, a
            `{"marker": "compacted", ...}` line before a compaction's summary; the environment
            a command of the session gets (`sandbox_env` with the passthrough, or the daemon's
            for full access), `NAME=VALUE` sorted, credential names `***`, values redacted.

Streams: `LineBroadcast.open_reader()` gives a per-open `LineReader` (`await read(count)` blocks
until there is something and is a plain cancel point for Tflush; `read_nowait`; `close()` at
clunk). A reader starts with the backlog, holds a bounded buffer and gets
`{"type":"lagged","dropped":N}` where it lost lines. Streams end (EOF) when the session exits.
To block on any other change (a `state` reader that wants to wait), use `s.version` and
`await s.wait_changed(seen)`.
"""

from anvild.session.errors import (
    IllegalTransition,
    InvalidSessionRequest,
    NameTaken,
    RecordWriteFailed,
    SessionError,
    SessionNotFound,
    SessionRefused,
)
from anvild.session.manager import NewSession, SessionManager, chain_tools, default_tools
from anvild.session.session import Session
from anvild.session.settings import SessionSettings, ToolSetup
from anvild.session.state import TRANSITIONS, SessionStatus
from anvild.session.stream import BroadcastLimits, LineBroadcast, LineReader

__all__ = [
    "TRANSITIONS",
    "BroadcastLimits",
    "IllegalTransition",
    "InvalidSessionRequest",
    "LineBroadcast",
    "LineReader",
    "NameTaken",
    "NewSession",
    "RecordWriteFailed",
    "Session",
    "SessionError",
    "SessionManager",
    "SessionNotFound",
    "SessionRefused",
    "SessionSettings",
    "SessionStatus",
    "ToolSetup",
    "chain_tools",
    "default_tools",
]
