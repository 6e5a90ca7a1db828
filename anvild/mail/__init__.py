"""anvild.mail: typed messages between sessions and the human (DESIGN sections 4 and 7).

    message.py  Message, Draft, MessageType; checks, JSON, ids (pure)   store.py  MailStore on disk
    post.py     PostOffice: send, deliver, undeliverable -> ERROR_REPORT, read; mail events
    auto.py     AutoMail: prompt an idle session on new mail   errors.py  MailError and kin
    tools.py    list_sessions, send_message, read_inbox, request/answer_approval (per session)

Imports the agent's tool interface and the session's `ToolSetup`; never ninep, the tree or the
daemon (a test checks). `anvild.tree.mail` publishes it (`inbox`, `outbox`, `mail/`, `agent/user/`).

    office = PostOffice(MailStore(data_dir / "mail"), peers, on_event=...)
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
