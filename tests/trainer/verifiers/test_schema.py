"""Schema validity of tool calls against the offered tools' parameter schemas."""

from __future__ import annotations

import pytest

from trainer.contracts import ExpectedCall, Task, ToolCall
from trainer.verifiers.schema import arguments_problems, call_problems, calls_problems, json_type
from trainer.verifiers.shaped import artifact_problems

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


def test_a_schema_that_allows_extras_takes_unknown_arguments():
    schema = {"properties": {"order": {"type": "integer"}}, "additionalProperties": True}
    assert arguments_problems(ToolCall("find_order", {"order": 1, "colour": "red"}), schema) == []
    closed = {"properties": {"order": {"type": "integer"}}}
    assert arguments_problems(ToolCall("find_order", {"order": 1, "colour": "red"}), closed) == [
        "find_order: unknown argument 'colour'"
    ]


def test_bfcls_own_type_is_read_before_the_json_schema_one_and_a_tuple_is_an_array():
    """BFCL writes `type: array` with `x-bfcl-type: tuple`; a Python-syntax call parses a tuple."""
    schema = {"properties": {"point": {"type": "array", "x-bfcl-type": "tuple"},
                             "size": {"type": "string", "x-bfcl-type": "float"}}}  # fmt: skip
    assert arguments_problems(ToolCall("draw", {"point": (1, 2), "size": 2}), schema) == []
    assert arguments_problems(ToolCall("draw", {"point": (1, 2), "size": "2"}), schema) == [
        "draw: argument 'size' must be float, got string"
    ]
    assert json_type((1, 2)) == "array"


def test_the_shaped_rewards_artifact_and_the_answer_scores_read_one_check():
    """The shaped reward finds the tool by its own name matching, then asks the same per-tool check."""
    task = Task(id="t", messages=[{"role": "user", "content": "find 1"}],
                tools=[{"type": "function", "function": {"name": "find_order", "parameters": SCHEMAS["find_order"]}}],
                expected_calls=[ExpectedCall("find_order", {"order": [1]})])  # fmt: skip
    calls = [ToolCall("find_order", {"order": 1, "status": "lost"})]
    assert artifact_problems(task, calls) == calls_problems(calls, task.tool_schemas) == [
        "find_order: argument 'status' is not one of its allowed values"
    ]
