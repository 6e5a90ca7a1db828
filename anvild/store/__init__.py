"""anvild.store: durable session records (DESIGN section 8).

One append-only JSONL file per session, `<data dir>/sessions/<id>.jsonl`, of versioned,
sequence-numbered records (`records`), folded by one pure reducer (`reducer.apply`) both live
and when loading, so `replay(records) == live state` after every mutation. The journal
(`journal`) writes and loads the files with a documented durability policy; `recovery` turns a
session a crash interrupted back into a valid, idle one without re-running anything.

    records.py   the Record union, its stable JSON tags, the converter, the schema upgrade
    state.py     SessionState, the value the records build
    reducer.py   apply / replay (pure), message_records (transcript diff -> records)
    recovery.py  recover (pure): unknown tool outcomes, interrupted turns
    journal.py   Journal, SessionStore, read_journal (blocking file I/O)
    errors.py    StoreError and its subclasses

This package sits low: it imports `anvild.llm` (canonical types) and nothing of the agent, the
9P service, the tree or the daemon (a test checks).
"""

from anvild.store.errors import (
    CorruptJournalError,
    JournalError,
    JournalWriteError,
    RecordError,
    SchemaVersionError,
    StoreError,
)
from anvild.store.journal import (
    Journal,
    JournalContents,
    SessionStore,
    needs_sync,
    read_journal,
)
from anvild.store.records import (
    SCHEMA_VERSION,
    AliasChanged,
    ApprovalAnswered,
    ApprovalRequested,
    Compacted,
    ContextFileChanged,
    ContextReplaced,
    FileSeen,
    MessageAppended,
    MessageExtended,
    ModelChanged,
    Note,
    PermissionsRemembered,
    PromptDropped,
    PromptQueued,
    PromptTaken,
    Record,
    ReplaceReason,
    ResultApprovalAnswered,
    ResultApprovalRequested,
    RoleChanged,
    SessionEnded,
    SessionStarted,
    SessionStatus,
    StateChanged,
    TextStreamed,
    TodoItem,
    TodosChanged,
    ToolFinished,
    ToolStarted,
    TurnEnded,
    UsageReported,
    Verdict,
)
from anvild.store.recovery import Recovery, recover
from anvild.store.reducer import apply, message_records, replay
from anvild.store.state import (
    CompactionInfo,
    DecidedResult,
    PendingApproval,
    PendingResult,
    QueuedPrompt,
    Remembered,
    SessionState,
    ToolRun,
    TurnUsage,
    UsageBaseline,
)

__all__ = [
    "SCHEMA_VERSION",
    "AliasChanged",
    "ApprovalAnswered",
    "ApprovalRequested",
    "Compacted",
    "CompactionInfo",
    "ContextFileChanged",
    "ContextReplaced",
    "CorruptJournalError",
    "DecidedResult",
    "FileSeen",
    "Journal",
    "JournalContents",
    "JournalError",
    "JournalWriteError",
    "MessageAppended",
    "MessageExtended",
    "ModelChanged",
    "Note",
    "PendingApproval",
    "PendingResult",
    "PermissionsRemembered",
    "PromptDropped",
    "PromptQueued",
    "PromptTaken",
    "QueuedPrompt",
    "Record",
    "RecordError",
    "Recovery",
    "Remembered",
    "ReplaceReason",
    "ResultApprovalAnswered",
    "ResultApprovalRequested",
    "RoleChanged",
    "SchemaVersionError",
    "SessionEnded",
    "SessionStarted",
    "SessionState",
    "SessionStatus",
    "SessionStore",
    "StateChanged",
    "StoreError",
    "TextStreamed",
    "TodoItem",
    "TodosChanged",
    "ToolFinished",
    "ToolRun",
    "ToolStarted",
    "TurnEnded",
    "TurnUsage",
    "UsageBaseline",
    "UsageReported",
    "Verdict",
    "apply",
    "message_records",
    "needs_sync",
    "read_journal",
    "recover",
    "replay",
]
