"""The `Rewound` record: the transcript cut back to before a turn, kept by a reload."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from anvild.llm.types import Message, Role, Text
from anvild.store import (
    MessageAppended,
    MessageExtended,
    Record,
    RecordError,
    SessionStarted,
    replay,
)
from anvild.store.records import Rewound, decode, encode

START = SessionStarted(
    "s1", None, "developer", "m", "/w", "workspace-write", dt.datetime(2026, 12, 2, tzinfo=dt.UTC)
)
ONE = Message.user_text("one")
ANSWER = Message(Role.ASSISTANT, (Text("done"),))


def test_a_cut_replaces_the_transcript_and_survives_a_reload() -> None:
    records: list[Record] = [
        START,
        MessageAppended(ONE),
        MessageAppended(ANSWER),
        MessageAppended(ONE),
    ]
    state = replay([*records, Rewound(2, (ONE, ANSWER))])
    assert state.messages == (ONE, ANSWER)
    line = encode(5, Rewound(2, (ONE, ANSWER)))
    assert decode(json.loads(line)) == (5, Rewound(2, (ONE, ANSWER)))


def test_a_prompt_merged_into_the_last_message_is_cut_off_it() -> None:
    records: list[Record] = [START, MessageAppended(ONE), MessageExtended((Text("two"),))]
    assert replay([*records, Rewound(2, (ONE,))]).messages == (ONE,)


def test_anything_but_a_cut_is_refused() -> None:
    records: list[Record] = [START, MessageAppended(ONE), MessageAppended(ANSWER)]
    with pytest.raises(RecordError, match="not a cut"):
        replay([*records, Rewound(2, (Message.user_text("other"),))])
    with pytest.raises(RecordError, match="not a cut"):
        replay([*records, Rewound(2, (ONE, ANSWER, ONE))])
