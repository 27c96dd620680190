"""The CPU learning run's files: every spec is a valid job spec, and the unsolved-task filter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.trainer.tiny_model import REPO_ROOT
from trainer.contracts import Task
from trainer.examples.learning import unsolved
from trainer.jobs import load_spec
from trainer.spec.config import config_from_json
from trainer.spec.kinds import config_class
from trainer.spec.tasks import load_tasks

LEARNING = REPO_ROOT / "trainer" / "examples" / "learning"


@pytest.mark.parametrize("path", sorted(LEARNING.glob("*.json")), ids=lambda path: path.name)
def test_every_learning_spec_is_a_valid_job_spec_writing_under_var_learning(path):
    kind = json.loads(path.read_text())["kind"]
    spec = load_spec(path, kind)
    config_from_json(config_class(kind), spec.hyperparameters, path.name)
    runs = (REPO_ROOT / "var" / "learning" / "runs").resolve()
    assert Path(spec.output_dir).resolve().parent == runs
    # the prepared splits, or what an earlier stage wrote (the mine job's tasks)
    for task_path in map(Path, spec.task_paths):
        assert task_path.resolve().parent == runs.parent / "data" or task_path.resolve().parent.parent == runs


def task(identifier: str) -> Task:
    return Task.from_json({"id": identifier, "messages": [{"role": "user", "content": f"request {identifier}"}],
                           "tools": [], "expected_calls": [{"name": "f", "arguments": {}}]})


def test_unsolved_keeps_the_evaluated_failures_in_the_train_files_order():
    tasks = [task("a"), task("b"), task("c"), task("d")]
    results = {"c": {"verifier_pass": False}, "a": {"verifier_pass": False}, "b": {"verifier_pass": True}}
    assert [kept.id for kept in unsolved.unsolved(tasks, results)] == ["a", "c"]  # d was not in the sample


def test_unsolved_refuses_results_of_tasks_outside_the_train_file():
    with pytest.raises(SystemExit, match=r"1 results are of tasks not in the train file, e.g. \['z'\]"):
        unsolved.unsolved([task("a")], {"a": {"verifier_pass": False}, "z": {"verifier_pass": False}})


def test_unsolved_command_writes_a_task_file_the_jobs_read(tmp_path, capsys):
    tasks_path, results_path, out = tmp_path / "train.jsonl", tmp_path / "results.jsonl", tmp_path / "hard.jsonl"
    tasks_path.write_text("".join(task(i).to_json_line() + "\n" for i in ("a", "b")))
    results_path.write_text("".join(json.dumps({"task_id": i, "verifier_pass": i == "a"}) + "\n" for i in ("a", "b")))
    assert unsolved.main(["--tasks", str(tasks_path), "--results", str(results_path), "--out", str(out)]) == 0
    assert [kept.id for kept in load_tasks([str(out)])] == ["b"]
    assert "1 of 2 evaluated train tasks unsolved (2 in the file)" in capsys.readouterr().out
