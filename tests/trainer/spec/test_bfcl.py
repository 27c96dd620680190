"""Importing BFCL tasks: ids kept, tools in OpenAI form with JSON Schema types, answers as alternatives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.contracts import ContractError, Task
from trainer.spec.bfcl import bfcl_tool, json_schema, load_bfcl_tasks

BFCL = Path(__file__).resolve().parents[4] / "shared" / "external" / "bfcl"


def load(category: str, answers: bool = True) -> list[Task]:
    answer_file = BFCL / "possible_answer" / f"BFCL_v4_{category}.json" if answers else None
    return load_bfcl_tasks(BFCL / f"BFCL_v4_{category}.json", answer_file)


@pytest.mark.parametrize(
    ("category", "count"), [("simple_python", 400), ("multiple", 200), ("parallel", 200), ("parallel_multiple", 200)]
)
def test_it_imports_every_task_of_a_category_keeping_ids(category, count):
    tasks = load(category)
    assert len(tasks) == count
    assert tasks[0].id == f"{category}_0"
    assert all(task.expected_calls and not task.no_call_expected for task in tasks)
    assert {task.metadata.source for task in tasks} == {f"bfcl:{category}"}


def test_it_imports_irrelevance_tasks_as_no_call_tasks():
    tasks = load("irrelevance", answers=False)
    assert len(tasks) == 240
    assert all(task.no_call_expected and not task.expected_calls for task in tasks)


def test_it_keeps_the_question_and_the_answer_alternatives():
    task = load("parallel_multiple")[3]
    assert task.messages[0]["role"] == "user"
    assert task.expected_calls[1].name == "get_rectangle_property"
    assert task.expected_calls[1].arguments["tolerance"] == ["", 0.1]


def test_it_writes_tools_in_openai_form_with_json_schema_types():
    tool = bfcl_tool({"name": "f", "description": "d", "parameters": {"type": "dict", "properties": {
        "ratio": {"type": "float"}, "pair": {"type": "tuple", "items": {"type": "integer"}},
        "options": {"type": "dict", "properties": {"x": {"type": "any"}}}}, "required": ["ratio"]}})  # fmt: skip
    assert tool["type"] == "function" and tool["function"]["name"] == "f"
    assert tool["function"]["parameters"] == {"type": "object", "required": ["ratio"], "properties": {
        "ratio": {"type": "number"}, "pair": {"type": "array", "x-bfcl-type": "tuple", "items": {"type": "integer"}},
        "options": {"type": "object", "properties": {"x": {"x-bfcl-type": "any"}}}}}  # fmt: skip


def test_it_keeps_schema_keys_it_does_not_convert():
    assert json_schema({"type": "string", "enum": ["a"], "default": "a"}) == {
        "type": "string",
        "enum": ["a"],
        "default": "a",
    }


def test_it_round_trips_imported_tasks_through_native_json():
    for task in load("multiple")[:50]:
        assert Task.from_json(json.loads(task.to_json_line())) == task


def test_it_refuses_a_question_without_an_answer(tmp_path):
    answers = tmp_path / "answers.json"
    answers.write_text('{"id": "simple_python_1", "ground_truth": []}\n')
    with pytest.raises(ContractError, match="no answer for task simple_python_0"):
        load_bfcl_tasks(BFCL / "BFCL_v4_simple_python.json", answers)


def test_it_refuses_multi_turn_questions(tmp_path):
    questions = tmp_path / "questions.json"
    turn = [{"role": "user", "content": "hi"}]
    questions.write_text(json.dumps({"id": "multi_turn_0", "question": [turn, turn], "function": []}) + "\n")
    with pytest.raises(ContractError, match="multi_turn_0: multi-turn BFCL tasks are not supported"):
        load_bfcl_tasks(questions)


def test_it_names_the_line_of_invalid_json(tmp_path):
    questions = tmp_path / "questions.json"
    questions.write_text("\n{oops\n")
    with pytest.raises(ContractError, match=r"questions.json:2: invalid JSON"):
        load_bfcl_tasks(questions)
