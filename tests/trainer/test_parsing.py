"""`trainer.parsing`: tool calls out of what real models emit, and a reason when there are none."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from trainer import parsing
from trainer.contracts import ToolCall
from trainer.parsing import (
    INVALID_CALL,
    INVALID_JSON,
    NO_CALL,
    TOO_DEEP,
    TOO_LARGE,
    UNSUPPORTED_SYNTAX,
    parse_tool_calls,
)

EXTERNAL = Path(__file__).resolve().parents[3] / "shared" / "external"
CALL = ToolCall("calendar.create_event", {"attendee": "Alex", "time": "14:00"})
ARGUMENTS = '{"attendee": "Alex", "time": "14:00"}'


@pytest.mark.parametrize(
    "output",
    [
        '{"tool": "calendar.create_event", "args": ' + ARGUMENTS + "}",
        '{"name": "calendar.create_event", "arguments": ' + ARGUMENTS + "}",
        '{"name": "calendar.create_event", "parameters": ' + ARGUMENTS + "}",
        '{"function": {"name": "calendar.create_event", "arguments": ' + json.dumps(ARGUMENTS) + "}}",
        '{"tool_calls": [{"type": "function", "function": {"name": "calendar.create_event", "arguments": '
        + json.dumps(ARGUMENTS)
        + "}}]}",
        '{"calendar.create_event": ' + ARGUMENTS + "}",
        '<tool_call>\n{"name": "calendar.create_event", "arguments": ' + ARGUMENTS + "}\n</tool_call>",
        'Sure.\n```json\n{"name": "calendar.create_event", "arguments": ' + ARGUMENTS + "}\n```",
        'calendar.create_event(attendee="Alex", time="14:00")',
        "[calendar.create_event(attendee='Alex', time='14:00')]",
        "```python\ncalendar.create_event(attendee='Alex', time='14:00')\n```",
        'calendar.create_event.func(attendee="Alex", time="14:00")',
        'I will book it: {"name": "calendar.create_event", "arguments": ' + ARGUMENTS + "} now.",
        'Booking now.\ncalendar.create_event(attendee="Alex", time="14:00")',
        '<think>maybe {"name": "other"}</think>{"name": "calendar.create_event", "arguments": ' + ARGUMENTS + "}",
    ],
    ids=lambda output: output[:40],
)
def test_it_reads_one_call_in_every_supported_shape(output):
    result = parse_tool_calls(output)
    assert result.ok, result.error
    assert result.calls == [CALL]


@pytest.mark.parametrize(
    "output",
    [
        {
            "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "calendar.create_event", "arguments": ARGUMENTS}}
            ]
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"function": {"name": "calendar.create_event", "arguments": ARGUMENTS}}],
        },
        [
            {"type": "reasoning", "summary": []},
            {"type": "function_call", "name": "calendar.create_event", "arguments": ARGUMENTS},
        ],
        {"type": "tool_use", "id": "t1", "name": "calendar.create_event", "input": json.loads(ARGUMENTS)},
        {"role": "assistant", "content": '{"name": "calendar.create_event", "arguments": ' + ARGUMENTS + "}"},
    ],
    ids=["openai-tool-calls", "openai-message", "responses-items", "anthropic-tool-use", "message-content"],
)
def test_it_reads_structured_outputs(output):
    assert parse_tool_calls(output).calls == [CALL]


def test_it_reads_lists_and_lines_of_calls_in_order():
    expected = [ToolCall("a", {}), ToolCall("b", {"x": 1})]
    assert parse_tool_calls('[{"name": "a"}, {"name": "b", "arguments": {"x": 1}}]').calls == expected
    assert parse_tool_calls('{"name": "a"}\n{"name": "b", "arguments": {"x": 1}}').calls == expected
    assert parse_tool_calls("[a(), b(x=1)]").calls == expected
    assert parse_tool_calls("<tool_call>a()</tool_call><tool_call>b(x=1)</tool_call>").calls == expected


def test_it_reads_python_literals_without_evaluating_them():
    result = parse_tool_calls("f(a=(1, 2), b=-3.5, c=[True, None], d={'k': 'v'}, e=math.pi, g=lambda x: x**2, h=true)")
    assert result.calls[0].arguments == {
        "a": (1, 2), "b": -3.5, "c": [True, None], "d": {"k": "v"}, "e": "math.pi", "g": "lambda x: x**2", "h": True,
    }  # fmt: skip


def test_it_reads_an_empty_list_as_no_calls():
    result = parse_tool_calls("[]")
    assert result.ok and result.calls == []


@pytest.mark.parametrize(
    ("output", "kind", "message"),
    [
        ("", NO_CALL, "the output is empty"),
        (None, NO_CALL, "the output is empty"),
        ("The weather is nice today.", NO_CALL, "no tool call found"),
        ('{"name": "f", "arguments": {"a": 1,}}', INVALID_JSON, "invalid JSON at position 35"),
        ("{'name': 'f'}", INVALID_JSON, "invalid JSON at position 1"),
        ('{"name": "f", "arguments": "{oops"}', INVALID_JSON, "the arguments of f are invalid JSON at position 1"),
        ('{"name": "f", "arguments": [1, 2]}', INVALID_CALL, "the arguments of f are a JSON array, not an object"),
        ('{"answer": 42}', INVALID_CALL, "no tool name (keys: answer)"),
        ('[{"name": ""}]', INVALID_CALL, "empty tool name"),
        ("f(1, 2)", UNSUPPORTED_SYNTAX, "positional arguments in the call to f"),
        ("f(**options)", UNSUPPORTED_SYNTAX, "**-unpacking"),
        ("f(x=2 ** 3)", UNSUPPORTED_SYNTAX, "BinOp is not a literal value"),
        ("f(x={1, 2})", UNSUPPORTED_SYNTAX, "Set is not a literal value"),
        ("f(x=1", UNSUPPORTED_SYNTAX, "not a JSON call nor a Python call"),
        (42, UNSUPPORTED_SYNTAX, "the output is a int"),
        ("x" * (parsing.MAX_OUTPUT_CHARS + 1), TOO_LARGE, "over the 1000000 limit"),
        ("[" * 10_000 + "]" * 10_000, TOO_DEEP, "nested too deeply"),
        ('{"a": ' * 10_000 + "1" + "}" * 10_000, TOO_DEEP, "nested too deeply"),
    ],
    ids=lambda value: str(value)[:30],
)
def test_it_says_why_no_call_could_be_read(output, kind, message):
    result = parse_tool_calls(output)
    assert (result.ok, result.error_kind) == (False, kind)
    assert message in (result.error or "")


def test_it_refuses_arguments_nested_deeper_than_the_limit():
    arguments: dict = {}
    for _ in range(10_000):
        arguments = {"a": arguments}
    result = parse_tool_calls({"name": "f", "arguments": arguments})
    assert result.error_kind == TOO_DEEP


def test_it_reads_every_sampled_workbench_answer():
    answers = []
    for path in sorted((EXTERNAL / "workbench" / "processed" / "queries_and_answers").glob("*.csv")):
        with path.open(encoding="utf-8") as rows:
            answers.extend(row["answer"] for row in csv.DictReader(rows))
    sample = answers[::3]
    results = [parse_tool_calls(answer) for answer in sample]
    assert len(sample) > 200
    assert all(result.ok for result in results), [r.error for r in results if not r.ok][:3]
    assert any(call.name == "calendar.delete_event" for result in results for call in result.calls)
    assert not any(call.name.endswith(".func") for result in results for call in result.calls)


def test_it_reads_the_tool_calls_in_real_gpt4o_trajectories():
    trajectories = json.loads((EXTERNAL / "tau_bench" / "gpt-4o-airline.json").read_text(encoding="utf-8"))
    messages = [m for t in trajectories[:40] for m in t["traj"] if m.get("role") == "assistant" and m.get("tool_calls")]
    results = [parse_tool_calls(message) for message in messages]
    assert len(messages) > 100
    assert all(
        result.ok and len(result.calls) == len(m["tool_calls"]) for result, m in zip(results, messages, strict=True)
    )


def test_it_reads_the_function_calls_in_real_nemo_gym_rollouts():
    lines = (EXTERNAL / "nemo_gym" / "workplace_assistant" / "example_rollouts.jsonl").read_text().splitlines()
    outputs = [json.loads(line)["response"]["output"] for line in lines]
    expected = [sum(item.get("type") == "function_call" for item in output) for output in outputs]
    assert [len(parse_tool_calls(output).calls) for output in outputs] == expected
    assert sum(expected) > 0


@pytest.mark.parametrize(
    "text",
    [
        "[f(a=(1)), g(b=(1,), c=())]", "[f(a=1,), ]", "f()", "[f(a=.5), g.h.func(b=5.)]", "[f(a=-0.5e-3, b=1e999)]",
        "[f(a={'k': (1, [2, {'z': None}])})]", "[f(a=True, b=null, c=false)]", "[f(a='é', b=\"it's\")]", "[f(a=0)]",
        "[f(a=007)]", "[f(a=1, a=2)]", "[f(a='x' 'y')]", "[f(a=r'x')]", "[f(a=1j)]", "[f(a=1_000)]", "[f(a='it\\'s')]",
        "[f(class=1)]", "[f(a=b)]", "[f(a={1: 2})]", "[f(a=+1)]", "[f(a=- 1)]", "[f(a=(,))]", "[f(a=1,,b=2)]",
        "[f(a)]", "[f(a=[1 2])]", "[café(a=1)]", "[f(a=0x10)]", "[lambda(a=1)]", "[f.if(a=1)]", "[f(a=1)] x",
    ],
)  # fmt: skip
def test_its_fast_reader_agrees_with_the_ast_reader(text):
    fast = parsing._read_plain_calls(text)
    try:
        slow = parsing._calls_from_python_ast(text)
    except parsing._ParseFailure:
        slow = None
    assert fast is None or fast == slow


@pytest.mark.parametrize(
    ("output", "syntax"),
    [
        ('{"name": "f"}', "json"),
        ("[f(x=1)]", "python"),
        ("<tool_call>f()</tool_call>", "tool_call_tag"),
        ("```\nf()\n```", "code_fence"),
        ('Calling {"name": "f"}', "prose_json"),
        ("Calling:\nf()", "prose_python"),
        ({"name": "f"}, "structured"),
    ],
)
def test_it_says_which_syntax_it_read(output, syntax):
    assert parse_tool_calls(output).syntax == syntax


@pytest.mark.parametrize(
    ("output", "is_json"),
    [
        ('{"name": "f"}', True),
        ('{"name": "f"}\n{"name": "g"}', True),
        ('<tool_call>{"name": "f"}</tool_call><tool_call>{"name": "g"}</tool_call>', True),
        ('```json\n{"name": "f"}\n```', True),
        ('Calling {"name": "f"}', True),
        ({"name": "f"}, True),
        ("f(x=1)", False),
        ("[f(x=1)]", False),
        ("```python\nf(x=1)\n```", False),
        ('<tool_call>{"name": "f"}</tool_call><tool_call>g(x=1)</tool_call>', False),  # one block in Python
        ("Calling:\nf()", False),
        ('{"name": "f"}\n{"name": "g", "arguments": {', False),  # a malformed call block, one call read from it
    ],
)
def test_it_says_whether_every_call_block_was_well_formed_json(output, is_json):
    parsed = parse_tool_calls(output)
    assert parsed.calls and parsed.json is is_json
