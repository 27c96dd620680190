"""The skeleton every training kind runs on: SFT, DPO and GRPO are recipes that fill it in.

`run` checks the spec (config, train input, parent adapter), loads the policy (the base model,
or the base with its trainable parent adapter), asks the kind's recipe for its transformers
`Trainer` and callback, trains (from the last checkpoint when resuming), evaluates on the
held-out tasks once more, and saves the final adapter with its manifest. A recipe does only
what is its own: `train_input` reads what it trains on (train tasks for SFT and GRPO, through
`TaskInput`; preference pairs for DPO), `prepare` checks what needs no model (before the slow
load), `limits` checks its length limits, `answer_lengths` gives the answers the held-out length
limit is derived from, and `build` makes the dataset, the reward, the callback and the TRL trainer.

Checkpoints land in `<output_dir>/checkpoints/checkpoint-<step>` (`trainer.spec.adapters`):
PEFT's adapter files plus the Trainer's optimizer and scheduler state, so `resume: true`
continues exactly where the last one stopped. SIGTERM asks the Trainer to save at the end of
the current step and stop; the job then ends as stopped (143).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from peft import LoraConfig, PeftModel

from trainer import adapters
from trainer.callbacks import HELDOUT_METRICS, HELDOUT_PREFIX, ManifestInfo, ProtocolCallback
from trainer.contracts import DoneEvent, LogEvent, RunSpec, Task
from trainer.flags import rate_value
from trainer.heldout import HeldoutEvaluator, heldout_evaluator
from trainer.jobs import EventStream, JobStopped, StopFlag
from trainer.lengths import Lengths, answer_tokens, checked_limit, report_cut
from trainer.models import ModelNotFoundError, load_model, pick_device, resolve_model
from trainer.spec.adapters import CHECKPOINTS, FINAL_ADAPTER, AdapterManifest, last_checkpoint, verify_adapter
from trainer.spec.config import LoraSettings, SpecError, TrainingConfig, config_from_json
from trainer.spec.eval import safety_policy
from trainer.spec.tasks import (
    SkippedLine,
    TaskFiles,
    read_task_files,
    skipped_warning,
    snapshot_sha256,
    with_skipped,
)
from trainer.verifiers import SafetyPolicy

ConfigT = TypeVar("ConfigT", bound=TrainingConfig)

# Past this many tokens a sequence's attention activations take most of a CPU run's memory (they grow with the
# square of its length): GRPO over 4 sequences of about 1,520 tokens passed 23 GB without gradient
# checkpointing and peaked at 12 GB with it; episode SFT on 5,574-token episodes 18.7 GiB without, 9.8 with.
LONG_SEQUENCE_TOKENS = 1024


@dataclass
class TrainingRun(Generic[ConfigT]):
    """What the skeleton hands a recipe's `build`: the checked spec and config, and the loaded policy."""

    spec: RunSpec
    config: ConfigT
    tasks: list[Task]
    device: str
    model: Any
    tokenizer: Any
    new_adapter: bool  # no parent adapter: the trainer adds a fresh LoRA adapter
    events: EventStream
    stop: StopFlag
    manifest: ManifestInfo
    heldout: HeldoutEvaluator | None

    def peft_config(self) -> LoraConfig | None:
        """The LoRA adapter to add; None when training the parent adapter further."""
        return lora_config(self.config.lora()) if self.new_adapter else None

    def callback_options(self) -> dict[str, Any]:
        return {"heldout": self.heldout, "eval_interval": self.config.eval_interval}

    def training_arguments(self, max_steps: int) -> dict[str, Any]:
        """Trainer arguments every kind uses: checkpoints in our layout, logs every step, no hub, no tqdm."""
        return {
            "output_dir": str(Path(self.spec.output_dir) / CHECKPOINTS),
            "seed": self.spec.seed,
            "data_seed": self.spec.seed,
            "max_steps": max_steps,
            "logging_steps": 1,
            "save_strategy": "steps" if self.config.checkpoint_interval else "no",
            "save_steps": self.config.checkpoint_interval or 500,
            "report_to": "none",
            "disable_tqdm": True,
            "use_cpu": self.device == "cpu",
            "bf16": self.device.startswith("cuda"),
            "fp16": False,
            "remove_unused_columns": False,
            "dataloader_num_workers": 0,
            "gradient_checkpointing": checkpointing(self.config, self.device),
        }


@dataclass
class Built:
    """A recipe's trainer, the callback bound to it, and the line that announces the run."""

    trainer: Any
    callback: ProtocolCallback
    summary: str


@dataclass
class Setup(Generic[ConfigT]):
    """What a recipe's `prepare` and `limits` see: the checked spec, config and train tasks, the agent's policy."""

    spec: RunSpec
    config: ConfigT
    tasks: list[Task]
    policy: SafetyPolicy
    events: EventStream


@dataclass(frozen=True)
class TrainInput:
    """What a recipe read from the spec's `task_paths`, as the skeleton sees it."""

    tasks: list[Task]  # the train tasks; none for a kind that trains on something else (DPO: its pairs)
    skipped: list[SkippedLine]
    what: str = "train task"  # names a line in the skipped-lines warning


class Recipe(Protocol[ConfigT]):
    """What a training kind adds to the skeleton."""

    kind: str
    config_class: type[ConfigT]

    def train_input(self, spec: RunSpec, config: ConfigT) -> TrainInput:
        """Read what the kind trains on from `spec.task_paths`; a SpecError when nothing usable is there."""

    def answer_lengths(self, setup: Setup[ConfigT], tokenizer: Any) -> Lengths:
        """The tokens of the answers the kind trains toward: `eval_max_new_tokens` is derived from them."""

    def prepare(self, setup: Setup[ConfigT]) -> None:
        """Checks and set-up that need no model: they fail before the slow load."""

    def limits(self, setup: Setup[ConfigT], tokenizer: Any) -> ConfigT:
        """The config with the kind's length limits checked against the train tasks (derived where null)."""

    def build(self, run: TrainingRun[ConfigT]) -> Built:
        """The kind's dataset, callback and TRL trainer over the loaded policy."""


class TaskInput:
    """The train input of the kinds that train on tasks (SFT, GRPO): the task files, their reference answers."""

    def train_input(self, spec: RunSpec, config: TrainingConfig) -> TrainInput:
        files = train_tasks(spec, config)
        return TrainInput(files.tasks, files.skipped)

    def answer_lengths(self, setup: Setup[Any], tokenizer: Any) -> Lengths:
        # With episodes, each reference call is one answer of a turn.
        return answer_tokens(setup.tasks, tokenizer, setup.config.max_turns > 1)


def run(spec: RunSpec, events: EventStream, stop: StopFlag, recipe: Recipe[Any]) -> DoneEvent:
    """One training job: check everything, train, save the final adapter, report it."""
    config = config_from_json(recipe.config_class, spec.hyperparameters, f"{recipe.kind} hyperparameters")
    train = recipe.train_input(spec, config)
    tasks = train.tasks
    if warning := skipped_warning(train.skipped, train.what):
        events.emit(warning)
    parent = check_parent_adapter(spec)
    device = pick_device(config.device)
    setup = Setup(spec, config, tasks, safety_policy(None, spec.safety_policy), events)
    recipe.prepare(setup)
    model, tokenizer = policy_model(spec, device)
    setup = dataclasses.replace(setup, config=recipe.limits(setup, tokenizer))
    config = heldout_limit(setup, recipe.answer_lengths(setup, tokenizer))
    manifest = ManifestInfo(spec.base_model, snapshot_sha256(spec.task_paths),
                            {"kind": recipe.kind, "parent_adapter": spec.adapter, **asdict(config)})
    heldout = heldout_evaluator(spec, config, device, setup.policy)
    if heldout is not None:
        report_cut(answer_tokens(heldout.tasks, tokenizer, config.max_turns > 1), knob="eval_max_new_tokens",
                   limit=heldout.max_new_tokens, events=events)
        if warning := skipped_warning(heldout.skipped, "held-out task"):
            events.emit(warning)
    built = recipe.build(TrainingRun(
        spec=spec, config=config, tasks=tasks, device=device, model=model, tokenizer=tokenizer,
        new_adapter=parent is None, events=events, stop=stop, manifest=manifest, heldout=heldout,
    ))  # fmt: skip
    built.callback.bind(built.trainer.model)
    events.emit(LogEvent(f"{built.summary} on {device}" + (f" from {spec.adapter}" if spec.adapter else "")))
    done = train_and_save(built.trainer, built.callback, spec, manifest, stop, config.resume)
    return with_skipped(done, train.skipped + (heldout.skipped if heldout is not None else []))


def heldout_limit(setup: Setup[ConfigT], answers: Lengths) -> ConfigT:
    """The config with `eval_max_new_tokens` checked against the answers trained toward (derived where null):
    the train tasks' reference answers (with episodes, each reference call), or DPO's chosen answers."""
    config = setup.config
    limit = checked_limit(answers, knob="eval_max_new_tokens", limit=config.eval_max_new_tokens,
                          max_cut_share=config.max_truncated_share, events=setup.events)
    return dataclasses.replace(config, eval_max_new_tokens=limit)


def checkpointing_for_length(config: ConfigT, longest: int, events: EventStream) -> ConfigT:
    """The config with `gradient_checkpointing` left null turned on when a sequence may pass
    LONG_SEQUENCE_TOKENS (on a GPU null means on anyway): a recipe's `limits` calls it with its longest."""
    if config.gradient_checkpointing is not None or longest <= LONG_SEQUENCE_TOKENS:
        return config
    events.emit(LogEvent(f"gradient_checkpointing on (null): sequences of up to {longest} tokens, past "
                         f"{LONG_SEQUENCE_TOKENS}, where attention's memory grows with the square of their length"))
    return dataclasses.replace(config, gradient_checkpointing=True)


def checkpointing(config: TrainingConfig, device: str) -> bool:
    """Gradient checkpointing as set (or as `checkpointing_for_length` set it), else on a GPU only (on a CPU it
    costs a forward pass a step)."""
    return config.gradient_checkpointing if config.gradient_checkpointing is not None else device.startswith("cuda")


def lora_config(settings: LoraSettings) -> LoraConfig:
    return LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                      target_modules=settings.targets(), task_type="CAUSAL_LM")


def train_tasks(spec: RunSpec, config: TrainingConfig) -> TaskFiles:
    try:
        return read_task_files(spec.task_paths, strict=config.strict_tasks)
    except SpecError as error:
        raise SpecError(f"the train snapshot has no usable tasks: {error}") from None


def check_parent_adapter(spec: RunSpec) -> AdapterManifest | None:
    """The verified parent adapter's manifest; a SpecError when it was trained on another base model."""
    if spec.adapter is None:
        return None
    manifest = verify_adapter(spec.adapter)
    if not same_base_model(manifest.base_model, spec.base_model):
        raise SpecError(
            f"the parent adapter {spec.adapter} was trained on base model {manifest.base_model!r}, "
            f"not {spec.base_model!r}: a LoRA adapter only fits the model it was trained on"
        )
    return manifest


def same_base_model(first: str, second: str) -> bool:
    if first == second:
        return True
    try:
        return Path(resolve_model(first)).resolve() == Path(resolve_model(second)).resolve()
    except ModelNotFoundError:
        return False


def policy_model(spec: RunSpec, device: str) -> tuple[Any, Any]:
    """The model to train (the base, or the base with the trainable parent adapter) and its tokenizer."""
    loaded = load_model(spec.base_model, device)
    model = loaded.model
    if spec.adapter is not None:
        model = PeftModel.from_pretrained(model, spec.adapter, is_trainable=True)
    model.train()
    return model, loaded.tokenizer


def resume_point(spec: RunSpec, resume: bool, events: EventStream) -> str | None:
    if not resume:
        return None
    checkpoint = last_checkpoint(spec.output_dir)
    if checkpoint is None:
        events.emit(LogEvent(f"resume requested but {spec.output_dir}/{CHECKPOINTS} has no checkpoint; "
                             "starting from step 0", level="warning"))
        return None
    verify_adapter(checkpoint)
    events.emit(LogEvent(f"resuming from {checkpoint}"))
    return checkpoint


def save_final(model: Any, spec: RunSpec, manifest: ManifestInfo, metrics: dict[str, Any]) -> None:
    adapters.save_adapter(model, Path(spec.output_dir) / FINAL_ADAPTER, base_model=manifest.base_model,
                          snapshot_sha256=manifest.snapshot_sha256, config=manifest.config, metrics=metrics)


def final_metrics(callback: ProtocolCallback, steps: int, seconds: float) -> dict[str, Any]:
    """`steps` is the run's last step; `seconds` and `seconds_per_step` are this attempt's, which a resumed
    attempt began at `callback.first_step`."""
    ran = steps - callback.first_step
    metrics: dict[str, Any] = {"steps": steps, "seconds": round(seconds, 1),
                               "seconds_per_step": round(seconds / ran, 3) if ran > 0 else None}
    metrics.update({f"train/{name}": value for name, value in callback.last_step_metrics.items()})
    for name in HELDOUT_METRICS:
        value = rate_value(callback.last_heldout, name)
        if value is not None:
            metrics[HELDOUT_PREFIX + name] = value
    if callback.flags.raised:
        metrics["flags"] = sorted(callback.flags.raised)
    return metrics


def train_and_save(trainer: Any, callback: ProtocolCallback, spec: RunSpec, manifest: ManifestInfo,
                   stop: StopFlag, resume: bool) -> DoneEvent:
    """Train (from the last checkpoint when resuming), evaluate once more, save the final adapter."""
    started = time.perf_counter()
    trainer.train(resume_from_checkpoint=resume_point(spec, resume, callback.events))
    if stop.requested:
        raise JobStopped(f"stopped by SIGTERM at step {trainer.state.global_step}; the last checkpoint is kept")
    callback.evaluate_heldout(trainer.state.global_step)
    metrics = final_metrics(callback, trainer.state.global_step, time.perf_counter() - started)
    folder = Path(spec.output_dir) / FINAL_ADAPTER
    if callback.main:  # the other processes of a multi-process launch hold the same weights
        save_final(trainer.model, spec, manifest, metrics)
    return DoneEvent(metrics=metrics, files={"adapter_dir": str(folder)})
