"""The `replay` job: the next answer to each case, both answers scored alike, written and reported.

One case runs in-process with a scripted backend (so the answer is known), one on the tiny model end to end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.tiny_model import TINY_MODEL
from trainer import replay
from trainer.jobs import EXIT_FAILED, run_job
from trainer.rollout import Generation, GenerationHooks
from trainer.spec.eval import SamplingConfig

TOOLS = [{"type": "function", "function": {"name": "find_order", "parameters": {
    "type": "object", "properties": {"order": {"type": "integer"}}, "required": ["order"]}}}]  # fmt: skip
ORIGINAL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "find_order", "arguments": '{"order": "17"}'}}
    ],
}
CASE = {
    "id": "run-1@step2",
    "messages": [{"role": "user", "content": "Where is order 17?"}],
    "tools": TOOLS,
    "expected": {"expected_calls": [{"name": "find_order", "arguments": {"order": [17]}}]},
    "original": ORIGINAL,
}
ANSWER = '<tool_call>{"name": "find_order", "arguments": {"order": 17}}</tool_call>'


class ScriptedRuntime:
    description = "scripted"

    def __init__(self) -> None:
        self.backend = self
        self.prompts: list[str] = []
        self.sampling: SamplingConfig | None = None

    def render(self, task) -> str:
        return task.messages[-1]["content"]

    def generate(self, prompts, sampling: SamplingConfig, hooks: GenerationHooks | None = None):
        self.prompts, self.sampling = list(prompts), sampling
        return [[Generation(ANSWER, 30, 12, True, 0.05)] for _ in prompts]


def write_spec(folder: Path, cases: list[dict[str, Any]], **hyperparameters: Any) -> Path:
    (folder / "cases.jsonl").write_text("".join(json.dumps(case) + "\n" for case in cases))
    spec = {"kind": "replay", "base_model": str(TINY_MODEL), "task_paths": ["cases.jsonl"], "output_dir": "out",
            "seed": 5, "hyperparameters": hyperparameters,
            "safety_policy": {"denied_tools": ["cancel_*"]}}  # fmt: skip
    (folder / "run.json").write_text(json.dumps(spec))
    return folder / "run.json"


def run_replay(spec: Path, capfd) -> tuple[int, list[dict[str, Any]]]:
    code = run_job(spec, "replay", replay.run)
    return code, [json.loads(line) for line in capfd.readouterr().out.splitlines() if line.strip()]


def test_the_new_answer_and_the_recorded_one_are_scored_alike_and_reported(tmp_path, capfd, monkeypatch):
    runtime = ScriptedRuntime()
    monkeypatch.setattr(replay, "open_runtime", lambda *args, **kwargs: runtime)
    code, events = run_replay(write_spec(tmp_path, [CASE]), capfd)
    assert code == 0, events[-1]
    assert runtime.prompts == ["Where is order 17?"] and runtime.sampling.greedy and runtime.sampling.seed == 5
    done = events[-1]
    [line] = [json.loads(text) for text in Path(done["results"]).read_text().splitlines()]
    assert line["id"] == CASE["id"] and line["output"] == ANSWER and line["has_expected"] is True
    new, old = line["scores"], line["original_scores"]
    assert (new["schema_valid"], new["correct_arguments"], new["passed"]) == (True, True, True)
    assert (old["schema_valid"], old["valid_json"], old["calls"]) == (
        False,
        True,
        [{"name": "find_order", "arguments": {"order": "17"}}],
    )
    [sample] = [event for event in events if event["event"] == "sample"]
    assert (sample["task_id"], sample["completion"], sample["reward"]) == (CASE["id"], ANSWER, 1.0)
    assert sample["components"]["schema_valid"] == 1.0 and sample["components"]["unsafe"] == 0.0


def test_the_agents_policy_from_the_spec_judges_the_answer(tmp_path, capfd, monkeypatch):
    runtime = ScriptedRuntime()
    monkeypatch.setattr(replay, "open_runtime", lambda *args, **kwargs: runtime)
    monkeypatch.setattr(replay, "score_answer", _spy := _Spy(replay.score_answer))
    code, _ = run_replay(write_spec(tmp_path, [{**CASE, "expected": None, "original": None}]), capfd)
    assert code == 0 and [policy.denied_tools for policy in _spy.policies] == [["cancel_*"]]
    assert _spy.expected == [False]


class _Spy:
    def __init__(self, wrapped: Any) -> None:
        self.wrapped, self.policies, self.expected = wrapped, [], []

    def __call__(self, task, completion, policy, *, expected):
        self.policies.append(policy)
        self.expected.append(expected)
        return self.wrapped(task, completion, policy, expected=expected)


def test_a_bad_case_fails_the_job_before_any_model_loads(tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(replay, "open_runtime", lambda *args, **kwargs: pytest.fail("no model may load"))
    code, events = run_replay(write_spec(tmp_path, [{"id": "c", "messages": []}]), capfd)
    assert code == EXIT_FAILED and events[-1]["event"] == "error" and events[-1]["kind"] == "bad_spec"


@pytest.mark.slow
def test_a_replay_runs_end_to_end_on_the_tiny_model(tmp_path, capfd):
    code, events = run_replay(write_spec(tmp_path, [CASE], device="cpu", max_new_tokens=8), capfd)
    assert code == 0, events[-1]
    [line] = [json.loads(text) for text in Path(events[-1]["results"]).read_text().splitlines()]
    assert line["completion_tokens"] > 0 and line["prompt_tokens"] > 0 and "scores" in line
    assert line["original_scores"]["schema_valid"] is False
