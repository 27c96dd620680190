"""The `sft` job: TRL's SFTTrainer on a LoRA adapter, teaching the output format from expected calls.

With `max_turns` 1 each train task becomes a prompt-completion pair: the prompt rendered by the
runtime's prompt function (what evaluation and GRPO show the model), the completion its reference
calls in the prompt's output format (`trainer.prompts.format_tool_calls`). The loss covers the
completion only.

With `max_turns` above 1 (an environment set) each train task's demonstration is a whole
episode (`trainer.demonstrations`): its reference calls played one a turn in the job's
environment under the agent's safety policy, each followed by the environment's real
observation, then the closing answer without a call (`trainer.prompts.CLOSING_TEXT`). The
training text is what `render_prompt` showed at each turn of that episode, pre-tokenized, with
the loss on every assistant turn and nothing else (system and user text, tool results masked).
The episodes are played before the model loads; calls the environment refused and reference
episodes it does not pass are logged, and an episode the environment broke is left out.

Tasks that expect no call have no reference answer to imitate and are skipped (the log says how
many). The config is `trainer.spec.sft.SftConfig`; what every training kind shares (LoRA,
held-out evaluation, checkpoints, events) is the skeleton in `trainer.training`.
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
from trainer.demonstrations import References, episode_example, play_references
from trainer.evaluate import execution_environment
from trainer.jobs import EventStream, StopFlag
from trainer.lengths import (
    checked_limit,
    episode_tokens,
    example_tokens,
    first_answer_tokens,
    prompt_tokens,
    refuse_empty_examples,
)
from trainer.prompts import EpisodeRenderError, format_tool_calls, reference_calls, render_prompt
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


def reference_episodes(setup: training.Setup[SftConfig]) -> References:
    """The train tasks' reference episodes, played in the job's environment; what went wrong is logged."""
    config = setup.config
    environment = execution_environment(config.environment, setup.policy)
    assert environment is not None, "max_turns above 1 needs an environment (SftConfig checks it)"
    try:
        references = play_references(setup.tasks, environment)
    finally:
        environment.close()
    events = setup.events
    if not references.played:
        first = references.broken[0] if references.broken else None
        reason = f": {first.task.id}: {first.failure}" if first else ""
        raise SpecError(f"no reference episode could be played{reason}")
    for broken in references.broken:
        events.emit(LogEvent(f"reference episode of {broken.task.id} is not trained on: {broken.failure}", "warning"))
    if references.unreferenced:
        events.emit(LogEvent(f"{len(references.unreferenced)} task(s) have no reference calls and an expected end "
                             "state that answering alone does not reach; they are not trained on", "warning"))
    if references.refused_calls:
        events.emit(LogEvent(f"the environment refused {references.refused_calls} reference call(s); they are "
                             "trained on as the reference makes them", "warning"))
    if references.not_passed:
        events.emit(LogEvent(f"{references.not_passed} of {len(references.played)} reference episodes do not pass "
                             f"in {config.environment}", "warning"))
    longer = sum(1 for played in references.played if _answers(played.turns) > config.max_turns)
    if longer:
        events.emit(LogEvent(f"{longer} reference episodes take more turns than max_turns ({config.max_turns}): "
                             "evaluation stops them sooner", "warning"))
    return references


def _answers(turns: Sequence[dict[str, Any]]) -> int:
    return sum(1 for turn in turns if turn.get("role") == "assistant")


class SftRecipe(training.TaskInput):
    kind = "sft"
    config_class = SftConfig

    def __init__(self) -> None:
        # Episode SFT: played in `prepare` (before the model loads), tokenized in `limits`, trained on in `build`.
        self.references: References | None = None
        self.episode_rows: list[dict[str, list[int]]] | None = None

    def prepare(self, setup: training.Setup[SftConfig]) -> None:
        if not any(task.expected_calls for task in setup.tasks):
            raise SpecError("none of the train tasks expects a tool call: SFT has no reference answers to learn from")
        skipped = sum(1 for task in setup.tasks if not task.expected_calls)
        if skipped:
            setup.events.emit(LogEvent(f"{skipped} train tasks expect no call and are skipped"))
        if setup.config.max_turns > 1:
            self.references = reference_episodes(setup)

    def limits(self, setup: training.Setup[SftConfig], tokenizer: Any) -> SftConfig:
        # TRL cuts an example at max_length from the right, so a cut example loses its answer (or last turns) first.
        config = setup.config
        if self.references is not None:
            try:
                self.episode_rows = [episode_example(played, tokenizer) for played in self.references.played]
            except EpisodeRenderError as error:
                raise SpecError(f"episode SFT: {error}") from None
            whole, prompts = episode_tokens(self.episode_rows), first_answer_tokens(self.episode_rows)
        else:
            whole, prompts = example_tokens(setup.tasks, tokenizer), prompt_tokens(setup.tasks, tokenizer)
        limit = checked_limit(whole, knob="max_length", limit=config.max_length,
                              max_cut_share=config.max_truncated_share, events=setup.events)
        refuse_empty_examples(prompts, limit=limit, events=setup.events)
        longest = min(max(whole.counts, default=0), limit)
        return training.checkpointing_for_length(dataclasses.replace(config, max_length=limit), longest, setup.events)

    def build(self, run: training.TrainingRun[SftConfig]) -> training.Built:
        rows: Sequence[dict[str, Any]] = (
            self.episode_rows if self.episode_rows is not None else examples(run.tasks, run.tokenizer)
        )
        what = "reference episodes" if self.episode_rows is not None else "examples"
        callback = ProtocolCallback(run.events, run.stop, run.manifest, **run.callback_options())
        trainer = SFTTrainer(
            model=run.model, args=training_arguments(run), train_dataset=Dataset.from_list(list(rows)),
            processing_class=run.tokenizer, callbacks=[callback], peft_config=run.peft_config(),
        )  # fmt: skip
        return training.Built(trainer, callback,
                              f"SFT on {len(rows)} {what} for {run.config.num_train_epochs:g} epoch(s)")


def run(spec: RunSpec, events: EventStream, stop: StopFlag) -> DoneEvent:
    """The `sft` job."""
    return training.run(spec, events, stop, SftRecipe())
