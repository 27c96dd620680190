"""The `judge` job's config and its input: items for a local model to score against a rubric.

One item is one JSON line (`trainer.verifiers.judge.JudgeItem`):

    {"id": "…", "messages": [...OpenAI chat messages, tool calls and results...], "answer": null | "…" | {...}}

A trajectory is judged whole (`answer` null); a task and an answer is judged on the answer.
The job (`trainer.judge`) loads the base model with the optional adapter, asks it about each
item with the rubric of the hyperparameters (greedy, so a judge run twice says the same), and
writes one judgement per item. Nothing here imports torch; the app writes items and checks a
launch's hyperparameters with it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trainer.contracts import ContractError, read_json_lines
from trainer.spec.config import SpecError, check_at_least
from trainer.spec.eval import SamplingConfig
from trainer.verifiers.judge import DEFAULT_MAX_TRANSCRIPT_CHARS, DEFAULT_RUBRIC, JudgeItem, Rubric


@dataclass(frozen=True)
class JudgeConfig:
    """A judge job's settings, read from the spec's `hyperparameters`."""

    rubric: dict[str, Any] = field(
        default_factory=DEFAULT_RUBRIC.to_json,
        metadata={"help": "The agent's rubric: criteria, pass_means, scale_max (integer), pass_score (0-1]."},
    )
    device: str = field(default="auto", metadata={"help": "Torch device: auto, cpu, cuda, cuda:1 ..."})
    batch_size: int = field(default=4, metadata={"help": "Items judged together in one generate call."})
    max_new_tokens: int = field(default=64, metadata={"help": "Most tokens of the judge's reply."})
    max_transcript_chars: int = field(
        default=DEFAULT_MAX_TRANSCRIPT_CHARS,
        metadata={"help": "Longest item transcript shown to the judge; longer ones are cut in the middle."},
    )

    def __post_init__(self) -> None:
        check_at_least(self, 1, "batch_size", "max_new_tokens")
        check_at_least(self, 200, "max_transcript_chars")
        try:
            self.parsed_rubric()
        except ContractError as error:
            raise ValueError(str(error)) from None

    def parsed_rubric(self) -> Rubric:
        return Rubric.from_json(self.rubric)

    def sampling(self, seed: int) -> SamplingConfig:
        """Greedy decoding: the same items and model always get the same judgements."""
        return SamplingConfig(max_new_tokens=self.max_new_tokens, temperature=0.0, batch_size=self.batch_size,
                              seed=seed)  # fmt: skip


def read_judge_items(paths: Sequence[str]) -> list[JudgeItem]:
    """Every item in the files, in order; a SpecError names a missing file, the first bad line or a repeated id."""
    items: list[JudgeItem] = []
    for path in paths:
        try:
            for number, line in enumerate(read_json_lines(path), start=1):
                if not isinstance(line, dict):
                    raise ContractError(f"{path}, item {number}: a judge item must be a JSON object")
                try:
                    items.append(JudgeItem.from_json(line))
                except ContractError as error:
                    raise ContractError(f"{path}, item {number}: {error}") from None
        except FileNotFoundError:
            raise SpecError(f"judge items not found: {path}") from None
        except ContractError as error:
            raise SpecError(str(error)) from None
    if not items:
        raise SpecError("no item to judge")
    repeated = sorted(item_id for item_id, count in Counter(item.id for item in items).items() if count > 1)
    if repeated:
        raise SpecError(f"judge item ids must be unique; repeated: {', '.join(repeated[:5])}")
    return items
