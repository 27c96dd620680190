"""Importing BFCL tasks: ids kept, tools in OpenAI form with JSON Schema types, answers as alternatives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.cli import main
from trainer.contracts import ContractError, Task
from trainer.spec.bfcl import bfcl_task, bfcl_tool, import_bfcl, json_schema, load_bfcl_tasks
from trainer.spec.tasks import load_tasks

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


# live_simple_106-63-0 and live_simple_112-68-0, cut down: BFCL's answer lists no accepted value ([]) for
# optional arguments whose default is [] (live_simple_110-67-0 writes ["", []] for the same function).
RECORD = {"name": "record", "description": "Records the queries of each intent.", "parameters": {
    "type": "dict", "required": ["atm_finder_start"], "properties": {
        "atm_finder_start": {"type": "array", "items": {"type": "string"}, "default": []},
        "bank_hours_start": {"type": "array", "items": {"type": "string"}, "default": []},
        "outofscope": {"type": "array", "items": {"type": "string"}}}}}  # fmt: skip


def record_question(task_id: str) -> dict:
    return {"id": task_id, "question": [[{"role": "user", "content": "Classify: 'Find ATM'"}]], "function": [RECORD]}


def test_an_empty_list_of_accepted_values_for_an_optional_argument_means_omitted_or_its_default():
    truth = [{"record": {"atm_finder_start": [["Find ATM"]], "bank_hours_start": [], "outofscope": []}}]
    task = bfcl_task(record_question("live_simple_106-63-0"), truth)
    assert task.expected_calls[0].arguments == {
        "atm_finder_start": [["Find ATM"]], "bank_hours_start": ["", []], "outofscope": [""]}  # fmt: skip


def test_a_required_argument_without_an_accepted_value_skips_the_question_with_its_reason(tmp_path):
    questions = write_rows(tmp_path / "q.json", [record_question("live_simple_0"), record_question("live_simple_1")])
    answers = write_rows(tmp_path / "a.json", [
        {"id": "live_simple_0", "ground_truth": [{"record": {"atm_finder_start": [["Find ATM"]]}}]},
        {"id": "live_simple_1", "ground_truth": [{"record": {"atm_finder_start": []}}]}])  # fmt: skip
    imported = import_bfcl(questions, answers)
    assert [task.id for task in imported.tasks] == ["live_simple_0"]
    assert [skipped.id for skipped in imported.skipped] == ["live_simple_1"]
    assert "'atm_finder_start' of record is required" in imported.skipped[0].reason
    with pytest.raises(ContractError, match="task live_simple_1: argument 'atm_finder_start'"):
        load_bfcl_tasks(questions, answers)


HOSTILE_ANSWERS = [
    [{"record": {"atm_finder_start": []}}],  # required, nothing accepted
    [{"record": {"atm_finder_start": "Find ATM"}}],  # a value, not a list of them
    [{"record": ["Find ATM"]}],  # arguments not an object
    [{"record": {}, "other": {}}],  # two functions in one entry
    [{"unknown": {"x": []}}],  # a function the question does not offer
    [[1]],  # not an entry
    {"record": {}},  # not a list of entries
]


def test_the_converter_writes_only_tasks_the_loader_accepts_and_says_what_it_skipped(tmp_path, capsys):
    rows = [record_question(f"live_simple_{number}") for number in range(len(HOSTILE_ANSWERS) + 2)]
    rows.append({"id": "live_simple_99", "function": [RECORD]})  # no question
    rows.append({**record_question("live_simple_98"), "id": None})  # an id the task contract refuses
    good = [{"record": {"atm_finder_start": [["Find ATM"]], "bank_hours_start": []}}]
    truths = [good, *HOSTILE_ANSWERS, good, good, good]
    questions = write_rows(tmp_path / "q.json", rows)
    answers = write_rows(tmp_path / "a.json", [{"id": row["id"], "ground_truth": truth}
                                                for row, truth in zip(rows, truths, strict=True)])  # fmt: skip
    assert main(["tasks", "from-bfcl", "--questions", str(questions), "--answers", str(answers)]) == 0
    captured = capsys.readouterr()
    written = tmp_path / "tasks.jsonl"
    written.write_text(captured.out)
    assert [task.id for task in load_tasks([str(written)])] == ["live_simple_0", f"live_simple_{len(truths) - 3}"]
    skipped = len(HOSTILE_ANSWERS) + 2
    assert f"skipped {skipped} of {len(rows)} questions" in captured.err
    assert "task live_simple_1: argument 'atm_finder_start' of record is required" in captured.err
    assert "task live_simple_99: missing 'question'" in captured.err
    assert "task None: task: 'id' must be str or int" in captured.err


def test_in_strict_mode_the_converter_writes_nothing_when_a_question_is_skipped(tmp_path, capsys):
    questions = write_rows(tmp_path / "q.json", [record_question("live_simple_0"), record_question("live_simple_1")])
    answers = write_rows(tmp_path / "a.json", [
        {"id": "live_simple_0", "ground_truth": [{"record": {"atm_finder_start": [["Find ATM"]]}}]},
        {"id": "live_simple_1", "ground_truth": HOSTILE_ANSWERS[0]}])  # fmt: skip
    assert main(["tasks", "from-bfcl", "--questions", str(questions), "--answers", str(answers), "--strict"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "skipped 1 of 2 questions" in captured.err


def write_rows(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path
