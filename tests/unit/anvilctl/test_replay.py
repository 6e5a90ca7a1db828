"""`anvilctl replay-stream`: one recorded fixture per provider to a hand-written Completion JSON,
and the error fixtures to their error; run in-process (`main`) and as the installed command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from anvilctl.__main__ import main
from anvilctl.replay import sse_body

REPO = Path(__file__).resolve().parents[3]
RECORDED = REPO / "fixtures" / "recorded"
ANVILCTL = Path(sys.executable).parent / "anvilctl"


def gemini_signature() -> str:
    first = (RECORDED / "gemini/functioncall_thoughtsignature_usage.sse").read_bytes().decode()
    payload = json.loads(first.split("data: ", 1)[1].split("\r\n", 1)[0])
    signature = payload["candidates"][0]["content"]["parts"][0]["thoughtSignature"]
    assert isinstance(signature, str)
    return signature


def call(id: str, name: str, arguments: Any, meta: Any = None) -> dict[str, Any]:
    block = {"type": "tool_call", "id": id, "name": name, "arguments": arguments}
    if meta is not None:
        block["meta"] = meta
    return block


def usage(input: int, output: int, cache_read: int | None, cache_write: int | None) -> Any:
    return {"input": input, "output": output, "cache_read": cache_read, "cache_write": cache_write}


def completion(content: list[Any], finish: str, use: Any) -> dict[str, Any]:
    return {
        "message": {"role": "assistant", "content": content},
        "finish": finish,
        "finish_detail": None,
        "usage": use,
        "invalid_arguments": {},
    }


CASES = {
    "anthropic": (
        "anthropic/tool_use_input_json_delta.sse",
        completion(
            [
                {"type": "text", "text": "I'll check the current weather in Paris for you."},
                call("toolu_01NRLabsLyVHZPKxbKvkfSMn", "get_weather", {"location": "Paris"}),
            ],
            "tool_use",
            usage(377, 65, 0, 0),
        ),
    ),
    "openai-chat": (
        "openai-chat/parallel_tool_calls_usage_done.sse",
        completion(
            [
                call("call_q2UyBRP7eXNTzAoR8lEhjc9Z", "get_country", {}),
                call("call_b51ijcpFkDiTQG1bQzsrmtW5", "get_product_name", {}),
            ],
            "tool_use",
            usage(364, 40, 0, 0),
        ),
    ),
    "openai-responses": (
        "openai-responses/function_call_stream.sse",
        completion(
            [call("call_kL0PCQV7M2WMoVX8V8OtYSAL", "get_capital", {"country": "France"})],
            "tool_use",
            usage(255, 16, 0, None),
        ),
    ),
    "gemini": (
        "gemini/functioncall_thoughtsignature_usage.sse",
        completion(
            # Gemini sends no call id: the adapter makes one up (checked apart below).
            [
                call(
                    "<synthesized>",
                    "get_country",
                    {},
                    {"provider": "gemini", "data": {"thoughtSignature": gemini_signature()}},
                )
            ],
            "tool_use",
            # 10 candidate tokens + 202 thought tokens; 29 prompt tokens, none cached.
            usage(29, 212, 0, None),
        ),
    ),
}

ERRORS = {
    "openai-responses": (
        "openai-responses/error_insufficient_quota_response_failed.chunks.jsonl",
        {"type": "ApiError", "kind": "insufficient_quota"},
    ),
    "openai-chat": (
        "openai-chat/groq_midstream_error_event.sse",
        {"type": "ApiError", "kind": "tool_use_failed"},
    ),
}


def run_cli(args: list[str], mode: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    if mode == "subprocess":
        done = subprocess.run(
            [str(ANVILCTL), *args], capture_output=True, text=True, timeout=60, check=False
        )
        return done.returncode, done.stdout, done.stderr
    status = main(args)
    out, err = capsys.readouterr()
    return status, out, err


def normalise(got: dict[str, Any]) -> dict[str, Any]:
    for block in got["message"]["content"]:
        if block["type"] == "tool_call" and block["id"].startswith("gemini-"):
            block["id"] = "<synthesized>"
    return got


@pytest.mark.parametrize("mode", ["in-process", "subprocess"])
@pytest.mark.parametrize("kind", list(CASES))
def test_fixture_replays_to_the_expected_completion(
    kind: str, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fixture, expected = CASES[kind]
    status, out, err = run_cli(
        ["replay-stream", "--provider", kind, str(RECORDED / fixture)], mode, capsys
    )
    assert (status, err) == (0, "")
    assert normalise(json.loads(out)) == expected


@pytest.mark.parametrize("mode", ["in-process", "subprocess"])
@pytest.mark.parametrize("kind", list(ERRORS))
def test_error_fixtures_print_the_error_and_exit_1(
    kind: str, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fixture, expected = ERRORS[kind]
    status, out, err = run_cli(
        ["replay-stream", "--provider", kind, str(RECORDED / fixture)], mode, capsys
    )
    assert status == 1
    error = json.loads(out)["error"]
    assert {k: error[k] for k in expected} == expected
    assert err.startswith(f"anvilctl replay-stream: ApiError: {expected['kind']}")


def test_truncated_stream_is_an_unexpected_eof(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = (RECORDED / "anthropic/tool_use_input_json_delta.sse").read_bytes()
    cut = tmp_path / "cut.sse"
    cut.write_bytes(body[: body.index(b"event: message_delta")])
    assert main(["replay-stream", "--provider", "anthropic", str(cut)]) == 1
    assert json.loads(capsys.readouterr().out)["error"]["type"] == "UnexpectedEof"


def test_missing_file_and_bad_chunks_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay-stream", "--provider", "gemini", str(tmp_path / "none.sse")]) == 2
    assert "none.sse" in capsys.readouterr().err
    bad = tmp_path / "bad.chunks.jsonl"
    bad.write_text('{"ok": 1}\nnot json\n')
    assert main(["replay-stream", "--provider", "gemini", str(bad)]) == 2
    assert "bad.chunks.jsonl:2: not a JSON chunk" in capsys.readouterr().err


def test_unknown_kind_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["replay-stream", "--provider", "openai", "x.sse"])
    assert info.value.code == 2
    assert "invalid choice: 'openai'" in capsys.readouterr().err


def test_chunk_files_get_event_lines_only_for_typed_payloads() -> None:
    body = sse_body(b'{"type":"ping"}\n\n{"choices":[]}\n', "x.chunks.jsonl")
    assert body == b'event: ping\ndata: {"type":"ping"}\n\ndata: {"choices":[]}\n\n'
    assert sse_body(b"data: raw\n\n", "x.sse") == b"data: raw\n\n"
