"""The `dpo` job's config: TRL's DPOTrainer on a LoRA adapter, from preference pairs (`trainer.spec.pairs`).

The knobs are TRL's `DPOConfig` ones that change what is learned, checked so that a combination that
cannot have the effect it names is refused rather than run:
- `loss_type`: `sigmoid` (the DPO paper's), `ipo` (a squared loss that does not push the margin without
  bound: the safer choice on few or noisy pairs), `hinge` (SLiC), `robust` (for pairs whose labels may be
  flipped, with `label_smoothing` their assumed share), `exo_pair` (needs `label_smoothing` above 0),
  `apo_zero` / `apo_down` (anchored: raise chosen and lower rejected / lower both);
- `beta`: how far the policy may move from the reference; larger keeps it closer;
- `sft_weight`: above 0 adds the chosen answers' negative log-likelihood to the loss with that weight
  (RPO; TRL's `loss_type: [<loss>, "sft"]`), against DPO's habit of lowering the chosen answer's
  probability along with the rejected one's;
- `max_length`: the most tokens of a prompt with either answer; derived from the pairs when null, and a
  limit that cuts more than `max_truncated_share` of the chosen or rejected answers is refused.
`describe()` names what a config sets, for the log and the manifest.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainer.spec.config import TrainingConfig, check_at_least

LOSS_TYPES = ("sigmoid", "ipo", "hinge", "robust", "exo_pair", "apo_zero", "apo_down")
SMOOTHED_LOSSES = ("robust", "exo_pair")  # the losses label_smoothing acts on


@dataclass(frozen=True)
class DpoConfig(TrainingConfig):
    """A dpo job's settings, read from the spec's `hyperparameters`."""

    learning_rate: float = field(default=5e-5, metadata={"help": "Peak learning rate (above 0)."})
    beta: float = field(default=0.1, metadata={
        "help": "How far the policy may move from the reference (the starting policy): larger stays closer. For "
                "ipo, the regularisation tau. Above 0."})
    loss_type: str = field(default="sigmoid", metadata={
        "help": "sigmoid (DPO), ipo, hinge (SLiC), robust (labels may be flipped: set label_smoothing), exo_pair "
                "(needs label_smoothing above 0), apo_zero or apo_down (anchored)."})
    label_smoothing: float = field(default=0.0, metadata={
        "help": "robust: the assumed share of flipped labels, in [0, 0.5); exo_pair: its epsilon (1e-3 in the "
                "paper); other losses: 0."})
    sft_weight: float = field(default=0.0, metadata={
        "help": "Weight of the chosen answers' negative log-likelihood added to the loss (RPO); 0 for none."})
    num_train_epochs: float = field(default=3.0, metadata={"help": "Passes over the preference pairs."})
    max_steps: int = field(default=-1, metadata={"help": "Stop after this many steps; -1 to run the epochs."})
    per_device_train_batch_size: int = field(default=4, metadata={"help": "Pairs per step."})
    max_length: int | None = field(default=None, metadata={
        "help": "Most tokens of a prompt with its chosen or its rejected answer; null: derived from the pairs "
                "(99th percentile + 16). A run whose limit would cut more than max_truncated_share of the answers "
                "is refused."})
    warmup_ratio: float = field(default=0.1, metadata={"help": "Share of the steps spent warming up."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"unknown loss_type {self.loss_type!r}; known: {', '.join(LOSS_TYPES)}")
        if not self.beta > 0:
            raise ValueError("beta must be above 0: it scales the implicit reward every DPO loss is built on")
        self._check_smoothing()
        if self.sft_weight < 0:
            raise ValueError("sft_weight must be 0 or more")
        if not self.num_train_epochs > 0:
            raise ValueError("num_train_epochs must be above 0")
        if self.max_steps == 0 or self.max_steps < -1:
            raise ValueError("max_steps must be at least 1, or -1 to run the epochs")
        check_at_least(self, 1, "per_device_train_batch_size")
        if self.max_length is not None and self.max_length < 2:
            raise ValueError("max_length must be at least 2 (or null to derive it)")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ValueError("warmup_ratio must be in [0, 1)")

    def _check_smoothing(self) -> None:
        if self.loss_type == "robust" and not 0.0 <= self.label_smoothing < 0.5:
            raise ValueError("label_smoothing of the robust loss is a share of flipped labels: it must be in [0, 0.5)")
        if self.loss_type == "exo_pair" and not self.label_smoothing > 0:
            raise ValueError("the exo_pair loss needs label_smoothing above 0 (the paper uses 1e-3)")
        if self.loss_type not in SMOOTHED_LOSSES and self.label_smoothing != 0:
            raise ValueError(f"label_smoothing acts only on the {' and '.join(SMOOTHED_LOSSES)} losses; "
                             f"with {self.loss_type} it must be 0")

    def losses(self) -> tuple[list[str], list[float]]:
        """TRL's `loss_type` and `loss_weights`: the chosen loss, plus the chosen answers' NLL where weighted."""
        if self.sft_weight:
            return [self.loss_type, "sft"], [1.0, self.sft_weight]
        return [self.loss_type], [1.0]

    def describe(self) -> str:
        """What this config sets, in words."""
        parts = [f"{self.loss_type} loss", f"beta {self.beta:g}"]
        if self.label_smoothing:
            parts.append(f"label smoothing {self.label_smoothing:g}")
        if self.sft_weight:
            parts.append(f"chosen NLL weight {self.sft_weight:g}")
        return ", ".join(parts)
