"""Lenient equality: values a user considers the same compare equal, others do not."""

from __future__ import annotations

import pytest

from trainer.verifiers.normalise import values_equal


@pytest.mark.parametrize(
    ("actual", "expected"),
    [
        (5, "5"), ("5.0", 5), (0.1 + 0.2, 0.3), (" Alex ", "alex"), ("New  York", "new york"),
        ("2 PM", "14:00"), ("2:30 p.m.", "14:30"), ("12 AM", "00:00"), ("14:00:00", "14:00"),
        ("2024-03-05", "03/05/2024"), ("March 5, 2024", "2024-03-05"), ("5 March 2024", "2024-03-05"),
        ("2024-03-05T14:00", "2024-03-05 14:00:00"), (True, "true"), ((1, 2), [1, 2]),
        ({"a": 1, "b": [" X "]}, {"a": "1", "b": ["x"]}),
    ],
)  # fmt: skip
def test_it_treats_as_equal(actual, expected):
    assert values_equal(actual, expected)


@pytest.mark.parametrize(
    ("actual", "expected"),
    [
        (1, True), (0, False), ("Alex", "Alexa"), ("13 PM", "13:00"), ("14:00", "14:01"), ([1, 2], [2, 1]),
        ([1], [1, 1]), ({"a": 1}, {"a": 1, "b": 2}), ("2024-03-05", "2024-05-03"), (None, ""), (None, 0),
        ("nan", float("nan")), ({"a": 1}, [("a", 1)]),
    ],
)  # fmt: skip
def test_it_keeps_apart(actual, expected):
    assert not values_equal(actual, expected)
