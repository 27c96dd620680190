"""Which config belongs to which job kind, and which kinds train an adapter.

The app checks a launch's hyperparameters with `config_class(kind)` and the trainer parses
the same spec with it, so the two can never disagree on what a kind accepts.
"""

from __future__ import annotations

from trainer.spec.config import TrainingConfig
from trainer.spec.dpo import DpoConfig
from trainer.spec.eval import EvalConfig
from trainer.spec.gate import GateConfig
from trainer.spec.grpo import GrpoConfig
from trainer.spec.judge import JudgeConfig
from trainer.spec.mine import MineConfig
from trainer.spec.replay import ReplayConfig
from trainer.spec.sft import SftConfig
from trainer.spec.synth import SynthConfig

CONFIGS: dict[str, type] = {
    "eval": EvalConfig, "sft": SftConfig, "dpo": DpoConfig, "grpo": GrpoConfig, "gate": GateConfig, "mine": MineConfig,
    "replay": ReplayConfig, "synth": SynthConfig, "judge": JudgeConfig,
}  # fmt: skip
TRAINING_KINDS = tuple(kind for kind, config in CONFIGS.items() if issubclass(config, TrainingConfig))


def config_class(kind: str) -> type:
    """The config dataclass of a job kind; a KeyError naming the known kinds for any other."""
    try:
        return CONFIGS[kind]
    except KeyError:
        raise KeyError(f"no job kind {kind!r}; known: {', '.join(CONFIGS)}") from None
