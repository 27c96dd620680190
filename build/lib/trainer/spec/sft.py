"""The `sft` job's config: TRL's SFTTrainer on a LoRA adapter, learning the reference calls.

With `max_turns` above 1 (an `environment` set) the demonstrations are whole reference episodes
played in that environment (`trainer.sft`), and `max_length` bounds each whole episode.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainer.spec.config import TrainingConfig, check_at_least


@dataclass(frozen=True)
class SftConfig(TrainingConfig):
    """An sft job's settings, read from the spec's `hyperparameters`."""

    num_train_epochs: float = field(default=2.0, metadata={"help": "Passes over the train tasks."})
    max_steps: int = field(default=-1, metadata={"help": "Stop after this many steps; -1 to run the epochs."})
    per_device_train_batch_size: int = field(default=4, metadata={"help": "Examples per step."})
    max_length: int | None = field(default=None, metadata={
        "help": "Most tokens per example (prompt + completion; with max_turns above 1, the whole reference episode); "
                "null: derived from the train tasks (99th percentile + 16). A run whose limit would cut more than "
                "max_truncated_share of them is refused."})
    warmup_ratio: float = field(default=0.05, metadata={"help": "Share of the steps spent warming up."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.num_train_epochs > 0:
            raise ValueError("num_train_epochs must be above 0")
        if self.max_steps == 0 or self.max_steps < -1:
            raise ValueError("max_steps must be at least 1, or -1 to run the epochs")
        check_at_least(self, 1, "per_device_train_batch_size")
        if self.max_length is not None and self.max_length < 1:
            raise ValueError("max_length must be at least 1 (or null to derive it)")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ValueError("warmup_ratio must be in [0, 1)")
