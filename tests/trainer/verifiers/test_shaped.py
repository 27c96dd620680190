"""The opt-in `shaped` reward: the guide's +0.1 / +0.2 / +0.3 / +1.0, and -1.0 for anything unsafe."""

from __future__ import annotations

import pytest

from tests.trainer.golden_cases import check_golden, golden_cases
from trainer.verifiers.shaped import ShapingSignals, shaped_reward


@pytest.mark.parametrize("case", golden_cases("shaped"), ids=lambda case: case.name)
def test_it_gives_the_golden_reward(case):
    check_golden("shaped", case)


def test_it_adds_up_the_guides_signals():
    signals = ShapingSignals(right_tool=True, valid_artifact=True, tests_passed=2, task_complete=False, unsafe=False)
    assert shaped_reward(signals) == {
        "right_tool": 0.1,
        "valid_artifact": 0.2,
        "partial_tests": 0.3,
        "task_complete": 0.0,
    }


def test_it_lets_no_progress_outweigh_an_unsafe_action():
    signals = ShapingSignals(right_tool=True, valid_artifact=True, tests_passed=5, task_complete=True, unsafe=True)
    assert shaped_reward(signals) == {"unsafe": -1.0}
