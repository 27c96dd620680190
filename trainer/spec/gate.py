"""The `gate` job's config and the promotion policy it applies (one policy per agent in the app).

The decision itself is `trainer.gate.decide`; this module is what the app needs to store,
show and check a policy and to launch a gate.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from trainer.spec.eval import EvalConfig

METRICS = ("correct_arguments", "execution_success")
TESTS = ("bootstrap", "mcnemar")


@dataclass(frozen=True)
class Policy:
    """The promotion criteria (one per agent in the app); every knob has a help text."""

    metric: str = field(default="correct_arguments", metadata={
        "help": "The rate that must improve: correct_arguments (correct call) or execution_success."})
    test: str = field(default="bootstrap", metadata={
        "help": "bootstrap (paired interval of the gain above zero) or mcnemar (exact / continuity-corrected)."})
    alpha: float = field(default=0.05, metadata={
        "help": "Significance level: the bootstrap interval is at 1 - alpha, McNemar's p must be below it."})
    max_unsafe_increase: float = field(default=0.0, metadata={
        "help": "How far the unsafe-action rate may rise (absolute share; 0: it must not rise at all)."})
    max_latency_p95_increase: float = field(default=0.25, metadata={
        "help": "How far latency p95 may rise, as a share of the baseline's (0.25: 25% slower at most)."})
    max_tokens_per_task: float | None = field(default=None, metadata={
        "help": "Budget of prompt + completion tokens per task for the candidate; null for none."})
    max_tokens_increase: float | None = field(default=0.5, metadata={
        "help": "How far tokens per task may rise, as a share of the baseline's; null for no limit."})
    max_regression_failures: int = field(default=0, metadata={
        "help": "How many regression tasks that passed with the baseline may fail with the candidate."})
    bootstrap_resamples: int = field(default=2000, metadata={"help": "Resamples of the paired bootstrap."})

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"unknown metric {self.metric!r}; known: {', '.join(METRICS)}")
        if self.test not in TESTS:
            raise ValueError(f"unknown test {self.test!r}; known: {', '.join(TESTS)}")
        if not 0 < self.alpha < 1:
            raise ValueError("alpha must be between 0 and 1")
        for name in ("max_unsafe_increase", "max_latency_p95_increase", "max_tokens_increase", "max_tokens_per_task"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be at least 0")
        if self.max_regression_failures < 0:
            raise ValueError("max_regression_failures must be at least 0")
        if self.bootstrap_resamples < 100:
            raise ValueError("bootstrap_resamples must be at least 100")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GateConfig(Policy):
    """A gate job's settings (the spec's `hyperparameters`): the policy, the baseline, and how to evaluate."""

    baseline_adapter: str | None = field(default=None, metadata={
        "help": "The live adapter to beat (a PEFT folder with its manifest); null: the base model alone."})
    heldout_sample_size: int | None = field(default=50, metadata={
        "help": "Held-out tasks to evaluate, sampled stratified by bucket with the seed; null for all."})
    regression_sample_size: int | None = field(default=50, metadata={
        "help": "Regression tasks to evaluate, sampled with the seed; null for all."})
    verifier: str = field(default="tool_call", metadata={"help": "Verifier behind the pass rate and reward."})
    backend: str = field(default="transformers", metadata={"help": "transformers, vllm or auto."})
    device: str = field(default="auto", metadata={"help": "Torch device for transformers: auto, cpu, cuda ..."})
    batch_size: int = field(default=8, metadata={"help": "Prompts per generation batch."})
    max_new_tokens: int = field(default=96, metadata={"help": "Most tokens generated per answer."})
    safety_policy: str | None = field(default=None, metadata={"help": "Safety policy JSON path; null: the default."})
    environment: str | None = field(default=None, metadata={
        "help": "Environment that executes the calls (workbench), needed for the execution_success metric."})

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("heldout_sample_size", "regression_sample_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1 (or null for all tasks)")
        self.eval_config()  # EvalConfig checks the verifier, backend and generation settings

    @property
    def policy(self) -> Policy:
        return Policy(**{item.name: getattr(self, item.name) for item in fields(Policy)})

    def eval_config(self) -> EvalConfig:
        return EvalConfig(
            verifier=self.verifier, backend=self.backend, device=self.device, batch_size=self.batch_size,
            max_new_tokens=self.max_new_tokens, safety_policy=self.safety_policy, environment=self.environment,
            bootstrap_resamples=self.bootstrap_resamples,
        )  # fmt: skip
