"""The `binary` verifier: 1.0 when the completion passes under `tool_call`'s rules, else 0.0.

Passing means every expected call is matched (tool and all arguments, lenient values), no
call is missing or extra, and every call is safe; for a task that expects no call, that
none is made. The guide suggests starting RL with this reward before any shaping.
"""

from __future__ import annotations

from typing import ClassVar

from trainer.contracts import Task, Verdict
from trainer.verifiers.base import Completion, Verifier
from trainer.verifiers.safety import SafetyPolicy
from trainer.verifiers.tool_call import ToolCallVerifier


class BinaryVerifier(Verifier):
    name: ClassVar[str] = "binary"
    floor: ClassVar[float] = 0.0

    def __init__(self, policy: SafetyPolicy | None = None) -> None:
        self._graded = ToolCallVerifier(policy)

    def score(self, task: Task, completion: Completion) -> Verdict:
        graded = self._graded.score(task, completion)
        reward = 1.0 if graded.passed else 0.0
        return Verdict(
            id=task.id,
            reward=reward,
            passed=graded.passed,
            components={"passed": reward},
            reason=graded.reason,
            violations=graded.violations,
        )
