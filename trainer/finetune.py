"""What SFT and GRPO share: LoRA settings, the parent adapter, held-out evaluation, checkpoints,
warning flags, and the Trainer callback that turns its logs into protocol events.

Both jobs run a transformers `Trainer` (TRL's `SFTTrainer` / `GRPOTrainer`) whose checkpoints
land in `<output_dir>/checkpoints/checkpoint-<step>`: PEFT's adapter files plus the Trainer's
optimizer and scheduler state, so `resume: true` continues exactly where the last one stopped.
Each checkpoint also gets our `manifest.json` and a `checkpoint` event. SIGTERM asks the
Trainer to save at the end of the current step and stop; the job then ends as stopped (143).

torch, transformers and peft are imported inside functions: the job's `Config` classes stay
importable by the web app, which validates a launch's hyperparameters before queueing it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer import adapters
from trainer.contracts import CheckpointEvent, DoneEvent, LogEvent, MetricEvent, RunSpec, SampleEvent, Task
from trainer.jobs import EventStream, JobStopped, SpecError, StopFlag

CHECKPOINTS = "checkpoints"
FINAL_ADAPTER = "adapter"
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
    "mean_token_accuracy": "token_accuracy",
}
# The evaluator's overall keys reported as `heldout/<key>` metrics.
HELDOUT_METRICS = ("valid_json_rate", "correct_tool_rate", "correct_arguments_rate", "execution_success_rate",
                   "unsafe_action_rate", "verifier_pass_rate", "mean_reward")  # fmt: skip


@dataclass(frozen=True)
class LoraSettings:
    r: int
    alpha: int
    dropout: float
    target_modules: str

    def check(self) -> None:
        if self.r < 1:
            raise ValueError("lora_r must be at least 1")
        if self.alpha < 1:
            raise ValueError("lora_alpha must be at least 1")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError("lora_dropout must be in [0, 1)")
        if not self.target_modules.strip():
            raise ValueError("lora_target_modules must name modules or be 'all-linear'")

    def peft_config(self) -> Any:
        from peft import LoraConfig

        targets: str | list[str] = self.target_modules
        if self.target_modules != "all-linear":
            targets = [name.strip() for name in self.target_modules.split(",") if name.strip()]
        return LoraConfig(r=self.r, lora_alpha=self.alpha, lora_dropout=self.dropout, target_modules=targets,
                          task_type="CAUSAL_LM")


def check_learning_rate(value: float) -> None:
    if not value > 0:
        raise ValueError(f"learning_rate must be above 0, got {value}")


def train_tasks(spec: RunSpec) -> list[Task]:
    from trainer.evaluate import load_tasks

    try:
        return load_tasks(spec.task_paths)
    except SpecError as error:
        raise SpecError(f"the train snapshot has no usable tasks: {error}") from None


def check_parent_adapter(spec: RunSpec) -> adapters.AdapterManifest | None:
    """The verified parent adapter's manifest; a SpecError when it was trained on another base model."""
    if spec.adapter is None:
        return None
    manifest = adapters.verify_adapter(spec.adapter)
    if not same_base_model(manifest.base_model, spec.base_model):
        raise SpecError(
            f"the parent adapter {spec.adapter} was trained on base model {manifest.base_model!r}, "
            f"not {spec.base_model!r}: a LoRA adapter only fits the model it was trained on"
        )
    return manifest


def same_base_model(first: str, second: str) -> bool:
    from trainer.models import ModelNotFoundError, resolve_model

    if first == second:
        return True
    try:
        return Path(resolve_model(first)).resolve() == Path(resolve_model(second)).resolve()
    except ModelNotFoundError:
        return False


def policy_model(spec: RunSpec, device: str) -> tuple[Any, Any, str]:
    """The model to train (the base, or the base with the trainable parent adapter), its tokenizer, its path."""
    from trainer.models import load_model

    loaded = load_model(spec.base_model, device)
    model = loaded.model
    if spec.adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, spec.adapter, is_trainable=True)
    model.train()
    return model, loaded.tokenizer, loaded.path


def last_checkpoint(output_dir: str) -> str | None:
    """The highest-step complete checkpoint (its manifest is written last) under `output_dir`, if any."""
    folder = Path(output_dir) / CHECKPOINTS
    steps = [
        (int(path.name.removeprefix("checkpoint-")), path)
        for path in (folder.glob("checkpoint-*") if folder.is_dir() else [])
        if path.name.removeprefix("checkpoint-").isdigit() and (path / adapters.MANIFEST_FILE).is_file()
    ]
    return str(max(steps)[1]) if steps else None


def resume_point(spec: RunSpec, resume: bool, events: EventStream) -> str | None:
    if not resume:
        return None
    checkpoint = last_checkpoint(spec.output_dir)
    if checkpoint is None:
        events.emit(LogEvent(f"resume requested but {spec.output_dir}/{CHECKPOINTS} has no checkpoint; "
                             "starting from step 0", level="warning"))
        return None
    adapters.verify_adapter(checkpoint)
    events.emit(LogEvent(f"resuming from {checkpoint}"))
    return checkpoint


# --- Held-out evaluation during training -------------------------------------------------------


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
        from trainer.evaluate import Evaluation, evaluate_tasks, execution_environment, metrics_report
        from trainer.prompts import render_prompt
        from trainer.rollout import SamplingConfig, TransformersBackend
        from trainer.verifiers import SafetyPolicy, get_verifier

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


def heldout_evaluator(spec: RunSpec, *, sample_size: int | None, verifier: str, max_new_tokens: int,
                      batch_size: int, device: str, environment: str | None = None) -> HeldoutEvaluator | None:
    from trainer.evaluate import load_tasks, seeded_sample
    from trainer.models import load_tokenizer, pick_device, resolve_model

    if not spec.heldout_paths:
        return None
    tasks = seeded_sample(load_tasks(spec.heldout_paths), sample_size, spec.seed)
    if not tasks:
        return None
    # A tokenizer of its own: the trainers change padding sides, generation needs left padding.
    tokenizer = load_tokenizer(resolve_model(spec.base_model))
    return HeldoutEvaluator(tasks, tokenizer, pick_device(device), verifier, max_new_tokens, batch_size,
                            environment, spec.seed)


def rate_value(overall: Mapping[str, Any], name: str) -> float | None:
    value = overall.get(name)
    number = value.get("value") if isinstance(value, Mapping) else value
    return float(number) if isinstance(number, (int, float)) else None


# --- Warning flags: reward hacking and collapse signs -----------------------------------------


@dataclass
class FlagWatch:
    """Watches the run for the guide's warning signs; each flag is raised once, as a warning log event.

    - reward_hacking: training reward rose while the held-out metric fell since the first evaluation;
    - length_drift: completion length moved far (x`length_factor`) from its first steps;
    - repetition: many completions in a batch repeat another prompt's completion verbatim.
    """

    heldout_metric: str = "correct_arguments_rate"
    margin: float = 0.05
    length_factor: float = 2.0
    repetition_share: float = 0.5
    raised: set[str] = field(default_factory=set)
    _rewards: list[float] = field(default_factory=list)
    _lengths: list[float] = field(default_factory=list)
    # (held-out value, train reward then); None before any training step (the step-0 evaluation)
    _heldout: list[tuple[float, float | None]] = field(default_factory=list)

    def train_reward(self, value: float) -> None:
        self._rewards.append(value)

    def completion_length(self, step: int, value: float) -> LogEvent | None:
        self._lengths.append(value)
        if len(self._lengths) <= 3:
            return None
        start = sum(self._lengths[:3]) / 3
        if start <= 0 or 1 / self.length_factor <= value / start <= self.length_factor:
            return None
        return self._raise("length_drift", f"at step {step} completions average {value:.1f} tokens, "
                                           f"{value / start:.1f}x the first steps' {start:.1f}")

    def heldout(self, step: int, overall: Mapping[str, Any]) -> LogEvent | None:
        value = rate_value(overall, self.heldout_metric)
        if value is None:
            return None
        self._heldout.append((value, self._recent_reward() if self._rewards else None))
        if len(self._heldout) < 2 or not self._rewards:
            return None
        (first_value, first_reward), (last_value, _) = self._heldout[0], self._heldout[-1]
        # Evaluated before any step: the reward training started from is its first steps' reward.
        first_reward = self._opening_reward() if first_reward is None else first_reward
        last_reward = self._recent_reward()
        if last_reward - first_reward > self.margin and first_value - last_value > self.margin:
            return self._raise(
                "reward_hacking",
                f"at step {step} training reward rose {first_reward:.3f} → {last_reward:.3f} while held-out "
                f"{self.heldout_metric} fell {first_value:.3f} → {last_value:.3f}: inspect the samples",
            )
        return None

    def completions(self, step: int, rows: Sequence[tuple[str, str]]) -> LogEvent | None:
        """`rows` are (task id, completion) pairs of one batch."""
        tasks_by_text: dict[str, set[str]] = {}
        for task_id, text in rows:
            tasks_by_text.setdefault(text.strip(), set()).add(task_id)
        repeated = sum(1 for _task, text in rows if len(tasks_by_text[text.strip()]) > 1)
        if not rows or repeated / len(rows) < self.repetition_share:
            return None
        top, count = Counter(text.strip() for _task, text in rows).most_common(1)[0]
        return self._raise("repetition", f"at step {step} {repeated} of {len(rows)} completions repeat another "
                                         f"prompt's verbatim (most common, {count}x: {top[:80]!r})")

    def _recent_reward(self) -> float:
        window = self._rewards[-5:]
        return sum(window) / len(window)

    def _opening_reward(self) -> float:
        window = self._rewards[:5]
        return sum(window) / len(window)

    def _raise(self, name: str, detail: str) -> LogEvent | None:
        if name in self.raised:
            return None
        self.raised.add(name)
        return LogEvent(f"flag: {name} {detail}", level="warning")


# --- The callback ------------------------------------------------------------------------------


@dataclass
class ManifestInfo:
    base_model: str
    snapshot_sha256: str
    config: dict[str, Any]


SampleSource = Callable[[int], list[SampleEvent]]


class ProtocolCallbackBase:
    """Turns a Trainer's logs, steps and saves into protocol events (made a callback by `as_trainer_callback`)."""

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

    def bind(self, model: Any) -> None:
        self.model = model

    def evaluate_heldout(self, step: int) -> None:
        if self.heldout is None or self.model is None or step in self._evaluated_steps:
            return
        self._evaluated_steps.add(step)
        started = time.perf_counter()
        overall = self.heldout.evaluate(self.model)
        self.last_heldout = overall
        for name in HELDOUT_METRICS:
            value = rate_value(overall, name)
            if value is not None:
                self.events.emit(MetricEvent(step=step, name=HELDOUT_PREFIX + name, value=value))
        self.events.emit(LogEvent(f"held-out evaluation at step {step}: {len(self.heldout.tasks)} tasks in "
                                  f"{time.perf_counter() - started:.1f}s"))
        self._flag(self.flags.heldout(step, overall))

    def _flag(self, event: LogEvent | None) -> None:
        if event is not None:
            self.events.emit(event)

    # Trainer hooks (called by the TrainerCallback subclass) ------------------------------------

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
        if not (folder / adapters.WEIGHTS_FILE).is_file():
            return
        adapters.write_manifest(folder, base_model=self.manifest.base_model,
                                snapshot_sha256=self.manifest.snapshot_sha256, config=self.manifest.config,
                                metrics={"step": step, **self.last_step_metrics})
        self.events.emit(CheckpointEvent(step=step, path=str(folder)))
        for sample in self.samples(step) if self.samples else []:
            self.events.emit(sample)


def as_trainer_callback(base: type[ProtocolCallbackBase]) -> Any:
    """`base` made a transformers `TrainerCallback`: the Trainer's hooks call its methods."""
    from transformers import TrainerCallback

    class ProtocolCallback(base, TrainerCallback):  # type: ignore[valid-type, misc]
        def on_train_begin(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            self.train_begin(state.global_step)

        def on_log(self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None,
                   **_: Any) -> None:
            self.log(state.global_step, logs or {})

        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            self.step_end(state.global_step, control)

        def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            self.save(state.global_step, str(Path(args.output_dir).parent))

    return ProtocolCallback


def common_training_arguments(spec: RunSpec, *, device: str, checkpoint_interval: int, max_steps: int,
                              gradient_checkpointing: bool) -> dict[str, Any]:
    """Trainer arguments both jobs use: checkpoints in our layout, logs every step, no hub, no tqdm."""
    return {
        "output_dir": str(Path(spec.output_dir) / CHECKPOINTS),
        "seed": spec.seed,
        "data_seed": spec.seed,
        "max_steps": max_steps,
        "logging_steps": 1,
        "save_strategy": "steps" if checkpoint_interval else "no",
        "save_steps": checkpoint_interval or 500,
        "report_to": "none",
        "disable_tqdm": True,
        "use_cpu": device == "cpu",
        "bf16": device.startswith("cuda"),
        "fp16": False,
        "remove_unused_columns": False,
        "dataloader_num_workers": 0,
        "gradient_checkpointing": gradient_checkpointing,
    }


def save_final(model: Any, spec: RunSpec, manifest: ManifestInfo, metrics: dict[str, Any]) -> Path:
    folder = Path(spec.output_dir) / FINAL_ADAPTER
    adapters.save_adapter(model, folder, base_model=manifest.base_model, snapshot_sha256=manifest.snapshot_sha256,
                          config=manifest.config, metrics=metrics)
    return folder


def final_metrics(callback: ProtocolCallbackBase, steps: int, seconds: float) -> dict[str, Any]:
    """`steps` is the run's last step; `seconds` and `seconds_per_step` are this attempt's, which a resumed
    attempt began at `callback.first_step`."""
    ran = steps - callback.first_step
    metrics: dict[str, Any] = {"steps": steps, "seconds": round(seconds, 1),
                               "seconds_per_step": round(seconds / ran, 3) if ran > 0 else None}
    metrics.update({f"train/{name}": value for name, value in callback.last_step_metrics.items()})
    for name in HELDOUT_METRICS:
        value = rate_value(callback.last_heldout, name)
        if value is not None:
            metrics[HELDOUT_PREFIX + name] = value
    if callback.flags.raised:
        metrics["flags"] = sorted(callback.flags.raised)
    return metrics


def train_and_save(trainer: Any, callback: ProtocolCallbackBase, spec: RunSpec, manifest: ManifestInfo,
                   stop: StopFlag, resume: bool) -> DoneEvent:
    """Train (from the last checkpoint when resuming), evaluate once more, save the final adapter."""
    started = time.perf_counter()
    trainer.train(resume_from_checkpoint=resume_point(spec, resume, callback.events))
    if stop.requested:
        raise JobStopped(f"stopped by SIGTERM at step {trainer.state.global_step}; the last checkpoint is kept")
    callback.evaluate_heldout(trainer.state.global_step)
    metrics = final_metrics(callback, trainer.state.global_step, time.perf_counter() - started)
    folder = save_final(trainer.model, spec, manifest, metrics)
    return DoneEvent(metrics=metrics, files={"adapter_dir": str(folder)})
