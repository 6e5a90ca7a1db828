"""`replay(records) == live state` after every mutation, through the real file (DESIGN section 8;
course 14.B), and recovery always leaves a valid transcript, for random valid record sequences."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from anvild.llm.integrity import validate_transcript
from anvild.store import (
    Journal,
    Record,
    SessionStarted,
    SessionStatus,
    apply,
    read_journal,
    recover,
    replay,
)
from tests.unit.store.support import valid_records

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(valid_records())
def test_live_state_equals_the_state_replayed_from_the_file_after_every_append(
    records: list[Record],
) -> None:
    first = records[0]
    assert isinstance(first, SessionStarted)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.jsonl"
        with Journal.create(path, first) as journal:
            for count, record in enumerate(records[1:], start=2):
                live = journal.append(record)
                assert live == journal.state
                loaded = read_journal(path)
                assert loaded.records == tuple(records[:count])
                assert loaded.state == live
                assert replay(loaded.records) == live
                assert loaded.torn_bytes == 0
                assert loaded.good_length == path.stat().st_size == journal.size
                assert journal.seq == count
        # a fresh open continues where the live journal stopped
        with Journal.open(path) as reopened:
            assert reopened.state == replay(records)
            assert reopened.seq == len(records)


@SETTINGS
@given(valid_records())
def test_recovery_leaves_a_valid_transcript_an_idle_session_and_is_idempotent(
    records: list[Record],
) -> None:
    state = replay(records)
    found = recover(state)
    after = state
    for record in found.records:
        after = apply(after, record)
    validate_transcript(after.messages)  # no pending tail: every call has a result
    assert after.approval is None
    assert after.tools == ()
    assert recover(after).records == ()
    if state.status.active:
        assert after.status is SessionStatus.IDLE
    else:
        assert after.status is state.status
    assert after.queue == state.queue  # accepted prompts are kept
    unknown = {call.id for call in found.unknown}
    started_unfinished = {run.call_id for run in state.tools if run.result is None}
    assert unknown == started_unfinished
    for call_id in unknown:
        assert sum(f"tool call {call_id} " in note for note in after.notes) == 1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_records(max_size=20))
def test_journal_recover_writes_the_recovery_and_the_file_replays_to_it(
    records: list[Record],
) -> None:
    first = records[0]
    assert isinstance(first, SessionStarted)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.jsonl"
        with Journal.create(path, first) as journal:
            for record in records[1:]:
                journal.append(record)
        with Journal.open(path) as journal:
            found = journal.recover()
            assert journal.state == read_journal(path).state
            assert found.records == read_journal(path).records[len(records) :]
            validate_transcript(journal.state.messages)
            assert journal.recover().records == ()
