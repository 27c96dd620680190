"""The `sft` job: TRL's SFTTrainer on a LoRA adapter, teaching the output format from expected calls.

Each train task becomes a prompt-completion pair: the prompt rendered by the runtime's prompt
function (what evaluation and GRPO show the model), the completion its reference calls in the
prompt's output format (`trainer.prompts.format_tool_calls`). The loss covers the completion
only. Tasks that expect no call have no reference answer to imitate and are skipped (the log
says how many). What GRPO shares (LoRA, held-out evaluation, checkpoints, events) is in
`trainer.finetune`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from trainer import finetune
from trainer.contracts import DoneEvent, LogEvent, RunSpec, Task
from trainer.jobs import EventStream, SpecError, StopFlag, config_from_json
from trainer.verifiers import DEFAULT_VERIFIER, verifier_names


@dataclass(frozen=True)
class Config:
    """An sft job's settings, read from the spec's `hyperparameters`."""

    num_train_epochs: float = field(default=2.0, metadata={"help": "Passes over the train tasks."})
    max_steps: int = field(default=-1, metadata={"help": "Stop after this many steps; -1 to run the epochs."})
    learning_rate: float = field(default=2e-4, metadata={"help": "Peak learning rate (above 0)."})
    per_device_train_batch_size: int = field(default=4, metadata={"help": "Examples per step."})
    max_length: int = field(default=1024, metadata={"help": "Most tokens per example (prompt + completion)."})
    warmup_ratio: float = field(default=0.05, metadata={"help": "Share of the steps spent warming up."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank (ignored when starting from a parent adapter)."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha (alpha / r scales the update)."})
    lora_dropout: float = field(default=0.05, metadata={"help": "Dropout on the LoRA input."})
    lora_target_modules: str = field(default="all-linear", metadata={
        "help": "Modules to adapt: all-linear, or a comma-separated list such as q_proj,v_proj."})
    verifier: str = field(default=DEFAULT_VERIFIER, metadata={"help": "Verifier of the held-out evaluations."})
    eval_interval: int = field(default=0, metadata={
        "help": "Evaluate on the held-out tasks every this many steps; 0 for only at the start and the end."})
    heldout_sample_size: int | None = field(default=50, metadata={
        "help": "Held-out tasks per evaluation, drawn with the seed; null for all."})
    eval_max_new_tokens: int = field(default=96, metadata={"help": "Most tokens per held-out answer."})
    eval_batch_size: int = field(default=8, metadata={"help": "Prompts per held-out generation batch."})
    checkpoint_interval: int = field(default=50, metadata={
        "help": "Save a checkpoint every this many steps; 0 for only the final adapter."})
    gradient_checkpointing: bool = field(default=True, metadata={
        "help": "Recompute activations in the backward pass: less memory for one more forward pass "
                "(TRL's default; false is faster where memory is plenty, as with a small model on a CPU)."})
    device: str = field(default="auto", metadata={"help": "auto, cpu, cuda ..."})
    resume: bool = field(default=False, metadata={
        "help": "Continue from the last checkpoint in the output folder (the app sets it on retried attempts)."})

    def __post_init__(self) -> None:
        finetune.check_learning_rate(self.learning_rate)
        if not self.num_train_epochs > 0:
            raise ValueError("num_train_epochs must be above 0")
        if self.max_steps == 0 or self.max_steps < -1:
            raise ValueError("max_steps must be at least 1, or -1 to run the epochs")
        for name in ("per_device_train_batch_size", "max_length", "eval_max_new_tokens", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        for name in ("eval_interval", "checkpoint_interval"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be 0 or more")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ValueError("warmup_ratio must be in [0, 1)")
        if self.verifier not in verifier_names():
            raise ValueError(f"unknown verifier {self.verifier!r}; known: {', '.join(verifier_names())}")
        if self.heldout_sample_size is not None and self.heldout_sample_size < 1:
            raise ValueError("heldout_sample_size must be at least 1 (or null for all)")
        self.lora().check()

    def lora(self) -> finetune.LoraSettings:
        return finetune.LoraSettings(self.lora_r, self.lora_alpha, self.lora_dropout, self.lora_target_modules)


def examples(tasks: Sequence[Task], tokenizer: Any) -> list[dict[str, str]]:
    """Prompt-completion pairs for the tasks that expect a call; the completion is the reference answer."""
    from trainer.prompts import format_tool_calls, reference_calls, render_prompt

    return [
        {"prompt": render_prompt(task, tokenizer), "completion": format_tool_calls(reference_calls(task))}
        for task in tasks
        if task.expected_calls
    ]


def training_arguments(spec: RunSpec, config: Config, device: str) -> Any:
    from trl import SFTConfig

    return SFTConfig(
        **finetune.common_training_arguments(spec, device=device, checkpoint_interval=config.checkpoint_interval,
                                             max_steps=config.max_steps,
                                             gradient_checkpointing=config.gradient_checkpointing),
        num_train_epochs=config.num_train_epochs,
        learning_rate=config.learning_rate,
        per_device_train_batch_size=config.per_device_train_batch_size,
        gradient_accumulation_steps=1,
        warmup_steps=config.warmup_ratio,  # below 1: a share of the steps (transformers 5)
        max_length=config.max_length,
        completion_only_loss=True,
        packing=False,
    )


def run(spec: RunSpec, events: EventStream, stop: StopFlag) -> DoneEvent:
    """The `sft` job: check everything, train, save the final adapter, report it."""
    from datasets import Dataset
    from trl import SFTTrainer

    from trainer.evaluate import snapshot_sha256
    from trainer.models import pick_device

    config = config_from_json(Config, spec.hyperparameters, "sft hyperparameters")
    tasks = finetune.train_tasks(spec)
    parent = finetune.check_parent_adapter(spec)
    device = pick_device(config.device)
    model, tokenizer, _path = finetune.policy_model(spec, device)
    rows = examples(tasks, tokenizer)
    if not rows:
        raise SpecError("none of the train tasks expects a tool call: SFT has no reference answers to learn from")
    if len(rows) < len(tasks):
        events.emit(LogEvent(f"{len(tasks) - len(rows)} train tasks expect no call and are skipped"))
    manifest = finetune.ManifestInfo(spec.base_model, snapshot_sha256(spec.task_paths),
                                     {"kind": "sft", "parent_adapter": spec.adapter, **asdict(config)})
    heldout = finetune.heldout_evaluator(
        spec, sample_size=config.heldout_sample_size, verifier=config.verifier,
        max_new_tokens=config.eval_max_new_tokens, batch_size=config.eval_batch_size, device=device,
    )  # fmt: skip
    callback = finetune.as_trainer_callback(finetune.ProtocolCallbackBase)(
        events, stop, manifest, heldout=heldout, eval_interval=config.eval_interval
    )
    trainer = SFTTrainer(
        model=model, args=training_arguments(spec, config, device), train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer, callbacks=[callback],
        peft_config=config.lora().peft_config() if parent is None else None,
    )  # fmt: skip
    callback.bind(trainer.model)
    events.emit(LogEvent(f"SFT on {len(rows)} examples for {config.num_train_epochs:g} epoch(s) on {device}"
                         + (f" from {spec.adapter}" if spec.adapter else "")))
    return finetune.train_and_save(trainer, callback, spec, manifest, stop, config.resume)
