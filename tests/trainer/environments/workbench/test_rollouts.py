"""Replaying NeMo Gym's recorded workplace-assistant rollouts: the same observations, the same rewards.

example_rollouts.jsonl holds five real GPT-4.1 episodes with the tool results NeMo Gym's
sandbox returned and the reward its judge gave, but not their ground truth; their requests
come from NeMo Gym's larger task set. The ground truth below is WorkBench's answer for the
same template (the kofi one is in WorkBench's email CSV verbatim).
"""

from __future__ import annotations

import json

import pytest

from tests.trainer.environments.conftest import WORKPLACE
from trainer.contracts import ExpectedCall, Task, ToolCall, openai_tool
from trainer.environments.workbench import WorkbenchEnvironment

CRM = "customer_relationship_manager"
GROUND_TRUTH = {
    # "Can you make a {plot_type} chart of {metric} since {date}?" plots up to the last day with data.
    "Create a bar chart of total visits since November 30": [
        ExpectedCall.exact(
            "analytics_create_plot",
            {"time_min": "2023-11-30", "time_max": "2023-11-29", "value_to_plot": "total_visits", "plot_type": "bar"},
        )
    ],
    # No consulting customer at the proposal stage was last contacted three weeks ago or more: nothing to do.
    "We need to move all customers that haven't responded to a proposal for the consulting product in 3 weeks to "
    "lost. Can you update the CRM?": [],
    "Delete Casey Wilson from the crm": [ExpectedCall.exact(f"{CRM}_delete_customer", {"customer_id": "00000014"})],
    "Add Dakota Thomas as a new lead in the crm and assign them to Nadia": [
        ExpectedCall.exact(
            f"{CRM}_add_customer",
            {"customer_name": "Dakota Thomas", "assigned_to_email": "nadia.moreau@atlas.com", "status": "Lead"},
        )
    ],
    "Delete my last email from kofi": [ExpectedCall.exact("email_delete_email", {"email_id": "00000259"})],
}


def rollouts() -> list[dict]:
    lines = (WORKPLACE / "example_rollouts.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def rollout_task(rollout: dict) -> Task:
    params = rollout["responses_create_params"]
    messages = [{"role": m["role"], "content": m["content"]} for m in params["input"] if m.get("role")]
    expected = GROUND_TRUTH[messages[-1]["content"]]
    return Task(
        id=messages[-1]["content"],
        messages=messages,
        tools=[openai_tool(t) for t in params["tools"]],
        expected_calls=expected,
        no_call_expected=not expected,
    )


def calls_and_outputs(rollout: dict) -> list[tuple[ToolCall, object]]:
    items = rollout["response"]["output"]
    outputs = {item["call_id"]: item["output"] for item in items if item["type"] == "function_call_output"}
    return [
        (ToolCall(item["name"], json.loads(item["arguments"])), json.loads(outputs[item["call_id"]])["output"])
        for item in items
        if item["type"] == "function_call"
    ]


def without_clock(value: object) -> object:
    # NeMo Gym's copy of the CRM table stores its dates with a 23:59:00 time; WorkBench's has dates only.
    return json.loads(json.dumps(value).replace(" 23:59:00", ""))


@pytest.mark.parametrize("rollout", rollouts(), ids=lambda r: r["responses_create_params"]["input"][-1]["content"][:40])
def test_a_recorded_rollout_sees_the_same_observations_and_earns_the_same_reward(workbench_data, rollout):
    environment = WorkbenchEnvironment(workbench_data)
    environment.reset(rollout_task(rollout))
    for call, recorded in calls_and_outputs(rollout):
        assert environment.step(call).observation == without_clock(recorded), call.name
    assert environment.judge().reward == rollout["reward"]


def test_the_replay_feeds_every_rollout_and_each_has_a_ground_truth():
    recorded = rollouts()
    assert len(recorded) == 5 and sum(len(calls_and_outputs(r)) for r in recorded) == 8
    assert {rollout_task(r).id for r in recorded} == set(GROUND_TRUTH)


@pytest.mark.parametrize("rollout", rollouts(), ids=lambda r: r["responses_create_params"]["input"][-1]["content"][:40])
def test_a_whole_recorded_response_can_be_judged_as_one_output(workbench_data, rollout):
    judgement = WorkbenchEnvironment(workbench_data).run_output(rollout_task(rollout), rollout["response"])
    assert judgement.reward == rollout["reward"] and judgement.turns == len(calls_and_outputs(rollout))
