"""What `anvilctl attach` shows: a session's events as terminal text (the pure part).

`Renderer.event` turns one parsed `events` line into text (answer, tool call lines, result
previews, retries, todos, the footer) and tracks whether output ends a line. Answer text goes
through a `TextStream`: passed on as it comes on a pipe or NO_COLOR (`stream=None`); on a
terminal cut into finished and in-progress parts (`MarkdownStream` at block ends, rendered with
rich; `LineStream` at line ends). `footer` is a turn's closing line (outcome, steps, tokens,
cost, context); `exchanges` picks the last exchanges of a `log` backlog for attaching.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

from anvilctl.headless import usd_of

__all__ = [
    "LineStream",
    "MarkdownStream",
    "Renderer",
    "Style",
    "exchanges",
    "format_approval",
    "parse_approval",
    "parse_cost",
    "summarize_arguments",
]

PREVIEW_LINES: Final = 4
ARGUMENT_KEYS: Final = ("command", "file_path", "path", "pattern", "url", "query", "description")
CODE_THEME: Final = "monokai"


class Style:
    """Escape codes for a terminal, or none at all."""

    def __init__(self, color: bool) -> None:
        self.color = color

    def _wrap(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color and text else text

    def dim(self, text: str) -> str:
        return self._wrap("2", text)

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def red(self, text: str) -> str:
        return self._wrap("31", text)

    def yellow(self, text: str) -> str:
        return self._wrap("33", text)


def cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def summarize_arguments(arguments: Any, width: int = 80) -> str:
    """A tool call's arguments in one short line: the value of its most telling argument
    (command, file_path, path, pattern, ...), else the arguments as compact JSON."""
    if isinstance(arguments, Mapping):
        for key in ARGUMENT_KEYS:
            value = arguments.get(key)
            if isinstance(value, str) and value.strip():
                lines = value.strip().splitlines()
                more = " …" if len(lines) > 1 else ""
                return cut(lines[0] + more, width)
        if not arguments:
            return ""
    text = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
    return cut(text, width)


def _tokens(usage: Any) -> str:
    if not isinstance(usage, Mapping):
        return ""

    def count(key: str) -> str:
        value = usage.get(key)
        return "?" if value is None else f"{value}"

    parts = [f"{count('input')} in", f"{count('output')} out"]
    cached = usage.get("cache_read")
    if cached:
        parts.append(f"{cached} cached")
    return "tokens " + ", ".join(parts)


def parse_cost(text: str) -> float | None:
    """The session's spend in USD from its `cost` file (`usd 0.001234`); None: unknown."""
    return usd_of(text)


def cost_text(before: float | None, after: float | None) -> str:
    """The footer's cost: the turn's (the session's spend after it less before it), else the
    session's so far, else unknown (a price is never guessed)."""
    if after is None:
        return "cost unknown"
    if before is not None:
        return f"cost ${max(0.0, after - before):.4f}"
    return f"session cost ${after:.4f}"


def context_text(usage: str) -> str:
    """The footer's context use from the `usage` file (`5274/6000 (87.9%) compact at 85%`)."""
    usage = usage.strip()
    if not usage or usage == "-":
        return "context unknown"
    used, _, compact = usage.partition(" compact at ")
    return f"context {used}" + (f", compacts at {compact}" if compact else "")


# --- answer text: what is finished, what is still being written -------------------------------


class TextStream(Protocol):
    def feed(self, text: str) -> str:
        """Add streamed text; returns what it finished (rendered), possibly ""."""
        ...

    def flush(self) -> str:
        """End of the answer (or of its step): everything left, rendered."""
        ...

    def pending(self) -> str:
        """What is still being written, rendered for the live area (changes as text comes)."""
        ...


class LineStream:
    """No rendering: whole lines are finished, the last partial line is pending."""

    def __init__(self) -> None:
        self._tail = ""

    def feed(self, text: str) -> str:
        self._tail += text
        done, newline, self._tail = self._tail.rpartition("\n")
        return done + newline

    def flush(self) -> str:
        rest, self._tail = self._tail, ""
        return rest + "\n" if rest else ""

    def pending(self) -> str:
        return self._tail


_FENCE: Final = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_TRAILING_SPACES: Final = re.compile(r"[ \t]+$", re.MULTILINE)


def _closes(marker: str, opening: str, rest: str) -> bool:
    """Whether a fence line (`marker`, then `rest`) closes the fence `opening` opened."""
    return marker[0] == opening[0] and len(marker) >= len(opening) and not rest.strip()


class MarkdownStream:
    """Markdown rendered block by block with rich as the answer streams.

    A block ends at a blank line outside a code fence, or at the line that closes a fence; the
    unfinished block is rendered again whenever `pending` is asked (the live area). Blocks are
    separated by one blank line. `width` is the terminal's; `truecolor` picks 24-bit colours
    (COLORTERM) over the 256-colour palette."""

    def __init__(self, width: int, *, truecolor: bool = False) -> None:
        self.width = width
        self.truecolor = truecolor
        self._tail = ""  # the unfinished block's source
        self._fence: str | None = None  # the open fence's marker, while inside one
        self._scanned = 0  # how much of `_tail` was scanned for block ends
        self._blocks = 0  # blocks finished in this answer (a blank line goes between two)

    def render(self, source: str) -> str:
        from rich.console import Console  # only attach on a terminal pays for rich
        from rich.markdown import Markdown

        buffer = io.StringIO()
        console = Console(
            file=buffer,
            force_terminal=True,
            color_system="truecolor" if self.truecolor else "256",
            width=max(20, self.width),
            highlight=False,
            emoji=False,
            legacy_windows=False,
        )
        console.print(Markdown(source, code_theme=CODE_THEME, hyperlinks=False))
        text = _TRAILING_SPACES.sub("", buffer.getvalue()).strip("\n")
        return text + "\n" if text else ""

    def feed(self, text: str) -> str:
        self._tail += text
        out = []
        while (end := self._block_end()) is not None:
            block, self._tail = self._tail[:end], self._tail[end:]
            self._scanned = 0
            out.append(self._finish(block))
        return "".join(out)

    def _block_end(self) -> int | None:
        """Where the first finished block of `_tail` ends, or None."""
        position = self._scanned
        while (newline := self._tail.find("\n", position)) != -1:
            line = self._tail[position:newline]
            position = newline + 1
            self._scanned = position
            fence = _FENCE.match(line)
            if self._fence is not None:
                if fence and _closes(fence.group(1), self._fence, line[fence.end() :]):
                    self._fence = None
                    return position
                continue
            if fence:
                self._fence = fence.group(1)
                continue
            if not line.strip() and self._tail[: position - 1].strip():
                return position
        return None

    def _finish(self, block: str) -> str:
        if not block.strip():
            return ""
        rendered = self.render(block)
        if not rendered:
            return ""
        gap = "\n" if self._blocks else ""
        self._blocks += 1
        return gap + rendered

    def flush(self) -> str:
        rest, self._tail = self._tail, ""
        self._fence, self._scanned = None, 0
        out = self._finish(rest)
        self._blocks = 0
        return out

    def pending(self) -> str:
        if not self._tail.strip():
            return ""
        source = self._tail
        if self._fence is not None:
            source += "\n" + self._fence  # show the open code block as one, highlighted
        return self.render(source)


# --- events -----------------------------------------------------------------------------------


class Renderer:
    """Turns a session's `events` lines (one parsed JSON object each) into terminal text.

    `stream` None passes answer text on as it comes (a pipe); otherwise the stream decides what
    is finished (`event` returns it) and what is pending (`pending`). Unknown event types are
    ignored. `verbose` shows every line of the tool results the events carry."""

    def __init__(
        self,
        style: Style,
        *,
        width: int = 100,
        preview_lines: int = PREVIEW_LINES,
        stream: TextStream | None = None,
    ):
        self.style = style
        self.width = max(40, width)
        self.preview_lines = preview_lines
        self.stream = stream
        self.at_line_start = True
        self.hinted = False  # the hint about whole results was shown

    def line(self, text: str) -> str:
        """`text` as a line of its own (after the pending text, or a newline, if the output is
        mid-line)."""
        before = self.flush_text()
        prefix = "" if self.at_line_start else "\n"
        self.at_line_start = True
        return f"{before}{prefix}{text}\n"

    def flush_text(self) -> str:
        """The answer text still pending, finished now (before a line of another kind)."""
        if self.stream is None:
            return ""
        text = self.stream.flush()
        if text:
            self.at_line_start = text.endswith("\n")
        return text

    def pending(self) -> str:
        return "" if self.stream is None else self.stream.pending()

    def text(self, text: str) -> str:
        if not text:
            return ""
        if self.stream is not None:
            text = self.stream.feed(text)
            if not text:
                return ""
        self.at_line_start = text.endswith("\n")
        return text

    def event(self, event: Mapping[str, Any]) -> str:
        s = self.style
        match event.get("type"):
            case "text_delta":
                return self.text(str(event.get("text", "")))
            case "step_started":
                return self.flush_text()
            case "tool_call_started":
                name = str(event.get("name", "?"))
                summary = summarize_arguments(event.get("arguments"), self.width - len(name) - 4)
                return self.line(s.dim(f"● {name} {summary}".rstrip()))
            case "tool_call_finished":
                return self.preview(str(event.get("preview", "")), bool(event.get("is_error")))
            case "step_failed":
                kind, message = event.get("error_type", "error"), event.get("message", "")
                retry = " (retrying)" if event.get("retryable") else ""
                return self.line(s.red(f"error: {kind}: {message}{retry}"))
            case "retrying":
                return self.line(s.yellow(cut(retry_text(event), self.width)))
            case "compaction_started":
                tokens = event.get("tokens", "?")
                trigger = event.get("trigger", "?")
                return self.line(
                    s.dim(f"compacting the history ({trigger}, about {tokens} tokens)")
                )
            case "compaction_finished" if event.get("ok"):
                before, after = event.get("before", "?"), event.get("after", "?")
                return self.line(s.dim(f"compacted: {before} -> {after} tokens"))
            case "compaction_finished":
                return self.line(s.yellow(f"not compacted: {event.get('detail', '')}"))
            case "todos_updated":
                marks = {"completed": "[x]", "in_progress": "[~]", "pending": "[ ]"}
                todos = event.get("todos") or []
                lines = [
                    f"  {marks.get(str(t.get('status')), '[ ]')} {t.get('content', '')}"
                    for t in todos
                    if isinstance(t, Mapping)
                ]
                return self.line(s.dim("\n".join(["todos:", *lines]) if lines else "todos: none"))
            case "lagged":
                dropped = event.get("dropped", "?")
                return self.line(
                    s.yellow(f"[{dropped} events were dropped: this terminal fell behind]")
                )
            case "turn_finished":
                return self.footer(event)
            case "approval_requested" if event.get("kind") == "result":
                asked_by = str(event.get("asked_by") or "-")
                return self.line(
                    s.yellow(
                        f"approval of the result requested by {asked_by}: write approve or "
                        "reject REASON to the session's approval file"
                    )
                )
            case "approval_answered" if event.get("kind") == "result":
                verdict, reason = str(event.get("verdict", "?")), str(event.get("reason") or "")
                by = f" (by {event['by']})" if event.get("by") else ""
                return self.line(s.dim(f"result {verdict}{by}" + (f": {reason}" if reason else "")))
        return ""

    def preview(self, preview: str, is_error: bool, *, limit: int | None = None) -> str:
        """A tool result as indented lines: the first `limit` (default `preview_lines`; 0: all)
        and how many more there are."""
        s = self.style
        lines = preview.rstrip("\n").splitlines() or [""]
        most = self.preview_lines if limit is None else limit
        shown = lines[:most] if most else lines
        room = self.width - 5
        out = []
        for index, line in enumerate(shown):
            lead = "  ⎿  " if index == 0 else "     "
            text = line.expandtabs(4)
            text = cut(text, room) if most else text
            if index == 0 and is_error:
                text = s.red(f"error: {text}")
            out.append(s.dim(lead) + text)
        if len(lines) > len(shown):
            out.append(s.dim(f"     … {len(lines) - len(shown)} more lines"))
        cut_short = len(lines) > len(shown) or lines[-1].endswith("…")
        if most and cut_short and not self.hinted:
            self.hinted = True  # once: where the whole results are
            out.append(s.dim("     (/last shows the whole result, /verbose every result)"))
        return self.line("\n".join(out))

    def footer(self, event: Mapping[str, Any], extra: Sequence[str] = ()) -> str:
        """The turn's closing line: outcome, steps, tokens, then `extra` (cost, context)."""
        s = self.style
        outcome = str(event.get("outcome", "?"))
        steps = event.get("steps")
        parts = [outcome]
        if isinstance(steps, int):
            parts.append(f"{steps} step" + ("" if steps == 1 else "s"))
        tokens = _tokens(event.get("usage"))
        if tokens:
            parts.append(tokens)
        parts.extend(extra)
        detail = str(event.get("detail") or "")
        text = "[" + " · ".join(parts) + (f": {detail}" if detail else "") + "]"
        return self.line(s.dim(text) if outcome == "done" else s.yellow(text))


def retry_text(event: Mapping[str, Any]) -> str:
    """`retrying in 2 s (attempt 2 of 5): HTTP 529: Overloaded`."""
    delay = event.get("delay")
    wait = f" in {delay:g} s" if isinstance(delay, int | float) else ""
    attempt, most = event.get("attempt", "?"), event.get("max_attempts", "?")
    reason = str(event.get("reason") or "").strip().splitlines()
    return f"retrying{wait} (attempt {attempt} of {most})" + (f": {reason[0]}" if reason else "")


# --- approvals ------------------------------------------------------------------------------


def parse_approval(text: str) -> dict[str, str]:
    """The `approval` file's `key value` lines as a dict (empty when nothing is pending)."""
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key:
            fields[key] = value
    return fields


def format_approval(fields: Mapping[str, str], style: Style, width: int = 100) -> str:
    """The approval request as shown before the y/a/n question."""
    tool = fields.get("tool", "?")
    try:
        arguments = json.loads(fields.get("arguments", "{}"))
    except ValueError:
        arguments = fields.get("arguments", "")
    summary = summarize_arguments(arguments, width - len(tool) - 20)
    lines = [style.bold(f"approval needed: {tool} {summary}".rstrip())]
    if fields.get("reason"):
        lines.append(f"  why: {fields['reason']}")
    full = json.dumps(arguments, ensure_ascii=False)
    if full != json.dumps(summary, ensure_ascii=False) and len(full) > len(summary) + 2:
        lines.append(style.dim(f"  arguments: {cut(full, width * 3)}"))
    always = fields.get("always_adds")
    lines.append(
        "  y: approve once   a: always"
        + (f" (adds {always})" if always else "")
        + "   n: reject with feedback"
    )
    return "\n".join(lines) + "\n"


# --- the earlier conversation -----------------------------------------------------------------

_LOG_KINDS: Final = ("USER:", "ASSISTANT:", "TOOL:", "RESULT:", "ERROR:", "TURN:")


def exchanges(log: Sequence[str], count: int, *, busy: bool = False) -> list[list[str]]:
    """The last `count` exchanges of a session's `log` lines: each from a `USER:` line up to
    the next, keeping the user's, the assistant's, tool and turn lines (with their indented
    continuation lines). With `busy`, the last exchange (the running turn, which the events
    show) is left out."""
    found: list[list[str]] = []
    keep = False
    for line in log:
        if line.startswith("USER:"):
            found.append([])
        if not found:
            continue
        if line.startswith("  "):
            if keep:
                found[-1].append(line)
            continue
        keep = line.startswith(_LOG_KINDS)
        if keep:
            found[-1].append(line)
    if busy and found:
        found.pop()
    return found[-count:] if count else []


def format_exchange(lines: Sequence[str], style: Style, width: int, most: int = 12) -> str:
    """One exchange of `exchanges` as dim text: `you:` and the prompt, the answer, tool lines;
    each entry cut to `most` lines."""
    out: list[str] = []
    entry: list[str] = []

    def close() -> None:
        if len(entry) > most:
            entry[most:] = [f"  … {len(entry) - most} more lines"]
        out.extend(entry)
        entry.clear()

    labels = {"USER:": "you:", "ASSISTANT:": "", "TOOL:": "●", "RESULT:": "  ⎿ "}
    for line in lines:
        if line.startswith("  "):
            entry.append(cut(line, width))
            continue
        close()
        kind, _, rest = line.partition(" ")
        if kind == "TURN:":
            entry.append(f"[{rest}]")
        elif kind == "ERROR:":
            entry.append(cut(f"  ⎿  error: {rest}", width))
        else:
            label = labels.get(kind, kind)
            entry.append(cut(f"{label} {rest}".rstrip() if label else rest, width))
    close()
    return "".join(style.dim(line) + "\n" for line in out)
