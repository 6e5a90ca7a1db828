"""The table of dangerous arguments, unwrapping, hard denies, mutating git, suggested rules."""

from __future__ import annotations

import pytest

from anvild.agent.permissions.programs import (
    Danger,
    findings,
    hard_deny_reason,
    mutating_git,
    runs,
    suggested_rule,
    unwrap,
)


def split(command: str) -> tuple[str, ...]:
    return tuple(command.split())


@pytest.mark.parametrize(
    ("words", "index", "danger"),
    [
        (("find", ".", "-exec", "rm", "-r", "src", ";"), 2, Danger.RUNS),
        (("find", ".", "-execdir", "x", "+"), 2, Danger.RUNS),
        (("find", ".", "-ok", "x", ";"), 2, Danger.RUNS),
        (("find", ".", "-delete"), 2, Danger.WRITES),
        (("find", ".", "-fprintf", "f", "%p"), 2, Danger.WRITES),
        (("find", ".", "-fls", "f"), 2, Danger.WRITES),
        (("sed", "-i", "s/a/b/", "f"), 1, Danger.WRITES),
        (("sed", "-ni.bak", "p", "f"), 1, Danger.WRITES),
        (("sed", "--in-pl", "p", "f"), 1, Danger.WRITES),
        (("sed", "1e touch X"), 1, Danger.CODE),
        (("sed", "s/x/cmd/e"), 1, Danger.CODE),
        (("sed", "w F"), 1, Danger.WRITES),
        (("sed", "s/a/b/w F"), 1, Danger.WRITES),
        (("sed", "-e", "p", "-e", "W F"), 4, Danger.WRITES),
        (("sed", "-f", "script.sed"), 1, Danger.CODE),
        (("git", "log", "--output=F"), 2, Danger.WRITES),
        (("git", "log", "--out", "F"), 2, Danger.WRITES),
        (("git", "-c", "core.pager=touch X", "log"), 1, Danger.RUNS),
        (("git", "--exec-path=/tmp", "log"), 1, Danger.RUNS),
        (("git", "fetch", "--upload-pack=touch X"), 2, Danger.RUNS),
        (("git", "--config-env=core.pager=X", "log"), 1, Danger.RUNS),
        (("git", "-C", "../other", "log"), 1, Danger.RUNS),
        (("git", "grep", "-Ovim", "x"), 2, Danger.RUNS),
        (("git", "rebase", "-x", "make", "main"), 2, Danger.RUNS),
        (("git", "commit", "-m", "x"), 1, Danger.GIT),
        (("npm", "test", "--script-shell=touch"), 2, Danger.RUNS),
        (("yarn", "test", "--userconfig", "x"), 2, Danger.RUNS),
        (("pnpm", "exec", "x"), 1, Danger.RUNS),
        (("xargs", "rm"), 1, Danger.RUNS),
        (("env", "FOO=1", "rm"), 2, Danger.RUNS),
        (("nice", "-n", "5", "rm"), 3, Danger.RUNS),
        (("timeout", "5", "rm", "x"), 2, Danger.RUNS),
        (("sudo", "-u", "x", "rm"), 3, Danger.RUNS),
        (("awk", '{system("x")}'), 1, Danger.CODE),
        (("awk", '{print > "f"}'), 1, Danger.WRITES),
        (("awk", "-f", "prog.awk"), 1, Danger.CODE),
        (("tar", "xf", "a.tar", "--to-command=sh"), 3, Danger.RUNS),
        (("tar", "cf", "a.tar", "--checkpoint-action=exec=sh", "x"), 3, Danger.RUNS),
        (("rsync", "-e", "sh x", "a", "b"), 1, Danger.RUNS),
        (("less", "+!touch X", "f"), 1, Danger.CODE),
        (("less", "-o", "log", "f"), 1, Danger.WRITES),
        (("man", "-P", "touch X", "ls"), 1, Danger.RUNS),
        (("sort", "-o", "f", "in"), 1, Danger.WRITES),
        (("sort", "--compress-program=x", "in"), 1, Danger.RUNS),
        (("uniq", "in", "out"), 2, Danger.WRITES),
        (("bash", "-c", "x"), 1, Danger.CODE),
        (("bash",), 0, Danger.CODE),
        (("python3", "-c", "print(1)"), 1, Danger.CODE),
        (("rg", "--pre", "x", "pat"), 1, Danger.RUNS),
    ],
)
def test_the_table_finds_each_dangerous_argument(
    words: tuple[str, ...], index: int, danger: Danger
) -> None:
    found = findings(words)
    assert any(f.index == index and f.danger is danger for f in found), found


@pytest.mark.parametrize(
    "words",
    [
        ("find", ".", "-name", "*.py", "-type", "f"),
        ("sed", "-n", "1,5p", "f"),
        ("sed", "s/a/b/g;s/c/d/2", "f"),
        ("sed", "-E", "/^#/d", "f"),
        ("git", "log", "--oneline", "-5"),
        ("git", "status"),
        ("git", "diff", "--stat", "HEAD~1"),
        ("npm", "test"),
        ("npm", "run", "build", "--", "--watch"),
        ("npm", "test", "--silent"),
        ("awk", "{print $1}", "f"),
        ("awk", "$3 > 100 {print}", "f"),
        ("sort", "-n", "f"),
        ("uniq", "-c", "f"),
        ("tar", "tf", "a.tar"),
        ("ls", "-la"),
        ("cat", "a", "b"),
        ("python3", "-m", "pytest", "-q"),
        ("python3", "script.py"),
    ],
)
def test_ordinary_calls_have_no_findings(words: tuple[str, ...]) -> None:
    assert findings(words) == ()


@pytest.mark.parametrize(
    ("words", "inner"),
    [
        (("env", "-i", "A=1", "B=2", "rm", "x"), ("rm", "x")),
        (("nice", "-n5", "rm"), ("rm",)),
        (("timeout", "-s", "KILL", "10", "rm"), ("rm",)),
        (("xargs", "-0", "-I", "{}", "rm", "{}"), ("rm", "{}")),
        (("command", "-p", "rm"), ("rm",)),
        (("sudo", "--", "rm"), ("rm",)),
        (("env",), None),
        (("ls", "x"), None),
    ],
)
def test_unwrap(words: tuple[str, ...], inner: tuple[str, ...] | None) -> None:
    assert unwrap(words) == inner


def test_the_dynamic_loader_is_a_wrapper() -> None:
    for loader in ("/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux.so.2", "ld.so", "ld64.so.1"):
        found = runs((loader, "--library-path", "/x", "/usr/bin/touch", "X"))
        assert ("touch", "X") in found.commands, loader
    assert runs(("libc.so.6",)).commands == (("libc.so.6",),)


def test_runs_lists_every_command_with_program_names_reduced() -> None:
    found = runs(("/usr/bin/env", "X=1", "/usr/bin/nice", "find", ".", "-exec", "/bin/rm", ";"))
    names = [c[0] for c in found.commands]
    assert names == ["env", "nice", "find", "rm"]
    assert found.opaque is None
    assert runs(("bash", "-c", "rm x")).texts == ("rm x",)
    assert runs(("sed", "s/x/y/e")).opaque is not None
    assert runs(("bash",)).opaque is not None


@pytest.mark.parametrize(
    ("command", "denied"),
    [
        ("rm -rf /", True),
        ("rm -fr /*", True),
        ("rm -r -f ~", True),
        ("rm -rf ~/", True),
        ("rm -rf $HOME", True),
        ("rm -R /usr", True),
        ("rm --recursive --force /etc/", True),
        ("rm -rf //", True),
        ("rm --no-preserve-root -rf x", True),
        ("mkfs.ext4 /dev/sda1", True),
        ("dd if=/dev/zero of=/dev/sda", True),
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
    assert (hard_deny_reason(split(command)) is not None) is denied


def test_hard_denies_reach_through_wrappers() -> None:
    for words in (("sudo", "rm", "-rf", "/"), ("xargs", "rm", "-rf", "/")):
        assert any(hard_deny_reason(c) for c in runs(words).commands)


@pytest.mark.parametrize(
    ("command", "change"),
    [
        ("git commit -m x", "git commit"),
        ("git add .", "git add"),
        ("git push origin main", "git push"),
        ("git reset --hard", "git reset"),
        ("git tag v1", "git tag"),
        ("git tag -d v1", "git tag"),
        ("git branch -d x", "git branch"),
        ("git branch new-branch", "git branch"),
        ("git stash", "git stash"),
        ("git -C sub commit -m x", "git commit"),
        ("/usr/bin/git commit", "git commit"),
        ("git config user.name x", "git config"),
        ("git status", None),
        ("git log --oneline -5", None),
        ("git branch", None),
        ("git branch -a -v", None),
        ("git tag", None),
        ("git tag -l v*", None),
        ("git stash list", None),
        ("git remote -v", None),
        ("git config --get user.name", None),
        ("git --no-pager log", None),
        ("git", None),
        ("ls git commit", None),
    ],
)
def test_mutating_git(command: str, change: str | None) -> None:
    assert mutating_git(split(command)) == change


@pytest.mark.parametrize(
    ("words", "rule"),
    [
        (("cargo", "test", "--lib"), "bash(cargo test:*)"),
        (("git", "push", "origin", "main"), "bash(git push:*)"),
        (("git", "log", "--output=F"), "bash(git log --output=F)"),
        (("ls",), "bash(ls)"),
        (("rm", "build/x.o"), "bash(rm build/x.o)"),
        (("timeout", "5", "npm", "test"), "bash(timeout 5 npm test)"),
        (("sed", "-i", "s/a/b/", "f"), "bash(sed -i s/a/b/ f)"),
        (("python", "-m", "pytest"), "bash(python -m pytest)"),
    ],
)
def test_suggested_rules_never_generalise_past_a_dangerous_argument(
    words: tuple[str, ...], rule: str
) -> None:
    assert suggested_rule(words) == rule
