"""The `grpo` job's config: TRL's GRPOTrainer on a LoRA adapter, rewarded by a verifier, an environment or a judge.

The variants are what their knobs set, and a combination that cannot have the effect it names is
refused rather than run:
- `loss_type` is how token losses are aggregated: `dapo` (TRL's default: over the batch's tokens,
  no length bias), `dr_grpo` (over a constant; needs `scale_rewards: none`, which it defaults to),
  `grpo` (per sequence, length-biased);
- the importance ratio of a generation batch differs from 1 only when the batch is used for more
  than one gradient step (`num_iterations` > 1, or `steps_per_generation` > 1): only then do
  sequence-level weighting (GSPO) and clipping (`epsilon`, DAPO's clip-higher `epsilon_high`) act,
  so both are refused with one step per batch;
- DAPO's dynamic sampling is `dynamic_sampling_redraws`: a generation batch whose groups all tie (no
  advantage, no gradient) is drawn again with other tasks; `mask_truncated_completions` keeps cut
  completions out of the loss;
- `reward: judge` scores each answer alone (`judge_mode: single`) or the group's answers together in
  one judge chat (`judge_mode: group`, after OpenPipe's RULER), which needs a reply long enough for
  a score line per candidate (`judge_max_new_tokens`).
`describe()` names what a config sets, for the log and the manifest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainer.contracts import ContractError
from trainer.spec.config import TrainingConfig, check_at_least
from trainer.verifiers import DEFAULT_VERIFIER
from trainer.verifiers.group_judge import MIN_TOKENS_PER_CANDIDATE
from trainer.verifiers.judge import DEFAULT_RUBRIC, Rubric

LOSS_TYPES = ("dapo", "dr_grpo", "grpo")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
SCALE_REWARDS = ("group", "batch", "none")
GENERATIONS = ("transformers", "vllm")

GRPO_REWARDS = ("verifier", "judge")
JUDGE_MODES = ("single", "group")


@dataclass(frozen=True)
class GrpoConfig(TrainingConfig):
    """A grpo job's settings, read from the spec's `hyperparameters`."""

    learning_rate: float = field(default=1e-5, metadata={"help": "Peak learning rate (above 0)."})
    verifier: str = field(default=DEFAULT_VERIFIER, metadata={
        "help": "Reward verifier: tool_call, binary, shaped or bfcl."})
    reward: str = field(default="verifier", metadata={
        "help": "Where the reward comes from: verifier (the verifier or environment) or judge (the judge model "
                "scores each answer on its rubric; the app launches it only once the agent's judge agrees with "
                "reviewers, and fills in judge_model, judge_adapter and judge_rubric)."})
    judge_model: str = field(default="", metadata={
        "help": "The judge's base model (reward judge): a local folder or 'demo'."})
    judge_adapter: str = field(default="", metadata={"help": "The judge's LoRA adapter, if any (reward judge)."})
    judge_rubric: dict[str, Any] = field(default_factory=DEFAULT_RUBRIC.to_json, metadata={
        "help": "The judge's rubric (reward judge): criteria, pass_means, scale_max, pass_score."})
    judge_max_new_tokens: int = field(default=64, metadata={
        "help": "Most tokens of the judge's reply; judge_mode group needs at least 16 per candidate."})
    judge_mode: str = field(default="single", metadata={
        "help": "How the judge scores (reward judge): single (each answer alone; the agreement with reviewers the app "
                "measures is this mode's) or group (the num_generations answers to one prompt shown together in one "
                "judge chat and scored relative to each other, as OpenPipe's RULER; its agreement is not measured)."})
    eval_interval: int = field(default=10, metadata={
        "help": "Evaluate on the held-out tasks every this many steps; 0 for only at the start and the end."})
    checkpoint_interval: int = field(default=10, metadata={
        "help": "Save a checkpoint (with samples) every this many steps; 0 for only the final adapter."})
    num_generations: int = field(default=8, metadata={"help": "Completions per prompt (the group size)."})
    prompts_per_step: int = field(default=1, metadata={"help": "Prompts per optimizer step."})
    max_steps: int = field(default=40, metadata={"help": "Optimizer steps."})
    loss_type: str = field(default="dapo", metadata={
        "help": "How token losses are aggregated: dapo (over the batch's tokens, no length bias; TRL's default), "
                "dr_grpo (over a constant) or grpo (per sequence, biased toward short right answers)."})
    importance_sampling_level: str = field(default="token", metadata={
        "help": "token, or sequence (GSPO); sequence needs num_iterations or steps_per_generation above 1."})
    num_iterations: int = field(default=1, metadata={
        "help": "Gradient passes over each generation batch (TRL's mu); above 1 the ratio and clipping act."})
    steps_per_generation: int = field(default=1, metadata={
        "help": "Optimizer steps each generation batch is split into; above 1 later steps are off-policy."})
    epsilon: float = field(default=0.2, metadata={"help": "Lower clipping range of the importance ratio."})
    epsilon_high: float | None = field(default=None, metadata={
        "help": "Upper clipping range (DAPO's clip-higher, 0.28 in the paper); null: the same as epsilon."})
    scale_rewards: str | None = field(default=None, metadata={
        "help": "group, batch or none: what rewards are divided by before the advantage; null: none for dr_grpo, "
                "group otherwise."})
    mask_truncated_completions: bool = field(default=True, metadata={
        "help": "Leave completions cut by max_completion_length out of the loss (DAPO's overlong filtering)."})
    dynamic_sampling_redraws: int = field(default=4, metadata={
        "help": "When every group of a generation batch ties (no gradient), draw it again with other train tasks, up "
                "to this many times (DAPO's dynamic sampling); 0 to train on tied batches."})
    beta: float = field(default=0.0, metadata={"help": "KL coefficient against the starting policy (0: no KL term)."})
    max_completion_length: int | None = field(default=None, metadata={
        "help": "Most tokens per completion; null: derived from the train tasks' reference answers (99th percentile "
                "+ 16). A run whose limit would cut more than max_truncated_share of them is refused."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of the generations."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass of the generations."})
    sample_events: int = field(default=8, metadata={"help": "Completions shown per checkpoint."})
    generation: str = field(default="transformers", metadata={
        "help": "What samples the completions: transformers (the model being trained) or vllm (TRL's vLLM engine in "
                "the same process, colocate mode, given the new weights after each step; runs in vLLM's Python)."})
    vllm_gpu_memory_utilization: float = field(default=0.3, metadata={
        "help": "Share of the GPU's memory the colocated vLLM engine takes (generation vllm on a GPU)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"unknown loss_type {self.loss_type!r}; known: {', '.join(LOSS_TYPES)}")
        if self.importance_sampling_level not in IMPORTANCE_SAMPLING_LEVELS:
            raise ValueError(f"importance_sampling_level must be one of {', '.join(IMPORTANCE_SAMPLING_LEVELS)}")
        if self.reward not in GRPO_REWARDS:
            raise ValueError(f"unknown reward {self.reward!r}; known: {', '.join(GRPO_REWARDS)}")
        if self.judge_mode not in JUDGE_MODES:
            raise ValueError(f"unknown judge_mode {self.judge_mode!r}; known: {', '.join(JUDGE_MODES)}")
        if self.reward == "judge":
            self._check_judge()
        elif self.judge_mode != "single":
            raise ValueError(f"judge_mode {self.judge_mode} is how the judge reward scores: it needs reward judge")
        if self.num_generations < 2:
            raise ValueError("num_generations must be at least 2: GRPO compares completions within a group")
        check_at_least(self, 1, "prompts_per_step", "max_steps", "num_iterations", "steps_per_generation")
        check_at_least(self, 0, "sample_events", "dynamic_sampling_redraws")
        if self.max_completion_length is not None and self.max_completion_length < 1:
            raise ValueError("max_completion_length must be at least 1 (or null to derive it)")
        self._check_variant()
        if self.beta < 0:
            raise ValueError("beta (the KL coefficient) must be 0 or more")
        if not self.temperature > 0:
            raise ValueError("temperature must be above 0: GRPO needs varied completions")
        self._check_generation()

    def _check_judge(self) -> None:
        if not self.judge_model.strip():
            raise ValueError("reward judge needs judge_model: the judge's base model")
        if self.max_turns > 1:
            raise ValueError("reward judge scores one answer per task; episodes (max_turns above 1) are judged by "
                             "their environment")
        check_at_least(self, 1, "judge_max_new_tokens")
        needed = MIN_TOKENS_PER_CANDIDATE * self.num_generations
        if self.judge_mode == "group" and self.judge_max_new_tokens < needed:
            raise ValueError(f"judge_mode group asks the judge for a score line per candidate: judge_max_new_tokens "
                             f"must be at least {needed} ({MIN_TOKENS_PER_CANDIDATE} per candidate x num_generations "
                             f"{self.num_generations}), got {self.judge_max_new_tokens}")
        try:
            self.parsed_judge_rubric()
        except ContractError as error:
            raise ValueError(f"judge_rubric: {error}") from None

    def parsed_judge_rubric(self) -> Rubric:
        """The judge's rubric (reward judge)."""
        return Rubric.from_json(self.judge_rubric)

    def _check_variant(self) -> None:
        if self.scale_rewards not in (None, *SCALE_REWARDS):
            raise ValueError(f"scale_rewards must be one of {', '.join(SCALE_REWARDS)} or null")
        if self.loss_type == "dr_grpo" and self.scale_rewards not in (None, "none"):
            raise ValueError("dr_grpo divides by a constant, not by the rewards' spread: scale_rewards must be none")
        if not 0 < self.epsilon < 1 or (self.epsilon_high is not None and self.epsilon_high < self.epsilon):
            raise ValueError("epsilon must be in (0, 1) and epsilon_high (if set) at least epsilon")
        if not self.off_policy and self.importance_sampling_level == "sequence":
            raise ValueError("sequence-level importance sampling (GSPO) changes nothing when each generation batch "
                             "is used for one gradient step (the ratio is 1): set num_iterations or "
                             "steps_per_generation above 1")
        if not self.off_policy and self.epsilon_high is not None:
            raise ValueError("clip-higher (epsilon_high) never engages when each generation batch is used for one "
                             "gradient step (the ratio is 1): set num_iterations or steps_per_generation above 1")

    def _check_generation(self) -> None:
        if self.generation not in GENERATIONS:
            raise ValueError(f"generation must be one of {', '.join(GENERATIONS)}")
        if self.generation == "vllm" and self.max_turns > 1:
            raise ValueError("generation vllm samples one answer per task; episodes (max_turns above 1) are played "
                             "turn by turn with the model being trained: use generation transformers")
        if not 0 < self.vllm_gpu_memory_utilization <= 1:
            raise ValueError("vllm_gpu_memory_utilization must be in (0, 1]")

    @property
    def off_policy(self) -> bool:
        """Whether any gradient step uses completions the policy generated before an earlier step."""
        return self.num_iterations > 1 or self.steps_per_generation > 1

    def rewards_scaling(self) -> str:
        return self.scale_rewards or ("none" if self.loss_type == "dr_grpo" else "group")

    def describe(self) -> str:
        """What this config sets, in words: the variant's name is what its knobs do."""
        scaling = self.rewards_scaling()
        parts = [f"{self.loss_type} loss", "rewards unscaled" if scaling == "none" else f"rewards scaled per {scaling}"]
        if self.off_policy:
            high = self.epsilon_high if self.epsilon_high is not None else self.epsilon
            parts.append(f"{self.importance_sampling_level}-level ratio clipped to [1-{self.epsilon:g}, 1+{high:g}] "
                         f"over {self.num_iterations} pass(es) x {self.steps_per_generation} step(s) per generation")
        else:
            parts.append("on-policy (one step per generation batch: no ratio, no clipping)")
        if self.dynamic_sampling_redraws:
            parts.append(f"tied batches redrawn up to {self.dynamic_sampling_redraws}x")
        if self.mask_truncated_completions:
            parts.append("cut completions masked")
        if self.beta:
            parts.append(f"KL {self.beta:g}")
        if self.generation == "vllm":
            parts.append("sampled by colocated vLLM")
        return ", ".join(parts)
