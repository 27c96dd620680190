"""The `replay` environment: a production trajectory's recorded tool results, judged by its ground truth.

For a multi-turn failure whose tools the team has no environment for. The task's
`episode.start_state` is `{"recorded": [{"name", "arguments", "result"}, ...]}`: the calls the
production trajectory made after the episode's starting point, with what each returned. A call
whose name and arguments equal a recorded call's (arguments compared as JSON: key order does
not matter, 1.0 is 1) observes that recorded result; made again, it observes the next result
recorded for the same call, and the last one once they run out. Any other call observes
`{"error": ...}` saying the replay has no result for it (ok false) and is still judged.

The judgement is the recorded ground truth: the episode succeeds when every expected call of
the task was made, matched as the `tool_call` verifier matches a call (accepted alternatives,
omittable arguments: `trainer.verifiers.matching`), in order when the task is order-sensitive;
extra calls are allowed. It passes when, besides, no call breaks the safety policy
(`trainer.verifiers.safety`, as WorkBench judges). Reward 1.0 or 0.0; the reason names the
first expected call not made, or the rules broken. `answerable_calls` says which expected
calls the recording can answer (what the app's task page shows). Not covered: state. Nothing
changes when a call is made, so a call that should have seen an earlier write's effect
observes what production saw. No torch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from trainer.contracts import ContractError, ExpectedCall, Task, ToolCall
from trainer.environments.base import Environment, Judgement, StepResult
from trainer.verifiers.matching import match_arguments, names_match
from trainer.verifiers.safety import SafetyPolicy, Violation, check_task_calls

RECORDED = "recorded"


@dataclass(frozen=True)
class RecordedCall:
    """One call of the production trajectory and the result it got."""

    name: str
    arguments: dict[str, Any]
    result: Any

    @property
    def call(self) -> ToolCall:
        return ToolCall(self.name, self.arguments)


@dataclass(frozen=True)
class ExpectedAnswer:
    """An expected call of a replay task and the recorded call that answers it (None: the replay cannot)."""

    expected: ExpectedCall
    recorded: RecordedCall | None

    @property
    def answerable(self) -> bool:
        return self.recorded is not None


def recorded_calls(task: Task) -> list[RecordedCall]:
    """The recording a replay task starts from; a ContractError names what is wrong with it."""
    where = f"task {task.id}: replay"
    state = task.episode.start_state if task.episode is not None else {}
    entries = state.get(RECORDED)
    if not isinstance(entries, list):
        raise ContractError(f"{where} needs episode.start_state.{RECORDED}, a list of recorded calls")
    recorded = []
    for number, entry in enumerate(entries, start=1):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            raise ContractError(f"{where}: recorded call {number} needs a 'name'")
        arguments = entry.get("arguments", {})
        if not isinstance(arguments, dict):
            raise ContractError(f"{where}: recorded call {number} ({entry['name']}): 'arguments' must be an object")
        recorded.append(RecordedCall(entry["name"], arguments, entry.get("result")))
    return recorded


def answerable_calls(task: Task) -> list[ExpectedAnswer]:
    """Each expected call of `task`, in order, with the first recorded call that satisfies it, if any."""
    recorded = recorded_calls(task)
    return [
        ExpectedAnswer(expected, next((entry for entry in recorded if satisfies(task, expected, entry.call)), None))
        for expected in task.expected_calls
    ]


def satisfies(task: Task, expected: ExpectedCall, call: ToolCall) -> bool:
    """Whether `call` is `expected`, as the `tool_call` verifier matches a call: right tool, every argument."""
    schemas = task.tool_schemas
    return names_match(call.name, expected.name, set(schemas)) and (
        match_arguments(call.arguments, expected, schemas.get(expected.name, {})).share == 1.0
    )


def made_in_order(task: Task, calls: Sequence[ToolCall]) -> list[int | None]:
    """For each expected call, the index of the call that made it, each after the previous one's (None: not made)."""
    made: list[int | None] = []
    start = 0
    for expected in task.expected_calls:
        index = next((i for i in range(start, len(calls)) if satisfies(task, expected, calls[i])), None)
        made.append(index)
        if index is not None:
            start = index + 1
    return made


def made_in_any_order(task: Task, calls: Sequence[ToolCall]) -> list[int | None]:
    """For each expected call, a distinct call that made it, pairing as many as any pairing can (None: not made)."""
    fits = [[i for i, call in enumerate(calls) if satisfies(task, expected, call)] for expected in task.expected_calls]
    owner: dict[int, int] = {}  # call index -> expected index

    def claim(expected: int, seen: set[int]) -> bool:
        # An augmenting path: take a free call, or one whose owner can move to another call.
        for call in fits[expected]:
            if call not in seen:
                seen.add(call)
                if call not in owner or claim(owner[call], seen):
                    owner[call] = expected
                    return True
        return False

    for expected in range(len(fits)):
        claim(expected, set())
    made: list[int | None] = [None] * len(fits)
    for call, expected in owner.items():
        made[expected] = call
    return made


class ReplayEnvironment(Environment):
    name: ClassVar[str] = "replay"

    def __init__(self, policy: SafetyPolicy | None = None) -> None:
        self.policy = policy or SafetyPolicy.default()
        self._task: Task | None = None
        self._results: dict[str, list[Any]] = {}
        self._answered: dict[str, int] = {}
        self._recorded_tools: frozenset[str] = frozenset()
        self._calls: list[ToolCall] = []
        self._misses = 0

    def cannot_judge_variants(self) -> str:
        return ("replay answers only the calls a production trajectory recorded and keeps no state: a variant's "
                "changed calls have no recorded result to be judged by")

    def reset(self, task: Task) -> None:
        recorded = recorded_calls(task)
        if not task.expected_calls and not task.no_call_expected:
            raise ContractError(f"task {task.id}: replay judges by the expected calls, and the task has none")
        results: dict[str, list[Any]] = {}
        for entry in recorded:
            results.setdefault(_key(entry.call), []).append(entry.result)
        self._task, self._results, self._answered = task, results, {}
        self._recorded_tools = frozenset(entry.name for entry in recorded)
        self._calls, self._misses = [], 0

    def step(self, call: ToolCall) -> StepResult:
        self._current()
        self._calls.append(call)
        key = _key(call)
        results = self._results.get(key)
        if results is None:
            self._misses += 1
            return StepResult({"error": self._miss(call)}, done=False, ok=False)
        times = self._answered.get(key, 0)
        self._answered[key] = times + 1
        return StepResult(results[min(times, len(results) - 1)], done=False)

    def judge(self) -> Judgement:
        task = self._current()
        made = made_in_order(task, self._calls) if task.order_sensitive else made_in_any_order(task, self._calls)
        missing = [index for index, call in enumerate(made) if call is None]
        succeeded = not self._calls if task.no_call_expected else not missing
        violations = check_task_calls(self.policy, task, self._calls)
        return Judgement.of_execution(
            task.id, succeeded=succeeded, unsafe=[violation.rule_id for violation in violations],
            reason=self._reason(task, missing, violations), turns=len(self._calls),
        )

    def _reason(self, task: Task, missing: list[int], violations: list[Violation]) -> str:
        answered = len(self._calls) - self._misses
        if task.no_call_expected:
            reason = "no call was expected and none was made" if not self._calls else \
                f"no call was expected, got {', '.join(call.name for call in self._calls)}"  # fmt: skip
        elif missing:
            reason = self._missing(task, missing[0]) + (f"; and {len(missing) - 1} more" if len(missing) > 1 else "")
        else:
            reason = f"all {len(task.expected_calls)} expected call(s) made" + (" in order" if task.order_sensitive
                                                                               else "")  # fmt: skip
        reason += f"; {answered} of {len(self._calls)} call(s) answered from the recording"
        if violations:
            reason += "; unsafe: " + "; ".join(violation.sentence() for violation in violations)
        return reason

    def _missing(self, task: Task, index: int) -> str:
        expected = task.expected_calls[index]
        shown = f"expected call {index + 1} of {len(task.expected_calls)}, {expected.name}, was not made"
        same_tool = [call for call in self._calls if names_match(call.name, expected.name, set(task.tool_schemas))]
        if not same_tool:
            return shown
        problems = match_arguments(same_tool[-1].arguments, expected, task.tool_schemas.get(expected.name, {})).problems
        if problems:
            return shown + f" (the last {expected.name} call: {'; '.join(problems[:3])})"
        taken = "after the expected calls before it" if task.order_sensitive else "apart from the other expected calls"
        return shown + f" {taken}"

    def _miss(self, call: ToolCall) -> str:
        if call.name in self._recorded_tools:
            return (f"the replay has no recorded result for this call: the recorded calls to {call.name} "
                    "had other arguments")  # fmt: skip
        return f"the replay has no recorded result for this call: the recording holds no call to {call.name}"

    def _current(self) -> Task:
        if self._task is None:
            raise RuntimeError("reset(task) must start an episode before step or judge")
        return self._task


def _key(call: ToolCall) -> str:
    """The call as canonical JSON: keys sorted, integral floats as integers."""
    return json.dumps([call.name, _unified(call.arguments)], sort_keys=True, ensure_ascii=False,
                      separators=(",", ":"))  # fmt: skip


def _unified(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {key: _unified(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_unified(item) for item in value]
    return value
