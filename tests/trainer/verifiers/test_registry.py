"""The verifier registry and the batch contract every verifier shares."""

from __future__ import annotations

from typing import ClassVar

import pytest

from trainer.contracts import ExpectedCall, Task, Verdict
from trainer.verifiers import DEFAULT_VERIFIER, get_verifier, verifier_names
from trainer.verifiers.base import Verifier
from trainer.verifiers.safety import SafetyPolicy

TASK = Task("t", [], [], [ExpectedCall("f", {})])


def test_it_registers_the_four_verifiers_with_tool_call_the_default():
    assert verifier_names() == ["bfcl", "binary", "shaped", "tool_call"]
    assert DEFAULT_VERIFIER == "tool_call"
    assert all(get_verifier(name).name == name for name in verifier_names())


def test_it_refuses_an_unknown_verifier_naming_the_known_ones():
    with pytest.raises(KeyError, match="known: bfcl, binary, shaped, tool_call"):
        get_verifier("exact")


def test_it_hands_the_agents_policy_to_the_verifier():
    policy = SafetyPolicy(name="strict", denied_tools=["*"])
    assert get_verifier("tool_call", policy).policy is policy


def test_it_refuses_batches_of_unequal_length():
    with pytest.raises(ValueError, match="1 tasks but 2 completions"):
        get_verifier().verify([TASK], ["a", "b"])


class _Broken(Verifier):
    name: ClassVar[str] = "broken"
    floor: ClassVar[float] = -1.0

    def score(self, task: Task, completion: object) -> Verdict:
        raise RuntimeError("boom")


def test_it_turns_a_scoring_crash_into_a_loud_verdict():
    [verdict] = _Broken().verify([TASK], ["x"])
    assert (verdict.reward, verdict.passed) == (-1.0, False)
    assert verdict.reason == "verifier error: RuntimeError: boom"
