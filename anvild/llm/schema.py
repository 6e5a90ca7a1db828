"""Tool schemas for Gemini's legacy `parameters` field: a deliberately limited compiler.

Targets that accept `parametersJsonSchema` get full JSON Schema verbatim; this compiles JSON
Schema into the `parameters` subset (OpenAPI 3.0 `Schema`) for those that do not. It walks
*schema positions* only (root, `properties` values, `items`, `anyOf`/`oneOf` members, a
one-member `allOf`), so a property named `title` or `type` stays a name. Each keyword is kept,
translated (type names upper-cased, null members -> nullable, integer enums, `oneOf` -> `anyOf`),
dropped where dropping only widens what is accepted, or rejected with the JSON path of the
offending keyword ($ref, multi-member allOf, not, if/then/else, tuple items, ...).
Invariant: a union is never narrowed; a value the original accepts is accepted by the compiled
schema, or the schema is rejected. The keyword table: docs/decisions.md, "Module notes".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from anvild.llm.errors import ConfigError

MAX_DEPTH: Final = 64

_TYPE_NAMES: Final = {
    "string": "STRING",
    "number": "NUMBER",
    "integer": "INTEGER",
    "boolean": "BOOLEAN",
    "array": "ARRAY",
    "object": "OBJECT",
    "null": "NULL",
}

_KEPT: Final = frozenset(
    {
        "description",
        "title",
        "format",
        "pattern",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "required",
        "propertyOrdering",
        "default",
        "example",
    }
)

_DROPPED: Final = frozenset(
    {
        "$schema",
        "$id",
        "$comment",
        "$anchor",
        "examples",
        "readOnly",
        "writeOnly",
        "deprecated",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "uniqueItems",
        "contentMediaType",
        "contentEncoding",
    }
)

_REJECTED: Final = {
    "$ref": "references are not supported by Gemini's legacy `parameters` dialect",
    "$dynamicRef": "references are not supported by Gemini's legacy `parameters` dialect",
    "$defs": "definitions are not supported by Gemini's legacy `parameters` dialect",
    "definitions": "definitions are not supported by Gemini's legacy `parameters` dialect",
    "not": "`not` cannot be expressed in Gemini's legacy `parameters` dialect",
    "if": "conditional schemas cannot be expressed in Gemini's legacy `parameters` dialect",
    "then": "conditional schemas cannot be expressed in Gemini's legacy `parameters` dialect",
    "else": "conditional schemas cannot be expressed in Gemini's legacy `parameters` dialect",
    "prefixItems": "tuple schemas cannot be expressed in Gemini's legacy `parameters` dialect",
    "additionalItems": "tuple schemas cannot be expressed in Gemini's legacy `parameters` dialect",
    "patternProperties": "pattern-keyed maps cannot be expressed in the legacy dialect",
    "propertyNames": "constraints on property names cannot be expressed in the legacy dialect",
    "dependentSchemas": "dependent schemas cannot be expressed in the legacy dialect",
    "dependentRequired": "dependent requirements cannot be expressed in the legacy dialect",
    "contains": "`contains` cannot be expressed in Gemini's legacy `parameters` dialect",
}

# Which keywords belong with which type when a multi-type schema is split into an anyOf.
_TYPE_KEYWORDS: Final = {
    "STRING": frozenset({"format", "pattern", "minLength", "maxLength", "enum"}),
    "NUMBER": frozenset({"format", "minimum", "maximum"}),
    "INTEGER": frozenset({"format", "minimum", "maximum", "enum"}),
    "BOOLEAN": frozenset(),
    "ARRAY": frozenset({"items", "minItems", "maxItems"}),
    "OBJECT": frozenset(
        {"properties", "required", "minProperties", "maxProperties", "propertyOrdering"}
    ),
    "NULL": frozenset(),
}
_TYPED_KEYWORDS: Final = frozenset().union(*_TYPE_KEYWORDS.values())

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class UnsupportedSchema(ConfigError):
    """A tool schema uses something the legacy dialect cannot express. `path` is the JSON path
    of the offending keyword in RFC 9535 normalized notation, from `$` (the schema's root):
    `$.properties.owner['$ref']`, `$.anyOf[1]`."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


def gemini_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Compile a JSON Schema into Gemini's legacy `parameters` Schema, or raise
    `UnsupportedSchema` naming the path of the first construct it cannot express."""
    return _compile(schema, "$", 0)


def _member(path: str, key: str) -> str:
    return f"{path}.{key}" if _IDENTIFIER.match(key) else f"{path}[{key!r}]"


def _compile(schema: object, path: str, depth: int) -> dict[str, Any]:
    if depth > MAX_DEPTH:
        raise UnsupportedSchema(path, f"schema nested deeper than {MAX_DEPTH} levels")
    if isinstance(schema, bool):
        raise UnsupportedSchema(
            path, "boolean schemas (true/false) are not supported; write an object schema"
        )
    if not isinstance(schema, Mapping):
        raise UnsupportedSchema(path, f"a schema must be a JSON object, not {_json_type(schema)}")

    out: dict[str, Any] = {}
    nullable = False
    for key, value in schema.items():
        at = _member(path, key)
        if key in _KEPT:
            out[key] = value
        elif key in _DROPPED or key.startswith("x-"):
            continue
        elif key in _REJECTED:
            raise UnsupportedSchema(at, _REJECTED[key])
        elif key == "type":
            continue  # handled below, once every other keyword is known
        elif key == "nullable":
            nullable = nullable or value is True
        elif key in ("enum", "const"):
            values = list(value) if key == "enum" and isinstance(value, list) else [value]
            if key == "enum" and not isinstance(value, list):
                raise UnsupportedSchema(at, "enum must be an array")
            if None in values:
                nullable = True
                values = [v for v in values if v is not None]
            out["enum"] = values
        elif key == "properties":
            if not isinstance(value, Mapping):
                raise UnsupportedSchema(at, "properties must map names to schemas")
            out["properties"] = {
                name: _compile(sub, _member(at, name), depth + 1) for name, sub in value.items()
            }
        elif key == "items":
            if isinstance(value, list):
                raise UnsupportedSchema(at, "tuple-style items (an array of schemas)")
            out["items"] = _compile(value, at, depth + 1)
        elif key in ("additionalProperties", "unevaluatedProperties"):
            if not isinstance(value, bool):
                raise UnsupportedSchema(
                    at,
                    "map-like objects (a schema for additional properties) cannot be expressed "
                    "in the legacy dialect; use a target with parametersJsonSchema",
                )
        elif key in ("anyOf", "oneOf", "allOf"):
            if not isinstance(value, list) or not value:
                raise UnsupportedSchema(at, f"{key} must be a non-empty array of schemas")
            if key == "allOf" and len(value) > 1:
                raise UnsupportedSchema(
                    at, "allOf with several members (an intersection) cannot be expressed"
                )
            if "anyOf" in out:
                raise UnsupportedSchema(at, "anyOf and oneOf together cannot be expressed")
            members = [_compile(sub, f"{at}[{i}]", depth + 1) for i, sub in enumerate(value)]
            if key == "allOf":
                out.update({k: v for k, v in members[0].items() if k not in out})
                continue
            kept = [m for m in members if m.get("type") != "NULL"]
            if len(kept) < len(members):
                nullable = True
            if kept:
                out["anyOf"] = kept
            else:
                out["type"] = "NULL"
        else:
            raise UnsupportedSchema(at, f"keyword {key!r} is not in Gemini's legacy dialect")

    integer_enum = _check_enum(out, schema.get("type"), _member(path, "enum"))
    _apply_type(out, schema.get("type"), _member(path, "type"), integer_enum=integer_enum)
    _collapse_union(out)
    if nullable:
        out["nullable"] = True
    return out


def _check_enum(out: dict[str, Any], declared: object, path: str) -> bool:
    """Check (and for integers, rewrite) an enum; True when it is an integer enum."""
    values = out.get("enum")
    if values is None or all(isinstance(v, str) for v in values):
        return False
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values) and declared in (
        "integer",
        None,
    ):
        # The dialect's enums are strings; integers are written as in Google's reference
        # example, {type: INTEGER, format: enum, enum: ["101", "201"]}.
        out["enum"] = [str(v) for v in values]
        out.setdefault("format", "enum")
        return True
    raise UnsupportedSchema(
        path, "only string or integer enum values can be expressed in the legacy dialect"
    )


def _apply_type(out: dict[str, Any], declared: object, path: str, *, integer_enum: bool) -> None:
    if declared is None:
        # Infer the type the dialect needs from keywords that only make sense for one type.
        if "type" in out or "anyOf" in out:
            pass
        elif integer_enum:
            out["type"] = "INTEGER"
        elif "enum" in out:
            out["type"] = "STRING"
        elif "properties" in out:
            out["type"] = "OBJECT"
        elif "items" in out:
            out["type"] = "ARRAY"
        return
    names = [declared] if isinstance(declared, str) else declared
    if not isinstance(names, list) or not names:
        raise UnsupportedSchema(path, "type must be a type name or a non-empty array of them")
    types: list[str] = []
    for name in names:
        if name not in _TYPE_NAMES:
            raise UnsupportedSchema(path, f"unknown type {name!r}")
        if _TYPE_NAMES[name] not in types:
            types.append(_TYPE_NAMES[name])
    if "NULL" in types and len(types) > 1:
        types.remove("NULL")
        out["nullable"] = True
    if len(types) == 1:
        out["type"] = types[0]
        return
    if "anyOf" in out:
        raise UnsupportedSchema(path, "a type union next to anyOf/oneOf cannot be expressed")
    # Never narrow a union to one of its members: split it into an anyOf, one member per type,
    # each carrying the keywords that apply to that type.
    members = []
    for type_name in types:
        member: dict[str, Any] = {"type": type_name}
        for key in _TYPE_KEYWORDS[type_name]:
            if key in out:
                member[key] = out[key]
        members.append(member)
    for key in _TYPED_KEYWORDS:
        out.pop(key, None)
    out["anyOf"] = members


def _collapse_union(out: dict[str, Any]) -> None:
    """A union left with one member (after removing null) is that member."""
    members = out.get("anyOf")
    if members is None or len(members) != 1:
        return
    del out["anyOf"]
    for key, value in members[0].items():
        out.setdefault(key, value)


def _json_type(value: object) -> str:
    match value:
        case None:
            return "null"
        case str():
            return "a string"
        case int() | float():
            return "a number"
        case list():
            return "an array"
        case _:
            return type(value).__name__
