"""The shared contracts: Task, ToolCall, ExpectedCall and Verdict to and from JSON."""

from __future__ import annotations

import pytest

from trainer.contracts import ContractError, ExpectedCall, Task, TaskMetadata, ToolCall, Verdict

TOOL = {"type": "function", "function": {"name": "f", "description": "", "parameters": {"type": "object"}}}


def task_json(**overrides: object) -> dict:
    data = {"id": "t1", "messages": [{"role": "user", "content": "hi"}], "tools": [TOOL],
            "expected_calls": [{"name": "f", "arguments": {"x": [1, 2]}}]}  # fmt: skip
    return {**data, **overrides}


def test_it_round_trips_a_task():
    task = Task.from_json(task_json(order_sensitive=True, metadata={"bucket": "wrong_arguments", "split": "val"}))
    assert task.order_sensitive and task.metadata == TaskMetadata(bucket="wrong_arguments", split="val")
    assert Task.from_json(task.to_json()) == task


def test_it_round_trips_an_episode_task_judged_by_its_end_state_alone():
    episode = {"environment": "trainer.examples.orders:environment", "start_state": {"orders": {"A1": "open"}},
               "expected_state": {"orders": {"A1": "refunded"}}}
    task = Task.from_json(task_json(expected_calls=[], episode=episode))
    assert task.episode is not None and task.episode.start_state == {"orders": {"A1": "open"}}
    assert task.to_json()["episode"] == episode
    assert Task.from_json(task.to_json()) == task
    assert "episode" not in Task.from_json(task_json()).to_json()


@pytest.mark.parametrize(
    "tool",
    [{"name": "f", "description": "", "parameters": {"type": "object"}},
     {"type": "function", "name": "f", "description": "", "parameters": {"type": "object"}, "strict": False}],
    ids=["bare", "responses-api"],
)  # fmt: skip
def test_it_accepts_tools_in_bare_and_flat_form(tool):
    assert Task.from_json(task_json(tools=[tool])).tools == [TOOL]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"messages": "hi"}, "'messages' must be list, got str"),
        ({"expected_calls": []}, "expected_calls is empty; set no_call_expected"),
        ({"no_call_expected": True}, "no_call_expected is set but expected_calls is not empty"),
        ({"expected_calls": [{"name": "f", "arguments": {"x": 1}}]}, "argument 'x' must be a non-empty list"),
        ({"tools": [{"description": "no name"}]}, "tool: missing 'name'"),
        ({"metadata": {"split": 3}}, "'split' must be a string"),
        ({"episode": []}, "'episode' must be an object"),
        ({"episode": {"environment": ""}}, "episode 'environment' must be a non-empty string"),
        ({"episode": {"start_state": [1]}}, "episode 'start_state' must be an object"),
        ({"episode": {"expected_state": "done"}}, "episode 'expected_state' must be an object or null"),
        ({"expected_calls": [], "episode": {"environment": "replay"}}, "expected_calls is empty"),
    ],
)
def test_it_rejects_a_malformed_task_naming_the_field(overrides, message):
    with pytest.raises(ContractError, match=message):
        Task.from_json(task_json(**overrides))


def test_it_rejects_a_task_without_messages():
    data = task_json()
    del data["messages"]
    with pytest.raises(ContractError, match="task t1: missing 'messages'"):
        Task.from_json(data)


def test_it_builds_an_exact_expected_call():
    assert ExpectedCall.exact("f", {"city": "Paris"}) == ExpectedCall("f", {"city": ["Paris"]})


def test_it_round_trips_calls_and_verdicts():
    assert ToolCall.from_json(ToolCall("f", {"a": 1}).to_json()) == ToolCall("f", {"a": 1})
    verdict = Verdict("t1", 0.866667, False, {"tool": 0.4, "arguments": 0.266667, "safety": 0.2}, "argument time", [])
    assert Verdict.from_json(verdict.to_json()) == verdict


def test_it_rejects_call_arguments_that_are_not_an_object():
    with pytest.raises(ContractError, match="'arguments' must be an object"):
        ToolCall.from_json({"name": "f", "arguments": [1]})


def test_it_indexes_tool_schemas_by_name():
    assert Task.from_json(task_json()).tool_schemas == {"f": {"type": "object"}}
