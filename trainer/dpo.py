"""The `dpo` job: TRL's DPOTrainer on a LoRA adapter, from preference pairs (`trainer.spec.pairs`).

Each pair's prompt is rendered by the runtime's prompt function (`trainer.prompts.render_prompt`, what
evaluation, GRPO and serving show the model), and each answer as the assistant turn that follows it in
that same rendering (`trainer.prompts.render_episode`): a call in the prompt's output format, through
the end-of-turn marker, plus the tokenizer's end-of-sequence token where the marker is not it. TRL is
given these texts, not messages: its own chat-template path would render the tools and calls as the
model's template does, which is not what the model is served. The loss covers the answers only.

The reference model is the policy the run starts from. With no parent adapter that is the base model:
TRL disables the new adapter to score the reference. With a parent adapter (an SFT adapter, say) it is
the parent: TRL keeps a frozen copy of it (its adapter `ref`) and trains the other (`default`), so the
run moves the policy away from what the parent answers, not from the bare base model. Only the trained
adapter is saved.

The job reports TRL's implicit-reward metrics (`rewards/chosen`, `rewards/rejected`, `rewards/margins`,
`rewards/accuracies`, `logps/chosen`, `logps/rejected`) as metric events, evaluates on held-out tasks as
SFT and GRPO do, and watches for reward hacking with the preference accuracy as its training reward. The
config is `trainer.spec.dpo.DpoConfig`; the shared skeleton (LoRA, held-out evaluation, checkpoints,
flags, events) is `trainer.training`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from datasets import Dataset
from trl import DPOConfig, DPOTrainer

from trainer import training
from trainer.callbacks import ProtocolCallback
from trainer.contracts import DoneEvent, RunSpec
from trainer.jobs import EventStream, StopFlag
from trainer.lengths import Lengths, checked_limit, refuse_empty_examples
from trainer.prompts import EpisodeRenderError, render_episode, render_prompt
from trainer.spec.config import SpecError
from trainer.spec.dpo import DpoConfig
from trainer.spec.pairs import PreferencePair, read_pair_files

TRAIN_REWARD = "rewards/accuracies"  # what the reward-hacking flag compares with the held-out metric
PAIRS = "the preference pairs"


@dataclass(frozen=True)
class RenderedPair:
    """A pair as TRL's preference texts: the prompt, and each answer as the turn after it."""

    id: str
    prompt: str
    chosen: str
    rejected: str

    def row(self) -> dict[str, str]:
        return {"prompt": self.prompt, "chosen": self.chosen, "rejected": self.rejected}


def render_pair(pair: PreferencePair, tokenizer: Any) -> RenderedPair:
    """The pair in the prompt format the model is evaluated and served with; a SpecError where it cannot be."""
    task = pair.prompt_task()
    prompt = render_prompt(task, tokenizer)
    return RenderedPair(pair.id, prompt, answer_text(pair, pair.chosen, prompt, tokenizer),
                        answer_text(pair, pair.rejected, prompt, tokenizer))


def answer_text(pair: PreferencePair, answer: Mapping[str, Any], prompt: str, tokenizer: Any) -> str:
    """The answer as the model would have to write it after `prompt`, ending with the end-of-sequence token."""
    try:
        rendered = render_episode(pair.prompt_task(), [dict(answer)], tokenizer)
    except EpisodeRenderError as error:
        raise SpecError(f"pair {pair.id}: {error}") from None
    start, end = rendered.assistant_spans[0]
    assert rendered.text[:start] == prompt, "render_episode starts each answer where render_prompt ends"
    text = rendered.text[start:end]
    eos = tokenizer.eos_token or ""
    return text if text.endswith(eos) else text + eos


def sequence_lengths(pairs: list[RenderedPair], tokenizer: Any) -> Lengths:
    """Tokens of each prompt with its chosen answer and with its rejected one: what `max_length` cuts."""
    return Lengths("prompts with their chosen or rejected answer", [
        _count(tokenizer, pair.prompt + answer) for pair in pairs for answer in (pair.chosen, pair.rejected)
    ], PAIRS)  # fmt: skip


def prompt_lengths(pairs: list[RenderedPair], tokenizer: Any) -> Lengths:
    return Lengths("prompts", [_count(tokenizer, pair.prompt) for pair in pairs], PAIRS)


def chosen_lengths(pairs: list[RenderedPair], tokenizer: Any) -> Lengths:
    """Tokens of each chosen answer, the end-of-sequence token included: what a held-out answer is bounded by."""
    return Lengths("chosen answers", [len(tokenizer(pair.chosen, add_special_tokens=False)["input_ids"])
                                      for pair in pairs], PAIRS)


def _count(tokenizer: Any, text: str) -> int:
    # As TRL tokenizes a preference text: the whole string, with the tokenizer's special tokens.
    return len(tokenizer(text)["input_ids"])


class DpoCallback(ProtocolCallback):
    """The shared callback, with the preference accuracy as the training reward the flags watch."""

    def log(self, step: int, logs: Mapping[str, Any]) -> None:
        super().log(step, logs)
        accuracy = logs.get(TRAIN_REWARD)
        if isinstance(accuracy, (int, float)):
            self.flags.train_reward(float(accuracy))


def training_arguments(run: training.TrainingRun[DpoConfig]) -> DPOConfig:
    config = run.config
    losses, weights = config.losses()
    return DPOConfig(
        **run.training_arguments(config.max_steps),
        num_train_epochs=config.num_train_epochs,
        learning_rate=config.learning_rate,
        per_device_train_batch_size=config.per_device_train_batch_size,
        gradient_accumulation_steps=1,
        warmup_steps=config.warmup_ratio,  # below 1: a share of the steps (transformers 5)
        max_length=config.max_length,
        truncation_mode="keep_start",
        beta=config.beta,
        loss_type=losses,
        loss_weights=weights,
        label_smoothing=config.label_smoothing,
    )


class DpoRecipe:
    kind = "dpo"
    config_class = DpoConfig

    def __init__(self) -> None:
        self.pairs: list[PreferencePair] = []  # read in `train_input`
        self.rendered: list[RenderedPair] = []  # rendered in `limits`, once the tokenizer is loaded

    def train_input(self, spec: RunSpec, config: DpoConfig) -> training.TrainInput:
        files = read_pair_files(spec.task_paths, strict=config.strict_tasks)
        self.pairs = files.pairs
        return training.TrainInput(tasks=[], skipped=files.skipped, what="preference pair")

    def prepare(self, setup: training.Setup[DpoConfig]) -> None:
        """Nothing to check before the model loads: the pairs were checked as they were read."""

    def limits(self, setup: training.Setup[DpoConfig], tokenizer: Any) -> DpoConfig:
        # TRL cuts a sequence at max_length from the right: a cut pair compares the answers' beginnings only.
        self.rendered = [render_pair(pair, tokenizer) for pair in self.pairs]
        config = setup.config
        sequences = sequence_lengths(self.rendered, tokenizer)
        limit = checked_limit(sequences, knob="max_length", limit=config.max_length,
                              max_cut_share=config.max_truncated_share, events=setup.events)
        refuse_empty_examples(prompt_lengths(self.rendered, tokenizer), limit=limit, events=setup.events)
        longest = min(max(sequences.counts, default=0), limit)
        return training.checkpointing_for_length(dataclasses.replace(config, max_length=limit), longest, setup.events)

    def answer_lengths(self, setup: training.Setup[DpoConfig], tokenizer: Any) -> Lengths:
        return chosen_lengths(self.rendered, tokenizer)

    def build(self, run: training.TrainingRun[DpoConfig]) -> training.Built:
        config = run.config
        callback = DpoCallback(run.events, run.stop, run.manifest, **run.callback_options())
        trainer = DPOTrainer(
            model=run.model, args=training_arguments(run),
            train_dataset=Dataset.from_list([pair.row() for pair in self.rendered]),
            processing_class=run.tokenizer, callbacks=[callback], peft_config=run.peft_config(),
        )  # fmt: skip
        reference = "the parent adapter" if run.spec.adapter else "the base model"
        return training.Built(trainer, callback, (
            f"DPO on {len(self.rendered)} preference pairs ({config.describe()}; reference: {reference}) for "
            f"{config.num_train_epochs:g} epoch(s)"))


def run(spec: RunSpec, events: EventStream, stop: StopFlag) -> DoneEvent:
    """The `dpo` job."""
    return training.run(spec, events, stop, DpoRecipe())
