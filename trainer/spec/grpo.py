"""The `grpo` job's config: TRL's GRPOTrainer on a LoRA adapter, rewarded by a verifier or an environment.

`loss_type` picks GRPO, Dr. GRPO or DAPO; `importance_sampling_level: sequence` with the grpo
loss is GSPO.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainer.spec.config import TrainingConfig, check_at_least
from trainer.verifiers import DEFAULT_VERIFIER

LOSS_TYPES = ("grpo", "dr_grpo", "dapo")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
ENVIRONMENTS = ("workbench",)


@dataclass(frozen=True)
class GrpoConfig(TrainingConfig):
    """A grpo job's settings, read from the spec's `hyperparameters`."""

    learning_rate: float = field(default=1e-5, metadata={"help": "Peak learning rate (above 0)."})
    verifier: str = field(default=DEFAULT_VERIFIER, metadata={
        "help": "Reward verifier: tool_call, binary, shaped or bfcl."})
    eval_interval: int = field(default=10, metadata={
        "help": "Evaluate on the held-out tasks every this many steps; 0 for only at the start and the end."})
    checkpoint_interval: int = field(default=10, metadata={
        "help": "Save a checkpoint (with samples) every this many steps; 0 for only the final adapter."})
    num_generations: int = field(default=8, metadata={"help": "Completions per prompt (the group size)."})
    prompts_per_step: int = field(default=1, metadata={"help": "Prompts per optimizer step."})
    max_steps: int = field(default=40, metadata={"help": "Optimizer steps."})
    loss_type: str = field(default="grpo", metadata={"help": "grpo, dr_grpo or dapo."})
    importance_sampling_level: str = field(default="token", metadata={
        "help": "token, or sequence (with loss_type grpo: GSPO)."})
    beta: float = field(default=0.0, metadata={"help": "KL coefficient against the starting policy (0: no KL term)."})
    max_completion_length: int = field(default=64, metadata={"help": "Most tokens per completion."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of the generations."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass of the generations."})
    environment: str | None = field(default=None, metadata={
        "help": "workbench: reward the sandbox's execution success instead of the verifier's reward; null for none."})
    sample_events: int = field(default=8, metadata={"help": "Completions shown per checkpoint."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"unknown loss_type {self.loss_type!r}; known: {', '.join(LOSS_TYPES)}")
        if self.importance_sampling_level not in IMPORTANCE_SAMPLING_LEVELS:
            raise ValueError(f"importance_sampling_level must be one of {', '.join(IMPORTANCE_SAMPLING_LEVELS)}")
        if self.num_generations < 2:
            raise ValueError("num_generations must be at least 2: GRPO compares completions within a group")
        check_at_least(self, 1, "prompts_per_step", "max_steps", "max_completion_length")
        check_at_least(self, 0, "sample_events")
        if self.beta < 0:
            raise ValueError("beta (the KL coefficient) must be 0 or more")
        if not self.temperature > 0:
            raise ValueError("temperature must be above 0: GRPO needs varied completions")
        if self.environment not in (None, *ENVIRONMENTS):
            raise ValueError(f"environment must be one of {', '.join(ENVIRONMENTS)} or null")

    def heldout_environment(self) -> str | None:
        return self.environment
