"""The `mine` job's config: hard-task mining, the train tasks the current model solves sometimes.

With one prompt per GRPO step, a group whose completions all score the same gives no gradient.
Mining samples the model `samples` (k) times per train task and keeps the tasks it solved at least
`min_solved` and at most `max_solved` times of k (by default: at least once, never every time), so
the snapshot it yields gives GRPO groups that do not tie. A sample solves a task when the
`environment` (workbench) judges its episode passed, which requires that no call broke the safety
policy; without an environment, when the `verifier`'s verdict passes. What the job runs is
`trainer.mine`; this module is what the app checks before queueing one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainer.spec.config import check_at_least, strict_tasks_field
from trainer.spec.environments import EpisodeBudget, check_executing_environment
from trainer.spec.eval import BACKENDS, SamplingConfig
from trainer.verifiers import DEFAULT_VERIFIER, verifier_names


@dataclass(frozen=True)
class MineConfig:
    """A mine job's settings, read from the spec's `hyperparameters`."""

    samples: int = field(default=8, metadata={
        "help": "Completions sampled per train task (k): pass@k is the number of them that solve it."})
    min_solved: int = field(default=1, metadata={
        "help": "Keep a task solved by at least this many of its k samples (1: solved at least once)."})
    max_solved: int | None = field(default=None, metadata={
        "help": "Keep a task solved by at most this many of its k samples; null: samples - 1 (not every time)."})
    temperature: float = field(default=1.0, metadata={
        "help": "Sampling temperature (above 0: k greedy answers would all be the same)."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass."})
    max_new_tokens: int = field(default=256, metadata={
        "help": "Most tokens per completion; give GRPO's max_completion_length so a task is judged as it will be "
                "trained."})
    batch_size: int = field(default=4, metadata={
        "help": "Prompts per generation batch (each generates k completions) on the transformers backend."})
    verifier: str = field(default=DEFAULT_VERIFIER, metadata={
        "help": "Verifier whose verdict `passed` decides a solve (without an environment): tool_call, binary, "
                "shaped or bfcl."})
    environment: str | None = field(default=None, metadata={
        "help": "workbench: a sample solves the task when the sandbox judges its episode passed (end state reached, "
                "no unsafe call) instead of the verifier; null for the verifier."})
    max_turns: int = field(default=1, metadata={
        "help": "1: each sample is one answer, its calls run open-loop. More: each sample is an episode in the "
                "environment, up to this many turns, as GRPO with the same max_turns will play it."})
    max_episode_tokens: int | None = field(default=None, metadata={
        "help": "Most tokens generated over a whole episode; null for max_turns x max_new_tokens."})
    backend: str = field(default="transformers", metadata={
        "help": "Generation backend: transformers, vllm, or auto (vllm where it is installed and a GPU exists)."})
    device: str = field(default="auto", metadata={"help": "Torch device for transformers: auto, cpu, cuda, cuda:1 ..."})
    sample_size: int | None = field(default=None, metadata={
        "help": "Mine a sample of this many train tasks drawn with the spec's seed; null for all."})
    safety_policy: str | None = field(default=None, metadata={
        "help": "Path of a safety policy JSON; null for the spec's (the agent's policy), or the default without one."})
    sample_events: int = field(default=8, metadata={
        "help": "How many kept tasks to show as `sample` events (one solving completion each)."})
    strict_tasks: bool = strict_tasks_field()

    def __post_init__(self) -> None:
        check_at_least(self, 1, "samples", "max_new_tokens", "batch_size")
        check_at_least(self, 0, "min_solved", "sample_events")
        if not self.temperature > 0:
            raise ValueError("temperature must be above 0: mining samples, it never decodes greedily")
        if not self.min_solved <= self.upper_bound <= self.samples:
            raise ValueError(f"need 0 <= min_solved <= max_solved <= samples, got {self.min_solved}, "
                             f"{self.upper_bound}, {self.samples}")
        if self.verifier not in verifier_names():
            raise ValueError(f"unknown verifier {self.verifier!r}; known: {', '.join(verifier_names())}")
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; known: {', '.join(BACKENDS)}")
        check_executing_environment(self.environment)
        if self.max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        if self.max_turns > 1 and self.environment is None:
            raise ValueError("max_turns above 1 mines episodes, whose calls need an environment to run in")
        self.episode_budget()
        if self.sample_size is not None and self.sample_size < 1:
            raise ValueError("sample_size must be at least 1 (or null for all train tasks)")
        self.sampling(seed=0)  # SamplingConfig checks top_p

    @property
    def upper_bound(self) -> int:
        """The most solves of k a kept task may have: `max_solved`, or k - 1 when it is null."""
        return self.samples - 1 if self.max_solved is None else self.max_solved

    def keeps(self, solved: int) -> bool:
        """Whether a task solved `solved` times of k is kept."""
        return self.min_solved <= solved <= self.upper_bound

    def episode_budget(self) -> EpisodeBudget | None:
        """The budget of each sampled episode; None for one open-loop answer per sample."""
        if self.max_turns == 1:
            return None
        return EpisodeBudget(self.max_turns, self.max_episode_tokens or self.max_turns * self.max_new_tokens)

    def sampling(self, seed: int) -> SamplingConfig:
        return SamplingConfig(max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p,
                              num_samples=self.samples, batch_size=self.batch_size, seed=seed)
