"""Running output files through an environment, and `python -m trainer verify --env ...`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.cli import main
from trainer.contracts import ExpectedCall, Task, ToolCall
from trainer.environments.base import Environment, Judgement, StepResult
from trainer.environments.batch import episode_lines, judge_outputs
from trainer.environments.workbench import ENV_VAR
from trainer.verifiers.batch import Summary

DELETE_256 = ExpectedCall.exact("calendar_delete_event", {"event_id": "00000256"})


class Broken(Environment):
    name = "broken"

    def reset(self, task: Task) -> None:
        raise ValueError("no sandbox")

    def step(self, call: ToolCall) -> StepResult:
        raise AssertionError("never reached")

    def judge(self) -> Judgement:
        raise AssertionError("never reached")


@pytest.fixture
def files(tmp_path, make_task):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(make_task(DELETE_256, id="delete").to_json_line() + "\n" + make_task(id="nothing").to_json_line())
    outputs = tmp_path / "outputs.jsonl"
    lines = [
        {
            "id": "delete",
            "output": [
                "calendar.search_events.func(query='project')",
                {"name": "calendar_delete_event", "arguments": {"event_id": "00000256"}},
            ],
        },
        {"id": "nothing", "output": 'calendar_delete_event(event_id="00000013")'},
        {"id": "missing", "output": []},
    ]
    outputs.write_text("\n".join(json.dumps(line) for line in lines) + "\nnot json\n")
    return tasks, outputs


def test_each_line_yields_a_judgement_or_an_error_and_the_summary_adds_them_up(environment, make_task):
    tasks = {"delete": make_task(DELETE_256, id="delete")}
    lines = [
        json.dumps({"id": "delete", "output": ['calendar.delete_event.func(event_id="00000256")']}),
        json.dumps({"id": "other", "output": []}),
    ]
    summary = Summary(verifier="workbench")
    rows = list(episode_lines(environment, tasks, lines, summary))
    assert rows[0]["passed"] and rows[0]["execution_success"] and rows[0]["turns"] == 1
    assert rows[1] == {"id": "other", "error": "no task with id other"}
    assert (summary.scored, summary.passed, summary.input_errors) == (1, 1, 1)


def test_a_breaking_episode_still_gets_a_judgement(make_task):
    [judgement] = judge_outputs(Broken(), [make_task()], [[]])
    assert not judgement.passed and judgement.reason == "environment error: ValueError: no sandbox"


def test_judge_outputs_needs_one_output_per_task(environment, make_task):
    with pytest.raises(ValueError, match="1 tasks but 0 outputs"):
        judge_outputs(environment, [make_task()], [])


def test_verify_with_the_workbench_env_runs_multi_step_outputs(files, capsys):
    tasks, outputs = files
    code = main(["verify", "--tasks", str(tasks), "--outputs", str(outputs), "--env", "workbench"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 1  # two lines could not be scored
    assert rows[0]["id"] == "delete" and rows[0]["passed"] and rows[0]["turns"] == 2
    assert rows[1]["id"] == "nothing" and not rows[1]["passed"] and "row 00000013 was deleted" in rows[1]["reason"]
    assert [row.get("error", "")[:10] for row in rows[2:4]] == ["no task wi", "line 4: in"]
    summary = rows[-1]["summary"]
    assert (summary["verifier"], summary["scored"], summary["passed"], summary["input_errors"]) == (
        "workbench",
        2,
        1,
        2,
    )


def test_verify_with_the_single_step_env_matches_plain_verify(files, capsys):
    tasks, outputs = files
    main(["verify", "--tasks", str(tasks), "--outputs", str(outputs), "--verifier", "binary"])
    plain = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    main(["verify", "--tasks", str(tasks), "--outputs", str(outputs), "--verifier", "binary", "--env", "single_step"])
    stepped = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    fields = ("id", "reward", "passed", "violations")
    assert [tuple(row.get(f) for f in fields) for row in stepped] == [
        tuple(row.get(f) for f in fields) for row in plain
    ]


def test_verify_with_a_missing_workbench_folder_is_a_usage_error(files, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nowhere"))
    tasks, outputs = files
    assert main(["verify", "--tasks", str(tasks), "--outputs", str(outputs), "--env", "workbench"]) == 2
    assert f"verify: WorkBench data folder {tmp_path / 'nowhere'} not found" in capsys.readouterr().err


def test_verify_runs_outputs_in_a_teams_environment_named_by_entry_point(tmp_path, capsys):
    orders = Path(__file__).resolve().parents[3] / "trainer" / "examples" / "orders_tasks.jsonl"
    outputs = tmp_path / "outputs.jsonl"
    lookup_then_refund = [{"name": "find_customer", "arguments": {"email": "ana@example.com"}},
                          {"name": "refund_order", "arguments": {"order_id": "A-1003"}}]  # fmt: skip
    outputs.write_text(json.dumps({"id": "orders-refund-latest-ana", "output": lookup_then_refund}) + "\n")
    entry_point = "trainer.examples.orders:environment"
    assert main(["verify", "--tasks", str(orders), "--outputs", str(outputs), "--env", entry_point]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert row["passed"] and row["execution_success"] and row["turns"] == 2
    missing = "trainer.examples.orders:nope"
    assert main(["verify", "--tasks", str(orders), "--outputs", str(outputs), "--env", missing]) == 2
    assert "trainer.examples.orders has no nope" in capsys.readouterr().err
