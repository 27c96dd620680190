"""Typed job configs: parsing a spec's `hyperparameters` into a dataclass, and the knobs training kinds share.

`config_from_json` rejects unknown keys and wrong JSON types with a `SpecError` that names the
field, so the web app refuses a bad launch before queueing it and the trainer refuses the same
spec the same way. Value checks live in each config's `__post_init__` (a `ValueError`, turned
into a `SpecError` here). `TrainingConfig` holds what SFT, GRPO and later training kinds share:
the learning rate, the LoRA settings, held-out evaluation, checkpoints, device and resume.
"""

from __future__ import annotations

import dataclasses
import json
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from trainer.spec.environments import EpisodeBudget, check_executing_environment
from trainer.verifiers import DEFAULT_VERIFIER, verifier_names

ConfigT = TypeVar("ConfigT")


class JobError(Exception):
    """An expected failure (bad input, missing model ...): it becomes an `error` event of `kind`."""

    kind = "failed"


class SpecError(JobError):
    kind = "bad_spec"


def config_from_json(config_class: type[ConfigT], data: Mapping[str, Any], where: str) -> ConfigT:
    """An instance of the dataclass `config_class` from JSON, rejecting unknown keys and wrong types."""
    hints = get_type_hints(config_class)
    known = {item.name for item in dataclasses.fields(config_class)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - known)
    if unknown:
        raise SpecError(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    values = {name: _checked_value(name, value, hints[name], where) for name, value in data.items()}
    try:
        return config_class(**values)
    except ValueError as error:
        raise SpecError(f"{where}: {error}") from None


def _checked_value(name: str, value: Any, hint: Any, where: str) -> Any:
    allowed = _allowed_types(hint)
    if float in allowed and type(value) is int:
        return float(value)
    if type(value) not in allowed:
        names = " or ".join("null" if kind is type(None) else kind.__name__ for kind in allowed)
        raise SpecError(f"{where}: '{name}' must be {names}, got {json.dumps(value)}")
    return value


def _allowed_types(hint: Any) -> tuple[type, ...]:
    if get_origin(hint) in (Union, types.UnionType):
        return tuple(kind for option in get_args(hint) for kind in _allowed_types(option))
    return (get_origin(hint) or hint,)


def config_help(config_class: type) -> dict[str, str]:
    """Each field's help text, for `--help` output and docs."""
    return {item.name: item.metadata.get("help", "") for item in dataclasses.fields(config_class)}


def strict_tasks_field() -> Any:
    """The `strict_tasks` knob every job kind has: refuse a task file with a bad line, or skip the line."""
    return field(default=False, metadata={"help": (
        "Refuse the job when a task line is bad (invalid JSON, or not a task the trainer can read); by default "
        "such lines are skipped, and their count and first reasons are logged and reported in the done "
        "event's skipped_tasks. A file without one usable task is refused either way.")})


def check_at_least(config: Any, minimum: int, *names: str) -> None:
    for name in names:
        if getattr(config, name) < minimum:
            raise ValueError(f"{name} must be {'0 or more' if minimum == 0 else f'at least {minimum}'}")


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

    def targets(self) -> str | list[str]:
        """PEFT's `target_modules`: the string 'all-linear', or the listed module names."""
        if self.target_modules == "all-linear":
            return self.target_modules
        return [name.strip() for name in self.target_modules.split(",") if name.strip()]


@dataclass(frozen=True)
class TrainingConfig:
    """The knobs every training kind shares; each kind's config adds its own and may change a default."""

    learning_rate: float = field(default=2e-4, metadata={"help": "Peak learning rate (above 0)."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank (ignored when starting from a parent adapter)."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha (alpha / r scales the update)."})
    lora_dropout: float = field(default=0.05, metadata={"help": "Dropout on the LoRA input."})
    lora_target_modules: str = field(default="all-linear", metadata={
        "help": "Modules to adapt: all-linear, or a comma-separated list such as q_proj,v_proj."})
    verifier: str = field(default=DEFAULT_VERIFIER, metadata={"help": "Verifier of the held-out evaluations."})
    environment: str | None = field(default=None, metadata={
        "help": "Where calls run: workbench, a Python entry point 'package.module:factory' or an MCP server "
                "'mcp:<command>'; null for none (the verifier alone judges)."})
    max_turns: int = field(default=1, metadata={
        "help": "Model turns per episode; above 1 the model reads each call's result and answers again (needs an "
                "environment)."})
    max_episode_tokens: int | None = field(default=None, metadata={
        "help": "Most tokens generated over a whole episode; null for max_turns x the per-answer limit."})
    eval_interval: int = field(default=0, metadata={
        "help": "Evaluate on the held-out tasks every this many steps; 0 for only at the start and the end."})
    heldout_sample_size: int | None = field(default=50, metadata={
        "help": "Held-out tasks per evaluation, drawn with the seed; null for all."})
    eval_max_new_tokens: int | None = field(default=None, metadata={
        "help": "Most tokens per held-out answer; null: derived from the train tasks' reference answers (for dpo, "
                "the chosen answers; 99th percentile + 16)."})
    eval_batch_size: int = field(default=8, metadata={"help": "Prompts per held-out generation batch."})
    checkpoint_interval: int = field(default=50, metadata={
        "help": "Save a checkpoint every this many steps; 0 for only the final adapter."})
    gradient_checkpointing: bool | None = field(default=None, metadata={
        "help": "Recompute activations in the backward pass: less memory for one more forward pass; null: on a "
                "GPU, and on a CPU when a sequence may pass 1,024 tokens (attention's memory grows with the square "
                "of its length: GRPO over 1,400-token prompts, 4 generations, passed 23 GB without it)."})
    max_truncated_share: float = field(default=0.02, metadata={
        "help": "Refuse to start when the length limits would cut more than this share of the train tasks' "
                "reference answers (a cut answer cannot be right)."})
    device: str = field(default="auto", metadata={"help": "auto, cpu, cuda ..."})
    resume: bool = field(default=False, metadata={
        "help": "Continue from the last checkpoint in the output folder (the app sets it on retried attempts)."})
    strict_tasks: bool = strict_tasks_field()

    def __post_init__(self) -> None:
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be above 0, got {self.learning_rate}")
        check_at_least(self, 1, "eval_batch_size")
        if self.eval_max_new_tokens is not None and self.eval_max_new_tokens < 1:
            raise ValueError("eval_max_new_tokens must be at least 1 (or null to derive it)")
        if not 0.0 <= self.max_truncated_share <= 1.0:
            raise ValueError("max_truncated_share must be in [0, 1]")
        check_at_least(self, 0, "eval_interval", "checkpoint_interval")
        if self.verifier not in verifier_names():
            raise ValueError(f"unknown verifier {self.verifier!r}; known: {', '.join(verifier_names())}")
        if self.heldout_sample_size is not None and self.heldout_sample_size < 1:
            raise ValueError("heldout_sample_size must be at least 1 (or null for all)")
        check_executing_environment(self.environment)
        if self.max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        if self.max_turns > 1 and self.environment is None:
            raise ValueError("max_turns above 1 plays episodes, whose calls need an environment to run in")
        if self.max_episode_tokens is not None and self.max_episode_tokens < 1:
            raise ValueError("max_episode_tokens must be at least 1 (or null)")
        self.lora().check()

    def episode_budget(self, per_answer: int) -> EpisodeBudget | None:
        """How long each episode may run, `per_answer` being the most tokens of one answer; None: one turn."""
        if self.max_turns == 1:
            return None
        return EpisodeBudget(self.max_turns, self.max_episode_tokens or self.max_turns * per_answer)

    def lora(self) -> LoraSettings:
        return LoraSettings(self.lora_r, self.lora_alpha, self.lora_dropout, self.lora_target_modules)
