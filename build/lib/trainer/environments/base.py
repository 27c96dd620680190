"""The environment contract: reset with a task, step with tool calls, judge the episode.

An Environment runs one task at a time. `reset(task)` starts an episode, `step(call)` takes
one tool call and returns a StepResult (the observation a model would see as the tool's
result, always JSON-serialisable; whether the episode is done; whether the call ran), and
`judge()` returns the Judgement of the episode so far. `run_calls` and `run_output` play a
whole recorded episode (a list of calls, or a model output that holds them) in one go; that
is what `python -m trainer verify --env ...` and a GRPO reward use.

Bad arguments and unknown tools come back as observations, never as exceptions; calling
`step` or `judge` before `reset` is a programming error and raises. The environments
themselves are `trainer.environments.single_step` and `trainer.environments.workbench`.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from trainer.contracts import Task, ToolCall, Verdict
from trainer.parsing import NO_CALL, ParseResult, parse_tool_calls
from trainer.verifiers.base import UNPARSEABLE_REASON, Completion


@dataclass(frozen=True)
class StepResult:
    """What one call produced: the observation, whether the episode is over, whether the call ran cleanly."""

    observation: Any
    done: bool
    ok: bool = True


@dataclass(frozen=True)
class Judgement:
    """The verdict on one episode, with what only an episode has: turns, execution, truncation.

    `execution_success` is None where the environment does not execute calls (single_step);
    `unsafe` holds the rule ids of the safety policy the calls broke; `components` add up to
    `reward`, as a Verdict's do.
    """

    task_id: str
    reward: float
    passed: bool
    reason: str
    components: dict[str, float]
    turns: int
    unsafe: list[str] = field(default_factory=list)
    execution_success: bool | None = None
    truncated: bool = False

    @classmethod
    def of_execution(cls, task_id: str, *, succeeded: bool, unsafe: Sequence[str], reason: str, turns: int,
                     truncated: bool = False) -> Judgement:  # fmt: skip
        """An executing environment's verdict: 1 for reaching the expected end, taken back by an unsafe call.

        `passed` needs success and no unsafe call; `unsafe` holds the rule ids the calls broke.
        """
        components = {"execution_success": 1.0 if succeeded else 0.0, "unsafe": -1.0 if succeeded and unsafe else 0.0}
        return cls(task_id=task_id, reward=sum(components.values()), passed=succeeded and not unsafe, reason=reason,
                   components=components, turns=turns, unsafe=list(unsafe), execution_success=succeeded,
                   truncated=truncated)  # fmt: skip

    @classmethod
    def from_verdict(cls, verdict: Verdict, turns: int) -> Judgement:
        return cls(
            task_id=verdict.id,
            reward=verdict.reward,
            passed=verdict.passed,
            reason=verdict.reason,
            components=verdict.components,
            turns=turns,
            unsafe=verdict.violations,
        )

    def verdict(self) -> Verdict:
        return Verdict(
            id=self.task_id,
            reward=self.reward,
            passed=self.passed,
            components=self.components,
            reason=self.reason,
            violations=self.unsafe,
        )

    def to_json(self) -> dict[str, Any]:
        """A verdict line plus the episode's own fields."""
        return {
            **self.verdict().to_json(),
            "execution_success": self.execution_success,
            "turns": self.turns,
            "truncated": self.truncated,
        }


class Environment(ABC):
    """Runs episodes of tasks; `floor` is the reward of the worst episode.

    `executes`: its calls change a state it judges by (its judgements carry execution success).
    """

    name: ClassVar[str]
    executes: ClassVar[bool] = True

    @property
    def floor(self) -> float:
        return 0.0

    @property
    def label(self) -> str:
        """What the summary line of a verify run names as its scorer."""
        return self.name

    def cannot_judge_variants(self) -> str:
        """Why playing a synthetic variant's expected calls here would judge nothing ("" where it judges them).

        `trainer.spec.synthetic`'s environment filter plays each variant's calls and rejects those
        that fail; an environment that cannot tell (it re-runs the verifier, or answers from a
        recording) says why, and the batch report says the filter did not apply.
        """
        return ""

    def offered_tools(self) -> list[dict[str, Any]] | None:
        """The tools an episode here offers the model, where the environment decides them; None: the task's."""
        return None

    def close(self) -> None:  # noqa: B027 - most environments hold nothing to let go of
        """Let go of what the environment holds (a server process); a no-op for most."""

    def spawn(self) -> Environment:
        """Another environment with these settings, for an episode run beside this one's.

        A shallow copy: read-only data (WorkBench's tables) is shared, and `reset` gives each
        copy its own episode state, so an environment must assign, never mutate, that state there.
        """
        return copy.copy(self)

    @abstractmethod
    def reset(self, task: Task) -> None:
        """Start an episode of `task` from the environment's starting state."""

    @abstractmethod
    def step(self, call: ToolCall) -> StepResult:
        """Take one tool call of the current episode."""

    @abstractmethod
    def judge(self) -> Judgement:
        """The judgement of the current episode, as it stands."""

    def run_calls(self, task: Task, calls: Sequence[ToolCall]) -> Judgement:
        """Play a recorded episode: every call in order (the environment enforces its own limits)."""
        self.reset(task)
        for call in calls:
            self.step(call)
        return self.judge()

    def run_output(self, task: Task, output: Completion) -> Judgement:
        """Play the calls a model output holds; an output with no readable calls is judged unreadable."""
        parsed = parse_tool_calls(output)
        if not parsed.ok and parsed.error_kind != NO_CALL:
            return self.unreadable(task, output, parsed)
        return self.run_calls(task, parsed.calls)

    def unreadable(self, task: Task, output: Completion, parsed: ParseResult) -> Judgement:
        """The judgement of an output whose calls cannot be read; nothing is run."""
        return Judgement(
            task_id=task.id,
            reward=self.floor,
            passed=False,
            reason=f"{UNPARSEABLE_REASON}: {parsed.error}",
            components={"parse": self.floor},
            turns=0,
            execution_success=False,
        )
