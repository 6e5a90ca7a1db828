"""The shell subset: exact segments inside it, a named reason outside it, a reading of any text."""

from __future__ import annotations

import pytest

from anvild.agent.permissions.shell import analyze, read_text


def words(command: str) -> list[tuple[str, ...]]:
    analysis = analyze(command)
    assert analysis.checkable, (analysis.outside, analysis.error)
    return [s.words for s in analysis.segments]


@pytest.mark.parametrize(
    ("command", "segments"),
    [
        ("cargo test --lib", [("cargo", "test", "--lib")]),
        ("cargo test && rm -rf /", [("cargo", "test"), ("rm", "-rf", "/")]),
        ("a || b; c | d", [("a",), ("b",), ("c",), ("d",)]),
        ("a &&\n  b", [("a",), ("b",)]),
        ("git commit -m 'a b' \"c d\"", [("git", "commit", "-m", "a b", "c d")]),
        ("ls \\\n  -la   # trailing comment", [("ls", "-la")]),
        ("echo a\\ b", [("echo", "a b")]),
        ("r''m x", [("rm", "x")]),
        ('echo "a\\"b" "\\$x"', [("echo", 'a"b', "$x")]),
        ("echo a#b", [("echo", "a#b")]),
        ("git log HEAD~3 -- a=b", [("git", "log", "HEAD~3", "--", "a=b")]),
        ("find . -name '*.py' -exec grep -l x {} +", [("find", ".", "-name", "*.py", "-exec",
                                                      "grep", "-l", "x", "{}", "+")]),
        ("echo héllo", [("echo", "héllo")]),
    ],
)  # fmt: skip
def test_segments_of_lines_in_the_subset(command: str, segments: list[tuple[str, ...]]) -> None:
    assert words(command) == segments


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        ("echo $(id)", "command substitution"),
        ("echo `id`", "backticks"),
        ('echo "$HOME"', "inside double quotes"),
        ("echo ${x:-y}", "parameter expansion"),
        ("echo $(( 1 + 2 ))", "arithmetic"),
        ("echo $'\\x72m'", "ANSI-C"),
        ("cat <<EOF\nhi\nEOF", "heredocs"),
        ("cat <<< hi", "heredocs"),
        ("diff <(ls a) b", "process substitution"),
        ("(cd x && ls)", "parentheses"),
        ("{ a; b; }", "braces"),
        ("echo {a,b}", "braces"),
        ("if true; then ls; fi", "compound command"),
        ("for f in a; do ls; done", "compound command"),
        ("f() { ls; }", "parentheses"),
        ("eval ls", "runs text as code"),
        ("source x.sh", "runs text as code"),
        (". x.sh", "runs text as code"),
        ("exec rm x", "runs text as code"),
        ("command rm x", "runs text as code"),
        ("FOO=1 make", "assignment"),
        ("ls ~/x", "home directory"),
        ("ls a=~/x", "home directory"),
        ("/bin/r? x", "glob pattern"),
        ("ls [ab]", "bracket"),
        ("sleep 1 &", "background"),
        ("a |& b", "standard error"),
        ("> f", "no command"),
        ("echo x > *.txt", "glob pattern"),
        ("echo 'a\nb'", "newline"),
        ("echo a\x07b", "control character"),
        ("! true", "'!'"),
        ("cd", "'cd'"),
        ("cd -", "'cd'"),
        ("[ -f x ]", "test command"),
        ("echo hi\n\\rm -rf src", "second parser"),
    ],
)
def test_lines_outside_the_subset_say_which_construct(command: str, reason: str) -> None:
    analysis = analyze(command)
    assert not analysis.checkable
    assert analysis.segments == ()
    assert any(reason in why for why in analysis.outside), analysis.outside


@pytest.mark.parametrize(
    ("command", "error"),
    [
        ("", "empty"),
        ("   \n\t", "empty"),
        ("# only a comment", "nothing to run"),
        ('echo "unterminated', "never closed"),
        ("echo 'unterminated", "never closed"),
        ("ls &&", "no command after"),
        ("&& ls", "no command before"),
        ("ls >", "no target"),
    ],
)
def test_empty_and_unparsable_lines(command: str, error: str) -> None:
    analysis = analyze(command)
    assert analysis.error is not None
    assert error in analysis.error
    assert not analysis.checkable


@pytest.mark.parametrize(
    ("command", "redirects"),
    [
        ("make > out.txt", [(">", "out.txt")]),
        ("make >> log 2>&1", [(">>", "log")]),
        ("make &> all.log", [("&>", "all.log")]),
        ("make 2>/dev/null", [(">", "/dev/null")]),
        ("make >&2", []),
        ("make >| f", [(">", "f")]),
        ("make >& f", [(">", "f")]),
        ("sort < in.txt", [("<", "in.txt")]),
        ("echo a2>x", [(">", "x")]),
    ],
)
def test_redirects(command: str, redirects: list[tuple[str, str]]) -> None:
    (segment,) = analyze(command).segments
    assert [(r.operator, r.target) for r in segment.redirects] == redirects


def test_a_descriptor_number_is_unquoted_digits_only() -> None:
    (segment,) = analyze("echo a2>x").segments
    assert segment.words == ("echo", "a2")
    assert segment.redirects[0].fd is None
    (segment,) = analyze("echo 2>x").segments
    assert segment.words == ("echo",)
    assert segment.redirects[0].fd == 2


def test_globs_are_kept_as_patterns() -> None:
    (segment,) = analyze("ls *.py 'x*' \\*y src/?.c").segments
    assert segment.words == ("ls", "*.py", "x*", "*y", "src/?.c")
    assert segment.globs == (1, 4)
    assert segment.patterns == ("*.py", "src/?.c")


def test_cd_moves_the_directories_later_segments_may_run_in() -> None:
    first, second, third = analyze("cd src && make; cd ../lib").segments
    assert first.dirs == (".",)
    assert second.dirs == (".", "src")
    assert third.dirs == (".", "src")


@pytest.mark.parametrize(
    ("command", "tokens", "opaque"),
    [
        ("echo hi\n\\rm -rf src", ("echo", "hi", "rm", "-rf", "src"), None),
        ("cat <<E'O'F\nhi\nEOF\ntouch X\nE'O'F", ("cat", "EOF", "hi", "EOF", "touch", "X", "EOF"),
         None),
        ("r''m x; r\\m y", ("rm", "x", "rm", "y"), None),
        ("echo $'\\x72m' x", ("echo", "rm", "x"), None),
        ("echo $(printf r)m", ("echo", "printf", "r", "m"), "'$('"),
        ("echo `id`", ("echo", "id"), "substitution"),
        ("{r,x}m", ("r", "x", "m"), "brace expansion"),
        ("FOO=1 rm x", ("FOO", "1", "rm", "x"), None),
    ],
)  # fmt: skip
def test_the_reading_of_any_text(command: str, tokens: tuple[str, ...], opaque: str | None) -> None:
    reading = read_text(command)
    assert reading.tokens == tokens
    if opaque is None:
        assert reading.opaque is None
    else:
        assert reading.opaque is not None
        assert opaque in reading.opaque
