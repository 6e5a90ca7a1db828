"""Splitting a bead or convoy command line into words: quoting that works from rc and bash.

Pure; no escapes outside quotes (a Plan 9 path or URL is taken as written). Blanks separate
words; "double quotes" group (inside: `\\"` a quote, `\\\\` a backslash, other backslashes kept);
'single quotes' group (inside: `''` is one quote, as tokenize(2)); adjacent quoted and unquoted
parts make one word; a word with a quoted part is never a `key=value` option or a flag.

    echo 'new "Title" role "Description"' | 9p write agent/beads/ctl
"""

from __future__ import annotations

from typing import Final

import attrs

from anvild.beads.errors import InvalidBeadRequest

__all__ = ["Word", "split_words"]


@attrs.frozen
class Word:
    text: str
    quoted: bool = False


# A quote -> the escape inside it, the characters that escape stands for, how to write a quote.
_QUOTES: Final = {
    '"': ("\\", '"\\', 'double quote (write \\" for a quote inside it)'),
    "'": ("'", "'", "single quote (write '' for a quote inside it)"),
}


def _quoted(line: str, i: int) -> tuple[str, int]:
    """The text of the quoted part opening at `line[i]`, and the index after its closing quote."""
    quote = line[i]
    escape, escaped, how = _QUOTES[quote]
    part: list[str] = []
    i += 1
    n = len(line)
    while i < n:
        c = line[i]
        if c == escape and i + 1 < n and line[i + 1] in escaped:
            part.append(line[i + 1])
            i += 2
        elif c == quote:
            return "".join(part), i + 1
        else:
            part.append(c)
            i += 1
    raise InvalidBeadRequest(f"unbalanced {quote} in {line!r}: close the {how}")


def split_words(line: str) -> list[Word]:
    """The words of `line`; an unbalanced quote is an `InvalidBeadRequest`."""
    words: list[Word] = []
    part: list[str] = []
    in_word = quoted = False
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c in " \t":
            if in_word:
                words.append(Word("".join(part), quoted))
                part, in_word, quoted = [], False, False
            i += 1
        elif c in _QUOTES:
            text, i = _quoted(line, i)
            part.append(text)
            in_word = quoted = True
        else:
            part.append(c)
            in_word = True
            i += 1
    if in_word:
        words.append(Word("".join(part), quoted))
    return words
