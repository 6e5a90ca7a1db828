"""Commands that talked the old policy around, against a realistic rule set.

Each row hides a program (`touch`, `rm`, ...) or a write behind programs the rules allow. With
the rules below none may be allowed; in bypass mode with a deny rule for the hidden program
each is denied. The same rows run end to end through a headless session in
tests/integration/test_permission_attacks_e2e.py.
"""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

from anvild.agent.permissions.policy import (
    Allow,
    Ask,
    Decision,
    Deny,
    Mode,
    Policy,
    resolve_request,
)
from anvild.agent.permissions.rules import RuleSet
from anvild.agent.tools.base import Effects
from anvild.sandbox import WorkspaceWrite

ALLOW = (
    "bash(echo:*)",
    "bash(cat:*)",
    "bash(find:*)",
    "bash(sed:*)",
    "bash(ls:*)",
    "bash(git log *)",
    "bash(npm test:*)",
)
DENY = ("bash(rm:*)", "bash(curl:*)", "read_file(.env)")

# (command, the hidden program a bypass-mode deny rule names)
ATTACKS: list[tuple[str, str]] = [
    ("echo hi\n\\rm -rf src", "rm"),
    ("echo `echo \\`touch X\\``", "touch"),
    ("echo $(( '$(touch X)' ))", "touch"),
    ("echo \"${x:-'$(touch X)'}\"", "touch"),
    ("echo ${a['$(touch X)']}", "touch"),
    ("cat <<E'O'F\nhi\nEOF\ntouch X\nE'O'F", "touch"),
    ('cat <<EOF""\nhi\nEOF\ntouch X\nEOF', "touch"),
    ("cat <<EOF\nhi\\\nEOF\ntouch X\nEOF", "touch"),
    ("echo ${x:='$(touch X)'} ${x@P}", "touch"),
    ("echo ok; [[ 1 -eq 'a[$(touch X)]' ]]", "touch"),
    ("for i in 1; do touch X; done", "touch"),
    ("(( a[$(touch X)] ))", "touch"),
    ("cat <<EOF > src/main.py\nprint('owned')\nEOF", "cat"),
    ("cat <<EOF >> src/main.py\nx\nEOF", "cat"),
    ("cat <<EOF &> src/main.py\nx\nEOF", "cat"),
    ("cat <<EOF 2> src/main.py\nx\nEOF", "cat"),
    ("echo $(> f)", "echo"),
    ("echo $(< .env)", "echo"),
    ("find . -exec touch X \\;", "touch"),
    ("find . -name x -delete", "find"),
    ("find . -fprintf F %p", "find"),
    ("sed -i s/a/b/ src/main.py", "sed"),
    ("sed '1e touch X' README", "touch"),
    ("sed 's/x/touch X/e' README", "touch"),
    ("sed 'w F' README", "sed"),
    ("git log --output=F", "git"),
    ("npm test --script-shell=touch", "touch"),
    ("/bin/rm -r src", "rm"),
    ("command rm -r src", "rm"),
    ("env rm -r src", "rm"),
    ("FOO=1 rm -r src", "rm"),
    ("nice rm -r src", "rm"),
    ("timeout 5 rm -r src", "rm"),
    ("exec rm -r src", "rm"),
    ("ls | xargs rm", "rm"),
    ("ls && r''m -r src", "rm"),
    ("echo $'\\x72m' | bash", "rm"),
    ("printf 'r\\155 src' | bash", "rm"),
    ("echo x | sh -c 'rm -r src'", "rm"),
    ("/bin/r? -r src", "rm"),
    ("/lib64/ld-linux-x86-64.so.2 /usr/bin/touch X", "touch"),
]

WORKSPACE = PurePosixPath("/work/repo")


def decide(command: str, policy: Policy) -> Decision:
    request = resolve_request(
        "bash", {"command": command}, Effects(subprocess=True, unknown=True), cwd=WORKSPACE,
        canonical=lambda p: p,
    )  # fmt: skip
    return policy.decide(request)


def rules(deny: tuple[str, ...] = DENY) -> RuleSet:
    return RuleSet.parse(allow=ALLOW, deny=deny)


@pytest.mark.parametrize(("command", "hidden"), ATTACKS)
def test_no_attack_is_allowed_by_the_rules(command: str, hidden: str) -> None:
    for mode in (Mode.DEFAULT, Mode.ACCEPT_EDITS):
        policy = Policy(WORKSPACE, mode, rules(), sandbox=WorkspaceWrite())
        assert not isinstance(decide(command, policy), Allow), mode


@pytest.mark.parametrize(("command", "hidden"), ATTACKS)
def test_every_attack_is_denied_in_bypass_mode_with_a_deny_rule_for_what_it_hides(
    command: str, hidden: str
) -> None:
    policy = Policy(WORKSPACE, Mode.BYPASS, rules((*DENY, f"bash({hidden}:*)")))
    decision = decide(command, policy)
    assert isinstance(decision, Deny), decision


@pytest.mark.parametrize(
    "command",
    [
        "git status",  # no rule: asks
        "ls -la src",
        "cat a b | sed -n 1p",
        "npm test",
        "git log --oneline -5",
        "find . -name '*.py' -type f",
        "echo done && ls",
    ],
)
def test_plain_commands_the_rules_cover_still_run_without_asking(command: str) -> None:
    policy = Policy(WORKSPACE, Mode.DEFAULT, rules(), sandbox=WorkspaceWrite())
    decision = decide(command, policy)
    if command == "git status":
        assert isinstance(decision, Ask)
        assert "bash(git status" in decision.reason
    else:
        assert decision == Allow()


def test_a_rule_that_names_the_dangerous_argument_allows_it() -> None:
    policy = Policy(WORKSPACE, Mode.DEFAULT, RuleSet.parse(allow=("bash(sed -i:*)",)))
    assert decide("sed -i s/a/b/ src/x.py", policy) == Allow()
    narrower = Policy(WORKSPACE, Mode.DEFAULT, RuleSet.parse(allow=("bash(sed:*)",)))
    asked = decide("sed -i s/a/b/ src/x.py", narrower)
    assert isinstance(asked, Ask)
    assert "sed -i rewrites the files it reads" in asked.reason
    assert "'-i'" in asked.reason


def test_a_glob_that_could_expand_to_an_option_asks_for_programs_with_dangerous_options() -> None:
    policy = Policy(WORKSPACE, Mode.DEFAULT, rules())
    assert isinstance(decide("find * -type f", policy), Ask)
    assert decide("find ./* -type f", policy) == Allow()
    assert decide("ls *.py", policy) == Allow()


def test_redirects_need_an_edit_rule_or_accept_edits() -> None:
    default = Policy(WORKSPACE, Mode.DEFAULT, rules())
    asked = decide("echo hi > notes.txt", default)
    assert isinstance(asked, Ask)
    assert "edit_file(notes.txt)" in asked.reason
    assert decide("echo hi > /dev/null", default) == Allow()
    edits = Policy(WORKSPACE, Mode.DEFAULT, RuleSet.parse(allow=(*ALLOW, "edit_file(*.txt)")))
    assert decide("echo hi > notes.txt", edits) == Allow()
    accept = Policy(WORKSPACE, Mode.ACCEPT_EDITS, rules())
    assert decide("echo hi > notes.txt", accept) == Allow()


def test_path_deny_rules_reach_shell_commands_that_name_the_path() -> None:
    policy = Policy(WORKSPACE, Mode.BYPASS, RuleSet.parse(deny=("read_file(.env*)",)))
    for command in ("cat .env.local", "cat < .env", "sed -n 1p ./.env", "echo $(< .env)"):
        denied = decide(command, policy)
        assert isinstance(denied, Deny), command
        assert "read_file(.env*)" in denied.reason
    assert decide("cat README", policy) == Allow()


def test_lines_outside_the_subset_ask_in_bypass_mode_when_no_deny_rule_applies() -> None:
    policy = Policy(WORKSPACE, Mode.BYPASS, RuleSet())
    asked = decide("for f in a b; do echo $f; done", policy)
    assert isinstance(asked, Ask)
    assert "outside the shell subset" in asked.reason
    assert decide("echo a && ls | wc -l", policy) == Allow()
