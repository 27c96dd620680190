"""GRPO on episodes: the tokens TRL trains on are the episode as evaluation shows it, tool results out of the loss."""

from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace

import pytest

from tests.trainer.test_episodes import Locker, call
from tests.trainer.test_training import events_in, metric_names, spec_file
from tests.trainer.tiny_model import tiny_model
from trainer import grpo, grpo_episodes
from trainer.contracts import ExpectedCall, Task
from trainer.grpo_episodes import EpisodeRollout
from trainer.jobs import run_job
from trainer.prompts import render_prompt
from trainer.spec.environments import EpisodeBudget

LOCKER_TOOLS = [
    {"type": "function", "function": {"name": "read_code", "description": "Show the locker's code.",
                                      "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "open_locker", "description": "Open the locker with its code.",
                                      "parameters": {"type": "object", "properties": {"code": {"type": "string"}},
                                                     "required": ["code"]}}},
]  # fmt: skip


def locker(policy=None) -> Locker:
    """The entry point a job names: `tests.trainer.test_grpo_episodes:locker`."""
    return Locker()


def locker_task(task_id: str) -> Task:
    return Task(id=task_id, messages=[{"role": "user", "content": "Open the locker."}], tools=LOCKER_TOOLS,
                expected_calls=[ExpectedCall.exact("open_locker", {"code": f"code-{task_id}"})])  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_model().tokenizer


def reading_policy(tokenizer, ignores_results: bool = False):
    """Stands in for sampling: asks for the code, then opens the locker with the code it finds in its input.

    The code exists only in a tool result, so a policy that opens the locker must have read that result.
    """

    def sample(self, inputs):
        answers = []
        for ids in inputs:
            codes = re.findall(r'"code": "([^"]+)"', tokenizer.decode(ids))
            if codes and not ignores_results:
                answer = call("open_locker", code=codes[-1])
            elif "<tool_response>" in tokenizer.decode(ids):
                answer = call("open_locker", code="a guess")
            else:
                answer = call("read_code")
            answers.append(tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id])
        return answers

    return sample


FOUR_TURNS = EpisodeBudget(max_turns=4)


def play(tokenizer, monkeypatch, task_ids, *, budget=FOUR_TURNS, mask_truncated=True, **policy):
    monkeypatch.setattr(grpo_episodes._Generator, "sample", reading_policy(tokenizer, **policy))
    tasks = [locker_task(task_id) for task_id in dict.fromkeys(task_ids)]
    rollout = EpisodeRollout(tasks, Locker(), tokenizer, budget, mask_truncated=mask_truncated)
    trainer = SimpleNamespace(rollout_rows=[{"task_id": task_id} for task_id in task_ids], eos_token_ids=None)
    return rollout([render_prompt(locker_task(task_id), tokenizer) for task_id in task_ids], trainer)


def test_the_trained_tokens_are_the_episode_as_evaluation_renders_it(tokenizer, monkeypatch):
    output = play(tokenizer, monkeypatch, ["a", "b"])
    episodes = output["episode"]
    assert [episode.ended for episode in episodes] == ["done", "done"]
    assert all(episode.judgement.passed for episode in episodes)
    for episode, prompt, completion in zip(episodes, output["prompt_ids"], output["completion_ids"], strict=True):
        assert tokenizer.decode(prompt) == render_prompt(episode.task, tokenizer)
        # What evaluation shows the model after the whole episode starts with exactly these tokens.
        shown = render_prompt(dataclasses.replace(episode.task, messages=episode.conversation.messages), tokenizer)
        assert shown.startswith(tokenizer.decode(prompt + completion))
        assert completion[-1] == tokenizer.eos_token_id


def test_only_the_models_answers_are_in_the_loss_and_the_tool_results_reach_the_model(tokenizer, monkeypatch):
    output = play(tokenizer, monkeypatch, ["a"])
    [completion], [mask] = output["completion_ids"], output["env_mask"]
    assert len(mask) == len(completion) and 0 in mask and 1 in mask
    answers = tokenizer.decode([token for token, kept in zip(completion, mask, strict=True) if kept])
    results = tokenizer.decode([token for token, kept in zip(completion, mask, strict=True) if not kept])
    assert answers == call("read_code") + tokenizer.eos_token + call("open_locker", code="code-a") + tokenizer.eos_token
    assert '"code": "code-a"' in results and "<tool_response>" in results
    assert "open_locker" not in results and "read_code" not in results


def test_the_reward_is_the_environments_judgement_of_the_whole_episode(tokenizer, monkeypatch):
    reward = grpo.TaskReward([locker_task("a")], "tool_call", None, policy=None)
    reading = play(tokenizer, monkeypatch, ["a", "a"])
    assert reward([], [], ["a", "a"], episode=reading["episode"]) == [1.0, 1.0]
    assert reward.last_batch[0].components == {"opened": 1.0}
    assert reward.last_batch[0].episode == {"turns": 2.0, "truncated": 0.0}
    guessing = play(tokenizer, monkeypatch, ["a"], ignores_results=True)
    assert reward([], [], ["a"], episode=guessing["episode"]) == [0.0]


def test_the_shaped_verifier_shapes_the_whole_trajectory(tokenizer, monkeypatch):
    reward = grpo.TaskReward([locker_task("a")], "shaped", None, policy=None)
    assert reward([], [], ["a"], episode=play(tokenizer, monkeypatch, ["a"])["episode"]) == [1.6]
    assert reward.last_batch[0].components == {
        "right_tool": 0.1, "valid_artifact": 0.2, "partial_tests": 0.3, "task_complete": 1.0}  # fmt: skip
    # Guessing calls the right tool with a schema-valid call, matches no expected call, and opens nothing.
    assert reward([], [], ["a"], episode=play(tokenizer, monkeypatch, ["a"], ignores_results=True)["episode"]) == [0.3]


def test_an_episode_cut_by_its_budget_is_left_out_of_the_loss_when_asked(tokenizer, monkeypatch):
    [cut] = play(tokenizer, monkeypatch, ["a"], budget=EpisodeBudget(max_turns=1))["env_mask"]
    assert set(cut) == {0}
    [kept] = play(tokenizer, monkeypatch, ["a"], budget=EpisodeBudget(max_turns=1), mask_truncated=False)["env_mask"]
    assert set(kept) == {1}


def locker_spec(tmp_path, **hyperparameters):
    tasks = tmp_path / "locker.jsonl"
    tasks.write_text("".join(locker_task(name).to_json_line() + "\n" for name in ("a", "b", "c")))
    return spec_file(tmp_path, "grpo", task_paths=[str(tasks)], heldout_paths=[str(tasks)],
                     environment="tests.trainer.test_grpo_episodes:locker", max_turns=3, max_completion_length=40,
                     **hyperparameters)  # fmt: skip


def test_a_grpo_job_trains_on_episodes_with_the_tool_results_masked(tmp_path, capfd, monkeypatch):
    # Half the policy reads the code and half guesses, so each group has a spread of rewards.
    reads, guesses = reading_policy(tiny_model().tokenizer), reading_policy(tiny_model().tokenizer, True)
    monkeypatch.setattr(grpo_episodes._Generator, "sample",
                        lambda self, inputs: [*reads(self, inputs[: len(inputs) // 2]),
                                              *guesses(self, inputs[len(inputs) // 2:])])  # fmt: skip
    masks = []
    scored = grpo.RedrawingGRPOTrainer._generate_and_score_completions

    def spy(self, inputs):
        output = scored(self, inputs)
        masks.append(output["tool_mask"])
        return output

    monkeypatch.setattr(grpo.RedrawingGRPOTrainer, "_generate_and_score_completions", spy)
    code = run_job(locker_spec(tmp_path, max_steps=2, eval_interval=0, checkpoint_interval=0), "grpo", grpo.run)
    events = events_in(capfd.readouterr().out)
    assert code == 0, events[-1]
    assert any(e["name"] == "grad_norm" and e["value"] > 0 for e in events if e["event"] == "metric")
    assert {"reward/opened/mean", "episode/turns/mean", "episode/truncated/mean"} <= metric_names(events)
    assert masks and all((mask == 0).any() and (mask == 1).any() for mask in masks)


def test_a_grpo_job_samples_episodes_with_the_model_itself(tmp_path, capfd):
    code = run_job(locker_spec(tmp_path, max_steps=1, eval_interval=1, checkpoint_interval=1, num_generations=2),
                   "grpo", grpo.run)  # fmt: skip
    events = events_in(capfd.readouterr().out)
    assert code == 0, events[-1]
    # The held-out evaluation plays its tasks as episodes too, in the job's environment.
    assert {"heldout/turns_per_episode", "heldout/calls_per_episode", "heldout/truncation_rate"} <= metric_names(events)
    turns = [e["value"] for e in events if e["event"] == "metric" and e["name"] == "episode/turns/mean"]
    assert turns and all(1 <= value <= 3 for value in turns)
    samples = [e for e in events if e["event"] == "sample"]
    assert samples and all(sample["components"] for sample in samples)
    # Each sample carries its whole episode, which starts with the model's first answer.
    assert all(sample["episode"] and sample["episode"][0]["role"] == "assistant" for sample in samples)
