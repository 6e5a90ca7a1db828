"""Shell command analysis (course 11.1): segments, unsupported syntax, hard denies, git."""

from __future__ import annotations

import pytest

from anvild.agent.permissions.shell import (
    analyze,
    hard_deny_reason,
    mutating_git,
    suggested_rule,
)


def words(command: str) -> list[tuple[str, ...]]:
    analysis = analyze(command)
    assert analysis.error is None, analysis.error
    return [s.words for s in analysis.segments]


@pytest.mark.parametrize(
    ("command", "segments"),
    [
        ("cargo test --lib", [("cargo", "test", "--lib")]),
        ("cargo test && rm -rf /", [("cargo", "test"), ("rm", "-rf", "/")]),
        ("a || b; c | d |& e & f", [("a",), ("b",), ("c",), ("d",), ("e",), ("f",)]),
        ("(a && (b)) ; { c; }", [("a",), ("b",), ("c",)]),
        ("echo $(cat ~/.ssh/id_rsa)", [("cat", "~/.ssh/id_rsa"), ("echo", "$(cat ~/.ssh/id_rsa)")]),
        ("echo `whoami`", [("whoami",), ("echo", "`whoami`")]),
        ('echo "x $(id) y"', [("id",), ("echo", '"x $(id) y"')]),
        ("diff <(ls a) >(wc)", [("ls", "a"), ("wc",), ("diff", "<(ls a)", ">(wc)")]),
        (
            "if test -f x; then rm x; else touch x; fi",
            [("test", "-f", "x"), ("rm", "x"), ("touch", "x")],
        ),
        ('for f in $(ls); do rm "$f"; done', [("ls",), ("rm", '"$f"')]),
        ("while read l; do echo $l; done < in", [("read", "l"), ("echo", "$l")]),
        ("case $x in a) rm -rf /;; esac", [("rm", "-rf", "/")]),
        ("[[ -f $(which x) ]] && y", [("which", "x"), ("y",)]),
        ("cat <<EOF\n$(id)\nEOF", [("id",), ("cat",)]),
        ("cat <<'EOF'\n$(id)\nEOF", [("cat",)]),
        ("git commit -m 'a b' \"c d\"", [("git", "commit", "-m", "a b", "c d")]),
        ("ls \\\n  -la   # trailing comment", [("ls", "-la")]),
        ("FOO=1 BAR='x y' make", [("FOO=1", "BAR=x y", "make")]),
        ("export A=1 B=$(x)", [("x",), ("export", "A=1", "B=$(x)")]),
        ("x=1", [("x=1",)]),
        ("echo a\\ b", [("echo", "a b")]),
    ],
)
def test_segments(command: str, segments: list[tuple[str, ...]]) -> None:
    assert words(command) == segments


@pytest.mark.parametrize(
    ("command", "error"),
    [
        ("", "empty"),
        ("   \n\t", "empty"),
        ("# only a comment", "nothing to run"),
        ('echo "unterminated', "could not be parsed"),
        ("(", "could not be parsed"),
        ("ls &&", "could not be parsed"),
        ("if true; then", "could not be parsed"),
    ],
)
def test_empty_and_unparsable_commands(command: str, error: str) -> None:
    analysis = analyze(command)
    assert analysis.error is not None
    assert error in analysis.error
    assert not analysis.checkable
    assert analysis.segments == ()


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        ("f() { ls; }; f", "defines a shell function"),
        ('eval "$X"', "'eval'"),
        ("source ./env.sh", "'source'"),
        (". ./env.sh", "'.'"),
        ("bash -c 'rm x'", "'bash -c'"),
        ("sh -ec 'x'", "'sh -c'"),
        ("sudo sh -c 'x'", "'sh -c'"),
        ("$CMD arg", "command name '$CMD' is computed"),
        ("git${IFS}push", "is computed"),
        ("trap 'rm -rf x' EXIT", "'trap'"),
    ],
)
def test_unsupported_constructs(command: str, reason: str) -> None:
    analysis = analyze(command)
    assert analysis.error is None
    assert any(reason in u for u in analysis.unsupported), analysis.unsupported
    assert not analysis.checkable


@pytest.mark.parametrize(
    ("command", "targets"),
    [
        ("make > out.txt", ["out.txt"]),
        ("make >> log 2>&1", ["log"]),
        ("make &> all.log", ["all.log"]),
        ("make 2>/dev/null >/dev/stderr", []),
        ("make >&2", []),
        ("sort < in.txt", []),
        ("cat <<< hi", []),
        ("{ a; b; } > both", ["both"]),
        ("echo x > $OUT", ["$OUT"]),
    ],
)
def test_output_redirects(command: str, targets: list[str]) -> None:
    found = [r.target for s in analyze(command).segments for r in s.redirects]
    assert found == targets


def test_computed_redirect_target_has_no_literal() -> None:
    (segment,) = analyze("echo x > $OUT").segments
    assert segment.redirects[0].literal is None


@pytest.mark.parametrize(
    ("command", "denied"),
    [
        ("rm -rf /", True),
        ("rm -fr /*", True),
        ("rm -r -f ~", True),
        ("rm -rf ~/", True),
        ('rm -rf "$HOME"', True),
        ("rm -rf ${HOME}/", True),
        ("rm -R /usr", True),
        ("rm --recursive --force /etc/", True),
        ("rm -rf //", True),
        ("sudo rm -rf /", True),
        ("xargs rm -rf /", True),
        ("rm --no-preserve-root -rf x", True),
        ("mkfs.ext4 /dev/sda1", True),
        ("dd if=/dev/zero of=/dev/sda", True),
        ("echo x > /dev/sda", True),
        ("shutdown -h now", True),
        ("systemctl reboot", True),
        ("chmod -R 777 /", True),
        ("rm -rf build", False),
        ("rm -rf ./target /tmp/x", False),
        ("rm /", False),
        ("echo rm -rf /", False),
        ("dd if=a of=b", False),
        ("cargo test", False),
    ],
)
def test_hard_denies(command: str, denied: bool) -> None:
    reasons = [hard_deny_reason(s) for s in analyze(command).segments]
    assert any(r is not None for r in reasons) is denied, reasons


@pytest.mark.parametrize(
    ("command", "change"),
    [
        ("git commit -m x", "git commit"),
        ("git add .", "git add"),
        ("git push origin main", "git push"),
        ("git reset --hard", "git reset"),
        ("git checkout -b x", "git checkout"),
        ("git rebase main", "git rebase"),
        ("git merge x", "git merge"),
        ("git tag v1", "git tag"),
        ("git tag -d v1", "git tag"),
        ("git branch -d x", "git branch"),
        ("git branch new-branch", "git branch"),
        ("git stash", "git stash"),
        ("git -C sub commit -m x", "git commit"),
        ("git -c core.pager=sh log", "git with -c (configuration that can run programs)"),
        ("/usr/bin/git commit", "git commit"),
        ("timeout 5 git push", "git push"),
        ("env GIT_DIR=x git commit", "git commit"),
        ("git config user.name x", "git config"),
        ("git status", None),
        ("git log --oneline -5", None),
        ("git diff HEAD~1", None),
        ("git show HEAD", None),
        ("git branch", None),
        ("git branch -a -v", None),
        ("git branch --list 'feat*'", None),
        ("git tag", None),
        ("git tag -l 'v*'", None),
        ("git stash list", None),
        ("git remote -v", None),
        ("git config --get user.name", None),
        ("git --no-pager log", None),
        ("git", None),
        ("ls git commit", None),
    ],
)
def test_mutating_git(command: str, change: str | None) -> None:
    (segment,) = analyze(command).segments
    assert mutating_git(segment) == change


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        ("cargo test --lib", "bash(cargo test:*)"),
        ("git push origin main", "bash(git push:*)"),
        ("ls", "bash(ls)"),
        ("rm build/x.o", "bash(rm build/x.o)"),
        ("cat ~/.ssh/id_rsa", "bash(cat '~/.ssh/id_rsa')"),
        ("sudo rm x", "bash(sudo rm x)"),
        ("bash -c 'x'", "bash(bash -c x)"),
        ("FOO=1 make all", "bash(FOO=1 make all)"),
        ("python -m pytest", "bash(python -m pytest)"),
    ],
)
def test_suggested_rules(command: str, rule: str) -> None:
    (segment,) = analyze(command).segments
    assert suggested_rule(segment) == rule
