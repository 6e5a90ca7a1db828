"""The legacy Gemini schema compiler (course 5.1 and 05.B, review finding 6).

Expected outputs are written by hand. The review's three corruptions each have a test: a property
named `title` must survive (and stay required), `$ref` must be rejected with its path rather than
left dangling, and a string-or-integer union must never become a string.
"""

from __future__ import annotations

from typing import Any

import pytest

from anvild.llm.errors import ConfigError
from anvild.llm.schema import MAX_DEPTH, UnsupportedSchema, gemini_schema


def test_property_named_title_stays_present_and_required() -> None:
    schema = {
        "type": "object",
        "title": "CreateIssue",
        "properties": {
            "title": {"type": "string", "title": "Title"},
            "type": {"type": "string", "description": "a property named like a keyword"},
            "format": {"type": "string"},
        },
        "required": ["title", "type"],
    }
    assert gemini_schema(schema) == {
        "type": "OBJECT",
        "title": "CreateIssue",
        "properties": {
            "title": {"type": "STRING", "title": "Title"},
            "type": {"type": "STRING", "description": "a property named like a keyword"},
            "format": {"type": "STRING"},
        },
        "required": ["title", "type"],
    }


def test_ref_is_rejected_with_its_path() -> None:
    schema = {
        "type": "object",
        "properties": {"owner": {"$ref": "#/$defs/User"}},
        "$defs": {"User": {"type": "object", "properties": {"name": {"type": "string"}}}},
    }
    with pytest.raises(UnsupportedSchema) as info:
        gemini_schema(schema)
    assert info.value.path == "$.properties.owner['$ref']"
    assert "references" in str(info.value)
    assert isinstance(info.value, ConfigError)


def test_defs_alone_are_rejected_too() -> None:
    with pytest.raises(UnsupportedSchema) as info:
        gemini_schema({"type": "object", "$defs": {"A": {"type": "string"}}})
    assert info.value.path == "$['$defs']"


def test_string_or_integer_is_kept_as_a_union_never_narrowed() -> None:
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": ["string", "integer"], "description": "name or number", "minimum": 1}
        },
    }
    assert gemini_schema(schema) == {
        "type": "OBJECT",
        "properties": {
            "id": {
                "description": "name or number",
                "anyOf": [{"type": "STRING"}, {"type": "INTEGER", "minimum": 1}],
            }
        },
    }


def test_anyof_string_or_integer_is_kept() -> None:
    assert gemini_schema({"anyOf": [{"type": "string"}, {"type": "integer"}]}) == {
        "anyOf": [{"type": "STRING"}, {"type": "INTEGER"}]
    }


def test_oneof_becomes_anyof_which_only_widens() -> None:
    assert gemini_schema({"oneOf": [{"type": "string"}, {"type": "boolean"}]}) == {
        "anyOf": [{"type": "STRING"}, {"type": "BOOLEAN"}]
    }


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": ["string", "null"]}, {"type": "STRING", "nullable": True}),
        ({"type": "string", "nullable": True}, {"type": "STRING", "nullable": True}),
        (
            {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "null"}], "description": "d"},
            {"description": "d", "type": "STRING", "maxLength": 5, "nullable": True},
        ),
        (
            {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
            {"anyOf": [{"type": "STRING"}, {"type": "INTEGER"}], "nullable": True},
        ),
        ({"enum": ["a", "b", None]}, {"enum": ["a", "b"], "type": "STRING", "nullable": True}),
        ({"type": "null"}, {"type": "NULL"}),
    ],
    ids=["type-list", "openapi-nullable", "anyof-collapses", "anyof-union", "enum", "null-only"],
)
def test_nullable_handling(schema: dict[str, Any], expected: dict[str, Any]) -> None:
    assert gemini_schema(schema) == expected


def test_nested_arrays_and_objects() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "edits": {
                "type": "array",
                "minItems": 1,
                "uniqueItems": True,
                "items": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "pattern": "^[^/]", "examples": ["a.txt"]},
                        "lines": {
                            "type": "array",
                            "items": {"type": "array", "items": {"type": "integer"}},
                        },
                        "mode": {"enum": ["replace", "insert"], "default": "replace"},
                    },
                    "required": ["path"],
                },
            },
            "dry_run": {"type": "boolean", "x-internal": True},
            "ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        },
        "required": ["edits"],
    }
    assert gemini_schema(schema) == {
        "type": "OBJECT",
        "properties": {
            "edits": {
                "type": "ARRAY",
                "minItems": 1,
                "items": {
                    "type": "OBJECT",
                    "properties": {
                        "path": {"type": "STRING", "pattern": "^[^/]"},
                        "lines": {
                            "type": "ARRAY",
                            "items": {"type": "ARRAY", "items": {"type": "INTEGER"}},
                        },
                        "mode": {
                            "type": "STRING",
                            "enum": ["replace", "insert"],
                            "default": "replace",
                        },
                    },
                    "required": ["path"],
                },
            },
            "dry_run": {"type": "BOOLEAN"},
            "ratio": {"type": "NUMBER", "maximum": 1},
        },
        "required": ["edits"],
    }


def test_integer_enum_uses_the_enum_format_with_string_values() -> None:
    assert gemini_schema({"type": "integer", "enum": [101, 201]}) == {
        "type": "INTEGER",
        "format": "enum",
        "enum": ["101", "201"],
    }


def test_const_string_is_a_one_value_enum() -> None:
    assert gemini_schema({"const": "v1"}) == {"type": "STRING", "enum": ["v1"]}


def test_single_member_allof_is_merged() -> None:
    assert gemini_schema({"allOf": [{"type": "string"}], "description": "d"}) == {
        "type": "STRING",
        "description": "d",
    }


def test_properties_are_inferred_as_an_object() -> None:
    assert gemini_schema({"properties": {"a": {"type": "string"}}}) == {
        "properties": {"a": {"type": "STRING"}},
        "type": "OBJECT",
    }


@pytest.mark.parametrize(
    ("schema", "path"),
    [
        (
            {"type": "object", "properties": {"a": {"not": {"type": "string"}}}},
            "$.properties.a.not",
        ),
        ({"allOf": [{"type": "string"}, {"minLength": 1}]}, "$.allOf"),
        ({"type": "array", "items": [{"type": "string"}]}, "$.items"),
        ({"type": "array", "prefixItems": [{"type": "string"}]}, "$.prefixItems"),
        ({"type": "object", "additionalProperties": {"type": "integer"}}, "$.additionalProperties"),
        ({"type": "number", "enum": [1.5, 2.5]}, "$.enum"),
        ({"type": "object", "properties": {"a b": True}}, "$.properties['a b']"),
        ({"type": "string", "if": {"minLength": 1}}, "$.if"),
        ({"type": "strin"}, "$.type"),
        ({"type": "string", "contentSchema": {}}, "$.contentSchema"),
        ({"anyOf": [{"type": "string"}, {"$ref": "#/x"}]}, "$.anyOf[1]['$ref']"),
        ({"type": ["string", "integer"], "anyOf": [{"minLength": 1}]}, "$.type"),
    ],
    ids=[
        "not",
        "allof-intersection",
        "tuple-items",
        "prefix-items",
        "map",
        "number-enum",
        "boolean-schema",
        "conditional",
        "unknown-type",
        "unknown-keyword",
        "ref-in-union",
        "type-union-and-anyof",
    ],
)
def test_unsupported_constructs_are_rejected_with_their_path(
    schema: dict[str, Any], path: str
) -> None:
    with pytest.raises(UnsupportedSchema) as info:
        gemini_schema(schema)
    assert info.value.path == path
    assert str(info.value).startswith(f"{path}: ")


def test_depth_is_bounded() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(MAX_DEPTH + 1):
        schema = {"type": "array", "items": schema}
    with pytest.raises(UnsupportedSchema, match="deeper than"):
        gemini_schema(schema)


def test_input_is_not_modified() -> None:
    schema = {"type": ["string", "null"], "properties": {"a": {"type": "string"}}}
    before = repr(schema)
    gemini_schema(schema)
    assert repr(schema) == before
