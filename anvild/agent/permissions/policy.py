"""The permission policy: `Policy.decide(request) -> Allow | Ask | Deny`, pure and synchronous.

In order (docs/decisions.md, "Permissions", says why): 1. an invalid call is denied; 2. what
nothing can lift, checked against every reading of a command: hard denies, plan-mode and role
ceilings, the user's deny rules (opaque lines too, when a command deny rule exists); 3. resources
arrive resolved (`resolve_request`: canonical paths, redirect targets); 4. escalations (outside
paths, network, full access) need a separate grant in every mode; 5. ask rules, then allow: a
command only when in the shell subset with every segment and dangerous argument covered (or
bypass mode), other calls by rules covering every subject; 6. the mode's default (reads allowed;
`default` asks for writes and unknown effects; `accept-edits` allows workspace edits).
The decision is a value: `Ask` carries the reason and what "always" adds (`Ask.remember`), `Deny`
a reason the model and user can act on. `remember` returns a new `Policy`.
"""

from __future__ import annotations

import enum
import glob as _glob
import os
import posixpath
import shlex
from collections.abc import Callable, Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any, Final, TypeAlias

import attrs
import pathspec

from anvild.agent.permissions import programs, shell
from anvild.agent.permissions.programs import Danger
from anvild.agent.permissions.readings import Readings, command_hits, readings
from anvild.agent.permissions.rules import (
    PATH_TOOLS,
    SHELL_TOOLS,
    CommandSubject,
    Exact,
    Glob,
    PathSubject,
    Prefix,
    Rule,
    RuleKind,
    RuleSet,
    Subject,
    TextSubject,
    parse_rule,
)
from anvild.agent.tools.base import Effects
from anvild.sandbox import ReadOnly, SandboxPolicy

# -- decisions -----------------------------------------------------------------------------------


def _roots(paths: Iterable[os.PathLike[str] | str]) -> tuple[PurePosixPath, ...]:
    return tuple(dict.fromkeys(PurePosixPath(os.fspath(p)) for p in paths))


@attrs.frozen
class Grants:
    """Escalations granted for the session (user config, command line, or "always" answers).
    A granted directory covers what is below it."""

    network: bool = False
    full_access: bool = False
    read_roots: tuple[PurePosixPath, ...] = attrs.field(default=(), converter=_roots)
    write_roots: tuple[PurePosixPath, ...] = attrs.field(default=(), converter=_roots)

    def reads(self, path: PurePosixPath) -> bool:
        return any(path.is_relative_to(r) for r in (*self.read_roots, *self.write_roots))

    def writes(self, path: PurePosixPath) -> bool:
        return any(path.is_relative_to(r) for r in self.write_roots)

    def plus(self, other: Grants) -> Grants:
        return Grants(
            self.network or other.network,
            self.full_access or other.full_access,
            (*self.read_roots, *other.read_roots),
            (*self.write_roots, *other.write_roots),
        )


@attrs.frozen
class Remember:
    """What an "always" answer adds to the session: rules and grants. Empty when the question
    cannot be answered for good (a user ask rule, a command that cannot be checked)."""

    rules: tuple[Rule, ...] = ()
    grants: Grants = Grants()

    def __bool__(self) -> bool:
        return bool(self.rules) or self.grants != Grants()

    def describe(self) -> tuple[str, ...]:
        out = [f"allow {rule}" for rule in self.rules]
        out += [f"read {p}" for p in self.grants.read_roots]
        out += [f"write {p}" for p in self.grants.write_roots]
        if self.grants.network:
            out.append("network access")
        if self.grants.full_access:
            out.append("full access (no sandbox)")
        return tuple(out)


@attrs.frozen
class Allow:
    """The call runs."""


@attrs.frozen
class Ask:
    """A person must approve the call; `reason` says why, `remember` what "always" adds."""

    reason: str
    remember: Remember = Remember()


@attrs.frozen
class Deny:
    """The call never runs; `reason` goes back to the model as the call's result."""

    reason: str


Decision: TypeAlias = Allow | Ask | Deny


# -- modes and ceilings --------------------------------------------------------------------------


class Mode(enum.Enum):
    DEFAULT = "default"
    PLAN = "plan"
    ACCEPT_EDITS = "accept-edits"
    BYPASS = "bypass"


TEST_DIRECTORIES: Final = ("test/", "tests/", "__tests__/", "spec/", "specs/", "testdata/")
"""gitignore-style patterns (any depth) of the directories the tester role may write under."""


@attrs.frozen
class RoleCeiling:
    """What a role may never do, whatever the rules and the mode say."""

    role: str
    file_writes: bool = True
    mutating_git: bool = True
    write_patterns: tuple[str, ...] = ()  # when set, file writes only where these match

    @classmethod
    def for_role(cls, role: str) -> RoleCeiling:
        """The ceiling of a built-in role; a `ValueError` names the known ones otherwise."""
        try:
            return CEILINGS[role]
        except KeyError:
            known = ", ".join(sorted(CEILINGS))
            raise ValueError(f"unknown role {role!r}: the roles are {known}") from None

    def allows_write(self, relative: str | None) -> bool:
        if not self.file_writes:
            return False
        if not self.write_patterns:
            return True
        if relative is None:
            return False
        spec = pathspec.GitIgnoreSpec.from_lines(self.write_patterns)
        return spec.match_file(relative)


CEILINGS: Final = {
    "developer": RoleCeiling("developer"),
    "reviewer": RoleCeiling("reviewer", file_writes=False, mutating_git=False),
    "planner": RoleCeiling("planner", file_writes=False, mutating_git=False),
    "tester": RoleCeiling("tester", write_patterns=TEST_DIRECTORIES),
}


# -- requests ------------------------------------------------------------------------------------


def _paths(paths: Iterable[PurePosixPath]) -> tuple[PurePosixPath, ...]:
    return tuple(dict.fromkeys(PurePosixPath(p) for p in paths))


@attrs.frozen
class PermissionRequest:
    """One call with its resources resolved. Build it with `resolve_request`.

    `reads`/`writes` are canonical absolute paths (symlinks resolved; a command's writes are its
    redirect targets), `shell` the analysis of a shell tool's command, `named` every path a
    command's words could name (globs expanded; what path deny rules are matched against),
    `text` the subject a non-file tool names itself, `problem` why the call is invalid (it is
    then denied before anything else)."""

    tool: str
    arguments: Mapping[str, Any]
    effects: Effects
    reads: tuple[PurePosixPath, ...] = attrs.field(default=(), converter=_paths)
    writes: tuple[PurePosixPath, ...] = attrs.field(default=(), converter=_paths)
    shell: shell.ShellAnalysis | None = None
    named: tuple[PurePosixPath, ...] = attrs.field(default=(), converter=_paths)
    text: str | None = None
    full_access: bool = False  # the call asks to run without the sandbox
    problem: str | None = None


Canonical = Callable[[str], str]


def resolve_request(
    tool: str,
    arguments: Mapping[str, Any],
    effects: Effects,
    *,
    cwd: os.PathLike[str] | str,
    home: os.PathLike[str] | str | None = None,
    text: str | None = None,
    full_access: bool = False,
    shell_tools: frozenset[str] = SHELL_TOOLS,
    canonical: Canonical = os.path.realpath,
) -> PermissionRequest:
    """Resolve a call's resources: its effects' paths against `cwd`, canonical (this follows
    symlinks and expands globs: it touches the filesystem, so call it from a worker thread);
    for a shell tool, the command's analysis, its redirect targets and the paths its words may
    name (`home` is unused by commands: `~` is outside the shell subset)."""

    def resolve(path: str) -> PurePosixPath:
        return PurePosixPath(canonical(os.path.join(os.fspath(cwd), path)))

    analysis = None
    writes = [resolve(p) for p in effects.write_paths]
    reads = [resolve(p) for p in effects.read_paths]
    named: list[PurePosixPath] = []
    if tool in shell_tools:
        command = arguments.get("command")
        analysis = shell.analyze(command if isinstance(command, str) else "")
        for segment in analysis.segments:
            for directory in segment.dirs:
                for redirect in segment.redirects:
                    if redirect.target in shell.HARMLESS_TARGETS:
                        continue
                    path = resolve(os.path.join(directory, redirect.target))
                    (writes if redirect.writes else reads).append(path)
        named = [resolve(p) for p in named_paths(analysis, os.fspath(cwd))]
    return PermissionRequest(
        tool,
        arguments,
        effects,
        reads=reads,
        writes=writes,
        shell=analysis,
        named=named,
        text=text,
        full_access=full_access,
    )


_NAMED_LIMIT: Final = 2000


def named_paths(analysis: shell.ShellAnalysis, cwd: str) -> list[str]:
    """Every path the words of a command could name, relative to `cwd` (or absolute): each
    argument, each `--option=VALUE`'s value, each redirect target, and what a glob matches now
    (hidden files included for lines outside the subset). Bounded; reads the directory tree."""
    words: list[tuple[str, str, bool]] = []  # (directory, word, glob)
    if analysis.checkable:
        for segment in analysis.segments:
            for directory in segment.dirs:
                for index, word in enumerate(segment.words):
                    glob_word = index in segment.globs
                    pattern = segment.patterns[segment.globs.index(index)] if glob_word else word
                    words.append((directory, pattern, glob_word))
                words.extend((directory, r.target, False) for r in segment.redirects)
                for command in programs.runs(segment.words).commands:
                    words.extend((directory, f, False) for f in programs.named_files(command))
    else:
        words.extend(
            (".", token, bool(set(token) & set("*?["))) for token in analysis.reading.tokens
        )
    out: list[str] = []
    for directory, word, is_glob in words:
        value = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
        if not value or (value.startswith("-") and value == word):
            continue
        out.append(os.path.join(directory, value))
        if is_glob and len(out) < _NAMED_LIMIT:
            hidden = not analysis.checkable
            root = os.path.join(cwd, directory)
            for match in _glob.iglob(value, root_dir=root, include_hidden=hidden):
                out.append(os.path.join(directory, match))
                if len(out) >= _NAMED_LIMIT:
                    break
    return out[:_NAMED_LIMIT]


# -- the policy ----------------------------------------------------------------------------------


def _to_path(value: os.PathLike[str] | str) -> PurePosixPath:
    return PurePosixPath(os.fspath(value))


def _optional_path(value: os.PathLike[str] | str | None) -> PurePosixPath | None:
    return None if value is None else _to_path(value)


def _quote(text: str, limit: int = 120) -> str:
    shown = text if len(text) <= limit else text[: limit - 1] + "…"
    return f"`{shown}`"


@attrs.frozen
class Policy:
    """Who may do what in one session. `workspace` and `home` must be canonical."""

    workspace: PurePosixPath = attrs.field(converter=_to_path)
    mode: Mode = Mode.DEFAULT
    rules: RuleSet = attrs.field(factory=RuleSet)
    session_rules: tuple[Rule, ...] = ()
    grants: Grants = attrs.field(factory=Grants)
    ceiling: RoleCeiling = CEILINGS["developer"]
    sandbox: SandboxPolicy | None = None  # how commands run; plan mode needs ReadOnly
    home: PurePosixPath | None = attrs.field(default=None, converter=_optional_path)
    shell_tools: frozenset[str] = SHELL_TOOLS

    # -- session state --

    def remember(self, remember: Remember) -> Policy:
        """The policy after an "always" answer."""
        rules = tuple(dict.fromkeys((*self.session_rules, *remember.rules)))
        return attrs.evolve(self, session_rules=rules, grants=self.grants.plus(remember.grants))

    # -- the decision --

    def decide(self, request: PermissionRequest) -> Decision:
        tool = request.tool
        analysis = request.shell
        # 1. Validate.
        if request.problem is not None:
            return Deny(request.problem)
        if tool in self.shell_tools and (analysis is None or not analysis.command.strip()):
            return Deny("The command is empty: there is nothing to run.")
        subjects = self._subjects(request)
        found = None if analysis is None else readings(analysis)
        # 2. Hard denies, ceilings, deny rules: against every reading of a command.
        if found is not None and (denied := self._hard_deny(request, found)) is not None:
            return denied
        if (denied := self._ceiling(request)) is not None:
            return denied
        if (denied := self._deny_rules(request, subjects, found)) is not None:
            return denied
        # 4. Escalations need grants.
        escalation = self._escalation(request)
        if escalation is not None:
            return escalation
        # 5. User rules and command checks.
        for rule in self.rules.ask:
            hit = (
                command_hits(rule, tool, found) if found is not None else rule.hits(tool, subjects)
            )
            if hit:
                return Ask(f"the user's rule ask({rule}) asks before every such call")
        if analysis is not None:
            return self._command(request, analysis)
        allowed = (*self.rules.allow, *self.session_rules)
        if self.mode is Mode.BYPASS or self._covered(tool, subjects, allowed):
            return Allow()
        # 6. The mode's default.
        return self._default(request, subjects)

    # -- commands --

    def _hard_deny(self, request: PermissionRequest, found: Readings) -> Deny | None:
        for words in found.candidates():
            if (why := programs.hard_deny_reason(words)) is not None:
                return Deny(
                    f"{_quote(shlex.join(words))} is never run by this harness: {why}. "
                    "No rule or permission mode can allow it."
                )
        for path in request.writes:
            if str(path).startswith(programs.BLOCK_DEVICES):
                return Deny(
                    f"The command writes a block device ({path}); this harness never runs "
                    "that, whatever the rules and the mode say."
                )
        return None

    def _deny_rules(
        self, request: PermissionRequest, subjects: tuple[Subject, ...], found: Readings | None
    ) -> Deny | None:
        tool = request.tool
        for rule in self.rules.deny:
            if found is None:
                if rule.hits(tool, subjects):
                    return Deny(
                        f"the user's rule deny({rule}) forbids this call. Do not retry it; find "
                        "another way or ask the user."
                    )
                continue
            if command_hits(rule, tool, found):
                return Deny(
                    f"the user's rule deny({rule}) forbids a command this line runs (rules are "
                    "matched through wrappers, paths, pipelines and every way the line can be "
                    "read). Do not retry it in another form; find another way or ask the user."
                )
            if rule.selects(tool) and found.opaque is not None:
                return Deny(
                    f"this command can run programs its text does not name ({found.opaque}), "
                    f"so the user's rule deny({rule}) cannot be ruled out. Write it as plain "
                    "commands of literal words."
                )
            # Other modes ask about such a glob (`_unnamed_danger`); bypass would allow it.
            glob = None if request.shell is None else _option_glob(request.shell)
            if rule.selects(tool) and self.mode is Mode.BYPASS and glob is not None:
                return Deny(
                    f"{glob}, which could run a program the user's rule deny({rule}) names. "
                    "Write the pattern as ./PATTERN."
                )
            if (path := self._named_denied(rule, request)) is not None:
                return Deny(
                    f"the command names {path}, which the user's rule deny({rule}) forbids. "
                    "Do not retry it in another form; find another way or ask the user."
                )
        return None

    def _named_denied(self, rule: Rule, request: PermissionRequest) -> PurePosixPath | None:
        """A path named by the command that a path deny rule (`read_file(.env*)`) matches."""
        tools = [t for t in PATH_TOOLS if rule.selects(t)]
        if not tools or rule.pattern is None:
            return None
        for path in (*request.named, *request.reads, *request.writes):
            subject = PathSubject.of(path, self.workspace, self.home)
            if any(rule.matches(t, subject) for t in tools):
                return path
        return None

    def _command(self, request: PermissionRequest, analysis: shell.ShellAnalysis) -> Decision:
        """Steps 5 and 6 for a command: only a line in the subset may be allowed, by the mode
        (bypass) or by rules that cover each segment, name its dangerous arguments, and allow
        the files its redirects write."""
        if analysis.error is not None:
            return Ask(f"{analysis.error.capitalize()}, so it cannot be checked against the rules.")
        if analysis.outside:
            return Ask(
                f"The command is outside the shell subset that rules can check: "
                f"{analysis.outside[0]}. Approve it, or write it as plain commands of literal "
                "words joined by ;, &&, || and |."
            )
        if self.mode is Mode.BYPASS:
            return Allow()
        allowed = (*self.rules.allow, *self.session_rules)
        for segment in analysis.segments:
            covering = [
                r for r in allowed if r.matches(request.tool, CommandSubject(segment.words))
            ]
            if not covering:
                continue  # asked below, with every segment no rule covers
            if (why := _unnamed_danger(segment, covering)) is not None:
                return Ask(why, self._remember_command(request))
        if all(
            any(r.matches(request.tool, CommandSubject(s.words)) for r in allowed)
            for s in analysis.segments
        ):
            for path in request.writes:
                if not self._edit_allowed(path):
                    return Ask(
                        f"The command writes {path} through a redirect, which command rules do "
                        f"not cover: an edit rule (edit_file({self._rule_path(path)})) or "
                        "accept-edits mode allows it."
                    )
            return Allow()
        return Ask(self._command_reason(request), self._remember_command(request))

    def _edit_allowed(self, path: PurePosixPath) -> bool:
        if str(path) in shell.HARMLESS_TARGETS:
            return True
        if self.mode is Mode.ACCEPT_EDITS and self._relative(path) is not None:
            return True
        subject = PathSubject.of(path, self.workspace, self.home)
        allowed = (*self.rules.allow, *self.session_rules)
        return any(r.matches(t, subject) for r in allowed for t in ("write_file", "edit_file"))

    def _rule_path(self, path: PurePosixPath) -> str:
        relative = self._relative(path)
        return relative if relative is not None else "//" + str(path).lstrip("/")

    # -- steps --

    def _subjects(self, request: PermissionRequest) -> tuple[Subject, ...]:
        if request.shell is not None:
            return tuple(CommandSubject(s.words) for s in request.shell.segments)
        if request.tool in PATH_TOOLS or request.reads or request.writes:
            return tuple(
                PathSubject.of(p, self.workspace, self.home)
                for p in dict.fromkeys((*request.reads, *request.writes))
            )
        if request.text is not None:
            return (TextSubject(request.text),)
        return ()

    def _relative(self, path: PurePosixPath) -> str | None:
        if not path.is_relative_to(self.workspace):
            return None
        return path.relative_to(self.workspace).as_posix()

    def _ceiling(self, request: PermissionRequest) -> Deny | None:
        tool, effects, analysis = request.tool, request.effects, request.shell
        plan = self.mode is Mode.PLAN
        ceiling = self.ceiling
        role = f"The {ceiling.role} role"
        writes = request.writes
        if analysis is None and (effects.writes or writes):
            shown = ", ".join(str(p) for p in writes) or "files"
            if plan:
                return Deny(
                    f"Plan mode makes no changes: {tool} would write {shown}. Describe the "
                    "change in your plan instead; the user leaves plan mode to apply it."
                )
            for path in writes or (None,):
                relative = None if path is None else self._relative(path)
                if not ceiling.allows_write(relative):
                    return Deny(self._role_write_reason(tool, path))
        if analysis is None and effects.unknown:
            if plan:
                return Deny(
                    f"Plan mode makes no changes, and what {tool} does cannot be known in "
                    "advance. Leave it for after the plan is approved."
                )
            if not ceiling.file_writes:
                return Deny(
                    f"{role} makes no changes, and what {tool} does cannot be known in advance."
                )
        if analysis is None:
            return None
        if plan and not isinstance(self.sandbox, ReadOnly):
            return Deny(
                "Plan mode runs commands only under a read-only sandbox, and this session's "
                "commands could write. Use read_file, glob and grep to look around, or ask the "
                "user to leave plan mode."
            )
        limited = plan or not ceiling.file_writes or bool(ceiling.write_patterns)
        who = "Plan mode" if plan else role
        if (limited or not ceiling.mutating_git) and not analysis.checkable:
            why = analysis.error or "; ".join(analysis.outside)
            return Deny(
                f"{who} may run only commands that can be checked, and this one cannot: "
                f"{why}. Split it into plain commands of literal words."
            )
        if limited or not ceiling.mutating_git:
            found = readings(analysis)
            if found.texts or found.opaque:
                return Deny(
                    f"{who} may run only commands whose every program is visible, and this one "
                    f"runs code given as text ({found.opaque or 'a shell or interpreter string'})."
                    " Run the commands directly."
                )
        if limited:
            for path in writes:
                if plan or not ceiling.allows_write(self._relative(path)):
                    what = "Plan mode makes no changes" if plan else f"{role} may not write there"
                    return Deny(f"{what}: the command redirects its output to {path}.")
        for segment in analysis.segments:
            for words in programs.runs(segment.words).commands:
                for finding in programs.findings(words):
                    if finding.danger is Danger.GIT and (plan or not ceiling.mutating_git):
                        return Deny(
                            f"{who} may not change the repository: {_quote(shlex.join(words))} "
                            f"runs {programs.mutating_git(words)}. Use read-only git commands "
                            "(status, log, diff, show)."
                        )
                    if finding.danger is Danger.WRITES and limited:
                        return Deny(
                            f"{who} may not write files through a command: {finding.what}. "
                            + (
                                "Use edit_file or write_file under the test directories."
                                if ceiling.write_patterns and not plan
                                else "Report what should change instead."
                            )
                        )
        return None

    def _role_write_reason(self, tool: str, path: PurePosixPath | None) -> str:
        ceiling = self.ceiling
        where = "files" if path is None else str(path)
        if not ceiling.file_writes:
            return (
                f"The {ceiling.role} role makes no changes: {tool} would write {where}. "
                "Report what should change instead."
            )
        dirs = ", ".join(p.rstrip("/") for p in ceiling.write_patterns)
        return (
            f"The {ceiling.role} role writes only under test directories ({dirs}) inside the "
            f"workspace: {tool} would write {where}."
        )

    def _escalation(self, request: PermissionRequest) -> Ask | None:
        needs: list[str] = []
        grants = Grants()
        for path in request.reads:
            if self._relative(path) is None and not self.grants.reads(path):
                needs.append(f"read {path}, outside the workspace")
                grants = grants.plus(Grants(read_roots=(path,)))
        for path in request.writes:
            if self._relative(path) is None and not self.grants.writes(path):
                needs.append(f"write {path}, outside the workspace")
                grants = grants.plus(Grants(write_roots=(path,)))
        if request.effects.network and not self.grants.network:
            needs.append("reach the network")
            grants = grants.plus(Grants(network=True))
        if request.full_access and not self.grants.full_access:
            needs.append("run without the sandbox (full access)")
            grants = grants.plus(Grants(full_access=True))
        if not needs:
            return None
        return Ask(
            f"{request.tool} would {'; '.join(needs)}. That needs the user's grant, whatever "
            "the allow rules say.",
            Remember(grants=grants),
        )

    @staticmethod
    def _covered(tool: str, subjects: tuple[Subject, ...], rules: Iterable[Rule]) -> bool:
        rules = tuple(rules)
        if not subjects:
            return any(r.pattern is None and r.selects(tool) for r in rules)
        return all(any(r.matches(tool, s) for r in rules) for s in subjects)

    def _default(self, request: PermissionRequest, subjects: tuple[Subject, ...]) -> Decision:
        tool, effects = request.tool, request.effects
        if effects.read_only and not request.writes:
            return Allow()
        if self.mode is Mode.ACCEPT_EDITS and not (
            effects.unknown or effects.network or effects.subprocess
        ):
            return Allow()  # escalations were settled above: every write is in the workspace
        remember = Remember(rules=self._path_rules(tool, subjects)) if subjects else Remember()
        if not subjects and not effects.unknown:
            remember = Remember(rules=(parse_rule(tool),))
        if effects.writes:
            shown = ", ".join(str(p) for p in request.writes) or "files"
            return Ask(
                f"{tool} writes {shown}; in {self.mode.value} mode edits need approval (or an "
                f"allow rule such as {tool}(src/**), or --permission-mode accept-edits).",
                remember,
            )
        return Ask(
            f"What {tool} does cannot be known in advance; in {self.mode.value} mode that "
            "needs approval.",
            remember,
        )

    def _path_rules(self, tool: str, subjects: tuple[Subject, ...]) -> tuple[Rule, ...]:
        rules = []
        for subject in subjects:
            if not isinstance(subject, PathSubject):
                continue
            if subject.workspace is not None:
                text = subject.workspace
            else:
                text = "//" + subject.absolute.lstrip("/")
            if set(text) & set("*?[!#\\") or text.endswith(":*") or text == ".":
                return ()  # a name a rule cannot spell exactly: ask again next time
            rules.append(parse_rule(f"{tool}({text})", RuleKind.ALLOW))
        return tuple(rules)

    def _command_reason(self, request: PermissionRequest) -> str:
        assert request.shell is not None
        allowed = (*self.rules.allow, *self.session_rules)
        pending = [
            s
            for s in request.shell.segments
            if not any(r.matches(request.tool, CommandSubject(s.words)) for r in allowed)
        ]
        shown = ", ".join(_quote(s.text) for s in pending[:3])
        more = f" and {len(pending) - 3} more" if len(pending) > 3 else ""
        example = programs.suggested_rule(pending[0].words, request.tool) if pending else ""
        return (
            f"No allow rule covers {shown}{more}; in {self.mode.value} mode commands need "
            f"approval (or an allow rule such as {example})."
            if pending
            else f"In {self.mode.value} mode commands need approval."
        )

    def _remember_command(self, request: PermissionRequest) -> Remember:
        """An "always" answer allows each segment not yet covered (with its dangerous arguments
        named), and nothing when the line writes through redirects."""
        assert request.shell is not None
        if not request.shell.checkable or request.writes:
            return Remember()
        allowed = (*self.rules.allow, *self.session_rules)
        rules = []
        for segment in request.shell.segments:
            covering = [
                r for r in allowed if r.matches(request.tool, CommandSubject(segment.words))
            ]
            if covering and _unnamed_danger(segment, covering) is None:
                continue
            rules.append(parse_rule(programs.suggested_rule(segment.words, request.tool)))
        return Remember(rules=tuple(dict.fromkeys(rules)))


def _covering(rules: Iterable[Rule], tool: str, segment: shell.Segment) -> list[Rule]:
    return [r for r in rules if r.matches(tool, CommandSubject(segment.words))]


def _names(rule: Rule, words: tuple[str, ...], index: int) -> bool:
    """Whether an allow rule spells out the word at `index` (so it grants what that word does):
    within a prefix or exact rule's words, or written literally in a glob rule."""
    match rule.pattern:
        case Prefix(words=spelled) | Exact(words=spelled) if spelled:
            return index < len(spelled)
        case Glob(text=text):
            option = words[index].split("=", 1)[0]
            return any(option in piece.split() for piece in text.split("*"))
    return False


def _option_globs(segment: shell.Segment) -> list[int]:
    """The indices of globs that could expand to a file named like an option of a program of
    the table (a file `-e1e touch X` makes `sed -n p *` run touch)."""
    if programs.program_name(segment.words[0]) not in programs.PROGRAMS:
        return []
    pairs = zip(segment.globs, segment.patterns, strict=True)
    return [index for index, pattern in pairs if pattern[:1] in ("*", "?")]


def _option_glob(analysis: shell.ShellAnalysis) -> str | None:
    """Why a line gives such a glob to a program of the table, or None."""
    for segment in analysis.segments:
        for index in _option_globs(segment):
            word = segment.words[index]
            return f"The pattern {word!r} could expand to an option of {segment.words[0]}"
    return None


def _unnamed_danger(segment: shell.Segment, covering: list[Rule]) -> str | None:
    """Why rules that cover a segment still do not allow it: a dangerous argument (or a glob
    that could expand to one) that none of them names; None when they do."""
    words = segment.words
    for finding in programs.findings(words):
        if not any(_names(r, words, finding.index) for r in covering):
            shown = words[finding.index]
            return (
                f"{_quote(segment.text)}: {finding.what}, and no allow rule names "
                f"{shown!r}. Approve it, or add a rule that spells it out such as "
                f"{programs.suggested_rule(words)}."
            )
    for index in _option_globs(segment):
        if not any(_names(r, words, index) for r in covering):
            return (
                f"{_quote(segment.text)}: the pattern {words[index]!r} could expand to a "
                f"file named like an option of {words[0]}. Use ./{words[index]} instead."
            )
    return None


def posix(path: os.PathLike[str] | str) -> PurePosixPath:
    """A canonical path as the policy wants it (absolute, normalised)."""
    return PurePosixPath(posixpath.normpath(os.fspath(path)))


__all__ = [
    "CEILINGS",
    "TEST_DIRECTORIES",
    "Allow",
    "Ask",
    "Decision",
    "Deny",
    "Grants",
    "Mode",
    "PermissionRequest",
    "Policy",
    "Remember",
    "RoleCeiling",
    "posix",
    "resolve_request",
]
