"""The callback that turns a transformers Trainer's logs, steps and saves into protocol events.

Every log's known keys become `metric` events (LOG_METRICS names them), held-out evaluations
run at the start, every `eval_interval` steps and on request, each checkpoint gets our manifest
and a `checkpoint` event (plus samples where the kind has them), the warning flags watch the
numbers, and a SIGTERM asks the Trainer to save at the end of the step and stop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from trainer.contracts import CheckpointEvent, LogEvent, MetricEvent, SampleEvent
from trainer.flags import FlagWatch, rate_value
from trainer.heldout import HeldoutEvaluator
from trainer.jobs import EventStream, StopFlag, is_main_process
from trainer.spec.adapters import CHECKPOINTS, WEIGHTS_FILE, write_manifest

HELDOUT_PREFIX = "heldout/"
# Trainer log keys → our metric names; what is not listed here is not reported.
LOG_METRICS = {
    "loss": "loss",
    "learning_rate": "learning_rate",
    "grad_norm": "grad_norm",
    "reward": "reward/mean",
    "reward_std": "reward/std",
    "frac_reward_zero_std": "tied_group_fraction",
    "completions/mean_length": "completion_length",
    "kl": "kl",
    "entropy": "entropy",
    "clip_ratio/region_mean": "clip_ratio",
    "clip_ratio/low_mean": "clip_ratio/low",
    "clip_ratio/high_mean": "clip_ratio/high",
    "completions/clipped_ratio": "truncated_share",
    "redraws": "dynamic_sampling/redraws",
    "mean_token_accuracy": "token_accuracy",
    # DPO's implicit reward (beta x the policy's log-ratio to the reference) of the chosen and rejected answers.
    "rewards/chosen": "rewards/chosen",
    "rewards/rejected": "rewards/rejected",
    "rewards/margins": "rewards/margins",
    "rewards/accuracies": "rewards/accuracies",
    "logps/chosen": "logps/chosen",
    "logps/rejected": "logps/rejected",
}
# The evaluator's overall keys reported as `heldout/<key>` metrics (the last three only where tasks are episodes).
HELDOUT_METRICS = ("valid_json_rate", "correct_tool_rate", "correct_arguments_rate", "execution_success_rate",
                   "unsafe_action_rate", "verifier_pass_rate", "mean_reward",
                   "turns_per_episode", "calls_per_episode", "truncation_rate")  # fmt: skip


@dataclass
class ManifestInfo:
    base_model: str
    snapshot_sha256: str
    config: dict[str, Any]


SampleSource = Callable[[int], list[SampleEvent]]


class ProtocolCallback(TrainerCallback):
    """Turns a Trainer's logs, steps and saves into protocol events; a kind may subclass it to report more."""

    def __init__(self, events: EventStream, stop: StopFlag, manifest: ManifestInfo, *,
                 heldout: HeldoutEvaluator | None = None, eval_interval: int = 0,
                 samples: SampleSource | None = None, flags: FlagWatch | None = None) -> None:
        self.events = events
        self.stop = stop
        self.manifest = manifest
        self.heldout = heldout
        self.eval_interval = eval_interval
        self.samples = samples
        self.flags = flags or FlagWatch()
        self.model: Any = None
        self.last_heldout: dict[str, Any] = {}
        self.last_step_metrics: dict[str, float] = {}
        self._last_tokens: tuple[float, float] | None = None  # (time, tokens seen)
        self._evaluated_steps: set[int] = set()
        self.first_step = 0  # a resumed attempt starts at its checkpoint's step
        # Under `accelerate launch` every process trains; only the main one evaluates, writes and reports.
        self.main = is_main_process()

    def bind(self, model: Any) -> None:
        self.model = model

    def evaluate_heldout(self, step: int) -> None:
        if not self.main or self.heldout is None or self.model is None or step in self._evaluated_steps:
            return
        self._evaluated_steps.add(step)
        started = time.perf_counter()
        result = self.heldout.evaluate(self.model)
        overall = self.last_heldout = result.overall
        for name in HELDOUT_METRICS:
            value = rate_value(overall, name)
            if value is not None:
                self.events.emit(MetricEvent(step=step, name=HELDOUT_PREFIX + name, value=value))
        self.events.emit(LogEvent(f"held-out evaluation at step {step}: {len(self.heldout.tasks)} tasks in "
                                  f"{time.perf_counter() - started:.1f}s"))
        self._flag(self.flags.heldout(step, result.outcomes))

    def _flag(self, event: LogEvent | None) -> None:
        if event is not None:
            self.events.emit(event)

    # The Trainer's hooks -----------------------------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        self.train_begin(state.global_step)

    def on_log(self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, **_: Any) -> None:
        self.log(state.global_step, logs or {})

    def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        self.step_end(state.global_step, control)

    def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        self.save(state.global_step, str(Path(args.output_dir).parent))

    # What each hook does, callable without a Trainer ---------------------------------------------

    def train_begin(self, step: int) -> None:
        self.first_step = step
        if step == 0:  # a resumed run was evaluated at its start by the attempt that began it
            self.evaluate_heldout(step)

    def log(self, step: int, logs: Mapping[str, Any]) -> None:
        for key, name in LOG_METRICS.items():
            value = logs.get(key)
            if isinstance(value, (int, float)):
                self.events.emit(MetricEvent(step=step, name=name, value=float(value)))
                self.last_step_metrics[name] = float(value)
        if isinstance(logs.get("reward"), (int, float)):
            self.flags.train_reward(float(logs["reward"]))
        if isinstance(logs.get("completions/mean_length"), (int, float)):
            self._flag(self.flags.completion_length(step, float(logs["completions/mean_length"])))
        if isinstance(logs.get("completions/clipped_ratio"), (int, float)):
            self._flag(self.flags.truncation(step, float(logs["completions/clipped_ratio"])))
        self._tokens_per_second(step, logs.get("num_tokens"))

    def _tokens_per_second(self, step: int, tokens: Any) -> None:
        if not isinstance(tokens, (int, float)):
            return
        now = time.monotonic()
        if self._last_tokens is not None and now > self._last_tokens[0] and tokens > self._last_tokens[1]:
            rate = (tokens - self._last_tokens[1]) / (now - self._last_tokens[0])
            self.events.emit(MetricEvent(step=step, name="tokens_per_second", value=round(rate, 2)))
        self._last_tokens = (now, float(tokens))

    def step_end(self, step: int, control: Any) -> None:
        if self.eval_interval and step % self.eval_interval == 0:
            self.evaluate_heldout(step)
        if self.stop.requested:
            control.should_save = True
            control.should_training_stop = True

    def save(self, step: int, output_dir: str) -> None:
        folder = Path(output_dir) / CHECKPOINTS / f"checkpoint-{step}"
        if not self.main or not (folder / WEIGHTS_FILE).is_file():
            return
        write_manifest(folder, base_model=self.manifest.base_model, snapshot_sha256=self.manifest.snapshot_sha256,
                       config=self.manifest.config, metrics={"step": step, **self.last_step_metrics})
        self.events.emit(CheckpointEvent(step=step, path=str(folder)))
        for sample in self.samples(step) if self.samples else []:
            self.events.emit(sample)
