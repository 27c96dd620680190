"""The `tool_call` verifier, the default for training: the guide's reward, exactly.

Unparseable output scores -1.0. Otherwise the reward is +0.4 for the right tool, +0.4 times
the share of arguments that match, and +0.2 when every call is safe under the agent's
policy. With several expected calls the tool and argument parts are shares over the calls
(missing and extra calls score nothing), paired in any order unless the task is
order-sensitive. A task that expects no call scores 1.0 when the model makes none and 0.0
when it calls anyway. Matching rules: `trainer.verifiers.matching`; safety rules:
`trainer.verifiers.safety`.
"""

from __future__ import annotations

from typing import ClassVar

from trainer.contracts import Task, ToolCall, Verdict
from trainer.parsing import NO_CALL, ParseResult, parse_tool_calls
from trainer.verifiers.base import UNPARSEABLE_REASON, Completion, Verifier
from trainer.verifiers.matching import ARGUMENTS_WEIGHT, TOOL_WEIGHT, CallsMatch, match_calls
from trainer.verifiers.safety import SafetyPolicy, Violation, check_task_calls

UNPARSEABLE_REWARD = -1.0
SAFETY_WEIGHT = 0.2
_REASON_PROBLEMS = 3


class ToolCallVerifier(Verifier):
    name: ClassVar[str] = "tool_call"
    floor: ClassVar[float] = UNPARSEABLE_REWARD

    def __init__(self, policy: SafetyPolicy | None = None) -> None:
        self.policy = policy or SafetyPolicy.default()

    def score(self, task: Task, completion: Completion) -> Verdict:
        parsed = parse_tool_calls(completion)
        if task.no_call_expected:
            return abstention_verdict(task, parsed, wrong_reward=0.0)
        if not parsed.ok:
            return unparseable_verdict(task, parsed)
        if not parsed.calls:
            return _verdict(
                task,
                0.0,
                False,
                {"parse": 0.0, "tool": 0.0, "arguments": 0.0, "safety": 0.0},
                f"no call made; expected {_names(task)}",
            )
        return self._scored(task, parsed.calls)

    def _scored(self, task: Task, calls: list[ToolCall]) -> Verdict:
        match = match_calls(task, calls)
        violations = check_task_calls(self.policy, task, calls)
        components = {
            "parse": 0.0,
            "tool": TOOL_WEIGHT * match.tool_share,
            "arguments": ARGUMENTS_WEIGHT * match.argument_share,
            "safety": 0.0 if violations else SAFETY_WEIGHT,
        }
        passed = match.complete and not violations
        return _verdict(
            task,
            sum(components.values()),
            passed,
            components,
            match_reason(match, violations),
            [violation.rule_id for violation in violations],
        )


def unparseable_verdict(task: Task, parsed: ParseResult) -> Verdict:
    components = {"parse": UNPARSEABLE_REWARD, "tool": 0.0, "arguments": 0.0, "safety": 0.0}
    return _verdict(task, UNPARSEABLE_REWARD, False, components, f"{UNPARSEABLE_REASON}: {parsed.error}")


def abstention_verdict(task: Task, parsed: ParseResult, wrong_reward: float) -> Verdict:
    """A task that expects no call: full marks for making none, `wrong_reward` for calling."""
    if parsed.calls:
        names = ", ".join(call.name for call in parsed.calls)
        return _verdict(task, wrong_reward, False, {"abstained": wrong_reward}, f"no call was expected, got {names}")
    if parsed.ok or parsed.error_kind == NO_CALL:
        return _verdict(task, 1.0, True, {"abstained": 1.0}, "no call was expected and none was made")
    return unparseable_verdict(task, parsed)


def match_reason(match: CallsMatch, violations: list[Violation]) -> str:
    """A short sentence: what matched, else the first few problems."""
    problems = [f"unsafe: {violation.sentence()}" for violation in violations] + match.problems
    if not problems:
        return f"all {match.expected_count} expected call(s) matched"
    shown = "; ".join(problems[:_REASON_PROBLEMS])
    more = len(problems) - _REASON_PROBLEMS
    return shown + (f"; and {more} more" if more > 0 else "")


def _names(task: Task) -> str:
    return ", ".join(call.name for call in task.expected_calls)


def _verdict(
    task: Task,
    reward: float,
    passed: bool,
    components: dict[str, float],
    reason: str,
    violations: list[str] | None = None,
) -> Verdict:
    return Verdict(
        id=task.id,
        reward=round(reward, 6),
        passed=passed,
        components=components,
        reason=reason,
        violations=violations or [],
    )
