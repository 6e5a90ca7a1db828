"""A small MCP server over stdio, written with the SDK, for the MCP client's tests.

    python -m tests.support.mcp_server [--fail] [--marker FILE] [--http PORT]

Tools: `echo(text)`, `slow(seconds)` (sleeps, then says so), `big(size)` (that many `x`),
`whoami()` (its pid and cwd), `header(name)` (an HTTP request header), `grow()` (adds the tool
`grown` and sends `notifications/tools/list_changed`), `touch(path)` (creates a file: a write
the sandbox may refuse). A resource `memo://greeting` and a prompt `review(topic)`. `--fail`
writes a message to stderr and exits 3 before speaking MCP. `--marker FILE` appends
`start PID` to FILE at each start and `slow PID` when `slow` begins (a test knows a call is in
flight, counts restarts). `--http PORT`: streamable HTTP on 127.0.0.1:PORT/mcp, not stdio.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("anvil-test")
MARKER: list[str] = []  # --marker FILE, once parsed


def mark(line: str) -> None:
    for path in MARKER:
        with open(path, "a") as out:
            out.write(f"{line}\n")


@server.tool()
def echo(text: str) -> str:
    """Return `text` as it is."""
    return text


@server.tool()
async def slow(seconds: float) -> str:
    """Sleep `seconds`, then say so."""
    mark(f"slow {os.getpid()}")
    await anyio.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def big(size: int) -> str:
    """Return `size` characters."""
    return "x" * size


@server.tool()
def whoami() -> str:
    """This server's pid and cwd."""
    return f"pid {os.getpid()} cwd {os.getcwd()}"


@server.tool()
def touch(path: str) -> str:
    """Create the file `path`."""
    Path(path).write_text("touched\n")
    return f"created {path}"


@server.tool()
def header(name: str, ctx: Context) -> str:
    """The value of the request's HTTP header `name` ("(none)": absent, or not over HTTP)."""
    headers = ctx.headers or {}
    return next((v for k, v in headers.items() if k.lower() == name.lower()), "(none)")


def grown() -> str:
    """A tool that exists only after `grow`."""
    return "grown here"


@server.tool()
async def grow(ctx: Context) -> str:
    """Add the tool `grown` and tell the client the list changed."""
    server.add_tool(grown, name="grown")
    await ctx.session.send_tool_list_changed()
    return "grew"


@server.resource("memo://greeting", name="greeting", mime_type="text/plain")
def greeting() -> str:
    return "hello from a resource"


@server.prompt()
def review(topic: str) -> str:
    """Ask for a review of `topic`."""
    return f"Please review {topic}."


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fail", action="store_true")
    parser.add_argument("--marker")
    parser.add_argument("--http", type=int, metavar="PORT")
    args = parser.parse_args()
    if args.marker:
        MARKER.append(args.marker)
        mark(f"start {os.getpid()}")
    if args.fail:
        print("test server: refusing to start (--fail)", file=sys.stderr, flush=True)
        sys.exit(3)
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
