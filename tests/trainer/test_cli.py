"""`python -m trainer tasks from-bfcl` and `python -m trainer verify`, end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.bfcl_perturbations import answer_calls, as_openai
from trainer.cli import main
from trainer.contracts import Task

REPO = Path(__file__).resolve().parents[2]
BFCL = REPO.parent / "shared" / "external" / "bfcl"
GOLDEN_TASKS = Path(__file__).resolve().parent / "golden" / "tasks.jsonl"


def write_lines(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def run_trainer(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainer", *arguments], capture_output=True, text=True, cwd=REPO)


def output_rows(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def test_it_writes_bfcl_tasks_as_native_jsonl(capsys):
    questions = BFCL / "BFCL_v4_multiple.json"
    assert (
        main(
            [
                "tasks",
                "from-bfcl",
                "--questions",
                str(questions),
                "--answers",
                str(BFCL / "possible_answer" / questions.name),
            ]
        )
        == 0
    )
    rows = output_rows(capsys.readouterr().out)
    assert len(rows) == 200 and rows[0]["id"] == "multiple_0"
    assert rows[0]["tools"][0]["type"] == "function" and rows[0]["expected_calls"]


def test_it_says_what_is_wrong_with_a_missing_questions_file(capsys, tmp_path):
    assert main(["tasks", "from-bfcl", "--questions", str(tmp_path / "nope.json")]) == 2
    assert "No such file" in capsys.readouterr().err


def test_it_scores_outputs_and_ends_with_a_summary(capsys, tmp_path):
    outputs = write_lines(tmp_path / "outputs.jsonl", [
        {"id": "calendar", "output": "calendar.create_event(attendee='Alex', day='Tuesday', time='2 PM')"},
        {"id": "no-call", "output": {"tool_calls": []}},
        {"id": "shell", "output": '{"name": "run_command", "arguments": {"command": "rm -rf /"}}'},
    ])  # fmt: skip
    assert main(["verify", "--tasks", str(GOLDEN_TASKS), "--outputs", str(outputs)]) == 0
    *verdicts, summary = output_rows(capsys.readouterr().out)
    assert [(row["id"], row["reward"], row["passed"]) for row in verdicts] == [
        ("calendar", 1.0, True), ("no-call", 1.0, True), ("shell", 0.4, False)]  # fmt: skip
    assert set(verdicts[0]) == {"id", "reward", "passed", "components", "reason", "violations"}
    assert summary["summary"]["scored"] == 3 and summary["summary"]["unsafe_rate"] == 0.333333


def test_it_applies_the_agents_policy(capsys, tmp_path):
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"name": "no-shell", "denied_tools": ["run_*"]}))
    outputs = write_lines(
        tmp_path / "o.jsonl",
        [{"id": "shell", "output": '{"name": "run_command", "arguments": {"command": "ls -la /tmp"}}'}],
    )
    main(["verify", "--tasks", str(GOLDEN_TASKS), "--outputs", str(outputs), "--policy", str(policy)])
    assert output_rows(capsys.readouterr().out)[0]["violations"] == ["denied-tool"]


def test_it_reports_outputs_it_cannot_join_and_exits_non_zero(capsys, tmp_path):
    outputs = tmp_path / "outputs.jsonl"
    outputs.write_text('{"id": "nowhere", "output": "x"}\nnot json\n')
    assert main(["verify", "--tasks", str(GOLDEN_TASKS), "--outputs", str(outputs), "--verifier", "binary"]) == 1
    rows = output_rows(capsys.readouterr().out)
    assert rows[0] == {"id": "nowhere", "error": "no task with id nowhere"}
    assert rows[-1]["summary"]["input_errors"] == 2


def test_it_refuses_a_malformed_tasks_file(capsys, tmp_path):
    tasks = write_lines(tmp_path / "tasks.jsonl", [{"id": "t"}])
    assert main(["verify", "--tasks", str(tasks), "--outputs", str(tasks)]) == 2
    assert "missing 'messages'" in capsys.readouterr().err


@pytest.mark.parametrize("verifier", ["bfcl", "tool_call"])
def test_it_scores_bfcl_ground_truth_from_the_command_line(tmp_path, verifier):
    """The issue's done-when: tasks from-bfcl, then verify, in real processes."""
    questions = BFCL / "BFCL_v4_parallel_multiple.json"
    answers = BFCL / "possible_answer" / questions.name
    tasks = run_trainer("tasks", "from-bfcl", "--questions", str(questions), "--answers", str(answers))
    (tmp_path / "tasks.jsonl").write_text(tasks.stdout)
    imported = [Task.from_json(json.loads(line)) for line in tasks.stdout.splitlines()]
    outputs = [{"id": task.id, "output": as_openai(answer_calls(task))} for task in imported]
    write_lines(tmp_path / "outputs.jsonl", outputs)
    verified = run_trainer(
        "verify", "--tasks", str(tmp_path / "tasks.jsonl"), "--outputs", str(tmp_path / "outputs.jsonl"),
        "--verifier", verifier,
    )  # fmt: skip
    summary = output_rows(verified.stdout)[-1]["summary"]
    assert verified.returncode == 0, verified.stderr
    assert (summary["scored"], summary["passed"]) == (200, 200)


@pytest.mark.skipif(not (REPO.parent / "shared" / "external" / "workbench").is_dir(), reason="needs WorkBench")
@pytest.mark.parametrize(("flags", "count", "episodes"), [([], 41, False), (["--all"], 690, True)])
def test_tasks_from_workbench_writes_the_single_call_tasks_or_with_all_every_task_as_an_episode(
    capsys, flags, count, episodes
):
    assert main(["tasks", "from-workbench", *flags]) == 0
    tasks = [Task.from_json(json.loads(line)) for line in capsys.readouterr().out.splitlines()]
    assert len(tasks) == count and all((task.episode is not None) is episodes for task in tasks)


def test_tasks_from_workbench_names_a_missing_folder(tmp_path, capsys):
    assert main(["tasks", "from-workbench", "--all", "--external", str(tmp_path)]) == 2
    assert "tasks from-workbench: " in capsys.readouterr().err


def test_models_path_names_the_folder_a_model_resolves_to_or_why_not(capsys, tmp_path):
    tiny = Path(__file__).resolve().parents[1] / "fixtures" / "tiny-model"
    assert main(["models", "path", str(tiny)]) == 0
    assert capsys.readouterr().out.strip() == str(tiny)
    assert main(["models", "path", str(tmp_path / "missing")]) != 0
    assert "no such folder" in capsys.readouterr().err


def test_chat_template_prints_the_served_template(capsys):
    from trainer.prompts import served_chat_template

    assert main(["chat-template"]) == 0
    assert capsys.readouterr().out == served_chat_template() + "\n"
