"""The `grpo` job: TRL's GRPOTrainer on a LoRA adapter, rewarded by a verifier or an environment.

Each prompt is a train task rendered by the runtime's prompt function (the same text the
evaluator and SFT use); its `num_generations` completions are scored by `TaskReward`: the
verifier's reward (default `tool_call`), or with `environment: workbench` the sandbox's
execution success, with every component logged on its own (`reward/<component>/mean|std`).
`loss_type` picks GRPO, Dr. GRPO or DAPO; `importance_sampling_level: sequence` with the grpo
loss is GSPO. What SFT shares (LoRA, held-out evaluation, checkpoints, flags, events) is in
`trainer.finetune`.

On several GPUs: `accelerate launch --num_processes N -m trainer grpo --spec run.json`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from trainer import finetune
from trainer.contracts import DoneEvent, LogEvent, MetricEvent, RunSpec, SampleEvent, Task
from trainer.jobs import EventStream, StopFlag, config_from_json
from trainer.verifiers import DEFAULT_VERIFIER, SafetyPolicy, get_verifier, verifier_names

LOSS_TYPES = ("grpo", "dr_grpo", "dapo")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
ENVIRONMENTS = ("workbench",)


@dataclass(frozen=True)
class Config:
    """A grpo job's settings, read from the spec's `hyperparameters`."""

    num_generations: int = field(default=8, metadata={"help": "Completions per prompt (the group size)."})
    prompts_per_step: int = field(default=1, metadata={"help": "Prompts per optimizer step."})
    max_steps: int = field(default=40, metadata={"help": "Optimizer steps."})
    learning_rate: float = field(default=1e-5, metadata={"help": "Peak learning rate (above 0)."})
    loss_type: str = field(default="grpo", metadata={"help": "grpo, dr_grpo or dapo."})
    importance_sampling_level: str = field(default="token", metadata={
        "help": "token, or sequence (with loss_type grpo: GSPO)."})
    beta: float = field(default=0.0, metadata={"help": "KL coefficient against the starting policy (0: no KL term)."})
    max_completion_length: int = field(default=64, metadata={"help": "Most tokens per completion."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of the generations."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass of the generations."})
    verifier: str = field(default=DEFAULT_VERIFIER, metadata={
        "help": "Reward verifier: tool_call, binary, shaped or bfcl."})
    environment: str | None = field(default=None, metadata={
        "help": "workbench: reward the sandbox's execution success instead of the verifier's reward; null for none."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank (ignored when starting from a parent adapter)."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha (alpha / r scales the update)."})
    lora_dropout: float = field(default=0.05, metadata={"help": "Dropout on the LoRA input."})
    lora_target_modules: str = field(default="all-linear", metadata={
        "help": "Modules to adapt: all-linear, or a comma-separated list such as q_proj,v_proj."})
    eval_interval: int = field(default=10, metadata={
        "help": "Evaluate on the held-out tasks every this many steps; 0 for only at the start and the end."})
    heldout_sample_size: int | None = field(default=50, metadata={
        "help": "Held-out tasks per evaluation, drawn with the seed; null for all."})
    eval_max_new_tokens: int = field(default=96, metadata={"help": "Most tokens per held-out answer."})
    eval_batch_size: int = field(default=8, metadata={"help": "Prompts per held-out generation batch."})
    checkpoint_interval: int = field(default=10, metadata={
        "help": "Save a checkpoint (with samples) every this many steps; 0 for only the final adapter."})
    sample_events: int = field(default=8, metadata={"help": "Completions shown per checkpoint."})
    gradient_checkpointing: bool = field(default=True, metadata={
        "help": "Recompute activations in the backward pass: less memory for one more forward pass "
                "(TRL's default; false is faster where memory is plenty, as with a small model on a CPU)."})
    device: str = field(default="auto", metadata={"help": "auto, cpu, cuda ..."})
    resume: bool = field(default=False, metadata={
        "help": "Continue from the last checkpoint in the output folder (the app sets it on retried attempts)."})

    def __post_init__(self) -> None:
        finetune.check_learning_rate(self.learning_rate)
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"unknown loss_type {self.loss_type!r}; known: {', '.join(LOSS_TYPES)}")
        if self.importance_sampling_level not in IMPORTANCE_SAMPLING_LEVELS:
            raise ValueError(f"importance_sampling_level must be one of {', '.join(IMPORTANCE_SAMPLING_LEVELS)}")
        if self.num_generations < 2:
            raise ValueError("num_generations must be at least 2: GRPO compares completions within a group")
        for name in ("prompts_per_step", "max_steps", "max_completion_length", "eval_max_new_tokens",
                     "eval_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        for name in ("eval_interval", "checkpoint_interval", "sample_events"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be 0 or more")
        if self.beta < 0:
            raise ValueError("beta (the KL coefficient) must be 0 or more")
        if not self.temperature > 0:
            raise ValueError("temperature must be above 0: GRPO needs varied completions")
        if self.verifier not in verifier_names():
            raise ValueError(f"unknown verifier {self.verifier!r}; known: {', '.join(verifier_names())}")
        if self.environment not in (None, *ENVIRONMENTS):
            raise ValueError(f"environment must be one of {', '.join(ENVIRONMENTS)} or null")
        if self.heldout_sample_size is not None and self.heldout_sample_size < 1:
            raise ValueError("heldout_sample_size must be at least 1 (or null for all)")
        self.lora().check()

    def lora(self) -> finetune.LoraSettings:
        return finetune.LoraSettings(self.lora_r, self.lora_alpha, self.lora_dropout, self.lora_target_modules)


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
        from trainer.evaluate import execution_environment

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
        from trainer.parsing import parse_tool_calls

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
        from trainer.evaluate import last_user_text

        return [SampleEvent(step=step, task_id=row.task_id, prompt=last_user_text(self.tasks[row.task_id]),
                            completion=row.completion, reward=row.reward, components=row.components)
                for row in self.last_batch[:limit]]


class GrpoCallback(finetune.ProtocolCallbackBase):
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


def training_arguments(spec: RunSpec, config: Config, device: str) -> Any:
    from trl import GRPOConfig

    return GRPOConfig(
        **finetune.common_training_arguments(spec, device=device, checkpoint_interval=config.checkpoint_interval,
                                             max_steps=config.max_steps,
                                             gradient_checkpointing=config.gradient_checkpointing),
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


def run(spec: RunSpec, events: EventStream, stop: StopFlag) -> DoneEvent:
    """The `grpo` job: check everything, train, save the final adapter, report it."""
    from trainer.evaluate import snapshot_sha256
    from trainer.models import pick_device

    config = config_from_json(Config, spec.hyperparameters, "grpo hyperparameters")
    tasks = finetune.train_tasks(spec)
    parent = finetune.check_parent_adapter(spec)
    device = pick_device(config.device)
    if config.importance_sampling_level == "sequence" and config.loss_type != "grpo":
        events.emit(LogEvent(f"sequence-level importance sampling with the {config.loss_type} loss is not GSPO "
                             "(GSPO uses loss_type grpo)", level="warning"))
    reward = TaskReward(tasks, config.verifier, config.environment)
    model, tokenizer, _path = finetune.policy_model(spec, device)
    manifest = finetune.ManifestInfo(spec.base_model, snapshot_sha256(spec.task_paths),
                                     {"kind": "grpo", "parent_adapter": spec.adapter, **asdict(config)})
    heldout = finetune.heldout_evaluator(
        spec, sample_size=config.heldout_sample_size, verifier=config.verifier,
        max_new_tokens=config.eval_max_new_tokens, batch_size=config.eval_batch_size, device=device,
        environment=config.environment,
    )  # fmt: skip
    callback = finetune.as_trainer_callback(GrpoCallback)(
        events, stop, manifest, heldout=heldout, eval_interval=config.eval_interval,
        samples=lambda step: reward.samples(step, config.sample_events), reward=reward,
    )  # fmt: skip
    trainer = _trainer(spec, config, device, model, tokenizer, tasks, reward, callback, parent is None)
    callback.bind(trainer.model)
    events.emit(LogEvent(f"GRPO on {len(tasks)} train tasks ({config.loss_type}, "
                         f"{config.importance_sampling_level}-level, {config.num_generations} generations, "
                         f"{config.max_steps} steps) on {device}" + (f" from {spec.adapter}" if spec.adapter else "")))
    return finetune.train_and_save(trainer, callback, spec, manifest, stop, config.resume)


def _trainer(spec: RunSpec, config: Config, device: str, model: Any, tokenizer: Any, tasks: Sequence[Task],
             reward: TaskReward, callback: Any, new_adapter: bool) -> Any:
    from datasets import Dataset
    from trl import GRPOTrainer

    from trainer.prompts import render_prompt

    dataset = Dataset.from_list([{"prompt": render_prompt(task, tokenizer), "task_id": task.id} for task in tasks])
    return GRPOTrainer(
        model=model, reward_funcs=[reward], args=training_arguments(spec, config, device), train_dataset=dataset,
        processing_class=tokenizer, callbacks=[callback],
        peft_config=config.lora().peft_config() if new_adapter else None,
    )  # fmt: skip
