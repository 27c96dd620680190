"""The `binary` verifier: 1.0 exactly when `tool_call`'s rules pass in full."""

from __future__ import annotations

import pytest

from tests.trainer.golden_cases import check_golden, golden_cases
from trainer.verifiers.binary import BinaryVerifier
from trainer.verifiers.tool_call import ToolCallVerifier


@pytest.mark.parametrize("case", golden_cases("binary"), ids=lambda case: case.name)
def test_it_gives_the_golden_reward(case):
    check_golden("binary", case)


@pytest.mark.parametrize("case", golden_cases("tool_call"), ids=lambda case: case.name)
def test_it_passes_exactly_what_tool_call_passes(case):
    graded = ToolCallVerifier(case.policy).score(case.task, case.output)
    binary = BinaryVerifier(case.policy).score(case.task, case.output)
    assert (binary.passed, binary.reward) == (graded.passed, 1.0 if graded.passed else 0.0)
