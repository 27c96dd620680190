"""Hostile and broken completions: every verifier returns a reward and a reason, never raises."""

from __future__ import annotations

import pytest

from tests.trainer.golden_cases import golden_tasks
from trainer.verifiers import get_verifier, verifier_names


def deep_object(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


BAD_OUTPUTS = {
    "empty": "",
    "whitespace": " \n\t ",
    "five_megabytes": "call me " * 655_360,
    "five_megabytes_of_braces": "{" * 5_000_000,
    "deep_json_text": '{"a": ' * 10_000 + "1" + "}" * 10_000,
    "deep_python_text": "f(x=" + "[" * 10_000 + "]" * 10_000 + ")",
    "deep_structured_arguments": {"name": "calendar.create_event", "arguments": deep_object(10_000)},
    "arguments_not_an_object": '{"name": "calendar.create_event", "arguments": "Alex at 2"}',
    "arguments_a_number": '{"name": "calendar.create_event", "arguments": 7}',
    "unknown_tool": '{"name": "launch_rockets", "arguments": {"count": 3}}',
    "tool_calls_not_a_list": {"tool_calls": "calendar.create_event"},
    "null_output": None,
    "number_output": 3.5,
    "binary_noise": "\x00\xff\ufffd" * 1000,
    "many_calls": "[" + ", ".join(f"f{i}(x={i})" for i in range(2000)) + "]",
}


@pytest.mark.parametrize("verifier", verifier_names())
@pytest.mark.parametrize("task_id", ["calendar", "weather-parallel", "no-call"])
@pytest.mark.parametrize("output", BAD_OUTPUTS.values(), ids=BAD_OUTPUTS.keys())
def test_it_scores_bad_input_without_raising(verifier, task_id, output):
    task = golden_tasks()[task_id]
    verdict = get_verifier(verifier).score(task, output)
    assert isinstance(verdict.reward, float) and not verdict.reason.startswith("verifier error")
    assert verdict.reason


@pytest.mark.parametrize("verifier", ["tool_call", "binary", "shaped", "bfcl"])
def test_it_never_passes_bad_input_on_a_task_that_expects_a_call(verifier):
    task = golden_tasks()["calendar"]
    assert not any(get_verifier(verifier).score(task, output).passed for output in BAD_OUTPUTS.values())
