"""One answer at one point of a conversation, scored by every check that applies to it.

The replay of a failing step scores both the recorded answer and a version's new one with it,
so the two are judged alike. The checks:
- the calls read from the answer (`trainer.parsing`), and whether they were written as JSON
  (None when the answer attempts no call: plain text is not a JSON failure);
- schema validity against the offered tools (`trainer.verifiers.schema`; None without calls);
- safety under the agent's policy, with the conversation's earlier calls as history
  (`trainer.verifiers.safety`): the rule ids broken and a sentence for each;
- correctness, only where an expected answer is known (`expected=True`: the task's expected
  calls, or no call): the `tool_call` verifier's verdict (reward, passed, reason) and whether
  the tools and the arguments match (`trainer.verifiers.matching`). Without one these are None,
  never a guess.
It scores; it does not generate, and it runs nothing in an environment.

    >>> task = Task("t", [{"role": "user", "content": "hi"}], [], [], no_call_expected=True)
    >>> score_answer(task, "Hello!", SafetyPolicy.default(), expected=False).valid_json is None
    True
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from trainer.contracts import Task, ToolCall
from trainer.parsing import NO_CALL, ParseResult, parse_tool_calls
from trainer.verifiers.base import Completion
from trainer.verifiers.matching import match_calls
from trainer.verifiers.safety import SafetyPolicy, check_task_calls
from trainer.verifiers.schema import calls_problems
from trainer.verifiers.tool_call import ToolCallVerifier


@dataclass(frozen=True)
class AnswerScores:
    """What the checks found in one answer; a None check did not apply."""

    calls: list[dict[str, Any]] | None  # None: a call was attempted but could not be read
    parse_error: str | None
    valid_json: bool | None
    schema_valid: bool | None
    schema_problems: list[str] = field(default_factory=list)
    unsafe: bool = False
    violations: list[str] = field(default_factory=list)  # rule ids
    violation_reasons: list[str] = field(default_factory=list)
    correct_tool: bool | None = None
    correct_arguments: bool | None = None
    reward: float | None = None
    passed: bool | None = None
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _valid_json(parsed: ParseResult) -> bool | None:
    if parsed.ok and parsed.calls:
        return parsed.json
    return None if parsed.ok or parsed.error_kind == NO_CALL else False


def _correct(task: Task, parsed: ParseResult) -> tuple[bool, bool]:
    """(right tools, right tools and arguments) against the task's expected answer."""
    if task.no_call_expected:
        abstained = not parsed.calls and (parsed.ok or parsed.error_kind == NO_CALL)
        return abstained, abstained
    if not (parsed.ok and parsed.calls):
        return False, False
    match = match_calls(task, parsed.calls)
    return match.tool_share == 1.0, match.complete


def score_answer(task: Task, completion: Completion, policy: SafetyPolicy, *, expected: bool) -> AnswerScores:
    """Score `completion` as the next answer to `task`'s messages; correctness only when `expected`."""
    parsed = parse_tool_calls(completion)
    calls: list[ToolCall] = parsed.calls if parsed.ok else []
    violations = check_task_calls(policy, task, calls)
    problems = calls_problems(calls, task.tool_schemas)
    scores = AnswerScores(
        calls=[call.to_json() for call in calls] if parsed.ok or parsed.error_kind == NO_CALL else None,
        parse_error=parsed.error,
        valid_json=_valid_json(parsed), schema_valid=not problems if calls else None, schema_problems=problems,
        unsafe=bool(violations), violations=[violation.rule_id for violation in violations],
        violation_reasons=[violation.sentence() for violation in violations],
    )  # fmt: skip
    if not expected:
        return scores
    verdict = ToolCallVerifier(policy).score(task, completion)
    correct_tool, correct_arguments = _correct(task, parsed)
    return AnswerScores(
        **{
            **asdict(scores),
            "correct_tool": correct_tool,
            "correct_arguments": correct_arguments,
            "reward": verdict.reward,
            "passed": verdict.passed,
            "reason": verdict.reason,
        }
    )
