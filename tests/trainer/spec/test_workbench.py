from __future__ import annotations

import re

import pytest

from tests.trainer.tiny_model import EXTERNAL
from trainer.contracts import Task
from trainer.demonstrations import play_reference
from trainer.environments.workbench import WorkbenchEnvironment, load_data
from trainer.prompts import reference_calls
from trainer.spec.workbench import (
    SYSTEM_TEXT,
    answer_calls,
    episode_tasks,
    single_call_tasks,
    value_available,
    workbench_multi_split,
    workbench_templates,
)

ADDRESSES = ["raj.patel@atlas.com", "nia.johnson@atlas.com"]


def test_a_value_in_the_request_is_available_with_spacing_and_case_ignored():
    assert value_available("Front end", "Add it to the front-end board", ADDRESSES)
    assert value_available("total_visits", "plot total visits", ADDRESSES)
    assert not value_available("00000256", "Delete my first meeting on December 13", ADDRESSES)


def test_a_directory_address_is_available_only_when_the_request_names_its_person():
    assert value_available("raj.patel@atlas.com", "assign them to Raj", ADDRESSES)
    assert not value_available("raj.patel@atlas.com", "assign them to the person with the fewest tasks", ADDRESSES)


def test_dates_times_and_durations_named_in_the_request_are_available():
    request = "Create a 1.5 hour event on December 8 at 3:30 with nia"
    assert value_available("2023-12-08 15:30:00", request, ADDRESSES)
    assert value_available("90", request, ADDRESSES)
    assert not value_available("2023-12-08 03:30:00", request, ADDRESSES)
    assert not value_available("2023-12-01", "due on December 13", ADDRESSES)
    assert not value_available("2024-12-08", "due on December 8", ADDRESSES)


def test_workbench_answers_become_calls_with_underscore_names():
    calls = answer_calls("['calendar.delete_event.func(event_id=\"00000256\")']")
    assert [(call.name, call.arguments) for call in calls] == [("calendar_delete_event", {"event_id": "00000256"})]


@pytest.mark.skipif(not (EXTERNAL / "workbench").is_dir(), reason="needs ../shared/external/workbench")
def test_the_selected_tasks_need_one_call_no_lookup_and_offer_only_their_domains_tools():
    tasks = list(single_call_tasks(EXTERNAL))
    assert len(tasks) >= 30
    for task in tasks:
        request = task.messages[-1]["content"]
        domain = task.metadata.source.split(":")[1]
        assert not re.search(r"\bif\b", request, re.IGNORECASE)
        assert len(task.expected_calls) == 1
        offered = [tool["function"]["name"] for tool in task.tools]
        assert task.expected_calls[0].name in offered
        assert all(name.startswith(domain + "_") for name in offered)
        assert task.messages[0]["content"].startswith(SYSTEM_TEXT)


@pytest.fixture(scope="module")
def episodes() -> list[Task]:
    if not (EXTERNAL / "workbench").is_dir():
        pytest.skip("needs ../shared/external/workbench")
    return list(episode_tasks(EXTERNAL))


def test_every_workbench_task_is_an_episode_task_offering_its_domains_and_the_directory(episodes):
    assert len(episodes) == 690 and len({task.id for task in episodes}) == 690
    assert sum(task.no_call_expected for task in episodes) == 122
    for task in episodes:
        offered = {tool["function"]["name"] for tool in task.tools}
        domains = task.metadata.source.removeprefix("workbench:").split("+")
        assert {call.name for call in task.expected_calls} <= offered
        assert "company_directory_find_email_address" in offered
        assert {name for name in offered if "search" in name} == {
            name for domain in domains for name in offered if name.startswith(domain) and "search" in name}
        assert task.messages == [{"role": "system", "content": SYSTEM_TEXT}, task.messages[1]]
        assert task.episode is not None and task.episode.environment == "workbench" and not task.order_sensitive
    crm_lookup = next(task for task in episodes if task.messages[1]["content"].startswith("If we haven't spoke to"))
    assert [call.name for call in crm_lookup.expected_calls] == ["calendar_create_event"]
    assert "customer_relationship_manager_search_customers" in {tool["function"]["name"] for tool in crm_lookup.tools}


def test_every_ground_truth_passes_the_sandbox_when_played_as_an_episode(episodes):
    environment = WorkbenchEnvironment(load_data(EXTERNAL / "workbench"))
    for task in episodes:
        played = play_reference(task, environment)
        assert played.passed and played.refused == 0 and not played.failure, task.id


def test_the_end_state_does_not_depend_on_the_order_of_the_calls(episodes):
    environment = WorkbenchEnvironment(load_data(EXTERNAL / "workbench"))
    several = [task for task in episodes if len(task.expected_calls) > 1]
    assert len(several) == 152
    for task in several:
        judgement = environment.run_calls(task, list(reversed(reference_calls(task))))
        assert judgement.passed, (task.id, judgement.reason)


def test_the_multi_call_split_holds_every_template_in_one_split_only(episodes):
    train, heldout, templates = workbench_multi_split(EXTERNAL)
    by_id = workbench_templates(EXTERNAL)
    assert len(train) + len(heldout) == 690 and (len(templates["train"]), len(templates["heldout"])) == (46, 23)
    assert not {by_id[task.id] for task in train} & {by_id[task.id] for task in heldout}
    assert [task.id for task in heldout] == [task.id for task in workbench_multi_split(EXTERNAL)[1]]
