"""The `workbench` environment: a multi-step workplace sandbox judged by its end state.

Each episode starts from WorkBench's tables (see `data.py`); each call runs one of the 27
workplace tools against the episode's copy and returns the tool's result as the observation.
The judgement is execution success, as WorkBench and NeMo Gym's workplace assistant judge
it: the task's expected calls are run on a fresh copy, and the episode passes when its end
state equals that one (rules in `compare.py`; the reason names the first differences) and
no call breaks the safety policy (unsafe calls still run: this is a sandbox; they fail the
episode and carry their rule ids). The reward is 1.0 or 0.0, as NeMo Gym's is.

An episode allows `max_turns` calls (default 20: WorkBench's longest answer is 12 calls, and
an agent needs lookups before acting); later calls are refused and the judgement says it
was truncated. `score_calls` judges a recorded list of calls in one go, which is what a GRPO
reward wants; build one WorkbenchEnvironment and reuse it, the tables are read once.
Not covered: WorkBench's partial-credit metrics (exact match, side-effect rate) and its
lenient end dates for plots.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice
from pathlib import Path
from typing import ClassVar

from trainer.contracts import OMITTABLE, ExpectedCall, Task, ToolCall
from trainer.environments.base import Environment, Judgement, StepResult
from trainer.environments.workbench.compare import state_differences
from trainer.environments.workbench.data import WorkbenchData, load_data
from trainer.environments.workbench.dispatch import run_tool
from trainer.environments.workbench.state import WorkbenchState
from trainer.verifiers.safety import SafetyPolicy, Violation, check_task_calls

DEFAULT_MAX_TURNS = 20
_REASON_DIFFERENCES = 3


class WorkbenchEnvironment(Environment):
    name: ClassVar[str] = "workbench"

    def __init__(
        self,
        data: WorkbenchData | None = None,
        *,
        data_dir: str | Path | None = None,
        policy: SafetyPolicy | None = None,
        max_turns: int = DEFAULT_MAX_TURNS,
    ) -> None:
        self.data = data or load_data(data_dir)
        self.policy = policy or SafetyPolicy.default()
        self.max_turns = max_turns
        self._task: Task | None = None
        self._state = WorkbenchState.fresh(self.data)
        self._calls: list[ToolCall] = []
        self._refused = 0

    @property
    def state(self) -> WorkbenchState:
        """The current episode's sandbox (read it; change it only through `step`)."""
        return self._state

    def reset(self, task: Task) -> None:
        self._task = task
        self._state = WorkbenchState.fresh(self.data)
        self._calls = []
        self._refused = 0

    def step(self, call: ToolCall) -> StepResult:
        task = self._current()
        if len(self._calls) >= self.max_turns:
            self._refused += 1
            return StepResult(f"Turn limit of {self.max_turns} calls reached; this call was not run.", True, ok=False)
        self._calls.append(call)
        outcome = run_tool(self._state, task.tool_schemas, call)
        return StepResult(outcome.observation, done=len(self._calls) >= self.max_turns, ok=outcome.ok)

    def judge(self) -> Judgement:
        task = self._current()
        expected, failures = expected_state(self.data, task)
        differences = list(islice(state_differences(self._state, expected), _REASON_DIFFERENCES + 1))
        violations = check_task_calls(self.policy, task, self._calls)
        return Judgement.of_execution(
            task.id, succeeded=not differences, unsafe=[violation.rule_id for violation in violations],
            reason=self._reason(differences, violations, failures), turns=len(self._calls),
            truncated=self._refused > 0,
        )

    def _reason(self, differences: list[str], violations: list[Violation], failures: list[str]) -> str:
        if differences:
            shown = "; ".join(differences[:_REASON_DIFFERENCES])
            reason = f"end state differs: {shown}" + ("; and more" if len(differences) > _REASON_DIFFERENCES else "")
        else:
            reason = f"the end state matches the expected one after {len(self._calls)} call(s)"
        if violations:
            reason += "; unsafe: " + "; ".join(violation.sentence() for violation in violations)
        if self._refused:
            reason += f"; turn limit of {self.max_turns} reached, {self._refused} call(s) not run"
        if failures:
            reason += f"; note: the task's expected calls fail in the sandbox ({failures[0]})"
        return reason

    def _current(self) -> Task:
        if self._task is None:
            raise RuntimeError("reset(task) must start an episode before step or judge")
        return self._task


def expected_state(data: WorkbenchData, task: Task) -> tuple[WorkbenchState, list[str]]:
    """The state after the task's expected calls, and a sentence per expected call the sandbox refused."""
    state = WorkbenchState.fresh(data)
    failures = []
    for number, expected in enumerate(task.expected_calls, start=1):
        outcome = run_tool(state, task.tool_schemas, reference_call(expected))
        if not outcome.ok:
            failures.append(f"call {number}, {expected.name}: {outcome.observation}")
    return state, failures


def reference_call(expected: ExpectedCall) -> ToolCall:
    """The expected call with each argument's first accepted value (left out where only omission is)."""
    arguments = {}
    for key, alternatives in expected.arguments.items():
        given = [value for value in alternatives if value != OMITTABLE]
        if given:
            arguments[key] = given[0]
    return ToolCall(name=expected.name, arguments=arguments)


def score_calls(task: Task, calls: Sequence[ToolCall], environment: WorkbenchEnvironment | None = None) -> Judgement:
    """Judge one recorded episode of `task` (reuse `environment` across calls to keep this cheap)."""
    return (environment or WorkbenchEnvironment()).run_calls(task, calls)
