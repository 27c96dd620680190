"""Held-out evaluation during training: greedy answers with the model as it is now, judged as `eval` judges.

The same `trainer.evaluate` path as the eval job and the gate, on a seeded sample of the
held-out snapshot, so a run's held-out curve and its final evaluation measure the same thing.
A training config with `max_turns` above 1 evaluates each held-out task as an episode in its
environment (`TrainingConfig.episode_budget`), as an eval job with the same settings does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainer.contracts import RunSpec, Task
from trainer.environments import Environment
from trainer.evaluate import Evaluation, evaluate_tasks, execution_environment, summarize
from trainer.models import load_tokenizer, pick_device, resolve_model
from trainer.prompts import render_prompt
from trainer.rollout import TransformersBackend
from trainer.spec.config import TrainingConfig
from trainer.spec.environments import EpisodeBudget
from trainer.spec.eval import SamplingConfig
from trainer.spec.tasks import SkippedLine, read_task_files, seeded_sample
from trainer.verifiers import SafetyPolicy, Verifier, get_verifier


@dataclass(frozen=True)
class HeldoutResult:
    """One held-out evaluation: the overall rates, and each task's 0/1 outcome on the held-out metric."""

    overall: dict[str, Any]
    outcomes: dict[str, float]


@dataclass
class HeldoutEvaluator:
    """Greedy answers on the held-out tasks with the model as it is now, through the runtime's evaluator.

    The verifier and the sandbox are built once; only the overall rates are computed (no per-bucket
    breakdown: nothing reads it during training).
    """

    tasks: list[Task]
    tokenizer: Any
    device: str
    verifier: Verifier
    policy: SafetyPolicy
    max_new_tokens: int
    batch_size: int
    environment: Environment | None = None
    seed: int = 0
    skipped: list[SkippedLine] = field(default_factory=list)  # bad lines of the held-out files, not loaded
    budget: EpisodeBudget | None = None  # each task an episode of at most this; None: one answer per task

    @property
    def metric(self) -> str:
        """The per-task outcome the reward-hacking flag compares: execution success where a sandbox runs."""
        return "execution_success" if self.environment is not None else "correct_arguments"

    def evaluate(self, model: Any) -> HeldoutResult:
        evaluation = Evaluation(
            backend=TransformersBackend(model, self.tokenizer, self.device),
            render=lambda task: render_prompt(task, self.tokenizer), verifier=self.verifier, policy=self.policy,
            environment=self.environment,
        )  # fmt: skip
        sampling = SamplingConfig(max_new_tokens=self.max_new_tokens, temperature=0.0, batch_size=self.batch_size,
                                  seed=self.seed)
        was_training = model.training
        model.eval()
        try:
            results = evaluate_tasks(self.tasks, evaluation, sampling, budget=self.budget)
        finally:
            if was_training:
                model.train()
        outcomes = {result.task_id: float(bool(getattr(result, self.metric))) for result in results}
        return HeldoutResult(dict(summarize(results, resamples=200, seed=self.seed)), outcomes)


def heldout_evaluator(spec: RunSpec, config: TrainingConfig, device: str,
                      policy: SafetyPolicy) -> HeldoutEvaluator | None:
    """The evaluator of the spec's held-out tasks under a training config's settings; None without any."""
    if not spec.heldout_paths:
        return None
    loaded = read_task_files(spec.heldout_paths, strict=config.strict_tasks)
    tasks = seeded_sample(loaded.tasks, config.heldout_sample_size, spec.seed)
    if not tasks:
        return None
    # A tokenizer of its own: the trainers change padding sides, generation needs left padding.
    tokenizer = load_tokenizer(resolve_model(spec.base_model))
    assert config.eval_max_new_tokens is not None, "the skeleton resolves the limit before the evaluator is built"
    return HeldoutEvaluator(
        tasks, tokenizer, pick_device(device), get_verifier(config.verifier, policy), policy,
        config.eval_max_new_tokens, config.eval_batch_size, execution_environment(config.environment, policy),
        spec.seed, loaded.skipped, config.episode_budget(config.eval_max_new_tokens),
    )  # fmt: skip
