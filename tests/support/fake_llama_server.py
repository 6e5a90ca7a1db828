"""A stand-in for llama.cpp's llama-server in daemon tests: serves `/health` on --host/--port.

    python fake_llama_server.py [--fake-* options] -- [llama-server arguments]

It takes llama-server's own arguments (only --host and --port matter) and these, which a test
puts before `--` in a wrapper script (`write_fake`), since the daemon gives the server a
scrubbed environment:

    --fake-record FILE        append one JSON line: {"pid": ..., "argv": [...]}
    --fake-unhealthy-for S    answer /health with 503 (loading) for S seconds first
    --fake-die-after S        exit with status 3 after S seconds
    --fake-ignore-term        ignore SIGTERM (the daemon must escalate to SIGKILL)

It prints one line on stdout at start, which must land in the server's log file.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import signal
import stat
import sys
import threading
import time
from pathlib import Path


def write_fake(path: Path, *options: str) -> Path:
    """An executable script at `path` that runs this fake with `options`."""
    args = " ".join(f"'{o}'" for o in options)
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{__file__}" {args} -- "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def main() -> None:
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    p = argparse.ArgumentParser()
    p.add_argument("--fake-record", type=Path)
    p.add_argument("--fake-unhealthy-for", type=float, default=0.0)
    p.add_argument("--fake-die-after", type=float)
    p.add_argument("--fake-ignore-term", action="store_true")
    opts = p.parse_args(argv[:split])
    server_args = argv[split + 1 :]
    q = argparse.ArgumentParser()
    q.add_argument("--host", default="127.0.0.1")
    q.add_argument("--port", type=int, default=8080)
    where, _ = q.parse_known_args(server_args)

    if opts.fake_ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if opts.fake_record:
        with opts.fake_record.open("a") as f:
            f.write(json.dumps({"pid": os.getpid(), "argv": server_args}) + "\n")
    ready_at = time.monotonic() + opts.fake_unhealthy_for

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/health":
                self.send_error(404)
                return
            ok = time.monotonic() >= ready_at
            body = b'{"status":"ok"}' if ok else b'{"error":{"message":"Loading model"}}'
            self.send_response(200 if ok else 503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            sys.stdout.write("fake llama-server: " + format % args + "\n")

    server = http.server.HTTPServer((where.host, where.port), Handler)
    if opts.fake_die_after is not None:
        threading.Timer(opts.fake_die_after, lambda: os._exit(3)).start()
    print(f"fake llama-server: listening on {where.host}:{where.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
