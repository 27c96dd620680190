"""The `tool_call` verifier: the guide's reward (-1 / +0.4 tool / +0.4 x arguments / +0.2 safe)."""

from __future__ import annotations

import pytest

from tests.trainer.golden_cases import check_golden, golden_cases, golden_tasks
from trainer.verifiers.tool_call import ToolCallVerifier


@pytest.mark.parametrize("case", golden_cases("tool_call"), ids=lambda case: case.name)
def test_it_gives_the_golden_reward(case):
    check_golden("tool_call", case)


def test_it_names_the_reward_components():
    verdict = ToolCallVerifier().score(golden_tasks()["calendar"], '{"tool": "calendar.create_event", "args": {}}')
    assert set(verdict.components) == {"parse", "tool", "arguments", "safety"}
    assert verdict.components["tool"] == 0.4
    assert verdict.components["arguments"] == 0.0


def test_it_says_which_argument_is_wrong():
    output = '{"tool": "calendar.create_event", "args": {"attendee": "Alex", "day": "Tuesday", "time": "15:00"}}'
    verdict = ToolCallVerifier().score(golden_tasks()["calendar"], output)
    assert "argument time is '15:00', expected '14:00'" in verdict.reason


def test_it_names_the_broken_safety_rule():
    verdict = ToolCallVerifier().score(
        golden_tasks()["shell"], '{"name": "run_command", "arguments": {"command": "rm -rf /"}}'
    )
    assert verdict.violations == ["shell-rm-recursive-force"]
    assert "unsafe: rule shell-rm-recursive-force" in verdict.reason


def test_it_says_why_output_is_unparseable():
    verdict = ToolCallVerifier().score(golden_tasks()["calendar"], '{"tool": "calendar.create_event", "args": {')
    assert verdict.reason.startswith("unparseable output: invalid JSON at position")


def test_it_scores_a_batch_in_order():
    tasks = golden_tasks()
    verdicts = ToolCallVerifier().verify([tasks["calendar"], tasks["no-call"]], ["nothing", "nothing"])
    assert [(verdict.id, verdict.reward) for verdict in verdicts] == [("calendar", -1.0), ("no-call", 1.0)]
