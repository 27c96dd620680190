"""The verifier contract: a batch of tasks and completions in, one Verdict per completion out.

A completion is what the model produced: raw text, or already-decoded JSON such as an
OpenAI message with `tool_calls`. Each verifier implements `score` for one pair; `verify`
scores a batch and guarantees a Verdict for every completion, even when scoring breaks,
so that one bad item never sinks a training step. The rewards themselves are in the
verifier modules; the registry by name is `trainer.verifiers`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from trainer.contracts import Task, Verdict

Completion = str | dict[str, Any] | list[Any] | None
UNPARSEABLE_REASON = "unparseable output"
"""Every verifier's reason starts so when no tool call could be read; summaries count on it."""


class Verifier(ABC):
    """Scores completions of tasks. `floor` is the reward of the worst possible completion."""

    name: ClassVar[str]
    floor: ClassVar[float]

    @abstractmethod
    def score(self, task: Task, completion: Completion) -> Verdict:
        """The verdict on one completion of one task."""

    def verify(self, tasks: Sequence[Task], completions: Sequence[Completion]) -> list[Verdict]:
        """One verdict per completion; `tasks[i]` is the task `completions[i]` answers."""
        if len(tasks) != len(completions):
            raise ValueError(f"{len(tasks)} tasks but {len(completions)} completions")
        return [self._guarded_score(task, completion) for task, completion in zip(tasks, completions, strict=True)]

    def _guarded_score(self, task: Task, completion: Completion) -> Verdict:
        try:
            return self.score(task, completion)
        except Exception as error:  # noqa: BLE001 - every completion must get a verdict; the reason says what broke
            return Verdict(
                id=task.id,
                reward=self.floor,
                passed=False,
                components={"error": self.floor},
                reason=f"verifier error: {type(error).__name__}: {error}",
            )
