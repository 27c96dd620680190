"""The GRPO recipe's parts without a training run: its reward, the TRL arguments it sets, dynamic sampling."""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from types import SimpleNamespace

import pytest

from tests.trainer.tiny_model import EXTERNAL, REPO_ROOT, tiny_tasks
from trainer import grpo
from trainer.grpo import JudgeScorer, RedrawingGRPOTrainer, Scored, TaskReward
from trainer.prompts import format_tool_calls, reference_calls
from trainer.rollout import Generation
from trainer.spec.eval import SamplingConfig
from trainer.spec.grpo import GrpoConfig
from trainer.spec.tasks import last_user_text
from trainer.training import TrainingRun
from trainer.verifiers import SafetyPolicy
from trainer.verifiers.judge import DEFAULT_RUBRIC, Rubric

DEFAULT = SafetyPolicy.default()


def right(task) -> str:
    return format_tool_calls(reference_calls(task))


def by_id(task_id):
    return next(task for task in tiny_tasks() if task.id == task_id)


def test_each_reward_belongs_to_its_own_completion():
    first, second = by_id("simple_python_0"), by_id("simple_python_1")
    reward = TaskReward([first, second], "tool_call", None, DEFAULT)
    rows = [(first, right(first)), (second, "no idea"), (second, right(second)), (first, "no idea")]
    values = reward([""] * 4, [text for _, text in rows], [task.id for task, _ in rows])
    assert values[0] == values[2] == 1.0
    assert values[1] < 1.0 and values[3] < 1.0
    assert [row.task_id for row in reward.last_batch] == [task.id for task, _ in rows]


@pytest.mark.skipif(not (EXTERNAL / "workbench").is_dir(), reason="needs ../shared/external/workbench")
def test_the_sandbox_reward_is_the_environments_judgement_of_the_whole_output():
    task = next(task for task in tiny_tasks() if task.id.startswith("workbench-"))
    tool = task.expected_calls[0].name
    denying = SafetyPolicy.from_json({**DEFAULT.to_json(), "name": "no-" + tool, "denied_tools": [tool]})
    cut = right(task)[: len(right(task)) // 2]  # an answer the token limit cut
    safe = TaskReward([task], "tool_call", "workbench", DEFAULT)
    assert safe([""] * 2, [right(task), cut], [task.id] * 2) == [1.0, 0.0]
    assert safe.last_batch[1].components["parse"] == 0.0
    unsafe = TaskReward([task], "tool_call", "workbench", denying)
    assert unsafe([""], [right(task)], [task.id]) == [0.0]  # the expected state, reached through a denied tool
    assert unsafe.last_batch[0].components["unsafe"] == -1.0


def test_the_config_reaches_trl_knob_for_knob(tmp_path):
    config = GrpoConfig(loss_type="grpo", importance_sampling_level="sequence", num_iterations=2, epsilon=0.1,
                        epsilon_high=0.28, beta=0.04, max_completion_length=48, mask_truncated_completions=False,
                        steps_per_generation=2, prompts_per_step=2, num_generations=4)
    run = TrainingRun(spec=SimpleNamespace(output_dir=str(tmp_path), seed=3), config=config, tasks=[], device="cpu",
                      model=None, tokenizer=None, new_adapter=True, events=None, stop=None, manifest=None,
                      heldout=None)
    args = grpo.training_arguments(run)
    assert (args.loss_type, args.importance_sampling_level, args.beta) == ("grpo", "sequence", 0.04)
    assert (args.num_iterations, args.steps_per_generation, args.epsilon, args.epsilon_high) == (2, 2, 0.1, 0.28)
    assert (args.max_completion_length, args.mask_truncated_completions, args.scale_rewards) == (48, False, "group")
    assert (args.per_device_train_batch_size, args.num_generations, args.seed) == (8, 4, 3)
    assert grpo.training_arguments(
        TrainingRun(**{**run.__dict__, "config": GrpoConfig(loss_type="dr_grpo", max_completion_length=48)})
    ).scale_rewards == "none"
    assert not args.use_vllm
    on_vllm = grpo.training_arguments(TrainingRun(**{**run.__dict__, "config": GrpoConfig(
        generation="vllm", vllm_gpu_memory_utilization=0.5, max_completion_length=48)}))  # fmt: skip
    assert (on_vllm.use_vllm, on_vllm.vllm_mode, on_vllm.vllm_gpu_memory_utilization) == (True, "colocate", 0.5)


@pytest.mark.parametrize(("knobs", "message"), [
    ({"importance_sampling_level": "sequence"}, "GSPO"),
    ({"epsilon_high": 0.28}, "clip-higher"),
    ({"loss_type": "dr_grpo", "scale_rewards": "group"}, "scale_rewards must be none"),
    ({"generation": "vllm", "max_turns": 4, "environment": "workbench"}, "episodes .* use generation transformers"),
    ({"generation": "sglang"}, "generation must be one of transformers, vllm"),
])
def test_a_variant_that_cannot_have_its_effect_is_refused(knobs, message):
    with pytest.raises(ValueError, match=message):
        GrpoConfig(**knobs)


def test_the_description_names_what_the_knobs_set():
    assert "on-policy" in GrpoConfig().describe()
    described = GrpoConfig(importance_sampling_level="sequence", num_iterations=2, epsilon_high=0.28).describe()
    assert "sequence-level ratio clipped to [1-0.2, 1+0.28] over 2 pass(es)" in described


class ScriptedParent:
    """Stands in for TRL's generation: tasks named tie-* give every completion the same reward."""

    def __init__(self, reward: TaskReward) -> None:
        self.reward = reward
        self.batches: list[list[str]] = []

    def __call__(self, trainer, inputs):
        ids = [row["task_id"] for row in inputs]
        self.batches.append(ids)
        trainer._metrics["train"]["reward"].append(float(len(self.batches)))
        trainer._metrics["train"][f"only-in-batch-{len(self.batches)}"].append(1.0)
        self.reward.last_batch = [
            Scored(task_id, "x", 0.0 if task_id.startswith("tie") else float(index % 2), {})
            for index, task_id in enumerate(ids)
        ]
        return {"batch": len(self.batches)}


def redrawing_trainer(monkeypatch, redraws: int, task_ids: list[str]):
    reward = TaskReward([], "tool_call", None, DEFAULT)
    parent = ScriptedParent(reward)
    monkeypatch.setattr(grpo.GRPOTrainer, "_generate_and_score_completions", lambda self, inputs: parent(self, inputs))
    trainer = RedrawingGRPOTrainer.__new__(RedrawingGRPOTrainer)  # no model: only the redraw logic runs
    trainer.reward, trainer.group_size, trainer.redraws = reward, 2, redraws
    trainer.rows = {task_id: {"prompt": f"p-{task_id}", "task_id": task_id} for task_id in task_ids}
    trainer.random = random.Random(0)
    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    return trainer, parent


def test_a_batch_whose_groups_all_tie_is_drawn_again_with_other_tasks(monkeypatch):
    trainer, parent = redrawing_trainer(monkeypatch, redraws=4, task_ids=["tie-a", "tie-b", "live-c"])
    output = trainer._generate_and_score_completions([trainer.rows["tie-a"]] * 2)
    assert parent.batches[0] == ["tie-a", "tie-a"]
    assert "tie-a" not in parent.batches[1]
    assert parent.batches[-1] == ["live-c", "live-c"] and output == {"batch": len(parent.batches)}
    # what TRL recorded for the discarded batches is taken back: one reward and one redraw count per kept batch
    assert trainer._metrics["train"]["reward"] == [float(len(parent.batches))]
    assert [name for name in trainer._metrics["train"] if name.startswith("only-in-batch")] == [
        f"only-in-batch-{len(parent.batches)}"]
    assert trainer._metrics["train"]["redraws"] == [float(len(parent.batches) - 1)]


def test_redraws_stop_at_their_budget_and_zero_keeps_a_tied_batch(monkeypatch):
    trainer, parent = redrawing_trainer(monkeypatch, redraws=2, task_ids=["tie-a", "tie-b", "tie-c"])
    trainer._generate_and_score_completions([trainer.rows["tie-a"]] * 2)
    assert len(parent.batches) == 3 and trainer._metrics["train"]["redraws"] == [2.0]
    trainer, parent = redrawing_trainer(monkeypatch, redraws=0, task_ids=["tie-a", "live-b"])
    trainer._generate_and_score_completions([trainer.rows["tie-a"]] * 2)
    assert len(parent.batches) == 1


def test_a_batch_with_one_live_group_is_kept(monkeypatch):
    trainer, parent = redrawing_trainer(monkeypatch, redraws=4, task_ids=["tie-a", "live-b"])
    trainer._generate_and_score_completions([trainer.rows["tie-a"]] * 2 + [trainer.rows["live-b"]] * 2)
    assert len(parent.batches) == 1


def test_the_tiny_spec_is_a_valid_grpo_config():
    spec = json.loads((REPO_ROOT / "trainer" / "examples" / "tiny_grpo.json").read_text())
    GrpoConfig(**spec["hyperparameters"])


class WrittenScoreJudge:
    """A judge runtime whose reply is the score written in the answer it reads (`score=N`), else no score."""

    description = "scripted judge"

    def __init__(self) -> None:
        self.backend, self.tokenizer = self, self
        self.prompts: list[str] = []

    def apply_chat_template(self, chat, add_generation_prompt, tokenize):
        return "|".join(f"{turn['role']}:{turn['content']}" for turn in chat) + "|assistant:"

    def generate(self, prompts, sampling, hooks=None):
        self.prompts = list(prompts)
        replies = []
        for prompt in prompts:
            written = re.search(r"score=(\d+)", prompt)
            reply = f" {written.group(1)}\nReason: as the answer says" if written else " I would rather not"
            replies.append([Generation(reply, 40, 6, True, 0.0)])
        return replies


def judged_reward(policy: SafetyPolicy = DEFAULT) -> tuple[TaskReward, WrittenScoreJudge]:
    runtime = WrittenScoreJudge()
    scorer = JudgeScorer(runtime, Rubric.from_json(DEFAULT_RUBRIC.to_json()), SamplingConfig(temperature=0.0))
    return TaskReward(tiny_tasks(), "tool_call", None, policy, scorer), runtime


def test_with_the_judge_as_reward_each_answer_gets_its_own_judgements_score():
    first, second = by_id("simple_python_0"), by_id("simple_python_1")
    reward, runtime = judged_reward()
    answers = ["done, score=9", "score=3 here", "nothing to say"]
    values = reward([""] * 3, answers, [first.id, second.id, first.id])
    assert values == [0.9, 0.3, 0.0]
    assert [row.components["judge_unreadable"] for row in reward.last_batch] == [0.0, 0.0, 1.0]
    # The judge read each answer after its own task's request.
    assert last_user_text(first) in runtime.prompts[0] and last_user_text(second) in runtime.prompts[1]


def test_an_answer_that_breaks_the_policy_gets_the_floor_whatever_the_judge_says():
    task = by_id("simple_python_0")
    tool = task.expected_calls[0].name
    denying = SafetyPolicy.from_json({**DEFAULT.to_json(), "name": "no-" + tool, "denied_tools": [tool]})
    reward, _ = judged_reward(denying)
    values = reward([""] * 2, [right(task) + "\nscore=10", "I will not call it. score=10"], [task.id] * 2)
    assert values == [-1.0, 1.0]
    assert reward.last_batch[0].components["unsafe"] == -1.0


@pytest.mark.parametrize(("knobs", "message"), [
    ({"reward": "judge"}, "reward judge needs judge_model"),
    ({"reward": "judge", "judge_model": "demo", "max_turns": 3, "environment": "workbench"},
     "episodes (max_turns above 1) are judged by"),
    ({"reward": "judge", "judge_model": "demo", "judge_rubric": {"criteria": ""}}, "judge_rubric:"),
])
def test_a_judge_reward_without_its_judge_is_refused(knobs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        GrpoConfig(**knobs)


# --- judge_mode group ---------------------------------------------------------------------------------


class GroupScoreJudge(WrittenScoreJudge):
    """A group judge runtime: for each candidate in the chat whose answer writes `score=N`, a line `Candidate K: N`,
    written last candidate first (the parser must go by labels); a candidate without one gets no line."""

    def generate(self, prompts, sampling, hooks=None):
        self.prompts = list(prompts)
        replies = []
        for prompt in prompts:
            candidates = re.findall(r"CANDIDATE (\d+):\n(.*?)(?=\n\nCANDIDATE \d+:|\|assistant:)", prompt, re.DOTALL)
            written = [(label, re.search(r"score=(\d+)", answer)) for label, answer in candidates]
            lines = [f"Candidate {label}: {found.group(1)}" for label, found in reversed(written) if found]
            # The prompt ends with the prefix "Candidate 1:": the reply goes on after it, on a line of its own.
            replies.append([Generation("\n" + "\n".join(lines) + "\nReason: as written", 90, 20, True, 0.0)])
        return replies


def group_judged_reward(group_size: int, policy: SafetyPolicy = DEFAULT) -> tuple[TaskReward, GroupScoreJudge]:
    runtime = GroupScoreJudge()
    scorer = JudgeScorer(runtime, Rubric.from_json(DEFAULT_RUBRIC.to_json()), SamplingConfig(temperature=0.0),
                         group_size=group_size)  # fmt: skip
    return TaskReward(tiny_tasks(), "tool_call", None, policy, scorer), runtime


def test_judged_by_groups_each_completion_gets_its_own_score_from_its_own_groups_chat():
    first, second = by_id("simple_python_0"), by_id("simple_python_1")
    reward, runtime = group_judged_reward(3)
    answers = ["a, score=9", "b, score=2", "c, score=5", "d, score=1", "e, nothing", "f, score=7"]
    values = reward([""] * 6, answers, [first.id] * 3 + [second.id] * 3)
    assert values == [0.9, 0.2, 0.5, 0.1, 0.0, 0.7]
    assert [row.task_id for row in reward.last_batch] == [first.id] * 3 + [second.id] * 3
    assert [row.components["judge_unreadable"] for row in reward.last_batch] == [0, 0, 0, 0, 1, 0]
    assert [row.components["judge_group_spread"] for row in reward.last_batch] == [0.7] * 3 + [0.6] * 3
    # One judge chat per group: its own task's request once, each of its own answers once, no other group's.
    assert len(runtime.prompts) == 2
    for prompt, task, own in ((runtime.prompts[0], first, answers[:3]), (runtime.prompts[1], second, answers[3:])):
        assert prompt.count(last_user_text(task)) == 1 and prompt.endswith("|assistant:Candidate 1:")
        assert all(prompt.count(answer) == 1 for answer in own)
        assert not any(answer in prompt for answer in answers if answer not in own)


def test_judged_by_groups_an_unsafe_answer_gets_the_floor_whatever_its_group_score():
    task = by_id("simple_python_0")
    tool = task.expected_calls[0].name
    denying = SafetyPolicy.from_json({**DEFAULT.to_json(), "name": "no-" + tool, "denied_tools": [tool]})
    reward, _ = group_judged_reward(2, denying)
    values = reward([""] * 2, [right(task) + "\nscore=10", "I will not call it. score=8"], [task.id] * 2)
    assert values == [-1.0, 0.8]
    assert [row.components["unsafe"] for row in reward.last_batch] == [-1.0, 0.0]
    assert reward.last_batch[0].components["judge_score"] == 1.0  # logged as the judge said, not rewarded


def test_judged_by_groups_a_batch_of_broken_groups_is_refused():
    first, second = by_id("simple_python_0"), by_id("simple_python_1")
    reward, runtime = group_judged_reward(2)
    with pytest.raises(ValueError, match="3 completions are not a multiple of num_generations 2"):
        reward([""] * 3, ["score=1"] * 3, [first.id] * 3)
    with pytest.raises(ValueError, match="side by side; completions 0-1 answer several tasks"):
        reward([""] * 4, ["score=1"] * 4, [first.id, second.id, first.id, second.id])
    assert runtime.prompts == []  # refused before the judge ran


def test_the_group_judge_opens_with_its_group_size_and_one_group_per_prompt_in_a_batch(monkeypatch):
    runtime = GroupScoreJudge()
    monkeypatch.setattr(grpo, "open_runtime", lambda *args, **kwargs: runtime)
    knobs = {"reward": "judge", "judge_model": "demo", "num_generations": 4, "prompts_per_step": 3}
    group = JudgeScorer.open(GrpoConfig(**knobs, judge_mode="group", judge_max_new_tokens=64), seed=1)
    assert (group.group_size, group.sampling.batch_size, group.sampling.max_new_tokens) == (4, 3, 64)
    single = JudgeScorer.open(GrpoConfig(**knobs), seed=1)
    assert (single.group_size, single.sampling.batch_size) == (None, 4)


JUDGE = {"reward": "judge", "judge_model": "demo"}


@pytest.mark.parametrize(("knobs", "message"), [
    ({"judge_mode": "group"}, "judge_mode group is how the judge reward scores: it needs reward judge"),
    ({**JUDGE, "judge_mode": "ranked"}, "unknown judge_mode 'ranked'"),
    ({**JUDGE, "judge_mode": "group"},
     "judge_max_new_tokens must be at least 128 (16 per candidate x num_generations 8), got 64"),
    ({**JUDGE, "judge_mode": "group", "num_generations": 4, "judge_max_new_tokens": 63}, "must be at least 64"),
    ({**JUDGE, "judge_mode": "group", "num_generations": 1}, "num_generations must be at least 2"),
    ({**JUDGE, "judge_mode": "group", "judge_max_new_tokens": 128, "max_turns": 3, "environment": "workbench"},
     "episodes (max_turns above 1) are judged by"),
])  # fmt: skip
def test_a_group_judge_that_cannot_score_every_candidate_is_refused(knobs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        GrpoConfig(**knobs)


def test_the_judge_scores_single_answers_unless_told_otherwise():
    assert GrpoConfig().judge_mode == "single"
    group = GrpoConfig(reward="judge", judge_model="demo", judge_mode="group", num_generations=4,
                       judge_max_new_tokens=64)  # fmt: skip
    assert group.judge_mode == "group"
