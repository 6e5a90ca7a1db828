"""What a sender may write, and what it is told when it is wrong (`anvild.mail.message`)."""

from __future__ import annotations

import json

import pytest

from anvild.mail import TYPES, InvalidMessage, MessageType, parse_draft
from anvild.mail.message import (
    MAX_BODY_BYTES,
    MAX_MESSAGE_BYTES,
    Message,
    MessageIds,
    check_draft,
    decode,
    encode,
    encode_list,
    is_message_id,
)


def draft(**fields: object) -> bytes:
    return json.dumps({"to": "r1", "type": "QUESTION", "body": "why?", **fields}).encode()


def error(data: bytes) -> str:
    with pytest.raises(InvalidMessage) as info:
        parse_draft(data)
    return str(info.value)


def test_a_minimal_draft() -> None:
    d = parse_draft(draft())
    assert (d.to, d.type, d.subject, d.body, dict(d.metadata), d.in_reply_to) == (
        "r1",
        MessageType.QUESTION,
        "",
        "why?",
        {},
        None,
    )


def test_the_daemons_fields_are_accepted_and_ignored_but_a_claimed_from_is_kept() -> None:
    d = parse_draft(draft(**{"from": "boss", "id": "msg-x", "timestamp": 1}))
    assert d.claimed_from == "boss"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            b'{"to": "r1", "type": ',
            "malformed JSON at line 1 column 22 (character 21): Expecting value",
        ),
        (
            b'{"to": "r1",\n "type": "QUESTION" "body": 1}',
            "malformed JSON at line 2 column 21 (character 33): Expecting ',' delimiter",
        ),
        (b"", "the message is empty: write one JSON object such as"),
        (b"\xff", "not valid UTF-8 (bad byte at offset 0)"),
        (b"[1]", "a message is one JSON object, not an array"),
        (b'{"type": "QUESTION", "body": "x"}', 'the message has no recipient: add "to"'),
        (b'{"to": "", "type": "QUESTION", "body": "x"}', '"to" must be a session id or alias'),
        (b'{"to": "r1", "body": "x"}', 'the message has no "type": use one of REVIEW_REQUEST'),
        (draft(type="GOSSIP"), 'unknown message type "GOSSIP": the types are ' + ", ".join(TYPES)),
        (draft(colour="red"), "unknown field 'colour': a message has to, type, subject, body"),
        (draft(body="", subject=""), 'the message says nothing: give a "subject" or a "body"'),
        (draft(subject="s" * 201), '"subject" is 201 characters; the limit is 200'),
        (draft(metadata=[1]), '"metadata" must be a JSON object'),
        (draft(body=7), '"body" must be a string, not 7'),
        (draft(in_reply_to=3), '"in_reply_to" must be a message id'),
        (draft(type="REVIEW_RESPONSE"), 'a REVIEW_RESPONSE must carry "metadata": {"verdict": '),
        (draft(type="REVIEW_RESPONSE", metadata={"verdict": "meh"}), '(got "meh")'),
    ],
)
def test_each_bad_draft_says_what_is_wrong(data: bytes, expected: str) -> None:
    assert expected in error(data)


def test_size_caps() -> None:
    assert f"the limit is {MAX_BODY_BYTES} bytes" in error(draft(body="x" * (MAX_BODY_BYTES + 1)))
    big = b" " * (MAX_MESSAGE_BYTES + 1)
    assert f"the limit is {MAX_MESSAGE_BYTES} bytes" in error(big)


@pytest.mark.parametrize("verdict", ["lgtm", "changes"])
def test_a_review_response_carries_a_verdict(verdict: str) -> None:
    d = parse_draft(draft(type="REVIEW_RESPONSE", metadata={"verdict": verdict, "bead_id": "b1"}))
    assert d.metadata == {"verdict": verdict, "bead_id": "b1"}


def test_messages_round_trip_and_list_as_a_json_array() -> None:
    m = Message.from_draft(
        parse_draft(draft(metadata={"bead_id": "b1"}, in_reply_to="msg-1")),
        id="msg-0000000000000001",
        sender="a1",
        to="b2",
        timestamp=1739587200,
    )
    assert decode(encode(m)) == m
    assert json.loads(encode(m))["from"] == "a1"
    assert json.loads(encode_list([m, m])) == [m.to_json(), m.to_json()]
    assert encode_list([]) == b"[]\n"
    with pytest.raises(InvalidMessage):
        decode(b'{"id": 1}')


def test_ids_sort_in_creation_order_even_within_one_millisecond() -> None:
    ids = MessageIds(clock=lambda: 1700000000.0)
    made = [ids.next() for _ in range(50)]
    assert made == sorted(made)
    assert len(set(made)) == 50
    assert all(is_message_id(i) for i in made)
    later = MessageIds(clock=lambda: 1700000000.5).next()
    assert later > made[-1]
    assert not is_message_id("msg-../../etc")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"metadata": {"score": float("nan")}}, "NaN is not a JSON number"),
        ({"metadata": {"n": 2**64}}, "integers are limited to"),
        ({"metadata": {"k\u0007": 1}}, "holds a control character"),
        ({"body": "\udc80"}, "lone UTF-16 surrogate"),
        ({"to": "rev\u001b[2J"}, '"to" holds a control character'),
        ({"subject": "Re:\u0007"}, '"subject" holds a control character'),
        ({"in_reply_to": "msg-\u0000"}, '"in_reply_to" holds a control character'),
    ],
)
def test_a_tools_arguments_are_held_to_the_strict_reader(
    args: dict[str, object], expected: str
) -> None:
    """`send_message`'s arguments come from a lenient parser; what the archive would hold is
    checked the same way as an outbox body."""
    draft = {"to": "rev", "type": "QUESTION", "subject": "s", "body": "b", **args}
    with pytest.raises(InvalidMessage) as info:
        check_draft(draft)
    assert expected in str(info.value)


def test_a_message_is_never_archived_with_nan() -> None:
    message = Message(
        id="msg-0000000000000001",
        sender="a",
        to="b",
        type=MessageType.QUESTION,
        subject="s",
        body="b",
        metadata={"x": float("inf")},
        timestamp=1,
    )
    with pytest.raises(ValueError, match="not JSON compliant"):
        encode(message)


def test_a_message_stored_with_nan_before_the_strict_reader_is_shown_strictly() -> None:
    stored = (
        b'{"id":"msg-0000000000000001","from":"a","to":"b","type":"QUESTION","subject":"s",'
        b'"body":"b","metadata":{"x":NaN,"y":-Infinity},"timestamp":1,"in_reply_to":null}\n'
    )
    message = decode(stored)
    assert dict(message.metadata) == {"x": "NaN", "y": "-Infinity"}
    assert json.loads(encode(message))["metadata"] == {"x": "NaN", "y": "-Infinity"}


@pytest.mark.parametrize("stored", [b"[" * 100_000, b'{"n": ' + b"9" * 5000 + b"}", b"\xff"])
def test_a_damaged_stored_message_is_invalid_not_a_crash(stored: bytes) -> None:
    with pytest.raises(InvalidMessage, match="not a stored message"):
        decode(stored)
