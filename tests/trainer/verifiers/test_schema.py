"""Schema validity of tool calls against the offered tools' parameter schemas."""

from __future__ import annotations

import pytest

from trainer.contracts import ToolCall
from trainer.verifiers.schema import call_problems, calls_problems, json_type

SCHEMAS = {
    "find_order": {"type": "object", "required": ["order"], "properties": {
        "order": {"type": "integer"}, "note": {"type": ["string", "null"]},
        "status": {"type": "string", "enum": ["open", "shipped"]}, "price": {"type": "number"},
        "filters": {"type": "dict"}, "anything": {}}},
    "ping": {"type": "object"},
}  # fmt: skip


def test_a_call_that_fits_its_schema_has_no_problem():
    call = ToolCall("find_order", {"order": 17, "note": None, "status": "open", "price": 3, "filters": {"a": 1},
                                   "anything": [1]})  # fmt: skip
    assert call_problems(call, SCHEMAS) == []


@pytest.mark.parametrize(("call", "problem"), [
    (ToolCall("cancel_order", {}), "cancel_order: not an offered tool"),
    (ToolCall("find_order", {}), "find_order: missing required argument 'order'"),
    (ToolCall("find_order", {"order": 1, "colour": "red"}), "find_order: unknown argument 'colour'"),
    (ToolCall("find_order", {"order": "17"}), "find_order: argument 'order' must be integer, got string"),
    (ToolCall("find_order", {"order": True}), "find_order: argument 'order' must be integer, got boolean"),
    (ToolCall("find_order", {"order": 1, "note": 5}),
     "find_order: argument 'note' must be string or null, got integer"),
    (ToolCall("find_order", {"order": 1, "status": "lost"}),
     "find_order: argument 'status' is not one of its allowed values"),
    (ToolCall("find_order", {"order": 1, "filters": []}), "find_order: argument 'filters' must be dict, got array"),
])  # fmt: skip
def test_each_way_a_call_misses_its_schema_is_named(call, problem):
    assert call_problems(call, SCHEMAS) == [problem]


def test_a_tool_that_lists_no_properties_takes_any_argument_and_problems_keep_call_order():
    assert call_problems(ToolCall("ping", {"whatever": 1}), SCHEMAS) == []
    calls = [ToolCall("nope"), ToolCall("find_order", {})]
    assert calls_problems(calls, SCHEMAS) == [
        "nope: not an offered tool",
        "find_order: missing required argument 'order'",
    ]


def test_json_types_never_count_a_bool_as_a_number():
    assert [json_type(value) for value in (None, True, 1, 1.5, "x", [], {})] == [
        "null",
        "boolean",
        "integer",
        "number",
        "string",
        "array",
        "object",
    ]
