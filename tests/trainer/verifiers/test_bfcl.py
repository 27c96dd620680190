"""The `bfcl` verifier: BFCL's AST-checker rules, and the differences from BFCL we chose.

Every difference measured by bench/bfcl_agreement.py has a test here that pins our side.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.bfcl_perturbations import answer_calls, as_python, variants
from tests.trainer.golden_cases import check_golden, golden_cases
from trainer.contracts import ExpectedCall, Task, ToolCall
from trainer.spec.bfcl import load_bfcl_tasks
from trainer.verifiers.bfcl import BfclVerifier, check_parameter, standardise

BFCL = Path(__file__).resolve().parents[4] / "shared" / "external" / "bfcl"
CATEGORIES = ["simple_python", "multiple", "parallel", "parallel_multiple"]


def one_parameter_task(spec: dict, alternatives: list) -> Task:
    tool = {"name": "f", "parameters": {"type": "object", "properties": {"x": spec}, "required": ["x"]}}
    return Task("t", [], [{"type": "function", "function": tool}], [ExpectedCall("f", {"x": alternatives})])


def bfcl_tasks(category: str) -> list[Task]:
    return load_bfcl_tasks(BFCL / f"BFCL_v4_{category}.json", BFCL / "possible_answer" / f"BFCL_v4_{category}.json")


@pytest.mark.parametrize("case", golden_cases("bfcl"), ids=lambda case: case.name)
def test_it_gives_the_golden_reward(case):
    check_golden("bfcl", case)


def test_it_normalises_strings_as_bfcl_does():
    assert standardise(" New-York_City, N.Y./*^ ") == "newyorkcityny"
    assert standardise("it's") == 'it"s'
    assert standardise("a\tb") == "a\tb"


@pytest.mark.parametrize("category", CATEGORIES)
def test_it_passes_every_bfcl_ground_truth(category):
    tasks = bfcl_tasks(category)
    verdicts = BfclVerifier().verify(tasks, [as_python(answer_calls(task)) for task in tasks])
    assert [verdict.reason for verdict in verdicts if not verdict.passed] == []


@pytest.mark.parametrize("category", CATEGORIES)
def test_it_gives_perturbations_the_verdict_bfcl_rules_imply(category):
    verifier = BfclVerifier()
    for task in bfcl_tasks(category)[::8]:
        for variant in variants(task):
            if variant.expected_pass is not None:
                assert verifier.check(task, variant.calls).passed == variant.expected_pass, (task.id, variant.kind)


def test_it_compares_a_value_of_the_answers_own_type_exactly():
    # BFCL lets a model pass a variable by name when the answer does too.
    task = one_parameter_task({"type": "integer"}, ["n"])
    assert BfclVerifier().check(task, [ToolCall("f", {"x": "n"})]).passed
    assert not BfclVerifier().check(task, [ToolCall("f", {"x": "N"})]).passed


def test_it_accepts_list_items_of_the_answers_item_type():
    spec = {"type": "array", "items": {"type": "integer"}}
    assert check_parameter("x", ["apple"], spec, [["apple"]]) is None
    assert check_parameter("x", ["apple"], spec, [[1]]) == "wrong item type in x: expected integer items"
    assert check_parameter("x", [1.0], spec, ["", [2]]) == "invalid value for x: [1.0]"


def test_it_type_checks_only_the_first_level_of_nested_lists():
    spec = {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}
    assert check_parameter("x", [[1.0], [2]], spec, [[[1], [2]]]) is None


def test_it_pairs_parallel_calls_first_fit_like_bfcl():
    task = Task("t", [], [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "integer"}}}}}],
        [ExpectedCall("f", {"x": [1, 2]}), ExpectedCall("f", {"x": [1]})])  # fmt: skip
    assert BfclVerifier().check(task, [ToolCall("f", {"x": 2}), ToolCall("f", {"x": 1})]).passed
    # A perfect pairing exists, but BFCL's first-fit gives call 1 away first; we reproduce that.
    assert not BfclVerifier().check(task, [ToolCall("f", {"x": 1}), ToolCall("f", {"x": 2})]).passed


@pytest.mark.parametrize(
    "wrapped",
    [
        "```python\n{}\n```",
        "Sure, here is the call:\n{}",
        "<tool_call>{}</tool_call>",
        "<think>The user wants this.</think>{}",
    ],
)
def test_it_unwraps_answers_bfcls_prompt_decoder_rejects(wrapped):
    # Disagreement class "format:*": BFCL leaves unwrapping to per-model handlers; we always unwrap.
    task = one_parameter_task({"type": "integer"}, [3])
    assert BfclVerifier().score(task, wrapped.format("[f(x=3)]")).passed


def test_it_reads_calls_written_as_json_text():
    task = one_parameter_task({"type": "integer"}, [3])
    assert BfclVerifier().score(task, '[{"name": "f", "arguments": {"x": 3}}]').passed


def test_it_reads_json_literals_in_python_calls_as_json_values():
    # Disagreement class "format:json_literals": BFCL reads `true` as the string "true".
    task = one_parameter_task({"type": "boolean"}, [True])
    assert BfclVerifier().score(task, "[f(x=true)]").passed


def test_it_refuses_arithmetic_that_bfcls_decoder_evaluates():
    task = one_parameter_task({"type": "integer"}, [8])
    verdict = BfclVerifier().score(task, "[f(x=2**3)]")
    assert not verdict.passed and verdict.reason.startswith("unparseable output")


def test_it_reports_a_task_whose_expected_tool_is_not_offered():
    task = Task("t", [], [], [ExpectedCall("f", {})])
    assert BfclVerifier().check(task, [ToolCall("f", {})]).reason.startswith("task error")
