"""The `single_step` environment: one assistant turn, judged by the task's verifier.

Nothing is executed. Each `step` records a call and observes `null` (a single-step episode
has no tool results to show); the episode is done once it holds as many calls as the task
expects (one for a task that expects none). Calls after that are still recorded, so that the
verifier sees, and penalises, extra calls. `judge` scores all recorded calls as one
completion with the verifier (`tool_call` unless another is given), so a judgement here
equals the verifier's verdict on the same calls. Multi-step execution is
`trainer.environments.workbench`.
"""

from __future__ import annotations

from typing import ClassVar

from trainer.contracts import Task, ToolCall
from trainer.environments.base import Environment, Judgement, StepResult
from trainer.parsing import ParseResult
from trainer.verifiers import DEFAULT_VERIFIER, get_verifier
from trainer.verifiers.base import Completion, Verifier


class SingleStepEnvironment(Environment):
    name: ClassVar[str] = "single_step"
    executes: ClassVar[bool] = False

    def __init__(self, verifier: Verifier | None = None) -> None:
        self.verifier = verifier or get_verifier(DEFAULT_VERIFIER)
        self._task: Task | None = None
        self._calls: list[ToolCall] = []

    @property
    def floor(self) -> float:
        return self.verifier.floor

    @property
    def label(self) -> str:
        return self.verifier.name

    def cannot_judge_variants(self) -> str:
        return "single_step runs nothing: it is the verifier again, which the verifier filter has applied"

    def reset(self, task: Task) -> None:
        self._task = task
        self._calls = []

    def step(self, call: ToolCall) -> StepResult:
        task = self._current()
        self._calls.append(call)
        return StepResult(observation=None, done=len(self._calls) >= max(1, len(task.expected_calls)))

    def judge(self) -> Judgement:
        task = self._current()
        completion = {"tool_calls": [call.to_json() for call in self._calls]}
        return Judgement.from_verdict(self.verifier.score(task, completion), turns=len(self._calls))

    def unreadable(self, task: Task, output: Completion, parsed: ParseResult) -> Judgement:
        # The verifier has its own reward for unreadable output (-1.0 for tool_call); use it.
        return Judgement.from_verdict(self.verifier.score(task, output), turns=0)

    def _current(self) -> Task:
        if self._task is None:
            raise RuntimeError("reset(task) must start an episode before step or judge")
        return self._task
