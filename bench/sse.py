"""Benchmark: our SseDecoder against httpx-sse 0.4.3 on the same ~10 MB realistic stream.

    .venv/bin/python bench/sse.py [--mb 10] [--chunk 4096] [--repeat 5]

The stream mixes what providers really send: Anthropic-style typed events (`event:` + `data:`),
OpenAI-style `data:`-only chunks, a few large tool-argument events (1-8 KiB), keep-alive comments
and multi-line data. It is built once with LF line ends and once with CRLF, then cut into fixed
chunks as a socket would deliver them. httpx-sse is driven the way applications use it
(`EventSource(response).iter_sse()` over an `httpx.Response` whose body yields those chunks), so
its figure includes the line splitting it depends on; ours is `SseDecoder.push` per chunk.

Reported: events/s (best of --repeat runs), the ratio ours/httpx-sse, and the tracemalloc peak
while decoding the 10 MB stream and a 1 MB prefix (flat memory: the two peaks are about equal).
"""

from __future__ import annotations

import argparse
import json
import random
import time
import tracemalloc
from collections.abc import Callable, Iterator

import httpx
from httpx_sse import EventSource

from anvild.llm.sse import SseDecoder


def make_stream(target_bytes: int, newline: bytes, seed: int = 7) -> tuple[bytes, int]:
    """A provider-like stream of about `target_bytes`; returns (bytes, number of events)."""
    rng = random.Random(seed)
    parts: list[bytes] = []
    size = 0
    events = 0
    nl = newline
    while size < target_bytes:
        kind = rng.random()
        if kind < 0.45:  # Anthropic-style text delta
            text = "".join(rng.choice("abcdefgh ijklmnop") for _ in range(rng.randint(1, 40)))
            payload = json.dumps(
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": text},
                }
            ).encode()
            part = b"event: content_block_delta" + nl + b"data: " + payload + nl + nl
        elif kind < 0.85:  # OpenAI-style chunk
            payload = json.dumps(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion.chunk",
                    "created": 1,
                    "choices": [{"index": 0, "delta": {"content": "tok" * rng.randint(1, 8)}}],
                }
            ).encode()
            part = b"data: " + payload + nl + nl
        elif kind < 0.95:  # keep-alive comment, then a small event
            part = b": ping" + nl + b"event: ping" + nl + b'data: {"type":"ping"}' + nl + nl
        elif kind < 0.99:  # multi-line data
            part = b"data: line one" + nl + b"data: line two" + nl + b"data: {}" + nl + nl
        else:  # a large tool-argument event
            blob = "x" * rng.randint(1024, 8192)
            payload = json.dumps({"type": "input_json_delta", "partial_json": blob}).encode()
            part = b"event: content_block_delta" + nl + b"data: " + payload + nl + nl
        parts.append(part)
        size += len(part)
        events += 1
    return b"".join(parts), events


def chunks_of(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def run_ours(chunks: list[bytes]) -> int:
    decoder = SseDecoder()
    count = 0
    for chunk in chunks:
        count += len(decoder.push(chunk))
    decoder.finish()
    return count


def run_httpx_sse(chunks: list[bytes]) -> int:
    response = httpx.Response(
        200, headers={"content-type": "text/event-stream"}, content=iter(chunks)
    )
    count = 0
    for _ in EventSource(response).iter_sse():
        count += 1
    return count


def best_rate(
    fn: Callable[[list[bytes]], int], chunks: list[bytes], repeat: int
) -> tuple[float, int]:
    best = float("inf")
    count = 0
    for _ in range(repeat):
        start = time.perf_counter()
        count = fn(chunks)
        best = min(best, time.perf_counter() - start)
    return count / best, count


def peak_bytes(fn: Callable[[list[bytes]], int], chunk_iter: Callable[[], Iterator[bytes]]) -> int:
    tracemalloc.start()
    try:
        fn(list_lazy(chunk_iter))
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


class list_lazy(list[bytes]):
    """Iterates a generator without holding the whole stream, so the peak is the decoder's."""

    def __init__(self, factory: Callable[[], Iterator[bytes]]) -> None:
        super().__init__()
        self._factory = factory

    def __iter__(self) -> Iterator[bytes]:
        return self._factory()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=10.0)
    parser.add_argument("--chunk", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    print(f"stream ~{args.mb:g} MB, {args.chunk}-byte chunks, best of {args.repeat}")
    print(f"{'line ends':<10}{'events':>9}{'httpx-sse ev/s':>17}{'ours ev/s':>13}{'ratio':>8}")
    for label, newline in (("LF", b"\n"), ("CRLF", b"\r\n")):
        data, expected = make_stream(int(args.mb * 1_000_000), newline)
        chunks = chunks_of(data, args.chunk)
        theirs, n_theirs = best_rate(run_httpx_sse, chunks, args.repeat)
        ours, n_ours = best_rate(run_ours, chunks, args.repeat)
        assert n_ours == expected, (n_ours, expected)
        assert n_theirs >= expected, (n_theirs, expected)  # httpx-sse also dispatches data-less
        print(f"{label:<10}{expected:>9}{theirs:>17,.0f}{ours:>13,.0f}{ours / theirs:>7.2f}x")

    data, _ = make_stream(int(args.mb * 1_000_000), b"\r\n")
    small = data[: len(data) // 10]
    print("tracemalloc peak while decoding (chunks generated lazily):")
    for name, fn in (("ours", run_ours), ("httpx-sse", run_httpx_sse)):
        peaks = [
            peak_bytes(
                fn,
                lambda d=d: (
                    d[i : i + args.chunk]  # type: ignore[misc]
                    for i in range(0, len(d), args.chunk)
                ),
            )
            for d in (small, data)
        ]
        print(
            f"  {name:<10} {len(small) / 1e6:.1f} MB: {peaks[0] / 1024:8.1f} KiB"
            f"   {len(data) / 1e6:.1f} MB: {peaks[1] / 1024:8.1f} KiB"
        )


if __name__ == "__main__":
    main()
