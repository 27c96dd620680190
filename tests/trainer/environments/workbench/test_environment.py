"""The workbench environment: ground truth passes, wrong calls fail, unsafe calls are flagged, turns are limited."""

from __future__ import annotations

import json
import time

import pytest

from flywheel.datasets.importers import read
from tests.trainer.environments.conftest import WORKPLACE
from trainer.contracts import ExpectedCall, Task, ToolCall
from trainer.environments.workbench import WorkbenchEnvironment, score_calls
from trainer.environments.workbench.environment import expected_state, reference_call
from trainer.verifiers.safety import RecipientRule, SafetyPolicy

DELETE_256 = ExpectedCall.exact("calendar_delete_event", {"event_id": "00000256"})
SEND = ExpectedCall.exact(
    "email_send_email", {"recipient": "nia.johnson@atlas.com", "subject": "Hello", "body": "See you there"}
)


def ground_truth(task: Task) -> list[ToolCall]:
    return [reference_call(expected) for expected in task.expected_calls]


def test_every_workbench_tasks_ground_truth_runs_cleanly_and_passes(workbench_tasks, environment):
    assert len(workbench_tasks) == 690
    started = time.perf_counter()
    for task in workbench_tasks:
        environment.reset(task)
        results = [environment.step(call) for call in ground_truth(task)]
        judgement = environment.judge()
        assert all(result.ok for result in results), (task.id, [r.observation for r in results])
        assert judgement.passed and judgement.execution_success and judgement.reward == 1.0, (task.id, judgement)
        assert judgement.turns == len(task.expected_calls)
    assert time.perf_counter() - started < 5


def test_the_expected_calls_of_every_task_run_in_the_sandbox_without_a_refusal(workbench_tasks, workbench_data):
    failures = {task.id: expected_state(workbench_data, task)[1] for task in workbench_tasks}
    assert not {task_id: found for task_id, found in failures.items() if found}


def test_an_extra_destructive_call_after_the_ground_truth_fails_every_task(workbench_tasks, environment):
    for task in workbench_tasks:
        touched = {call.arguments.get("event_id") for call in ground_truth(task)}
        victim = next(event for event in ("00000000", "00000001") if event not in touched)
        judgement = environment.run_calls(
            task, [*ground_truth(task), ToolCall("calendar_delete_event", {"event_id": victim})]
        )
        assert not judgement.passed and not judgement.execution_success, task.id
        assert f"calendar_events: row {victim} was deleted" in judgement.reason


def test_deleting_the_wrong_event_leaves_the_state_unequal_and_names_both_rows(environment, make_task):
    judgement = environment.run_calls(
        make_task(DELETE_256), [ToolCall("calendar_delete_event", {"event_id": "00000257"})]
    )
    assert (judgement.passed, judgement.execution_success, judgement.reward) == (False, False, 0.0)
    assert "calendar_events: row 00000256 is still there" in judgement.reason
    assert "calendar_events: row 00000257 was deleted" in judgement.reason


def test_a_wrong_value_names_the_row_and_the_column(environment, make_task):
    expected = ExpectedCall.exact(
        "customer_relationship_manager_update_customer",
        {"customer_id": "00000014", "field": "status", "new_value": "Won"},
    )
    wrong = ToolCall(expected.name, {"customer_id": "00000014", "field": "status", "new_value": "Lost"})
    judgement = environment.run_calls(make_task(expected), [wrong])
    assert not judgement.passed
    assert "customer_relationship_manager_data: row 00000014 has status 'Lost', expected 'Won'" in judgement.reason


def test_a_lookup_before_the_right_action_still_passes(environment, make_task):
    calls = [
        ToolCall("calendar_search_events", {"query": "", "time_min": "2023-12-13 00:00:00"}),
        ToolCall("calendar_delete_event", {"event_id": "00000256"}),
    ]
    judgement = environment.run_calls(make_task(DELETE_256), calls)
    assert judgement.passed and judgement.turns == 2


def test_making_no_call_passes_a_task_that_expects_none_and_fails_one_that_expects_a_call(environment, make_task):
    assert environment.run_calls(make_task(), []).passed
    judgement = environment.run_calls(make_task(DELETE_256), [])
    assert not judgement.passed and "row 00000256 is still there" in judgement.reason


def test_an_unscoped_delete_is_flagged_unsafe_with_its_rule_id(environment, make_task):
    judgement = environment.run_calls(make_task(DELETE_256), [ToolCall("calendar_delete_event", {"event_id": "*"})])
    assert judgement.unsafe == ["delete-without-filter"]
    assert not judgement.passed and "unsafe: rule delete-without-filter" in judgement.reason


def test_an_unsafe_call_that_reaches_the_right_end_state_still_fails(workbench_data, make_task):
    outside_only = SafetyPolicy(
        recipient_rules=[RecipientRule("external-only", ["email_send_email"], ["recipient"], ["example.com"])]
    )
    environment = WorkbenchEnvironment(workbench_data, policy=outside_only)
    judgement = environment.run_calls(make_task(SEND), [reference_call(SEND)])
    assert judgement.execution_success and not judgement.passed
    assert judgement.unsafe == ["external-only"]
    assert judgement.components == {"execution_success": 1.0, "unsafe": -1.0} and judgement.reward == 0.0


def test_calls_past_the_turn_limit_are_refused_and_the_judgement_says_so(workbench_data, make_task):
    environment = WorkbenchEnvironment(workbench_data, max_turns=2)
    environment.reset(make_task(DELETE_256))
    lookups = [environment.step(ToolCall("company_directory_find_email_address", {"name": "nia"})) for _ in range(2)]
    refused = environment.step(ToolCall("calendar_delete_event", {"event_id": "00000256"}))
    judgement = environment.judge()
    assert [result.done for result in lookups] == [False, True]
    assert refused.done and not refused.ok and "Turn limit of 2" in refused.observation
    assert judgement.truncated and judgement.turns == 2 and not judgement.passed
    assert "turn limit of 2 reached, 1 call(s) not run" in judgement.reason


def test_every_observation_is_json_serialisable(environment, make_task):
    environment.reset(make_task())
    calls = [
        ToolCall("calendar_search_events", {"query": "sync"}),
        ToolCall("analytics_get_visitor_information_by_id", {"visitor_id": "0860"}),
        ToolCall("analytics_get_average_session_duration", {"time_min": "2023-11-01"}),
        ToolCall("project_management_search_tasks", {"board": "Design"}),
        ToolCall("no_such_tool", {}),
    ]
    for call in calls:
        json.dumps(environment.step(call).observation)


def test_episodes_do_not_leak_into_each_other_or_into_the_shared_data(environment, make_task, workbench_data):
    environment.run_calls(make_task(DELETE_256), [ToolCall("calendar_delete_event", {"event_id": "00000256"})])
    environment.reset(make_task(DELETE_256))
    assert environment.state.calendar.get("00000256") is not None
    assert "00000256" in workbench_data.tables["calendar_events"].rows


def test_step_before_reset_is_a_programming_error(workbench_data):
    with pytest.raises(RuntimeError, match="reset"):
        WorkbenchEnvironment(workbench_data).step(ToolCall("calendar_delete_event", {"event_id": "00000256"}))


def test_score_calls_judges_a_recorded_episode(environment, make_task):
    judgement = score_calls(make_task(DELETE_256), [reference_call(DELETE_256)], environment)
    assert judgement.passed and judgement.task_id == "task-1"


def test_the_nemo_gym_example_tasks_ground_truth_runs_cleanly(workbench_data):
    tasks = [candidate.task for candidate in read(WORKPLACE / "example.jsonl", "nemo-gym") if candidate.task]
    assert len(tasks) == 5
    for task in tasks:
        assert expected_state(workbench_data, task)[1] == [], task.id
        assert WorkbenchEnvironment(workbench_data).run_calls(task, ground_truth(task)).passed
