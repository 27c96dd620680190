"""Lenient call matching: names, argument shares and the pairing of parallel calls."""

from __future__ import annotations

from trainer.contracts import ExpectedCall, Task, ToolCall
from trainer.verifiers.matching import match_arguments, match_calls, names_match, value_accepted


def task_with(expected: list[ExpectedCall], order_sensitive: bool = False) -> Task:
    tools = [{"type": "function", "function": {"name": name}} for name in sorted({call.name for call in expected})]
    return Task("t", [], tools, expected, order_sensitive=order_sensitive)


def test_it_matches_dotted_names_written_with_underscores_unless_ambiguous():
    assert names_match("math_factorial", "math.factorial", {"math.factorial"})
    assert not names_match("math_factorial", "math.factorial", {"math.factorial", "math_factorial"})
    assert not names_match("math.gamma", "math.factorial", {"math.factorial"})


def test_it_counts_missing_and_extra_arguments_against_the_share():
    expected = ExpectedCall("f", {"a": [1], "b": ["x"], "c": ["", 3]})
    match = match_arguments({"a": 1, "z": 9}, expected, {})
    assert (match.matched, match.total) == (2, 4)
    assert match.problems == ["missing argument b", "unexpected argument z"]


def test_it_accepts_omitting_an_argument_whose_expected_value_is_the_default():
    expected = ExpectedCall("f", {"unit": ["celsius"]})
    schema = {"properties": {"unit": {"type": "string", "default": "celsius"}}}
    assert match_arguments({}, expected, schema).share == 1.0


def test_it_reads_nested_alternatives_in_bfcl_answers():
    accepted = {"mode": ["fast", "quick"], "level": ["", 1]}
    assert value_accepted({"mode": "Quick"}, accepted)
    assert not value_accepted({"mode": "slow"}, accepted)
    assert not value_accepted({"mode": "fast", "other": 1}, accepted)
    assert value_accepted([{"n": "bob"}], [{"n": ["Bob"], "a": [""]}])


def test_it_finds_the_best_pairing_where_greedy_would_not():
    expected = [ExpectedCall("f", {"x": [1], "y": [1]}), ExpectedCall("f", {"x": [1], "y": [2]})]
    calls = [ToolCall("f", {"x": 1, "y": 2}), ToolCall("f", {"x": 1, "y": 1})]
    match = match_calls(task_with(expected), calls)
    assert match.complete and match.argument_share == 1.0


def test_it_pairs_by_position_when_order_matters():
    expected = [ExpectedCall("a", {}), ExpectedCall("b", {})]
    match = match_calls(task_with(expected, order_sensitive=True), [ToolCall("b", {}), ToolCall("a", {})])
    assert match.tool_share == 0.0


def test_it_still_pairs_many_parallel_calls():
    expected = [ExpectedCall("f", {"i": [i]}) for i in range(12)]
    calls = [ToolCall("f", {"i": i}) for i in reversed(range(12))]
    assert match_calls(task_with(expected), calls).complete
