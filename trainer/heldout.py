"""Held-out evaluation during training: greedy answers with the model as it is now, judged as `eval` judges.

The same `trainer.evaluate` path as the eval job and the gate, on a seeded sample of the
held-out snapshot, so a run's held-out curve and its final evaluation measure the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainer.contracts import RunSpec, Task
from trainer.evaluate import Evaluation, evaluate_tasks, execution_environment, metrics_report
from trainer.models import load_tokenizer, pick_device, resolve_model
from trainer.prompts import render_prompt
from trainer.rollout import TransformersBackend
from trainer.spec.config import TrainingConfig
from trainer.spec.eval import SamplingConfig
from trainer.spec.tasks import load_tasks, seeded_sample
from trainer.verifiers import SafetyPolicy, get_verifier


@dataclass
class HeldoutEvaluator:
    """Greedy answers on the held-out tasks with the model as it is now, through the runtime's evaluator."""

    tasks: list[Task]
    tokenizer: Any
    device: str
    verifier: str
    max_new_tokens: int
    batch_size: int
    environment: str | None = None
    seed: int = 0

    def evaluate(self, model: Any) -> dict[str, Any]:
        policy = SafetyPolicy.default()
        evaluation = Evaluation(
            backend=TransformersBackend(model, self.tokenizer, self.device),
            render=lambda task: render_prompt(task, self.tokenizer), verifier=get_verifier(self.verifier, policy),
            policy=policy, environment=execution_environment(self.environment, policy),
        )  # fmt: skip
        sampling = SamplingConfig(max_new_tokens=self.max_new_tokens, temperature=0.0, batch_size=self.batch_size,
                                  seed=self.seed)
        was_training = model.training
        model.eval()
        try:
            results = evaluate_tasks(self.tasks, evaluation, sampling)
        finally:
            if was_training:
                model.train()
        return dict(metrics_report(results, resamples=200, seed=self.seed)["overall"])


def heldout_evaluator(spec: RunSpec, config: TrainingConfig, device: str) -> HeldoutEvaluator | None:
    """The evaluator of the spec's held-out tasks under a training config's settings; None without any."""
    if not spec.heldout_paths:
        return None
    tasks = seeded_sample(load_tasks(spec.heldout_paths), config.heldout_sample_size, spec.seed)
    if not tasks:
        return None
    # A tokenizer of its own: the trainers change padding sides, generation needs left padding.
    tokenizer = load_tokenizer(resolve_model(spec.base_model))
    return HeldoutEvaluator(tasks, tokenizer, pick_device(device), config.verifier, config.eval_max_new_tokens,
                            config.eval_batch_size, config.heldout_environment(), spec.seed)
