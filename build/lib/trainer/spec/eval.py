"""The `eval` job's config, the sampling settings every generation uses, and the safety-policy file.

`SamplingConfig` is here rather than beside the generation backends because the app checks
an evaluation's generation settings before queueing it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainer.contracts import ContractError
from trainer.spec.config import SpecError, strict_tasks_field
from trainer.spec.environments import EpisodeBudget, check_executing_environment
from trainer.verifiers import SafetyPolicy, verifier_names

BACKENDS = ("transformers", "vllm", "auto")
@dataclass(frozen=True)
class SamplingConfig:
    """How to sample; `temperature` 0 means greedy decoding."""

    max_new_tokens: int = field(default=128, metadata={"help": "Most tokens generated per completion."})
    temperature: float = field(default=0.0, metadata={"help": "0 for greedy decoding, else the sampling temperature."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass (sampled decoding only)."})
    num_samples: int = field(default=1, metadata={"help": "Completions per prompt (N)."})
    batch_size: int = field(default=16, metadata={"help": "Prompts per generation batch (transformers backend)."})
    seed: int = field(default=0, metadata={"help": "Seed for sampling; batch i uses seed + i."})

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1 or self.num_samples < 1 or self.batch_size < 1:
            raise ValueError("max_new_tokens, num_samples and batch_size must be at least 1")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError("temperature must be >= 0 and top_p in (0, 1]")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class EvalConfig:
    """An eval job's settings, read from the spec's `hyperparameters`."""

    verifier: str = field(default="tool_call", metadata={
        "help": "Verifier behind the pass rate and reward: tool_call, binary, bfcl or shaped."})
    backend: str = field(default="transformers", metadata={
        "help": "Generation backend: transformers, vllm, or auto (vllm where it is installed and a GPU exists)."})
    device: str = field(default="auto", metadata={"help": "Torch device for transformers: auto, cpu, cuda, cuda:1 ..."})
    batch_size: int = field(default=16, metadata={"help": "Prompts per generation batch."})
    max_new_tokens: int = field(default=128, metadata={"help": "Most tokens generated per answer."})
    temperature: float = field(default=0.0, metadata={"help": "0 for greedy decoding, else the sampling temperature."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass (sampled decoding only)."})
    sample_size: int | None = field(default=None, metadata={
        "help": "Evaluate a sample of this many tasks drawn with the spec's seed; null for all."})
    safety_policy: str | None = field(default=None, metadata={
        "help": "Path of a safety policy JSON (absolute, or relative to the working folder); null for the spec's "
                "(the agent's policy, which the app writes there), or the default without one."})
    price_per_million_input_tokens: float = field(default=0.0, metadata={
        "help": "Cost of a million prompt tokens, for cost per task; 0 for a local model."})
    price_per_million_output_tokens: float = field(default=0.0, metadata={
        "help": "Cost of a million generated tokens, for cost per task; 0 for a local model."})
    bootstrap_resamples: int = field(default=1000, metadata={"help": "Bootstrap resamples per interval."})
    sample_events: int = field(default=8, metadata={"help": "How many per-task `sample` events to emit."})
    environment: str | None = field(default=None, metadata={
        "help": "Run each answer's calls in this environment for execution success (workbench); null for the one "
                "each task's episode names (replay), else none."})
    max_turns: int = field(default=1, metadata={
        "help": "1: one answer per task, its calls run open-loop. More: an episode, where the model reads each "
                "call's result from the environment and answers again, up to this many turns (every task needs "
                "an environment: the job's, or its episode's)."})
    max_episode_tokens: int | None = field(default=None, metadata={
        "help": "Most tokens generated over a whole episode; null for max_turns x max_new_tokens."})
    system_preamble: str = field(default="", metadata={
        "help": "A prompt change, evaluated without training: text put before each task's own system prompt "
                "(the tools and the call format follow as usual); empty for none."})
    tool_descriptions: dict[str, str] = field(default_factory=dict, metadata={
        "help": "A tool-description change: per tool name, the description the prompt shows instead of the "
                "tool's own; every name must be a tool of the tasks. Empty for none."})
    strict_tasks: bool = strict_tasks_field()

    def __post_init__(self) -> None:
        if not all(isinstance(name, str) and name and isinstance(text, str)
                   for name, text in self.tool_descriptions.items()):  # fmt: skip
            raise ValueError("tool_descriptions maps tool names to description strings")
        if self.verifier not in verifier_names():
            raise ValueError(f"unknown verifier {self.verifier!r}; known: {', '.join(verifier_names())}")
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; known: {', '.join(BACKENDS)}")
        if self.sample_size is not None and self.sample_size < 1:
            raise ValueError("sample_size must be at least 1 (or null for all tasks)")
        if self.bootstrap_resamples < 1:
            raise ValueError("bootstrap_resamples must be at least 1")
        check_executing_environment(self.environment)
        if self.max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.sampling(seed=0)  # SamplingConfig checks the generation settings
        self.episode_budget()

    def episode_budget(self) -> EpisodeBudget | None:
        """The budget of each episode; None for one open-loop answer per task."""
        if self.max_turns == 1:
            return None
        return EpisodeBudget(self.max_turns, self.max_episode_tokens or self.max_turns * self.max_new_tokens)

    def sampling(self, seed: int) -> SamplingConfig:
        return SamplingConfig(max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p,
                              batch_size=self.batch_size, seed=seed)


def safety_policy(path: str | None, inline: Mapping[str, Any] | None = None) -> SafetyPolicy:
    """The policy a job judges unsafe calls by: the file a config names, else the spec's (the agent's), else
    the default. A SpecError names a missing or bad file or a bad inline policy."""
    if path is not None:
        try:
            return SafetyPolicy.load(path)
        except FileNotFoundError:
            raise SpecError(f"safety policy not found: {path}") from None
        except (ContractError, json.JSONDecodeError) as error:
            raise SpecError(f"safety policy {path}: {error}") from None
    if inline is None:
        return SafetyPolicy.default()
    try:
        return SafetyPolicy.from_json(dict(inline))
    except (ContractError, TypeError, ValueError) as error:
        raise SpecError(f"the spec's safety policy: {error}") from None
