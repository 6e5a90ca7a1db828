"""How the client reaches a server: a child process over stdio (sandboxed or not), or streamable
HTTP. Both yield the SDK's stream pair for `mcp.ClientSession` and an `ended` event.

stdio: the process runs in a session (process group) of its own, its stdout read as
newline-delimited JSON-RPC (a line longer than `MAX_LINE` ends the connection: memory stays
bounded), its stderr drained into a small tail kept for error messages. Leaving the context
closes stdin, gives the server `EXIT_GRACE` seconds, then SIGTERMs and SIGKILLs its group, reaps
it, and closes its sandbox launch (`anvild.sandbox.bwrap.Launch`: the supervisor kills whatever
is left in the sandbox's pid namespace); all of it shielded and time-bounded, so a cancelled
caller never leaks a server. A sandboxed server is a `Sandbox.prepare`d launch of its argv:
nothing runs unconfined when the sandbox cannot be set up (the error says why).
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from typing import Any, Final

import anyio
import attrs
import mcp_types
import trio
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.message import SessionMessage

from anvild.agent.tools.bash import Command, signal_group, spawn

MAX_LINE: Final = 16 << 20
STDERR_TAIL: Final = 2048
EXIT_GRACE: Final = 1.0
KILL_GRACE: Final = 1.0


@attrs.define
class Channel:
    """An open connection: the SDK's streams, `ended` (set when the server went away), and the
    tail of its stderr (stdio)."""

    read: Any
    write: Any
    ended: trio.Event = attrs.field(factory=trio.Event)
    stderr: bytearray = attrs.field(factory=bytearray)
    pid: int | None = None
    returncode: int | None = None  # once the process was reaped

    def stderr_tail(self) -> str:
        text = bytes(self.stderr).decode("utf-8", "replace").strip()
        return " ".join(text.split())[-500:]


async def _reap(process: trio.Process) -> None:
    with trio.move_on_after(EXIT_GRACE):
        await process.wait()
    if process.returncode is None:
        signal_group(process.pid, signal.SIGTERM)
        with trio.move_on_after(KILL_GRACE):
            await process.wait()
    if process.returncode is None:
        signal_group(process.pid, signal.SIGKILL)
        with trio.move_on_after(KILL_GRACE):
            await process.wait()
    else:  # the leader is gone; members that stayed in its group follow it
        signal_group(process.pid, signal.SIGKILL)


@asynccontextmanager
async def stdio_channel(command: Command) -> AsyncIterator[Channel]:
    """Spawn `command` and talk JSON-RPC over its stdin and stdout. Raises OSError when it
    cannot be started (the launch is closed then)."""
    try:
        process = await spawn(command, stdin=subprocess.PIPE)
    except BaseException:
        if command.guard is not None:
            command.guard.close()
        raise
    read_in, read_out = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    write_in, write_out = anyio.create_memory_object_stream[SessionMessage](16)
    channel = Channel(read_out, write_in, pid=process.pid)
    assert process.stdout is not None
    assert process.stdin is not None
    assert process.stderr is not None
    stdout, stdin, stderr = process.stdout, process.stdin, process.stderr

    async def reader() -> None:
        buffer = b""
        try:
            async with read_in:
                while True:
                    chunk = await stdout.receive_some(65536)
                    if not chunk:
                        break
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    if len(buffer) > MAX_LINE:
                        await read_in.send(ValueError(f"a message over {MAX_LINE} bytes"))
                        break
                    for line in lines:
                        if line.strip():
                            await read_in.send(_parse(line))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, trio.ClosedResourceError):
            pass
        finally:
            channel.ended.set()

    async def writer() -> None:
        try:
            async with write_out:
                async for item in write_out:
                    data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stdin.send_all(data.encode() + b"\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            channel.ended.set()

    async def drain_stderr() -> None:
        with suppress(trio.ClosedResourceError, OSError):
            while chunk := await stderr.receive_some(4096):
                channel.stderr += chunk
                del channel.stderr[:-STDERR_TAIL]

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            nursery.start_soon(writer)
            nursery.start_soon(drain_stderr)
            try:
                yield channel
            finally:
                with trio.CancelScope(shield=True):
                    with suppress(trio.ClosedResourceError, trio.BrokenResourceError, OSError):
                        await stdin.aclose()
                    await _reap(process)
                channel.returncode = process.returncode
                nursery.cancel_scope.cancel()
    finally:
        channel.ended.set()
        if command.guard is not None:
            command.guard.close()
        for stream in (stdout, stderr):
            with suppress(trio.ClosedResourceError, OSError), trio.CancelScope(shield=True):
                await stream.aclose()


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError as exc:
        return exc
    return SessionMessage(message)


@asynccontextmanager
async def http_channel(url: str, headers: Mapping[str, str]) -> AsyncIterator[Channel]:
    """A streamable HTTP connection to `url` with `headers` on every request."""
    client = create_mcp_http_client(headers=dict(headers))
    async with client, streamable_http_client(url, http_client=client) as (read, write):
        yield Channel(read, write)


__all__ = ["Channel", "http_channel", "stdio_channel"]
