"""anvild.mail: typed messages between sessions and the human (DESIGN sections 4 and 7).

    message.py  Message, Draft, MessageType; checking what a sender wrote; JSON; ids (pure)
    store.py    MailStore: the mailboxes on disk (inbox, received, sent; durable writes)
    post.py     PostOffice: send, deliver, undeliverable -> ERROR_REPORT, read; mail events
    auto.py     AutoMail: prompt an idle session when new mail arrives (per-mailbox setting)
    tools.py    list_sessions, send_message, read_inbox, request_approval, answer_approval
                (bound to a session)
    errors.py   MailError and its subclasses

This package imports the agent's tool interface and the session's `ToolSetup`; never the 9P
service, the tree or the daemon (a test checks). The daemon serves it
(`anvild.tree.mail`): per session `inbox`, `outbox`, `mail/received/`, `mail/sent/`, the
human's `agent/user/`, and mail events on `agent/events`.

Wiring (the daemon):

    office = PostOffice(MailStore(data_dir / "mail"), peers, on_event=...)
    auto = AutoMail(office, prompter)
    tools = chain_tools(default_tools, mail_tools(office, gate, answers))
"""

from anvild.mail.auto import AutoMail, Prompter
from anvild.mail.errors import InvalidMessage, MailError, MailStoreError, UnknownMailbox
from anvild.mail.message import (
    TYPES,
    VERDICTS,
    Draft,
    Message,
    MessageType,
    check_draft,
    parse_draft,
)
from anvild.mail.post import DAEMON, USER, MailEvent, Peer, Peers, PostOffice, Sent, encode_event
from anvild.mail.store import Box, MailStore
from anvild.mail.tools import ApprovalAnswers, ResultGate, mail_tools

__all__ = [
    "DAEMON",
    "TYPES",
    "USER",
    "VERDICTS",
    "ApprovalAnswers",
    "AutoMail",
    "Box",
    "Draft",
    "InvalidMessage",
    "MailError",
    "MailEvent",
    "MailStore",
    "MailStoreError",
    "Message",
    "MessageType",
    "Peer",
    "Peers",
    "PostOffice",
    "Prompter",
    "ResultGate",
    "Sent",
    "UnknownMailbox",
    "check_draft",
    "encode_event",
    "mail_tools",
    "parse_draft",
]
