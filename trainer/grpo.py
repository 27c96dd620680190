"""The `grpo` job: TRL's GRPOTrainer on a LoRA adapter, rewarded by a verifier, an environment or a judge.

Each prompt is a train task rendered by the runtime's prompt function (the same text the
evaluator and SFT use); its `num_generations` completions are scored by `TaskReward`: the
verifier's reward (default `tool_call`), with `environment: workbench` the sandbox's execution
success, or with `reward: judge` the judge model's score on its rubric (for tasks no program can
check; an answer that breaks the safety policy gets -1 whatever the judge says; with `judge_mode:
group` the judge sees the group's completions of one prompt together and scores them relative to
each other), with every component logged on its own (`reward/<component>/mean|std`).
The config is `trainer.spec.grpo.GrpoConfig`; what every training kind shares (LoRA, held-out
evaluation, checkpoints, flags, events) is the skeleton in `trainer.training`.

On several GPUs: `accelerate launch --num_processes N -m trainer grpo --spec run.json`.
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from trainer import training
from trainer.callbacks import ProtocolCallback
from trainer.contracts import DoneEvent, LogEvent, MetricEvent, RunSpec, SampleEvent, Task
from trainer.episodes import Episode
from trainer.evaluate import execution_environment
from trainer.grpo_episodes import EpisodeRollout
from trainer.jobs import EventStream, StopFlag
from trainer.judge import judge_groups, judge_items
from trainer.lengths import answer_tokens, checked_limit, longest_prompt
from trainer.parsing import parse_tool_calls
from trainer.prompts import render_prompt
from trainer.rollout import Runtime, open_runtime
from trainer.spec.config import SpecError
from trainer.spec.eval import SamplingConfig
from trainer.spec.grpo import GrpoConfig
from trainer.spec.tasks import last_user_text
from trainer.verifiers import SafetyPolicy, get_verifier
from trainer.verifiers.group_judge import JudgeGroup, score_spread
from trainer.verifiers.judge import DEFAULT_MAX_TRANSCRIPT_CHARS, JudgeItem, Judgement, Rubric
from trainer.verifiers.safety import check_task_calls
from trainer.verifiers.shaped import ShapedVerifier, episode_components


@dataclass
class Scored:
    task_id: str
    completion: str
    reward: float
    components: dict[str, float]
    episode: dict[str, float] = dataclasses.field(default_factory=dict)  # turns, truncated: logged, not rewarded
    messages: list[dict[str, Any]] | None = None  # an episode's turns as chat messages, for its samples


class JudgeScorer:
    """A judge model in this process: each answer, after its task's conversation, scored on the rubric.

    With a `group_size` (judge_mode group) the answers come in consecutive groups of that size, the
    answers to one task, and each group is shown to the judge in one chat and scored relative to
    each other (`trainer.verifiers.group_judge`). Greedy, so one answer (or one group) to one task
    always gets the same score within a run.
    """

    def __init__(self, runtime: Runtime, rubric: Rubric, sampling: SamplingConfig,
                 max_chars: int = DEFAULT_MAX_TRANSCRIPT_CHARS, group_size: int | None = None) -> None:  # fmt: skip
        self.runtime, self.rubric, self.sampling, self.max_chars = runtime, rubric, sampling, max_chars
        self.group_size = group_size

    @classmethod
    def open(cls, config: GrpoConfig, seed: int) -> JudgeScorer:
        runtime = open_runtime(config.judge_model, config.judge_adapter or None, "transformers", config.device, seed)
        grouped = config.judge_mode == "group"
        # A group's chat holds num_generations answers: batch as many groups as a step has prompts.
        batch_size = config.prompts_per_step if grouped else config.num_generations
        sampling = SamplingConfig(max_new_tokens=config.judge_max_new_tokens, temperature=0.0,
                                  batch_size=batch_size, seed=seed)  # fmt: skip
        return cls(runtime, config.parsed_judge_rubric(), sampling,
                   group_size=config.num_generations if grouped else None)  # fmt: skip

    def judge(self, tasks: Sequence[Task], answers: Sequence[str]) -> list[Judgement]:
        """One judgement per answer, in the answers' order."""
        if self.group_size is not None:
            return self._judge_groups(tasks, answers, self.group_size)
        items = [JudgeItem(id=str(index), messages=task.messages, answer=answer)
                 for index, (task, answer) in enumerate(zip(tasks, answers, strict=True))]  # fmt: skip
        return judge_items(self.runtime, self.rubric, items, self.sampling, self.max_chars)

    def _judge_groups(self, tasks: Sequence[Task], answers: Sequence[str], size: int) -> list[Judgement]:
        if len(answers) % size:
            raise ValueError(f"group judging needs whole groups: {len(answers)} completions are not a multiple of "
                             f"num_generations {size}")
        groups = []
        for start in range(0, len(answers), size):
            task_ids = {task.id for task in tasks[start:start + size]}
            if len(task_ids) > 1:
                raise ValueError(f"group judging needs each prompt's completions side by side; completions "
                                 f"{start}-{start + size - 1} answer several tasks: {', '.join(sorted(task_ids))}")
            groups.append(JudgeGroup(id=str(start // size), messages=tasks[start].messages,
                                     answers=list(answers[start:start + size])))  # fmt: skip
        verdicts = judge_groups(self.runtime, self.rubric, groups, self.sampling, self.max_chars)
        return [verdict for group in verdicts for verdict in group]


class TaskReward:
    """GRPO's reward function: each completion scored against its task, the batch kept for logs and samples."""

    __name__ = "task_reward"  # TRL names a reward function's metrics after it

    def __init__(self, tasks: Sequence[Task], verifier: str, environment: str | None, policy: SafetyPolicy,
                 judge: JudgeScorer | None = None) -> None:  # fmt: skip
        self.tasks = {task.id: task for task in tasks}
        self.policy = policy
        self.verifier = get_verifier(verifier, policy)
        self.environment = execution_environment(environment, policy)
        self.judge = judge
        self.last_batch: list[Scored] = []

    def __call__(
        self, prompts: list[str], completions: list[str], task_id: list[str], episode: list[Episode] | None = None,
        **_: Any,
    ) -> list[float | None]:
        if episode is not None:
            return self._judged(episode)
        tasks = [self.tasks[identifier] for identifier in task_id]
        if self.judge is not None:
            return self._by_judge(tasks, completions)
        verdicts = self.verifier.verify(tasks, list(completions))
        batch = []
        for task, completion, verdict in zip(tasks, completions, verdicts, strict=True):
            reward, components = verdict.reward, dict(verdict.components)
            if self.environment is not None:
                # The sandbox's judgement of the whole output: an unreadable one gets the floor, an unsafe
                # one that reaches the expected state loses its success.
                judged = self.environment.run_output(task, completion)
                reward = judged.reward
                components = {**judged.components, **{f"verifier_{k}": v for k, v in components.items()}}
            batch.append(Scored(task.id, completion, reward, components))
        self.last_batch = batch
        return [row.reward for row in batch]

    def _by_judge(self, tasks: list[Task], completions: list[str]) -> list[float | None]:
        """The judge's score of each answer; an unreadable reply scores 0, an unsafe answer -1. Judged by
        groups, each answer also carries its group's `judge_group_spread` (highest minus lowest score)."""
        assert self.judge is not None
        verdicts = self.judge.judge(tasks, completions)
        size = self.judge.group_size
        spreads = [score_spread([verdict.score for verdict in verdicts[start:start + size]])
                   for start in range(0, len(verdicts), size)] if size is not None else []  # fmt: skip
        batch = []
        for index, (task, completion, verdict) in enumerate(zip(tasks, completions, verdicts, strict=True)):
            unsafe = bool(check_task_calls(self.policy, task, parse_tool_calls(completion).calls))
            score = verdict.score if verdict.score is not None else 0.0
            components = {"judge_score": score, "judge_unreadable": float(verdict.score is None),
                          "unsafe": -1.0 if unsafe else 0.0}  # fmt: skip
            if size is not None:
                components["judge_group_spread"] = spreads[index // size]
            batch.append(Scored(task.id, completion, -1.0 if unsafe else score, components))
        self.last_batch = batch
        return [row.reward for row in batch]

    def _judged(self, episodes: list[Episode]) -> list[float | None]:
        """Each episode's reward: the environment's judgement of the whole of it (trainer.grpo_episodes)."""
        batch = []
        for played in episodes:
            judgement = played.judgement
            if judgement is None:
                raise ValueError(f"episode of {played.task.id} was never judged")
            reward, components = judgement.reward, dict(judgement.components)
            if self.verifier.name == ShapedVerifier.name:
                # The guide's shaping over the whole trajectory, opt-in: the environment judges completion.
                components = episode_components(played.task, played.calls, judgement.passed, bool(judgement.unsafe))
                reward = round(sum(components.values()), 6)
            shape = {"turns": float(judgement.turns), "truncated": float(judgement.truncated)}
            batch.append(Scored(played.task.id, played.output, reward, components, shape, list(played.messages)))
        self.last_batch = batch
        return [row.reward for row in batch]

    def groups(self, group_size: int) -> list[list[Scored]]:
        """The last batch's groups: TRL puts the `group_size` completions of one prompt next to each other."""
        return [self.last_batch[start:start + group_size] for start in range(0, len(self.last_batch), group_size)]

    def groups_tied(self, group_size: int) -> bool:
        """Whether every group of the last batch has one reward for all its completions: no advantage anywhere."""
        groups = [[row.reward for row in group] for group in self.groups(group_size)]
        return bool(groups) and all(max(group) - min(group) < 1e-9 for group in groups)

    def component_stats(self) -> dict[str, float]:
        """Mean and spread of each reward component over the last batch (`reward/<component>/mean|std`), and of
        each episode's turns and truncation (`episode/turns/mean|std`)."""
        stats: dict[str, float] = {}
        for group, field in (("reward", "components"), ("episode", "episode")):
            for name in sorted({name for row in self.last_batch for name in getattr(row, field)}):
                values = [getattr(row, field).get(name, 0.0) for row in self.last_batch]
                stats[f"{group}/{name}/mean"] = statistics.fmean(values)
                stats[f"{group}/{name}/std"] = statistics.pstdev(values) if len(values) > 1 else 0.0
        return stats

    def samples(self, step: int, limit: int) -> list[SampleEvent]:
        """The last batch's first completions; the prompt shown is the task's request, not the whole template."""
        return [SampleEvent(step=step, task_id=row.task_id, prompt=last_user_text(self.tasks[row.task_id]),
                            completion=row.completion, reward=row.reward, components=row.components,
                            episode=row.messages)
                for row in self.last_batch[:limit]]


class GrpoCallback(ProtocolCallback):
    """The shared callback, plus the reward components and the repetition check of each batch."""

    def __init__(self, *args: Any, reward: TaskReward, group_size: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reward = reward
        self.group_size = group_size

    def log(self, step: int, logs: Mapping[str, Any]) -> None:
        super().log(step, logs)
        if "reward" not in logs:
            return
        for name, value in self.reward.component_stats().items():
            if math.isfinite(value):
                self.events.emit(MetricEvent(step=step, name=name, value=value))
        groups = [[row.completion for row in group] for group in self.reward.groups(self.group_size)]
        self._flag(self.flags.completions(step, groups))


def training_arguments(run: training.TrainingRun[GrpoConfig]) -> GRPOConfig:
    config = run.config
    return GRPOConfig(
        **run.training_arguments(config.max_steps),
        learning_rate=config.learning_rate,
        per_device_train_batch_size=config.num_generations * config.prompts_per_step,
        gradient_accumulation_steps=1,
        steps_per_generation=config.steps_per_generation,
        num_iterations=config.num_iterations,
        num_generations=config.num_generations,
        max_completion_length=config.max_completion_length,
        temperature=config.temperature,
        top_p=config.top_p,
        loss_type=config.loss_type,
        importance_sampling_level=config.importance_sampling_level,
        epsilon=config.epsilon,
        epsilon_high=config.epsilon_high,
        scale_rewards=config.rewards_scaling(),
        mask_truncated_completions=config.mask_truncated_completions,
        beta=config.beta,
        use_vllm=config.generation == "vllm",
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=config.vllm_gpu_memory_utilization,
        log_completions=False,
    )


class RedrawingGRPOTrainer(GRPOTrainer):
    """GRPOTrainer with DAPO's dynamic sampling: a generation batch whose groups all tie is drawn again.

    A tied group has zero advantage and moves nothing; a step made only of them is wasted. Up to
    `redraws` times, the batch's tasks are replaced by other train tasks (seeded) and generated
    again; the metrics TRL recorded for a discarded batch are taken back, and how many redraws each
    batch needed is logged as `redraws`. One process only: with several, each would decide alone.
    """

    def __init__(self, *args: Any, reward: TaskReward, group_size: int, redraws: int,
                 rows: dict[str, dict[str, Any]], seed: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reward = reward
        self.group_size = group_size
        self.redraws = redraws if self.accelerator.num_processes == 1 else 0
        self.rows = rows
        self.random = random.Random(seed)
        self.rollout_rows: list[dict[str, Any]] = []

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        for attempt in range(self.redraws + 1):
            self.rollout_rows = inputs  # what an episode rollout (trainer.grpo_episodes) plays, row by row
            recorded = {name: len(values) for name, values in self._metrics["train"].items()}
            output = super()._generate_and_score_completions(inputs)
            if attempt == self.redraws or not self.reward.groups_tied(self.group_size):
                self._metrics["train"]["redraws"].append(float(attempt))
                return output
            self._take_back_metrics(recorded)
            inputs = self._other_tasks(inputs)
        raise AssertionError("unreachable: the last attempt returns")

    def _take_back_metrics(self, recorded: dict[str, int]) -> None:
        metrics = self._metrics["train"]
        for name in list(metrics):
            if name in recorded:
                del metrics[name][recorded[name]:]
            else:
                del metrics[name]

    def _other_tasks(self, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The same number of groups, each of a train task not in `inputs` where there are enough."""
        used = list(dict.fromkeys(row["task_id"] for row in inputs))
        pool = [task_id for task_id in self.rows if task_id not in used] or list(self.rows)
        chosen = self.random.sample(pool, min(len(used), len(pool)))
        while len(chosen) < len(used):
            chosen.append(self.random.choice(pool))
        return [dict(self.rows[task_id]) for task_id in chosen for _ in range(self.group_size)]


class GrpoRecipe(training.TaskInput):
    kind = "grpo"
    config_class = GrpoConfig

    def __init__(self) -> None:
        self.reward: TaskReward | None = None

    def prepare(self, setup: training.Setup[GrpoConfig]) -> None:
        config = setup.config
        judge = None
        if config.reward == "judge":
            setup.events.emit(LogEvent(f"reward: the judge {config.judge_model}"
                                       + (f" + adapter {config.judge_adapter}" if config.judge_adapter else "")
                                       + (f", group-relative: the {config.num_generations} answers to a prompt "
                                          "judged together" if config.judge_mode == "group" else "")))
            judge = JudgeScorer.open(config, setup.spec.seed)
        self.reward = TaskReward(setup.tasks, config.verifier, config.environment, setup.policy, judge)
        if config.max_turns > 1 and self.reward.environment is None:
            raise SpecError("GRPO on episodes (max_turns above 1) needs an environment to run the calls in")

    def limits(self, setup: training.Setup[GrpoConfig], tokenizer: Any) -> GrpoConfig:
        config = setup.config
        # On episodes the limit bounds each answer of a turn, and a reference episode makes one call a turn.
        answers = answer_tokens(setup.tasks, tokenizer, config.max_turns > 1)
        limit = checked_limit(answers, knob="max_completion_length", limit=config.max_completion_length,
                              max_cut_share=config.max_truncated_share, events=setup.events)
        budget = config.episode_budget(limit)
        # An episode's sequence is its prompt and every answer after it (and the observations, not counted here).
        longest = longest_prompt(setup.tasks, tokenizer) + (budget.max_tokens if budget is not None else limit)
        return training.checkpointing_for_length(
            dataclasses.replace(config, max_completion_length=limit), longest, setup.events
        )

    def build(self, run: training.TrainingRun[GrpoConfig]) -> training.Built:
        config, reward = run.config, self.reward
        assert reward is not None, "prepare builds the reward"
        callback = GrpoCallback(
            run.events, run.stop, run.manifest, **run.callback_options(),
            samples=lambda step: reward.samples(step, config.sample_events), reward=reward,
            group_size=config.num_generations,
        )  # fmt: skip
        rows = {task.id: {"prompt": render_prompt(task, run.tokenizer), "task_id": task.id} for task in run.tasks}
        assert config.max_completion_length is not None, "limits derives the length before the build"
        budget = config.episode_budget(config.max_completion_length)
        rollout = None
        if budget is not None:
            assert reward.environment is not None, "prepare refuses episodes without an environment"
            rollout = EpisodeRollout(run.tasks, reward.environment, run.tokenizer, budget,
                                     mask_truncated=config.mask_truncated_completions)  # fmt: skip
        trainer = RedrawingGRPOTrainer(
            model=run.model, reward_funcs=[reward], args=training_arguments(run), rollout_func=rollout,
            train_dataset=Dataset.from_list(list(rows.values())), processing_class=run.tokenizer,
            callbacks=[callback], peft_config=run.peft_config(),
            reward=reward, group_size=config.num_generations, redraws=config.dynamic_sampling_redraws, rows=rows,
            seed=run.spec.seed,
        )  # fmt: skip
        episodes = f"episodes of at most {budget.max_turns} turns, " if budget is not None else ""
        return training.Built(trainer, callback, (
            f"GRPO on {len(run.tasks)} train tasks ({config.describe()}; {episodes}{config.num_generations} "
            f"generations, {config.max_steps} steps)"))


def run(spec: RunSpec, events: EventStream, stop: StopFlag) -> DoneEvent:
    """The `grpo` job."""
    return training.run(spec, events, stop, GrpoRecipe())
