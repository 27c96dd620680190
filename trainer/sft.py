"""The `sft` job: TRL's SFTTrainer on a LoRA adapter, teaching the output format from expected calls.

Each train task becomes a prompt-completion pair: the prompt rendered by the runtime's prompt
function (what evaluation and GRPO show the model), the completion its reference calls in the
prompt's output format (`trainer.prompts.format_tool_calls`). The loss covers the completion
only. Tasks that expect no call have no reference answer to imitate and are skipped (the log
says how many). The config is `trainer.spec.sft.SftConfig`; what every training kind shares
(LoRA, held-out evaluation, checkpoints, events) is the skeleton in `trainer.training`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from datasets import Dataset
from trl import SFTConfig, SFTTrainer

from trainer import training
from trainer.callbacks import ProtocolCallback
from trainer.contracts import DoneEvent, LogEvent, RunSpec, Task
from trainer.jobs import EventStream, StopFlag
from trainer.lengths import checked_limit, example_tokens, prompt_tokens, refuse_empty_examples
from trainer.prompts import format_tool_calls, reference_calls, render_prompt
from trainer.spec.config import SpecError
from trainer.spec.sft import SftConfig


def examples(tasks: Sequence[Task], tokenizer: Any) -> list[dict[str, str]]:
    """Prompt-completion pairs for the tasks that expect a call; the completion is the reference answer."""
    return [
        {"prompt": render_prompt(task, tokenizer), "completion": format_tool_calls(reference_calls(task))}
        for task in tasks
        if task.expected_calls
    ]


def training_arguments(run: training.TrainingRun[SftConfig]) -> SFTConfig:
    config = run.config
    return SFTConfig(
        **run.training_arguments(config.max_steps),
        num_train_epochs=config.num_train_epochs,
        learning_rate=config.learning_rate,
        per_device_train_batch_size=config.per_device_train_batch_size,
        gradient_accumulation_steps=1,
        warmup_steps=config.warmup_ratio,  # below 1: a share of the steps (transformers 5)
        max_length=config.max_length,
        completion_only_loss=True,
        packing=False,
    )


class SftRecipe:
    kind = "sft"
    config_class = SftConfig

    def prepare(self, setup: training.Setup[SftConfig]) -> None:
        if not any(task.expected_calls for task in setup.tasks):
            raise SpecError("none of the train tasks expects a tool call: SFT has no reference answers to learn from")
        skipped = sum(1 for task in setup.tasks if not task.expected_calls)
        if skipped:
            setup.events.emit(LogEvent(f"{skipped} train tasks expect no call and are skipped"))

    def limits(self, setup: training.Setup[SftConfig], tokenizer: Any) -> SftConfig:
        # TRL cuts an example at max_length from the right, so a cut example loses its answer first.
        config = setup.config
        limit = checked_limit(example_tokens(setup.tasks, tokenizer), knob="max_length", limit=config.max_length,
                              max_cut_share=config.max_truncated_share, events=setup.events)
        refuse_empty_examples(prompt_tokens(setup.tasks, tokenizer), limit=limit, events=setup.events)
        return dataclasses.replace(config, max_length=limit)

    def build(self, run: training.TrainingRun[SftConfig]) -> training.Built:
        rows = examples(run.tasks, run.tokenizer)
        callback = ProtocolCallback(run.events, run.stop, run.manifest, **run.callback_options())
        trainer = SFTTrainer(
            model=run.model, args=training_arguments(run), train_dataset=Dataset.from_list(rows),
            processing_class=run.tokenizer, callbacks=[callback], peft_config=run.peft_config(),
        )  # fmt: skip
        return training.Built(trainer, callback,
                              f"SFT on {len(rows)} examples for {run.config.num_train_epochs:g} epoch(s)")


def run(spec: RunSpec, events: EventStream, stop: StopFlag) -> DoneEvent:
    """The `sft` job."""
    return training.run(spec, events, stop, SftRecipe())
