"""Skills: SKILL.md parsing, discovery and its precedence, the skipped folders, the prompt's list
and its byte budget, the `skills` file's lines."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from anvild.skills import (
    PROMPT_BUDGET,
    SkillCatalog,
    SkillError,
    list_files,
    parse_skill,
    read_body,
)
from anvild.skills.catalog import PROMPT_DESCRIPTION_CHARS
from tests.unit.skills.support import FIXTURES, add_skill, layout, skill_md


def test_a_skill_in_the_public_format_parses() -> None:
    skill = parse_skill(FIXTURES / "user" / "pdf-forms", "user")
    assert skill.name == "pdf-forms"
    assert skill.description.startswith("Fill in PDF forms and check the result. Use when")
    assert skill.license == "Complete terms in LICENSE.txt"
    assert skill.allowed_tools == ()
    assert skill.directory == (FIXTURES / "user" / "pdf-forms").resolve()
    assert read_body(skill).startswith("# Filling PDF forms\n\n1. List the form's fields")
    assert list_files(skill) == (
        ["LICENSE.txt", "reference.md", "scripts/fill_form.py"],
        False,
    )


def test_optional_keys_are_kept_and_a_folded_description_is_one_line() -> None:
    skill = parse_skill(FIXTURES / "user" / "release-notes", "user")
    assert skill.description == (
        "Write release notes from the git log since the last tag. Use when preparing a "
        "release or when asked what changed."
    )
    assert skill.allowed_tools == ("Bash(git", "log:*)", "Read")  # space-separated, per format
    assert skill.metadata == {"author": "anvild-tests", "version": "1.2"}
    assert skill.compatibility == "Needs git"


def test_allowed_tools_as_commas_or_a_list(tmp_path: Path) -> None:
    comma = parse_skill(FIXTURES / "project" / ".claude" / "skills" / "lint-fix", "project")
    assert comma.allowed_tools == ("Write", "Edit", "Bash")
    folder = add_skill(tmp_path, "listed", "A list.", extra="allowed-tools:\n  - Read\n  - Grep\n")
    assert parse_skill(folder, "user").allowed_tools == ("Read", "Grep")


def test_unknown_keys_are_ignored(tmp_path: Path) -> None:
    folder = add_skill(
        tmp_path, "extra", "Other agents' keys.", extra="model: opus\nargument-hint: FILE\n"
    )
    assert parse_skill(folder, "user").name == "extra"


@pytest.mark.parametrize(
    ("folder", "problem"),
    [
        ("broken-yaml", "the frontmatter is not valid YAML at line 4"),
        ("no-description", "the frontmatter has no `description`"),
        ("Bad_Name", "`name` 'Bad_Name' must be 1 to 64 lowercase letters"),
    ],
)
def test_invalid_frontmatter_names_the_file_and_the_problem(folder: str, problem: str) -> None:
    path = FIXTURES / "project" / ".anvil" / "skills" / folder
    with pytest.raises(SkillError) as caught:
        parse_skill(path, "project")
    assert str(caught.value).startswith(f"{path / 'SKILL.md'}: {problem}")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("# no frontmatter\n", "no frontmatter; the file must start with a '---' line"),
        ("---\nname: x\ndescription: y\n", "the frontmatter has no closing '---' line"),
        ("---\n- a\n- b\n---\n", "the frontmatter must be a mapping"),
        ("---\nname: x\ndescription: 3\n---\n", "`description` must be a string, not int"),
        ("---\nname: x\ndescription: '  '\n---\n", "`description` is empty"),
        ("---\nname: x\ndescription: y\nmetadata: [1]\n---\n", "`metadata` must be a mapping"),
        ("---\nname: x\ndescription: y\nallowed-tools: 3\n---\n", "`allowed-tools` must be"),
        (f"---\nname: {'a' * 65}\ndescription: y\n---\n", "`name` 'aaaa"),
    ],
)
def test_bad_files(tmp_path: Path, text: str, problem: str) -> None:
    (tmp_path / "SKILL.md").write_text(text)
    with pytest.raises(SkillError, match=f"^{tmp_path / 'SKILL.md'}: ") as caught:
        parse_skill(tmp_path, "user")
    assert problem in str(caught.value)


def test_not_utf8_and_too_large(tmp_path: Path) -> None:
    (tmp_path / "SKILL.md").write_bytes(b"---\nname: x\ndescription: \xff\n---\n")
    with pytest.raises(SkillError, match="not UTF-8"):
        parse_skill(tmp_path, "user")
    (tmp_path / "SKILL.md").write_text(skill_md("x", "y", body="z" * 300_000))
    with pytest.raises(SkillError, match="larger than 256 KB"):
        parse_skill(tmp_path, "user")


def test_discovery_order_precedence_and_skipped(tmp_path: Path) -> None:
    config, repo = layout(tmp_path)
    add_skill(config / "roles" / "reviewer" / "skills", "review-checklist", "How to review.")
    add_skill(repo / ".anvil" / "skills", "pdf-forms", "A project skill shadowed by the user's.")
    cwd = repo / "src"
    cwd.mkdir()
    add_skill(cwd / ".claude" / "skills", "nearest", "Found in the cwd, below the git root.")
    found = SkillCatalog(config).for_session(cwd, "reviewer")
    assert [(s.name, s.source) for s in found.skills] == [
        ("review-checklist", "role"),
        ("pdf-forms", "user"),
        ("release-notes", "user"),
        ("nearest", "project"),
        ("lint-fix", "project"),
    ]
    reasons = {s.path.parent.name: s.reason for s in found.skipped}
    assert set(reasons) == {"Bad_Name", "broken-yaml", "no-description", "pdf-forms"}
    assert reasons["pdf-forms"].endswith(
        f"the name 'pdf-forms' is taken by {config / 'skills' / 'pdf-forms' / 'SKILL.md'}"
    )
    assert all(s.source == "project" for s in found.skipped)
    # Another role does not see the reviewer's skills.
    assert "review-checklist" not in SkillCatalog(config).for_session(cwd, "developer").names()


def test_outside_a_repository_only_the_cwd_is_a_project(tmp_path: Path) -> None:
    add_skill(tmp_path / ".claude" / "skills", "above", "Not in the project.")
    cwd = tmp_path / "work"
    cwd.mkdir()
    add_skill(cwd / ".claude" / "skills", "here", "In the cwd.")
    found = SkillCatalog(tmp_path / "config").for_session(cwd, "developer")
    assert found.names() == ("here",)


def test_a_symlinked_skill_folder_is_found_at_its_target(tmp_path: Path) -> None:
    target = add_skill(tmp_path / "elsewhere", "linked", "Kept in another checkout.")
    (tmp_path / "config" / "skills").mkdir(parents=True)
    os.symlink(target, tmp_path / "config" / "skills" / "linked")
    found = SkillCatalog(tmp_path / "config").for_session(tmp_path, "developer")
    assert found.read_roots() == ((tmp_path / "config" / "skills").resolve(), target.resolve())


def test_the_prompt_block_lists_names_and_descriptions_only(tmp_path: Path) -> None:
    config, repo = layout(tmp_path)
    block = SkillCatalog(config).for_session(repo, "developer").prompt_block()
    assert block.startswith("# Skills\n\nSkills are folders of instructions")
    assert block.endswith(
        "- pdf-forms: Fill in PDF forms and check the result. Use when the user asks to "
        "complete, fill or flatten a PDF form, or mentions the fields of a .pdf file.\n"
        "- release-notes: Write release notes from the git log since the last tag. Use when "
        "preparing a release or when asked what changed.\n"
        "- lint-fix: Fix lint errors in this project. Use after a lint run fails."
    )
    assert "Filling PDF forms" not in block  # bodies stay out
    assert SkillCatalog(tmp_path / "none").for_session(tmp_path, "developer").prompt_block() == ""


def test_a_huge_description_is_cut_in_the_prompt_not_in_the_skill(tmp_path: Path) -> None:
    huge = "Use it for everything. " * 300
    add_skill(tmp_path / "config" / "skills", "huge", huge)
    found = SkillCatalog(tmp_path / "config").for_session(tmp_path, "developer")
    assert found.skills[0].description == huge.strip()
    line = found.prompt_block().splitlines()[-1]
    assert line.startswith("- huge: Use it for everything.")
    assert line.endswith("…")
    assert len(line) <= len("- huge: ") + PROMPT_DESCRIPTION_CHARS


def test_the_budget_leaves_skills_out_with_a_note_naming_them(tmp_path: Path) -> None:
    skills = tmp_path / "config" / "skills"
    for i in range(40):
        add_skill(skills, f"skill-{i:02}", f"Skill number {i}. " + "Some words. " * 15)
    found = SkillCatalog(tmp_path / "config").for_session(tmp_path, "developer")
    block = found.prompt_block()
    listed = [line for line in block.splitlines() if line.startswith("- skill-")]
    assert 0 < len(listed) < 40
    assert len("\n".join(listed).encode()) <= PROMPT_BUDGET
    left = 40 - len(listed)
    note = block.splitlines()[-1]
    assert note.startswith(f"[{left} more skills are installed but not described here (the list")
    assert f"skill-{len(listed):02}, " in note  # the first one left out is named
    assert note.endswith("Call `skill` with one of these names to read it.]")
    small = found.prompt_block(budget=200)
    assert "[39 more skills" in small or "[40 more skills" in small


def test_the_skills_file_lines(tmp_path: Path) -> None:
    config, repo = layout(tmp_path)
    text = SkillCatalog(config).for_session(repo, "developer").text()
    lines = text.splitlines()
    user = (config / "skills").resolve()
    assert lines[:3] == [
        f"pdf-forms\tuser\t{user / 'pdf-forms'}",
        f"release-notes\tuser\t{user / 'release-notes'}",
        f"lint-fix\tproject\t{repo.resolve() / '.claude' / 'skills' / 'lint-fix'}",
    ]
    skipped = repo / ".anvil" / "skills"
    assert lines[3:] == [
        f"-\tproject\t{skipped / 'Bad_Name' / 'SKILL.md'}\t`name` 'Bad_Name' must be 1 to 64 "
        "lowercase letters, digits and single hyphens (e.g. pdf-forms), not starting or ending "
        "with a hyphen",
        f"-\tproject\t{skipped / 'broken-yaml' / 'SKILL.md'}\tthe frontmatter is not valid YAML "
        "at line 4: expected ',' or ']', but got '<stream end>'",
        f"-\tproject\t{skipped / 'no-description' / 'SKILL.md'}\tthe frontmatter has no "
        "`description`",
    ]
