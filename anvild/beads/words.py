"""Splitting a bead or convoy command line into words: quoting that works from rc and bash.

    new "Research auth system" researcher "Analyze the existing auth code"
    new 'Fix the parser' developer 'Handle the ''quoted'' case' research-auth-001

Rules (pure, no escapes outside quotes, so a Plan 9 path or a URL is taken as written):

- blanks (space, tab) separate words;
- "double quotes" group a word that holds blanks; inside them `\\"` is a quote and `\\\\` a
  backslash, any other backslash is kept as is;
- 'single quotes' group too; inside them `''` is one quote (Plan 9's tokenize(2), as on every
  other ctl file of the tree);
- quoted and unquoted parts next to each other make one word (`a"b c"` is `ab c`);
- a word with any quoted part is never taken as a `key=value` option or a flag.

From bash and rc alike, put the whole line in single quotes and use double quotes inside:
`echo 'new "Title" role "Description"' | 9p write agent/beads/ctl`. rc has no `\\` escapes
and doubles a quote inside single quotes, so `''` there is what reaches us as `'`.
"""

from __future__ import annotations

import attrs

from anvild.beads.errors import InvalidBeadRequest

__all__ = ["Word", "split_words"]


@attrs.frozen
class Word:
    text: str
    quoted: bool = False


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
        elif c == '"':
            in_word = quoted = True
            i += 1
            while True:
                if i >= n:
                    raise InvalidBeadRequest(
                        f'unbalanced " in {line!r}: close the double quote (write \\" for a '
                        "quote inside it)"
                    )
                c = line[i]
                if c == "\\" and i + 1 < n and line[i + 1] in '"\\':
                    part.append(line[i + 1])
                    i += 2
                elif c == '"':
                    i += 1
                    break
                else:
                    part.append(c)
                    i += 1
        elif c == "'":
            in_word = quoted = True
            i += 1
            while True:
                if i >= n:
                    raise InvalidBeadRequest(
                        f"unbalanced ' in {line!r}: close the single quote (write '' for a "
                        "quote inside it)"
                    )
                c = line[i]
                if c == "'":
                    if i + 1 < n and line[i + 1] == "'":
                        part.append("'")
                        i += 2
                        continue
                    i += 1
                    break
                part.append(c)
                i += 1
        else:
            part.append(c)
            in_word = True
            i += 1
    if in_word:
        words.append(Word("".join(part), quoted))
    return words
