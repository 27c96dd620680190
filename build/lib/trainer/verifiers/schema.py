"""Schema validity of tool calls: does each call name an offered tool and fit that tool's parameters?

The one implementation of this check: the replay's scores (`answer`), the shaped reward's valid
artifact (`shaped.artifact_problems`, which finds the tool by its own name matching and then calls
`arguments_problems`) and the app's online `schema` scorer all use it; the app's inferred catalogue
names observed values with `json_type`. It needs no expected answer. For each call: the tool is in
the offered catalogue (names compared exactly), every `required` argument is present, no argument
is unknown where the schema lists its `properties` (a tool that lists none, or that sets
`additionalProperties: true`, takes anything), and each value has its declared JSON type (BFCL's
`x-bfcl-type` where given, else `type`, as a name or a list; BFCL's `dict`, `float`, `tuple`,
`list` and `any` read as JSON Schema's `object`, `number`, `array`, `array` and anything) and, where
given, is one of its `enum`. Nested schemas are not walked: an object or array argument is checked
for its own type only. Types it does not know are not held against the call. Matching calls against
an expected answer is `trainer.verifiers.matching`'s work.

    >>> tools = {"find_order": {"type": "object", "properties": {"order": {"type": "integer"}}, "required": ["order"]}}
    >>> call_problems(ToolCall("find_order", {"order": "17"}), tools)
    ["find_order: argument 'order' must be integer, got string"]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trainer.contracts import ToolCall

_ALIASES = {"dict": "object", "float": "number", "tuple": "array", "list": "array", "int": "integer",
            "str": "string", "bool": "boolean"}  # fmt: skip
_ANY = "any"


def json_type(value: Any) -> str:
    """The JSON Schema type name of a decoded JSON value (an int is `integer`; a bool never is)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list | tuple) else "object"  # a tuple: from a Python-syntax call


def _fits(value: Any, declared: Any) -> bool | None:
    """Whether `value` has a declared type; None when no type it knows is declared."""
    names = [declared] if isinstance(declared, str) else list(declared) if isinstance(declared, list) else []
    known = [_ALIASES.get(name, name) for name in names if isinstance(name, str)]
    if not known or _ANY in known:
        return None
    actual = json_type(value)
    return actual in known or (actual == "integer" and "number" in known)


def call_problems(call: ToolCall, schemas: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What is wrong with one call against the offered tools' parameter schemas; empty when nothing is."""
    if call.name not in schemas:
        return [f"{call.name}: not an offered tool"]
    return arguments_problems(call, schemas[call.name] or {})


def arguments_problems(call: ToolCall, schema: Mapping[str, Any]) -> list[str]:
    """What is wrong with the call's arguments against its tool's `parameters` schema; empty when nothing is."""
    properties = schema.get("properties") or {}
    closed = bool(properties) and schema.get("additionalProperties") is not True
    problems = [f"{call.name}: missing required argument '{name}'"
                for name in schema.get("required") or [] if name not in call.arguments]  # fmt: skip
    for name, value in call.arguments.items():
        if name not in properties:
            if closed:
                problems.append(f"{call.name}: unknown argument '{name}'")
            continue
        declared = properties[name] or {}
        kind = declared.get("x-bfcl-type") or declared.get("type")
        if _fits(value, kind) is False:
            problems.append(f"{call.name}: argument '{name}' must be {_type_text(kind)}, got {json_type(value)}")
        elif isinstance(declared.get("enum"), list) and value not in declared["enum"]:
            problems.append(f"{call.name}: argument '{name}' is not one of its allowed values")
    return problems


def calls_problems(calls: Sequence[ToolCall], schemas: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """`call_problems` of every call, in call order."""
    return [problem for call in calls for problem in call_problems(call, schemas)]


def _type_text(declared: Any) -> str:
    return " or ".join(declared) if isinstance(declared, list) else str(declared)
