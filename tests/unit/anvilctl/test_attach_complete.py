"""attach's Tab completion: /commands, model names after /model, session ids after /attach,
paths (relative to the session's directory, also after @) anywhere else."""

from __future__ import annotations

from pathlib import Path

from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from anvilctl.attach import COMMANDS
from anvilctl.attach_tty import AttachCompleter


def completions(completer: AttachCompleter, text: str) -> list[str]:
    document = Document(text, len(text))
    found = completer.get_completions(document, CompleteEvent(completion_requested=True))
    return [text[: len(text) + c.start_position] + c.text for c in found]


def test_commands_models_sessions_and_paths(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "parser.py").write_text("")
    (tmp_path / "src" / "lexer.py").write_text("")
    completer = AttachCompleter(
        COMMANDS,
        models=lambda: ["sonnet", "haiku", "local"],
        sessions=lambda: ["3f2a9c1e", "dev", "3f99aa00"],
        cwd=lambda: str(tmp_path),
    )
    assert completions(completer, "/c") == ["/clear", "/compact"]
    assert completions(completer, "/model s") == ["/model sonnet"]
    assert completions(completer, "/attach 3f") == ["/attach 3f2a9c1e", "/attach 3f99aa00"]
    assert sorted(completions(completer, "fix src/pa")) == ["fix src/parser.py"]
    assert sorted(completions(completer, "look at @src/le")) == ["look at @src/lexer.py"]
    assert completions(completer, "plain words") == []
