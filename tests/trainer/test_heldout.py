"""Held-out evaluation during training (`trainer.heldout`): episodes when the training config plays them."""

from __future__ import annotations

import json
from typing import ClassVar

import pytest

from tests.trainer.tiny_model import TINY_MODEL, tiny_model
from trainer import heldout
from trainer.contracts import ExpectedCall, RunSpec, Task, ToolCall
from trainer.environments.base import Environment, Judgement, StepResult
from trainer.rollout import Generation
from trainer.spec.sft import SftConfig
from trainer.verifiers import SafetyPolicy

ENTRY_POINT = "tests.trainer.test_heldout:environment"
SECRET = "7391"
TOOLS = [
    {"type": "function", "function": {"name": "read_code", "description": "The vault's code.",
                                      "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "open_vault", "description": "Open the vault with its code.",
                                      "parameters": {"type": "object", "properties": {"code": {"type": "string"}}}}},
]  # fmt: skip


class Vault(Environment):
    """Opens only with the code `read_code` returns: a task solved only by reading an observation."""

    name: ClassVar[str] = "vault"

    def reset(self, task: Task) -> None:
        self.task, self.opened = task, False

    def step(self, call: ToolCall) -> StepResult:
        if call.name == "read_code":
            return StepResult({"code": SECRET}, done=False)
        self.opened = self.opened or call.arguments.get("code") == SECRET
        return StepResult("opened" if self.opened else "wrong code", done=False, ok=self.opened)

    def judge(self) -> Judgement:
        return Judgement(task_id=self.task.id, reward=float(self.opened), passed=self.opened, reason="",
                         components={}, turns=0, execution_success=self.opened)


def environment(policy: SafetyPolicy) -> Vault:
    return Vault()


class Scripted:
    """Reads the code, opens the vault with the code it read, then says it is done."""

    name = "scripted"

    def __init__(self, *args) -> None:
        pass

    def generate(self, prompts, sampling, hooks=None):
        return [[Generation(self.answer(prompt), 10, 5, True, 0.01)] for prompt in prompts]

    @staticmethod
    def answer(prompt: str) -> str:
        if "opened" in prompt:
            return "The vault is open."
        if SECRET in prompt:
            return f'<tool_call>{{"name": "open_vault", "arguments": {{"code": "{SECRET}"}}}}</tool_call>'
        return '<tool_call>{"name": "read_code", "arguments": {}}</tool_call>'


@pytest.fixture
def heldout_file(tmp_path):
    path = tmp_path / "heldout.jsonl"
    tasks = [Task(id=f"vault-{n}", messages=[{"role": "user", "content": "Open the vault."}], tools=TOOLS,
                  expected_calls=[ExpectedCall.exact("open_vault", {"code": SECRET})]) for n in range(2)]
    path.write_text("".join(json.dumps(task.to_json()) + "\n" for task in tasks))
    return path


def evaluator(heldout_file, tmp_path, max_turns):
    spec = RunSpec(kind="sft", base_model=str(TINY_MODEL), task_paths=[str(heldout_file)],
                   output_dir=str(tmp_path / "out"), heldout_paths=[str(heldout_file)])
    config = SftConfig(environment=ENTRY_POINT, max_turns=max_turns, eval_max_new_tokens=24, eval_batch_size=2)
    built = heldout.heldout_evaluator(spec, config, "cpu", SafetyPolicy.default())
    assert built is not None
    return built


def test_a_config_with_several_turns_evaluates_the_held_out_tasks_as_episodes(heldout_file, tmp_path, monkeypatch):
    monkeypatch.setattr(heldout, "TransformersBackend", Scripted)
    built = evaluator(heldout_file, tmp_path, max_turns=4)
    assert (built.budget.max_turns, built.budget.max_tokens) == (4, 96)
    result = built.evaluate(tiny_model().model)
    assert result.overall["execution_success_rate"]["value"] == 1.0
    assert result.overall["turns_per_episode"] == 3 and result.overall["ended"] == {"answered": 2}
    assert result.outcomes == {"vault-0": 1.0, "vault-1": 1.0}


def test_one_turn_runs_the_answer_open_loop_and_never_reads_the_code(heldout_file, tmp_path, monkeypatch):
    monkeypatch.setattr(heldout, "TransformersBackend", Scripted)
    built = evaluator(heldout_file, tmp_path, max_turns=1)
    assert built.budget is None
    result = built.evaluate(tiny_model().model)
    assert result.overall["execution_success_rate"]["value"] == 0.0 and "turns_per_episode" not in result.overall


def test_the_tiny_model_plays_held_out_episodes_and_is_left_training(heldout_file, tmp_path):
    model = tiny_model().model
    model.train()
    result = evaluator(heldout_file, tmp_path, max_turns=2).evaluate(model)
    assert model.training
    assert result.overall["tasks"] == 2 and 1 <= result.overall["turns_per_episode"] <= 2
    assert sum(result.overall["ended"].values()) == 2
