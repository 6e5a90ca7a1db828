"""Tool protocol, argument validation, the registry and truncate_middle (course 7.1, 7.2)."""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path
from typing import Any, Final

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from anvild.agent.tools import (
    Cancellation,
    Effects,
    Failed,
    Tool,
    ToolContext,
    ToolOutput,
    ToolRegistry,
    truncate_middle,
)
from anvild.agent.tools.base import Args, InvalidArgs, validate_args
from anvild.agent.tools.files import EditFile, ReadFile, WriteFile
from anvild.agent.tools.search import Glob, Grep
from anvild.llm.size import specs_bytes
from anvild.llm.types import ToolCall, converter
from anvild.sandbox import FullAccess, ReadOnly


class Calculator:
    name = "calculator"
    description = "Do arithmetic on two numbers."
    input_schema: Final[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "a": {"type": "number", "description": "The left operand."},
            "b": {"type": "number", "description": "The right operand."},
            "op": {"type": "string", "enum": ["add", "sub", "mul", "div"]},
        },
        "required": ["a", "b", "op"],
        "additionalProperties": False,
    }
    cancellation = Cancellation.SAFE_TO_ABANDON

    def effects(self, args: Args) -> Effects:
        return Effects.none()

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        a, b, op = args["a"], args["b"], args["op"]
        if op == "div" and b == 0:
            raise Failed("Division by zero. Use a non-zero b.")
        value = {"add": a + b, "sub": a - b, "mul": a * b, "div": a / b if b else 0}[op]
        return ToolOutput(str(value))


class Echo:
    """Returns what it is given; raises what it is told to."""

    description = "Echo."
    cancellation = Cancellation.SAFE_TO_ABANDON

    def __init__(self, name: str = "echo") -> None:
        self.name = name
        self.input_schema: dict[str, Any] = {
            "type": "object",
            "properties": {"text": {"type": "string"}, "boom": {"type": "boolean"}},
        }

    def effects(self, args: Args) -> Effects:
        if args.get("boom"):
            raise RuntimeError("effects exploded")
        return Effects.read("x")

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        if args.get("boom"):
            raise RuntimeError("kaput")
        return ToolOutput(args.get("text", ""))


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(cwd=tmp_path)


def test_tools_satisfy_the_protocol() -> None:
    for tool in (Calculator(), Echo(), ReadFile(), WriteFile(), EditFile(), Glob(), Grep()):
        assert isinstance(tool, Tool)


def test_context_defaults_are_confined(tmp_path: Path) -> None:
    ctx = ToolContext(cwd=tmp_path)
    assert ctx.sandbox == ReadOnly()
    assert not isinstance(ctx.sandbox, FullAccess)
    assert ctx.files.readable_roots == ctx.files.writable_roots == (tmp_path.resolve(),)
    assert ctx.state.todos == ()
    ctx.emit("anything")  # the default sink accepts and drops


def test_missing_field_is_named() -> None:
    with pytest.raises(InvalidArgs, match="`b`") as info:
        validate_args(Calculator.input_schema, {"a": 1, "op": "add"})
    assert "'b' is a required property" in info.value.message
    with pytest.raises(InvalidArgs, match="`op`"):
        validate_args(Calculator.input_schema, {"a": 1, "b": 2, "op": "pow"})
    with pytest.raises(InvalidArgs, match="`extra`"):
        validate_args(Calculator.input_schema, {"a": 1, "b": 2, "op": "add", "extra": 1})
    validate_args(Calculator.input_schema, {"a": 1, "b": 2.5, "op": "add"})


async def test_calculator_through_dispatch(ctx: ToolContext) -> None:
    registry = ToolRegistry([Calculator()])
    ok = await registry.dispatch(ToolCall("1", "calculator", {"a": 1, "b": 2, "op": "add"}), ctx)
    assert (ok.call_id, ok.content, ok.is_error) == ("1", "3", False)
    missing = await registry.dispatch(ToolCall("2", "calculator", {"a": 1}), ctx)
    assert missing.is_error
    assert "required property" in missing.content
    div = await registry.dispatch(ToolCall("3", "calculator", {"a": 1, "b": 0, "op": "div"}), ctx)
    assert div.is_error
    assert div.content == "Division by zero. Use a non-zero b."


def test_names_are_checked_and_unique() -> None:
    registry = ToolRegistry()
    for bad in ["", "has space", "dot.name", "x" * 65, "ünï"]:
        with pytest.raises(ValueError, match="must match"):
            registry.register(Echo(bad))
    registry.register(Echo("a-b_C9"))
    registry.register(Echo("x" * 64))
    with pytest.raises(ValueError, match="already registered"):
        registry.register(Echo("a-b_C9"))
    assert len(registry) == 2
    assert "a-b_C9" in registry


def test_bad_schemas_are_rejected_at_registration() -> None:
    not_object = Echo("e1")
    not_object.input_schema = {"type": "string"}
    with pytest.raises(ValueError, match="type"):
        ToolRegistry([not_object])
    invalid = Echo("e2")
    invalid.input_schema = {"type": "object", "properties": {"a": {"type": "nonsense"}}}
    with pytest.raises(ValueError, match="invalid input_schema"):
        ToolRegistry([invalid])
    # The metaschema check is cached per schema, but a refusal is not: it refuses every time.
    with pytest.raises(ValueError, match="invalid input_schema"):
        ToolRegistry([invalid])
    not_json = Echo("e3")
    not_json.input_schema = {"type": "object", "properties": {"a": {"default": object()}}}
    with pytest.raises(ValueError, match="not JSON"):
        ToolRegistry([not_json])


def test_specs_sorted_and_byte_stable() -> None:
    echo = Echo("zeta")
    registry = ToolRegistry([echo, Calculator(), Echo("alpha")])
    first = registry.specs()
    assert [s.name for s in first] == ["alpha", "calculator", "zeta"]
    echo.input_schema["properties"]["late"] = {"type": "string"}  # mutated after registration
    first[0].input_schema["properties"]["oops"] = {}  # a caller scribbling on a returned spec
    again = registry.specs()
    assert again == ToolRegistry([Echo("zeta"), Calculator(), Echo("alpha")]).specs()
    dump = [json.dumps([s.name, s.description, s.input_schema]) for s in again]
    assert dump == [json.dumps([s.name, s.description, s.input_schema]) for s in registry.specs()]


@pytest.mark.parametrize("compact", [False, True])
def test_the_size_the_specs_carry_is_the_size_of_the_definitions_json(compact: bool) -> None:
    """`specs` returns definitions that carry their size (`llm.size.SizedSpecs`), added up from
    sizes kept per tool: it must be the size of the definitions encoded afresh, non-ASCII text
    included, for each call's new tuple."""
    accented = Echo("echo_fr")
    accented.description = 'Répète ce qu\'on lui dit, avec 🙂 et des guillemets "doubles".'
    registry = ToolRegistry([accented, Calculator(), Grep(), ReadFile()])
    for _ in range(2):  # the second call reuses the kept sizes
        specs = registry.specs(compact=compact)
        fresh = list(specs)  # a list is never in the memo: measured from the definitions
        expected = len(json.dumps([converter.unstructure(s) for s in specs]).encode())
        assert specs_bytes(fresh) == expected
        assert specs_bytes(specs) == expected


def test_specs_unstructure_as_the_tuple_they_are() -> None:
    specs = ToolRegistry([Echo(), Calculator()]).specs()
    assert converter.unstructure(specs) == converter.unstructure(tuple(specs))
    assert [spec["name"] for spec in converter.unstructure(specs)] == ["calculator", "echo"]
    for copied in (copy.deepcopy(specs), pickle.loads(pickle.dumps(specs))):
        assert copied == specs
        assert specs_bytes(copied) == specs_bytes(specs)


async def test_dispatch_always_answers(ctx: ToolContext) -> None:
    registry = ToolRegistry([Echo(), Calculator()])
    unknown = await registry.dispatch(ToolCall("u", "nope", {}), ctx)
    assert unknown.is_error
    assert "calculator, echo" in unknown.content
    assert "'nope'" in unknown.content
    raw = await registry.dispatch(ToolCall("r", "echo", "not json"), ctx)
    assert raw.is_error
    assert "must be a JSON object" in raw.content
    assert "not json" in raw.content
    listed = await registry.dispatch(ToolCall("l", "echo", [1, 2]), ctx)
    assert listed.is_error
    assert "[1, 2]" in listed.content
    crash = await registry.dispatch(ToolCall("c", "echo", {"boom": True}), ctx)
    assert crash.is_error
    assert "RuntimeError: kaput" in crash.content
    assert crash.call_id == "c"


async def test_dispatch_lets_trio_cancellation_through(ctx: ToolContext) -> None:
    class Slow(Echo):
        async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
            await trio.sleep_forever()
            raise AssertionError("unreachable")

    registry = ToolRegistry([Slow("slow")])
    with trio.move_on_after(1) as scope:
        await registry.dispatch(ToolCall("s", "slow", {}), ctx)
    assert scope.cancelled_caught


async def test_output_is_truncated(ctx: ToolContext) -> None:
    registry = ToolRegistry([Echo()], max_output_chars=1000)
    text = "".join(f"line {i}\n" for i in range(1000))
    result = await registry.dispatch(ToolCall("t", "echo", {"text": text}), ctx)
    assert len(result.content) <= 1000
    assert result.content.startswith("line 0\n")
    assert result.content.endswith("line 999\n")
    assert "characters cut" in result.content
    assert "offset/limit" in result.content


def test_effects_per_call() -> None:
    registry = ToolRegistry([Echo(), WriteFile(), ReadFile()])
    assert registry.effects(ToolCall("1", "echo", {})).read_only
    assert registry.effects(ToolCall("2", "echo", {"boom": True})).unknown
    write = registry.effects(ToolCall("3", "write_file", {"file_path": "a", "content": ""}))
    assert not write.read_only
    assert write.write_paths == ("a",)
    assert registry.effects(ToolCall("4", "read_file", {"file_path": "a"})) == Effects.read("a")
    assert registry.effects(ToolCall("5", "nope", {})) == Effects.none()
    assert registry.effects(ToolCall("6", "read_file", "junk")) == Effects.none()
    assert not Effects.unknown_effects().read_only
    union = Effects.union([Effects.read("a"), Effects.write("b")])
    assert union.writes
    assert union.read_paths == ("a", "b")
    assert union.write_paths == ("b",)
    with pytest.raises(ValueError, match="write_paths"):
        Effects(write_paths=("x",))


def test_truncate_middle_emoji() -> None:
    text = "😀" * 5000
    out = truncate_middle(text, 500)
    assert len(out) == 500
    assert out.startswith("😀")
    assert out.endswith("😀")
    cut = int(out.split("[... ")[1].split(" ")[0])
    kept = out[: out.index("\n[")] + out[out.index("]\n") + 2 :]
    assert len(kept) + cut == 5000
    assert set(kept) == {"😀"}
    out.encode("utf-8")  # no lone surrogates or split characters


def test_truncate_middle_short_text_and_bounds() -> None:
    assert truncate_middle("short", 200) == "short"
    assert truncate_middle("x" * 200, 200) == "x" * 200
    with pytest.raises(ValueError, match="at least"):
        truncate_middle("x", 10)


@given(st.text(min_size=0, max_size=3000), st.integers(min_value=200, max_value=2500))
def test_truncate_middle_properties(text: str, limit: int) -> None:
    out = truncate_middle(text, limit)
    assert len(out) <= limit
    if len(text) <= limit:
        assert out == text
    else:
        marker_start = out.index("\n[... ")
        marker_end = out.index(" ...]\n", marker_start) + len(" ...]\n")
        head, tail = out[:marker_start], out[marker_end:]
        cut = int(out[marker_start + len("\n[... ") :].split(" ")[0])
        assert text.startswith(head)
        assert text.endswith(tail)
        assert len(head) + len(tail) + cut == len(text)


class Annotated:
    """A tool from elsewhere (no `summary`), whose schema has a property named `description`
    and instance data that looks like an annotation."""

    name = "annotated"
    description = (
        "Look something up, e.g. `x.y` in a table. It reads the table from disk.\n\n"
        "More detail that a small model does not need."
    )
    input_schema: Final[dict[str, Any]] = {
        "type": "object",
        "description": "The lookup. Two sentences here.",
        "properties": {
            "description": {"type": "string", "description": "What to find. Then more."},
            "mode": {
                "type": "string",
                "enum": ["a", "b"],
                "default": "a",
                "description": "How. Then a long explanation of the modes.",
            },
            "items": {
                "type": "array",
                "items": {"type": "object", "properties": {"k": {"description": "K. More."}}},
                "examples": [[{"description": "Kept. As it is."}]],
            },
        },
        "required": ["description"],
        "additionalProperties": False,
    }
    cancellation = Cancellation.SAFE_TO_ABANDON

    def effects(self, args: Args) -> Effects:
        return Effects.none()

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        return ToolOutput("found")


def test_compact_specs_have_a_sentence_of_description_and_accept_the_same_arguments() -> None:
    registry = ToolRegistry([Annotated(), Calculator()])
    full = {s.name: s for s in registry.specs()}
    compact = {s.name: s for s in registry.specs(compact=True)}
    assert list(compact) == list(full)
    assert compact["annotated"].description == "Look something up, e.g. `x.y` in a table."
    assert compact["calculator"].description == "Do arithmetic on two numbers."
    schema = compact["annotated"].input_schema
    assert "description" not in schema
    props = schema["properties"]
    assert props["description"] == {"type": "string"}  # a property may be called description
    assert props["mode"] == {"type": "string", "enum": ["a", "b"], "default": "a"}
    assert props["items"]["items"]["properties"]["k"] == {}
    assert props["items"]["examples"] == [[{"description": "Kept. As it is."}]]  # data, kept

    def without_annotations(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: v if k == "examples" else without_annotations(v)
                for k, v in value.items()
                if not (k == "description" and isinstance(v, str))
            }
        if isinstance(value, list):
            return [without_annotations(v) for v in value]
        return value

    # Only annotations went: the same arguments are accepted and refused.
    assert schema == without_annotations(full["annotated"].input_schema)
    assert registry.specs(compact=True) == registry.specs(compact=True)  # stable across calls


def test_every_native_tool_has_a_short_summary_and_compact_specs_are_far_smaller(
    tmp_path: Path,
) -> None:
    from anvild.agent.tools.base import brief_description
    from anvild.beads.tools import bead_tools
    from anvild.mail import mail_tools
    from anvild.session.manager import chain_tools, default_tools
    from anvild.session.session import ToolSetup

    setup = ToolSetup(tmp_path, "developer", ReadOnly(), None, session_id="s1")  # type: ignore[arg-type]
    unused: Any = object()  # the factories only bind these; no call is made
    tools = chain_tools(default_tools, mail_tools(unused, unused, unused), bead_tools(unused))(
        setup
    )
    assert len(tools) == 16
    for tool in tools:
        summary = getattr(tool, "summary", "")
        assert 40 <= len(summary) <= 240, f"{tool.name}: summary of {len(summary)} characters"
        assert brief_description(tool) == " ".join(summary.split())
    registry = ToolRegistry(tools)

    def size(specs: Any) -> int:
        return sum(len(json.dumps([s.name, s.description, s.input_schema])) for s in specs)

    assert size(registry.specs(compact=True)) < 0.4 * size(registry.specs())


@given(st.text())
def test_first_sentence_is_a_nonempty_prefix_of_the_first_paragraph(text: str) -> None:
    from anvild.agent.tools.base import first_sentence

    paragraph = " ".join(text.strip().split("\n\n", 1)[0].split())
    sentence = first_sentence(text)
    assert paragraph.startswith(sentence)
    assert bool(sentence) == bool(paragraph)
