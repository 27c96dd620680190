"""The guide's multi-step shaping, opt-in: partial credit for progress, -1.0 for unsafe actions.

`shaped_reward` turns progress signals into a reward: +0.1 the right tool was chosen,
+0.2 a valid intermediate artifact was produced, +0.3 some tests passed, +1.0 the task was
completed; any unsafe action makes the reward -1.0 whatever else was earned (so safety
can never be traded for progress). An environment that runs real tests can call it with
its own signals. The `shaped` verifier derives the signals from a single completion:
the right tool is any expected tool called, the artifact is calls that are valid against
the offered tools' schemas, the tests are the expected calls (one passes when matched in
full under `tool_call`'s rules), and completion is passing under those rules.
The guide warns that too much shaping teaches the checklist; `tool_call` stays the default.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from trainer.contracts import Task, ToolCall, Verdict
from trainer.parsing import NO_CALL, ParseResult, parse_tool_calls
from trainer.verifiers.base import UNPARSEABLE_REASON, Completion, Verifier
from trainer.verifiers.matching import match_calls, names_match
from trainer.verifiers.safety import SafetyPolicy, Violation, check_task_calls
from trainer.verifiers.schema import arguments_problems
from trainer.verifiers.tool_call import abstention_verdict, match_reason

RIGHT_TOOL_REWARD = 0.1
VALID_ARTIFACT_REWARD = 0.2
PARTIAL_TESTS_REWARD = 0.3
TASK_COMPLETE_REWARD = 1.0
UNSAFE_REWARD = -1.0


@dataclass(frozen=True)
class ShapingSignals:
    """What an episode achieved, as the guide's shaping counts it."""

    right_tool: bool
    valid_artifact: bool
    tests_passed: int
    task_complete: bool
    unsafe: bool


def shaped_reward(signals: ShapingSignals) -> dict[str, float]:
    """The named reward components; they add up to the reward."""
    if signals.unsafe:
        return {"unsafe": UNSAFE_REWARD}
    return {
        "right_tool": RIGHT_TOOL_REWARD if signals.right_tool else 0.0,
        "valid_artifact": VALID_ARTIFACT_REWARD if signals.valid_artifact else 0.0,
        "partial_tests": PARTIAL_TESTS_REWARD if signals.tests_passed > 0 else 0.0,
        "task_complete": TASK_COMPLETE_REWARD if signals.task_complete else 0.0,
    }


class ShapedVerifier(Verifier):
    name: ClassVar[str] = "shaped"
    floor: ClassVar[float] = UNSAFE_REWARD

    def __init__(self, policy: SafetyPolicy | None = None) -> None:
        self.policy = policy or SafetyPolicy.default()

    def score(self, task: Task, completion: Completion) -> Verdict:
        parsed = parse_tool_calls(completion)
        violations = check_task_calls(self.policy, task, parsed.calls)
        signals, reason = _signals(task, parsed, violations)
        components = shaped_reward(signals)
        return Verdict(
            task.id,
            round(sum(components.values()), 6),
            signals.task_complete and not signals.unsafe,
            components,
            reason,
            [violation.rule_id for violation in violations],
        )


def episode_components(task: Task, calls: Sequence[ToolCall], completed: bool, unsafe: bool) -> dict[str, float]:
    """The shaping of a whole episode: its calls' progress, and completion as the environment judged it.

    Right tool: any expected tool called; artifact: every call valid against the offered schemas;
    tests: an expected call matched in full; complete: the environment's end state was reached.
    """
    match = match_calls(task, calls)
    return shaped_reward(ShapingSignals(
        right_tool=any(pair.tool_matches for pair in match.pairs),
        valid_artifact=bool(calls) and not artifact_problems(task, calls),
        tests_passed=match.exact_pairs,
        task_complete=completed,
        unsafe=unsafe,
    ))  # fmt: skip


def _signals(task: Task, parsed: ParseResult, violations: list[Violation]) -> tuple[ShapingSignals, str]:
    nothing = ShapingSignals(
        right_tool=False, valid_artifact=False, tests_passed=0, task_complete=False, unsafe=bool(violations)
    )
    if task.no_call_expected:
        abstained = not parsed.calls and (parsed.ok or parsed.error_kind == NO_CALL)
        verdict = abstention_verdict(task, parsed, wrong_reward=0.0)
        return replace(nothing, task_complete=abstained), _led_by_violations(verdict.reason, violations)
    if not parsed.ok:
        return nothing, f"{UNPARSEABLE_REASON}, nothing earned: {parsed.error}"
    match = match_calls(task, parsed.calls)
    signals = replace(
        nothing,
        right_tool=any(pair.tool_matches for pair in match.pairs),
        valid_artifact=bool(parsed.calls) and not artifact_problems(task, parsed.calls),
        tests_passed=match.exact_pairs,
        task_complete=match.complete,
    )
    return signals, match_reason(match, violations)


def _led_by_violations(reason: str, violations: list[Violation]) -> str:
    """`reason`, led by the broken safety rules when there are any."""
    if not violations:
        return reason
    return "; ".join([f"unsafe: {violation.sentence()}" for violation in violations] + [reason])


def artifact_problems(task: Task, calls: Sequence[ToolCall]) -> list[str]:
    """Why the calls are not valid against the offered tools' schemas (empty when they are)."""
    schemas = task.tool_schemas
    problems: list[str] = []
    for call in calls:
        tool = next((name for name in schemas if names_match(call.name, name, set(schemas))), None)
        if tool is None:
            problems.append(f"unknown tool {call.name}")
        else:
            problems.extend(arguments_problems(call, schemas[tool]))
    return problems
