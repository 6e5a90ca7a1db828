"""Record JSON: stable tags, round trips, the line format, and the schema 0 -> 1 upgrade."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from hypothesis import given, settings

from anvild.llm import stream
from anvild.llm.types import Message, ProviderMeta, Reasoning, Role, Text, ToolCall, ToolResult
from anvild.store import (
    SCHEMA_VERSION,
    ContextReplaced,
    MessageAppended,
    MessageExtended,
    Record,
    RecordError,
    ReplaceReason,
    SessionStarted,
    TextStreamed,
    ToolFinished,
    TurnEnded,
    UsageReported,
)
from anvild.store.records import RECORD_TAGS, RECORD_TYPES, decode, encode, schema_of, upgrade_lines
from tests.unit.store.support import V0_LINES, started, valid_records

# The tags are the file format: changing one breaks every file already written.
EXPECTED_TAGS = {
    "SessionStarted": "session_started",
    "MessageAppended": "message_appended",
    "MessageExtended": "message_extended",
    "ContextReplaced": "context_replaced",
    "ModelChanged": "model_changed",
    "StateChanged": "state_changed",
    "TodosChanged": "todos_changed",
    "ToolStarted": "tool_started",
    "ToolFinished": "tool_finished",
    "UsageReported": "usage",
    "TurnEnded": "turn_ended",
    "ContextFileChanged": "context_file_changed",
    "RoleChanged": "role_changed",
    "AliasChanged": "alias_changed",
    "PromptQueued": "prompt_queued",
    "PromptTaken": "prompt_taken",
    "PromptDropped": "prompt_dropped",
    "ApprovalRequested": "approval_requested",
    "ApprovalAnswered": "approval_answered",
    "PermissionsRemembered": "permissions_remembered",
    "ResultApprovalRequested": "result_approval_requested",
    "ResultApprovalAnswered": "result_approval_answered",
    "Note": "note",
    "FileSeen": "file_seen",
    "TextStreamed": "text_streamed",
    "Compacted": "compacted",
    "Rewound": "rewound",
    "SessionEnded": "session_ended",
}


def test_every_record_type_has_its_stable_tag() -> None:
    assert {cls.__name__: tag for cls, tag in RECORD_TAGS.items()} == EXPECTED_TAGS
    assert len(set(RECORD_TAGS.values())) == len(RECORD_TYPES)


@settings(max_examples=40, deadline=None)
@given(valid_records())
def test_every_record_round_trips_through_one_line(records: list[Record]) -> None:
    for seq, record in enumerate(records, start=1):
        line = encode(seq, record)
        assert line.endswith(b"\n")
        assert line.count(b"\n") == 1  # newlines inside strings are escaped
        assert decode(json.loads(line)) == (seq, record)


def test_line_format_puts_seq_and_type_first_and_the_header_carries_the_schema() -> None:
    line = encode(1, started(alias="r1", ephemeral=True))
    assert line == (
        b'{"seq":1,"type":"session_started","id":"s1","alias":"r1","role":"developer",'
        b'"model":"sonnet","cwd":"/src/app","sandbox":"workspace-write",'
        b'"created_at":"2026-10-10T12:00:00+00:00","ephemeral":true,"context":"","schema":5}\n'
    )
    assert schema_of(json.loads(line)) == SCHEMA_VERSION


def test_gemini_thought_signature_round_trips_in_a_snapshot_line() -> None:
    signature = ProviderMeta("gemini", {"thoughtSignature": "c2lnbmF0dXJl"})
    message = Message(
        Role.ASSISTANT,
        (
            Reasoning("plan", signature),
            ToolCall("c1", "read_file", {"file_path": "a.txt"}, signature),
        ),
    )
    line = encode(7, MessageAppended(message))
    assert line == (
        b'{"seq":7,"type":"message_appended","message":{"role":"assistant","content":['
        b'{"text":"plan","meta":{"provider":"gemini","data":{"thoughtSignature":"c2lnbmF0dXJl"}},'
        b'"type":"reasoning"},'
        b'{"id":"c1","name":"read_file","arguments":{"file_path":"a.txt"},'
        b'"meta":{"provider":"gemini","data":{"thoughtSignature":"c2lnbmF0dXJl"}},'
        b'"type":"tool_call"}]}}\n'
    )
    assert decode(json.loads(line)) == (7, MessageAppended(message))


def test_non_ascii_stays_readable_and_a_lone_surrogate_is_escaped() -> None:
    readable = encode(2, MessageExtended((Text("héllo\u2028→"),)))
    assert "héllo\u2028→".encode() in readable
    lone = MessageExtended((Text("bad \ud800 half"),))
    line = encode(3, lone)
    assert b"\\ud800" in line
    assert decode(json.loads(line)) == (3, lone)


def test_unknown_usage_stays_unknown() -> None:
    record = UsageReported(stream.Usage(input=10, output=None, cache_read=0, cache_write=None))
    line = encode(4, record)
    assert b'"output":null' in line
    assert b'"cache_read":0' in line
    assert decode(json.loads(line)) == (4, record)


def test_a_usage_record_carries_its_request_identity_only_when_known() -> None:
    usage = stream.Usage(10, 2, 0, 0)
    bare = encode(5, UsageReported(usage))
    assert bare == (  # byte-identical to what older writers wrote
        b'{"seq":5,"type":"usage","usage":{"input":10,"output":2,"cache_read":0,"cache_write":0}}\n'
    )
    head = {"model": "m", "system": "be brief", "tools": [{"name": "bash"}]}
    record = UsageReported(usage, request="a" * 64, head="b" * 64, head_body=head)
    line = encode(6, record)
    assert decode(json.loads(line)) == (6, record)
    # A record written before the fields existed loads with none.
    old = {"seq": 7, "type": "usage", "usage": {"input": 1, "output": 1, "cache_read": 0,
           "cache_write": 0}}  # fmt: skip
    assert decode(old) == (7, UsageReported(stream.Usage(1, 1, 0, 0)))


def test_a_usage_record_says_when_its_response_finished_right_after_its_counts() -> None:
    usage = stream.Usage(10, 2, None, 0)
    at = dt.datetime(2026, 12, 2, 14, 59, 58, tzinfo=dt.UTC)
    record = UsageReported(usage, "a" * 64, "b" * 64, {"system": "s"}, at=at)
    line = encode(8, record)
    assert line.startswith(  # where `anvilctl stats` scans for it, before any request head
        b'{"seq":8,"type":"usage","usage":{"input":10,"output":2,"cache_read":null,'
        b'"cache_write":0},"at":"2026-12-02T14:59:58+00:00","request":"aaa'
    )
    assert decode(json.loads(line)) == (8, record)
    later = dt.datetime(2026, 12, 2, 16, 0, 1, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert decode(json.loads(encode(9, UsageReported(usage, at=later)))) == (
        9,
        UsageReported(usage, at=later),
    )
    # A time without a zone is refused (older records, without `at`: the test above).
    with pytest.raises(ValueError, match="time zone"):
        UsageReported(usage, at=dt.datetime(2026, 12, 2, 14, 0))
    counts = {"input": 1, "output": 1, "cache_read": 0, "cache_write": 0}
    naive = {"seq": 11, "type": "usage", "usage": counts, "at": "2026-12-02T14:00:00"}
    with pytest.raises(RecordError, match="'usage'"):
        decode(naive)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ([1, 2], "a record is a JSON object"),
        ({"type": "note", "text": "x"}, "no valid seq"),
        ({"seq": 0, "type": "note", "text": "x"}, "no valid seq"),
        ({"seq": True, "type": "note", "text": "x"}, "no valid seq"),
        ({"seq": 2, "type": "nonsense"}, "not a valid record of type 'nonsense'"),
        ({"seq": 2, "type": "note"}, "not a valid record of type 'note'"),
        ({"seq": 2, "type": "state_changed", "status": "dancing"}, "state_changed"),
    ],
)
def test_decode_rejects_what_is_not_a_record(obj: object, message: str) -> None:
    with pytest.raises(RecordError, match=message):
        decode(obj)


def test_a_naive_created_at_is_refused() -> None:
    with pytest.raises(ValueError, match="time zone"):
        started(created_at=dt.datetime(2026, 1, 1))


# -- schema 0 -------------------------------------------------------------------------------


def test_schema_0_is_recognised_by_its_meta_header() -> None:
    assert schema_of(V0_LINES[0]) == 0
    with pytest.raises(RecordError, match="no schema version"):
        schema_of({"type": "note", "text": "x"})


def test_schema_0_upgrade_numbers_lines_rewrites_the_header_and_nests_results() -> None:
    upgraded = upgrade_lines(V0_LINES, 0)
    records = [decode(obj) for obj in upgraded]
    assert [seq for seq, _ in records] == list(range(1, 9))
    header = records[0][1]
    assert header == SessionStarted(
        id="old1",
        alias=None,
        role="developer",
        model="sonnet",
        cwd="/src",
        sandbox="workspace-write",
        created_at=dt.datetime(2025, 10, 10, 12, 0, tzinfo=dt.UTC),
        ephemeral=False,
        context="",
        schema=SCHEMA_VERSION,
    )
    assert records[4][1] == ToolFinished(ToolResult("c1", "a.txt", is_error=False))
    summary = Message(Role.USER, (Text("Summary: the directory holds a.txt."),))
    assert records[7][1] == ContextReplaced((summary,), ReplaceReason.COMPACTION)


@pytest.mark.parametrize(
    "lines",
    [
        [V0_LINES[1]],  # no meta first
        [V0_LINES[0], V0_LINES[0]],  # a second meta
        [V0_LINES[0], {"seq": 2, "type": "note", "text": "x"}],  # a schema 1 line in a 0 file
        [{**V0_LINES[0], "created_at": "yesterday"}],
    ],
)
def test_schema_0_upgrade_rejects_lines_of_another_shape(lines: list[object]) -> None:
    with pytest.raises(RecordError):
        upgrade_lines(lines, 0)


def test_current_schema_lines_pass_through_and_unknown_versions_are_not_upgraded() -> None:
    lines: list[object] = [json.loads(encode(1, started()))]
    assert upgrade_lines(lines, SCHEMA_VERSION) == lines
    with pytest.raises(ValueError, match=f"no upgrade from record schema {SCHEMA_VERSION + 1}"):
        upgrade_lines(lines, SCHEMA_VERSION + 1)


@pytest.mark.parametrize("schema", [1, 2, 3])
def test_a_schema_1_2_or_3_file_is_schema_4_without_the_later_records(schema: int) -> None:
    header = json.loads(encode(1, started()))
    header["schema"] = schema
    note = {"seq": 2, "type": "note", "text": "x"}
    ended = {"seq": 3, "type": "turn_ended", "outcome": "error", "detail": "d"}
    upgraded = upgrade_lines([header, note, ended], schema)
    assert upgraded == [{**header, "schema": SCHEMA_VERSION}, note, ended]
    assert decode(upgraded[2]) == (3, TurnEnded("error", "d", interrupted=False))
    with pytest.raises(RecordError, match="not session_started"):
        upgrade_lines([note], schema)


def test_later_fields_are_written_only_when_set() -> None:
    assert b"interrupted" not in encode(2, TurnEnded("error", "d"))
    line = encode(2, TurnEnded("error", "d", interrupted=True))
    assert (
        line == b'{"seq":2,"type":"turn_ended","outcome":"error","detail":"d","interrupted":true}\n'
    )
    assert encode(3, TextStreamed("Hel")) == b'{"seq":3,"type":"text_streamed","text":"Hel"}\n'
    with pytest.raises(ValueError, match="must not be empty"):
        TextStreamed("")
