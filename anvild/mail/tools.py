"""The coordination tools a model uses to talk to its peers, bound to its own session.

    list_sessions  send_message  read_inbox  request_approval  answer_approval

`mail_tools(office, gate, answers)` is a tools factory: each session gets instances bound to its
`ToolSetup.session_id`. No argument names the sender, so a model can neither read another
session's inbox nor send as someone else; no file or process effects (`Effects.none()`).
`request_approval` records a result gate (`ResultGate`): after the turn the session waits in
await_approval. `answer_approval` answers, always as the calling session, only gates that name
it as approver (`ApprovalAnswers`): never its own, never a tool call's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol

from anvild.agent.tools import Cancellation, Failed, InvalidArgs, Tool, ToolOutput
from anvild.agent.tools.base import Args, ServiceTool, ToolContext, object_schema
from anvild.mail.errors import InvalidMessage, MailStoreError
from anvild.mail.message import (
    MAX_BODY_BYTES,
    MAX_SUBJECT_CHARS,
    TYPES,
    VERDICTS,
    encode_list,
)
from anvild.mail.post import USER, PostOffice
from anvild.session.session import ToolSetup, ToolsFactory

MAX_SUMMARY_CHARS: Final = 4000


class ResultGate(Protocol):
    """Asks a session's result gate (the daemon adapts its sessions)."""

    def request_result_approval(self, session_id: str, summary: str, asked_by: str) -> str:
        """Record the request; returns what the model is told. Raises `ValueError` with the
        reason when the session cannot ask (ephemeral, already waiting)."""
        ...


class ApprovalAnswers(Protocol):
    """Answers another session's result gate as an approver session (the daemon adapts its
    sessions and bead gates)."""

    async def answer_result_approval(
        self, caller: str, target: str, verdict: str, reason: str
    ) -> str:
        """`verdict` approve or reject (with `reason`) on the result gate of `target` (an id
        or alias), answered by `caller`; returns what the model is told. Raises `ValueError`
        with the reason and what to do when it is refused."""
        ...


LIST_DESCRIPTION: Final = """\
List the other agent sessions you can message: one line per live session with its id, alias \
("-" if none), role and state (idle, running, await, await_approval, stopped, ...). Your own \
session is marked "(you)". Use it to find a peer by role before send_message, e.g. the \
reviewer to ask for a review. The human is always reachable as "user".
"""

SEND_DESCRIPTION: Final = f"""\
Send one typed message to another session (by id or alias from list_sessions) or to the human \
("user"). It is delivered at once to the recipient's inbox; you are always the sender. If nobody \
has that id or alias the message is not delivered and you are told why.

Types: {", ".join(TYPES)}. Use REVIEW_REQUEST to ask for a review and REVIEW_RESPONSE to give \
one: a REVIEW_RESPONSE must set metadata.verdict to "lgtm" (approved, nothing to change) or \
"changes" (put what must change in body). QUESTION/ANSWER for information, APPROVAL_REQUEST to \
ask the human to approve something, STATUS_UPDATE for progress, ERROR_REPORT for a problem. \
Set in_reply_to to the id of the message you answer. Put references such as bead_id in \
metadata. Keep subject short (at most {MAX_SUBJECT_CHARS} characters); body holds the details \
(at most {MAX_BODY_BYTES // 1024} KiB; point to files for more).
"""

READ_DESCRIPTION: Final = """\
Read your unread messages: returns them as a JSON array (id, from, to, type, subject, body, \
metadata, timestamp, in_reply_to), oldest first, and marks them read, so each message is \
returned once (they stay archived). Read it when you are told you have mail, or before you \
finish a task that others may have commented on.
"""

APPROVAL_DESCRIPTION: Final = """\
Ask a human (or an approver session) to approve the result of your current task before \
anything continues. Give a short summary of what you did and how it was checked. When your \
turn ends the session waits for the decision: approve lets work continue, reject stops the \
session with the reason. Call it once, as the last step of the work, then end your turn with \
the same summary as your answer. Do not call it for routine steps.
"""

ANSWER_DESCRIPTION: Final = """\
Approve or reject another session's result when you are its approver: a session (or a bead it \
works on) whose creator named you as approver waits in await_approval for your decision. \
verdict "approve" lets it continue (the session goes idle; a bead completes, approved by you); \
"reject" with a reason stops it (a bead fails with the reason). Check the work first (read its \
answer, the diff, the tests). You can answer only gates that name you, never your own, and \
never a tool call's approval (only a human answers those); if you are not the approver, you \
are told who is.
"""

ANSWER_SCHEMA: Final[Mapping[str, Any]] = object_schema(
    {
        "session": {
            "type": "string",
            "minLength": 1,
            "maxLength": 200,
            "description": "The waiting session's id or alias (a conductor may use the name "
            "it gave it).",
        },
        "verdict": {"type": "string", "enum": ["approve", "reject"]},
        "reason": {
            "type": "string",
            "maxLength": MAX_SUMMARY_CHARS,
            "description": "Why, for reject (required there): what must change.",
        },
    },
    required=("session", "verdict"),
)

SEND_SCHEMA: Final[Mapping[str, Any]] = object_schema(
    {
        "to": {
            "type": "string",
            "minLength": 1,
            "maxLength": 64,
            "description": 'A session id or alias from list_sessions, or "user" for the human.',
        },
        "type": {"type": "string", "enum": list(TYPES), "description": "The message type."},
        "subject": {
            "type": "string",
            "maxLength": MAX_SUBJECT_CHARS,
            "description": "One short line.",
        },
        "body": {"type": "string", "description": "The message itself."},
        "metadata": {
            "type": "object",
            "description": 'Structured data, e.g. {"bead_id": "b3"}; a REVIEW_RESPONSE needs '
            f'{{"verdict": "{VERDICTS[0]}"}} or {{"verdict": "{VERDICTS[1]}"}}.',
        },
        "in_reply_to": {
            "type": "string",
            "description": "The id of the message this answers (msg-...).",
        },
    },
    required=("to", "type", "body"),
)

EMPTY_SCHEMA: Final[Mapping[str, Any]] = object_schema({})

APPROVAL_SCHEMA: Final[Mapping[str, Any]] = object_schema(
    {
        "summary": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_SUMMARY_CHARS,
            "description": "What you did and how you checked it, for the approver.",
        }
    },
    required=("summary",),
)


class ListSessions(ServiceTool[PostOffice]):
    name: Final = "list_sessions"
    description: Final = LIST_DESCRIPTION
    summary: Final = (
        'List the live sessions you can message: id, alias, role, state. The human is "user".'
    )
    input_schema: Final = EMPTY_SCHEMA
    cancellation: Final = Cancellation.SAFE_TO_ABANDON

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        lines = ["id\talias\trole\tstate"]
        for peer in self._service.peers.peers():
            mark = "\t(you)" if peer.id == self._me else ""
            lines.append(f"{peer.id}\t{peer.alias or '-'}\t{peer.role}\t{peer.state}{mark}")
        lines.append(f'(the human: "{USER}")')
        return ToolOutput("\n".join(lines))


class SendMessage(ServiceTool[PostOffice]):
    name: Final = "send_message"
    description: Final = SEND_DESCRIPTION
    summary: Final = (
        'Send a typed message to a session (id or alias) or to "user". A REVIEW_RESPONSE sets '
        'metadata.verdict to "lgtm" or "changes".'
    )
    input_schema: Final = SEND_SCHEMA
    cancellation: Final = Cancellation.ATOMIC  # delivered entirely or not at all

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        try:
            sent = await self._service.send_args(self._me, dict(args))
        except InvalidMessage as exc:
            raise InvalidArgs(f"Not sent: {exc}.") from exc
        except MailStoreError as exc:
            raise Failed(f"Not sent: {exc}") from exc
        message = sent.message
        if sent.undeliverable is not None:
            raise Failed(f"Not delivered (message {message.id}): {sent.undeliverable}.")
        return ToolOutput(f"Sent {message.type.value} {message.id} to {message.to}.")


class ReadInbox(ServiceTool[PostOffice]):
    name: Final = "read_inbox"
    description: Final = READ_DESCRIPTION
    summary: Final = "Return your unread messages as a JSON array and mark them read."
    input_schema: Final = EMPTY_SCHEMA
    cancellation: Final = Cancellation.ATOMIC

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        try:
            messages = await self._service.take_unread(self._me)
        except MailStoreError as exc:
            raise Failed(f"The inbox could not be read: {exc}") from exc
        if not messages:
            return ToolOutput("No unread messages.")
        return ToolOutput(encode_list(messages).decode())


class RequestApproval(ServiceTool[ResultGate]):
    name: Final = "request_approval"
    description: Final = APPROVAL_DESCRIPTION
    summary: Final = (
        "Ask for approval of your task's result: call it once, as the last step, then end "
        "your turn with the same summary."
    )
    input_schema: Final = APPROVAL_SCHEMA
    cancellation: Final = Cancellation.ATOMIC

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        summary = str(args["summary"]).strip()
        if not summary:
            raise InvalidArgs("Invalid value for `summary`: it is empty.")
        try:
            return ToolOutput(self._service.request_result_approval(self._me, summary, "model"))
        except ValueError as exc:
            raise Failed(f"Approval not requested: {exc}") from exc


class AnswerApproval(ServiceTool[ApprovalAnswers]):
    name: Final = "answer_approval"
    description: Final = ANSWER_DESCRIPTION
    summary: Final = (
        "Approve or reject the result of a session that named you as its approver (a reject "
        "needs a reason)."
    )
    input_schema: Final = ANSWER_SCHEMA
    cancellation: Final = Cancellation.ATOMIC

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        target = str(args["session"]).strip()
        verdict = str(args["verdict"])
        reason = " ".join(str(args.get("reason", "")).split())
        if verdict == "reject" and not reason:
            raise InvalidArgs("A reject needs a reason: say what must change in `reason`.")
        try:
            said = await self._service.answer_result_approval(self._me, target, verdict, reason)
        except ValueError as exc:
            raise Failed(f"Not answered: {exc}") from exc
        return ToolOutput(said)


def mail_tools(
    office: PostOffice,
    gate: ResultGate | None = None,
    answers: ApprovalAnswers | None = None,
) -> ToolsFactory:
    """A tools factory: the mail tools (`request_approval` when `gate` is given,
    `answer_approval` when `answers` is) bound to each session's id."""

    def build(setup: ToolSetup) -> list[Tool]:
        me = setup.session_id
        tools: list[Tool] = [
            ListSessions(office, me),
            SendMessage(office, me),
            ReadInbox(office, me),
        ]
        if gate is not None:
            tools.append(RequestApproval(gate, me))
        if answers is not None:
            tools.append(AnswerApproval(answers, me))
        return tools

    return build


__all__ = [
    "AnswerApproval",
    "ApprovalAnswers",
    "ListSessions",
    "ReadInbox",
    "RequestApproval",
    "ResultGate",
    "SendMessage",
    "mail_tools",
]
