"""The `grpo` job: TRL's GRPOTrainer on a LoRA adapter, rewarded by a verifier or an environment.

Each prompt is a train task rendered by the runtime's prompt function (the same text the
evaluator and SFT use); its `num_generations` completions are scored by `TaskReward`: the
verifier's reward (default `tool_call`), or with `environment: workbench` the sandbox's
execution success, with every component logged on its own (`reward/<component>/mean|std`).
The config is `trainer.spec.grpo.GrpoConfig`; what every training kind shares (LoRA, held-out
evaluation, checkpoints, flags, events) is the skeleton in `trainer.training`.

On several GPUs: `accelerate launch --num_processes N -m trainer grpo --spec run.json`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from trainer import training
from trainer.callbacks import ProtocolCallback
from trainer.contracts import DoneEvent, LogEvent, MetricEvent, RunSpec, SampleEvent, Task
from trainer.evaluate import execution_environment
from trainer.jobs import EventStream, StopFlag
from trainer.parsing import parse_tool_calls
from trainer.prompts import render_prompt
from trainer.spec.grpo import GrpoConfig
from trainer.spec.tasks import last_user_text
from trainer.verifiers import SafetyPolicy, get_verifier


@dataclass
class Scored:
    task_id: str
    completion: str
    reward: float
    components: dict[str, float]


class TaskReward:
    """GRPO's reward function: each completion scored against its task, the batch kept for logs and samples."""

    __name__ = "task_reward"  # TRL names a reward function's metrics after it

    def __init__(self, tasks: Sequence[Task], verifier: str, environment: str | None) -> None:
        policy = SafetyPolicy.default()
        self.tasks = {task.id: task for task in tasks}
        self.verifier = get_verifier(verifier, policy)
        self.environment = execution_environment(environment, policy)
        self.last_batch: list[Scored] = []

    def __call__(
        self, prompts: list[str], completions: list[str], task_id: list[str], **_: Any
    ) -> list[float | None]:
        tasks = [self.tasks[identifier] for identifier in task_id]
        verdicts = self.verifier.verify(tasks, list(completions))
        batch = []
        for task, completion, verdict in zip(tasks, completions, verdicts, strict=True):
            reward, components = verdict.reward, dict(verdict.components)
            if self.environment is not None:
                reward = float(self._executes(task, completion))
                components = {"execution_success": reward, **{f"verifier_{k}": v for k, v in components.items()}}
            batch.append(Scored(task.id, completion, reward, components))
        self.last_batch = batch
        return [row.reward for row in batch]

    def _executes(self, task: Task, completion: str) -> bool:
        assert self.environment is not None
        calls = parse_tool_calls(completion).calls
        return calls is not None and self.environment.execute(task, calls)

    def component_stats(self) -> dict[str, float]:
        """Mean and spread of each component over the last batch, as `reward/<component>/mean|std` metrics."""
        stats: dict[str, float] = {}
        for name in sorted({name for row in self.last_batch for name in row.components}):
            values = [row.components.get(name, 0.0) for row in self.last_batch]
            stats[f"reward/{name}/mean"] = statistics.fmean(values)
            stats[f"reward/{name}/std"] = statistics.pstdev(values) if len(values) > 1 else 0.0
        return stats

    def samples(self, step: int, limit: int) -> list[SampleEvent]:
        """The last batch's first completions; the prompt shown is the task's request, not the whole template."""
        return [SampleEvent(step=step, task_id=row.task_id, prompt=last_user_text(self.tasks[row.task_id]),
                            completion=row.completion, reward=row.reward, components=row.components)
                for row in self.last_batch[:limit]]


class GrpoCallback(ProtocolCallback):
    """The shared callback, plus the reward components and the repetition check of each batch."""

    def __init__(self, *args: Any, reward: TaskReward, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reward = reward

    def log(self, step: int, logs: Mapping[str, Any]) -> None:
        super().log(step, logs)
        if "reward" not in logs:
            return
        for name, value in self.reward.component_stats().items():
            if math.isfinite(value):
                self.events.emit(MetricEvent(step=step, name=name, value=value))
        self._flag(self.flags.completions(step, [(row.task_id, row.completion) for row in self.reward.last_batch]))


def training_arguments(run: training.TrainingRun[GrpoConfig]) -> GRPOConfig:
    config = run.config
    return GRPOConfig(
        **run.training_arguments(config.max_steps),
        learning_rate=config.learning_rate,
        per_device_train_batch_size=config.num_generations * config.prompts_per_step,
        gradient_accumulation_steps=1,
        num_generations=config.num_generations,
        max_completion_length=config.max_completion_length,
        temperature=config.temperature,
        top_p=config.top_p,
        loss_type=config.loss_type,
        importance_sampling_level=config.importance_sampling_level,
        beta=config.beta,
        log_completions=False,
    )


class GrpoRecipe:
    kind = "grpo"
    config_class = GrpoConfig

    def __init__(self) -> None:
        self.reward: TaskReward | None = None

    def prepare(self, config: GrpoConfig, tasks: list[Task], events: EventStream) -> None:
        if config.importance_sampling_level == "sequence" and config.loss_type != "grpo":
            events.emit(LogEvent(f"sequence-level importance sampling with the {config.loss_type} loss is not GSPO "
                                 "(GSPO uses loss_type grpo)", level="warning"))
        self.reward = TaskReward(tasks, config.verifier, config.environment)

    def build(self, run: training.TrainingRun[GrpoConfig]) -> training.Built:
        config, reward = run.config, self.reward
        assert reward is not None, "prepare builds the reward"
        callback = GrpoCallback(
            run.events, run.stop, run.manifest, **run.callback_options(),
            samples=lambda step: reward.samples(step, config.sample_events), reward=reward,
        )  # fmt: skip
        dataset = Dataset.from_list([{"prompt": render_prompt(task, run.tokenizer), "task_id": task.id}
                                     for task in run.tasks])
        trainer = GRPOTrainer(
            model=run.model, reward_funcs=[reward], args=training_arguments(run), train_dataset=dataset,
            processing_class=run.tokenizer, callbacks=[callback], peft_config=run.peft_config(),
        )  # fmt: skip
        return training.Built(trainer, callback, (
            f"GRPO on {len(run.tasks)} train tasks ({config.loss_type}, {config.importance_sampling_level}-level, "
            f"{config.num_generations} generations, {config.max_steps} steps)"))


def run(spec: RunSpec, events: EventStream, stop: StopFlag) -> DoneEvent:
    """The `grpo` job."""
    return training.run(spec, events, stop, GrpoRecipe())
